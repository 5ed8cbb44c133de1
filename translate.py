"""Translate a file with beam search (docs/equations.md#decoding-beam-search).

    python translate.py [-k K] [-n] [-p P] [--batch-size B] [options]
        MODEL DICT_SRC DICT_TRG SOURCE SAVETO

SOURCE and SAVETO may be '-' (stdin / stdout).  Sentences are sorted by
length and decoded in batches (``--batch-size``), each sentence with its own
beam: the translations are those of the one-sentence search of that section,
written in input order.  P worker processes (``-p``, default: the machine's
cores) each build their own samplers and take batches in turn.  ``--ensemble MODEL2`` decodes several
models together (their log-probabilities averaged at each step).  The
attentive residual decoder decodes with ``--inference``: the authors'
sampler (docs/equations.md#the-authors-inference; the default for files
whose options say ``decoder='gru_cond_att'``) or the training graph's
summary (docs/equations.md#attentive-residual; the default for every other
file).  ``--n-best``, ``--print-scores`` and
``--print-word-probabilities`` change what SAVETO holds; ``--alignments
FILE`` also writes, one JSON object a line, the attention over the source and
(for the residual, memory and self-attentive decoders) over previous words or
states.  Progress goes to stderr.  No output file appears unless every line
is translated.  The formats are in docs/translation.md#formats.

Under MPI (``mpirun -np N python translate.py ...``, docs/distributed.md)
the N workers take the length-sorted batches in turn (worker r the batches
r, r + N, ...; each worker one process, ``-p`` is not used), rank 0 reads
SOURCE and gathers the translations: the output is byte for byte that of
one process, as every batch is decoded alike wherever it is decoded.
"""
from theano_platform import theano_env  # noqa: F401  (must come before theano)

import contextlib
import json
import sys

import numpy

from machinery import cli
from machinery import distributed
import layers
from machinery import output_files
from translation import nbest
from translation import unk_replace
from machinery import vocab
from beam_search import ranked
from machinery.progress import ProgressLine
from machinery.text_io import read_lines
from translation.decoding import Search, load_models, target_id_to_word, translate_all

DEFAULT_BATCH_SIZE = 16


def uses_authors_inference(models):
    """Whether the model whose attention over previous words the search
    keeps (the first one with a target-side attention) decodes with the
    authors' inference."""
    for _, options, _ in models:
        if layers.variant_of(options)[1] is not None:
            return options['inference'] == layers.AUTHORS_INFERENCE
    return False


# --------------------------------------------------------------------------
# output

def target_words(hyp, idict_trg, source_words, unk_dictionary):
    """The words of a hypothesis (up to eos), UNKs replaced when
    unk_dictionary is not None ({}: copy the attended source word)."""
    words = vocab.ids_to_words(hyp.words, idict_trg)
    if unk_dictionary is not None:
        words = unk_replace.replace_unknown(words, source_words, hyp.align,
                                            unk_dictionary)
    return words


def output_lines(idx, hyps, source_words, idict_trg, args, unk_dictionary):
    """The lines SAVETO gets for one sentence."""
    entries = ranked(hyps, args.n)
    lines = []
    for hyp, score in (entries if args.n_best else entries[:1]):
        text = ' '.join(target_words(hyp, idict_trg, source_words, unk_dictionary))
        if args.n_best:
            lines.append(nbest.format_entry(idx, text, score))
        elif args.print_scores:
            lines.append(text + nbest.SEPARATOR + nbest.format_score(score))
        else:
            lines.append(text)
        if args.print_word_probabilities:
            lines.append(' '.join('%.6g' % numpy.exp(-c) for c in hyp.costs))
    return lines


def alignment_record(idx, hyp, source_line, idict_trg, authors):
    record = {'id': idx, 'score': float(hyp.score),
              'source': vocab.words(source_line) + ['<eos>'],
              'target': [idict_trg[w] for w in hyp.words],
              'source_attention': [numpy.asarray(a).tolist() for a in hyp.align],
              'previous_attention': [numpy.asarray(p).tolist() for p in hyp.prev_align]}
    if authors:
        record['inference'] = layers.AUTHORS_INFERENCE
    return json.dumps(record, ensure_ascii=False)


