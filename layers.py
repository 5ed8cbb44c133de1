"""Parameter initialisers and symbolic layers (docs/equations.md:
Parameters, Forward pass, Residual decoders).

Every layer is a pair of functions: ``param_init_X(options, params, prefix,
...)`` adds its arrays to the ordered ``params`` dict, and ``X_layer(tparams,
...)`` builds its part of the Theano graph.  ``LAYERS`` maps the building
blocks' names to their pairs (``get_layer(name)``); ``DECODERS``, the decoder
registry at the end of this file, describes each decoder of the family.

Shared mechanisms exist once: ``gru_step`` (the GRU recurrence, also the
first half of the conditional GRU), ``source_attention`` (the Bahdanau
attention inside the conditional GRU), and ``target_attention`` with
``target_attention_scores`` (the attention over previous target words or
decoder states used by the residual, memory and self-attentive decoders),
and ``residual_summary`` with ``residual_summary_step`` (the d_t of the
residual decoder and of language_model/lm.py's language model).
"""
import contextlib
from collections import OrderedDict, namedtuple

import numpy

from theano_platform import theano_env  # noqa: F401  (configures Theano before its import)
import theano
import theano.tensor as tensor

from theano_platform import fast_ops
from theano_platform import recurrent_ops
from theano_platform import threaded_ops  # noqa: F401  (its optimizer: CPU ops on every thread)


def _p(prefix, name):
    return '%s_%s' % (prefix, name)


def floatx(value):
    """A constant of Theano's float type: float32 (floatX, theano_env), or
    float64 for gpu/check.py's reference of the same graphs."""
    return numpy.asarray(value, dtype=theano.config.floatX)


# --------------------------------------------------------------------------
# parameters as Theano shared variables (dl4mt's helpers, named as there):
# the arrays of a params dict -> shared variables, and back

def init_tparams(params):
    return OrderedDict((k, theano.shared(v, name=k)) for k, v in params.items())


def zipp(params, tparams):
    """Sets the shared variables ``tparams`` to the arrays of ``params``."""
    for k, v in params.items():
        tparams[k].set_value(v)


def unzip(tparams):
    return OrderedDict((k, v.get_value()) for k, v in tparams.items())


# --------------------------------------------------------------------------
# initialisers (docs/equations.md#parameters)

# shapes_only(): the initialisers return read-only zero-stride arrays, so that
# a model's parameter shapes (and count) are known without allocating them or
# drawing random numbers.
_SHAPES_ONLY = []


@contextlib.contextmanager
def shapes_only():
    _SHAPES_ONLY.append(True)
    try:
        yield
    finally:
        _SHAPES_ONLY.pop()


def _placeholder(shape):
    return numpy.broadcast_to(numpy.float32(0.), shape)


# The scale of the weight matrices that are not orthogonal
# (docs/training.md#initialisation), chosen by weight_scale(SCHEME):
# 'dl4mt', the original's, 0.01 * N(0, 1); 'glorot' (Glorot and Bengio 2010,
# as Marian initialises its GRUs), uniform in +-sqrt(6 / (nin + nout)), whose
# variance 2 / (nin + nout) keeps a layer's outputs at its inputs' scale, and
# the word matrices at variance 1 / dim_word (word_matrix).
# Square matrices are orthogonal under both.
WEIGHT_SCALES = ('glorot', 'dl4mt')
_WEIGHT_SCALE = ['dl4mt']


@contextlib.contextmanager
def weight_scale(scheme):
    """The initialisers inside draw their rectangular matrices by ``scheme``
    (one of WEIGHT_SCALES)."""
    if scheme not in WEIGHT_SCALES:
        raise ValueError('weight scale must be one of %s, not %r'
                         % (', '.join(WEIGHT_SCALES), scheme))
    _WEIGHT_SCALE.append(scheme)
    try:
        yield
    finally:
        _WEIGHT_SCALE.pop()


def ortho_weight(ndim):
    """The ``u`` of the SVD of a standard normal ndim x ndim matrix."""
    if _SHAPES_ONLY:
        return _placeholder((ndim, ndim))
    W = numpy.random.randn(ndim, ndim)
    u, _, _ = numpy.linalg.svd(W)
    return u.astype('float32')


def norm_weight(nin, nout=None, scale=0.01, ortho=True):
    """Orthogonal when square (and ortho), else scale * standard normal
    (under weight_scale('glorot'): Glorot-uniform, ``scale`` unused)."""
    if nout is None:
        nout = nin
    if nout == nin and ortho:
        return ortho_weight(nin)
    if _WEIGHT_SCALE[-1] == 'glorot':
        return _uniform((nin, nout), numpy.sqrt(6. / (nin + nout)))
    if _SHAPES_ONLY:
        return _placeholder((nin, nout))
    return (scale * numpy.random.randn(nin, nout)).astype('float32')


def _uniform(shape, limit):
    """float32 uniform in +-limit."""
    if _SHAPES_ONLY:
        return _placeholder(shape)
    return numpy.random.uniform(-limit, limit, shape).astype('float32')


def word_matrix(nin, nout, dim_word):
    """A matrix with a row or a column per word (the embeddings, the output
    layer's weights).  Under 'glorot': uniform in +-sqrt(3 / dim_word), a
    variance of 1 / dim_word whatever the vocabulary (as Marian starts its
    embeddings and output layer), where Glorot's fan would count the
    vocabulary and shrink them several times (docs/training.md#initialisation);
    under 'dl4mt': the original's 0.01 * N(0, 1)."""
    if _WEIGHT_SCALE[-1] != 'glorot':
        return norm_weight(nin, nout)
    return _uniform((nin, nout), numpy.sqrt(3. / dim_word))


def zeros(n):
    if _SHAPES_ONLY:
        return _placeholder((n,))
    return numpy.zeros((n,), dtype='float32')


# --------------------------------------------------------------------------
# small helpers

def tanh(x):
    return tensor.tanh(x)


def linear(x):
    return x


ACTIVATIONS = {'tanh': tanh, 'linear': linear}


def _slice(x, n, dim):
    """The n-th block of width dim along the last axis."""
    return x[..., n * dim:(n + 1) * dim]


def dropout_layer(state_before, use_noise, trng):
    """Training: Bernoulli(0.5) mask; test: times 0.5 (the original's scaling)."""
    return tensor.switch(
        use_noise,
        state_before * trng.binomial(state_before.shape, p=0.5, n=1,
                                     dtype=state_before.dtype),
        state_before * 0.5)


