"""The statistics of a study of decoders over seeds (the Multi30k table,
docs/multi30k.md#results): what a difference of BLEU between two decoders is,
with the uncertainty of the seeds and of the test sentences.

* :func:`welch`: the difference of two decoders' mean BLEU over their seeds,
  with its 95% confidence interval (Welch's t, the Welch-Satterthwaite degrees
  of freedom) and the two-sided p-value: the seeds are the sample.
* :func:`holm`: Holm's step-down correction of a family of p-values (the
  comparisons of every residual decoder on every test set).
* :func:`sentence_statistics` and :func:`pooled_bootstrap`: the paired
  bootstrap over the test sentences, the seeds pooled.  The pooled BLEU of a
  decoder is the corpus BLEU of its seeds' translations concatenated (the sum
  of the sentences' n-gram statistics over the seeds).  A resample draws the
  test set's sentences with replacement, the same draw for every seed and
  both decoders (a sentence and its translations by every seed stay
  together: the seeds do not multiply the test set); the interval is the
  resamples' 2.5 and 97.5 percentiles of the difference, the p-value the
  two-sided percentile p (twice the smaller share of resampled differences
  on either side of 0), the test that this interval inverts.

BLEU here is multi-bleu.perl's (tokenised text, one reference), from
per-sentence counts that machinery/bleu.py's corpus BLEU (sacrebleu) equals
(tests/test_study_statistics.py).
"""
import collections
import math

import numpy

MAX_N = 4
# a sentence's statistics: hypothesis length, reference length, then the
# clipped matches and the hypothesis' n-grams of each order 1..MAX_N
STATISTICS = 2 + 2 * MAX_N
CONFIDENCE = 0.95


# --------------------------------------------------------------------------
# over seeds

def mean_interval(values, confidence=CONFIDENCE):
    """(mean, half-width of its t confidence interval) of the values (None
    for the half-width under two values)."""
    from scipy import stats
    values = numpy.asarray(values, dtype=float)
    if len(values) < 2:
        return float(values.mean()) if len(values) else None, None
    t = stats.t.ppf(0.5 + confidence / 2, len(values) - 1)
    return float(values.mean()), float(t * values.std(ddof=1) / math.sqrt(len(values)))


Welch = collections.namedtuple('Welch', 'difference low high p df')


def welch(baseline, system, confidence=CONFIDENCE):
    """``Welch``: mean(system) - mean(baseline), its confidence interval and
    p-value by Welch's t (unequal variances), or None under two values a side."""
    from scipy import stats
    a, b = numpy.asarray(baseline, dtype=float), numpy.asarray(system, dtype=float)
    if min(len(a), len(b)) < 2:
        return None
    va, vb = a.var(ddof=1) / len(a), b.var(ddof=1) / len(b)
    difference = float(b.mean() - a.mean())
    se = math.sqrt(va + vb)
    if se == 0:
        return Welch(difference, difference, difference, 1.0 if difference == 0 else 0.0,
                     float(len(a) + len(b) - 2))
    # Welch-Satterthwaite degrees of freedom
    df = (va + vb) ** 2 / (va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1))
    half = stats.t.ppf(0.5 + confidence / 2, df) * se
    p = 2 * stats.t.sf(abs(difference) / se, df)
    return Welch(difference, difference - half, difference + half, float(p), float(df))


def holm(p_values):
    """Holm's adjusted p-values, in the given order (None stays None): the
    family-wise error rate of all of them is at most alpha where an adjusted
    p is below alpha."""
    present = sorted((p, i) for i, p in enumerate(p_values) if p is not None)
    adjusted, running = [None] * len(p_values), 0.
    for rank, (p, i) in enumerate(present):
        running = max(running, min(1., (len(present) - rank) * p))
        adjusted[i] = running
    return adjusted


# --------------------------------------------------------------------------
# over test sentences

def _ngrams(tokens, n):
    return collections.Counter(tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1))