def _merged(shares):
    """The workers' results (each None where another worker translated)
    as one list."""
    return [next((share[i] for share in shares if share[i] is not None), None)
            for i in range(len(shares[0]))]


def write_output(path, lines):
    output_files.write_text(path, ''.join(line + '\n' for line in lines))


# --------------------------------------------------------------------------
# command line

def parse_args(argv):
    p = cli.ArgumentParser(
        description='Translate a tokenised file with beam search (docs/translation.md). '
                    'The usual case: translate.py -k 5 -n MODEL DICT_SRC DICT_TRG SOURCE '
                    'SAVETO.')
    files = p.add_argument_group('files (positional, in this order)')
    files.add_argument('model', metavar='MODEL',
                       help='the model file (model.npz; its options are read from '
                            'MODEL.pkl or MODEL.json beside it)')
    files.add_argument('dictionary', metavar='DICT_SRC',
                       help='the source language\'s dictionary (.pkl or .json of '
                            'build_dictionary.py: the first of the training\'s '
                            '--dictionaries)')
    files.add_argument('dictionary_target', metavar='DICT_TRG',
                       help='the target language\'s dictionary (the second of the '
                            'training\'s --dictionaries)')
    files.add_argument('source', metavar='SOURCE',
                       help='the text to translate, one sentence a line, tokenised as the '
                            'training data (BPE included); - reads standard input')
    files.add_argument('saveto', metavar='SAVETO',
                       help='where the translations go, one a line in input order (other '
                            'formats: below); - writes standard output; written only once '
                            'every line is translated')
    search = p.add_argument_group('search')
    search.add_argument('-k', type=int, default=5,
                        help='beam size (default 5; the papers\' test translations: 5, '
                             'the Multi30k runs: 12)')
    search.add_argument('-n', action='store_true',
                        help='rank hypotheses by score divided by length, eos counted (the '
                             'usual choice; without it short translations win)')
    search.add_argument('--maxlen', type=int, default=200,
                        help='longest translation in tokens (default 200)')
    search.add_argument('--inference', choices=layers.INFERENCES,
                        help='how the attentive residual decoder computes its summary of '
                             'the previous words: "authors", their sampler, or "training", '
                             'the training graph\'s (docs/equations.md#the-authors-inference; '
                             'default: authors for files whose options say '
                             'decoder=gru_cond_att, else training)')
    search.add_argument('--ensemble', action='append', default=[], metavar='MODEL2',
                        help='another model decoded together with MODEL (log-probabilities '
                             'averaged); repeat for more; same vocabularies')
    search.add_argument('--suppress-unk', action='store_true',
                        help='never produce the UNK token')
    speed = p.add_argument_group('speed')
    speed.add_argument('-p', type=int, default=theano_env.usable_cores(),
                       help='worker processes, each with its own samplers and one thread '
                            '(default: this machine\'s cores, %(default)s here; 1: the main '
                            'process on every core; not used under mpirun)')
    speed.add_argument('--batch-size', type=int, default=DEFAULT_BATCH_SIZE,
                       help='sentences decoded at once, each with its own beam (default %d)'
                            % DEFAULT_BATCH_SIZE)
    output = p.add_argument_group('what SAVETO holds (docs/translation.md#formats)')
    output.add_argument('--n-best', action='store_true',
                        help='every hypothesis of the final beam, best first, as '
                             '"i ||| hypothesis ||| score" (Moses format)')
    output.add_argument('--print-scores', action='store_true',
                        help='"translation ||| score" (the cost -log p, normalised with -n; '
                             'n-best lines have it already)')
    output.add_argument('--print-word-probabilities', action='store_true',
                        help='after each output line, a line with the probability of each '
                             'output token (eos included)')
    output.add_argument('--replace-unk', action='store_true',
                        help='replace each UNK of the output by the source word it attended '
                             'to most')
    output.add_argument('--unk-dictionary', metavar='FILE',
                        help='with --replace-unk: translate the attended source word with '
                             'this dictionary ("SOURCE TARGET [SCORE]" lines); implies '
                             '--replace-unk')
    output.add_argument('--alignments', metavar='FILE',
                        help='also write the attention of each translation to FILE, one '
                             'JSON object a line (over the source, and over previous words '
                             'or states for the residual decoders)')
    args = p.parse_args(argv)
    for flag, value in (('-k', args.k), ('-p', args.p), ('--batch-size', args.batch_size),
                        ('--maxlen', args.maxlen)):
        if value < 1:
            p.error('%s must be at least 1' % flag)
    if args.unk_dictionary:
        args.replace_unk = True
    return args


