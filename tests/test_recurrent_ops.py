"""recurrent_ops: the GRU and conditional-GRU layers as whole-sequence C ops,
against the float64 NumPy reference (forward) and against Theano's scan of
the same layer (forward and gradients), in C and in their NumPy perform()."""
from collections import OrderedDict

import numpy as np
import pytest

import numpy_reference as ref

import theano  # noqa: E402
import theano.tensor as tensor  # noqa: E402

from theano_platform import fast_ops, recurrent_ops  # noqa: E402
import layers  # noqa: E402

MODES = ('FAST_RUN', 'FAST_COMPILE')    # C code, and the NumPy perform()
# d = 19, k = 2 * 13: not multiples of a vector's width (the tails)
T, N, E, D, TS, K2 = 6, 4, 5, 19, 7, 26


def _masks(rng, steps, n):
    """A mask with sentences of every length, one of them a single row."""
    lengths = [steps, 1] + list(rng.randint(1, steps + 1, size=n - 2))
    return (np.arange(steps)[:, None] < np.array(lengths)[None, :]).astype('float32')


def _params(seed):
    """The conditional GRU's parameters (their GRU's too), larger than the
    initialisation's so that every gate works in its non-linear range."""
    rng = np.random.RandomState(seed)
    params = OrderedDict()
    layers.param_init_gru_cond({}, params, prefix='decoder', nin=E, dim=D, dimctx=K2)
    return OrderedDict((k, (v + 0.4 * rng.standard_normal(v.shape)).astype('float32'))
                       for k, v in params.items())


def _values(seed):
    rng = np.random.RandomState(seed)

    def normal(*shape):
        return rng.standard_normal(shape).astype('float32')
    return dict(emb=normal(T, N, E), ctx=normal(TS, N, K2), h0=normal(N, D) * 0.5,
                mask=_masks(rng, T, N), cmask=_masks(rng, TS, N),
                g_states=normal(T, N, D), g_ctxs=normal(T, N, K2), g_alphas=normal(T, N, TS))


def _gru_function(original, mode, tparams):
    """(emb, mask, g) -> [h, d emb, d U, d Ux, d W, d b] of layers.gru_layer."""
    emb, mask, g = tensor.tensor3('emb'), tensor.matrix('mask'), tensor.tensor3('g')
    with (fast_ops.original_graph() if original else _nothing()):
        h = layers.gru_layer(tparams, emb, {}, prefix='decoder', mask=mask)[0]
    wrt = [emb] + [tparams['decoder_' + k] for k in ('U', 'Ux', 'W', 'b')]
    f = theano.function([emb, mask, g], [h] + tensor.grad((h * g).sum(), wrt), mode=mode)
    return f


def _cond_function(original, mode, tparams, with_cmask, with_galpha):
    """(emb, ctx, h0, mask, cmask, gradients) -> [states, ctxs, alphas, and
    the gradients of emb, ctx, h0 and every parameter]."""
    emb, ctx, h0 = tensor.tensor3('emb'), tensor.tensor3('ctx'), tensor.matrix('h0')
    mask, cmask = tensor.matrix('mask'), tensor.matrix('cmask')
    gs, gc, ga = tensor.tensor3('gs'), tensor.tensor3('gc'), tensor.tensor3('ga')
    with (fast_ops.original_graph() if original else _nothing()):
        out = layers.gru_cond_layer(tparams, emb, {}, prefix='decoder', mask=mask,
                                    context=ctx, init_state=h0,
                                    context_mask=cmask if with_cmask else None)
    cost = (out['states'] * gs).sum() + (out['ctxs'] * gc).sum()
    if with_galpha:
        cost = cost + (out['alphas'] * ga).sum()
    grads = tensor.grad(cost, [emb, ctx, h0] + list(tparams.values()))
    return theano.function([emb, ctx, h0, mask, cmask, gs, gc, ga],
                           [out['states'], out['ctxs'], out['alphas']] + grads,
                           mode=mode, on_unused_input='ignore')


class _nothing(object):
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


