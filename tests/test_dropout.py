"""The training graph's inverted dropouts (nmt.Dropout; --dropout_embedding,
--dropout_context, --dropout_readout): off outside training, on in it, at
the rate asked, and their options checked."""
import numpy as np
import pytest

import numpy_reference as ref
from conftest import Model, make_batch

RATES = dict(dropout_embedding=0.3, dropout_context=0.3, dropout_readout=0.3)
BATCH = dict(seed=5, src_lens=(4, 1, 6), trg_lens=(2, 5, 3))


@pytest.fixture(scope='module')
def dropped():
    """A tiny baseline with the three dropouts, its forward pass compiled."""
    return Model('baseline_inverted_dropout', dict(decoder='gru_cond', **RATES))


def test_without_noise_the_cost_is_the_plain_models(dropped):
    """Validation and translation (use_noise 0) see the model without
    dropout: the NumPy reference of the plain model, no rescaling."""
    x, x_mask, y, y_mask = make_batch(**BATCH)
    dropped.graph['use_noise'].set_value(np.float32(0.))
    got = dropped.forward(x, x_mask, y, y_mask)['cost']
    expected = ref.cost_per_sentence(dropped.params64(), dropped.options, x, x_mask, y, y_mask)[0]
    np.testing.assert_allclose(got, expected, rtol=1e-5)


def test_with_noise_each_call_draws_new_masks(dropped):
    x, x_mask, y, y_mask = make_batch(**BATCH)
    g = dropped.graph
    try:
        g['use_noise'].set_value(np.float32(1.))
        first = dropped.forward(x, x_mask, y, y_mask)['cost']
        second = dropped.forward(x, x_mask, y, y_mask)['cost']
    finally:
        g['use_noise'].set_value(np.float32(0.))
    plain = ref.cost_per_sentence(dropped.params64(), dropped.options, x, x_mask, y, y_mask)[0]
    assert np.all(np.isfinite(first)) and np.all(first > 0)
    assert np.abs(first - plain).max() > 1e-3
    assert np.abs(first - second).max() > 1e-3


@pytest.mark.parametrize('rate', [0.2, 0.5])
def test_a_unit_is_dropped_at_the_rate_and_the_rest_scaled(nmt_module, rate):
    import theano
    import theano.tensor as tensor
    from theano.sandbox.rng_mrg import MRG_RandomStream
    use_noise = theano.shared(np.float32(1.))
    options = dict(dropout_embedding=rate, dropout_context=0., dropout_readout=0.)
    dropout = nmt_module.Dropout(options, use_noise, MRG_RandomStream(7))
    v = tensor.matrix('v', dtype='float32')
    f = theano.function([v], dropout.embedding(v), mode='FAST_COMPILE')
    ones = np.ones((400, 100), dtype='float32')
    out = f(ones)
    kept = out != 0
    np.testing.assert_allclose(out[kept], 1. / (1. - rate), rtol=1e-6)
    assert abs((~kept).mean() - rate) < 0.01
    assert abs(out.mean() - 1.) < 0.02          # the expectation is unchanged
    use_noise.set_value(np.float32(0.))
    np.testing.assert_array_equal(f(ones), ones)
    # a rate of 0 adds nothing to the graph
    assert dropout.context(v) is v


@pytest.mark.parametrize('name', sorted(RATES))
@pytest.mark.parametrize('rate', [-0.1, 1.0])
def test_a_rate_outside_0_to_1_is_refused(nmt_module, name, rate):
    from machinery.text_io import InputError
    options = nmt_module.fill_options({name: rate})
    with pytest.raises(InputError, match='--%s must be at least 0 and below 1' % name):
        nmt_module.check_options(options)


def test_two_dropouts_of_the_readout_are_refused(nmt_module):
    from machinery.text_io import InputError
    options = nmt_module.fill_options(dict(use_dropout=True, dropout_readout=0.2))
    with pytest.raises(InputError, match='--use_dropout .* and --dropout_readout'):
        nmt_module.check_options(options)


def test_the_rates_are_training_options_not_the_models(nmt_module):
    """A model trained with them translates as one without (the rates are
    not architecture options that --reload or translate.py keep)."""
    for name in RATES:
        assert name not in nmt_module.ARCHITECTURE_OPTIONS
