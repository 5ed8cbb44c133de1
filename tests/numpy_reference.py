"""An independent NumPy implementation of what docs/equations.md states.

Written apart from the project's Theano code, and as plainly as possible:
every recurrence is a Python ``for`` loop over time steps, the windowed
target-side attentions loop over samples and window rows.
Nothing here is fast; it is meant to be obviously right.

Everything is dtype-generic: the computation runs in the dtype of the
parameter arrays handed in (float64 for finite differences, float32 to mirror
the model).  Token ids are integer matrices, masks float matrices, all
time-major (rows = time steps, columns = samples).
"""
from collections import OrderedDict

import numpy as np


# ---------------------------------------------------------------------------
# small helpers
# ---------------------------------------------------------------------------
def sigmoid(a):
    return 1.0 / (1.0 + np.exp(-a))


def softmax_rows(a):
    """Softmax over the last axis (max-subtracted; equal to the plain one)."""
    a = a - a.max(axis=-1, keepdims=True)
    ea = np.exp(a)
    return ea / ea.sum(axis=-1, keepdims=True)


def window_softmax(scores):
    """Max-subtracted softmax of a 1-D array of scores (the window only)."""
    scores = np.asarray(scores)
    ex = np.exp(scores - scores.max())
    return ex / ex.sum()


def as_dtype(params, dtype):
    """Copy of a parameter dict with every array cast to ``dtype``."""
    return OrderedDict((k, np.asarray(v, dtype=dtype)) for k, v in params.items())


def decoder_variant(options):
    """(variant, scoring) of the decoder named in ``options``: the registry's
    short name ('baseline', 'mean', 'attentive', 'memory', 'selfattn'; the
    authors' 'gru_cond_att' is 'attentive') and the att_scoring it uses (None
    for the baseline and the mean residual).  Only the naming comes from the
    project; every equation below is written out independently."""
    import layers
    variant, scoring = layers.variant_of(dict(dict(residual='attentive',
                                                   att_scoring='content'), **options))
    return variant.name, scoring


# ---------------------------------------------------------------------------
# parameter shapes (docs/equations.md#parameters, with the decoders' additions),
# for shape / count checks
# ---------------------------------------------------------------------------
def param_shapes(options):
    e, d = options['dim_word'], options['dim']
    vs, vt = options['n_words_src'], options['n_words']
    s = OrderedDict()
    s['Wemb'] = (vs, e)
    s['Wemb_dec'] = (vt, e)
    for pre in ('encoder', 'encoder_r'):
        s[pre + '_W'] = (e, 2 * d)
        s[pre + '_b'] = (2 * d,)
        s[pre + '_U'] = (d, 2 * d)
        s[pre + '_Wx'] = (e, d)
        s[pre + '_bx'] = (d,)
        s[pre + '_Ux'] = (d, d)
    s['ff_state_W'] = (2 * d, d)
    s['ff_state_b'] = (d,)
    s['decoder_W'] = (e, 2 * d)
    s['decoder_b'] = (2 * d,)
    s['decoder_U'] = (d, 2 * d)
    s['decoder_Wx'] = (e, d)
    s['decoder_Ux'] = (d, d)
    s['decoder_bx'] = (d,)
    s['decoder_U_nl'] = (d, 2 * d)
    s['decoder_b_nl'] = (2 * d,)
    s['decoder_Ux_nl'] = (d, d)
    s['decoder_bx_nl'] = (d,)
    s['decoder_Wc'] = (2 * d, 2 * d)
    s['decoder_Wcx'] = (2 * d, d)
    s['decoder_W_comb_att'] = (d, 2 * d)
    s['decoder_Wc_att'] = (2 * d, 2 * d)
    s['decoder_b_att'] = (2 * d,)
    s['decoder_U_att'] = (2 * d, 1)
    s['decoder_c_tt'] = (1,)
    s['ff_logit_lstm_W'] = (d, e)
    s['ff_logit_lstm_b'] = (e,)
    s['ff_logit_prev_W'] = (e, e)
    s['ff_logit_prev_b'] = (e,)
    s['ff_logit_ctx_W'] = (2 * d, e)
    s['ff_logit_ctx_b'] = (e,)
    s['ff_logit_W'] = (e, vt)
    s['ff_logit_b'] = (vt,)

    kind, scoring = decoder_variant(options)
    if kind == 'attentive':
        if scoring != 'dot':
            s['cond_att_W_prev'] = (e, e)
            s['cond_att_b_prev'] = (e,)
            s['cond_att_V_prev'] = (e, 1)
        if scoring == 'content_scope':
            s['cond_att_W_scope'] = (d, e)
        if scoring in ('sum', 'product', 'dot'):
            s['cond_att_W_ctx'] = (2 * d, e)
    elif kind == 'memory':
        s['mem_att_W_prev'] = (d, d)
        s['mem_att_b_prev'] = (d,)
        s['mem_att_V_prev'] = (d, 1)
        if scoring == 'content_scope':
            s['mem_att_W_scope'] = (d, d)
    elif kind == 'selfattn':
        s['self_att_W_prev'] = (d, d)
        s['self_att_b_prev'] = (d,)
        s['self_att_V_prev'] = (d, 1)
        if scoring == 'content_scope':
            s['self_att_W_scope'] = (d, d)
        s['ff_logit_self_W'] = (d, e)
        s['ff_logit_self_b'] = (e,)
    return s


def count_params(shapes):
    return int(sum(int(np.prod(sh)) for sh in shapes.values()))


# ---------------------------------------------------------------------------
# docs/equations.md#vocabularies-and-batches
# ---------------------------------------------------------------------------
def prepare_data(seqs_x, seqs_y, maxlen=None):
    """Time-major padded matrices and masks (len + 1 rows of ones)."""
    if maxlen is not None:
        keep = [(sx, sy) for sx, sy in zip(seqs_x, seqs_y)
                if len(sx) < maxlen and len(sy) < maxlen]
        if not keep:
            return None, None, None, None
        seqs_x = [p[0] for p in keep]
        seqs_y = [p[1] for p in keep]
    n = len(seqs_x)
    tx = max(len(s) for s in seqs_x) + 1
    ty = max(len(s) for s in seqs_y) + 1
    x = np.zeros((tx, n), dtype='int64')
    y = np.zeros((ty, n), dtype='int64')
    x_mask = np.zeros((tx, n), dtype='float32')
    y_mask = np.zeros((ty, n), dtype='float32')
    for i in range(n):
        for t, w in enumerate(seqs_x[i]):
            x[t, i] = w
        for t in range(len(seqs_x[i]) + 1):
            x_mask[t, i] = 1.
        for t, w in enumerate(seqs_y[i]):
            y[t, i] = w
        for t in range(len(seqs_y[i]) + 1):
            y_mask[t, i] = 1.
    return x, x_mask, y, y_mask


# ---------------------------------------------------------------------------
# docs/equations.md#forward-pass: GRU, encoder, initial state
# ---------------------------------------------------------------------------
def gru_step(U, Ux, x_, xx_, h_prev, m):
    """One GRU step; ``m`` is this step's mask (n,)."""
    d = h_prev.shape[1]
    preact = h_prev @ U + x_
    r = sigmoid(preact[:, :d])
    u = sigmoid(preact[:, d:])
    hbar = np.tanh((h_prev @ Ux) * r + xx_)
    h = u * h_prev + (1. - u) * hbar
    m = m[:, None]
    return m * h + (1. - m) * h_prev


def gru_layer(params, prefix, emb, mask):
    """Run a GRU over emb (T x n x e) from the zero state; returns T x n x d."""
    T, n, _ = emb.shape
    d = params[prefix + '_Ux'].shape[0]
    h = np.zeros((n, d), dtype=emb.dtype)
    out = []
    for t in range(T):
        x_ = emb[t] @ params[prefix + '_W'] + params[prefix + '_b']
        xx_ = emb[t] @ params[prefix + '_Wx'] + params[prefix + '_bx']
        h = gru_step(params[prefix + '_U'], params[prefix + '_Ux'], x_, xx_, h, mask[t])
        out.append(h)
    return np.stack(out)