@pytest.fixture(scope='module')
def tparams():
    return layers.init_tparams(_params(3))


_SCAN_RESULTS = {}


def _scan_results(kind, tparams, args, *flags):
    """The scan graph's outputs on args, computed once per kind and flags,
    by Theano's Python implementations (FAST_COMPILE: the same graph; its
    gradient in C took minutes to compile)."""
    key = (kind,) + flags
    if key not in _SCAN_RESULTS:
        make = _gru_function if kind == 'gru' else _cond_function
        _SCAN_RESULTS[key] = make(True, 'FAST_COMPILE', tparams, *flags)(*args)
    return _SCAN_RESULTS[key]


def _op_names(f):
    return {type(n.op).__name__ for n in f.maker.fgraph.toposort()}


def _close(got, expected, names):
    """Each array to its counterpart within float32 rounding of the sums;
    c_tt's gradient, a sum of terms that cancel (the softmax does not see a
    constant), is rounding on both sides: both near 0."""
    for name, g, e in zip(names, got, expected):
        if name == 'decoder_c_tt':
            assert abs(g[0]) < 1e-5 and abs(e[0]) < 1e-5, (g, e)
            continue
        scale = max(np.abs(e).max(), 1e-3)
        np.testing.assert_allclose(g, e, rtol=1e-4, atol=2e-6 * scale, err_msg=name)


@pytest.mark.parametrize('mode', MODES)
def test_gru_layer_equals_the_scan_and_numpy(tparams, mode):
    v = _values(1)
    args = [v['emb'], v['mask'], v['g_states']]
    got = _gru_function(False, mode, tparams)(*args)
    expected = _scan_results('gru', tparams, args)
    _close(got, expected, ['h', 'd emb', 'd U', 'd Ux', 'd W', 'd b'])
    params64 = ref.as_dtype(layers.unzip(tparams), 'float64')
    h64 = ref.gru_layer(params64, 'decoder', v['emb'].astype('float64'), v['mask'])
    np.testing.assert_allclose(got[0], h64, rtol=1e-5, atol=1e-6)
    # a masked row keeps the state, and gets no gradient of its inputs
    last = v['mask'][:, 1] == 0
    assert np.all(got[0][last, 1] == got[0][0, 1])
    assert np.all(got[1][last, 1] == 0)


@pytest.mark.parametrize('mode', MODES)
@pytest.mark.parametrize('with_cmask', [True, False])
def test_cond_gru_layer_equals_the_scan_and_numpy(tparams, mode, with_cmask):
    v = _values(2)
    args = [v[k] for k in ('emb', 'ctx', 'h0', 'mask', 'cmask', 'g_states', 'g_ctxs',
                           'g_alphas')]
    names = ['states', 'ctxs', 'alphas', 'd emb', 'd ctx', 'd h0'] + list(tparams)
    for with_galpha in (True, False):
        f = _cond_function(False, mode, tparams, with_cmask, with_galpha)
        if mode == 'FAST_RUN':
            assert {'CondGRULayer', 'CondGRULayerGrad'} <= _op_names(f)
            assert 'Scan' not in _op_names(f)
        got = f(*args)
        expected = _scan_results('cond', tparams, args, with_cmask, with_galpha)
        _close(got, expected, names)
    params64 = ref.as_dtype(layers.unzip(tparams), 'float64')
    cmask = v['cmask'] if with_cmask else np.ones_like(v['cmask'])
    ctx64 = v['ctx'].astype('float64')
    pctx64 = ctx64 @ params64['decoder_Wc_att'] + params64['decoder_b_att']
    s = v['h0'].astype('float64')
    for t in range(T):
        s, c, alpha = ref.cond_gru_step(params64, v['emb'][t].astype('float64'),
                                        v['mask'][t], s, ctx64, pctx64, cmask)
        np.testing.assert_allclose(got[0][t], s, rtol=1e-5, atol=2e-6)
        np.testing.assert_allclose(got[1][t], c, rtol=1e-5, atol=2e-6)
        np.testing.assert_allclose(got[2][t], alpha.T, rtol=1e-5, atol=1e-7)


