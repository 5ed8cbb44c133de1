"""Score sentence pairs with a model: one cost per line, in input order.

    python score.py -m MODEL -s SOURCE -t TARGET -o OUTPUT [-b BATCH]
        [-d DICT_SRC DICT_TRG] [--inference training|authors]

The cost of a pair is -log p(target | source) summed over the target tokens
and the final eos, with dropout off (docs/equations.md#cost), exactly what
the training graph's f_log_probs returns.  With ``--inference authors`` (an
attentive residual model) the pairs are decoded instead, forced, through the
authors' sampler (docs/equations.md#the-authors-inference), whose costs are those of their
translate.py.  The dictionaries default to those named in the model's
options.  OUTPUT ('-' = stdout) appears only once every pair is scored.
"""
from theano_platform import theano_env  # noqa: F401  (must come before theano)

import sys

import numpy

from machinery import cli
import layers

from machinery.model_io import file_as_named_or_beside
from machinery.output_files import check_outputs, model_files, write_text
from machinery.vocab import load_dictionary
from machinery.progress import ProgressLine
from machinery.text_io import InputError, read_lines
from machinery.vocab import words, words_to_ids


def pair_ids(src_lines, trg_lines, src_path, trg_path, word_dicts, options):
    """Id lists of every pair (no eos: prepare_data adds the padding row)."""
    if len(src_lines) != len(trg_lines):
        raise InputError('%s has %d lines but %s has %d: the files must be aligned'
                         % (src_path, len(src_lines), trg_path, len(trg_lines)))
    return [(words_to_ids(words(s), word_dicts[0], options['n_words_src']),
             words_to_ids(words(t), word_dicts[1], options['n_words']))
            for s, t in zip(src_lines, trg_lines)]


def score_pairs(f_log_probs, pairs, batch_size, progress=True):
    """Costs in input order; batches of similar length for speed."""
    from data_iterator import prepare_data
    order = sorted(range(len(pairs)), key=lambda i: (len(pairs[i][1]), len(pairs[i][0])))
    costs = numpy.zeros(len(pairs), dtype='float64')
    meter = ProgressLine(len(pairs), 'scored', 'pairs') if progress else None
    for b in range(0, len(order), batch_size):
        idx = order[b:b + batch_size]
        x, x_mask, y, y_mask = prepare_data([pairs[i][0] for i in idx],
                                            [pairs[i][1] for i in idx])
        costs[idx] = f_log_probs(x, x_mask, y, y_mask)
        if meter:
            meter.update(min(b + batch_size, len(order)))
    if meter:
        meter.finish()
    return costs


def load_scoring_model(path, dictionaries, inference):
    """(options, parameters, word dictionaries) of one model, which scores
    with ``inference``; the dictionaries are ``dictionaries`` or those its
    options name (as named, or beside the model)."""
    from translation.decoding import load_models
    _, options, params = load_models([path], inference)[0]
    if not dictionaries and not options.get('dictionaries'):
        raise InputError('%s.pkl names no dictionaries: give -d DICT_SRC DICT_TRG' % path)
    dict_paths = dictionaries or [file_as_named_or_beside(d, path) or d
                                  for d in options['dictionaries']]
    return options, params, [load_dictionary(d) for d in dict_paths]


def build_scorer(options, params):
    """(x, x_mask, y, y_mask) -> per-sentence costs: the training graph's
    f_log_probs, or with the authors' inference forced decoding through
    their sampler."""
    import theano
    from nmt_model import build_model
    from translation.decoding import samplers_of
    if options['inference'] == layers.AUTHORS_INFERENCE:
        return sampler_scorer(*samplers_of([(None, options, params)])[0])
    _, use_noise, x, x_mask, y, y_mask, _, cost = build_model(layers.init_tparams(params),
                                                              options)
    use_noise.set_value(0.)
    return theano.function([x, x_mask, y, y_mask], cost, name='f_log_probs')


def sampler_scorer(f_init, f_next):
    """A scorer like f_log_probs that decodes the targets through a (batched)
    sampler, forced: the sum of -log p of every target token."""
    from beam_search import batch_force_decode

    def costs(x, x_mask, y, y_mask):
        return batch_force_decode(f_init, f_next, x, x_mask, y, y_mask).sum(0)
    return costs


def parse_args(argv):
    p = cli.ArgumentParser(
        description='The cost of each sentence pair under a model: -log p(target | '
                    'source), summed over the target tokens and eos, dropout off; one '
                    'number a line, in input order (docs/translation.md).')
    files = p.add_argument_group('files')
    files.add_argument('-m', '--model', required=True, metavar='MODEL',
                       help='the model file (model.npz of nmt.py)')
    files.add_argument('-s', '--source', required=True, metavar='SOURCE',
                       help='source sentences, one a line, tokenised as the training data')
    files.add_argument('-t', '--target', required=True, metavar='TARGET',
                       help='their target sentences, line by line aligned with SOURCE')
    files.add_argument('-o', '--output', required=True, metavar='OUTPUT',
                       help='where the costs go, one a line (- writes standard output); '
                            'written only once every pair is scored')
    files.add_argument('-d', '--dictionaries', nargs=2, metavar=('DICT_SRC', 'DICT_TRG'),
                       help='the source and target dictionaries (default: those named in '
                            'the model\'s options, as named or beside the model)')
    how = p.add_argument_group('scoring')
    how.add_argument('-b', '--batch', type=cli.positive_int, default=80,
                     help='pairs scored at once, sorted by length (default 80)')
    how.add_argument('--inference', choices=layers.INFERENCES,
                     default=layers.TRAINING_INFERENCE,
                     help='training: the training graph\'s cost (default); authors: '
                          'forced decoding through the authors\' sampler (attentive '
                          'residual models; docs/equations.md#the-authors-inference)')
    return p.parse_args(argv)


def score(args):
    """Write the cost of every pair of args.source, args.target."""
    check_outputs([args.output], model_files([args.model]) + [args.source, args.target]
                  + list(args.dictionaries or []))
    options, params, word_dicts = load_scoring_model(args.model, args.dictionaries,
                                                     args.inference)
    pairs = pair_ids(read_lines(args.source), read_lines(args.target),
                     args.source, args.target, word_dicts, options)
    costs = score_pairs(build_scorer(options, params), pairs, args.batch)
    if not numpy.all(numpy.isfinite(costs)):
        bad = int(numpy.flatnonzero(~numpy.isfinite(costs))[0])
        raise cli.CommandError('the cost of pair %d (line %d) is not finite'
                               % (bad, bad + 1))
    write_text(args.output, ''.join('%s\n' % repr(float(c)) for c in costs))


def main(argv=None):
    args = parse_args(cli.arguments(argv))
    return cli.run(lambda: score(args))


if __name__ == '__main__':
    sys.exit(main())
