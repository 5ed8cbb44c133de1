"""Parallel-corpus batches, as the original dl4mt-tutorial iterator makes them.

``TextIterator`` reads a source and a target file line by line (plain or
``.gz``) and yields ``(source, target)`` batches: lists of sentences, each a
list of word ids.  ``prepare_data`` turns a batch into the padded, time-major
matrices and masks that the model takes.

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

from model_io import load_dictionary
from text_io import (InputError, check_readable, one_line as _one_line,
                     open_binary as _open_binary)
from vocab import words_to_ids

_CHUNK = 1 << 20


def prepare_data(seqs_x, seqs_y, maxlen=None, n_words_src=30000,
                 n_words=30000):
    """Padded time-major id matrices and float32 masks for a batch.

    With ``maxlen``, pairs where either side has ``len >= maxlen`` are
    dropped, and ``(None, None, None, None)`` is returned if none is left.
    Returns ``x, x_mask, y, y_mask``: ids int64 of shape
    ``(max_len_in_batch + 1, n)`` padded with 0 (eos), masks 1 on the first
    ``len + 1`` rows.  ``n_words_src`` and ``n_words`` are unused, as in the
    original.
    """
    lengths_x = [len(s) for s in seqs_x]
    lengths_y = [len(s) for s in seqs_y]

    if maxlen is not None:
        kept = [(sx, sy) for sx, sy, lx, ly
                in zip(seqs_x, seqs_y, lengths_x, lengths_y)
                if lx < maxlen and ly < maxlen]
        seqs_x = [sx for sx, _ in kept]
        seqs_y = [sy for _, sy in kept]
        lengths_x = [len(s) for s in seqs_x]
        lengths_y = [len(s) for s in seqs_y]
    if len(lengths_x) < 1 or len(lengths_y) < 1:
        return None, None, None, None

    n_samples = len(seqs_x)
    maxlen_x = numpy.max(lengths_x) + 1
    maxlen_y = numpy.max(lengths_y) + 1

    x = numpy.zeros((maxlen_x, n_samples), dtype='int64')
    y = numpy.zeros((maxlen_y, n_samples), dtype='int64')
    x_mask = numpy.zeros((maxlen_x, n_samples), dtype='float32')
    y_mask = numpy.zeros((maxlen_y, n_samples), dtype='float32')
    for idx, (s_x, s_y) in enumerate(zip(seqs_x, seqs_y)):
        x[:lengths_x[idx], idx] = s_x
        x_mask[:lengths_x[idx] + 1, idx] = 1.
        y[:lengths_y[idx], idx] = s_y
        y_mask[:lengths_y[idx] + 1, idx] = 1.
    return x, x_mask, y, y_mask


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


class TextIterator(object):
    """Batches of (source, target) id lists from a parallel corpus."""

    def __init__(self, source, target, source_dict, target_dict,
                 batch_size=128, maxlen=100, n_words_source=-1,
                 n_words_target=-1, shuffle_each_epoch=False,
                 sort_k_batches=20, seed=1234):
        source, target = os.fspath(source), os.fspath(target)
        self.shuffle_each_epoch = shuffle_each_epoch
        self.source = _LineFile(source, shuffle_each_epoch)
        try:
            self.target = _LineFile(target, shuffle_each_epoch)
        except BaseException:
            self.source.close()
            raise
        if self.source.n_lines != self.target.n_lines:
            self.close()
            raise InputError(
                '%s has %d lines but %s has %d: the source and target files '
                'must have one sentence per line, aligned'
                % (source, self.source.n_lines, target, self.target.n_lines))
        self.lines_total = self.source.n_lines

        self.source_dict = self._dictionary(source_dict)
        self.target_dict = self._dictionary(target_dict)
        self.batch_size = batch_size
        self.maxlen = maxlen
        self.n_words_source = n_words_source
        self.n_words_target = n_words_target
        self.k = batch_size * sort_k_batches
        self.rng = numpy.random.RandomState(seed)

        self.source_buffer = []
        self.target_buffer = []
        self._order = None
        self._reset()

    def _dictionary(self, d):
        if isinstance(d, dict):
            return d
        try:
            return load_dictionary(d)
        except BaseException:
            self.close()
            raise

    def _reset(self):
        """Go back to the first pair (new permutation when shuffling)."""
        self.source_buffer = []
        self.target_buffer = []
        self.epoch_pairs_read = 0
        self._buffer_start, self._buffer_taken = 0, 0
        self._epoch_rng_state = self.rng.get_state()
        if self.shuffle_each_epoch:
            self._order = self.rng.permutation(self.lines_total)
        else:
            self.source.rewind()
            self.target.rewind()

    def reset(self):
        self._reset()

    def position(self):
        """Where the iterator stands in this epoch, as numbers and arrays (for
        a checkpoint): the epoch's random state, the first pair of the
        current buffer, and how many pairs were taken from that buffer."""
        name, keys, pos, has_gauss, gauss = self._epoch_rng_state
        return {'rng_keys': keys, 'rng_pos': pos, 'rng_has_gauss': has_gauss,
                'rng_gauss': gauss, 'buffer_start': self._buffer_start,
                'buffer_taken': self._buffer_taken}

    def restore(self, position):
        """Continue exactly where ``position()`` was taken: the same
        permutation, the same buffer, the same pairs left in it."""
        self.rng.set_state(('MT19937', numpy.asarray(position['rng_keys']),
                            int(position['rng_pos']), int(position['rng_has_gauss']),
                            float(position['rng_gauss'])))
        self._reset()
        start, taken = int(position['buffer_start']), int(position['buffer_taken'])
        for _ in range(start):   # sequential files: skip to the buffer's start
            self._read_pair()
        if taken:
            self._fill_buffer()
            del self.source_buffer[len(self.source_buffer) - taken:]
            del self.target_buffer[len(self.target_buffer) - taken:]
            self._buffer_taken = taken

    def _read_pair(self):
        """Next raw (source, target) line pair of this epoch, or None."""
        i = self.epoch_pairs_read
        if i >= self.lines_total:
            return None
        if self.shuffle_each_epoch:
            line = int(self._order[i])
            ss, tt = self.source.line_at(line), self.target.line_at(line)
        else:
            line = i
            ss, tt = self.source.readline(), self.target.readline()
        self.epoch_pairs_read += 1
        return (_tokens(ss, self.source.path, line + 1),
                _tokens(tt, self.target.path, line + 1))

    def _fill_buffer(self):
        self._buffer_start, self._buffer_taken = self.epoch_pairs_read, 0
        for _ in range(self.k):
            pair = self._read_pair()
            if pair is None:
                break
            self.source_buffer.append(pair[0])
            self.target_buffer.append(pair[1])
        tlen = numpy.array([len(t) for t in self.target_buffer])
        tidx = tlen.argsort()
        self.source_buffer = [self.source_buffer[i] for i in tidx]
        self.target_buffer = [self.target_buffer[i] for i in tidx]

    def __iter__(self):
        return self

    def __next__(self):
        source, target = [], []
        while not source:
            if not self.source_buffer:
                self._fill_buffer()
                if not self.source_buffer:
                    self._reset()
                    raise StopIteration
            while self.source_buffer:
                self._buffer_taken += 1
                ss = words_to_ids(self.source_buffer.pop(), self.source_dict,
                                  self.n_words_source)
                tt = words_to_ids(self.target_buffer.pop(), self.target_dict,
                                  self.n_words_target)
                if len(ss) > self.maxlen and len(tt) > self.maxlen:
                    continue
                source.append(ss)
                target.append(tt)
                if len(source) >= self.batch_size:
                    break
        return source, target

    next = __next__

    def close(self):
        """Close the files (and remove a decompressed temporary copy)."""
        for side in ('source', 'target'):
            f = getattr(self, side, None)
            if isinstance(f, _LineFile):
                f.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass
