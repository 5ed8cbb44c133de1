"""Training maths: regularisers, gradient clipping, Adadelta, and the Theano
gradients against central finite differences of the float64 NumPy cost."""
import numpy as np
import pytest

import numpy_reference as ref
from conftest import FULL, VARIANT_PREFIXES, make_batch

BATCH = dict(seed=5, src_lens=(5, 2, 3), trg_lens=(3, 6, 1))

# one configuration per decoder family (each gradient compilation costs ~15 s);
# NMT_TESTS_FULL=1 adds the remaining ones
GRAD_CONFIGS = ['baseline', 'mean', 'attentive-content_scope', 'memory-content_scope',
                'selfattn-content_scope']
if FULL:
    GRAD_CONFIGS += ['attentive', 'attentive-sum', 'attentive-product',
                     'attentive-dot', 'memory', 'selfattn']

# a handful of parameters all over the model, plus the variant-specific ones
COMMON = ['Wemb', 'encoder_U', 'encoder_r_Wx', 'encoder_r_bx', 'ff_state_W',
          'decoder_W', 'decoder_U', 'decoder_W_comb_att', 'decoder_Wc_att',
          'decoder_U_att', 'decoder_c_tt', 'decoder_Wc', 'decoder_Ux_nl',
          'ff_logit_lstm_W', 'ff_logit_prev_W', 'ff_logit_ctx_W', 'ff_logit_W',
          'ff_logit_b', 'Wemb_dec']


# ---------------------------------------------------------------------------
# NumPy-only checks of the reference itself (hand-computable)
# ---------------------------------------------------------------------------
def test_reference_alignment_term_by_hand():
    # one sentence: |x| = 3 (of 4 rows), |y| = 5 (of 6 rows) -> floor(5/3) = 1
    x_mask = np.array([[1.], [1.], [1.], [0.]])
    y_mask = np.array([[1.], [1.], [1.], [1.], [1.], [0.]])
    a = np.zeros((6, 1, 4))
    a[:, 0, 0] = 0.5
    a[:, 0, 1] = 0.5            # column sums: 3, 3, 0, 0
    # (1-3)^2 + (1-3)^2 + (1-0)^2 + (1-0)^2 = 10 (the padded source row counts)
    assert ref.alignment_term(a, x_mask, y_mask, 0.1) == pytest.approx(1.0)
    # two sentences: the mean over the batch
    x2 = np.concatenate([x_mask, np.array([[1.], [1.], [0.], [0.]])], axis=1)
    y2 = np.concatenate([y_mask, np.array([[1.], [0.], [0.], [0.], [0.], [0.]])], axis=1)
    a2 = np.concatenate([a, np.zeros((6, 1, 4))], axis=1)
    # second: floor(1/2) = 0, column sums 0 -> 0; mean = (10 + 0) / 2
    assert ref.alignment_term(a2, x2, y2, 1.0) == pytest.approx(5.0)


def test_reference_adadelta_first_step_by_hand():
    # first step from zero accumulators: Eg2 = 0.05 g^2,
    # dx = -sqrt(1e-6) / sqrt(0.05 g^2 + 1e-6) * g
    g = np.array([2.0, -0.5, 0.0])
    p, eg2, edx2 = ref.adadelta_step({'a': np.ones(3)}, {'a': g},
                                     {'a': np.zeros(3)}, {'a': np.zeros(3)})
    dx = -1e-3 / np.sqrt(0.05 * g ** 2 + 1e-6) * g
    np.testing.assert_allclose(p['a'], 1 + dx)
    np.testing.assert_allclose(eg2['a'], 0.05 * g ** 2)
    np.testing.assert_allclose(edx2['a'], 0.05 * dx ** 2)


def test_reference_clip_by_hand():
    g = [np.array([3.0]), np.array([[4.0]])]      # global norm 5
    out = ref.clip_gradients(g, 1.0)
    np.testing.assert_allclose(out[0], [0.6])
    np.testing.assert_allclose(out[1], [[0.8]])
    out = ref.clip_gradients(g, 5.0)              # not strictly above: unchanged
    np.testing.assert_allclose(out[1], [[4.0]])
    out = ref.clip_gradients(g, 0.)
    np.testing.assert_allclose(out[0], [3.0])


