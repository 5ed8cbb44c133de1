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
import os
import sys
import time

import numpy

from model_io import InputError, atomic_write, invert_dictionary, load_dictionary


def read_lines(path):
    """Lines of a UTF-8 file ('-' = stdin); errors name the file and line."""
    name = '<stdin>' if path == '-' else path
    try:
        raw = (sys.stdin.buffer.read() if path == '-'
               else open(path, 'rb').read())
    except OSError as e:
        raise InputError('%s: cannot read (%s)' % (name, e.strerror))
    lines = raw.split(b'\n')
    if lines and lines[-1] == b'':
        lines.pop()
    out = []
    for i, line in enumerate(lines):
        try:
            out.append(line.decode('utf-8'))
        except UnicodeDecodeError as e:
            raise InputError('%s: line %d is not valid UTF-8 text (byte %d)'
                             % (name, i + 1, e.start + 1))
    if not out:
        raise InputError('%s: empty input, nothing to translate' % name)
    return out


def words_to_ids(words, word_dict, n_words):
    """Unknown words and ids >= n_words become UNK (1); eos (0) is appended."""
    ids = [word_dict.get(w, 1) for w in words]
    return [i if i < n_words else 1 for i in ids] + [0]


def read_source_ids(path, word_dict, n_words_src):
    return [words_to_ids(line.split(), word_dict, n_words_src)
            for line in read_lines(path)]


def ids_to_words(ids, idict):
    """Words up to (not including) eos."""
    words = []
    for w in ids:
        if w == 0:
            break
        words.append(idict[w])
    return ' '.join(words)


def load_translation_model(model, dict_src, dict_trg):
    """Options, parameters and dictionaries, checked against each other."""
    import nmt
    from model_io import load_options, load_params
    if not os.path.exists(model):
        raise InputError('%s: no such model file' % model)
    options = nmt.fill_options(load_options(model))
    word_dict = load_dictionary(dict_src)
    word_dict_trg = load_dictionary(dict_trg)
    idict_trg = invert_dictionary(word_dict_trg)
    missing = [i for i in range(options['n_words']) if i not in idict_trg]
    if missing:
        print('warning: %s has no word for %d of the ids below the model\'s n_words=%d '
              '(first: %d); they are written as UNK'
              % (dict_trg, len(missing), options['n_words'], missing[0]), file=sys.stderr)
        for i in missing:
            idict_trg[i] = 'UNK'
    params = load_params(model, nmt.init_params(options))
    return options, params, word_dict, idict_trg


class Translator:
    """Beam search with one compiled sampler (one per worker process)."""

    def __init__(self, options, params, k, normalize, maxlen=200):
        import nmt
        from theano.sandbox.rng_mrg import MRG_RandomStream as RandomStreams
        import theano
        self.options, self.k, self.normalize, self.maxlen = options, k, normalize, maxlen
        self.tparams = nmt.init_tparams(params)
        self.f_init, self.f_next = nmt.build_sampler(
            self.tparams, options, RandomStreams(1234), theano.shared(numpy.float32(0.)))

    def translate(self, ids):
        import nmt
        x = numpy.array(ids, dtype='int64').reshape([len(ids), 1])
        samples, scores, align, prev_align = nmt.gen_sample(
            self.tparams, self.f_init, self.f_next, x, self.options, k=self.k,
            maxlen=self.maxlen, stochastic=False, return_alignment=True)
        best = nmt.best_hypothesis(samples, scores, self.normalize)
        return samples[best], float(scores[best]), align[best], prev_align[best]


def _worker(queue, results, options, params, k, normalize, maxlen):
    translator = Translator(options, params, k, normalize, maxlen)
    while True:
        job = queue.get()
        if job is None:
            return
        idx, ids = job
        sample, score, align, prev = translator.translate(ids)
        results.put((idx, sample, score,
                     [a.tolist() for a in align], [p.tolist() for p in prev]))


def translate_all(options, params, sources, k, normalize, n_process, maxlen=200):
    """Yield (index, sample, score, alignment, prev_alignment) in input order."""
    if n_process <= 1:
        translator = Translator(options, params, k, normalize, maxlen)
        for idx, ids in enumerate(sources):
            sample, score, align, prev = translator.translate(ids)
            yield idx, sample, score, [a.tolist() for a in align], [p.tolist() for p in prev]
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
        source_lines = read_lines(args.source)
        sources = [words_to_ids(line.split(), word_dict, options['n_words_src'])
                   for line in source_lines]
    except InputError as e:
        print('error: %s' % e, file=sys.stderr)
        return 1
    start = time.time()
    out_lines, align_lines = [], []
    for idx, sample, score, align, prev in translate_all(
            options, params, sources, args.k, args.n, args.p, args.maxlen):
        out_lines.append(ids_to_words(sample, idict_trg))
        if args.alignments:
            align_lines.append(json.dumps({
                'id': idx, 'score': score,
                'source': source_lines[idx].split() + ['<eos>'],
                'target': [idict_trg[w] for w in sample],
                'source_attention': align, 'previous_attention': prev},
                ensure_ascii=False))
        done = idx + 1
        if done % 10 == 0 or done == len(sources):
            rate = done / max(time.time() - start, 1e-9)
            print('\rtranslated %d/%d sentences, %.2f sent/s, ETA %ds'
                  % (done, len(sources), rate, (len(sources) - done) / rate),
                  end='', file=sys.stderr)
    print(file=sys.stderr)
    text = ''.join(line + '\n' for line in out_lines)
    if args.saveto == '-':
        sys.stdout.write(text)
        sys.stdout.flush()
    else:
        atomic_write(args.saveto, lambda f: f.write(text), 'w')
    if args.alignments:
        atomic_write(args.alignments,
                     lambda f: f.write(''.join(a + '\n' for a in align_lines)), 'w')
    return 0


if __name__ == '__main__':
    sys.exit(main())
