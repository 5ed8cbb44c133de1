"""The batched beam search (beam_search.batch_beam_search).

1. On every decoder configuration: the batched search over a padded batch
   (the batched sampler: source mask, precomputed pctx) gives, sentence by
   sentence, the one-sentence search of docs/equations.md#decoding-beam-search (dl4mt's
   sampler, one sentence at a time): the same hypotheses in the same order
   with the same scores, for k = 1, 3, 5, with and without -n, sources of
   different lengths and per-sentence maxlen; and every score is the NumPy
   reference's forced cost of its hypothesis.
2. The baseline against the reference beam search (numpy_reference).
3. Ensembles: an ensemble of two baselines against a NumPy ensemble beam
   search; a mix of decoders: each hypothesis' score is the mean of the
   models' forced costs.
4. --suppress-unk and the per-word costs.
"""
import numpy as np
import pytest

import beam_search
import numpy_reference as ref
from conftest import CONFIGS

SOURCES = [[3, 7, 1, 12, 0], [9, 0], [2, 2, 5, 11, 4, 8, 0], [5, 6, 0], [12, 1, 4, 0]]
MAXLENS = [8, 3, 8, 6, 1]


def column(ids):
    return np.array(ids, dtype='int64')[:, None]


def batched(sampler, k, maxlen=MAXLENS, **kwargs):
    x, x_mask = beam_search.padded_batch(SOURCES)
    return beam_search.batch_beam_search([sampler], x, x_mask, k, maxlen, **kwargs)


def same_beam(got, exp, what, rtol=1e-5):
    assert [h.words for h in got] == [h.words for h in exp], what
    np.testing.assert_allclose([float(h.score) for h in got], [float(h.score) for h in exp],
                               rtol=rtol, atol=1e-6, err_msg=what)


@pytest.mark.parametrize('name', list(CONFIGS))
def test_batched_equals_one_sentence_search(get_model, name):
    m = get_model(name)
    single_sampler, batch_sampler = m.sampler(), m.batched_sampler()
    assert 'pctx' in batch_sampler[1].inputs and 'x_mask' in batch_sampler[1].inputs
    p64 = m.params64()
    for k in (1, 3, 5):
        beams = batched(batch_sampler, k)
        for i, (src, maxlen) in enumerate(zip(SOURCES, MAXLENS)):
            what = '%s k=%d sentence %d' % (name, k, i)
            single = beam_search.beam_search(*single_sampler, column(src), k, maxlen)
            same_beam(beams[i], single, what)
            for normalize in (False, True):
                assert (beam_search.ranked(beams[i], normalize)[0][0].words ==
                        beam_search.ranked(single, normalize)[0][0].words), what
            assert all(len(h.words) <= maxlen for h in beams[i])
            if k == 3:
                for h in beams[i]:
                    cost = ref.sampler_cost(p64, m.options, column(src), h.words)
                    assert float(h.score) == pytest.approx(float(cost), rel=1e-4, abs=1e-5)
                    # attention rows: one per token, over this sentence's source
                    assert [len(a) for a in h.align] == [len(src)] * len(h.words)


@pytest.mark.parametrize('k', [1, 3])
def test_baseline_against_the_reference_beam_search(get_model, k):
    m = get_model('baseline')
    nf_init, nf_next = ref.make_sampler(m.params, m.options)
    beams = batched(m.batched_sampler(), k, maxlen=9)
    for i, src in enumerate(SOURCES):
        samples, scores = ref.beam_search(nf_init, nf_next, column(src), k=k, maxlen=9)
        assert [h.words for h in beams[i]] == [list(map(int, s)) for s in samples]
        np.testing.assert_allclose([float(h.score) for h in beams[i]], scores, rtol=1e-5)


def _numpy_ensemble(models):
    """f_init / f_next of a NumPy ensemble of baselines for ref.beam_search:
    states and contexts side by side, probabilities exp(mean log p)."""
    samplers = [ref.make_sampler(m.params, m.options) for m in models]
    d = models[0].options['dim']
    c = 2 * d

    def f_init(x):
        outs = [f(x) for f, _ in samplers]
        return [np.concatenate([o[0] for o in outs], axis=1),
                np.concatenate([o[1] for o in outs], axis=2)]

    def f_next(y_prev, ctx, state):
        outs = [f(y_prev, ctx[:, :, i * c:(i + 1) * c], state[:, i * d:(i + 1) * d])
                for i, (_, f) in enumerate(samplers)]
        log_p = sum(np.log(o[0]) for o in outs) / len(outs)
        return [np.exp(log_p), None, np.concatenate([o[2] for o in outs], axis=1)]
    return f_init, f_next