# ---------------------------------------------------------------------------
# regularised cost
# ---------------------------------------------------------------------------
@pytest.mark.parametrize('name', ['baseline', 'attentive-sum', 'memory-content_scope'])
def test_regularised_cost_matches_numpy(get_model, name):
    m = get_model(name)
    assert m.options['decay_c'] > 0 and m.options['alpha_c'] > 0
    x, x_mask, y, y_mask = make_batch(**BATCH)
    got = m.forward(x, x_mask, y, y_mask)
    exp = ref.training_cost(m.params64(), m.options, x, x_mask, y, y_mask)
    assert got['reg_cost'] == pytest.approx(float(exp), rel=1e-5)

    # the regulariser alone, on the project's own alphas (isolates the formula)
    extra = ref.l2_term(m.params64(), m.options['decay_c']) + ref.alignment_term(
        got['dec_alphas'].astype('float64'), x_mask, y_mask, m.options['alpha_c'])
    assert got['reg_cost'] - float(got['cost'].astype('float64').mean()) == \
        pytest.approx(float(extra), rel=1e-4)


# ---------------------------------------------------------------------------
# gradients vs central finite differences of the float64 NumPy cost
# ---------------------------------------------------------------------------
@pytest.mark.parametrize('name', GRAD_CONFIGS)
def test_gradients_vs_finite_differences(get_model, name):
    m = get_model(name)
    x, x_mask, y, y_mask = make_batch(**BATCH)
    outs = m.f_grad()(x, x_mask, y, y_mask)
    grads = dict(zip(m.tparams.keys(), outs[1:]))
    p64 = m.params64()
    assert float(outs[0]) == pytest.approx(
        float(ref.training_cost(p64, m.options, x, x_mask, y, y_mask)), rel=1e-5)

    names = [k for k in COMMON if k in p64] + \
        [k for k in p64 if k.startswith(VARIANT_PREFIXES)]
    rng = np.random.RandomState(11)
    h = 1e-6
    failures = []
    for k in names:
        g = grads[k]
        flat_g = g.ravel()
        picks = list(np.argsort(-np.abs(flat_g))[:2])            # the largest entries
        picks += list(rng.choice(flat_g.size, size=min(2, flat_g.size), replace=False))
        for idx in sorted(set(int(i) for i in picks)):
            pos = np.unravel_index(idx, g.shape)
            saved = p64[k][pos]
            p64[k][pos] = saved + h
            cp = ref.training_cost(p64, m.options, x, x_mask, y, y_mask)
            p64[k][pos] = saved - h
            cm = ref.training_cost(p64, m.options, x, x_mask, y, y_mask)
            p64[k][pos] = saved
            fd = (cp - cm) / (2 * h)
            got = float(g[pos])
            # float32 gradients: observed errors are ~1e-7 absolute, 1e-5 relative
            if abs(got - fd) > 2e-4 * abs(fd) + 2e-6:
                failures.append('%s%s: theano %.7g  finite-diff %.7g' % (k, pos, got, fd))
    assert not failures, '\n'.join(failures)


# ---------------------------------------------------------------------------
# gradient clipping
# ---------------------------------------------------------------------------
def test_clip_gradients_matches_numpy():
    import theano
    import optimizers
    import theano.tensor as tensor
    a, b = tensor.vector('a'), tensor.matrix('b')
    ga = np.array([3.0, -1.0], dtype='float32')
    gb = np.array([[4.0, 2.0], [0.5, -2.5]], dtype='float32')
    norm = np.sqrt((ga.astype('float64') ** 2).sum() + (gb.astype('float64') ** 2).sum())
    for clip_c in (1.0, 0.5 * norm, norm * 1.01, 100.0):
        f = theano.function([a, b], optimizers.clip_gradients([a, b], clip_c))
        got = f(ga, gb)
        exp = ref.clip_gradients([ga.astype('float64'), gb.astype('float64')], clip_c)
        for gg, ee in zip(got, exp):
            np.testing.assert_allclose(gg, ee, rtol=1e-5, err_msg='clip_c=%g' % clip_c)
    # clip_c <= 0: a no-op
    for clip_c in (0., -1.):
        out = optimizers.clip_gradients([a, b], clip_c)
        f = theano.function([a, b], out)
        got = f(ga, gb)
        np.testing.assert_array_equal(got[0], ga)
        np.testing.assert_array_equal(got[1], gb)


