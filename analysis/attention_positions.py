"""Where the target-side attention looks, by relative position (NAACL section 8.1,
Figure 2; AAAI Figure 3).

Relative position -d (d = 1, 2, ...) of prediction t is output token t-d.  For
each prediction that sees at least one output token (the start items are not
words and take part in neither figure):

* ``max_attention_percent[d-1]`` (NAACL Fig. 2, AAAI Fig. 3a): the preceding
  token with the highest weight (ties: the nearest) is counted at its relative
  position; the count at -d is divided by the number of predictions that had a
  token at -d, i.e. that had at least d previous words (normalising by the
  number of previous words at the time of each prediction), times 100;
* ``mean_weight[d-1]`` (AAAI Fig. 3b): the mean weight on the token at -d over
  the same predictions.

Positions beyond ``max_position`` (50, as in the papers) are not listed, but
the arg max is taken over the whole window: a prediction whose maximum lies
farther back is counted in ``max_beyond_window`` and in the denominators of
the positions it covers.  Positions that no prediction had give ``None``.
"""
import numpy

MAX_POSITION = 50


class PositionCounts:
    """Running sums over predictions; ``add(record)`` then ``summary()``."""

    def __init__(self, max_position=MAX_POSITION):
        self.max_position = max_position
        self.hits = numpy.zeros(max_position, dtype='int64')       # arg max at -d
        self.available = numpy.zeros(max_position, dtype='int64')  # had a token at -d
        self.weight_sum = numpy.zeros(max_position)
        self.beyond = 0
        self.predictions = 0        # predictions that saw >= 1 output token
        self.start_max = 0          # ... whose start item(s) outweighed every token
        self.start_weight = 0.0
        self.sentences = 0
        self.inference = set()

    def add_prediction(self, t, words, start_weight):
        """words: weights over output tokens 0 .. k-1 at prediction t."""
        k = len(words)
        if k == 0:
            return
        self.predictions += 1
        self.start_weight += start_weight
        self.start_max += start_weight > words.max()
        distance = t - numpy.arange(k)                 # token j is at -(t - j)
        best = k - 1 - int(numpy.argmax(words[::-1]))  # nearest of equal maxima
        if distance[best] <= self.max_position:
            self.hits[distance[best] - 1] += 1
        else:
            self.beyond += 1
        inside = distance <= self.max_position
        self.available[distance[inside] - 1] += 1
        self.weight_sum[distance[inside] - 1] += words[inside]

    def add(self, record):
        self.sentences += 1
        self.inference.add(record.inference)
        for t in range(len(record.previous)):
            self.add_prediction(t, record.word_weights(t), record.start_weight(t))

    def summary(self):
        def ratio(num, den, scale=1.0):
            return [float(scale * n / d) if d else None for n, d in zip(num, den)]
        n = max(self.predictions, 1)
        return {
            'sentences': self.sentences,
            'predictions': self.predictions,
            'inference': '+'.join(sorted(self.inference)),
            'max_attention_percent': ratio(self.hits, self.available, 100.0),
            'mean_weight': ratio(self.weight_sum, self.available),
            'max_attention_count': self.hits.tolist(),
            'predictions_with_position': self.available.tolist(),
            'max_beyond_window': self.beyond,
            'start_max_percent': 100.0 * self.start_max / n,
            'start_mean_weight': self.start_weight / n,
        }


def position_summary(records, max_position=MAX_POSITION):
    counts = PositionCounts(max_position)
    for record in records:
        counts.add(record)
    return counts.summary()
