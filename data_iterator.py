"""Parallel-corpus batches, as the original dl4mt-tutorial iterator makes them.

``TextIterator`` reads a source and a target file line by line (plain or
``.gz``) and yields ``(source, target)`` batches: lists of sentences, each a
list of word ids.  ``prepare_data`` turns a batch into the padded, time-major
matrices and masks that the model takes.  ``MonolingualIterator`` and
``prepare_monolingual`` do the same for one file (the language model of
language_model/lm.py): batches ``(sentences,)``, sorted and skipped by the same rules.

Faithful to the original:
  * tokens are the whitespace-split words of a line.  The original split
    Python-2 byte strings, i.e. on ASCII whitespace only; so do we (a
    no-break space or other Unicode space stays inside its token), and lines
    end at ``\\n`` only;
  * a buffer of ``sort_k_batches * batch_size`` pairs is read, sorted by
    target length with ``numpy.argsort`` (default kind), and batches are
    popped from its end, longest first; the buffer is refilled only when it
    is empty, so the last batch taken from a buffer may be short;
  * unknown words, and ids ``>= n_words`` when ``n_words > 0``, become 1;
  * a pair is skipped when its source AND its target are longer than
    ``maxlen``;
  * at the end of the data ``StopIteration`` is raised and the iterator goes
    back to the start, so the next ``for`` loop is the next epoch.

Differences: batches are plain lists (the original wrapped them in
``numpy.array``, which makes ragged object arrays); the files are checked
when the iterator is created (missing, empty, different line counts) and
text must be UTF-8; when every remaining pair of a buffer is skipped by the
maxlen rule, the original ended the epoch there (and thus never reached the
rest of the corpus), while we read the next buffer; ``shuffle_each_epoch``
(off by default) visits the pairs in a new random order each epoch.
"""
import gzip
import os
import shutil
import tempfile
import zlib

import numpy

from machinery.vocab import load_dictionary
from machinery.text_io import (InputError, check_readable, one_line as _one_line,
                               open_binary as _open_binary)
from machinery.vocab import unk_beyond, words_to_ids

_CHUNK = 1 << 20


def prepare_data(seqs_x, seqs_y, maxlen=None, n_words_src=None, n_words=None):
    """Padded time-major id matrices and float32 masks for a batch.

    With ``maxlen``, pairs where either side has ``len >= maxlen`` are
    dropped, and ``(None, None, None, None)`` is returned if none is left.
    Returns ``x, x_mask, y, y_mask``: ids int64 of shape
    ``(max_len_in_batch + 1, n)`` padded with 0 (eos), masks 1 on the first
    ``len + 1`` rows.  Ids from ``n_words_src`` (source) or ``n_words``
    (target) on read as UNK (1), as the iterators read them (None or <= 0:
    every id as given; dl4mt takes these arguments and ignores them, so that
    a batch made without the iterator could index past the embeddings).
    """
    if maxlen is not None:
        kept = [(sx, sy) for sx, sy in zip(seqs_x, seqs_y)
                if len(sx) < maxlen and len(sy) < maxlen]
        seqs_x = [sx for sx, _ in kept]
        seqs_y = [sy for _, sy in kept]
    if len(seqs_x) < 1 or len(seqs_y) < 1:
        return None, None, None, None
    x, x_mask = pad_batch(seqs_x)
    y, y_mask = pad_batch(seqs_y)
    return unk_beyond(x, n_words_src), x_mask, unk_beyond(y, n_words), y_mask


def prepare_monolingual(seqs, maxlen=None):
    """``(y, y_mask)`` of one-side sentences, by the rules of prepare_data
    (sentences with ``len >= maxlen`` dropped; ``(None, None)`` if none is
    left)."""
    if maxlen is not None:
        seqs = [s for s in seqs if len(s) < maxlen]
    if not seqs:
        return None, None
    return pad_batch(seqs)