def sentence_statistics(hyps, refs, lowercase=True):
    """(sentences, STATISTICS) int array of tokenised hypotheses against
    their one reference each: lengths, clipped n-gram matches, n-gram counts."""
    if len(hyps) != len(refs):
        raise ValueError('%d hypotheses but %d references' % (len(hyps), len(refs)))
    out = numpy.zeros((len(hyps), STATISTICS), dtype=numpy.int64)
    for row, (hyp, ref) in enumerate(zip(hyps, refs)):
        if lowercase:
            hyp, ref = hyp.lower(), ref.lower()
        h, r = hyp.split(), ref.split()
        out[row, 0], out[row, 1] = len(h), len(r)
        for n in range(1, MAX_N + 1):
            hyp_grams, ref_grams = _ngrams(h, n), _ngrams(r, n)
            out[row, 1 + n] = sum(min(c, ref_grams[g]) for g, c in hyp_grams.items())
            out[row, 1 + MAX_N + n] = max(len(h) - n + 1, 0)
    return out


def bleu_of_totals(totals):
    """multi-bleu.perl's BLEU (0-100) of summed statistics: (..., STATISTICS)
    -> (...)."""
    totals = numpy.asarray(totals, dtype=float)
    hyp_len, ref_len = totals[..., 0], totals[..., 1]
    matches, counts = totals[..., 2:2 + MAX_N], totals[..., 2 + MAX_N:]
    with numpy.errstate(divide='ignore', invalid='ignore'):
        log_precision = numpy.where(matches > 0, numpy.log(matches) - numpy.log(counts),
                                    -numpy.inf).mean(axis=-1)
        brevity = numpy.where(hyp_len < ref_len, 1. - ref_len / hyp_len, 0.)
        bleu = 100. * numpy.exp(log_precision + brevity)
    return numpy.where((hyp_len > 0) & numpy.isfinite(bleu), bleu, 0.)


Bootstrap = collections.namedtuple('Bootstrap', 'difference low high p samples')


def _resample_weights(n_sentences, n_samples, rng):
    """(n_samples, n_sentences): how often each sentence is drawn in each resample."""
    weights = numpy.zeros((n_samples, n_sentences))
    for row in weights:
        row += numpy.bincount(rng.integers(0, n_sentences, n_sentences), minlength=n_sentences)
    return weights


def pooled_bootstrap(baseline, system, n_samples=1000, seed=12345, confidence=CONFIDENCE,
                     subset=None):
    """``Bootstrap`` of pooled BLEU(system) - pooled BLEU(baseline).

    ``baseline``, ``system``: (seeds, sentences, STATISTICS) arrays (the seeds
    of each need not be the same ones, nor as many); ``subset``: the
    sentences to keep (e.g. a length bucket), all by default."""
    a, b = numpy.asarray(baseline).sum(axis=0), numpy.asarray(system).sum(axis=0)
    if subset is not None:
        a, b = a[subset], b[subset]
    observed = float(bleu_of_totals(b.sum(axis=0)) - bleu_of_totals(a.sum(axis=0)))
    weights = _resample_weights(len(a), n_samples, numpy.random.default_rng(seed))
    diffs = bleu_of_totals(weights @ b) - bleu_of_totals(weights @ a)
    tail = (1. - confidence) / 2
    low, high = numpy.quantile(diffs, [tail, 1. - tail])
    p = min(1., 2. * min(numpy.mean(diffs <= 0.), numpy.mean(diffs >= 0.)))
    return Bootstrap(observed, float(low), float(high), float(p), n_samples)


def pooled_bleu(statistics, subset=None):
    """The pooled BLEU of (seeds, sentences, STATISTICS) statistics."""
    totals = numpy.asarray(statistics).sum(axis=0)
    if subset is not None:
        totals = totals[subset]
    return float(bleu_of_totals(totals.sum(axis=0)))
