"""What the decoder learned: the papers' analyses of the target-side attention.

    python analysis/analyze.py positions A.jsonl [B.jsonl ...] [--png P.png] [--json J] [--csv C]
    python analysis/analyze.py matrix    A.jsonl [B.jsonl ...] -i N --png M.png [--panels source,previous]
    python analysis/analyze.py trees     A.jsonl [B.jsonl ...] [-i N] [--png T.png] [--right-branching]
    python analysis/analyze.py parseval  A.jsonl A.parses [B.jsonl B.parses ...] [--bpe] [--json J] [--csv C]

Each input is what ``translate.py --alignments FILE`` writes, or a model
(``.npz``) that is first translated with translate.py (then ``--source`` and
``--dictionaries`` are needed; ``-k``, ``-n``, ``-p`` are passed on).  With
``--source`` an alignments file is checked against that source file.
``--labels`` names the models in figures and tables (default: file names).

* positions: NAACL Fig. 2 / AAAI Fig. 3 (see analysis/attention_positions.py);
* matrix: the source attention and the attention over previous words of
  sentence N (0-based) for every model side by side (NAACL Fig. 3, AAAI Fig. 2);
* trees: NAACL Algorithm 1 (see analysis/attention_trees.py): brackets of every
  sentence on stdout (or of sentence N with -i; with several inputs each line
  starts with the label and a tab), and with --png the tree of sentence N;
* parseval: unlabeled ParsEval of those trees and of right-branching trees
  against reference parses, one PTB bracketed parse per line (see analysis/parseval.py).

Progress goes to stderr; bad input stops with one line ``error: ...`` and no
output file is written.
"""
import argparse
import csv
import io
import os
import sys
import tempfile

if __name__ == '__main__':  # run as a file: import from the project root, not this folder
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from machinery import cli
from analysis import attention_positions
from analysis import attention_records
from analysis import attention_trees
from analysis import parseval
from machinery.output_files import check_outputs, write_json, write_text
from machinery.progress import ProgressLine
from machinery.text_io import InputError, open_binary, read_lines

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))   # the project's root


def count_lines(path):
    with open_binary(path) as f:
        return sum(1 for _ in f)


# ---------------------------------------------------------------- inputs

def translate_model(model, args, workdir):
    """Run translate.py --alignments on args.source; the alignments' path."""
    if not args.source or not args.dictionaries:
        raise InputError('%s: a model input needs --source and --dictionaries' % model)
    out = os.path.join(workdir, '%d' % len(os.listdir(workdir)))
    cmd = [sys.executable, os.path.join(ROOT, 'translate.py'), '-k', str(args.k),
           '-p', str(args.p), '--alignments', out + '.jsonl', model] + args.dictionaries + [
           args.source, out + '.txt'] + (['-n'] if args.n else [])
    print('translating %s with %s' % (args.source, model), file=sys.stderr)
    cli.run_command(cmd, 'translate.py on %s' % model)
    return out + '.jsonl'


def load_inputs(paths, args, need_previous=True):
    """[(label, records)] for every input, translated first where it is a model."""
    labels = args.labels.split(',') if args.labels else [label_of(p) for p in paths]
    if len(labels) != len(paths):
        raise InputError('--labels names %d models for %d inputs' % (len(labels), len(paths)))
    loaded = []
    with tempfile.TemporaryDirectory(prefix='analyze-') as workdir:
        for path in paths:
            is_model = path.endswith('.npz')
            alignments = translate_model(path, args, workdir) if is_model else path
            progress = ProgressLine(count_lines(alignments), 'reading %s:' % path,
                                    'sentences', interval=0.5)
            records = attention_records.read_records(alignments, need_previous, progress)
            if args.source and not is_model:
                attention_records.check_source(records, path, args.source)
            loaded.append(records)
    return list(zip(labels, loaded))


def label_of(path):
    name = os.path.basename(path)
    for ext in ('.gz', '.jsonl', '.json', '.npz'):
        if name.endswith(ext):
            name = name[:-len(ext)]
    return name


def pick(records, index, path):
    if not 0 <= index < len(records):
        raise InputError('%s: no sentence %d (it has %d, numbered from 0)'
                         % (path, index, len(records)))
    return records[index]


# ---------------------------------------------------------------- outputs

def csv_text(header, rows):
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator='\n')
    writer.writerow(header)
    writer.writerows(rows)
    return buf.getvalue()


def positions_csv(results):
    rows = []
    for label, r in results:
        for d in range(len(r['mean_weight'])):
            rows.append([label, -(d + 1), r['max_attention_percent'][d],
                         r['mean_weight'][d], r['max_attention_count'][d],
                         r['predictions_with_position'][d]])
    return csv_text(['model', 'position', 'max_attention_percent', 'mean_weight',
                     'max_attention_count', 'predictions_with_position'], rows)


# ---------------------------------------------------------------- commands