def pad_batch(seqs):
    """(ids int64, mask float32), both ``(max len + 1) x n``: each sentence,
    then eos (0) and padding (0); the mask is 1 on the ``len + 1`` first rows."""
    lengths = [len(s) for s in seqs]
    ids = numpy.zeros((numpy.max(lengths) + 1, len(seqs)), dtype='int64')
    mask = numpy.zeros(ids.shape, dtype='float32')
    for idx, (s, n) in enumerate(zip(seqs, lengths)):
        ids[:n, idx] = s
        mask[:n + 1, idx] = 1.
    return ids, mask


def _scan_lines(path, want_offsets, name=None):
    """Number of lines of ``path`` (a last line without ``\\n`` counts) and,
    if asked, the byte offset where each line starts (int64 array).
    ``name`` is the file name used in error messages."""
    name = name or path
    n_newlines = 0
    size = 0
    last = b''
    offsets = [numpy.zeros(1, dtype='int64')] if want_offsets else None
    try:
        with _open_binary(path) as f:
            while True:
                chunk = f.read(_CHUNK)
                if not chunk:
                    break
                if want_offsets:
                    ends = numpy.flatnonzero(
                        numpy.frombuffer(chunk, dtype=numpy.uint8) == 10)
                    offsets.append(ends.astype('int64') + (size + 1))
                n_newlines += chunk.count(b'\n')
                size += len(chunk)
                last = chunk[-1:]
    except (OSError, EOFError, zlib.error) as e:
        raise InputError('%s: cannot read: %s' % (name, _one_line(e)))
    if size == 0:
        raise InputError('%s: file is empty' % name)
    n_lines = n_newlines + (0 if last == b'\n' else 1)
    if want_offsets:
        offsets = numpy.concatenate(offsets)[:n_lines]
    return n_lines, offsets


class _LineFile(object):
    """One side of the corpus: sequential reading, or random access by line
    number through byte offsets (gzip input is then decompressed once to a
    temporary file)."""

    def __init__(self, path, random_access):
        self.path = path
        self.offsets = None
        self._f = None
        self._tmp = None
        check_readable(path)
        if not random_access:
            self.n_lines, _ = _scan_lines(path, False)
            return
        readable = self._decompress(path) if path.endswith('.gz') else path
        try:
            self.n_lines, self.offsets = _scan_lines(readable, True, path)
            self._f = open(readable, 'rb')
        except BaseException:
            self.close()
            raise

    def _decompress(self, path):
        fd, self._tmp = tempfile.mkstemp(prefix='dl4mt_corpus_', suffix='.txt')
        try:
            with os.fdopen(fd, 'wb') as out, gzip.open(path, 'rb') as f:
                shutil.copyfileobj(f, out, _CHUNK)
        except (OSError, EOFError, zlib.error) as e:
            self.close()
            raise InputError('%s: cannot read: %s' % (path, _one_line(e)))
        return self._tmp

    def rewind(self):
        """Start reading sequentially from the first line."""
        if self.offsets is None:
            if self._f is not None:
                self._f.close()
            self._f = _open_binary(self.path)
        else:
            self._f.seek(0)

    def readline(self):
        return self._f.readline()

    def line_at(self, i):
        self._f.seek(int(self.offsets[i]))
        return self._f.readline()

    def close(self):
        if self._f is not None:
            self._f.close()
            self._f = None
        if self._tmp is not None:
            try:
                os.unlink(self._tmp)
            except OSError:
                pass
            self._tmp = None


def _tokens(raw, path, line_no):
    """Split a line on ASCII whitespace (like Python 2 ``str.split``)."""
    try:
        return [t.decode('utf-8') for t in raw.split()]
    except UnicodeDecodeError:
        try:
            raw.decode('utf-8')
            column = ''
        except UnicodeDecodeError as e:
            column = ' (byte %d)' % (e.start + 1)
        raise InputError('%s: line %d is not valid UTF-8 text%s'
                         % (path, line_no, column))


