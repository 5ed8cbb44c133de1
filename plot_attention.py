"""Plot the attention of one translated sentence.

    python plot_attention.py ALIGNMENTS.jsonl SOURCE TRANSLATION -i N -o OUT.png

ALIGNMENTS.jsonl is what ``translate.py --alignments`` writes; SOURCE and
TRANSLATION are the input and output files of that run; N is the 0-based
sentence number.  The left panel shows the attention over the source words
for every output word; the right panel (residual, memory and self-attentive
decoders) shows the attention over the previous words (or decoder states):
row t covers the window 0..t, column 0 being the empty start.
"""
import argparse
import json
import sys

import matplotlib
matplotlib.use('Agg')
import matplotlib.pyplot as plt  # noqa: E402
import numpy  # noqa: E402


def read_line(path, index):
    with open(path, encoding='utf-8') as f:
        for i, line in enumerate(f):
            if i == index:
                return line.split()
    raise SystemExit('error: %s has no line %d' % (path, index + 1))


def read_alignment(path, index):
    with open(path, encoding='utf-8') as f:
        for line in f:
            record = json.loads(line)
            if record['id'] == index:
                return record
    raise SystemExit('error: %s has no sentence %d' % (path, index))


def as_lower_triangle(rows):
    """Rows of growing length (the window 0..t) as a square matrix."""
    size = len(rows)
    m = numpy.full((size, size), numpy.nan)
    for t, row in enumerate(rows):
        m[t, :len(row)] = row
    return m


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('alignments')
    p.add_argument('source')
    p.add_argument('translation')
    p.add_argument('-i', '--index', type=int, default=0)
    p.add_argument('-o', '--output', required=True)
    args = p.parse_args(argv)
    record = read_alignment(args.alignments, args.index)
    src = read_line(args.source, args.index) + ['<eos>']
    out = read_line(args.translation, args.index) + ['<eos>']
    source_att = numpy.array(record['source_attention'])[:len(out), :len(src)]
    prev = record['previous_attention']
    panels = 2 if prev else 1
    fig, axes = plt.subplots(1, panels, figsize=(5 * panels + 1, 0.35 * len(out) + 2),
                             squeeze=False)
    ax = axes[0, 0]
    ax.imshow(source_att, cmap='Greys', vmin=0, vmax=1, aspect='auto')
    ax.set_xticks(range(len(src)), src, rotation=90)
    ax.set_yticks(range(len(out)), out)
    ax.set_title('attention over the source')
    if prev:
        ax = axes[0, 1]
        ax.imshow(as_lower_triangle(prev)[:len(out), :len(out)], cmap='Greys',
                  vmin=0, vmax=1, aspect='auto')
        ax.set_xticks(range(len(out)), ['<s>'] + out[:-1], rotation=90)
        ax.set_yticks(range(len(out)), out)
        ax.set_title('attention over previous words / states')
    fig.tight_layout()
    fig.savefig(args.output, dpi=120)
    print('wrote %s' % args.output, file=sys.stderr)
    return 0


if __name__ == '__main__':
    sys.exit(main())