def cmd_positions(args):
    inputs = load_inputs(args.inputs, args)
    results = []
    for label, records in inputs:
        summary = attention_positions.position_summary(records, args.max_position)
        summary['file'] = label
        results.append((label, summary))
        print('%s: %d predictions; max at -1: %s%%, mean weight at -1: %s; max beyond '
              '-%d: %d' % (label, summary['predictions'],
                           _fmt(summary['max_attention_percent'][0]),
                           _fmt(summary['mean_weight'][0], 3), args.max_position,
                           summary['max_beyond_window']), file=sys.stderr)
    if args.json:
        write_json(args.json, {label: r for label, r in results}, indent=1)
    if args.csv:
        write_text(args.csv, positions_csv(results))
    if args.png:
        from machinery import plots
        plots.positions_figure([r for _, r in results],
                                        [label for label, _ in results], args.png)


def _fmt(value, digits=1):
    return 'n/a' if value is None else '%.*f' % (digits, value)


def cmd_matrix(args):
    panels = args.panels.split(',')
    unknown = set(panels) - {'source', 'previous'}
    if unknown or not panels:
        raise InputError('--panels takes source and/or previous, not %s'
                         % ','.join(sorted(unknown)))
    inputs = load_inputs(args.inputs, args, need_previous=False)
    records = [pick(recs, args.index, path) for (_, recs), path in zip(inputs, args.inputs)]
    if panels == ['previous'] and not any(r.previous for r in records):
        raise InputError('no input has attention over previous words (baseline decoder)')
    from machinery import plots
    plots.matrices_figure(records, [label for label, _ in inputs], args.png,
                                   panels)


def sentence_trees(record):
    """(attention tree, right-branching tree) over the record's words."""
    return (attention_trees.attention_tree(record.word_matrix()),
            attention_trees.right_branching_tree(len(record.words)))


def cmd_trees(args):
    inputs = load_inputs(args.inputs, args)
    lines, drawn = [], []
    for (label, records), path in zip(inputs, args.inputs):
        chosen = records if args.index is None else [pick(records, args.index, path)]
        progress = ProgressLine(len(chosen), 'trees of %s:' % label, 'sentences', interval=0.5)
        for done, record in enumerate(chosen, 1):
            tree, right = sentence_trees(record)
            text = attention_trees.brackets(right if args.right_branching else tree,
                                            record.words)
            lines.append(text if len(inputs) == 1 else '%s\t%s' % (label, text))
            progress(done)
        record = pick(records, args.index or 0, path)
        tree, right = sentence_trees(record)
        drawn.append((tree, record.words,
                      '%s, sentence %d (Algorithm 1)' % (label, record.number)))
        if args.right_branching:
            drawn.append((right, record.words, 'right-branching'))
    if args.png:
        from machinery import plots
        plots.trees_figure(drawn, args.png)
    write_text(args.out, ''.join(line + '\n' for line in lines))


def parseval_pair(records, parses_path, bpe):
    """ParsEval counts of the attention and right-branching trees of one model."""
    parses = read_lines(parses_path, allow_empty=True, what='parses')
    if len(parses) != len(records):
        raise InputError('%s has %d lines for %d translated sentences'
                         % (parses_path, len(parses), len(records)))
    counts = {'attention': parseval.Counts(), 'right-branching': parseval.Counts()}
    used = skipped = 0
    progress = ProgressLine(len(records), 'parseval %s:' % parses_path, 'sentences',
                            interval=0.5)
    for number, (record, line) in enumerate(zip(records, parses), 1):
        progress(number)
        if not line.strip():
            skipped += 1
            continue
        where = '%s: line %d' % (parses_path, number)
        leaves, ref_tree = parseval.read_ptb(line, where)
        words, word_of = parseval.word_index(record.words, bpe)
        parseval.check_tokens(words, leaves, where)
        reference = attention_trees.constituents(ref_tree)
        for name, tree in zip(('attention', 'right-branching'), sentence_trees(record)):
            counts[name].add(parseval.project(attention_trees.constituents(tree), word_of),
                             reference)
        used += 1
    return {name: dict(c.scores(), sentences=used, skipped=skipped)
            for name, c in counts.items()}


def cmd_parseval(args):
    if len(args.inputs) % 2:
        raise InputError('parseval takes pairs ALIGNMENTS PARSES; got %d files'
                         % len(args.inputs))
    pairs = list(zip(args.inputs[::2], args.inputs[1::2]))
    inputs = load_inputs([a for a, _ in pairs], args)
    table = []
    for (label, records), (_, parses_path) in zip(inputs, pairs):
        for name, scores in parseval_pair(records, parses_path, args.bpe).items():
            table.append(dict(model=label, trees=name, **scores))
    header = ['model', 'trees', 'precision', 'recall', 'f1', 'matched', 'constituents',
              'reference_constituents', 'sentences', 'skipped']
    print(format_table(header, table))
    if args.json:
        write_json(args.json, table, indent=1)
    if args.csv:
        write_text(args.csv, csv_text(header, [[row[h] for h in header] for row in table]))