def masked_keep(mask, new, old):
    """m * new + (1 - m) * old with a per-sample mask m (n,)."""
    return mask[:, None] * new + (1. - mask)[:, None] * old


# --------------------------------------------------------------------------
# feed-forward layer

def param_init_fflayer(options, params, prefix='ff', nin=None, nout=None,
                       ortho=True):
    params[_p(prefix, 'W')] = norm_weight(nin, nout, scale=0.01, ortho=ortho)
    params[_p(prefix, 'b')] = zeros(nout)
    return params


def fflayer(tparams, state_below, options, prefix='ff', activ='tanh', **kwargs):
    f = ACTIVATIONS[activ] if isinstance(activ, str) else activ
    return f(tensor.dot(state_below, tparams[_p(prefix, 'W')]) +
             tparams[_p(prefix, 'b')])


# --------------------------------------------------------------------------
# GRU (encoder, and the first transition of the conditional GRU)

def param_init_gru(options, params, prefix='gru', nin=None, dim=None):
    params[_p(prefix, 'W')] = numpy.concatenate(
        [norm_weight(nin, dim), norm_weight(nin, dim)], axis=1)
    params[_p(prefix, 'b')] = zeros(2 * dim)
    params[_p(prefix, 'U')] = numpy.concatenate(
        [ortho_weight(dim), ortho_weight(dim)], axis=1)
    params[_p(prefix, 'Wx')] = norm_weight(nin, dim)
    params[_p(prefix, 'Ux')] = ortho_weight(dim)
    params[_p(prefix, 'bx')] = zeros(dim)
    return params


def gru_step(m_, x_, xx_, h_, U, Ux):
    """One GRU transition (docs/equations.md#gru).

    x_ = emb @ W + b and xx_ = emb @ Wx + bx are precomputed for all steps.
    """
    dim = Ux.shape[1]
    preact = tensor.dot(h_, U) + x_
    r = tensor.nnet.sigmoid(_slice(preact, 0, dim))
    u = tensor.nnet.sigmoid(_slice(preact, 1, dim))
    hbar = tensor.tanh(tensor.dot(h_, Ux) * r + xx_)
    h = u * h_ + (1. - u) * hbar
    return masked_keep(m_, h, h_)


def _input_projections(tparams, state_below, prefix):
    x_ = tensor.dot(state_below, tparams[_p(prefix, 'W')]) + tparams[_p(prefix, 'b')]
    xx_ = tensor.dot(state_below, tparams[_p(prefix, 'Wx')]) + tparams[_p(prefix, 'bx')]
    return x_, xx_


def gru_layer(tparams, state_below, options, prefix='gru', mask=None, **kwargs):
    """GRU over a T x n x nin sequence; returns [h (T x n x dim)]."""
    nsteps = state_below.shape[0]
    n_samples = state_below.shape[1]
    dim = tparams[_p(prefix, 'Ux')].shape[1]
    if mask is None:
        mask = tensor.alloc(floatx(1.), nsteps, n_samples)
    x_, xx_ = _input_projections(tparams, state_below, prefix)
    h0 = tensor.alloc(floatx(0.), n_samples, dim)
    if fast_ops.enabled():   # the CPU: the whole loop as one C op
        return [recurrent_ops.gru_layer(mask, x_, xx_, h0, tparams[_p(prefix, 'U')],
                                        tparams[_p(prefix, 'Ux')])]
    rval, _ = theano.scan(
        gru_step,
        sequences=[mask, x_, xx_],
        outputs_info=[h0],
        non_sequences=[tparams[_p(prefix, 'U')], tparams[_p(prefix, 'Ux')]],
        name=_p(prefix, 'layers'), n_steps=nsteps, strict=True)
    return [rval]


def gru_one_step(tparams, state_below, prefix, mask, states):
    """One GRU step on n x nin inputs from [h_] (decoding); returns [h]."""
    x_, xx_ = _input_projections(tparams, state_below, prefix)
    return [gru_step(mask, x_, xx_, states[0], tparams[_p(prefix, 'U')],
                     tparams[_p(prefix, 'Ux')])]


# --------------------------------------------------------------------------
# LSTM (the language model's other recurrent layer, language_model/lm.py)
#
# One step, gates in the order input, forget, output, candidate (no peepholes):
#   [a_i, a_f, a_o, a_c] = x W + b + h_{t-1} U
#   c_t = sigmoid(a_f) * c_{t-1} + sigmoid(a_i) * tanh(a_c)
#   h_t = sigmoid(a_o) * tanh(c_t)
# Where the mask is 0, h and c keep their previous values.

def param_init_lstm(options, params, prefix='lstm', nin=None, dim=None):
    params[_p(prefix, 'W')] = numpy.concatenate(
        [norm_weight(nin, dim) for _ in range(4)], axis=1)
    params[_p(prefix, 'U')] = numpy.concatenate(
        [ortho_weight(dim) for _ in range(4)], axis=1)
    params[_p(prefix, 'b')] = zeros(4 * dim)
    return params


def lstm_step(m_, x_, h_, c_, U):
    """One LSTM transition; x_ = emb @ W + b is precomputed.  Returns (h, c)."""
    dim = U.shape[0]
    preact = tensor.dot(h_, U) + x_
    i = tensor.nnet.sigmoid(_slice(preact, 0, dim))
    f = tensor.nnet.sigmoid(_slice(preact, 1, dim))
    o = tensor.nnet.sigmoid(_slice(preact, 2, dim))
    c = f * c_ + i * tensor.tanh(_slice(preact, 3, dim))
    h = o * tensor.tanh(c)
    return masked_keep(m_, h, h_), masked_keep(m_, c, c_)


def lstm_layer(tparams, state_below, options, prefix='lstm', mask=None, **kwargs):
    """LSTM over a T x n x nin sequence from zero states; returns [h, c]."""
    nsteps = state_below.shape[0]
    n_samples = state_below.shape[1]
    dim = tparams[_p(prefix, 'U')].shape[0]
    if mask is None:
        mask = tensor.alloc(floatx(1.), nsteps, n_samples)
    x_ = tensor.dot(state_below, tparams[_p(prefix, 'W')]) + tparams[_p(prefix, 'b')]
    zero = tensor.alloc(floatx(0.), n_samples, dim)
    (h, c), _ = theano.scan(
        lstm_step, sequences=[mask, x_], outputs_info=[zero, zero],
        non_sequences=[tparams[_p(prefix, 'U')]],
        name=_p(prefix, 'layers'), n_steps=nsteps, strict=True)
    return [h, c]


