"""The study's statistics (evaluation/study_statistics.py) against
independent computations: sacrebleu's corpus BLEU, scipy's Welch test, a
textbook Holm example, and the bootstrap's defining properties."""
import random

import numpy
import pytest
from scipy import stats

from evaluation import study_statistics as ss
from machinery.bleu import corpus_bleu_tokenized

WORDS = 'a man in red shirt is riding bike down the street dog runs'.split()


def random_lines(rng, n, lo=0, hi=12):
    return [' '.join(rng.choice(WORDS) for _ in range(rng.randint(lo, hi))) for _ in range(n)]


@pytest.mark.parametrize('seed', range(6))
def test_pooled_bleu_is_sacrebleus_corpus_bleu(seed):
    rng = random.Random(seed)
    refs = random_lines(rng, 40, 1)
    hyps = [r if rng.random() < 0.3 else h for r, h in zip(refs, random_lines(rng, 40))]
    if seed == 0:
        hyps = [h.upper() for h in hyps]          # lowercasing is part of the score
    stats_ = ss.sentence_statistics(hyps, refs, lowercase=True)
    expected = corpus_bleu_tokenized(hyps, refs, lowercase=True)['bleu']
    assert ss.pooled_bleu(stats_[None]) == pytest.approx(expected, abs=1e-9)
    # two seeds pooled: the BLEU of the concatenation
    other = random_lines(rng, 40)
    both = numpy.stack([stats_, ss.sentence_statistics(other, refs)])
    assert ss.pooled_bleu(both) == pytest.approx(
        corpus_bleu_tokenized(hyps + other, refs + refs, lowercase=True)['bleu'], abs=1e-9)
    subset = numpy.arange(0, 40, 3)
    assert ss.pooled_bleu(stats_[None], subset) == pytest.approx(corpus_bleu_tokenized(
        [hyps[i] for i in subset], [refs[i] for i in subset], lowercase=True)['bleu'], abs=1e-9)


def test_bleu_edge_cases_are_multi_bleus():
    assert ss.pooled_bleu(ss.sentence_statistics([''], ['a b'])[None]) == 0.
    # no 4-gram matches: 0, as multi-bleu
    assert ss.pooled_bleu(ss.sentence_statistics(['a b c d'], ['a b c e'])[None]) == 0.
    with pytest.raises(ValueError, match='2 hypotheses but 1 references'):
        ss.sentence_statistics(['a', 'b'], ['a'])


def test_welch_matches_scipy_and_its_interval_inverts_the_test():
    rng = numpy.random.default_rng(3)
    a, b = rng.normal(37.8, 0.2, 5), rng.normal(37.5, 0.9, 5)
    w = ss.welch(a, b)
    assert w.difference == pytest.approx(b.mean() - a.mean())
    assert w.p == pytest.approx(stats.ttest_ind(b, a, equal_var=False).pvalue)
    # the interval's ends are where the test, shifted, gives p = 0.05
    for end in (w.low, w.high):
        assert stats.ttest_ind(b - end, a, equal_var=False).pvalue == pytest.approx(0.05)
    assert ss.welch([1.], [2., 3.]) is None


def test_mean_interval_is_the_t_interval():
    values = [37.88, 37.62, 37.80, 37.5, 38.1]
    mean, half = ss.mean_interval(values)
    low, high = stats.t.interval(0.95, 4, loc=numpy.mean(values), scale=stats.sem(values))
    assert mean - half == pytest.approx(low) and mean + half == pytest.approx(high)
    assert ss.mean_interval([1.]) == (1., None)


def test_holm_textbook_example():
    # p = 0.01, 0.04, 0.03, 0.005 -> sorted 0.005*4, 0.01*3, 0.03*2, 0.04*1, made monotone
    assert ss.holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert ss.holm([None, 0.5, 0.9]) == [None, pytest.approx(1.0), pytest.approx(1.0)]


def seeds_of(rng, refs, n_seeds, quality):
    """Statistics of n_seeds systems that copy each reference with probability quality."""
    out = []
    for _ in range(n_seeds):
        hyps = [r if rng.random() < quality else h
                for r, h in zip(refs, random_lines(rng, len(refs), 1))]
        out.append(ss.sentence_statistics(hyps, refs))
    return numpy.stack(out)