def encoder(params, x, x_mask=None):
    """Bidirectional GRU encoder: ctx (T_src x n x 2d)."""
    dtype = params['Wemb'].dtype
    if x_mask is None:
        x_mask = np.ones(x.shape, dtype=dtype)
    x_mask = np.asarray(x_mask, dtype=dtype)
    emb = params['Wemb'][x]
    fwd = gru_layer(params, 'encoder', emb, x_mask)
    bwd = gru_layer(params, 'encoder_r', emb[::-1], x_mask[::-1])
    return np.concatenate([fwd, bwd[::-1]], axis=2)


def init_state(params, ctx, x_mask=None):
    """s0 = tanh(masked mean of ctx @ ff_state_W + ff_state_b)."""
    if x_mask is None:
        ctx_mean = ctx.mean(axis=0)
    else:
        x_mask = np.asarray(x_mask, dtype=ctx.dtype)
        ctx_mean = (ctx * x_mask[:, :, None]).sum(0) / x_mask.sum(0)[:, None]
    return np.tanh(ctx_mean @ params['ff_state_W'] + params['ff_state_b'])


# ---------------------------------------------------------------------------
# docs/equations.md#forward-pass: conditional GRU with attention, readout
# ---------------------------------------------------------------------------
def cond_gru_step(params, emb_t, m, s_prev, ctx, pctx, x_mask):
    """One decoder step.  Returns (s, c, alpha) with alpha T_src x n."""
    p = params
    d = s_prev.shape[1]
    x_ = emb_t @ p['decoder_W'] + p['decoder_b']
    xx_ = emb_t @ p['decoder_Wx'] + p['decoder_bx']
    h1 = gru_step(p['decoder_U'], p['decoder_Ux'], x_, xx_, s_prev, m)

    T_src, n = x_mask.shape
    alpha = np.zeros((T_src, n), dtype=ctx.dtype)
    c = np.zeros((n, ctx.shape[2]), dtype=ctx.dtype)
    pstate = h1 @ p['decoder_W_comb_att']
    for i in range(n):
        a = np.tanh(pctx[:, i, :] + pstate[i][None, :]) @ p['decoder_U_att'][:, 0] \
            + p['decoder_c_tt'][0]
        a = np.exp(a) * x_mask[:, i]                # no max subtraction
        alpha[:, i] = a / a.sum()
        for j in range(T_src):
            c[i] += alpha[j, i] * ctx[j, i]

    g = sigmoid(h1 @ p['decoder_U_nl'] + p['decoder_b_nl'] + c @ p['decoder_Wc'])
    r2 = g[:, :d]
    u2 = g[:, d:]
    hbar = np.tanh((h1 @ p['decoder_Ux_nl'] + p['decoder_bx_nl']) * r2 + c @ p['decoder_Wcx'])
    s = u2 * h1 + (1. - u2) * hbar
    mm = m[:, None]
    s = mm * s + (1. - mm) * h1                     # h1, not s_prev
    return s, c, alpha


def readout_probs(params, options, s, prev, c, extra=None):
    """Softmax over the target vocabulary for one time step (n x V)."""
    p = params
    t = np.tanh(s @ p['ff_logit_lstm_W'] + p['ff_logit_lstm_b']
                + prev @ p['ff_logit_prev_W'] + p['ff_logit_prev_b']
                + c @ p['ff_logit_ctx_W'] + p['ff_logit_ctx_b']
                + (0. if extra is None else extra))
    if options.get('use_dropout', False):
        t = t * 0.5                                 # test mode
    return softmax_rows(t @ p['ff_logit_W'] + p['ff_logit_b'])


def shifted_embeddings(params, y):
    """E[0] = 0, E[j] = Wemb_dec[y[j-1]]."""
    W = params['Wemb_dec']
    E = np.zeros((y.shape[0], y.shape[1], W.shape[1]), dtype=W.dtype)
    for j in range(1, y.shape[0]):
        E[j] = W[y[j - 1]]
    return E


def residual_scores(p, scoring, Es, s_t, c_t):
    """Scores of the words Es (J x e) in the attentive residual's window, for
    one sample whose state and context at this step are s_t and c_t."""
    if scoring == 'dot':
        return Es @ (c_t @ p['cond_att_W_ctx'])
    K = Es @ p['cond_att_W_prev'] + p['cond_att_b_prev']
    if scoring == 'content':
        pre = K
    elif scoring == 'content_scope':
        pre = K + s_t @ p['cond_att_W_scope']
    elif scoring == 'sum':
        pre = K + c_t @ p['cond_att_W_ctx']
    elif scoring == 'product':
        pre = K * (c_t @ p['cond_att_W_ctx'])
    return np.tanh(pre) @ p['cond_att_V_prev'][:, 0]