def lstm_one_step(tparams, state_below, prefix, mask, states):
    """One LSTM step on n x nin inputs from [h_, c_] (decoding); returns [h, c]."""
    x_ = tensor.dot(state_below, tparams[_p(prefix, 'W')]) + tparams[_p(prefix, 'b')]
    return list(lstm_step(mask, x_, states[0], states[1], tparams[_p(prefix, 'U')]))


# --------------------------------------------------------------------------
# conditional GRU with attention (docs/equations.md#conditional-gru)

GRU_COND_SEQ_PARAMS = ['U', 'Wc', 'W_comb_att', 'U_att', 'c_tt', 'Ux', 'Wcx',
                       'U_nl', 'Ux_nl', 'b_nl', 'bx_nl']


def param_init_gru_cond(options, params, prefix='gru_cond', nin=None, dim=None,
                        dimctx=None):
    params = param_init_gru(options, params, prefix, nin=nin, dim=dim)
    params[_p(prefix, 'U_nl')] = numpy.concatenate(
        [ortho_weight(dim), ortho_weight(dim)], axis=1)
    params[_p(prefix, 'b_nl')] = zeros(2 * dim)
    params[_p(prefix, 'Ux_nl')] = ortho_weight(dim)
    params[_p(prefix, 'bx_nl')] = zeros(dim)
    params[_p(prefix, 'Wc')] = norm_weight(dimctx, dim * 2)
    params[_p(prefix, 'Wcx')] = norm_weight(dimctx, dim)
    params[_p(prefix, 'W_comb_att')] = norm_weight(dim, dimctx)
    params[_p(prefix, 'Wc_att')] = norm_weight(dimctx)
    params[_p(prefix, 'b_att')] = zeros(dimctx)
    params[_p(prefix, 'U_att')] = norm_weight(dimctx, 1)
    params[_p(prefix, 'c_tt')] = zeros(1)
    return params


def dot_vector(x, v, rowwise=False):
    """x @ v for a k x 1 matrix v, keeping the last axis (size 1).

    rowwise: as an elementwise product summed over the last axis.  BLAS's
    matrix-vector kernels round a row differently depending on how many rows
    there are; decoding takes this form so that a sentence's numbers do not
    depend on its batch (nor on how many hypotheses are live).
    """
    if rowwise:
        return (x * v[:, 0]).sum(-1, keepdims=True)
    return tensor.dot(x, v)


def exp_tanh(x):
    """tanh(x) = 1 - 2 / (exp(2x) + 1), within ~1e-7 (absolute) of tanh.

    Decoding in Theano's graph (the attention over previous words, and the
    source attention on a GPU or in fast_ops.original_graph()) computes the
    attentions' tanh this way: Theano's tanh calls the C library's tanhf,
    5x slower than its expf (16 vs 3 ns an element on the project's CPU).
    """
    one, two = floatx(1.), floatx(2.)
    return one - two / (tensor.exp(two * x) + one)


def attention_tanh(decoding):
    return exp_tanh if decoding else tensor.tanh


def source_attention(h1, pctx_, cc_, context_mask, W_comb_att, U_att, c_tt,
                     decoding=False):
    """Attention over the source annotations; returns (c, alpha (T_src x n)).

    On the CPU (training and decoding): one C op over the T_src x n x 2d
    values (fast_ops.attention); otherwise Theano's graph (attention_graph).
    """
    q = tensor.dot(h1, W_comb_att)
    if fast_ops.enabled():
        return fast_ops.attention(pctx_, q, U_att, c_tt, cc_, context_mask)
    return attention_graph(pctx_, q, U_att, c_tt, cc_, context_mask, decoding)


def attention_graph(pctx_, q, U_att, c_tt, cc_, context_mask=None, decoding=False):
    """The source attention in Theano's ops: alpha = exp(tanh(pctx + q) U_att +
    c_tt) without max subtraction, masked, normalised (as the original);
    c = sum_i alpha_i cc_i.  decoding: the one-step forms (dot_vector rowwise,
    exp_tanh), so that a sentence's numbers do not depend on its batch."""
    hidden = attention_tanh(decoding)(pctx_ + q[None, :, :])
    alpha = dot_vector(hidden, U_att, rowwise=decoding) + c_tt
    alpha = tensor.exp(alpha.reshape([alpha.shape[0], alpha.shape[1]]))
    if context_mask is not None:
        alpha = alpha * context_mask
    alpha = alpha / alpha.sum(0, keepdims=True)
    return (cc_ * alpha[:, :, None]).sum(0), alpha


def gru_cond_step(m_, x_, xx_, h_, pctx_, cc_, context_mask,
                  U, Wc, W_comb_att, U_att, c_tt, Ux, Wcx, U_nl, Ux_nl, b_nl, bx_nl,
                  decoding=False):
    """One conditional-GRU step; returns (s, c, alpha (T_src x n))."""
    dim = Ux.shape[1]
    h1 = gru_step(m_, x_, xx_, h_, U, Ux)
    ctx_, alpha = source_attention(h1, pctx_, cc_, context_mask,
                                   W_comb_att, U_att, c_tt, decoding)
    preact2 = tensor.nnet.sigmoid(tensor.dot(h1, U_nl) + b_nl + tensor.dot(ctx_, Wc))
    r2 = _slice(preact2, 0, dim)
    u2 = _slice(preact2, 1, dim)
    h2 = tensor.tanh((tensor.dot(h1, Ux_nl) + bx_nl) * r2 + tensor.dot(ctx_, Wcx))
    h2 = u2 * h1 + (1. - u2) * h2
    # masked steps keep h1, not h_ (as the original)
    return masked_keep(m_, h2, h1), ctx_, alpha


def source_projection(tparams, context, prefix='decoder'):
    """pctx = ctx @ Wc_att + b_att, the attention's projection of the source."""
    return tensor.dot(context, tparams[_p(prefix, 'Wc_att')]) + tparams[_p(prefix, 'b_att')]