def test_ensemble_of_two_baselines_against_numpy(get_model):
    models = [get_model('baseline'), get_model('baseline_dropout')]
    x, x_mask = beam_search.padded_batch(SOURCES)
    beams = beam_search.batch_beam_search([m.batched_sampler() for m in models],
                                          x, x_mask, 3, 7)
    f_init, f_next = _numpy_ensemble(models)
    differs = False
    for i, src in enumerate(SOURCES):
        samples, scores = ref.beam_search(f_init, f_next, column(src), k=3, maxlen=7)
        assert [h.words for h in beams[i]] == [list(map(int, s)) for s in samples]
        np.testing.assert_allclose([float(h.score) for h in beams[i]], scores, rtol=1e-5)
        alone = batched(models[0].batched_sampler(), 3, maxlen=7)[i]
        differs |= [h.words for h in alone] != [h.words for h in beams[i]]
    assert differs   # the second model matters


def test_ensemble_of_different_decoders(get_model):
    """Each model carries its own state; a hypothesis' score is the mean of
    the models' costs of it (per model; the authors' inference for gru_cond_att)."""
    models = [get_model(n) for n in ('baseline', 'attentive', 'memory', 'gru_cond_att')]
    x, x_mask = beam_search.padded_batch(SOURCES)
    beams = beam_search.batch_beam_search([m.batched_sampler() for m in models],
                                          x, x_mask, 3, 6)
    for i, src in enumerate(SOURCES):
        for h in beams[i]:
            costs = [ref.sampler_cost(m.params64(), m.options, column(src), h.words)
                     for m in models]
            assert float(h.score) == pytest.approx(float(np.mean(costs)), rel=1e-4)
            # source attention: the mean over the models, a distribution
            np.testing.assert_allclose(np.sum(h.align, axis=1), 1, rtol=1e-5)


def test_suppress_unk_and_word_costs(get_model):
    m = get_model('attentive')
    # make UNK (id 1) a likely word (get_model puts the parameters back)
    bias = m.params['ff_logit_b'].copy()
    bias[1] += 2.
    m.tparams['ff_logit_b'].set_value(bias)
    p64 = m.params64()
    p64['ff_logit_b'] = bias.astype('float64')
    plain = batched(m.batched_sampler(), 5)
    assert sum(1 in h.words for hyps in plain for h in hyps) > 5
    suppressed = batched(m.batched_sampler(), 5, suppress_unk=True)
    for i, hyps in enumerate(suppressed):
        assert len(hyps) == 5
        for h in hyps:
            assert 1 not in h.words
            cost = ref.sampler_cost(p64, m.options, column(SOURCES[i]), h.words)
            assert float(h.score) == pytest.approx(float(cost), rel=1e-4, abs=1e-5)
            # per-word costs: they add up to the score; each is -log p of the
            # word in the teacher-forced pass
            assert float(np.sum(h.costs)) == pytest.approx(float(h.score), rel=1e-5)
            y = column(h.words)
            probs = ref.forward(p64, m.options, column(SOURCES[i]),
                                np.ones((len(SOURCES[i]), 1)), y,
                                np.ones(y.shape))['probs'][:, 0]
            np.testing.assert_allclose(h.costs, -np.log(probs[np.arange(len(y)), h.words]),
                                       rtol=1e-4)
    m.reset()


def test_ranked_is_the_final_beam_best_first(get_model):
    m = get_model('baseline')
    for hyps in batched(m.batched_sampler(), 5):
        for normalize in (False, True):
            entries = beam_search.ranked(hyps, normalize)
            assert sorted(h.words for h, _ in entries) == sorted(h.words for h in hyps)
            scores = [s for _, s in entries]
            assert scores == sorted(scores)
            for h, s in entries:
                assert s == pytest.approx(float(h.score) / (len(h.words) if normalize else 1))


def test_length_sorted_batches_cover_every_sentence():
    sources = [[1] * n for n in (3, 9, 1, 5, 5, 2, 7)]
    batches = beam_search.length_sorted_batches(sources, 3)
    assert sorted(i for b in batches for i in b) == list(range(len(sources)))
    assert [len(b) for b in batches] == [3, 3, 1]
    lengths = [len(sources[i]) for b in batches for i in b]
    assert lengths == sorted(lengths, reverse=True)
    x, x_mask = beam_search.padded_batch([sources[i] for i in batches[0]])
    assert x.shape == (9, 3) and x_mask.sum(0).tolist() == [9, 7, 5]
