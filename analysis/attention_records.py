"""Reading and checking what ``translate.py --alignments FILE`` writes.

One JSON object a line::

    {"id": i, "score": s, "source": [tokens..., "<eos>"],
     "target": [tokens..., "<eos>" when finished],
     "source_attention": [[...], ...], "previous_attention": [[...], ...],
     "inference": "authors"}          # optional; absent means "training"

Row t (0-based) of each matrix is the prediction of output token t.
``previous_attention[t]`` holds t+1 weights over *items*:

* training inference (the training graph, docs/equations.md#attentive-residual): item 0 is
  the start (the zero embedding, or s_init for the memory and self-attentive
  RNNs) and item j >= 1 stands for output token j-1;
* the authors' inference (docs/equations.md#the-authors-inference): items 0 and 1 are both
  start rows and item j >= 2 stands for output token j-2, so the token just
  before the prediction is never visible.

:class:`Record` hides this difference: ``n_start`` is the number of start
items and :meth:`Record.word_weights` gives the weights over output tokens.
Bad input raises :class:`text_io.InputError` naming the file and line.
"""
import json

import numpy

from machinery import vocab
from machinery.text_io import InputError, iter_lines, read_lines

EOS = '<eos>'
START_ITEMS = {'training': 1, 'authors': 2}
SUM_TOLERANCE = 1e-3        # weights are float32 printed by json: rows sum to 1 +- this
REQUIRED = ('id', 'source', 'target', 'source_attention', 'previous_attention')


class Record:
    """One translated sentence and its attention matrices."""

    def __init__(self, number, source, target, source_attention, previous, inference):
        self.number = number                  # 0-based sentence number (= id)
        self.source = source                  # source tokens, '<eos>' included
        self.target = target                  # output tokens, '<eos>' when finished
        self.source_attention = source_attention   # len(target) x len(source)
        self.previous = previous              # list of 1-d arrays, row t has t+1 items
        self.inference = inference
        self.n_start = START_ITEMS[inference]

    @property
    def words(self):
        """The output tokens without the final '<eos>'."""
        return self.target[:-1] if self.target and self.target[-1] == EOS else self.target

    def word_weights(self, t):
        """Weights of prediction t over output tokens 0 .. k-1 (k visible tokens)."""
        return self.previous[t][self.n_start:]

    def start_weight(self, t):
        """Total weight of prediction t on the start item(s)."""
        return float(self.previous[t][:self.n_start].sum())

    def item_labels(self, n_rows):
        """Axis labels of the items of rows 0 .. n_rows-1: start(s), then tokens."""
        starts = ['<s>'] * min(self.n_start, n_rows)
        return starts + self.target[:max(n_rows - self.n_start, 0)]

    def word_matrix(self):
        """n x n weights W[t, k] of predicting word t on word k (0 where not visible).

        n = len(self.words): the '<eos>' prediction and the start items are left out.
        """
        n = len(self.words)
        m = numpy.zeros((n, n))
        for t in range(n):
            w = self.word_weights(t)
            m[t, :len(w)] = w
        return m


def _parse_json(line, path, number):
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as e:
        raise InputError('%s: line %d: not valid JSON (%s at column %d); is it a '
                         'translate.py --alignments file?' % (path, number, e.msg, e.colno))
    if not isinstance(obj, dict):
        raise InputError('%s: line %d: a JSON object was expected' % (path, number))
    missing = [k for k in REQUIRED if k not in obj]
    if missing:
        raise InputError('%s: line %d: no field %s (written by an older translate.py? '
                         'translate again with --alignments)'
                         % (path, number, ', '.join(repr(k) for k in missing)))
    return obj


def _matrix_rows(value, what, where):
    if not isinstance(value, list) or not all(isinstance(r, list) for r in value):
        raise InputError('%s: %s is not a list of rows of numbers' % (where, what))
    try:
        return [numpy.asarray(r, dtype='float64') for r in value]
    except (TypeError, ValueError):
        raise InputError('%s: %s holds something that is not a number' % (where, what))


