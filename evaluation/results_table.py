"""Collect finished runs into a table shaped like the papers' Table 1.

    python evaluation/results_table.py [--detok] [--params-pair PAIR] [--plot FILE.png]
        [--evaluate-json PAIR=FILE ...] [RUN_DIR ...]

Layout of a run (what train_es-en.sh / train_en-de.sh / train_en-zh.sh write)::

    runs/PAIR/DECODER/model.npz         parameters
    runs/PAIR/DECODER/model.npz.json    options (or model.npz.pkl)
    runs/PAIR/DECODER/bleu.json         {"pair": "es-en", "decoder": "attentive",
                                         "bleu": 25.68, "detok_bleu": 24.9, ...}

``bleu`` is tokenised multi-bleu BLEU of the test set, ``detok_bleu`` (optional)
sacreBLEU on detokenised text.  When bleu.json lacks "pair" or "decoder" they
are taken from the directory names (``.../PAIR/DECODER``).  A RUN_DIR without
bleu.json is searched for ``*/bleu.json`` below it (so ``runs`` alone works).

``--evaluate-json PAIR=FILE`` adds the BLEU scores of an ``evaluation/evaluate.py --json``
output; each system's decoder is recognised from its file name (baseline,
mean/average, attentive, memory, selfattn), and these rows have no
parameter count.

Rows are decoders, in the papers' order; columns are the parameter count
(``nmt.count_params`` of the saved options, or, when nmt cannot be imported,
the number of values in the model's arrays; truncated to 0.1M like the papers)
of the runs of one pair (``--params-pair``, default the first pair with a
count), and BLEU per pair.  Markdown goes to stdout; ``--plot`` also saves a
bar chart of BLEU per decoder per pair (PNG, matplotlib Agg).
"""
import glob
import math
import os
import re
import sys
from collections import OrderedDict

if __name__ == '__main__':  # run as a file: import from the project root, not this folder
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from machinery import cli
from machinery.model_io import count_archive_params
from machinery.pickle_and_json import load_json
from machinery.text_io import InputError

PAIR_ORDER = ['en-zh', 'es-en', 'en-de']
# the authors' file names call the mean residual "average"
AUTHORS_FILE_WORDS = {'average': 'mean'}


def decoder_labels():
    """Variant name -> table label, in the decoder registry's order."""
    import layers
    return OrderedDict((name, v.label) for name, v in layers.VARIANTS.items())


def count_params(run_dir):
    """Parameter count of a run: nmt.count_params(options), else the npz."""
    model = os.path.join(run_dir, 'model.npz')
    if os.path.exists(model + '.json') or os.path.exists(model + '.pkl'):
        try:
            from machinery import model_io
            import nmt
            return int(nmt.count_params(model_io.load_options(model)))
        except Exception:   # noqa: BLE001 - nmt/theano missing or old options
            pass
    if os.path.exists(model):
        return count_archive_params(model)
    return None


def find_runs(paths):
    runs = []
    for path in paths:
        if os.path.isfile(os.path.join(path, 'bleu.json')):
            runs.append(path)
            continue
        found = sorted(os.path.dirname(p) for p in
                       glob.glob(os.path.join(path, '**', 'bleu.json'), recursive=True))
        if not found:
            raise InputError('%s: no bleu.json in it or below it' % path)
        runs.extend(found)
    return runs


def read_run(run_dir, detok=False):
    info = load_json(os.path.join(run_dir, 'bleu.json'))
    parts = os.path.normpath(os.path.abspath(run_dir)).split(os.sep)
    decoder = info.get('decoder') or parts[-1]
    pair = info.get('pair') or parts[-2]
    key = 'detok_bleu' if detok else 'bleu'
    if key not in info:
        raise InputError('%s: no "%s" entry' % (os.path.join(run_dir, 'bleu.json'), key))
    return {'pair': pair, 'decoder': decoder, 'bleu': float(info[key]),
            'params': count_params(run_dir), 'source': run_dir}


def decoder_from_name(path):
    """The decoder variant a file name names ('...attentive.en' -> 'attentive')."""
    name = os.path.basename(path).lower()
    words = OrderedDict((v, v) for v in decoder_labels())
    words.update(AUTHORS_FILE_WORDS)
    # longest names first: 'attentive-dot' before 'attentive'
    for word in sorted(words, key=len, reverse=True):
        if re.search(r'(^|[^a-z])%s([^a-z]|$)' % re.escape(word), name):
            return words[word]
    return None


def read_evaluate_json(spec):
    if '=' not in spec:
        raise InputError('--evaluate-json wants PAIR=FILE, not %r' % spec)
    pair, path = spec.split('=', 1)
    data = load_json(path)
    rows = []
    for res in data.get('results', []):
        decoder = decoder_from_name(res['system'])
        if decoder is None:
            raise InputError('%s: cannot tell the decoder of %s from its name'
                               % (path, res['system']))
        rows.append({'pair': pair, 'decoder': decoder, 'bleu': float(res['bleu']),
                     'params': None, 'source': res['system']})
    return rows


