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

import beam_search

from conftest import CONFIGS, make_batch

# the sampler of the authors' inference (the alias 'gru_cond_att') computes
# another summary than training does, on purpose: test_authors_inference.py
DECODING_CONFIGS = [name for name in CONFIGS if name != 'baseline_dropout'
                    and CONFIGS[name].get('decoder') != 'gru_cond_att']


@pytest.mark.parametrize('name', DECODING_CONFIGS)
def test_training_cost_equals_sampler_cost(get_model, name):
    model = get_model(name)
    model.reset()
    x, x_mask, y, y_mask = make_batch(7)
    out = model.forward(x, x_mask, y, y_mask)
    f_init, f_next = model.sampler()
    assert ('prev_alpha' in f_next.outputs) == (out['prev_alphas'] is not None)
    for n in range(x.shape[1]):
        lx, ly = int(x_mask[:, n].sum()), int(y_mask[:, n].sum())
        xs = x[:lx, n][:, None]
        costs, prev = beam_search.force_decode(f_init, f_next, xs, y[:ly, n],
                                               return_attention=True)
        np.testing.assert_allclose(costs.sum(), out['cost'][n], rtol=1e-5,
                                   err_msg='%s sentence %d' % (name, n))
        if out['prev_alphas'] is not None:
            for t in range(ly):
                np.testing.assert_allclose(prev[t], out['prev_alphas'][t, n, :t + 1],
                                           rtol=1e-4, atol=1e-6)
                # nothing outside the window
                assert np.all(out['prev_alphas'][t, n, t + 1:] == 0)


@pytest.mark.parametrize('name', ['attentive', 'memory'])
def test_beam_search_carries_history_per_hypothesis(get_model, name):
    """With k > 1 the history is reordered with the hypotheses: every returned
    hypothesis' score equals the forced-decoding cost of its own words."""
    model = get_model(name)
    model.reset()
    f_init, f_next = model.sampler()
    x = np.array([[3], [5], [2], [0]], dtype='int64')
    hyps = beam_search.beam_search(f_init, f_next, x, k=4, maxlen=6)
    assert len(hyps) == 4
    for h in hyps:
        forced = beam_search.force_decode(f_init, f_next, x, np.array(h.words))
        np.testing.assert_allclose(forced.sum(), h.score, rtol=1e-5)
        assert len(h.align) == len(h.words) == len(h.prev_align)
        # row t of the attention over previous items covers t + 1 items
        assert [len(p) for p in h.prev_align] == list(range(1, len(h.words) + 1))