def _window(y_mask, t, i):
    return [j for j in range(t + 1) if y_mask[j, i] > 0]


def _state_history(s_init, S, j):
    """H[0] = s_init, H[j] = S[j-1]."""
    return s_init if j == 0 else S[j - 1]


# ---------------------------------------------------------------------------
# the whole teacher-forced pass
# ---------------------------------------------------------------------------
def forward(params, options, x, x_mask, y, y_mask):
    """Teacher-forced pass.  Returns a dict with

    costs (n,), dec_alphas (T_trg x n x T_src), prev_alphas (T_trg x n x T_trg,
    or None for the baseline and the mean residual), probs (T_trg x n x V),
    states S (T_trg x n x d), contexts C (T_trg x n x 2d), s_init, ctx.
    """
    p = params
    dtype = p['Wemb'].dtype
    x_mask = np.asarray(x_mask, dtype=dtype)
    y_mask = np.asarray(y_mask, dtype=dtype)
    kind, scoring = decoder_variant(options)

    ctx = encoder(p, x, x_mask)
    s_init = init_state(p, ctx, x_mask)
    E = shifted_embeddings(p, y)
    T_trg, n = y.shape
    T_src = x.shape[0]
    d = s_init.shape[1]
    pctx = ctx @ p['decoder_Wc_att'] + p['decoder_b_att']

    S = np.zeros((T_trg, n, d), dtype=dtype)
    C = np.zeros((T_trg, n, ctx.shape[2]), dtype=dtype)
    dec_alphas = np.zeros((T_trg, n, T_src), dtype=dtype)
    prev_alphas = None
    if kind in ('memory', 'selfattn', 'attentive'):
        prev_alphas = np.zeros((T_trg, n, T_trg), dtype=dtype)

    # --- the recurrence -------------------------------------------------
    s_prev = s_init
    for t in range(T_trg):
        if kind == 'memory':
            # attention over the state history H[0..t] within the window
            s_start = np.zeros((n, d), dtype=dtype)
            for i in range(n):
                js = _window(y_mask, t, i)
                Hs = np.stack([_state_history(s_init, S, j)[i] for j in js])   # J x d
                pre = Hs @ p['mem_att_W_prev'] + p['mem_att_b_prev']
                if scoring == 'content_scope':
                    pre = pre + _state_history(s_init, S, t)[i] @ p['mem_att_W_scope']
                w = window_softmax(np.tanh(pre) @ p['mem_att_V_prev'][:, 0])
                for jj, j in enumerate(js):
                    prev_alphas[t, i, j] = w[jj]
                    s_start[i] += w[jj] * Hs[jj]
        else:
            s_start = s_prev
        s, c, alpha = cond_gru_step(p, E[t], y_mask[t], s_start, ctx, pctx, x_mask)
        S[t] = s
        C[t] = c
        dec_alphas[t] = alpha.T
        s_prev = s

    # --- readout, row by row ---------------------------------------------
    V = p['ff_logit_W'].shape[1]
    probs = np.zeros((T_trg, n, V), dtype=dtype)
    for t in range(T_trg):
        prev = E[t]
        extra = None
        if kind in ('mean', 'attentive'):
            prev = np.zeros_like(E[t])
            for i in range(n):
                js = _window(y_mask, t, i)
                if kind == 'mean':
                    js1 = [j for j in js if j >= 1]
                    if js1:
                        prev[i] = sum(E[j, i] for j in js1) / len(js1)
                    continue
                Es = np.stack([E[j, i] for j in js])                   # J x e
                w = window_softmax(residual_scores(p, scoring, Es, S[t, i], C[t, i]))
                for jj, j in enumerate(js):
                    prev_alphas[t, i, j] = w[jj]
                    prev[i] += w[jj] * Es[jj]
        elif kind == 'selfattn':
            r = np.zeros((n, d), dtype=dtype)
            for i in range(n):
                js = _window(y_mask, t, i)
                Hs = np.stack([_state_history(s_init, S, j)[i] for j in js])
                pre = Hs @ p['self_att_W_prev'] + p['self_att_b_prev']
                if scoring == 'content_scope':
                    pre = pre + S[t, i] @ p['self_att_W_scope']
                w = window_softmax(np.tanh(pre) @ p['self_att_V_prev'][:, 0])
                for jj, j in enumerate(js):
                    prev_alphas[t, i, j] = w[jj]
                    r[i] += w[jj] * Hs[jj]
            extra = r @ p['ff_logit_self_W'] + p['ff_logit_self_b']
        probs[t] = readout_probs(p, options, S[t], prev, C[t], extra)

    costs = np.zeros((n,), dtype=dtype)
    for i in range(n):
        for t in range(T_trg):
            costs[i] += -np.log(probs[t, i, y[t, i]]) * y_mask[t, i]

    return dict(costs=costs, dec_alphas=dec_alphas, prev_alphas=prev_alphas,
                probs=probs, states=S, contexts=C, s_init=s_init, ctx=ctx)