def _check_source_attention(rows, n_src, n_trg, where):
    if len(rows) != n_trg:
        raise InputError('%s: source_attention has %d rows for %d output tokens'
                         % (where, len(rows), n_trg))
    for t, row in enumerate(rows):
        if row.shape != (n_src,):
            raise InputError('%s: source_attention row %d has %d weights for %d source '
                             'tokens' % (where, t, row.size, n_src))
    return numpy.array(rows).reshape(n_trg, n_src)


def _check_previous(rows, n_trg, where):
    """Each row t: t+1 non-negative weights summing to 1."""
    if not rows:
        raise InputError('%s: previous_attention is empty: the model has no target-side '
                         'attention (baseline decoder); use the residual, memory or '
                         'self-attentive decoder' % where)
    if len(rows) != n_trg:
        raise InputError('%s: previous_attention has %d rows for %d output tokens'
                         % (where, len(rows), n_trg))
    for t, row in enumerate(rows):
        if row.shape != (t + 1,):
            raise InputError('%s: previous_attention row %d has %d weights, %d expected'
                             % (where, t, row.size, t + 1))
        total = row.sum()
        if total == 0:
            raise InputError('%s: previous_attention row %d is all zero: the model has '
                             'no target-side attention (mean residual decoder?)'
                             % (where, t))
        if abs(total - 1) > SUM_TOLERANCE or (row < 0).any():
            raise InputError('%s: previous_attention row %d is not a distribution '
                             '(sum %.6g)' % (where, t, total))
    return rows


def _tokens(obj, key, where):
    value = obj[key]
    if not isinstance(value, list) or not all(isinstance(w, str) for w in value):
        raise InputError('%s: %s is not a list of tokens' % (where, key))
    return value


def parse_record(line, path, number, need_previous=True):
    """A :class:`Record` from one line (number is 1-based); checks every shape."""
    obj = _parse_json(line, path, number)
    where = '%s: line %d' % (path, number)
    if obj['id'] != number - 1:
        raise InputError('%s: id %r where %d was expected (sentences must be in input '
                         'order, one a line)' % (where, obj['id'], number - 1))
    inference = obj.get('inference', 'training')
    if inference not in START_ITEMS:
        raise InputError('%s: unknown inference %r (known: %s)'
                         % (where, inference, ', '.join(START_ITEMS)))
    source, target = _tokens(obj, 'source', where), _tokens(obj, 'target', where)
    src_att = _check_source_attention(
        _matrix_rows(obj['source_attention'], 'source_attention', where),
        len(source), len(target), where)
    prev = _matrix_rows(obj['previous_attention'], 'previous_attention', where)
    if need_previous or prev:
        prev = _check_previous(prev, len(target), where)
    return Record(number - 1, source, target, src_att, prev, inference)


def read_records(path, need_previous=True, progress=None):
    """All records of an alignments file, checked; ``progress(n)`` after each."""
    records = []
    for number, line in enumerate(iter_lines(path), 1):
        if not line.strip():
            raise InputError('%s: line %d is empty' % (path, number))
        records.append(parse_record(line, path, number, need_previous))
        if progress is not None:
            progress(number)
    if not records:
        raise InputError('%s: empty file, no alignments in it' % path)
    return records


def check_source(records, alignments_path, source_path):
    """InputError unless the records were translated from ``source_path``."""
    lines = read_lines(source_path, what='source sentences')
    if len(lines) != len(records):
        raise InputError('%s has %d sentences but %s has %d lines: the alignments come '
                         'from another source file'
                         % (alignments_path, len(records), source_path, len(lines)))
    for number, (line, record) in enumerate(zip(lines, records), 1):
        if vocab.words(line) + [EOS] != record.source:
            raise InputError('%s: line %d: the source tokens differ from %s line %d: the '
                             'alignments come from another source file'
                             % (alignments_path, number, source_path, number))
