"""The figures of ``analysis/analyze.py`` (matplotlib, Agg backend), written as PNG.

* :func:`positions_figure`: NAACL Fig. 2 / AAAI Fig. 3: one line per model;
* :func:`matrices_figure`: NAACL Fig. 3 / AAAI Fig. 2: one column per model,
  source attention above, attention over previous words below, output
  tokens on the horizontal axis of both;
* :func:`trees_figure`: NAACL Fig. 4: one tree per row.

Words are drawn with a font that has CJK glyphs when the text needs one and
one is installed (``setup.sh`` installs fonts-wqy-microhei as root with apt);
otherwise a warning says how to get one and the glyphs show as boxes.
"""
import re
import sys
import warnings

import matplotlib
matplotlib.use('Agg')
import matplotlib.pyplot as plt  # noqa: E402
import numpy  # noqa: E402
from matplotlib import font_manager  # noqa: E402

from machinery.output_files import atomic_write  # noqa: E402

CJK_TEXT = re.compile('[\u1100-\u11ff\u2e80-\u9fff\uac00-\ud7af\uf900-\ufaff\uff00-\uffef]')
CJK_FONTS = ('WenQuanYi Micro Hei', 'WenQuanYi Zen Hei', 'Noto Sans CJK SC',
             'Noto Sans CJK JP', 'Droid Sans Fallback', 'AR PL UMing CN')
CJK_FILES = re.compile(r'wqy|cjk|droidsansfallback|uming|ukai', re.I)
CELL = 0.2          # inches per matrix cell
DPI = 110


def find_cjk_font():
    """Family name of an installed font with CJK glyphs, or None."""
    def known():
        names = {f.name for f in font_manager.fontManager.ttflist}
        return next((n for n in CJK_FONTS if n in names), None)
    name = known()
    if name is None:   # installed after matplotlib cached its font list
        for path in font_manager.findSystemFonts():
            if CJK_FILES.search(path):
                try:
                    font_manager.fontManager.addfont(path)
                except (OSError, RuntimeError, ValueError):
                    continue
        name = known()
    return name


def prepare_fonts(texts):
    """Use a CJK fallback font when some text needs one (warn if none is found)."""
    if not any(CJK_TEXT.search(t) for t in texts):
        return
    name = find_cjk_font()
    if name is None:
        print('warning: no font with Chinese/Japanese/Korean glyphs is installed, so '
              'those words show as boxes; install one (as root: apt-get install '
              'fonts-wqy-microhei, which setup.sh does)', file=sys.stderr)
        warnings.filterwarnings('ignore', message='Glyph .* missing')
        return
    matplotlib.rcParams['font.family'] = ['DejaVu Sans', name]


def save(fig, path, dpi=DPI):
    """The figure as a PNG file, written atomically (every figure of the
    project is saved here), then closed."""
    atomic_write(path, lambda f: fig.savefig(f, format='png', dpi=dpi), 'wb')
    plt.close(fig)


def finish_panels(fig, axes, titles, path, xlabel='update', legend_size=8,
                  legend_below=False):
    """Title, x label and grid on each panel, a legend on each (or, with
    ``legend_below``, the first panel's once, beneath them all: it hides no
    point), then the figure into ``path``."""
    for ax, title in zip(axes, titles):
        ax.set(xlabel=xlabel, title=title)
        ax.grid(alpha=0.3)
        if not legend_below:
            ax.legend(fontsize=legend_size)
    if legend_below:
        handles, labels = axes[0].get_legend_handles_labels()
        fig.legend(handles, labels, loc='lower center', ncol=len(labels), fontsize=legend_size)
        fig.tight_layout(rect=(0, 0.07, 1, 1))
    else:
        fig.tight_layout()
    save(fig, path)


def positions_figure(results, labels, path):
    """results: position summaries (attention_positions); x: -1 .. -N."""
    fig, axes = plt.subplots(1, 2, figsize=(12, 4))
    keys = (('max_attention_percent', '% of predictions with the max at this position',
             'position of the highest weight (NAACL Fig. 2, AAAI Fig. 3a)'),
            ('mean_weight', 'mean weight', 'mean weight (AAAI Fig. 3b)'))
    for ax, (key, ylabel, title) in zip(axes, keys):
        for result, label in zip(results, labels):
            values = numpy.array([numpy.nan if v is None else v for v in result[key]])
            ax.plot(-numpy.arange(1, len(values) + 1), values, marker='.', label=label)
        ax.set_xlabel('relative position of the previous word')
        ax.set_ylabel(ylabel)
        ax.set_title(title, fontsize=10)
        ax.grid(alpha=0.3)
    axes[0].legend()
    fig.tight_layout()
    save(fig, path)