def test_original_graph_keeps_the_scan(tparams):
    emb, mask = tensor.tensor3('emb'), tensor.matrix('mask')

    def op_names():
        h = layers.gru_layer(tparams, emb, {}, prefix='decoder', mask=mask)[0]
        return {type(n.op).__name__ for n in theano.graph.basic.io_toposort([emb, mask], [h])}
    with fast_ops.original_graph():
        assert 'Scan' in op_names() and 'GRULayer' not in op_names()
    assert 'GRULayer' in op_names() and 'Scan' not in op_names()


def test_two_threads_split_the_batch_and_compute_the_same(tparams):
    """From 16 samples the ops run the loop on two threads, a half batch
    each: the numbers are those of one thread (the products of a half batch
    round as those of the whole)."""
    from test_fast_ops import _omp_set_num_threads
    rng = np.random.RandomState(5)
    n = 16
    args = [rng.standard_normal((T, n, E)).astype('float32'),
            rng.standard_normal((TS, n, K2)).astype('float32'),
            rng.standard_normal((n, D)).astype('float32'), _masks(rng, T, n),
            _masks(rng, TS, n), rng.standard_normal((T, n, D)).astype('float32'),
            rng.standard_normal((T, n, K2)).astype('float32'),
            rng.standard_normal((T, n, TS)).astype('float32')]
    f = _cond_function(False, 'FAST_RUN', tparams, True, True)
    results = []
    for threads in (1, 2):
        if not _omp_set_num_threads(threads):
            pytest.skip('no libgomp')
        results.append(f(*args))
    _omp_set_num_threads(1)
    for name, one, two in zip(range(100), *results):
        np.testing.assert_allclose(one, two, rtol=1e-6, atol=1e-7, err_msg=str(name))


def test_shapes_that_do_not_match_are_refused():
    f32 = 'float32'
    x = tensor.tensor3('x')
    h = recurrent_ops.gru_layer(tensor.matrix('m'), x, tensor.tensor3('xx'),
                                tensor.matrix('h0'), tensor.matrix('U'), tensor.matrix('Ux'))
    f = theano.function(list(theano.graph.basic.graph_inputs([h])), h)
    names = [i.name for i in f.maker.fgraph.inputs]
    values = dict(m=np.ones((2, 3), f32), x=np.zeros((2, 3, 8), f32),
                  xx=np.zeros((2, 3, 4), f32), h0=np.zeros((3, 4), f32),
                  U=np.zeros((4, 8), f32), Ux=np.zeros((4, 4), f32))
    f(*[values[n] for n in names])
    values['xx'] = np.zeros((2, 3, 5), f32)
    with pytest.raises(ValueError, match='shapes do not match'):
        f(*[values[n] for n in names])


def test_nmt_theano_ops_builds_the_original_graph(monkeypatch):
    """NMT_THEANO_OPS=1: the layer is Theano's scan again (the original's
    graph, one variable away); unset: the C op."""
    tparams = OrderedDict((k, theano.shared(v)) for k, v in _params(3).items())
    emb, mask = tensor.tensor3('emb'), tensor.matrix('mask')

    def op_names():
        h = layers.gru_layer(tparams, emb, {}, prefix='decoder', mask=mask)[0]
        return {type(v.owner.op).__name__ for v in theano.graph.basic.ancestors([h])
                if v.owner is not None}
    monkeypatch.setenv(fast_ops.THEANO_OPS_VARIABLE, '1')
    assert not fast_ops.enabled()
    assert 'Scan' in op_names()
    x, y = tensor.matrix('x'), tensor.matrix('y')   # and Theano's own products
    f = theano.function([x, y], tensor.dot(x, y))
    assert [type(n.op).__name__ for n in f.maker.fgraph.toposort()] == ['Dot22']
    monkeypatch.setenv(fast_ops.THEANO_OPS_VARIABLE, '0')
    assert fast_ops.enabled()
    assert 'Scan' not in op_names()