def format_table(header, rows):
    cells = [header] + [[('%.3f' % r[h]) if isinstance(r[h], float) else str(r[h])
                         for h in header] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    return '\n'.join('  '.join(c.ljust(w) for c, w in zip(row, widths)).rstrip()
                     for row in cells)


# ---------------------------------------------------------------- command line

def input_options():
    p = argparse.ArgumentParser(add_help=False)
    g = p.add_argument_group('inputs')
    g.add_argument('--labels', help='comma-separated model names (default: file names)')
    g.add_argument('--source', help='source file: checks the alignments against it; '
                   'the file that a model input translates')
    g.add_argument('--dictionaries', nargs=2, metavar=('DICT_SRC', 'DICT_TRG'),
                   help='dictionaries of model inputs')
    g.add_argument('-k', type=int, default=5, help='beam size for model inputs (5)')
    g.add_argument('-n', action='store_true', help='length-normalised beam search')
    g.add_argument('-p', type=int, default=1, help='translate.py processes (1)')
    return p


# the inputs of positions, matrix and trees
INPUTS_HELP = ('what translate.py --alignments wrote (one per model), or a model file '
               '(.npz), translated first (needs --source and --dictionaries)')


def parse_args(argv):
    ap = cli.ArgumentParser(description=cli.summary(__doc__),
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split('\n', 2)[2])
    sub = ap.add_subparsers(dest='command', required=True, parser_class=cli.ArgumentParser)
    common = [input_options()]
    p = sub.add_parser('positions', parents=common, help='NAACL Fig. 2, AAAI Fig. 3')
    p.add_argument('inputs', nargs='+', metavar='ALIGNMENTS_OR_MODEL', help=INPUTS_HELP)
    p.add_argument('--png', help='the figure (PNG): attention by relative position')
    p.add_argument('--json', help="numbers per input ('-' = stdout)")
    p.add_argument('--csv', help="one row per input and position ('-' = stdout)")
    p.add_argument('--max-position', type=int, default=attention_positions.MAX_POSITION,
                   help='the farthest relative position listed, in words back (the arg '
                        'max is taken over every previous word; default %(default)s, the '
                        'papers\')')
    p = sub.add_parser('matrix', parents=common, help='NAACL Fig. 3, AAAI Fig. 2')
    p.add_argument('inputs', nargs='+', metavar='ALIGNMENTS_OR_MODEL', help=INPUTS_HELP)
    p.add_argument('-i', '--index', type=int, default=0, help='sentence (0-based)')
    p.add_argument('--png', required=True, help='the figure (PNG)')
    p.add_argument('--panels', default='source,previous',
                   help='which attentions to draw, comma-separated: source and/or previous '
                        '(the attention over previous words; default: both)')
    p = sub.add_parser('trees', parents=common, help='NAACL Algorithm 1, Fig. 4')
    p.add_argument('inputs', nargs='+', metavar='ALIGNMENTS_OR_MODEL', help=INPUTS_HELP)
    p.add_argument('-i', '--index', type=int, help='only this sentence (0-based)')
    p.add_argument('--png', help='draw the tree of sentence -i (default 0)')
    p.add_argument('--out', default='-', help="brackets ('-' = stdout)")
    p.add_argument('--right-branching', action='store_true',
                   help="print the right-branching baseline's trees instead (and draw both)")
    p = sub.add_parser('parseval', parents=common, help='NAACL section 8.2')
    p.add_argument('inputs', nargs='+', metavar='ALIGNMENTS PARSES',
                   help='pairs: what translate.py --alignments wrote (or a model file), '
                        'then the reference parses of its translations, one PTB '
                        'bracketed parse a line')
    p.add_argument('--bpe', action='store_true',
                   help="merge '@@ ' subword units into the parses' words")
    p.add_argument('--json', help="the scores per input ('-' = stdout)")
    p.add_argument('--csv', help="one row per input ('-' = stdout)")
    args = ap.parse_args(argv)
    if getattr(args, 'max_position', 1) < 1 or args.k < 1 or args.p < 1:
        ap.error('--max-position, -k and -p must be at least 1')
    return args


COMMANDS = {'positions': cmd_positions, 'matrix': cmd_matrix, 'trees': cmd_trees,
            'parseval': cmd_parseval}


def run(args):
    """The command's outputs checked (none is an input), then its work."""
    check_outputs([getattr(args, name, None) for name in ('png', 'json', 'csv', 'out')],
                  args.inputs + [args.source] + list(args.dictionaries or []))
    COMMANDS[args.command](args)


def main(argv=None):
    args = parse_args(cli.arguments(argv))
    return cli.run(lambda: run(args))


if __name__ == '__main__':
    sys.exit(main())