def prepare(args, world=distributed.SingleProcess()):
    """Models, dictionaries and sources (InputError on bad input); with
    several workers, rank 0 reads the sources (stdin is rank 0's)."""
    world.check_same(distributed.fingerprint(
        {k: v for k, v in vars(args).items() if k not in ('source', 'saveto')}))
    if world.is_root:
        output_files.check_outputs([args.saveto, args.alignments], output_files.model_files(
            [args.model] + args.ensemble) + [args.dictionary, args.dictionary_target,
                                             args.source, args.unk_dictionary])
    models = load_models([args.model] + args.ensemble, args.inference)
    options = models[0][1]
    word_dict = vocab.load_dictionary(args.dictionary)
    idict_trg = target_id_to_word(args.dictionary_target, options['n_words'])
    unk_dictionary = None
    if args.replace_unk:
        unk_dictionary = (unk_replace.load_dictionary(args.unk_dictionary)
                          if args.unk_dictionary else {})
    lines = world.broadcast(read_lines(args.source, what='sentences to translate')
                            if world.is_root else None, 'the sources\' broadcast')
    sources = [vocab.sentence_ids(line, word_dict, options['n_words_src']) for line in lines]
    return models, idict_trg, unk_dictionary, lines, sources


def main(argv=None):
    args = parse_args(cli.arguments(argv))
    return distributed.run(lambda: translate(args))


def decode(models, sources, search, n_process, world):
    """The hypotheses of every source (None where another MPI worker
    decodes it), with a progress line."""
    progress = ProgressLine(len(sources), 'translated', 'sentences')
    results, done = [None] * len(sources), 0
    batches = translate_all(models, sources, search, n_process, world)
    with contextlib.closing(batches), progress_line_ended(progress):
        for batch in batches:
            for idx, hyps in batch:
                results[idx] = hyps
            done += len(batch)
            progress.update(done)
    progress.finish()
    return results


@contextlib.contextmanager
def progress_line_ended(progress):
    """The progress line ended when decoding stops early, so that the
    command's last line (``interrupted: ...``, ``error: ...``) has its own."""
    try:
        yield
    except BaseException:
        if progress.last > progress.start:
            progress.stream.write('\n')
        raise


def translate(args):
    """Translate args.source into args.saveto (and args.alignments)."""
    world = distributed.world()
    models, idict_trg, unk_dictionary, source_lines, sources = prepare(args, world)
    search = Search(args.k, args.maxlen, args.batch_size, args.suppress_unk,
                    bool(args.alignments or args.replace_unk))
    results = decode(models, sources, search, args.p, world)
    if world.size > 1:
        results = _merged(world.gather(results, 'the translations\' gather'))
        if not world.is_root:
            return
    lines, align_lines = [], []
    authors = uses_authors_inference(models)
    for idx, hyps in enumerate(results):
        words = vocab.words(source_lines[idx])
        lines.extend(output_lines(idx, hyps, words, idict_trg, args, unk_dictionary))
        if args.alignments:
            best = ranked(hyps, args.n)[0][0]
            align_lines.append(alignment_record(idx, best, source_lines[idx], idict_trg,
                                                authors))
    write_output(args.saveto, lines)
    if args.alignments:
        write_output(args.alignments, align_lines)


if __name__ == '__main__':
    sys.exit(main())