def test_bootstrap_of_a_system_against_itself():
    rng = random.Random(0)
    refs = random_lines(rng, 60, 1)
    base = seeds_of(rng, refs, 3, 0.5)
    same = ss.pooled_bootstrap(base, base, n_samples=200)
    assert (same.difference, same.low, same.high, same.p) == (0., 0., 0., 1.)


def test_bootstrap_separates_a_clearly_better_system_and_not_a_coin_flip():
    rng = random.Random(1)
    refs = random_lines(rng, 200, 1)
    base, better = seeds_of(rng, refs, 3, 0.3), seeds_of(rng, refs, 2, 0.7)
    result = ss.pooled_bootstrap(base, better, n_samples=500)
    assert result.difference == pytest.approx(ss.pooled_bleu(better) - ss.pooled_bleu(base))
    assert 0 < result.low <= result.difference <= result.high and result.p < 0.01
    # the same draws again with the same seed
    assert ss.pooled_bootstrap(base, better, n_samples=500) == result
    alike = seeds_of(rng, refs, 3, 0.3)
    level = ss.pooled_bootstrap(base, alike, n_samples=500)
    assert level.low < 0 < level.high and level.p > 0.05
    # the interval covers 0 exactly when the percentile p is at least 0.05
    # (up to the resamples' granularity)
    for r in (result, level):
        assert (r.low <= 0 <= r.high) == (r.p >= 0.05)


@pytest.mark.parametrize('low, high, says', [
    (-0.63, 0.50, "no gain inside it, the papers' +0.6 to +1.4 excluded"),
    (-1.0, 0.9, "no gain and the papers' smallest (+0.6) inside it, their largest (+1.4) "
                'excluded'),
    (-2.0, 2.1, "no gain and the papers' +0.6 to +1.4 inside it: not decided"),
    (-1.0, -0.4, "behind the baseline; the papers' +0.6 to +1.4 excluded"),
    (0.2, 1.9, "ahead of the baseline; the papers' +0.6 to +1.4 inside it"),
    (0.01, 0.99, "ahead of the baseline; the papers' smallest (+0.6) inside it, their "
                 'largest (+1.4) excluded'),
    (0.8, 1.9, "ahead of the baseline; the papers' largest (+1.4) inside it, their "
               'smallest (+0.6) excluded'),
    (0.7, 1.2, "ahead of the baseline; inside the papers' +0.6 to +1.4"),
    (1.5, 2.0, "ahead of the baseline; above the papers' largest gain (+1.4)")])
def test_the_reading_of_an_interval_says_what_it_holds(low, high, says):
    """The results page's sentence for a difference's interval: an interval
    that holds 0 never says that no gain is excluded."""
    from evaluation import multi30k_results
    text = multi30k_results.reading('attentive', {'low': low, 'high': high})
    assert text == 'between %+.2f and %+.2f BLEU: %s' % (low, high, says)
    if low <= 0 <= high:
        assert 'no gain inside it' in text or 'no gain and' in text


@pytest.mark.parametrize('p_holm, kept', [(0.278, False), (0.01, True)])
def test_an_interval_off_zero_says_whether_holms_correction_keeps_it(p_holm, kept):
    """An uncorrected 95% interval that excludes 0 is not called a shown gain
    when the comparisons' correction takes it back."""
    from evaluation import multi30k_results
    text = multi30k_results.reading('attentive', {'low': 0.01, 'high': 0.99,
                                                  'p_holm': p_holm})
    assert ("not after it (Holm's p 0.278)" in text) == (not kept)
    assert text.startswith('between +0.01 and +0.99 BLEU: ahead of the baseline')


def test_a_difference_that_rounds_to_zero_is_printed_plus_zero():
    """The tables print signed differences; -0.004 rounds to '+0.00', not '-0.00'."""
    from evaluation import study_tables
    assert study_tables.difference({'difference': -0.004, 'low': -0.71, 'high': 0.0049}) == (
        '+0.00 [-0.71, +0.00]')
    assert study_tables.difference({'difference': 0.62, 'low': 0.19, 'high': 1.05}) == (
        '+0.62 [+0.19, +1.05]')
    assert study_tables.signed(-0.006) == '-0.01'
