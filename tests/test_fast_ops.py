"""fast_ops: each op against NumPy and against the Theano graph it replaces,
and whole models built with and without them (fast_ops.original_graph)."""
import contextlib

import numpy as np
import pytest

from conftest import CONFIGS, make_batch, tiny_options
from helpers import ROOT

import theano  # noqa: E402
import theano.tensor as tensor  # noqa: E402

from theano_platform import fast_ops  # noqa: E402
import layers  # noqa: E402

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
    attention = layers.attention_graph if original else fast_ops.attention
    ctx, alpha = attention(P, Q, U, C, CC, M if masked else None)
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
    H, P, W, U, C, CC = (tensor.matrix('h'), tensor.tensor3('p'), tensor.matrix('W'),
                         tensor.matrix('U'), tensor.vector('c'), tensor.tensor3('cc'))
    inputs = [H, P, W, U, C, CC]

    def op_names():
        ctx, alpha = layers.source_attention(H, P, CC, None, W, U, C)
        return {type(n.op).__name__
                for n in theano.graph.basic.io_toposort(inputs, [ctx, alpha])}
    with fast_ops.original_graph():
        assert not fast_ops.enabled()
        ops = op_names()
    assert fast_ops.enabled()
    assert 'SourceAttention' not in ops and 'Elemwise' in ops
    assert 'SourceAttention' in op_names()


def test_decoding_step_uses_the_c_attention_and_theanos_graph_when_asked(nmt_module):
    """The one-step graph of decoding (f_next) takes the source attention's
    C op on the CPU, and Theano's ops inside original_graph() (as on a GPU)."""
    options = tiny_options(nmt_module, CONFIGS['baseline'])
    tparams = nmt_module.init_tparams(nmt_module.init_params(options))
    ctx, emb, h = tensor.tensor3('ctx'), tensor.matrix('emb'), tensor.matrix('h')

    def op_names():
        step = layers.gru_cond_layer(tparams, emb, options, prefix='decoder', context=ctx,
                                     one_step=True, init_state=h)
        return {type(n.op).__name__ for n in theano.graph.basic.io_toposort(
            [ctx, emb, h], [step['states'], step['alphas']])}
    assert 'SourceAttention' in op_names()
    with fast_ops.original_graph():
        ops = op_names()
    assert 'SourceAttention' not in ops and 'Elemwise' in ops
    assert fast_ops.enabled()   # the block restored the state


def _log_softmax_function(original, mode):
    x = tensor.matrix('x')
    with (fast_ops.original_graph() if original else contextlib.nullcontext()):
        out = fast_ops.log_softmax(x)
    return theano.function([x], out, mode=mode)


@pytest.mark.parametrize('mode', MODES)
def test_log_softmax_against_numpy_float64_and_the_original_graph(mode):
    # logits of a wide range: a large offset per row, values far below the max
    x = (_arrays(31, (23, 1001)) * 20 + np.arange(23)[:, None] * 50).astype('float32')
    got = _log_softmax_function(False, mode)(x)
    x64 = x.astype('float64')
    shifted = x64 - x64.max(1, keepdims=True)
    expected = shifted - np.log(np.exp(shifted).sum(1, keepdims=True))
    assert got.dtype == np.float32 and got.shape == x.shape
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-5)
    np.testing.assert_allclose(got, _log_softmax_function(True, mode)(x), rtol=1e-6, atol=1e-5)
    # each row alone gives the same numbers, to the bit (the batched search
    # and the one-sentence search rely on it)
    f = _log_softmax_function(False, mode)
    np.testing.assert_array_equal(f(x[5:6]), got[5:6])


def test_log_softmax_is_in_both_samplers(nmt_module):
    options = tiny_options(nmt_module, CONFIGS['baseline'])
    tparams = nmt_module.init_tparams(nmt_module.init_params(options))
    from theano.sandbox.rng_mrg import MRG_RandomStream
    for batched in (False, True):
        _, f_next = nmt_module.build_sampler(tparams, options, MRG_RandomStream(1),
                                             theano.shared(np.float32(0.)), batched=batched)
        ops = {type(n.op).__name__ for n in f_next.function.maker.fgraph.toposort()}
        assert {'LogSoftmax', 'SourceAttention'} <= ops, ops
        assert 'log_probs' in f_next.outputs


