"""Words to ids and back (docs/equations.md#vocabularies-and-batches).

The one mapping the whole project uses: a word missing from the dictionary,
or whose id is ``>= n_words`` when ``n_words > 0``, becomes 1 (UNK), as the
original iterator and translate.py do; eos is 0.
"""
import collections
import hashlib
import numbers
import os
import pickle
import re

import numpy

from machinery.output_files import atomic_write_files, json_text
from machinery.pickle_and_json import PY2_PROTOCOL, load_json, load_pickle
from machinery.text_io import InputError

EOS, UNK = 0, 1
# the words that may hold ids 0 and 1 (build_dictionary.py writes eos, UNK)
EOS_WORDS, UNK_WORDS = ('eos', '<eos>', '</s>'), ('UNK', '<unk>', '<UNK>')

# the separators of words: ASCII whitespace alone, as Python 2's str.split on
# the original's byte strings (a no-break space or U+3000 stays in its word)
_ASCII_SPACE = re.compile(r'[ \t\n\r\x0b\x0c]+')


def words(line):
    """The words of a tokenised line, as the original code splits them (and
    the data iterator, training, scoring and translation here)."""
    return [w for w in _ASCII_SPACE.split(line) if w]


def words_to_ids(words, word_dict, n_words=-1):
    """Ids of a list of words (no eos added); n_words <= 0: no limit."""
    ids = [word_dict.get(w, UNK) for w in words]
    if n_words > 0:
        ids = [i if i < n_words else UNK for i in ids]
    return ids


def unk_beyond(ids, n_words):
    """An id array with words_to_ids' rule applied in place: ids >= n_words
    become UNK when n_words > 0 (None: no limit)."""
    if n_words is not None and n_words > 0:
        ids[ids >= n_words] = UNK
    return ids


def sentence_ids(line, word_dict, n_words=-1):
    """Ids of a whitespace-tokenised sentence followed by eos, as the sampler
    takes a source sentence."""
    return words_to_ids(words(line), word_dict, n_words) + [EOS]


def check_dictionary(word_dict, path):
    """InputError naming ``path`` and the first offending entry unless every
    id is a non-negative integer held by one word alone, and ids 0 and 1,
    which the model reads as the end of a sentence and an unknown word, are
    eos and UNK (or free)."""
    holders = {}
    for word, idx in word_dict.items():
        if isinstance(idx, bool) or not isinstance(idx, numbers.Integral):
            raise InputError('%s: %r has the id %r, not an integer' % (path, word, idx))
        if idx < 0:
            raise InputError('%s: %r has the id %d, a negative one' % (path, word, idx))
        if int(idx) in holders:
            raise InputError('%s: %r and %r have the same id, %d'
                             % (path, holders[int(idx)], word, idx))
        holders[int(idx)] = word
    for idx, names, meaning in ((EOS, EOS_WORDS, 'the end of a sentence (eos)'),
                                (UNK, UNK_WORDS, 'an unknown word (UNK)')):
        if idx in holders and holders[idx] not in names:
            raise InputError('%s: id %d is %r, but the model reads id %d as %s '
                             '(build_dictionary.py numbers the words from 2)'
                             % (path, idx, holders[idx], idx, meaning))


def dictionary_digest(word_dict):
    """A digest of a dictionary's contents (its words and their ids, in
    any order, from .pkl or .json alike): what a model records of the
    dictionaries it was trained with."""
    lines = sorted('%d\t%s\n' % (int(i), w) for w, i in word_dict.items())
    return hashlib.sha256(''.join(lines).encode('utf-8')).hexdigest()


def invert_dictionary(word_to_id):
    """id -> word, with 0 -> '<eos>' and 1 -> 'UNK' (as translate.py does)."""
    id_to_word = {idx: word for word, idx in word_to_id.items()}
    id_to_word[EOS] = '<eos>'
    id_to_word[UNK] = 'UNK'
    return id_to_word


def ids_to_words(ids, id_to_word):
    """The words of ids up to (not including) the first eos, as a list."""
    words = []
    for i in ids:
        if i == EOS:
            break
        words.append(id_to_word.get(int(i), 'UNK'))
    return words


def unigram_log_probs(counts):
    """log p of each id under the add-one unigram model of ``counts`` (how
    often each id occurs, eos included): log((c + 1) / (N + V))."""
    counts = numpy.asarray(counts, dtype='float64')
    return numpy.log((counts + 1.) / (counts.sum() + len(counts)))


def unigram_cost(log_probs, counts, n_sentences):
    """The mean cost per sentence (the validation cost's measure) of text
    whose ids occur ``counts`` times in ``n_sentences`` sentences, under a
    model that gives every word its unigram probability whatever the source
    and the previous words: the cost of a model that has learnt only word
    frequencies."""
    return float(-(numpy.asarray(counts) * log_probs).sum() / max(n_sentences, 1))


def load_dictionary(path):
    """Load a word -> id dictionary from a ``.json`` file or a pickle;
    keys come back as str.  Its ids are checked (check_dictionary):
    InputError naming the file and the entry."""
    path = os.fspath(path)
    if path.endswith('.json'):
        d = load_json(path)
    else:
        d = load_pickle(path)
    if not isinstance(d, dict):
        raise InputError('%s: expected a dictionary word -> id, found %s'
                         % (path, type(d).__name__))
    check_dictionary(d, path)
    return d


def save_dictionary(word_to_id, pkl_path, json_path):
    """Write a dictionary as a Python-2-readable pickle and as JSON.

    The pickle holds an ``OrderedDict`` with UTF-8 ``bytes`` keys (Python 2
    reads them as ``str``, the type its lookups use) and int values, protocol
    2.  The JSON object lists the words in id order.
    """
    items = sorted(word_to_id.items(), key=lambda kv: int(kv[1]))
    od = collections.OrderedDict()
    for word, idx in word_to_id.items():
        key = word.encode('utf-8') if isinstance(word, str) else bytes(word)
        od[key] = int(idx)
    text = json_text(collections.OrderedDict((w, int(i)) for w, i in items),
                     ensure_ascii=False, indent=2)
    atomic_write_files([(pkl_path, lambda f: pickle.dump(od, f, protocol=PY2_PROTOCOL), 'wb'),
                        (json_path, lambda f: f.write(text), 'w')])