def _decoder_inputs(tparams, state_below, prefix, mask, context, one_step=False,
                    pctx=None):
    """Mask, input projections and projected context shared by all decoders
    (``pctx``: the projected context when the caller computed it already).

    Without a mask every row is real (a mask of ones changes no number).
    """
    if mask is None:
        shape = state_below.shape[:1] if one_step else state_below.shape[:2]
        mask = tensor.ones(shape, dtype=theano.config.floatX)
    x_, xx_ = _input_projections(tparams, state_below, prefix)
    pctx_ = source_projection(tparams, context, prefix) if pctx is None else pctx
    shared_vars = [tparams[_p(prefix, k)] for k in GRU_COND_SEQ_PARAMS]
    return mask, x_, xx_, pctx_, shared_vars


def gru_cond_layer(tparams, state_below, options, prefix='gru', mask=None,
                   context=None, one_step=False, init_state=None,
                   context_mask=None, pctx=None, **kwargs):
    """Conditional GRU over the shifted target embeddings.

    Returns a dict: 'states', 'ctxs', 'alphas' (T x n x T_src) and
    'readout_prev' (what the ff_logit_prev term reads: the embeddings).
    With one_step=True state_below is n x e and every value is for one step;
    ``pctx`` is then the source_projection of the context, when given.
    """
    mask, x_, xx_, pctx_, shared_vars = _decoder_inputs(
        tparams, state_below, prefix, mask, context, one_step, pctx)
    if one_step:   # decoding: Theano's graph in its one-step forms
        h, c, alpha = gru_cond_step(mask, x_, xx_, init_state, pctx_, context,
                                    context_mask, *shared_vars, decoding=True)
        return {'states': h, 'ctxs': c, 'alphas': alpha.T,
                'readout_prev': state_below}

    if fast_ops.enabled():   # the CPU: the whole loop as one C op
        states, ctxs, alphas = recurrent_ops.cond_gru_layer(
            mask, x_, xx_, init_state, pctx_, context, context_mask, shared_vars)
        return {'states': states, 'ctxs': ctxs, 'alphas': alphas,
                'readout_prev': state_below}

    def _step(m_, x_t, xx_t, h_, ctx_prev, alpha_prev, pctx_, cc_, *rest):
        cmask = rest[0] if context_mask is not None else None
        weights = rest[1:] if context_mask is not None else rest
        h, c, alpha = gru_cond_step(m_, x_t, xx_t, h_, pctx_, cc_, cmask, *weights)
        return h, c, alpha.T

    n_samples = state_below.shape[1]
    non_seqs = [pctx_, context] + ([context_mask] if context_mask is not None else [])
    (states, ctxs, alphas), _ = theano.scan(
        _step,
        sequences=[mask, x_, xx_],
        outputs_info=[init_state,
                      tensor.alloc(floatx(0.), n_samples, context.shape[2]),
                      tensor.alloc(floatx(0.), n_samples, context.shape[0])],
        non_sequences=non_seqs + shared_vars,
        name=_p(prefix, 'layers'), n_steps=state_below.shape[0], strict=True)
    return {'states': states, 'ctxs': ctxs, 'alphas': alphas,
            'readout_prev': state_below}


# --------------------------------------------------------------------------
# attention over previous target words / decoder states
# (docs/equations.md#residual-decoders)
#
# Items y_j (words' embeddings, or decoder states) are scored against an
# optional query q_t; K_j = y_j @ W_prev + b_prev is computed once per item.
#   content        v^T tanh(K_j)                       (the authors' "simple")
#   content_scope  v^T tanh(K_j + W_s s_t)             (NAACL eq. 12)
#   sum            v^T tanh(K_j + W_c c_t)             (AAAI eq. 14)
#   product        v^T tanh(K_j * W_c c_t)             (AAAI eq. 14)
#   dot            y_j^T W_c c_t                       (AAAI eq. 14)

SCORINGS = ('content', 'content_scope', 'sum', 'product', 'dot')
QUERY_OF_SCORING = {'content': None, 'content_scope': 'state', 'sum': 'ctx',
                    'product': 'ctx', 'dot': 'ctx'}


def param_init_target_attention(params, prefix, scoring, dim_item, dim_key,
                                dim_state, dim_ctx):
    if scoring not in SCORINGS:
        raise ValueError('att_scoring must be one of %s, not %r'
                         % (', '.join(SCORINGS), scoring))
    if scoring != 'dot':
        params[_p(prefix, 'W_prev')] = norm_weight(dim_item, dim_key)
        params[_p(prefix, 'b_prev')] = zeros(dim_key)
        params[_p(prefix, 'V_prev')] = norm_weight(dim_key, 1)
    if scoring == 'content_scope':
        params[_p(prefix, 'W_scope')] = norm_weight(dim_state, dim_key)
    elif scoring in ('sum', 'product', 'dot'):
        params[_p(prefix, 'W_ctx')] = norm_weight(dim_ctx, dim_key)
    return params


def target_attention_keys(tparams, prefix, scoring, items):
    """K_j for every item (any leading shape, last axis = item features)."""
    if scoring == 'dot':
        return items
    return tensor.dot(items, tparams[_p(prefix, 'W_prev')]) + tparams[_p(prefix, 'b_prev')]


def target_attention_query(tparams, prefix, scoring, state, ctx):
    """W_s s_t or W_c c_t (None for the query-free 'content' scoring)."""
    kind = QUERY_OF_SCORING[scoring]
    if kind == 'state':
        return tensor.dot(state, tparams[_p(prefix, 'W_scope')])
    if kind == 'ctx':
        return tensor.dot(ctx, tparams[_p(prefix, 'W_ctx')])
    return None


def target_attention_scores(tparams, prefix, scoring, keys, query, decoding=False):
    """Energies; keys (..., n, k) and query broadcastable to them.

    Returns the keys' shape without its last axis (decoding: see
    source_attention).
    """
    if scoring == 'dot':
        return (keys * query).sum(-1)
    tanh = attention_tanh(decoding)
    if scoring == 'content':
        hidden = tanh(keys)
    elif scoring == 'product':
        hidden = tanh(keys * query)
    else:  # content_scope, sum
        hidden = tanh(keys + query)
    V = tparams[_p(prefix, 'V_prev')]
    return dot_vector(hidden, V, decoding)[..., 0]


def window_mask(y_mask):
    """W[t, j, n] = 1 where j <= t and row j is a real target row."""
    T = y_mask.shape[0]
    steps = tensor.arange(T)
    causal = tensor.cast(steps[None, :] <= steps[:, None], theano.config.floatX)  # t x j
    return causal[:, :, None] * y_mask[None, :, :]


