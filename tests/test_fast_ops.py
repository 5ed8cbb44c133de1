"""fast_ops: each op against NumPy and against the Theano graph it replaces,
and whole models built with and without them (fast_ops.original_graph)."""
import contextlib

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


def _output_layer_graph(original):
    """Per-position costs of the output layer and the gradients of their
    masked mean, built with or without fast_ops (original graph)."""
    h, W, b = tensor.tensor3('h'), tensor.matrix('W'), tensor.vector('b')
    y, m = tensor.matrix('y', dtype='int64'), tensor.matrix('m')
    if original:
        with fast_ops.original_graph():
            cost = fast_ops.output_nll(h, W, b, y, m)
    else:
        cost = fast_ops.output_nll(h, W, b, y, m)
    total = (cost * m).sum(0).mean()
    return [h, W, b, y, m], [cost * m] + tensor.grad(total, [h, W, b])


def _output_layer_batch(seed):
    rng = np.random.RandomState(seed)
    T, n, d, V = 6, 4, 5, 37
    mask = np.zeros((T, n), dtype='float32')
    for j, length in enumerate([6, 1, 3, 4]):
        mask[:length, j] = 1.
    y = rng.randint(0, V, size=(T, n)).astype('int64')
    return [(rng.standard_normal((T, n, d)) * 2).astype('float32'),
            (rng.standard_normal((d, V)) * 3).astype('float32'),
            rng.standard_normal(V).astype('float32'), y, mask]


@pytest.mark.parametrize('mode', MODES)
def test_output_nll_equals_the_original_softmax_and_log(mode):
    batch = _output_layer_batch(12)
    inps, outs = _output_layer_graph(original=False)
    got = theano.function(inps, outs, mode=mode)(*batch)
    inps, outs = _output_layer_graph(original=True)
    expected = theano.function(inps, outs)(*batch)
    # costs and gradients: the same up to float32 rounding (the C code
    # repeats Theano's operations; the NumPy code and the smaller products
    # of the real positions only round differently)
    np.testing.assert_allclose(got[0], expected[0], rtol=1e-6, atol=1e-6)
    for g, e in zip(got[1:], expected[1:]):
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-6)
    # padded positions cost nothing and get no gradient
    assert np.all(got[0][batch[4] == 0] == 0) and np.all(got[1][batch[4] == 0] == 0)


def test_output_nll_against_numpy_float64():
    h, W, b, y, m = _output_layer_batch(13)
    inps, outs = _output_layer_graph(original=False)
    cost = theano.function(inps, outs[0])(h, W, b, y, m)
    logits = h.astype('float64') @ W + b
    logp = logits - logits.max(-1, keepdims=True)
    logp -= np.log(np.exp(logp).sum(-1, keepdims=True))
    nll = -np.take_along_axis(logp, y[..., None], -1)[..., 0] * m
    np.testing.assert_allclose(cost, nll, rtol=1e-5, atol=1e-5)


def _fused_adadelta_run(original, mode, steps=3):
    """Three fused Adadelta updates of a small least-squares problem; the
    parameters before and after each, and the accumulators at the end."""
    from collections import OrderedDict
    import optimizers
    rng = np.random.RandomState(0)
    init = OrderedDict([('A', rng.randn(3, 4).astype('float32')),
                        ('b', rng.randn(4).astype('float32'))])
    tparams = OrderedDict((k, theano.shared(v.copy(), name=k)) for k, v in init.items())
    X, Y = tensor.matrix('X'), tensor.matrix('Y')
    R = tensor.dot(X, tparams['A']) + tparams['b'] - Y
    cost = 0.5 * (R ** 2).sum()
    grads = tensor.grad(cost, wrt=list(tparams.values()))
    state = OrderedDict()
    with (fast_ops.original_graph() if original else contextlib.nullcontext()):
        f, f_update = optimizers.adadelta(tensor.scalar('lr'), tparams, grads, [X, Y],
                                          cost, state=state, fused=True,
                                          mode=theano.compile.mode.get_mode(mode))
    history = []
    for _ in range(steps):
        Xv, Yv = rng.randn(5, 3).astype('float32'), rng.randn(5, 4).astype('float32')
        before = [p.get_value() for p in tparams.values()]
        f(Xv, Yv)
        f_update(np.float32(0.))
        history.append((Xv, Yv, before, [p.get_value() for p in tparams.values()]))
    return history, [v.get_value() for v in state.values()], f


@pytest.mark.parametrize('mode', MODES)
def test_adadelta_step_in_place_matches_the_reference(mode):
    import numpy_reference as ref
    history, state, f = _fused_adadelta_run(original=False, mode=mode)
    _, orig_state, _ = _fused_adadelta_run(original=True, mode='FAST_RUN')
    Eg2 = Edx2 = None
    for Xv, Yv, before, after in history:
        A, b = [v.astype('float64') for v in before]
        Rv = Xv.astype('float64') @ A + b - Yv
        grads = [Xv.T.astype('float64') @ Rv, Rv.sum(0)]
        if Eg2 is None:
            Eg2, Edx2 = [np.zeros_like(g) for g in grads], [np.zeros_like(g) for g in grads]
        new, Eg2, Edx2 = ref.adadelta_step([A, b], grads, Eg2, Edx2)
        for got, exp, old in zip(after, new, (A, b)):
            np.testing.assert_allclose(got - old, exp - old, rtol=1e-4, atol=1e-7)
    # the accumulators equal those of Theano's own fused graph to rounding
    for got, exp in zip(state, orig_state):
        np.testing.assert_allclose(got, exp, rtol=1e-5, atol=1e-9)
    if mode == 'FAST_RUN':   # the update is one in-place op per parameter
        ops = [n.op for n in f.maker.fgraph.toposort()]
        assert sum(isinstance(o, fast_ops.AdadeltaStep) for o in ops) == 2
