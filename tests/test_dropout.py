"""The training graph's inverted dropouts (nmt_model.Dropout; --dropout_embedding,
--dropout_context, --dropout_readout): off outside training, on in it, at
the rate asked, and their options checked."""
import numpy as np
import pytest

import nmt_model
import numpy_reference as ref
from machinery.option_schema import ARCHITECTURE
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
    dropout = nmt_model.Dropout(options, use_noise, MRG_RandomStream(7))
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
        assert name not in nmt_module.OPTIONS.names(ARCHITECTURE)


# -- the noise stream's seed (--seed, --noise_seed) ----------------------------

def test_the_noise_seed_follows_seed_unless_given():
    """--noise_seed 0 (the default) takes --seed's value (the default
    --seed 1234: dl4mt's stream), brought into MRG's 1 .. 2**30; a given
    --noise_seed wins; worker r adds r; out of range is refused."""
    from machinery.text_io import InputError
    from machinery.training_options import NOISE_SEEDS, ORIGINAL_NOISE_SEED, noise_seed
    assert noise_seed({'seed': 1234, 'noise_seed': 0}) == ORIGINAL_NOISE_SEED == 1234
    assert noise_seed({'seed': 7, 'noise_seed': 0}) == 7
    assert noise_seed({'seed': 7, 'noise_seed': 0}, rank=3) == 10
    assert noise_seed({'seed': 7, 'noise_seed': 1234}, rank=1) == 1235
    assert noise_seed({'seed': 0, 'noise_seed': 0}) == NOISE_SEEDS
    assert noise_seed({'seed': NOISE_SEEDS + 5, 'noise_seed': 0}) == 5
    for bad in (-1, NOISE_SEEDS + 1):
        with pytest.raises(InputError, match='--noise_seed must be 0'):
            noise_seed({'seed': 7, 'noise_seed': bad})


def test_reseeding_a_stream_gives_the_stream_of_that_seed(nmt_module):
    """The training loop reseeds every worker's stream (Compiled.seed_noise),
    also rank 0 under the default seeds: seed(1234) must give the draws of
    the stream built with 1234 (dl4mt's, the fixtures'), and another seed
    others."""
    import theano
    from machinery import training_options

    def draws(stream):
        f = theano.function([], [stream.uniform((5, 4)), stream.binomial((3,), p=0.5)],
                            mode='FAST_COMPILE')
        return [a.copy() for a in f()]
    built = draws(nmt_model.noise_stream({'seed': 1234}))
    other = nmt_model.noise_stream({'seed': 7})
    f = theano.function([], [other.uniform((5, 4)), other.binomial((3,), p=0.5)],
                        mode='FAST_COMPILE')
    assert not np.array_equal(f()[0], built[0])
    other.seed(training_options.noise_seed({'seed': 99, 'noise_seed': 1234}))
    for got, want in zip(f(), built):
        np.testing.assert_array_equal(got, want)


@pytest.mark.slow
def test_seed_drives_the_dropout_noise_and_noise_seed_fixes_it(tmp_path):
    """Tiny runs with dropout: --seed 5 trains as --seed 5 --noise_seed 5
    (the derived default), not as --seed 5 --noise_seed 1234 (dl4mt's
    stream: the initial parameters and batches alike, only the masks
    differ)."""
    import tiny_runs
    tiny_runs.make_corpus(tmp_path)

    def params(model, *flags):
        proc = tiny_runs.run([tiny_runs.NMT, '--model', model, '--finish_after', '3']
                             + tiny_runs.TRAIN_FLAGS + ['--seed', '5'] + list(flags),
                             cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr[-3000:]
        with np.load(str(tmp_path / model)) as f:
            return {k: f[k] for k in f.files if k.startswith(('W', 'U', 'b', 'ff'))}
    derived, given, fixed = (params('derived.npz'), params('given.npz', '--noise_seed', '5'),
                             params('fixed.npz', '--noise_seed', '1234'))
    assert sorted(derived) == sorted(fixed) and derived
    assert all(np.array_equal(derived[k], given[k]) for k in derived)
    assert any(not np.array_equal(derived[k], fixed[k]) for k in derived)