def masked_softmax(energy, mask, axis):
    """Softmax along axis over mask > 0 (max-subtracted within the mask)."""
    neg = floatx(-1e30)
    e = tensor.switch(mask > 0, energy, neg)
    e = e - e.max(axis=axis, keepdims=True)
    w = tensor.exp(e) * mask
    return w / w.sum(axis=axis, keepdims=True)


def target_attention(tparams, prefix, scoring, items, window, state=None, ctx=None):
    """Attention of every row t over the items j in its window (training graph).

    items: T x n x k items (row j = what row t may attend to when j <= t);
    window: T x T x n from ``window_mask``; state/ctx: T x n x . queries.
    Returns (summary T x n x k, weights T x n x T).
    """
    keys = target_attention_keys(tparams, prefix, scoring, items)
    query = target_attention_query(tparams, prefix, scoring, state, ctx)
    if query is None:
        energy = target_attention_scores(tparams, prefix, scoring, keys, None)
        energy = tensor.shape_padleft(energy)  # 1 x J x n, same for every t
    else:  # t x j x n
        energy = target_attention_scores(tparams, prefix, scoring,
                                         keys[None, :, :, :], query[:, None, :, :])
    weights = masked_softmax(energy, window, axis=1)  # t x j x n
    # summary[t, n] = sum_j weights[t, j, n] * items[j, n]
    summary = tensor.batched_dot(weights.dimshuffle(2, 0, 1),
                                 items.dimshuffle(1, 0, 2))  # n x t x k
    return summary.dimshuffle(1, 0, 2), weights.dimshuffle(0, 2, 1)


def target_attention_step(tparams, prefix, scoring, items, keys, query_state=None,
                          query_ctx=None, window=None, decoding=True):
    """One step's attention over J x n history (all of it in the window,
    unless ``window``, broadcastable to J x n, says otherwise): a decoding
    step, or (decoding=False) a step of the memory RNN's training scan.

    Returns (summary n x k, weights n x J).
    """
    query = target_attention_query(tparams, prefix, scoring, query_state, query_ctx)
    energy = target_attention_scores(
        tparams, prefix, scoring, keys, None if query is None else query[None, :, :],
        decoding=decoding)
    if window is None:
        window = tensor.ones_like(energy)
    weights = masked_softmax(energy, window, axis=0)  # J x n
    summary = (items * weights[:, :, None]).sum(0)
    return summary, weights.T


def prefix_mean(items, window):
    """Mean of items[1..t] within the window (the mean residual, NAACL eq. 9).

    Row 0 (the zero embedding before the first word) is excluded; rows with no
    word yet get 0.
    """
    w = tensor.set_subtensor(window[:, 0, :], 0.)       # t x j x n
    count = tensor.maximum(w.sum(axis=1, keepdims=True), 1.)
    w = w / count
    return tensor.batched_dot(w.dimshuffle(2, 0, 1),
                              items.dimshuffle(1, 0, 2)).dimshuffle(1, 0, 2)


def shift_right(seq, first):
    """[first, seq[0], ..., seq[T-2]]: the value entering each row."""
    return tensor.concatenate([tensor.shape_padleft(first), seq[:-1]], axis=0)


# --------------------------------------------------------------------------
# the decoder family
#
# Training (one_step=False): the layer runs over all target rows and returns a
# dict with 'states', 'ctxs', 'alphas' (T x n x T_src), 'readout_prev' (what
# ff_logit_prev reads) and, where the decoder has them, 'prev_alphas' (T x n x
# T, the attention over previous words or states) and 'extra_readout'.
# Decoding (one_step=True): state_below is n x e, ``carry`` holds what the
# decoder carried from the previous step (named as in its registry entry) and
# the layer returns the same dict for one step plus 'carry', the new values.

RESIDUALS = ('mean', 'attentive')


def append_step(rows, item):
    """rows (J x n x k) with this step's item (n x k) as row J: the one place
    where a carried history grows."""
    return tensor.concatenate([rows, tensor.shape_padleft(item)], axis=0)


def param_init_residual(options, params, prefix, dim_word, dim_state, dim_ctx=None):
    """Parameters of the residual summary d_t: the attentive residual's
    scoring (``prefix``_W_prev, ...); the mean residual has none."""
    if options['residual'] == 'attentive':
        param_init_target_attention(params, prefix, options['att_scoring'],
                                    dim_item=dim_word, dim_key=dim_word,
                                    dim_state=dim_state, dim_ctx=dim_ctx)
    return params


def residual_summary(tparams, options, prefix, emb, mask, state=None, ctx=None):
    """d_t of every row of the shifted embeddings (training graph).

    Mean: NAACL eq. 9 over rows 1..t; attentive: eq. 10-13 over rows 0..t, the
    query (s_t or c_t, by the scoring) from ``state``/``ctx``.  Returns
    (d T x n x e, weights T x n x T or None for the mean).
    """
    window = window_mask(mask)
    if options['residual'] == 'mean':
        return prefix_mean(emb, window), None
    return target_attention(tparams, prefix, options['att_scoring'], emb, window,
                            state=state, ctx=ctx)


def residual_summary_step(tparams, options, prefix, carry, emb, state=None, ctx=None):
    """One decoding step of d_t over the carried words plus ``emb``.

    ``carry``: 'prev_embs' (and for the attentive residual 'prev_keys'), the
    rows of the previous steps.  Returns (d n x e, weights n x J or None, the
    new carry).
    """
    items = append_step(carry['prev_embs'], emb)
    new_carry = {'prev_embs': items}
    if options['residual'] == 'mean':
        # mean of rows 1..J-1 (row 0 is the zero embedding); 0 at the first step
        n_words = tensor.maximum(items.shape[0] - 1, 1).astype(theano.config.floatX)
        return items[1:].sum(0) / n_words, None, new_carry
    scoring = options['att_scoring']
    keys = append_step(carry['prev_keys'],
                       target_attention_keys(tparams, prefix, scoring, emb))
    new_carry['prev_keys'] = keys
    d, w = target_attention_step(tparams, prefix, scoring, items, keys, state, ctx)
    return d, w, new_carry


