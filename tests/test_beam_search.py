"""Beam search (docs/equations.md#decoding-beam-search).

1. A hand-checkable case: fake numpy f_init/f_next over a 4-word vocabulary
   (0 = eos, 1, 2, 3), run through both the reference beam search and the
   project's gen_sample.
2. The project's gen_sample on a real tiny compiled model against the
   reference beam search driven by the same compiled f_init/f_next (and by
   the reference's own numpy f_init/f_next).
3. Every decoder variant: the score gen_sample reports for a hypothesis equals
   the teacher-forced NumPy cost of that hypothesis.
"""
import math

import numpy as np
import pytest

import numpy_reference as ref
from conftest import CONFIGS

# ---------------------------------------------------------------------------
# 1. hand-checkable case
# ---------------------------------------------------------------------------
# First-order model: p(next word | previous word), the previous word -1 being
# the start.  Columns: eos, w1, w2, w3.
#   P[-1] = [.3, .4, .2, .1]
#   P[1]  = [.2, .1, .6, .1]
#   P[2]  = [.6, .2, .1, .1]
#   P[3]  = [.9, .05, .03, .02]
# Scores are -log of the product of the probabilities.
#
# k = 1: start -> w1 (.4); w1 -> w2 (.4*.6 = .24); w2 -> eos (.24*.6 = .144).
#   samples [[1, 2, 0]], scores [-ln .144]; normalised -ln(.144)/3.
# k = 2: step 0, best two of (.3, .4, .2, .1): [1] .4 (live), [0] .3 (finished,
#   dead = 1).  step 1, k - dead = 1 from [1]: [1,2] .24.  step 2, from [1,2]:
#   [1,2,0] .144 -> dead = 2, stop.
#   samples [[0], [1, 2, 0]], scores [-ln .3 = 1.204, -ln .144 = 1.938]:
#   unnormalised best [0]; normalised 1.204/1 vs 1.938/3 = 0.646 -> [1, 2, 0].
# k = 3: step 0: [1] .4, [0] .3 (dead = 1), [2] .2.  step 1, best two of
#   [1,0] .08, [1,1] .04, [1,2] .24, [1,3] .04, [2,0] .12, [2,1] .04, [2,2] .02,
#   [2,3] .02: [1,2] .24 (live), [2,0] .12 (dead = 2).  step 2, best one from
#   [1,2]: [1,2,0] .144 (dead = 3), stop.
#   samples [[0], [2, 0], [1, 2, 0]], scores -ln(.3, .12, .144)
#   = (1.204, 2.120, 1.938): unnormalised best [0]; normalised
#   (1.204, 1.060, 0.646) -> [1, 2, 0].
# maxlen = 2, k = 2: step 0 as for k = 2; step 1 leaves [1,2] (.24) live and
#   the loop ends: it joins the list unfinished.
#   samples [[0], [1, 2]], scores -ln(.3, .24).
P = {-1: [.3, .4, .2, .1],
     1: [.2, .1, .6, .1],
     2: [.6, .2, .1, .1],
     3: [.9, .05, .03, .02]}

EXPECTED = {
    1: ([[1, 2, 0]], [.144]),
    2: ([[0], [1, 2, 0]], [.3, .144]),
    3: ([[0], [2, 0], [1, 2, 0]], [.3, .12, .144]),
}
EXPECTED_BEST = {  # (unnormalised, normalised)
    1: ([1, 2, 0], [1, 2, 0]),
    2: ([0], [1, 2, 0]),
    3: ([0], [1, 2, 0]),
}


