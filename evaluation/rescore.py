"""Rescore an n-best list with one or more models.

    python evaluation/rescore.py -m MODEL [MODEL ...] -s SOURCE -i NBEST -o OUTPUT
        [-b BATCH] [-d DICT_SRC DICT_TRG] [-n] [--inference training|authors]

NBEST is a Moses-format n-best list (``i ||| hypothesis ||| score``, as
``translate.py --n-best`` writes; ``i`` is the 0-based line of SOURCE).
Each model gives every entry its cost, -log p(hypothesis | source) summed
over the hypothesis' tokens and eos, exactly as score.py computes it (the
training graph, or with ``--inference authors`` forced decoding through the
authors' sampler); with ``-n`` the cost divided by the number of tokens plus
one.  OUTPUT ('-' = stdout) is NBEST with these costs appended to each
line's last field, one per model in the order given, separated by spaces.
An n-best file that does not parse is an error (one line naming the file and
line); OUTPUT appears only once every entry is scored.
"""
import os
import sys

if __name__ == '__main__':  # run as a file: import from the project root, not this folder
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from theano_platform import theano_env  # noqa: F401  (must come before theano)

from machinery import cli
import layers
from machinery.output_files import check_outputs, model_files, write_text
from translation.nbest import format_score, read_nbest
from score import build_scorer, load_scoring_model, pair_ids, score_pairs
from machinery.text_io import read_lines


def model_costs(path, args, source_lines, entries):
    """One model's cost of every n-best entry."""
    options, params, word_dicts = load_scoring_model(path, args.dictionaries,
                                                     args.inference)
    pairs = pair_ids([source_lines[index] for index, _, _, _ in entries],
                     [hyp for _, hyp, _, _ in entries], args.source, args.input,
                     word_dicts, options)
    costs = score_pairs(build_scorer(options, params), pairs, args.batch)
    if args.n:
        costs = costs / [len(trg) + 1 for _, trg in pairs]
    return costs


def parse_args(argv):
    p = cli.ArgumentParser(description='Rescore an n-best list with NMT models.')
    p.add_argument('-m', '--models', nargs='+', required=True, metavar='MODEL',
                   help='one cost per model, in this order')
    p.add_argument('-s', '--source', required=True,
                   help='the source sentences the n-best list translates')
    p.add_argument('-i', '--input', required=True, metavar='NBEST',
                   help='n-best list: "i ||| hypothesis ||| scores" lines')
    p.add_argument('-o', '--output', required=True, help="rescored n-best list ('-': stdout)")
    p.add_argument('-b', '--batch', type=cli.positive_int, default=80,
                   help='pairs scored at once (default 80)')
    p.add_argument('-d', '--dictionaries', nargs=2, metavar=('DICT_SRC', 'DICT_TRG'),
                   help='default: those named in each model\'s options')
    p.add_argument('-n', action='store_true',
                   help='divide each cost by the hypothesis length (tokens + eos)')
    p.add_argument('--inference', choices=layers.INFERENCES,
                   default=layers.TRAINING_INFERENCE,
                   help='as score.py: the training graph\'s cost (default), or forced '
                        'decoding through the authors\' sampler '
                        '(docs/equations.md#the-authors-inference)')
    return p.parse_args(argv)


def rescore(args):
    """Write args.input with each model's cost appended to every entry."""
    check_outputs([args.output], model_files(args.models) + [args.source, args.input]
                  + list(args.dictionaries or []))
    source_lines = read_lines(args.source, what='source sentences')
    entries = read_nbest(args.input, len(source_lines))
    columns = [model_costs(path, args, source_lines, entries) for path in args.models]
    text = ''.join('%s %s\n' % (line.rstrip(), ' '.join(format_score(c[i]) for c in columns))
                   for i, (_, _, _, line) in enumerate(entries))
    write_text(args.output, text)


def main(argv=None):
    args = parse_args(cli.arguments(argv))
    return cli.run(lambda: rescore(args))


if __name__ == '__main__':
    sys.exit(main())
