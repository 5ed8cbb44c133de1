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


def _attention_inputs(seed, T=7, N=5, k=33, masked=True):
    """pctx, q, U_att, c_tt, cc, mask and upstream gradients of ctx and
    alpha; k = 33: not a multiple of the vector width (tail path)."""
    rng = np.random.RandomState(seed)
    mask = (rng.rand(T, N) > 0.3).astype('float32') if masked else np.ones((T, N), 'float32')
    mask[0] = 1.
    return [_arrays(seed + 1, (T, N, k)), _arrays(seed + 2, (N, k)),
            (rng.standard_normal((k, 1)) * 0.5).astype('float32'),
            rng.standard_normal(1).astype('float32'),
            rng.standard_normal((T, N, k)).astype('float32'), mask,
            rng.standard_normal((N, k)).astype('float32'),
            rng.standard_normal((T, N)).astype('float32')]


def _attention_function(original, mode, masked, with_galpha=True):
    """(pctx, q, U, c, cc, mask, g_ctx, g_alpha) -> [ctx, alpha, d pctx, d q,
    d U, d cc] with or without fast_ops."""
    P, Q, U, C, CC = (tensor.tensor3('p'), tensor.matrix('q'), tensor.matrix('U'),
                      tensor.vector('c'), tensor.tensor3('cc'))
    M, GC, GA = tensor.matrix('m'), tensor.matrix('gc'), tensor.matrix('ga')
    with (fast_ops.original_graph() if original else contextlib.nullcontext()):
        ctx, alpha = fast_ops.attention(P, Q, U, C, CC, M if masked else None)
    cost = (ctx * GC).sum() + ((alpha * GA).sum() if with_galpha else 0)
    outs = [ctx, alpha] + tensor.grad(cost, [P, Q, U, CC])
    return theano.function([P, Q, U, C, CC, M, GC, GA], outs, mode=mode,
                           on_unused_input='ignore')


@pytest.mark.parametrize('mode', MODES)
@pytest.mark.parametrize('masked', [True, False])
def test_attention_equals_the_original_graph(mode, masked):
    vals = _attention_inputs(1, masked=masked)
    for with_galpha in (True, False):
        got = _attention_function(False, mode, masked, with_galpha)(*vals)
        expected = _attention_function(True, 'FAST_RUN', masked, with_galpha)(*vals)
        for g, e in zip(got, expected):
            np.testing.assert_allclose(g, e, rtol=2e-5, atol=2e-6 * np.abs(e).max())
    if masked:   # masked source positions: no weight, no gradient
        alpha, d_pctx, d_cc = got[1], got[2], got[5]
        assert np.all(alpha[vals[5] == 0] == 0)
        assert np.all(d_pctx[vals[5] == 0] == 0) and np.all(d_cc[vals[5] == 0] == 0)


def test_attention_against_numpy_float64():
    pctx, q, U, c, cc, mask = [v.astype('float64') for v in _attention_inputs(2)[:6]]
    ctx, alpha = _attention_function(False, 'FAST_RUN', True)(*_attention_inputs(2))[:2]
    e = np.tanh(pctx + q[None]) @ U[:, 0] + c[0]
    a = np.exp(e) * mask
    a /= a.sum(0)
    np.testing.assert_allclose(alpha, a, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(ctx, (cc * a[..., None]).sum(0), rtol=1e-5, atol=1e-6)


def test_original_graph_builds_theanos_ops():
    P, Q, U, C, CC = (tensor.tensor3('p'), tensor.matrix('q'), tensor.matrix('U'),
                      tensor.vector('c'), tensor.tensor3('cc'))
    with fast_ops.original_graph():
        assert not fast_ops.enabled()
        ctx, alpha = fast_ops.attention(P, Q, U, C, CC)
    assert fast_ops.enabled()
    ops = {type(n.op).__name__ for n in theano.graph.basic.io_toposort([P, Q, U, C, CC],
                                                                        [ctx, alpha])}
    assert 'SourceAttention' not in ops and 'Elemwise' in ops


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
        assert sum(isinstance(o, fast_ops.AdadeltaStep) and o.inplace for o in ops) == 2


def _omp_set_num_threads(n):
    """Set OpenMP's thread count of this process (False without libgomp)."""
    import ctypes
    import ctypes.util
    name = ctypes.util.find_library('gomp')
    if not name:
        return False
    ctypes.CDLL(name).omp_set_num_threads(int(n))
    return True


def test_two_threads_compute_the_same_numbers():
    # sizes above fast_ops' threshold for going parallel (262,144 values)
    att = _attention_inputs(21, T=8, N=40, k=1024)
    x = (_arrays(24, (300, 1000)) * 3).astype('float32')
    bias, y = _arrays(25, (1000,)), np.random.RandomState(26).randint(0, 1000, 300)
    g = np.abs(_arrays(27, (300,)))
    f_att = _attention_function(False, 'FAST_RUN', True)
    tx, tbias, ty, tg = (tensor.matrix('x'), tensor.vector('bias'),
                         tensor.vector('y', dtype='int64'), tensor.vector('g'))
    outs = [fast_ops.SoftmaxNll()(tx, tbias, ty)] + fast_ops.SoftmaxNllGrad()(tg, tx, tbias, ty)
    f_out = theano.function([tx, tbias, ty, tg], outs)
    results = {}
    for n in (1, 2):
        if not _omp_set_num_threads(n):
            pytest.skip('no libgomp')
        results[n] = f_att(*att) + f_out(x, bias, y.astype('int64'), g)
    _omp_set_num_threads(1)
    # per-sample and per-row work: identical; d U_att and d b are sums of the
    # threads' double partial sums: the same to float32 rounding
    for i, (one, two) in enumerate(zip(results[1], results[2])):
        if i in (4, 8):
            np.testing.assert_allclose(one, two, rtol=1e-6, atol=1e-7)
        else:
            np.testing.assert_array_equal(one, two)