def param_init_gru_cond_residual(options, params, prefix='decoder', nin=None,
                                 dim=None, dimctx=None):
    params = param_init_gru_cond(options, params, prefix, nin=nin, dim=dim,
                                 dimctx=dimctx)
    # the authors' code names these cond_att_*
    return param_init_residual(options, params, 'cond_att', dim_word=nin,
                               dim_state=dim, dim_ctx=dimctx)


def gru_cond_residual_layer(tparams, state_below, options, prefix='decoder',
                            mask=None, context=None, one_step=False,
                            init_state=None, context_mask=None, carry=None,
                            **kwargs):
    """Conditional GRU whose readout reads d_t, a summary of the previous words.

    The recurrence is the baseline's; d_t replaces y_{t-1} in ff_logit_prev
    (NAACL eq. 8; mean: eq. 9; attentive: eq. 10-13).  Decoding carries
    'prev_embs' (row 0 is the zero embedding of the first step) and, for the
    attentive residual, their keys 'prev_keys'; with the authors' inference
    (docs/equations.md#the-authors-inference) 'memory', 'memory_keys' and
    'time' instead.
    """
    out = gru_cond_layer(tparams, state_below, options, prefix, mask=mask,
                         context=context, one_step=one_step,
                         init_state=init_state, context_mask=context_mask, **kwargs)
    if (one_step and options['residual'] == 'attentive'
            and options.get('inference') == AUTHORS_INFERENCE):
        d, w, out['carry'] = _authors_residual_step(tparams, options, out, state_below,
                                                    carry)
    elif one_step:
        d, w, out['carry'] = residual_summary_step(
            tparams, options, 'cond_att', carry, state_below,
            state=out['states'], ctx=out['ctxs'])
    else:
        d, w = residual_summary(tparams, options, 'cond_att', state_below, mask,
                                state=out['states'], ctx=out['ctxs'])
    out['readout_prev'] = d
    if w is not None:
        out['prev_alphas'] = w
    return out


def _authors_residual_step(tparams, options, out, emb, carry):
    """d_t as the authors' sampler computes it
    (docs/equations.md#the-authors-inference).

    M' = switch(time > 1, [M; emb], emb): an elementwise switch broadcasts
    both branches, so at time 1 (M = one zero row) M' is two zero rows.  The
    summary attends to the rows j < time of M' (with the model's scoring; for
    'content', the authors' only one, exactly theirs) and the weights returned
    are those rows' (the authors' trailing 0 left out).  The keys of M' are
    carried beside it ('memory_keys', switched the same way).  Returns (d n x
    e, weights n x time, the new carry), as ``residual_summary_step``.
    """
    scoring = options['att_scoring']
    time = carry['time']
    grow = time > 1

    def switched(rows, item):
        return tensor.switch(grow, append_step(rows, item), tensor.shape_padleft(item))

    memory = switched(carry['memory'], emb)
    keys = switched(carry['memory_keys'],
                    target_attention_keys(tparams, 'cond_att', scoring, emb))
    window = tensor.shape_padright(
        tensor.cast(tensor.arange(memory.shape[0]) < time, theano.config.floatX))  # J x 1
    d, w = target_attention_step(tparams, 'cond_att', scoring, memory, keys,
                                 out['states'], out['ctxs'], window=window)
    return (d, w[:, :tensor.cast(time, 'int64')],
            {'memory': memory, 'memory_keys': keys, 'time': time + 1})


def _state_history_step(tparams, prefix, scoring, carry, state):
    """The carried states and their keys with ``state`` appended."""
    items = append_step(carry['prev_states'], state)
    keys = append_step(carry['prev_keys'],
                       target_attention_keys(tparams, prefix, scoring, state))
    return items, keys


def param_init_gru_cond_selfattn(options, params, prefix='decoder', nin=None,
                                 dim=None, dimctx=None):
    params = param_init_gru_cond(options, params, prefix, nin=nin, dim=dim,
                                 dimctx=dimctx)
    param_init_target_attention(params, 'self_att', options['att_scoring'],
                                dim_item=dim, dim_key=dim, dim_state=dim,
                                dim_ctx=dimctx)
    param_init_fflayer(options, params, prefix='ff_logit_self', nin=dim,
                       nout=options['dim_word'], ortho=False)
    return params


def gru_cond_selfattn_layer(tparams, state_below, options, prefix='decoder',
                            mask=None, context=None, one_step=False,
                            init_state=None, context_mask=None, carry=None,
                            **kwargs):
    """Self-attentive RNN (NAACL sec. 5.2, A.3.3): r_t over previous states
    enters the readout through ff_logit_self; the recurrence is unchanged.

    Items are the states entering each row: s_init, s_0, ..., s_{t-1}.
    Decoding carries them up to s_{t-2} ('prev_states', with 'prev_keys');
    init_state (s_{t-1}) is appended here.
    """
    out = gru_cond_layer(tparams, state_below, options, prefix, mask=mask,
                         context=context, one_step=one_step,
                         init_state=init_state, context_mask=context_mask, **kwargs)
    scoring = options['att_scoring']
    if one_step:
        items, keys = _state_history_step(tparams, 'self_att', scoring, carry,
                                          init_state)
        out['carry'] = {'prev_states': items, 'prev_keys': keys}
        r, w = target_attention_step(tparams, 'self_att', scoring, items, keys,
                                     query_state=out['states'])
    else:
        items = shift_right(out['states'], init_state)
        r, w = target_attention(tparams, 'self_att', scoring, items,
                                window_mask(mask), state=out['states'])
    out['extra_readout'] = [('ff_logit_self', r)]
    out['prev_alphas'] = w
    return out


def param_init_gru_cond_memory(options, params, prefix='decoder', nin=None,
                               dim=None, dimctx=None):
    params = param_init_gru_cond(options, params, prefix, nin=nin, dim=dim,
                                 dimctx=dimctx)
    param_init_target_attention(params, 'mem_att', options['att_scoring'],
                                dim_item=dim, dim_key=dim, dim_state=dim,
                                dim_ctx=dimctx)
    return params