# parameters whose gradients pass through the fast ops (attention, output
# layer), checked against finite differences of the float64 NumPy cost
FD_PARAMS = ['decoder_U_att', 'decoder_c_tt', 'decoder_W_comb_att', 'decoder_Wc_att',
             'ff_logit_W', 'ff_logit_b', 'ff_logit_lstm_W', 'ff_logit_ctx_W']


class _TinyModel(object):
    """A tiny model's graph built with the fast ops or Theano's own
    (original=True): per-sentence costs (C code), the gradients of their
    mean and one fused Adadelta update (FAST_COMPILE: the ops' NumPy code;
    a C scan gradient takes minutes to compile)."""

    def __init__(self, nmt, options, original):
        import optimizers
        from collections import OrderedDict
        np.random.seed(1234)
        self.init = nmt.init_params(options)
        rng = np.random.RandomState(4321)   # larger weights: attention far from uniform
        for k, v in self.init.items():
            self.init[k] = (v + 0.4 * rng.standard_normal(v.shape)).astype('float32')
        self.tparams = nmt.init_tparams(self.init)
        with (fast_ops.original_graph() if original else contextlib.nullcontext()):
            _, use_noise, x, x_mask, y, y_mask, _, cost = nmt.build_model(self.tparams, options)
            use_noise.set_value(np.float32(0.))
            inps = [x, x_mask, y, y_mask]
            grads = tensor.grad(cost.mean(), wrt=list(self.tparams.values()))
            self.f_cost = theano.function(inps, cost)
            self.f_grads = theano.function(inps, grads, mode='FAST_COMPILE')
            self.state = OrderedDict()
            self.f_adadelta, _ = optimizers.adadelta(
                tensor.scalar('lr'), self.tparams, grads, inps, cost.mean(),
                state=self.state, fused=True, mode=theano.compile.mode.get_mode('FAST_COMPILE'))
        ops = {type(n.op).__name__ for n in self.f_cost.maker.fgraph.toposort()}
        assert ('SoftmaxNll' in ops) != original

    def update(self, batch):
        """The parameters after one Adadelta update from zero accumulators."""
        for k, v in self.init.items():
            self.tparams[k].set_value(v.copy())
        for acc in self.state.values():
            acc.set_value(np.zeros_like(acc.get_value()))
        self.f_adadelta(*batch)
        return [p.get_value() for p in self.tparams.values()]


@pytest.fixture(scope='module')
def tiny_models(nmt_module):
    cache = {}

    def get(config):
        if config not in cache:
            options = tiny_options(nmt_module, CONFIGS[config])
            cache[config] = (options, _TinyModel(nmt_module, options, original=False),
                             _TinyModel(nmt_module, options, original=True))
        return cache[config]
    return get


def _finite_difference_failures(params64, options, batch, grads, names, h=1e-6):
    """Entries of grads (dict) off the central finite difference of the mean
    float64 NumPy cost (the largest two and two random ones per parameter)."""
    import numpy_reference as ref
    rng, failures = np.random.RandomState(11), []

    def cost():
        return ref.cost_per_sentence(params64, options, *batch)[0].mean()
    for k in names:
        flat = grads[k].ravel()
        picks = set(np.argsort(-np.abs(flat))[:2]) | set(rng.choice(flat.size, 2))
        for idx in sorted(int(i) for i in picks):
            pos = np.unravel_index(idx, grads[k].shape)
            saved = params64[k][pos]
            params64[k][pos] = saved + h
            plus = cost()
            params64[k][pos] = saved - h
            minus = cost()
            params64[k][pos] = saved
            fd, got = (plus - minus) / (2 * h), float(grads[k][pos])
            if abs(got - fd) > 2e-4 * abs(fd) + 2e-6:
                failures.append('%s%s: %.7g vs finite difference %.7g' % (k, pos, got, fd))
    return failures


CONFIGS_TESTED = ['baseline', 'attentive']