def _font_size(n):
    return 9 if n <= 25 else 7 if n <= 45 else 5.5


def _matrix_panel(ax, m, xlabels, ylabels, title):
    ax.imshow(m, cmap='Greys', vmin=0, vmax=1, aspect='equal', interpolation='nearest')
    ax.set_xticks(range(len(xlabels)), xlabels, rotation=90,
                  fontsize=_font_size(len(xlabels)))
    ax.set_yticks(range(len(ylabels)), ylabels, fontsize=_font_size(len(ylabels)))
    ax.set_title(title, fontsize=9)
    ax.set_xlabel('output token (one column per prediction)', fontsize=8)
    ax.tick_params(length=2)


def items_matrix(record):
    """Items x predictions: column t holds row t's weights (NaN = not visible)."""
    n = len(record.previous)
    m = numpy.full((n, n), numpy.nan)
    for t, row in enumerate(record.previous):
        m[:len(row), t] = row
    return m


def matrices_figure(records, labels, path, panels=('source', 'previous')):
    """One column per model: the chosen panels of one sentence."""
    texts = [w for r in records for w in r.source + r.target]
    prepare_fonts(texts)
    widths = [max(len(r.target), 4) for r in records]
    heights = {'source': max(len(r.source) for r in records),
               'previous': max(len(r.target) for r in records)}
    rows = [p for p in panels if p == 'source' or any(r.previous for r in records)]
    fig, axes = plt.subplots(
        len(rows), len(records), squeeze=False,
        gridspec_kw={'width_ratios': widths,
                     'height_ratios': [heights[p] for p in rows]},
        figsize=(CELL * sum(widths) + 1.6 * len(records) + 0.5,
                 CELL * sum(heights[p] for p in rows) + 2.2 * len(rows) + 0.3))
    for col, (record, label) in enumerate(zip(records, labels)):
        for row, panel in enumerate(rows):
            ax = axes[row, col]
            if panel == 'source':
                _matrix_panel(ax, record.source_attention.T, record.target, record.source,
                              '%s:\nattention over the source' % label)
            elif record.previous:
                _matrix_panel(ax, items_matrix(record), record.target,
                              record.item_labels(len(record.target)),
                              '%s:\nattention over previous words' % label)
            else:
                ax.axis('off')
                ax.set_title('%s:\nno attention over previous words' % label, fontsize=9)
    fig.tight_layout()
    save(fig, path)


def _layout(tree, x_of_leaf):
    """Node positions: leaves at height 0, a node one above its highest child."""
    if isinstance(tree, int):
        return (x_of_leaf[tree], 0), []
    placed = [_layout(child, x_of_leaf) for child in tree]
    xs = [p[0][0] for p in placed]
    y = 1 + max(p[0][1] for p in placed)
    x = (min(xs) + max(xs)) / 2.0
    edges = [((x, y), p[0]) for p in placed] + [e for p in placed for e in p[1]]
    return (x, y), edges


def _draw_tree(ax, tree, words, title):
    (_, top), edges = _layout(tree, {i: i for i in range(len(words))})
    for (x0, y0), (x1, y1) in edges:
        ax.plot([x0, x1], [y0, y1], color='k', linewidth=0.8)
    for i, w in enumerate(words):
        ax.text(i, -0.15, w, rotation=90, ha='center', va='top',
                fontsize=_font_size(len(words)) + 1)
    ax.set_xlim(-0.7, max(len(words), 2) - 0.3)
    ax.set_ylim(-0.2, top + 0.3)
    ax.axis('off')
    ax.set_title(title, fontsize=9)


def trees_figure(items, path):
    """items: (tree, words, title) triples, one tree per row."""
    prepare_fonts([w for _, words, _ in items for w in words])
    n = max(len(words) for _, words, _ in items)
    fig, axes = plt.subplots(len(items), 1, squeeze=False,
                             figsize=(max(0.32 * n, 4) + 0.5, 3.2 * len(items)))
    for ax, (tree, words, title) in zip(axes[:, 0], items):
        if tree is None:
            ax.axis('off')
            ax.set_title(title + ' (no words)', fontsize=9)
        else:
            _draw_tree(ax, tree, words, title)
    fig.tight_layout()
    save(fig, path)