def cost_per_sentence(params, options, x, x_mask, y, y_mask):
    """(costs (n,), dec_alphas, prev_alphas) of the teacher-forced pass."""
    out = forward(params, options, x, x_mask, y, y_mask)
    return out['costs'], out['dec_alphas'], out['prev_alphas']


# ---------------------------------------------------------------------------
# docs/equations.md: regularisers, clipping, Adadelta
# ---------------------------------------------------------------------------
def l2_term(params, decay_c):
    """decay_c * sum over all parameters of sum(p^2)."""
    if decay_c <= 0:
        return 0.
    total = 0.
    for v in params.values():
        total = total + (v ** 2).sum()
    return decay_c * total


def alignment_term(dec_alphas, x_mask, y_mask, alpha_c):
    """alpha_c * mean_n sum_i (floor(|y|/|x|) - sum_t alpha[t, n, i])^2."""
    if alpha_c <= 0:
        return 0.
    n = dec_alphas.shape[1]
    total = 0.
    for k in range(n):
        target = np.floor(y_mask[:, k].sum() / x_mask[:, k].sum())
        covered = dec_alphas[:, k, :].sum(axis=0)          # over ALL target rows
        total = total + ((target - covered) ** 2).sum()    # over ALL source rows
    return alpha_c * total / n


def training_cost(params, options, x, x_mask, y, y_mask):
    """mean per-sentence cost + L2 + alignment regulariser
    (docs/equations.md#regularisers-and-clipping)."""
    costs, dec_alphas, _ = cost_per_sentence(params, options, x, x_mask, y, y_mask)
    cost = costs.mean()
    cost = cost + l2_term(params, options.get('decay_c', 0.))
    cost = cost + alignment_term(dec_alphas, np.asarray(x_mask, costs.dtype),
                                 np.asarray(y_mask, costs.dtype),
                                 options.get('alpha_c', 0.))
    return cost


def clip_gradients(grads, clip_c):
    """Global-norm clipping of a list of arrays."""
    if clip_c <= 0:
        return [np.array(g) for g in grads]
    g2 = sum(float((np.asarray(g, 'float64') ** 2).sum()) for g in grads)
    if g2 > clip_c ** 2:
        return [g / np.sqrt(g2) * clip_c for g in grads]
    return [np.array(g) for g in grads]


def adadelta_step(params, grads, Eg2, Edx2, rho=0.95, eps=1e-6):
    """One Adadelta update.  All four arguments are dicts with the same keys
    (or lists in the same order).  Returns (new_params, new_Eg2, new_Edx2) of
    the same container type."""
    keys = list(params.keys()) if isinstance(params, dict) else range(len(params))
    newp, newg, newd = OrderedDict(), OrderedDict(), OrderedDict()
    for k in keys:
        g = grads[k]
        eg2 = rho * Eg2[k] + (1. - rho) * g ** 2
        dx = -np.sqrt(Edx2[k] + eps) / np.sqrt(eg2 + eps) * g
        edx2 = rho * Edx2[k] + (1. - rho) * dx ** 2
        newp[k] = params[k] + dx
        newg[k] = eg2
        newd[k] = edx2
    if isinstance(params, dict):
        return newp, newg, newd
    return ([newp[k] for k in keys], [newg[k] for k in keys], [newd[k] for k in keys])