def gru_cond_memory_layer(tparams, state_below, options, prefix='decoder',
                          mask=None, context=None, one_step=False,
                          init_state=None, context_mask=None, carry=None,
                          **kwargs):
    """Memory RNN (NAACL sec. 5.1, A.3.2): the conditional GRU runs from
    s~_{t-1}, an attention summary of s_init, s_0, ..., s_{t-1}, instead of
    s_{t-1}.  For content_scope the query is s_{t-1}.
    """
    scoring = options['att_scoring']
    if not one_step:
        return _memory_scan(tparams, state_below, options, prefix, mask, context,
                            init_state, context_mask)
    items, keys = _state_history_step(tparams, 'mem_att', scoring, carry, init_state)
    s_tilde, w = target_attention_step(tparams, 'mem_att', scoring, items,
                                       keys, query_state=init_state)
    out = gru_cond_layer(tparams, state_below, options, prefix, mask=mask,
                         context=context, one_step=True, init_state=s_tilde,
                         context_mask=context_mask, **kwargs)
    out['carry'] = {'prev_states': items, 'prev_keys': keys}
    out['prev_alphas'] = w
    return out


def _memory_scan(tparams, state_below, options, prefix, mask, context, init_state,
                 context_mask):
    """The memory RNN's training graph: one scan that also fills row t+1 of
    the item and key buffers with s_t (row 0 holds s_init)."""
    scoring = options['att_scoring']
    nsteps = state_below.shape[0]
    n_samples = state_below.shape[1]
    dim = tparams[_p(prefix, 'Ux')].shape[1]
    mask, x_, xx_, pctx_, shared_vars = _decoder_inputs(
        tparams, state_below, prefix, mask, context)
    if context_mask is None:
        context_mask = tensor.alloc(floatx(1.), context.shape[0], n_samples)
    att_names = [k for k in tparams if k.startswith('mem_att_')]
    att_params = [tparams[k] for k in att_names]
    items0 = tensor.alloc(floatx(0.), nsteps, n_samples, dim)
    items0 = tensor.set_subtensor(items0[0], init_state)
    key0 = target_attention_keys(tparams, 'mem_att', scoring, init_state)
    keys0 = tensor.alloc(floatx(0.), nsteps, n_samples, key0.shape[1])
    keys0 = tensor.set_subtensor(keys0[0], key0)

    def _step(t, m_, x_t, xx_t,                         # sequences
              h_, items, keys, ctx_prev, alpha_prev, w_prev,  # recurrent
              full_mask, pctx_, cc_, cmask, *rest):     # non-sequences
        tp = OrderedDict(zip(att_names, rest[:len(att_names)]))
        weights = rest[len(att_names):]
        # window: rows j <= t that are real target rows
        rows = tensor.arange(full_mask.shape[0])
        window = tensor.cast(rows <= t, theano.config.floatX)[:, None] * full_mask
        s_tilde, w = target_attention_step(tp, 'mem_att', scoring, items, keys,
                                           query_state=h_, window=window, decoding=False)
        h, c, alpha = gru_cond_step(m_, x_t, xx_t, s_tilde, pctx_, cc_, cmask, *weights)
        nxt = tensor.minimum(t + 1, full_mask.shape[0] - 1)
        items = tensor.set_subtensor(items[nxt], h)
        keys = tensor.set_subtensor(
            keys[nxt], target_attention_keys(tp, 'mem_att', scoring, h))
        return h, items, keys, c, alpha.T, w

    (states, _, _, ctxs, alphas, prev_alphas), _ = theano.scan(
        _step,
        sequences=[tensor.arange(nsteps), mask, x_, xx_],
        outputs_info=[init_state, items0, keys0,
                      tensor.alloc(floatx(0.), n_samples, context.shape[2]),
                      tensor.alloc(floatx(0.), n_samples, context.shape[0]),
                      tensor.alloc(floatx(0.), n_samples, nsteps)],
        non_sequences=[mask, pctx_, context, context_mask] + att_params + shared_vars,
        name=_p(prefix, 'memory_layers'), n_steps=nsteps, strict=True)
    return {'states': states, 'ctxs': ctxs, 'alphas': alphas,
            'readout_prev': state_below, 'prev_alphas': prev_alphas}


# --------------------------------------------------------------------------
# registries
#
# LAYERS: the building blocks, name -> (init, apply).
# DECODERS: one entry per decoder.  Everything else (option checks, the
# command-line choices, the short variant names of the scripts, table labels,
# the sampler's carried tensors, the tests' configurations) derives from it.
# Adding a decoder: write its param_init_X / X_layer pair above (one_step
# included), add a Decoder entry below, and tests (tests/numpy_reference.py).

LAYERS = {
    'ff': (param_init_fflayer, fflayer),
    'gru': (param_init_gru, gru_layer),
    'lstm': (param_init_lstm, lstm_layer),
}

# The recurrent layers of the language model (language_model/lm.py): init, the sequence
# layer (returns one T x n x dim sequence per state), the one-step function
# (tparams, n x nin inputs, prefix, mask, [states]) -> [states], and the
# names of the states a step carries (the output h first).
Recurrent = namedtuple('Recurrent', 'init apply one_step states')
RECURRENT = OrderedDict([
    ('gru', Recurrent(param_init_gru, gru_layer, gru_one_step, ('state',))),
    ('lstm', Recurrent(param_init_lstm, lstm_layer, lstm_one_step, ('state', 'cell'))),
])


def get_layer(name):
    """(init, apply) of a building block or of a decoder (dl4mt's lookup)."""
    if name in LAYERS:
        return LAYERS[name]
    if name in DECODERS:
        return DECODERS[name].init, DECODERS[name].apply
    raise ValueError('unknown layer %r (known: %s)'
                     % (name, ', '.join(sorted(LAYERS) + list(DECODERS))))


STATE_SCORINGS = ('content', 'content_scope')

# How the sampler computes what the training graph computes (the 'inference'
# option): 'training', the training graph's equations one step at a time, or
# 'authors', what the authors' released sampler computes
# (docs/equations.md#the-authors-inference; attentive residual decoder only).
INFERENCES = ('training', 'authors')
TRAINING_INFERENCE, AUTHORS_INFERENCE = INFERENCES

# A tensor that a decoder carries from one decoding step to the next.  axes
# names each axis: 'steps' (one row per step decoded so far), 'hyps' (one per
# hypothesis: beam search reorders along it), or an option whose value is the
# size ('dim_word', 'dim'); no axes: a scalar shared by all hypotheses.  Before
# the first step the 'steps' axis has ``rows`` rows and every entry is ``fill``.
Carried = namedtuple('Carried', 'name axes rows fill')
Carried.__new__.__defaults__ = (0, 0.)