class FakeModel(object):
    """f_init/f_next with dl4mt's signatures; checks what it is given."""
    T_SRC = 4

    def __init__(self):
        self.calls = 0

    def f_init(self, x):
        assert x.shape == (self.T_SRC, 1)
        state = np.full((1, 2), -7., dtype='float32')           # "no word yet"
        ctx = np.zeros((self.T_SRC, 1, 3), dtype='float32')
        return [state, ctx]

    def f_next(self, y_prev, ctx, state):
        self.calls += 1
        y_prev = np.asarray(y_prev)
        n = y_prev.shape[0]
        assert ctx.shape == (self.T_SRC, n, 3), ctx.shape
        assert np.asarray(state).shape == (n, 2)
        probs = np.array([P[int(w)] for w in y_prev], dtype='float32')
        # the state remembers the word just read and the number of words so far
        next_state = np.stack([y_prev.astype('float32'),
                               np.asarray(state)[:, 1] + 1], axis=1).astype('float32')
        alpha = np.full((n, self.T_SRC), 1. / self.T_SRC, dtype='float32')
        return [probs, probs.argmax(axis=1), next_state, alpha]

    def sampler(self):
        """The two functions as the project's named sampler (no carried state)."""
        import sampler
        return (sampler.StepFunction(self.f_init, sampler.SAMPLER_INIT_INPUTS,
                                     sampler.SAMPLER_INIT_OUTPUTS),
                sampler.StepFunction(self.f_next, sampler.SAMPLER_STEP_INPUTS,
                                     sampler.SAMPLER_STEP_OUTPUTS))


def _x():
    return np.array([[5], [6], [7], [0]], dtype='int64')


def _check(samples, scores, k):
    exp_samples, exp_probs = EXPECTED[k]
    assert [list(map(int, s)) for s in samples] == exp_samples
    np.testing.assert_allclose(np.asarray(scores, dtype='float64'),
                               [-math.log(p) for p in exp_probs], rtol=1e-6)


@pytest.mark.parametrize('k', [1, 2, 3])
def test_reference_beam_by_hand(k):
    fake = FakeModel()
    samples, scores = ref.beam_search(fake.f_init, fake.f_next, _x(), k=k, maxlen=30)
    _check(samples, scores, k)
    best_raw, best_norm = EXPECTED_BEST[k]
    assert ref.best_hypothesis(samples, scores, normalise=False) == best_raw
    assert ref.best_hypothesis(samples, scores, normalise=True) == best_norm
    np.testing.assert_allclose(ref.normalise_scores(samples, scores),
                               [-math.log(p) / len(s) for s, p in zip(*EXPECTED[k])],
                               rtol=1e-6)


@pytest.mark.parametrize('k', [1, 2, 3])
def test_gen_sample_by_hand(nmt_module, k):
    import beam_search
    f_init, f_next = FakeModel().sampler()
    opts = nmt_module.fill_options(dict(dim_word=6, dim=5, n_words_src=13, n_words=4,
                                        decoder='gru_cond'))
    samples, scores = nmt_module.gen_sample(None, f_init, f_next, _x(), opts,
                                            trng=None, k=k, maxlen=30, stochastic=False,
                                            argmax=False)
    _check(samples, scores, k)
    # the translation: the first of the ranked list, as translate.py picks it
    hyps = beam_search.beam_search(f_init, f_next, _x(), k, 30)
    best_raw, best_norm = EXPECTED_BEST[k]
    assert list(beam_search.ranked(hyps, False)[0][0].words) == best_raw
    assert list(beam_search.ranked(hyps, True)[0][0].words) == best_norm


def test_maxlen_leaves_unfinished_hypotheses(nmt_module):
    fake = FakeModel()
    samples, scores = ref.beam_search(fake.f_init, fake.f_next, _x(), k=2, maxlen=2)
    assert samples == [[0], [1, 2]]
    np.testing.assert_allclose(scores, [-math.log(.3), -math.log(.24)], rtol=1e-6)
    f_init, f_next = FakeModel().sampler()
    opts = nmt_module.fill_options(dict(dim_word=6, dim=5, n_words_src=13, n_words=4))
    samples, scores = nmt_module.gen_sample(None, f_init, f_next, _x(), opts,
                                            k=2, maxlen=2, stochastic=False)
    assert [list(map(int, s)) for s in samples] == [[0], [1, 2]]
    np.testing.assert_allclose(np.asarray(scores, 'float64'),
                               [-math.log(.3), -math.log(.24)], rtol=1e-6)