# ---------------------------------------------------------------------------
# Adadelta on a small problem with a known gradient (the model's own gradient
# is tested above; compiling it again through the optimiser would cost
# minutes): the original two-function form and the fused form that nmt.train
# uses, against the NumPy reference, after one and after three updates
# ---------------------------------------------------------------------------
def _linear_problem(init):
    import theano
    import theano.tensor as tensor
    from collections import OrderedDict
    tparams = OrderedDict((k, theano.shared(v.copy(), name=k)) for k, v in init.items())
    X, Y = tensor.matrix('X'), tensor.matrix('Y')
    # cost = 0.5 * sum((X A + b - Y)^2) -> dA = X^T R, db = sum_rows R
    R = tensor.dot(X, tparams['A']) + tparams['b'] - Y
    cost = 0.5 * (R ** 2).sum()
    return tparams, [X, Y], cost, tensor.grad(cost, wrt=list(tparams.values()))


def test_adadelta_fused_and_original_match_numpy(nmt_module):
    import theano.tensor as tensor
    from collections import OrderedDict
    import optimizers
    rng = np.random.RandomState(0)
    init = OrderedDict([('A', rng.randn(3, 4).astype('float32')),
                        ('b', rng.randn(4).astype('float32'))])
    runs = {}
    for fused in (False, True):
        tparams, inps, cost, grads = _linear_problem(init)
        state = OrderedDict()
        fns = optimizers.adadelta(tensor.scalar('lr'), tparams, grads, inps, cost,
                                  state=state, fused=fused)
        runs[fused] = (tparams, state, fns)

    params = OrderedDict((k, v.astype('float64')) for k, v in init.items())
    Eg2 = OrderedDict((k, np.zeros_like(v)) for k, v in params.items())
    Edx2 = OrderedDict((k, np.zeros_like(v)) for k, v in params.items())
    for step, lrate in enumerate((0.0001, 123.0, 0.5)):      # lr is unused
        Xv = rng.randn(5, 3).astype('float32')
        Yv = rng.randn(5, 4).astype('float32')
        Rv = Xv.astype('float64') @ params['A'] + params['b'] - Yv
        grads_np = OrderedDict([('A', Xv.T.astype('float64') @ Rv), ('b', Rv.sum(0))])
        for fused, (tparams, state, (f_grad_shared, f_update)) in runs.items():
            c = f_grad_shared(Xv, Yv)
            assert float(c) == pytest.approx(0.5 * (Rv ** 2).sum(), rel=1e-5)
            f_update(np.float32(lrate))
        new, Eg2, Edx2 = ref.adadelta_step(params, grads_np, Eg2, Edx2)
        if step in (0, 2):
            _check_adadelta(runs, params, new, Eg2, Edx2, step)
        params = OrderedDict((k, runs[False][0][k].get_value().astype('float64'))
                             for k in params)


def _check_adadelta(runs, old, new, Eg2, Edx2, step):
    """Both forms equal each other to float32 rounding and the reference."""
    (t_orig, s_orig, _), (t_fused, s_fused, _) = runs[False], runs[True]
    for k in old:
        got = t_orig[k].get_value().astype('float64')
        np.testing.assert_allclose(got - old[k], new[k] - old[k], rtol=1e-3, atol=1e-8,
                                   err_msg='update %d, %s' % (step + 1, k))
        np.testing.assert_allclose(t_fused[k].get_value(), t_orig[k].get_value(),
                                   rtol=1e-6, atol=1e-7,
                                   err_msg='fused, update %d, %s' % (step + 1, k))
        for suffix, exp in (('rgrad2', Eg2), ('rup2', Edx2)):
            name = '%s_%s' % (k, suffix)
            np.testing.assert_allclose(s_orig[name].get_value(), exp[k], rtol=1e-3,
                                       atol=1e-12, err_msg=name)
            np.testing.assert_allclose(s_fused[name].get_value(), s_orig[name].get_value(),
                                       rtol=1e-6, atol=1e-12, err_msg='fused ' + name)