@pytest.mark.parametrize('config', CONFIGS_TESTED)
def test_model_costs_equal_the_original_graph_and_numpy(tiny_models, config):
    import numpy_reference as ref
    options, fast, original = tiny_models(config)
    batch = make_batch(11, n_src=options['n_words_src'], n_trg=options['n_words'])
    got = fast.f_cost(*batch)
    np.testing.assert_allclose(got, original.f_cost(*batch), rtol=1e-6, atol=1e-5)
    exp = ref.cost_per_sentence(ref.as_dtype(fast.init, 'float64'), options, *batch)[0]
    np.testing.assert_allclose(got, exp, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize('config', CONFIGS_TESTED)
def test_model_gradients_equal_the_original_graph_and_numpy(tiny_models, config):
    import numpy_reference as ref
    options, fast, original = tiny_models(config)
    batch = make_batch(11, n_src=options['n_words_src'], n_trg=options['n_words'])
    got = fast.f_grads(*batch)
    for g, e in zip(got, original.f_grads(*batch)):
        np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-7)
    grads = dict(zip(fast.tparams.keys(), got))
    failures = _finite_difference_failures(ref.as_dtype(fast.init, 'float64'), options,
                                           batch, grads, [k for k in FD_PARAMS if k in grads])
    assert not failures, '\n'.join(failures)


@pytest.mark.parametrize('config', CONFIGS_TESTED)
def test_one_model_adadelta_update_equals_the_original_graph_and_numpy(tiny_models, config):
    import numpy_reference as ref
    options, fast, original = tiny_models(config)
    batch = make_batch(12, n_src=options['n_words_src'], n_trg=options['n_words'])
    before = [fast.init[k] for k in fast.tparams]
    for k, v in fast.init.items():
        fast.tparams[k].set_value(v.copy())
    grads = [g.astype('float64') for g in fast.f_grads(*batch)]   # at the initial values
    after, after_original = fast.update(batch), original.update(batch)
    zeros = [np.zeros_like(g) for g in grads]
    exp = ref.adadelta_step([b.astype('float64') for b in before], grads, zeros, zeros)[0]
    for k, b, a, ao, e in zip(fast.tparams, before, after, after_original, exp):
        # the update itself (at most sqrt(1e-6 / 0.05) = 4.5e-3 a value) to 1e-6
        np.testing.assert_allclose(a - b, ao - b, rtol=0, atol=1e-6, err_msg=k)
        np.testing.assert_allclose(a - b, e - b, rtol=0, atol=1e-6, err_msg=k)


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


def _adam_run(original, steps=3, clip_c=1.0):
    """Three Adam updates (clipped to norm clip_c) of a small least-squares
    problem, built with the C ops or Theano's graph: the parameters and the
    accumulators after each, and the compiled functions."""
    from collections import OrderedDict
    import optimizers
    rng = np.random.RandomState(1)
    tparams = OrderedDict((k, theano.shared(v, name=k)) for k, v in (
        ('A', rng.randn(3, 4).astype('float32')), ('b', rng.randn(4).astype('float32'))))
    X, Y = tensor.matrix('X'), tensor.matrix('Y')
    cost = 0.5 * ((tensor.dot(X, tparams['A']) + tparams['b'] - Y) ** 2).sum()
    state = OrderedDict()
    with (fast_ops.original_graph() if original else contextlib.nullcontext()):
        grads = optimizers.clip_gradients(tensor.grad(cost, list(tparams.values())), clip_c)
        f, f_update = optimizers.adam(tensor.scalar('lr'), tparams, grads, [X, Y], cost,
                                      state=state)
    history = []
    for _ in range(steps):
        f(rng.randn(5, 3).astype('float32') * 3, rng.randn(5, 4).astype('float32'))
        f_update(np.float32(0.01))
        history.append([v.get_value() for v in list(tparams.values()) + list(state.values())])
    return history, f, f_update


