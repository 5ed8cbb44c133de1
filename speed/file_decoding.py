"""Translating a real file beside Marian: speed/benchmark.py translate --model.

This project's batched beam search (translate.py's, one process) translates
the file with a trained model, then Marian's decoder translates it with the
same model (converted to its ``--type amun`` file, speed/marian.py) at
several mini-batch sizes, with the same beam, length normalisation and
threads.  Times are of the translation alone (after compiling or loading);
the figures include how many translations are the same word for word.
"""
import os
import tempfile
import time
from collections import OrderedDict

import numpy


_FORKED = {}    # the translator that forked workers decode with


def _forked_batch(batch):
    return _FORKED['translator'].translate(batch)


def _translate_batches(translator, batches, processes):
    """{index: hypotheses} of every batch: here, or by processes forked now
    (one thread each), a batch at a time each."""
    found = {}
    if processes > 1:
        import multiprocessing
        from theano_platform import theano_env
        _FORKED['translator'] = translator
        with multiprocessing.get_context('fork').Pool(
                processes, theano_env.limit_threads, (1,)) as pool:
            for part in pool.imap_unordered(_forked_batch, batches):
                found.update(part)
    else:
        for batch in batches:
            found.update(translator.translate(batch))
    return found


def ours(models, lines, source_dict, target_dict, beam, batch_size, processes=1):
    """(translations, seconds, compile seconds) of translate.py's batched
    search (in several processes: forked once the functions are compiled,
    the forks counted in the seconds); the best hypothesis by
    length-normalised score (translate.py -n); models: decoding.load_models'."""
    from machinery import vocab
    from translation import decoding
    options = models[0][1]
    words = vocab.load_dictionary(source_dict)
    sources = [vocab.sentence_ids(line, words, options['n_words_src']) for line in lines]
    idict = decoding.target_id_to_word(target_dict, options['n_words'])
    start = time.time()
    translator = decoding.Translator.of_models(models, decoding.Search(beam, 200, batch_size,
                                                                       False, False))
    translator.translate([(0, sources[0])])   # the first call allocates buffers
    compiled = time.time() - start
    start = time.time()
    found = _translate_batches(translator, translator.batches(sources), processes)
    seconds = time.time() - start
    return ([decoding.best_words(found[i], idict) for i in range(len(lines))],
            seconds, compiled)


def marians(options, params, lines, source_dict, target_dict, beam, mini_batches, threads):
    """{mini-batch: Marian's figures and translations} on the same model."""
    from machinery import vocab
    from speed import marian
    runs = OrderedDict()
    with tempfile.TemporaryDirectory(prefix='marian-decode-') as work:
        model = os.path.join(work, 'model.npz')
        numpy.savez(model, **marian.amun_parameters(params, options))
        vocabs = [os.path.join(work, name) for name in ('source.json', 'target.json')]
        for path, dictionary, n in zip(vocabs, (source_dict, target_dict),
                                       (options['n_words_src'], options['n_words'])):
            marian.write_json_vocabulary(path, vocab.load_dictionary(dictionary), n)
        source = os.path.join(work, 'source.txt')
        with open(source, 'w', encoding='utf-8') as f:
            f.write(''.join(line + '\n' for line in lines))
        for mini_batch in mini_batches:
            runs[mini_batch] = marian.decode_speed(model, vocabs, source, beam,
                                                   mini_batch, threads)
    return runs


def bench_file(model_path, source_path, dictionaries, beam, batch_size, mini_batches,
               threads, sentences=None, processes=1, log=print):
    """The figures of ours and Marian's (where it runs) on one file; Marian
    runs on as many threads as ours uses cores (threads x processes)."""
    from machinery.text_io import read_lines
    from speed import marian
    from translation import decoding
    lines = read_lines(source_path, what='sentences to translate')[:sentences]
    models = decoding.load_models([model_path])
    log('ours: %d sentences, beam %d, batches of %d, %d process(es) of %d thread(s)'
        % (len(lines), beam, batch_size, processes, threads))
    translations, seconds, compiled = ours(models, lines, dictionaries[0],
                                           dictionaries[1], beam, batch_size, processes)
    log('ours: %.1f s (%.2f sentences/s)' % (seconds, len(lines) / seconds))
    result = OrderedDict([
        ('mode', 'translate'), ('model', model_path), ('source', source_path),
        ('sentences', len(lines)), ('beam', beam), ('batch_size', batch_size),
        ('threads', threads), ('processes', processes),
        ('sentences_per_sec', round(len(lines) / seconds, 3)),
        ('seconds', round(seconds, 2)), ('compile_sec', round(compiled, 2))])
    if not mini_batches:
        return result
    try:
        _, options, params = models[0]
        runs = marians(options, params, lines, dictionaries[0], dictionaries[1], beam,
                       mini_batches, threads * processes)
    except marian.MarianUnavailable as e:
        log('no comparison with Marian: %s' % e)
        result.update(marian=None, marian_unavailable=str(e))
        return result
    result['marian'] = OrderedDict(
        (str(mb), OrderedDict([
            ('sentences_per_sec', round(len(lines) / run['wall_sec'], 3)),
            ('seconds', round(run['wall_sec'], 2)), ('load_sec', round(run['load_sec'], 2)),
            ('same_translation', round(numpy.mean(
                [a == _our_unk(b) for a, b in zip(translations, run['outputs'])]), 4))]))
        for mb, run in runs.items())
    best = max(result['marian'].values(), key=lambda r: r['sentences_per_sec'])
    result['ratio_to_best_marian'] = round(
        result['sentences_per_sec'] / best['sentences_per_sec'], 3)
    for mb, figures in result['marian'].items():
        log('Marian, mini-batch %s: %.2f sentences/s, %.1f%% the same translation'
            % (mb, figures['sentences_per_sec'], 100 * figures['same_translation']))
    return result


def _our_unk(line):
    """A line of Marian's with its unknown word written as translate.py writes it."""
    return ' '.join('UNK' if w == '<unk>' else w for w in line.split())
