"""Translate a file with beam search (REFERENCE.md section 5).

    python translate.py [-k K] [-n] [-p P] MODEL DICT_SRC DICT_TRG SOURCE SAVETO

SOURCE and SAVETO may be '-' (stdin / stdout).  Each of the P worker
processes builds its own sampler; sentences are handed out one at a time and
the output keeps the input order.  Progress goes to stderr.  A file SAVETO
appears only once every line is translated.  ``--alignments FILE`` also
writes, one JSON object a line, the attention over the source and (for the
residual, memory and self-attentive decoders) over previous words or states.
"""
import theano_env  # noqa: F401  (must come before theano)

import argparse
import json
import multiprocessing
import sys

import numpy

import model_io
import vocab
from beam_search import translate_best
from progress import ProgressLine
from text_io import InputError, read_lines


def load_translation_model(model, dict_src, dict_trg):
    """Options, parameters and dictionaries, checked against each other."""
    import nmt
    options, params = nmt.load_model(model)
    word_dict = model_io.load_dictionary(dict_src)
    idict_trg = vocab.invert_dictionary(model_io.load_dictionary(dict_trg))
    missing = [i for i in range(options['n_words']) if i not in idict_trg]
    if missing:
        print('warning: %s has no word for %d of the ids below the model\'s n_words=%d '
              '(first: %d); they are written as UNK'
              % (dict_trg, len(missing), options['n_words'], missing[0]), file=sys.stderr)
        for i in missing:
            idict_trg[i] = 'UNK'
    return options, params, word_dict, idict_trg


class Translator:
    """Beam search with one compiled sampler (one per worker process)."""

    def __init__(self, options, params, k, normalize, maxlen=200):
        import nmt
        from theano.sandbox.rng_mrg import MRG_RandomStream as RandomStreams
        import theano
        self.k, self.normalize, self.maxlen = k, normalize, maxlen
        tparams = nmt.init_tparams(params)
        self.f_init, self.f_next = nmt.build_sampler(
            tparams, options, RandomStreams(1234), theano.shared(numpy.float32(0.)))

    def translate(self, ids):
        """(word ids, score, source attention rows, previous-word rows)."""
        hyp = translate_best(self.f_init, self.f_next, ids, self.k, self.normalize,
                             self.maxlen)
        return (hyp.words, float(hyp.score), [a.tolist() for a in hyp.align],
                [p.tolist() for p in hyp.prev_align])


def _worker(queue, results, options, params, k, normalize, maxlen):
    translator = Translator(options, params, k, normalize, maxlen)
    while True:
        job = queue.get()
        if job is None:
            return
        idx, ids = job
        results.put((idx,) + translator.translate(ids))


def translate_all(options, params, sources, k, normalize, n_process, maxlen=200):
    """Yield (index, sample, score, alignment, prev_alignment) in input order."""
    if n_process <= 1:
        translator = Translator(options, params, k, normalize, maxlen)
        for idx, ids in enumerate(sources):
            yield (idx,) + translator.translate(ids)
        return
    ctx = multiprocessing.get_context('fork')
    queue, results = ctx.Queue(), ctx.Queue()
    workers = [ctx.Process(target=_worker, args=(queue, results, options, params,
                                                 k, normalize, maxlen), daemon=True)
               for _ in range(n_process)]
    for w in workers:
        w.start()
    for job in enumerate(sources):
        queue.put(job)
    for _ in workers:
        queue.put(None)
    pending, next_idx = {}, 0
    try:
        while next_idx < len(sources):
            try:
                item = results.get(timeout=5)
            except Exception:
                if not any(w.is_alive() for w in workers):
                    raise RuntimeError('the translation workers died')
                continue
            pending[item[0]] = item
            while next_idx in pending:
                yield pending.pop(next_idx)
                next_idx += 1
    finally:
        for w in workers:
            w.terminate()


def parse_args(argv):
    p = argparse.ArgumentParser(description='Translate with beam search.')
    p.add_argument('-k', type=int, default=5, help='beam size (default 5)')
    p.add_argument('-n', action='store_true', help='normalise scores by length')
    p.add_argument('-p', type=int, default=5, help='worker processes (default 5)')
    p.add_argument('--maxlen', type=int, default=200,
                   help='longest translation in tokens (default 200)')
    p.add_argument('--alignments', metavar='FILE',
                   help='also write attention matrices as JSON lines')
    p.add_argument('model')
    p.add_argument('dictionary')
    p.add_argument('dictionary_target')
    p.add_argument('source')
    p.add_argument('saveto')
    args = p.parse_args(argv)
    if args.k < 1:
        p.error('-k must be at least 1')
    if args.p < 1:
        p.error('-p must be at least 1')
    return args


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        options, params, word_dict, idict_trg = load_translation_model(
            args.model, args.dictionary, args.dictionary_target)
        source_lines = read_lines(args.source, what='sentences to translate')
    except InputError as e:
        print('error: %s' % e, file=sys.stderr)
        return 1
    sources = [vocab.sentence_ids(line, word_dict, options['n_words_src'])
               for line in source_lines]
    progress = ProgressLine(len(sources), 'translated', 'sentences')
    out_lines, align_lines = [], []
    for idx, sample, score, align, prev in translate_all(
            options, params, sources, args.k, args.n, args.p, args.maxlen):
        out_lines.append(' '.join(vocab.ids_to_words(sample, idict_trg)))
        if args.alignments:
            align_lines.append(json.dumps({
                'id': idx, 'score': score,
                'source': source_lines[idx].split() + ['<eos>'],
                'target': [idict_trg[w] for w in sample],
                'source_attention': align, 'previous_attention': prev},
                ensure_ascii=False))
        progress.update(idx + 1)
    progress.finish()
    text = ''.join(line + '\n' for line in out_lines)
    if args.saveto == '-':
        sys.stdout.write(text)
        sys.stdout.flush()
    else:
        model_io.atomic_write(args.saveto, lambda f: f.write(text), 'w')
    if args.alignments:
        model_io.atomic_write(args.alignments,
                              lambda f: f.write(''.join(a + '\n' for a in align_lines)),
                              'w')
    return 0


if __name__ == '__main__':
    sys.exit(main())