def sentence_lengths(path):
    """The number of words of each line of a text file (an int64 array),
    split as the iterator splits them."""
    lengths = []
    with _open_binary(path) as f:
        try:
            lengths = [len(raw.split()) for raw in f]
        except (OSError, EOFError, zlib.error) as e:
            raise InputError('%s: cannot read: %s' % (path, _one_line(e)))
    return numpy.array(lengths, dtype='int64')


def count_words(path, word_dict, n_words=-1, max_lines=None):
    """How often each id occurs in the first ``max_lines`` lines of a text
    file (all of them when None), tokenised and mapped as the iterator does,
    with one eos a line: (counts as an int64 array of ``n_words`` entries,
    or of the dictionary's largest id + 1 when n_words <= 0; lines read)."""
    size = n_words if n_words > 0 else max(word_dict.values()) + 1
    counts = numpy.zeros(size, dtype='int64')
    f = _LineFile(path, random_access=False)
    try:
        f.rewind()
        n_lines = f.n_lines if max_lines is None else min(f.n_lines, max_lines)
        for line_no in range(1, n_lines + 1):
            ids = words_to_ids(_tokens(f.readline(), path, line_no), word_dict, n_words)
            numpy.add.at(counts, ids, 1)
        counts[0] += n_lines   # eos
    finally:
        f.close()
    return counts, n_lines