# ---------------------------------------------------------------------------
# docs/equations.md#decoding-beam-search
# ---------------------------------------------------------------------------
def make_sampler(params, options):
    """NumPy f_init / f_next for the BASELINE decoder (dl4mt signatures)."""
    kind, _ = decoder_variant(options)
    assert kind == 'baseline'

    def f_init(x):
        ctx = encoder(params, x)
        return [init_state(params, ctx), ctx]

    def f_next(y_prev, ctx, state):
        y_prev = np.asarray(y_prev)
        n = y_prev.shape[0]
        W = params['Wemb_dec']
        emb = np.zeros((n, W.shape[1]), dtype=W.dtype)
        for i in range(n):
            if y_prev[i] >= 0:
                emb[i] = W[y_prev[i]]
        m = np.ones((n,), dtype=W.dtype)
        x_mask = np.ones(ctx.shape[:2], dtype=W.dtype)
        pctx = ctx @ params['decoder_Wc_att'] + params['decoder_b_att']
        s, c, _ = cond_gru_step(params, emb, m, state, ctx, pctx, x_mask)
        probs = readout_probs(params, options, s, emb, c)
        return [probs, probs.argmax(axis=1), s]

    return f_init, f_next


def beam_search(f_init, f_next, x, k=1, maxlen=30, memory=None):
    """Beam search (docs/equations.md#decoding-beam-search) for one
    sentence (x: T x 1).

    f_init(x) -> [state (1 x d), ctx (T x 1 x c)];
    f_next(y_prev, ctx, state) -> [probs (live x V), anything, next_state, ...].
    With a memory (the authors' gen_sample,
    docs/equations.md#the-authors-inference: one zero row, 1 x 1 x e),
    f_next also takes the memory M (rows x live x e) and the step counter,
    and returns M' after next_state; M' is reordered with the hypotheses;
    time starts at 1 and grows by 1 after each step.
    Returns (samples, scores), unnormalised, finished hypotheses first in the
    order they finished, then the unfinished live ones.
    """
    state, ctx0 = f_init(x)[:2]
    finished, finished_scores = [], []
    live = [[]]
    live_scores = np.zeros(1)
    live_states = state
    dead = 0
    y_prev = -1 * np.ones((1,), dtype='int64')
    time = 1
    for _ in range(maxlen):
        ctx = np.tile(ctx0, [len(live), 1])
        if memory is not None:
            out = f_next(y_prev, ctx, live_states, memory, time)
            time += 1
        else:
            out = f_next(y_prev, ctx, live_states)
        probs, next_states = out[0], out[2]
        cand = live_scores[:, None] - np.log(probs)
        flat = cand.flatten()
        best = np.argsort(flat)[:k - dead]
        V = probs.shape[1]
        new_live, new_scores, new_states, new_memory = [], [], [], []
        for b in best:
            h, w = int(b // V), int(b % V)
            hyp = live[h] + [w]
            if w == 0:
                finished.append(hyp)
                finished_scores.append(flat[b])
                dead += 1
            else:
                new_live.append(hyp)
                new_scores.append(flat[b])
                new_states.append(np.array(next_states[h]))
                if memory is not None:
                    new_memory.append(np.array(out[3][:, h]))
        live = new_live
        live_scores = np.array(new_scores)
        if len(live) < 1 or dead >= k:
            break
        live_states = np.array(new_states)
        if memory is not None:
            memory = np.stack(new_memory, axis=1)
        y_prev = np.array([h[-1] for h in live], dtype='int64')
    for h, s in zip(live, live_scores):
        finished.append(h)
        finished_scores.append(s)
    return finished, finished_scores


def normalise_scores(samples, scores):
    """Length normalisation: score / len(hypothesis) (eos counted)."""
    return [s / len(h) for h, s in zip(samples, scores)]


def best_hypothesis(samples, scores, normalise=False):
    if normalise:
        scores = normalise_scores(samples, scores)
    return samples[int(np.argmin(scores))]


# ---------------------------------------------------------------------------
# the authors' sampler (attentive residual decoder),
# docs/equations.md#the-authors-inference
# ---------------------------------------------------------------------------
def make_authors_sampler(params, options):
    """NumPy f_init / f_next of the authors' released sampler
    (docs/equations.md#the-authors-inference).

    f_next(y_prev, ctx, state, M, time) -> [probs, sample, next_state, M',
    weights (n x time+1, the last entry 0), alpha (T_src x n)].  The scores
    use the model's att_scoring with this step's state and context (the
    authors' code has the 'content' scoring; the others follow
    docs/equations.md#other-scorings).
    """
    kind, scoring = decoder_variant(options)
    assert kind == 'attentive'
    W = params['Wemb_dec']

    def f_init(x):
        ctx = encoder(params, x)
        return [init_state(params, ctx), ctx]

    def f_next(y_prev, ctx, state, M, time):
        y_prev = np.asarray(y_prev)
        n = y_prev.shape[0]
        emb = np.zeros((n, W.shape[1]), dtype=W.dtype)
        for i in range(n):
            if y_prev[i] >= 0:
                emb[i] = W[y_prev[i]]
        ones = np.ones((n,), dtype=W.dtype)
        pctx = ctx @ params['decoder_Wc_att'] + params['decoder_b_att']
        s, c, alpha = cond_gru_step(params, emb, ones, state, ctx, pctx,
                                    np.ones(ctx.shape[:2], dtype=W.dtype))
        # M' = switch(time > 1, [M; emb], emb): the switch broadcasts emb to
        # the rows of [M; emb], so with time = 1 M' is emb repeated
        if time > 1:
            M_new = np.concatenate([M, emb[None]], axis=0)
        else:
            M_new = np.repeat(emb[None], M.shape[0] + 1, axis=0)
        d = np.zeros_like(emb)
        weights = np.zeros((n, M_new.shape[0]), dtype=W.dtype)
        for i in range(n):
            rows = M_new[:time, i]                              # j < time
            w = window_softmax(residual_scores(params, scoring, rows, s[i], c[i]))
            weights[i, :time] = w
            for j in range(time):
                d[i] += w[j] * rows[j]
        probs = readout_probs(params, options, s, d, c)
        return [probs, probs.argmax(axis=1), s, M_new, weights, alpha]

    return f_init, f_next


def authors_memory(options, dtype='float32'):
    """The memory the authors' gen_sample starts with: one zero row."""
    return np.zeros((1, 1, options['dim_word']), dtype=dtype)


def authors_force_decode(params, options, x, y):
    """Teacher-forced steps of the authors' sampler for one sentence (x: T x
    1, y: the target ids ending with eos): per step the probabilities (V),
    M' (rows x e), the weights over the rows the sampler attends to (time
    entries, without the trailing 0) and the source attention (T_src)."""
    f_init, f_next = make_authors_sampler(params, options)
    state, ctx = f_init(x)
    M, time, y_prev = authors_memory(options, state.dtype), 1, np.array([-1])
    steps = []
    for word in y:
        probs, _, state, M, weights, alpha = f_next(y_prev, ctx, state, M, time)
        assert weights[0, -1] == 0 and weights.shape[1] == time + 1
        steps.append(dict(probs=probs[0], memory=M[:, 0], prev_alpha=weights[0, :-1],
                          alpha=alpha[:, 0]))
        time += 1
        y_prev = np.array([word])
    return steps


def sampler_cost(params, options, x, y):
    """-log p(y | x) as the model's sampler computes it (x: T x 1, y: ids
    ending with eos): the training graph's cost, or with the authors'
    inference the sum over their sampler's steps."""
    if options.get('inference') == 'authors':
        steps = authors_force_decode(params, options, x, y)
        return sum(-np.log(s['probs'][w]) for s, w in zip(steps, y))
    y = np.array(y, dtype='int64')[:, None]
    return cost_per_sentence(params, options, x, np.ones(x.shape, dtype=params['Wemb'].dtype),
                             y, np.ones(y.shape, dtype=params['Wemb'].dtype))[0][0]


# ---------------------------------------------------------------------------
# the language model of language_model/lm.py (AAAI 2018 eq. 15-18): a GRU or an LSTM over
# the shifted embeddings, the readout of the decoder without the context
# ---------------------------------------------------------------------------
def lstm_step(W, U, b, x, h_prev, c_prev, m):
    """One LSTM step, gates input, forget, output, candidate (no peepholes)."""
    d = h_prev.shape[1]
    a = x @ W + b + h_prev @ U
    i = sigmoid(a[:, :d])
    f = sigmoid(a[:, d:2 * d])
    o = sigmoid(a[:, 2 * d:3 * d])
    g = np.tanh(a[:, 3 * d:])
    c = f * c_prev + i * g
    h = o * np.tanh(c)
    m = m[:, None]
    return m * h + (1. - m) * h_prev, m * c + (1. - m) * c_prev


def lm_states(params, options, E, y_mask):
    """Recurrent states S (T x n x d) over the shifted embeddings, from zero."""
    T, n, _ = E.shape
    d = options['dim']
    h = np.zeros((n, d), dtype=E.dtype)
    c = np.zeros((n, d), dtype=E.dtype)
    S = np.zeros((T, n, d), dtype=E.dtype)
    for t in range(T):
        if options['encoder'] == 'lstm':
            h, c = lstm_step(params['lm_W'], params['lm_U'], params['lm_b'],
                             E[t], h, c, y_mask[t])
        else:
            x_ = E[t] @ params['lm_W'] + params['lm_b']
            xx_ = E[t] @ params['lm_Wx'] + params['lm_bx']
            h = gru_step(params['lm_U'], params['lm_Ux'], x_, xx_, h, y_mask[t])
        S[t] = h
    return S


def lm_summary(params, options, E, S, y_mask, t, i):
    """prev_t of sentence i: y_{t-1}, or the mean / attentive residual d_t.
    Returns (vector, attention weights over rows 0..t or None)."""
    residual = options['residual']
    if residual == 'none':
        return E[t, i], None
    js = _window(y_mask, t, i)
    if residual == 'mean':
        js1 = [j for j in js if j >= 1]
        if not js1:
            return np.zeros_like(E[t, i]), None
        return sum(E[j, i] for j in js1) / len(js1), None
    Es = np.stack([E[j, i] for j in js])
    pre = Es @ params['res_att_W_prev'] + params['res_att_b_prev']
    if options['att_scoring'] == 'content_scope':
        pre = pre + S[t, i] @ params['res_att_W_scope']
    w = window_softmax(np.tanh(pre) @ params['res_att_V_prev'][:, 0])
    weights = np.zeros(E.shape[0], dtype=E.dtype)
    weights[js] = w
    return (w[:, None] * Es).sum(0), weights


def lm_forward(params, options, y, y_mask):
    """Per-sentence -log p (eos included), probs (T x n x V) and the
    residual attention weights (T x n x T, or None)."""
    p = params
    dtype = p['Wemb_dec'].dtype
    y_mask = np.asarray(y_mask, dtype=dtype)
    E = shifted_embeddings(p, y)
    S = lm_states(p, options, E, y_mask)
    T, n = y.shape
    W_out = p['Wemb_dec'].T if options.get('tie_embeddings') else p['ff_logit_W']
    probs = np.zeros((T, n, W_out.shape[1]), dtype=dtype)
    alphas = np.zeros((T, n, T), dtype=dtype) if options['residual'] == 'attentive' else None
    costs = np.zeros((n,), dtype=dtype)
    for t in range(T):
        for i in range(n):
            prev, w = lm_summary(p, options, E, S, y_mask, t, i)
            if w is not None:
                alphas[t, i] = w
            hidden = np.tanh(S[t, i] @ p['ff_logit_lstm_W'] + p['ff_logit_lstm_b']
                             + prev @ p['ff_logit_prev_W'] + p['ff_logit_prev_b'])
            if options.get('use_dropout'):
                hidden = hidden * 0.5
            probs[t, i] = softmax_rows(hidden @ W_out + p['ff_logit_b'])
            costs[i] += -np.log(probs[t, i, y[t, i]]) * y_mask[t, i]
    return costs, probs, alphas