# A named configuration of a decoder as the scripts and tables know it:
# options (decoder included), a label for tables, the att_scoring values it
# accepts (empty: the scoring is not used) and its inference modes.
Variant = namedtuple('Variant', 'name options label scorings inferences')
Variant.__new__.__defaults__ = ((TRAINING_INFERENCE,),)

# name: the 'decoder' option; init/apply: the layer functions; variants;
# aliases: other names of this decoder -> the options they imply; prefixes: of
# the parameters it adds to the baseline's; carried(options): its Carried list.
Decoder = namedtuple('Decoder', 'name init apply variants aliases prefixes carried')


# the authors' sampler (docs/equations.md#the-authors-inference): M starts as
# one zero row, time at 1
AUTHORS_CARRIED = [Carried('memory', ('steps', 'hyps', 'dim_word'), rows=1),
                   Carried('memory_keys', ('steps', 'hyps', 'dim_word'), rows=1),
                   Carried('time', (), fill=1.)]


def _carried_words(options):
    """Residual decoders carry the previous words' embeddings (and keys);
    the authors' inference its memory M, M's keys and the step counter."""
    if options['residual'] == 'attentive' and options.get('inference') == AUTHORS_INFERENCE:
        return list(AUTHORS_CARRIED)
    words = [Carried('prev_embs', ('steps', 'hyps', 'dim_word'))]
    if options['residual'] == 'attentive':
        words.append(Carried('prev_keys', ('steps', 'hyps', 'dim_word')))
    return words


def _carried_states(options):
    """Memory and self-attentive RNNs carry the previous states and keys."""
    return [Carried('prev_states', ('steps', 'hyps', 'dim')),
            Carried('prev_keys', ('steps', 'hyps', 'dim'))]


DECODERS = OrderedDict((d.name, d) for d in [
    Decoder(name='gru_cond', init=param_init_gru_cond, apply=gru_cond_layer,
            variants=[Variant(name='baseline', options={'decoder': 'gru_cond'},
                              label='NMT baseline', scorings=())],
            aliases={}, prefixes=(), carried=lambda options: []),
    Decoder(name='gru_cond_residual', init=param_init_gru_cond_residual,
            apply=gru_cond_residual_layer,
            variants=[Variant(name='mean', options={'decoder': 'gru_cond_residual',
                                                    'residual': 'mean'},
                              label='Mean residual connections', scorings=()),
                      Variant(name='attentive', options={'decoder': 'gru_cond_residual',
                                                         'residual': 'attentive'},
                              label='Self-attentive residual connections',
                              scorings=SCORINGS, inferences=INFERENCES)],
            aliases={'gru_cond_att': {'residual': 'attentive', 'att_scoring': 'content',
                                      'inference': AUTHORS_INFERENCE}},
            prefixes=('cond_att_',), carried=_carried_words),
    Decoder(name='gru_cond_memory', init=param_init_gru_cond_memory,
            apply=gru_cond_memory_layer,
            variants=[Variant(name='memory', options={'decoder': 'gru_cond_memory'},
                              label='Memory RNN', scorings=STATE_SCORINGS)],
            aliases={}, prefixes=('mem_att_',), carried=_carried_states),
    Decoder(name='gru_cond_selfattn', init=param_init_gru_cond_selfattn,
            apply=gru_cond_selfattn_layer,
            variants=[Variant(name='selfattn', options={'decoder': 'gru_cond_selfattn'},
                              label='Self-attentive RNN', scorings=STATE_SCORINGS)],
            aliases={}, prefixes=('self_att_', 'ff_logit_self_'), carried=_carried_states),
])

DECODER_ALIASES = OrderedDict((alias, (d.name, implied)) for d in DECODERS.values()
                              for alias, implied in d.aliases.items())
DECODER_NAMES = tuple(DECODERS) + tuple(DECODER_ALIASES)
VARIANT_PREFIXES = tuple(p for d in DECODERS.values() for p in d.prefixes)


def decoder_of(options):
    """The Decoder entry named by options['decoder'] (aliases resolved)."""
    name = options['decoder']
    name = DECODER_ALIASES[name][0] if name in DECODER_ALIASES else name
    if name not in DECODERS:
        raise ValueError('decoder must be one of %s, not %r'
                         % (', '.join(DECODER_NAMES), options['decoder']))
    return DECODERS[name]


def variant_of(options):
    """(Variant, scoring or None) of complete options; ValueError naming the
    option when the combination does not exist."""
    decoder = decoder_of(options)
    for variant in decoder.variants:
        if all(options.get(k) == v or k == 'decoder'
               for k, v in variant.options.items()):
            break
    else:
        raise ValueError('decoder %s takes residual %s, not %r' % (
            decoder.name, ' or '.join(repr(v.options['residual'])
                                      for v in decoder.variants),
            options.get('residual')))
    inference = options.get('inference', TRAINING_INFERENCE)
    if inference not in variant.inferences:
        raise ValueError('the %s decoder takes inference %s, not %r (the authors\' '
                         'inference is the attentive residual decoder\'s: '
                         'docs/equations.md#the-authors-inference)' % (
                             variant.name,
                             ' or '.join(repr(i) for i in variant.inferences),
                             inference))
    if not variant.scorings:
        return variant, None
    if options['att_scoring'] not in variant.scorings:
        raise ValueError('the %s decoder takes att_scoring %s, not %r'
                         % (variant.name, ' or '.join(variant.scorings),
                            options['att_scoring']))
    return variant, options['att_scoring']


def _all_variants():
    """Short name -> Variant: each variant, then one per other scoring
    ('attentive-dot', 'memory-content_scope', ...)."""
    out = OrderedDict()
    for decoder in DECODERS.values():
        for v in decoder.variants:
            out[v.name] = v
        for v in decoder.variants:
            for scoring in v.scorings[1:]:
                name = '%s-%s' % (v.name, scoring)
                options = dict(v.options, att_scoring=scoring)
                out[name] = Variant(name, options, '%s (%s)' % (v.label, scoring),
                                    (scoring,), v.inferences)
    return out


VARIANTS = _all_variants()


def variant_options(name):
    """Model options of a short variant name ('attentive-dot', ...)."""
    if name not in VARIANTS:
        raise ValueError('unknown decoder %r (choose from %s)'
                         % (name, ', '.join(VARIANTS)))
    options = dict(VARIANTS[name].options)
    if VARIANTS[name].scorings:
        options.setdefault('att_scoring', VARIANTS[name].scorings[0])
    return options