class CorpusIterator(object):
    """Batches from one or more aligned text files (one sentence per line):
    each batch is a tuple with one list of id lists per file.

    The buffer is sorted by the length of the LAST file's sentences (the
    target side), and a line is skipped when the sentences of every file are
    longer than ``maxlen``.  ``TextIterator`` (source, target) and
    ``MonolingualIterator`` (one file, for language_model/lm.py) fix the number of files.
    """

    def __init__(self, paths, dicts, n_words, batch_size=128, maxlen=100,
                 shuffle_each_epoch=False, sort_k_batches=20, seed=1234):
        paths = [os.fspath(p) for p in paths]
        self.shuffle_each_epoch = shuffle_each_epoch
        self.files = []
        try:
            for path in paths:
                self.files.append(_LineFile(path, shuffle_each_epoch))
        except BaseException:
            self.close()
            raise
        self._check_aligned()
        self.lines_total = self.files[0].n_lines
        self.dicts = [self._dictionary(d) for d in dicts]
        self.n_words = list(n_words)
        self.batch_size = batch_size
        self.maxlen = maxlen
        self.k = batch_size * sort_k_batches
        self.rng = numpy.random.RandomState(seed)
        self.buffers = [[] for _ in self.files]
        self._order = None
        self._reset()

    def _check_aligned(self):
        first = self.files[0]
        for other in self.files[1:]:
            if other.n_lines != first.n_lines:
                self.close()
                raise InputError(
                    '%s has %d lines but %s has %d: the source and target files '
                    'must have one sentence per line, aligned'
                    % (first.path, first.n_lines, other.path, other.n_lines))

    def _dictionary(self, d):
        if isinstance(d, dict):
            return d
        try:
            return load_dictionary(d)
        except BaseException:
            self.close()
            raise

    def _reset(self):
        """Go back to the first line (new permutation when shuffling)."""
        self.buffers = [[] for _ in self.files]
        self.epoch_pairs_read = 0
        self._buffer_start, self._buffer_taken = 0, 0
        self._epoch_rng_state = self.rng.get_state()
        if self.shuffle_each_epoch:
            self._order = self.rng.permutation(self.lines_total)
        else:
            for f in self.files:
                f.rewind()

    def reset(self):
        self._reset()

    def at_epoch_start(self):
        """Whether the next batch is the epoch's first (not so after
        ``restore`` of a position within it)."""
        return self.epoch_pairs_read == 0

    def count_kept(self, maxlen=None):
        """(lines kept, lines) of an epoch: the lines that the iterator
        yields (some side at most its ``maxlen`` words long) and, with
        ``maxlen``, that are also shorter than ``maxlen`` on every side (the
        rule of prepare_data and prepare_monolingual).  One pass over the
        files, before anything is compiled."""
        lengths = [sentence_lengths(f.path) for f in self.files]
        kept = numpy.any([n <= self.maxlen for n in lengths], axis=0)
        if maxlen is not None:
            kept &= numpy.all([n < maxlen for n in lengths], axis=0)
        return int(kept.sum()), self.lines_total

    def position(self):
        """Where the iterator stands in this epoch, as numbers and arrays (for
        a checkpoint): the epoch's random state, the first line of the
        current buffer, and how many lines were taken from that buffer."""
        name, keys, pos, has_gauss, gauss = self._epoch_rng_state
        return {'rng_keys': keys, 'rng_pos': pos, 'rng_has_gauss': has_gauss,
                'rng_gauss': gauss, 'buffer_start': self._buffer_start,
                'buffer_taken': self._buffer_taken}

    def restore(self, position):
        """Continue exactly where ``position()`` was taken: the same
        permutation, the same buffer, the same lines left in it."""
        self.rng.set_state(('MT19937', numpy.asarray(position['rng_keys']),
                            int(position['rng_pos']), int(position['rng_has_gauss']),
                            float(position['rng_gauss'])))
        self._reset()
        start, taken = int(position['buffer_start']), int(position['buffer_taken'])
        for _ in range(start):   # sequential files: skip to the buffer's start
            self._read_line()
        if taken:
            self._fill_buffer()
            for buf in self.buffers:
                del buf[len(buf) - taken:]
            self._buffer_taken = taken

    def _read_line(self):
        """The tokens of the next line of every file in this epoch, or None."""
        i = self.epoch_pairs_read
        if i >= self.lines_total:
            return None
        if self.shuffle_each_epoch:
            line = int(self._order[i])
            raws = [f.line_at(line) for f in self.files]
        else:
            line = i
            raws = [f.readline() for f in self.files]
        self.epoch_pairs_read += 1
        return [_tokens(raw, f.path, line + 1) for raw, f in zip(raws, self.files)]

    def _fill_buffer(self):
        self._buffer_start, self._buffer_taken = self.epoch_pairs_read, 0
        for _ in range(self.k):
            item = self._read_line()
            if item is None:
                break
            for buf, tokens in zip(self.buffers, item):
                buf.append(tokens)
        tlen = numpy.array([len(t) for t in self.buffers[-1]])
        tidx = tlen.argsort()
        self.buffers = [[buf[i] for i in tidx] for buf in self.buffers]

    def __iter__(self):
        return self

    def __next__(self):
        batch = tuple([] for _ in self.files)
        while not batch[0]:
            if not self.buffers[0]:
                self._fill_buffer()
                if not self.buffers[0]:
                    self._reset()
                    raise StopIteration
            while self.buffers[0]:
                self._buffer_taken += 1
                ids = [words_to_ids(buf.pop(), d, n)
                       for buf, d, n in zip(self.buffers, self.dicts, self.n_words)]
                if all(len(s) > self.maxlen for s in ids):
                    continue
                for side, s in zip(batch, ids):
                    side.append(s)
                if len(batch[0]) >= self.batch_size:
                    break
        return batch

    next = __next__

    def close(self):
        """Close the files (and remove a decompressed temporary copy)."""
        for f in getattr(self, 'files', []):
            f.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


class TextIterator(CorpusIterator):
    """Batches ``(source, target)`` of id lists from a parallel corpus."""

    def __init__(self, source, target, source_dict, target_dict,
                 batch_size=128, maxlen=100, n_words_source=-1,
                 n_words_target=-1, **kwargs):
        super(TextIterator, self).__init__(
            [source, target], [source_dict, target_dict],
            [n_words_source, n_words_target], batch_size=batch_size,
            maxlen=maxlen, **kwargs)


class MonolingualIterator(CorpusIterator):
    """Batches ``(sentences,)`` of id lists from one text file (language_model/lm.py)."""

    def __init__(self, path, word_dict, batch_size=128, maxlen=100, n_words=-1,
                 **kwargs):
        super(MonolingualIterator, self).__init__(
            [path], [word_dict], [n_words], batch_size=batch_size, maxlen=maxlen,
            **kwargs)
