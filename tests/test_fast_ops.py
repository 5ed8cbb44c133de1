"""fast_ops: each op against NumPy and against the Theano graph it replaces,
and whole models built with and without them (fast_ops.original_graph)."""
import numpy as np
import pytest

from conftest import CONFIGS, make_batch, tiny_options

theano = pytest.importorskip('theano')
import theano.tensor as tensor  # noqa: E402

import fast_ops  # noqa: E402

MODES = ('FAST_RUN', 'FAST_COMPILE')    # C code, and the NumPy perform()


def _arrays(seed, shape):
    rng = np.random.RandomState(seed)
    # values of every size tanh meets: tiny, around 1, saturated
    scale = rng.choice([1e-4, 0.3, 1., 4., 12.], size=shape)
    return (rng.standard_normal(shape) * scale).astype('float32')


def _ulps(got, exact):
    """Distance in float32 steps from the correctly rounded value."""
    def ordered(v):
        i = v.astype('float32').view('int32').astype('int64')
        return np.where(i < 0, -(i & 0x7fffffff), i)
    return np.abs(ordered(got) - ordered(exact))


@pytest.mark.parametrize('mode', MODES)
def test_tanh_add_is_tanh_of_the_sum_within_one_ulp(mode):
    # 5 x 33 values a row: not a multiple of the vector width (tail path)
    a, b = _arrays(1, (7, 5, 33)), _arrays(2, (5, 33))
    ta, tb = tensor.tensor3('a'), tensor.matrix('b')
    got = theano.function([ta, tb], fast_ops.tanh_add(ta, tb), mode=mode)(a, b)
    summed = (a + b[None]).astype('float32')          # the float32 add
    exact = np.tanh(summed.astype('float64'))
    assert got.dtype == np.float32 and got.shape == a.shape
    assert _ulps(got, exact).max() <= 1


def test_tanh_add_gradient_reuses_the_output():
    a, b, c = _arrays(3, (6, 4, 20)), _arrays(4, (4, 20)), _arrays(5, (6, 4, 20))
    ta, tb, tc = tensor.tensor3('a'), tensor.matrix('b'), tensor.tensor3('c')
    y = fast_ops.tanh_add(ta, tb)
    f = theano.function([ta, tb, tc], [y] + tensor.grad((y * tc).sum(), [ta, tb]))
    yv, ga, gb = f(a, b, c)
    # d tanh(u)/du = 1 - y^2 from the output y (float64 here: the compiled
    # code may contract 1 - y*y into one fused multiply-add)
    y64 = yv.astype('float64')
    ga_ref = c * (1. - y64 * y64)
    np.testing.assert_allclose(ga, ga_ref, rtol=2e-7, atol=1e-12)
    np.testing.assert_allclose(gb, ga.sum(0, dtype='float64'), rtol=1e-6, atol=1e-12)
    # the backward pass evaluates no tanh: the compiled graph has only the op's
    ops = [str(n.op).lower() for n in f.maker.fgraph.toposort()]
    assert not [o for o in ops if 'tanh' in o and 'tanhadd' not in o], ops


@pytest.mark.parametrize('mode', MODES)
@pytest.mark.parametrize('weighted', [False, True])
def test_sum_rows_equals_theanos_sum_and_its_gradients(mode, weighted):
    x, w, g = _arrays(6, (9, 3, 17)), np.abs(_arrays(7, (9, 3))), _arrays(8, (3, 17))
    tx, tw, tg = tensor.tensor3('x'), tensor.matrix('w'), tensor.matrix('g')
    outs = {}
    for name, graph in (('fast', lambda: fast_ops.sum_rows(tx, tw if weighted else None)),
                        ('theano', lambda: (tx * tw[:, :, None] if weighted else tx).sum(0))):
        s = graph()
        wrt = [tx, tw] if weighted else [tx]
        outs[name] = theano.function([tx, tw, tg], [s] + tensor.grad((s * tg).sum(), wrt),
                                     mode=mode, on_unused_input='ignore')(x, w, g)
    for got, expected in zip(outs['fast'], outs['theano']):
        np.testing.assert_array_equal(got, expected)


def test_original_graph_builds_theanos_ops():
    ta, tb = tensor.tensor3('a'), tensor.matrix('b')
    with fast_ops.original_graph():
        assert not fast_ops.enabled()
        y = fast_ops.sum_rows(fast_ops.tanh_add(ta, tb), tb)
    assert fast_ops.enabled()
    ops = {type(n.op).__name__ for n in theano.graph.basic.io_toposort([ta, tb], [y])}
    assert not ops & {'TanhAdd', 'SumRows'} and 'Elemwise' in ops


def _model_functions(nmt, options, original):
    """Per-sentence costs (Theano's C mode) and the gradients of their mean
    (FAST_COMPILE: the ops' NumPy code; a C scan gradient takes minutes)."""
    np.random.seed(1234)
    tparams = nmt.init_tparams(nmt.init_params(options))
    if original:
        with fast_ops.original_graph():
            graph = nmt.build_model(tparams, options)
    else:
        graph = nmt.build_model(tparams, options)
    _, use_noise, x, x_mask, y, y_mask, _, cost = graph
    use_noise.set_value(np.float32(0.))
    inps = [x, x_mask, y, y_mask]
    grads = tensor.grad(cost.mean(), wrt=list(tparams.values()))
    return (theano.function(inps, cost),
            theano.function(inps, grads, mode='FAST_COMPILE'))


@pytest.mark.parametrize('config', ['baseline', 'residual_att_content'])
def test_model_with_fast_ops_matches_the_original_graph(nmt_module, config):
    options = tiny_options(nmt_module, CONFIGS[config])
    batch = make_batch(11, n_src=options['n_words_src'], n_trg=options['n_words'])
    f_cost, f_grads = _model_functions(nmt_module, options, original=False)
    o_cost, o_grads = _model_functions(nmt_module, options, original=True)
    # per-sentence costs to float32 rounding, gradients likewise
    np.testing.assert_allclose(f_cost(*batch), o_cost(*batch), rtol=1e-6, atol=1e-6)
    for got, expected in zip(f_grads(*batch), o_grads(*batch)):
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-7)