def test_adam_step_and_squared_norm_equal_theanos_graph():
    got, f, f_update = _adam_run(original=False)
    expected, f_orig, _ = _adam_run(original=True)
    for step_got, step_expected in zip(got, expected):
        for g, e in zip(step_got, step_expected):
            np.testing.assert_allclose(g, e, rtol=1e-6, atol=1e-8)
    ops = [n.op for n in f_update.maker.fgraph.toposort()]
    assert sum(isinstance(o, fast_ops.AdamStep) and o.inplace for o in ops) == 2
    assert any(isinstance(n.op, fast_ops.SquaredNorm) for n in f.maker.fgraph.toposort())
    assert not any(isinstance(n.op, fast_ops.SquaredNorm)
                   for n in f_orig.maker.fgraph.toposort())


@pytest.mark.parametrize('mode', MODES)
def test_adam_step_and_squared_norm_against_numpy(mode):
    rng = np.random.RandomState(4)
    p, m, v, g = [rng.randn(37).astype('float32') for _ in range(4)]
    v = np.abs(v)
    tp, tm, tv, tg = (tensor.vector(n) for n in 'pmvg')
    lr = tensor.scalar('lr')
    f = theano.function([tp, tm, tv, tg, lr],
                        list(fast_ops.adam_step(tp, tm, tv, tg, lr, 0.9, 0.999, 1e-8)) +
                        [fast_ops.SquaredNorm()(tp, tg)], mode=mode)
    new_p, new_m, new_v, norm2 = f(p, m, v, g, np.float32(0.003))
    d = [x.astype('float64') for x in (p, m, v, g)]
    m64 = 0.9 * d[1] + 0.1 * d[3]
    v64 = 0.999 * d[2] + 0.001 * d[3] ** 2
    # float32 constants and sums: to float32 rounding of the terms
    np.testing.assert_allclose(new_m, m64, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(new_v, v64, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(new_p, d[0] - 0.003 * m64 / (np.sqrt(v64) + 1e-8),
                               rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(norm2, (d[0] ** 2).sum() + (d[3] ** 2).sum(), rtol=1e-6)


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
    outs.append(fast_ops.LogSoftmax()(tx))
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


def _omp_max_threads():
    import ctypes
    import ctypes.util
    return ctypes.CDLL(ctypes.util.find_library('gomp')).omp_get_max_threads()


def test_threads_default_to_every_core_and_workers_limit_them():
    import os
    import subprocess
    import sys
    from theano_platform import theano_env
    env = {k: v for k, v in os.environ.items() if k not in theano_env.THREAD_VARIABLES}
    code = ('import os; from theano_platform import theano_env; print(",".join(os.environ[v] '
            'for v in theano_env.THREAD_VARIABLES))')
    out = subprocess.run([sys.executable, '-c', code], env=env, cwd=ROOT,
                         capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ','.join([str(theano_env.usable_cores())] * 3)
    if not _omp_set_num_threads(2):
        pytest.skip('no libgomp')
    assert _omp_max_threads() == 2
    theano_env.limit_threads(1)
    assert _omp_max_threads() == 1
    assert all(os.environ[v] == '1' for v in theano_env.THREAD_VARIABLES)


def test_an_edit_of_an_ops_c_code_changes_its_cache_version(tmp_path, monkeypatch):
    """Theano reuses a compiled module whose key (the op's version) it knows:
    an op whose C code is edited must get another version, or the old module
    runs (it did: only the support code was in the version)."""
    import importlib

    def version_of(module_name, c_code):
        (tmp_path / (module_name + '.py')).write_text(
            'from theano_platform.fast_ops import _FastCOp\n'
            'class EditedOp(_FastCOp):\n'
            '    __props__ = ()\n'
            '    def perform(self, node, inputs, outputs):\n'
            '        pass\n'
            '    def c_code(self, node, name, inputs, outputs, sub):\n'
            '        return %r\n' % c_code)
        return importlib.import_module(module_name).EditedOp().c_code_cache_version()

    monkeypatch.syspath_prepend(str(tmp_path))
    first = version_of('edited_op_first', 'z = x + 1;')
    assert version_of('edited_op_again', 'z = x + 1;') == first
    assert version_of('edited_op_edited', 'z = x + 2;') != first
