"""BLEU of several systems by source-sentence length: where the residual
decoders' gains lie (the papers compare their decoders on long sentences).

    python evaluation/length_buckets.py --ref REF --source SRC [--tokenized]
        [--lowercase] [--lang LANG] [--edges 10,15,20,25] [--labels A,B,...]
        [--png P.png] [--json J] SYSTEM [SYSTEM ...]

The test sentences are grouped by the number of words of their source line
(ASCII whitespace, as everywhere in the project): with edges 10,15,20,25 the
groups are 1-10, 11-15, 16-20, 21-25 and 26 or more words.  For each group:
its number of sentences and each system's corpus BLEU on it (as
evaluation/evaluate.py computes it: ``--tokenized`` for multi-bleu.perl's
arithmetic on tokenised text, sacreBLEU otherwise), and each system's
difference from the first (the baseline).  A table on stdout; ``--png`` draws
BLEU by group, ``--json`` writes the figures.  Short groups give noisy BLEU:
read them with their sentence counts.
"""
import os
import sys

if __name__ == '__main__':  # run as a file: import from the project root, not this folder
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from machinery import cli
from machinery.bleu import corpus_bleu
from machinery.output_files import check_outputs, write_json
from machinery.text_io import InputError, read_lines
from machinery.vocab import words

DEFAULT_EDGES = (10, 15, 20, 25)


def bucket_names(edges):
    """'1-10', '11-15', ..., '26+' for edges (10, 15, 20, 25)."""
    lows = [1] + [e + 1 for e in edges]
    return ['%d-%d' % (lo, hi) for lo, hi in zip(lows, edges)] + ['%d+' % lows[-1]]


def bucket_of(length, edges):
    return sum(1 for e in edges if length > e)


def bleu_by_length(systems, refs, source_lengths, edges=DEFAULT_EDGES, **bleu_options):
    """[{'bucket', 'sentences', 'bleu': [one per system]}] over the buckets
    that hold a sentence; ``systems``: lists of hypotheses aligned with refs."""
    rows = []
    for b, name in enumerate(bucket_names(edges)):
        index = [i for i, n in enumerate(source_lengths) if bucket_of(n, edges) == b]
        if not index:
            continue
        sub_refs = [refs[i] for i in index]
        scores = [corpus_bleu([hyps[i] for i in index], sub_refs, **bleu_options)['bleu']
                  for hyps in systems]
        rows.append({'bucket': name, 'sentences': len(index),
                     'bleu': [round(s, 2) for s in scores]})
    return rows


def format_rows(rows, labels):
    """A markdown table: bucket, sentences, each system's BLEU, and the
    difference of each system from the first."""
    head = ['source words', 'sentences'] + list(labels)
    head += ['%s - %s' % (label, labels[0]) for label in labels[1:]]
    lines = ['| ' + ' | '.join(head) + ' |', '|' + '---|' * len(head)]
    for row in rows:
        b = row['bleu']
        cells = [row['bucket'], str(row['sentences'])] + ['%.2f' % s for s in b]
        cells += ['%+.2f' % (s - b[0]) for s in b[1:]]
        lines.append('| ' + ' | '.join(cells) + ' |')
    return lines


def plot_rows(rows, labels, png, title='BLEU by source length'):
    from machinery import plots
    fig, ax = plots.plt.subplots(figsize=(6.4, 4))
    x = range(len(rows))
    for k, label in enumerate(labels):
        ax.plot(x, [r['bleu'][k] for r in rows], marker='o', label=label)
    ax.set_xticks(list(x))
    ax.set_xticklabels(['%s\n(%d)' % (r['bucket'], r['sentences']) for r in rows])
    ax.set_ylabel('BLEU')
    plots.finish_panels(fig, [ax], [title], png, xlabel='source words (sentences)')


def parse_args(argv):
    p = cli.ArgumentParser(description='BLEU of several systems by source length.')
    p.add_argument('systems', nargs='+', metavar='SYSTEM',
                   help='translations, one line per source line; the first is the baseline')
    p.add_argument('--ref', required=True, help='the reference translations')
    p.add_argument('--source', required=True, help='the source sentences (lengths)')
    p.add_argument('--tokenized', action='store_true',
                   help="multi-bleu.perl's BLEU on tokenised text (default: sacreBLEU)")
    p.add_argument('--lowercase', action='store_true', help='case-insensitive BLEU')
    p.add_argument('--lang', default=None, help="target language (sacreBLEU's zh tokeniser for zh)")
    p.add_argument('--edges', default=','.join(map(str, DEFAULT_EDGES)),
                   help='upper bounds of the length groups (default: %(default)s)')
    p.add_argument('--labels', default=None, help='comma-separated names of the systems')
    p.add_argument('--png', default=None, help='also draw the figure (PNG)')
    p.add_argument('--json', default=None, help='also write the table as JSON')
    args = p.parse_args(argv)
    try:
        args.edges = tuple(int(e) for e in args.edges.split(','))
    except ValueError:
        p.error('--edges: comma-separated whole numbers, not %r' % args.edges)
    if list(args.edges) != sorted(set(args.edges)) or args.edges[0] < 1:
        p.error('--edges must increase and start at 1 or more: %r' % (args.edges,))
    args.labels = (args.labels.split(',') if args.labels else
                   [os.path.basename(s) for s in args.systems])
    if len(args.labels) != len(args.systems):
        p.error('--labels names %d systems, %d given' % (len(args.labels), len(args.systems)))
    return args


def run(args):
    check_outputs([args.png, args.json], [args.ref, args.source] + args.systems)
    refs = read_lines(args.ref)
    source = read_lines(args.source)
    if len(source) != len(refs):
        raise InputError('%s: %d lines, the reference %s has %d'
                         % (args.source, len(source), args.ref, len(refs)))
    systems = [read_lines(s, allow_empty=True) for s in args.systems]
    rows = bleu_by_length(systems, refs, [len(words(line)) for line in source], args.edges,
                          tokenized=args.tokenized, lang=args.lang, lowercase=args.lowercase)
    print('\n'.join(format_rows(rows, args.labels)))
    if args.png:
        plot_rows(rows, args.labels, args.png)
    if args.json:
        write_json(args.json, {'labels': args.labels, 'edges': list(args.edges), 'rows': rows})


def main(argv=None):
    args = parse_args(cli.arguments(argv))
    return cli.run(lambda: run(args))


if __name__ == '__main__':
    sys.exit(main())