def truncate_millions(n):
    """108,725,885 -> '108.7M' (truncated, as the papers print it); counts
    under a million (tiny runs) in full: 24568 -> '24,568'."""
    if n < 10 ** 6:
        return '{:,}'.format(n)
    return '%.1fM' % (math.floor(n / 1e5) / 10.0)


def build_table(rows, params_pair=None):
    pairs = sorted({r['pair'] for r in rows},
                   key=lambda p: (PAIR_ORDER.index(p) if p in PAIR_ORDER else 99, p))
    known = list(decoder_labels())
    decoders = [d for d in known if any(r['decoder'] == d for r in rows)]
    decoders += sorted({r['decoder'] for r in rows} - set(known))
    by_key = {}
    for r in rows:
        key = (r['decoder'], r['pair'])
        if key in by_key:
            raise InputError('two results for %s on %s: %s and %s'
                               % (r['decoder'], r['pair'], by_key[key]['source'],
                                  r['source']))
        by_key[key] = r
    if params_pair is None:
        params_pair = next((p for p in pairs if any(
            by_key.get((d, p), {}).get('params') for d in decoders)), None)
    labels = decoder_labels()
    header = ['Model', 'Params%s' % (' (%s)' % params_pair if params_pair else '')] + pairs
    table = []
    for d in decoders:
        n = by_key.get((d, params_pair), {}).get('params') if params_pair else None
        row = [labels.get(d, d), truncate_millions(n) if n else '-']
        for p in pairs:
            r = by_key.get((d, p))
            row.append('%.2f' % r['bleu'] if r else '-')
        table.append(row)
    return header, table, pairs, decoders, by_key


def markdown(header, table):
    lines = ['| ' + ' | '.join(header) + ' |',
             '|' + '|'.join(['---'] + ['---:'] * (len(header) - 1)) + '|']
    lines += ['| ' + ' | '.join(row) + ' |' for row in table]
    return '\n'.join(lines)


def plot(path, pairs, decoders, by_key, title):
    from machinery import plots
    labels = decoder_labels()
    width = 0.8 / max(len(decoders), 1)
    fig, ax = plots.plt.subplots(figsize=(4.2 + 2.0 * len(pairs), 4.0))
    for i, d in enumerate(decoders):
        xs, ys = [], []
        for j, p in enumerate(pairs):
            r = by_key.get((d, p))
            if r:
                xs.append(j - 0.4 + width * (i + 0.5))
                ys.append(r['bleu'])
        bars = ax.bar(xs, ys, width, label=labels.get(d, d))
        for bar, y in zip(bars, ys):
            ax.annotate('%.2f' % y, (bar.get_x() + bar.get_width() / 2, y),
                        ha='center', va='bottom', fontsize=7)
    ax.set_xticks(range(len(pairs)))
    ax.set_xticklabels(pairs)
    ax.set_ylabel('BLEU')
    ax.set_title(title)
    all_bleu = [r['bleu'] for r in by_key.values()]
    if all_bleu:
        ax.set_ylim(max(0.0, min(all_bleu) - 3.0), max(all_bleu) + 1.5)
    ax.legend(fontsize=7, loc='upper left', bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    plots.save(fig, path, dpi=120)


def main(argv=None):
    p = cli.ArgumentParser(description='Table 1-style results from finished runs.')
    p.add_argument('runs', nargs='*', metavar='RUN_DIR',
                   help='the folders of train_*.sh runs (runs/PAIR/DECODER, each with its '
                        'bleu.json), or a folder above them: runs alone finds them all')
    p.add_argument('--evaluate-json', action='append', default=[], metavar='PAIR=FILE',
                   help='BLEU scores from evaluation/evaluate.py --json')
    p.add_argument('--detok', action='store_true',
                   help='use detokenised BLEU (detok_bleu) instead of tokenised')
    p.add_argument('--params-pair', help='pair whose parameter counts are shown')
    p.add_argument('--plot', metavar='FILE', help='save a BLEU bar chart (PNG)')
    args = p.parse_args(cli.arguments(argv))
    if not args.runs and not args.evaluate_json:
        p.error('give RUN_DIRs and/or --evaluate-json')
    return cli.run(lambda: print_table(args))


def print_table(args):
    rows = [read_run(r, args.detok) for r in find_runs(args.runs)]
    for spec in args.evaluate_json:
        rows += read_evaluate_json(spec)
    header, table, pairs, decoders, by_key = build_table(rows, args.params_pair)
    print(markdown(header, table))
    if args.plot:
        plot(args.plot, pairs, decoders, by_key,
             'BLEU (%s)' % ('sacreBLEU, detokenised' if args.detok
                            else 'tokenised, multi-bleu'))
        print('plot: %s' % args.plot, file=sys.stderr)


if __name__ == '__main__':
    sys.exit(main())
