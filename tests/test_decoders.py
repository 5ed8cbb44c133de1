"""Every decoder: the training graph and the one-step sampler agree.

For each sentence of a padded batch, the training graph's cost must equal the
sum of -log p that f_init/f_next give when fed the reference prefix (this
catches any mismatch between the two graphs: masks, shifts, carried history).
The sampler's attention over previous words/states must equal the training
graph's row for row.  Parameter counts at the papers' size are in
test_training_math.py.
"""
import numpy as np
import pytest

from conftest import CONFIGS, make_batch

DECODING_CONFIGS = [name for name in CONFIGS if name != 'baseline_dropout']


@pytest.mark.parametrize('name', DECODING_CONFIGS)
def test_training_cost_equals_sampler_cost(get_model, name):
    model = get_model(name)
    model.reset()
    nmt = model.nmt
    x, x_mask, y, y_mask = make_batch(7)
    out = model.forward(x, x_mask, y, y_mask)
    f_init, f_next = model.sampler()
    for n in range(x.shape[1]):
        lx, ly = int(x_mask[:, n].sum()), int(y_mask[:, n].sum())
        xs = x[:lx, n][:, None]
        costs, prev = force_decode_with_attention(nmt, f_init, f_next, xs, y[:ly, n],
                                                  model.options)
        np.testing.assert_allclose(costs.sum(), out['cost'][n], rtol=1e-5,
                                   err_msg='%s sentence %d' % (name, n))
        if out['prev_alphas'] is not None:
            for t in range(ly):
                np.testing.assert_allclose(prev[t], out['prev_alphas'][t, n, :t + 1],
                                           rtol=1e-4, atol=1e-6)
                # nothing outside the window
                assert np.all(out['prev_alphas'][t, n, t + 1:] == 0)


def force_decode_with_attention(nmt, f_init, f_next, x, y, options):
    """-log p of each reference token, and the attention over the history."""
    costs = nmt.force_decode(f_init, f_next, x, y, options)
    state, ctx = f_init(x)[:2]
    history = nmt._empty_history(options, 1) if nmt.history_dims(options) else None
    prev, attention = np.array([-1], dtype='int64'), []
    for word in y:
        ret = f_next(*([prev, ctx, state] + (history or [])))
        state = ret[2]
        if history is not None:
            history = [ret[4], ret[5]]
            attention.append(ret[6][0])
        prev = np.array([word], dtype='int64')
    return costs, attention


@pytest.mark.parametrize('name', ['residual_att_content', 'memory_content'])
def test_beam_search_carries_history_per_hypothesis(get_model, name):
    """With k > 1 the history is reordered with the hypotheses: every returned
    hypothesis' score equals the forced-decoding cost of its own words."""
    model = get_model(name)
    model.reset()
    nmt = model.nmt
    f_init, f_next = model.sampler()
    x = np.array([[3], [5], [2], [0]], dtype='int64')
    samples, scores = nmt.gen_sample(model.tparams, f_init, f_next, x, model.options,
                                     k=4, maxlen=6, stochastic=False)
    assert len(samples) == 4
    for s, score in zip(samples, scores):
        forced = nmt.force_decode(f_init, f_next, x, np.array(s), model.options)
        np.testing.assert_allclose(forced.sum(), score, rtol=1e-5)