# ---------------------------------------------------------------------------
# 2. a real tiny compiled model (baseline)
# ---------------------------------------------------------------------------
SOURCES = [np.array([[3], [7], [1], [12], [0]], dtype='int64'),
           np.array([[9], [0]], dtype='int64'),
           np.array([[2], [2], [5], [11], [4], [8], [0]], dtype='int64')]


def _same_result(got, exp, what):
    (gs, gsc), (es, esc) = got, exp
    assert [list(map(int, s)) for s in gs] == [list(map(int, s)) for s in es], what
    np.testing.assert_allclose(np.asarray(gsc, 'float64'), np.asarray(esc, 'float64'),
                               rtol=1e-4, atol=1e-5, err_msg=what)


@pytest.mark.parametrize('k', [1, 2, 3])
def test_gen_sample_real_model_vs_reference(get_model, nmt_module, k):
    m = get_model('baseline')
    f_init, f_next = m.sampler()
    nf_init, nf_next = ref.make_sampler(m.params64(), m.options)
    for i, x in enumerate(SOURCES):
        got = nmt_module.gen_sample(m.tparams, f_init, f_next, x, m.options,
                                    trng=m.graph['trng'], k=k, maxlen=12,
                                    stochastic=False)[:2]
        # reference beam search over the project's compiled f_init/f_next
        same_fns = ref.beam_search(f_init, f_next, x, k=k, maxlen=12)
        _same_result(got, same_fns, 'sentence %d, k=%d, compiled f_next' % (i, k))
        # reference beam search over the reference's numpy f_init/f_next
        own = ref.beam_search(nf_init, nf_next, x, k=k, maxlen=12)
        _same_result(got, own, 'sentence %d, k=%d, numpy f_next' % (i, k))
        assert len(got[0]) == k


def test_greedy_argmax_sampling_is_beam_one(get_model, nmt_module):
    m = get_model('baseline')
    f_init, f_next = m.sampler()
    for x in SOURCES:
        beam = nmt_module.gen_sample(m.tparams, f_init, f_next, x, m.options,
                                     trng=m.graph['trng'], k=1, maxlen=12,
                                     stochastic=False)[:2]
        greedy = nmt_module.gen_sample(m.tparams, f_init, f_next, x, m.options,
                                       trng=m.graph['trng'], k=1, maxlen=12,
                                       stochastic=True, argmax=True)[:2]
        # the stochastic path returns one sample (a list of ids) and one score
        assert list(map(int, greedy[0])) == list(map(int, beam[0][0]))
        assert float(greedy[1]) == pytest.approx(float(beam[1][0]), rel=1e-4)


# ---------------------------------------------------------------------------
# 3. every variant: reported scores are the teacher-forced costs
# ---------------------------------------------------------------------------
@pytest.mark.parametrize('name', [n for n in CONFIGS if n not in ('baseline_dropout',)])
def test_gen_sample_scores_are_forced_costs(get_model, nmt_module, name):
    m = get_model(name)
    f_init, f_next = m.sampler()
    p64 = m.params64()
    for x in SOURCES[:2]:
        samples, scores = nmt_module.gen_sample(m.tparams, f_init, f_next, x, m.options,
                                                trng=m.graph['trng'], k=3, maxlen=8,
                                                stochastic=False)[:2]
        assert len(samples) == 3
        for s, sc in zip(samples, scores):
            cost = ref.sampler_cost(p64, m.options, x, s)
            assert float(sc) == pytest.approx(float(cost), rel=1e-4, abs=1e-5), \
                '%s: hypothesis %s' % (name, s)
