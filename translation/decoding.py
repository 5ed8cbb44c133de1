"""One way to load a decoder and to decode sentences with it.

``load_models`` reads the model files of an ensemble (options completed and
checked, the same vocabularies); a ``Translator`` holds their samplers
(sampler.decoding_sampler, or the samplers a training run compiled over its
own parameters: the BLEU validation) and decodes a batch of sentences with
the batched beam search (beam_search.search_batch, the ``Search``'s
settings); ``translate_all`` decodes every sentence in length-sorted batches,
in this process, in worker processes (each with its own samplers) or in
this MPI worker's share; ``best_translations`` are the best hypotheses'
words.  translate.py, score.py (forced decoding), the BLEU validation of
nmt_training.py and the benchmarks (speed/) decode through here.
"""
import sys
from collections import namedtuple

from theano_platform import theano_env
from machinery import distributed
from machinery import model_io
from translation import unk_replace
from machinery import vocab
from machinery.text_io import InputError
from machinery.worker_processes import WorkerPool
from beam_search import ranked, search_batch, sorted_batches

# what the search needs besides the models: beam size, longest output,
# sentences a batch, whether UNK is never produced, whether the attention is kept
Search = namedtuple('Search', 'k maxlen batch_size suppress_unk keep_attention')


# --------------------------------------------------------------------------
# models

def load_models(paths, inference=None):
    """[(path, options, parameters)] of the models of an ensemble, each with
    its decoding mode: the file's own, or ``inference`` when given."""
    from nmt_model import load_model
    models = []
    for path in paths:
        options, params = load_model(path, inference)
        models.append((path, options, params))
    check_same_vocabularies(models)
    return models


def _named_dictionaries(path, options):
    """The dictionaries a model's options name, found as given or beside the
    model file; None when the options name none or one cannot be found."""
    names = options.get('dictionaries')
    if not names:
        return None
    found = [model_io.file_as_named_or_beside(name, path) for name in names]
    if None in found:
        return None
    return [vocab.load_dictionary(f) for f in found]


def check_same_vocabularies(models):
    """InputError unless the models of an ensemble have the same vocabulary
    sizes and, where their options name dictionaries, the same dictionaries."""
    first_path, first, _ = models[0]
    first_dicts = None
    for path, options, _ in models[1:]:
        for key in ('n_words_src', 'n_words'):
            if options[key] != first[key]:
                raise InputError('%s and %s have different vocabularies: %s %d and %d'
                                 % (first_path, path, key, first[key], options[key]))
        dicts = _named_dictionaries(path, options)
        if first_dicts is None:
            first_dicts = _named_dictionaries(first_path, first)
        if dicts is None or first_dicts is None:
            continue
        for side, key, a, b in zip(('source', 'target'), ('n_words_src', 'n_words'),
                                   first_dicts, dicts):
            limit = options[key]
            if ({w: i for w, i in a.items() if i < limit} !=
                    {w: i for w, i in b.items() if i < limit}):
                raise InputError('%s and %s have different %s dictionaries (%s, %s)'
                                 % (first_path, path, side, first['dictionaries'][0 if
                                    side == 'source' else 1],
                                    options['dictionaries'][0 if side == 'source' else 1]))


def target_id_to_word(dict_trg, n_words):
    """id -> word of the target dictionary; ids below n_words it lacks are
    written as UNK (with a warning)."""
    idict_trg = vocab.invert_dictionary(vocab.load_dictionary(dict_trg))
    missing = [i for i in range(n_words) if i not in idict_trg]
    if missing:
        print('warning: %s has no word for %d of the ids below the model\'s n_words=%d '
              '(first: %d); they are written as UNK'
              % (dict_trg, len(missing), n_words, missing[0]), file=sys.stderr)
        for i in missing:
            idict_trg[i] = unk_replace.UNK_TOKEN
    return idict_trg


# --------------------------------------------------------------------------
# decoding

def samplers_of(models):
    """The batched samplers (f_init, f_next) of loaded models (load_models),
    each over its own parameters, without noise."""
    from layers import init_tparams
    from sampler import decoding_sampler
    return [decoding_sampler(init_tparams(params), options) for _, options, params in models]


class Translator(object):
    """The batched samplers of an ensemble (``samplers``: [(f_init,
    f_next)]) and the search over them."""

    def __init__(self, samplers, search):
        self.samplers, self.search = samplers, search

    @classmethod
    def of_models(cls, models, search):
        """A Translator of loaded models (load_models)."""
        return cls(samplers_of(models), search)

    def translate(self, batch, maxlen=None):
        """[(index, hypotheses)] of a batch [(index, source ids ending with
        eos)]; ``maxlen``: one per sentence in place of the search's."""
        s = self.search
        return search_batch(self.samplers, batch, s.k, s.maxlen if maxlen is None else maxlen,
                            suppress_unk=s.suppress_unk, keep_attention=s.keep_attention)

    def batches(self, sources):
        """The length-sorted batches [(index, source ids)] of ``sources``."""
        return sorted_batches(sources, self.search.batch_size)


def _start_translator(models, search):
    """A worker's translation function (its own samplers, one thread)."""
    theano_env.limit_threads(1)   # the workers share the cores
    return Translator.of_models(models, search).translate


def translate_all(models, sources, search, n_process, world=distributed.SingleProcess()):
    """Yield [(index, hypotheses)] batch by batch (in no particular order):
    of every batch, or of worker ``world.rank``'s share of them; in this
    process, or in ``n_process`` worker processes."""
    batches = sorted_batches(sources, search.batch_size)[world.rank::world.size]
    if n_process <= 1 or world.size > 1:
        translator = Translator.of_models(models, search)
        for batch in batches:
            yield translator.translate(batch)
        return
    start = lambda: _start_translator(models, search)   # noqa: E731
    with WorkerPool(start, n_process, 'translation') as pool:
        for _, translated in pool.map_unordered(batches):
            yield translated


def best_words(hyps, target_idict, normalize=True):
    """The best hypothesis' words (beam_search.ranked) as one line."""
    return ' '.join(vocab.ids_to_words(ranked(hyps, normalize)[0][0].words, target_idict))


def best_translations(translator, sources, target_idict, normalize=True):
    """The best translation of every source (id lists ending with eos), one
    line each, in their order."""
    out = [None] * len(sources)
    for batch in translator.batches(sources):
        for i, hyps in translator.translate(batch):
            out[i] = best_words(hyps, target_idict, normalize)
    return out
