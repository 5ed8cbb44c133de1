"""The project's Theano forward pass against the independent NumPy reference.

Sizes are tiny; each decoder configuration is compiled once per session
(see conftest.py).  Parameters are the project's init_params values plus a
seeded perturbation, so that every term of every variant matters.
"""
import numpy as np
import pytest

import numpy_reference as ref
from conftest import CONFIGS, TINY, make_batch, tiny_options

# the batches: 3 sentences, source lengths != target lengths, padding on both sides
BATCH_SPECS = [
    dict(seed=1, src_lens=(4, 1, 6), trg_lens=(2, 5, 3)),
    dict(seed=2, src_lens=(3, 5, 2), trg_lens=(6, 1, 4)),
]

PAPER = dict(dim_word=500, dim=1024, n_words_src=50000, n_words=50000)
PAPER_COUNTS = [
    ('baseline', dict(decoder='gru_cond'), 108725885),
    ('mean', dict(decoder='gru_cond_residual', residual='mean'), 108725885),
    ('attentive', dict(decoder='gru_cond_residual', residual='attentive',
                                  att_scoring='content'), 108976885),
    ('gru_cond_att', dict(decoder='gru_cond_att'), 108976885),
    ('memory', dict(decoder='gru_cond_memory', att_scoring='content'), 109776509),
    ('memory-content_scope', dict(decoder='gru_cond_memory', att_scoring='content_scope'),
     109776509 + 1024 * 1024),
    ('selfattn', dict(decoder='gru_cond_selfattn', att_scoring='content'),
     110289009),
    ('selfattn-content_scope', dict(decoder='gru_cond_selfattn', att_scoring='content_scope'),
     110289009 + 1024 * 1024),
]


# ---------------------------------------------------------------------------
# parameters: names, shapes, counts, initialisation
# ---------------------------------------------------------------------------
@pytest.mark.parametrize('name,overrides,count', PAPER_COUNTS, ids=[c[0] for c in PAPER_COUNTS])
def test_reference_param_counts_at_paper_size(name, overrides, count):
    """The reference's shape table reproduces the published counts."""
    opts = dict(PAPER)
    opts.update(overrides)
    assert ref.count_params(ref.param_shapes(opts)) == count


@pytest.mark.parametrize('name', list(CONFIGS))
def test_init_params_names_and_shapes(nmt_module, name):
    """init_params gives exactly the parameters of docs/equations.md#parameters
    (+ variant) with their shapes (tests/numpy_reference.py's table); e, d,
    V_src, V_trg all differ so shapes are conclusive."""
    opts = tiny_options(nmt_module, CONFIGS[name])
    np.random.seed(0)
    params = nmt_module.init_params(opts)
    expected = ref.param_shapes(opts)
    assert sorted(params) == sorted(expected)
    for k, v in params.items():
        assert v.shape == expected[k], k
        assert v.dtype == np.float32, k


@pytest.mark.parametrize('name,overrides,count', PAPER_COUNTS, ids=[c[0] for c in PAPER_COUNTS])
def test_count_params_at_paper_size_without_allocating(nmt_module, name, overrides, count):
    """nmt.count_params gives the published counts from the shapes alone:
    no 108M-parameter allocation, no random number drawn."""
    import tracemalloc
    np.random.seed(5)
    before = np.random.get_state()[1].copy()
    tracemalloc.start()
    try:
        got = nmt_module.count_params(dict(PAPER, **overrides))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert got == count
    assert peak < 64 * 2 ** 20, 'count_params allocated %d MB' % (peak >> 20)
    np.testing.assert_array_equal(np.random.get_state()[1], before)


@pytest.mark.parametrize('name', list(CONFIGS))
def test_shape_only_initialisation_matches_real_one(nmt_module, name):
    import layers
    opts = tiny_options(nmt_module, CONFIGS[name])
    real = nmt_module.init_params(opts)
    with layers.shapes_only():
        shapes = nmt_module.init_params(opts)
    assert [(k, v.shape) for k, v in shapes.items()] == \
        [(k, v.shape) for k, v in real.items()]


def _is_orthogonal(W):
    return np.allclose(W.T @ W, np.eye(W.shape[1]), atol=1e-5)


def test_init_params_initialisation(nmt_module):
    """Section 2, --init dl4mt (the original's): square `norm` blocks are
    orthogonal, rectangular ones are 0.01*randn, ff_logit_* (except
    ff_logit_W) never orthogonal, biases zero.  dim_word == dim here, so that
    'never orthogonal' is actually tested."""
    opts = nmt_module.fill_options(dict(dim_word=8, dim=8, n_words_src=13, n_words=11,
                                        decoder='gru_cond_att', init='dl4mt'))
    np.random.seed(3)
    p = nmt_module.init_params(opts)
    d = 8
    for pre in ('encoder', 'encoder_r', 'decoder'):
        assert _is_orthogonal(p[pre + '_W'][:, :d]) and _is_orthogonal(p[pre + '_W'][:, d:])
        assert _is_orthogonal(p[pre + '_U'][:, :d]) and _is_orthogonal(p[pre + '_U'][:, d:])
        assert _is_orthogonal(p[pre + '_Wx']) and _is_orthogonal(p[pre + '_Ux'])
    for k in ('decoder_U_nl',):
        assert _is_orthogonal(p[k][:, :d]) and _is_orthogonal(p[k][:, d:])
    for k in ('decoder_Ux_nl', 'decoder_Wc', 'decoder_Wc_att', 'cond_att_W_prev'):
        assert _is_orthogonal(p[k]), k
    # rectangular norm: 0.01 * randn
    for k in ('Wemb', 'Wemb_dec', 'ff_state_W', 'decoder_Wcx', 'decoder_W_comb_att',
              'decoder_U_att', 'cond_att_V_prev', 'ff_logit_W'):
        assert 0.001 < p[k].std() < 0.03, k
    # readout layers are never orthogonal, even when square
    for k in ('ff_logit_lstm_W', 'ff_logit_prev_W', 'ff_logit_ctx_W'):
        assert not _is_orthogonal(p[k]), k
        assert 0.001 < p[k].std() < 0.03, k
    for k, v in p.items():
        if k.endswith('_b') or k.endswith('_bx') or k.endswith('_b_nl') or \
                k.endswith('_bx_nl') or k in ('decoder_b_att', 'decoder_c_tt',
                                             'cond_att_b_prev'):
            assert not v.any(), k


def test_init_params_glorot(nmt_module):
    """--init glorot (the default): the rectangular matrices are uniform in
    +-sqrt(6 / (nin + nout)), the word matrices (embeddings, output weights)
    in +-sqrt(3 / dim_word), the square ones orthogonal as the original's,
    the biases zero; the same parameters and shapes as --init dl4mt."""
    base = dict(dim_word=8, dim=16, n_words_src=300, n_words=200)
    np.random.seed(3)
    p = nmt_module.init_params(nmt_module.fill_options(dict(base, init='glorot')))
    original = nmt_module.init_params(nmt_module.fill_options(dict(base, init='dl4mt')))
    assert [(k, v.shape) for k, v in p.items()] == [(k, v.shape) for k, v in original.items()]
    limits = [(k, np.sqrt(6. / (nin + nout))) for k, (nin, nout) in
              (('ff_logit_ctx_W', (32, 8)), ('decoder_Wcx', (32, 16)))]
    limits += [(k, np.sqrt(3. / 8)) for k in ('Wemb', 'Wemb_dec', 'ff_logit_W')]
    for k, limit in limits:
        assert np.abs(p[k]).max() <= limit and np.abs(p[k]).max() > 0.9 * limit, k
        assert p[k].std() == pytest.approx(limit / np.sqrt(3.), rel=0.15), k
    assert original['Wemb'].std() == pytest.approx(0.01, rel=0.15)
    assert _is_orthogonal(p['decoder_Ux']) and _is_orthogonal(p['encoder_U'][:, :16])
    assert not p['ff_logit_b'].any() and not p['decoder_b_att'].any()


def test_unigram_output_bias(nmt_module, tmp_path):
    """--init ...+unigram: the output bias is the training targets' add-one
    unigram log probabilities (eos once a line, words past n_words as UNK),
    centred."""
    from data_iterator import count_words
    path = tmp_path / 'train.trg'
    path.write_text('a b a\nc a\n', encoding='utf-8')
    counts, lines = count_words(str(path), {'a': 2, 'b': 3, 'c': 4}, n_words=4)
    assert lines == 2 and counts.tolist() == [2, 1, 3, 1]      # eos, UNK (c), a, b
    import nmt_model
    bias = nmt_model.unigram_output_bias(nmt_model.unigram_log_probs(
        str(path), {'a': 2, 'b': 3, 'c': 4}, 4))
    expected = np.log((np.array([2, 1, 3, 1]) + 1.) / (7 + 4))
    np.testing.assert_allclose(bias, expected - expected.mean(), rtol=1e-6)
    assert bias.dtype == np.float32


# ---------------------------------------------------------------------------
# batches
# ---------------------------------------------------------------------------
def test_prepare_data_matches_reference(nmt_module):
    sx = [[3, 4, 5], [7], [2, 2, 2, 2, 9]]
    sy = [[1, 2], [5, 6, 7, 8], [3]]
    got = nmt_module.prepare_data(sx, sy, n_words_src=13, n_words=11)
    exp = ref.prepare_data(sx, sy)
    for g, e, kind in zip(got, exp, ('int64', 'float32', 'int64', 'float32')):
        np.testing.assert_array_equal(np.asarray(g), e)
        assert np.asarray(g).dtype == kind
    # maxlen: pairs with either side >= maxlen are dropped
    got = nmt_module.prepare_data(sx, sy, maxlen=4, n_words_src=13, n_words=11)
    exp = ref.prepare_data(sx, sy, maxlen=4)
    for g, e in zip(got, exp):
        np.testing.assert_array_equal(np.asarray(g), e)
    assert exp[0].shape == (4, 1)
    got = nmt_module.prepare_data(sx, sy, maxlen=1, n_words_src=13, n_words=11)
    assert all(g is None for g in got)


def test_prepare_data_reads_ids_beyond_the_vocabulary_as_unk(nmt_module):
    """Ids >= n_words_src / n_words become UNK (1), as the iterator reads
    them (docs/equations.md#vocabularies-and-batches); without them every id
    stays."""
    sx, sy = [[3, 12, 5], [13]], [[10, 11], [2, 20, 4]]
    x, _, y, _ = nmt_module.prepare_data(sx, sy, n_words_src=12, n_words=11)
    np.testing.assert_array_equal(x, ref.prepare_data([[3, 1, 5], [1]], sy)[0])
    np.testing.assert_array_equal(y, ref.prepare_data(sx, [[10, 1], [2, 1, 4]])[2])
    x, _, y, _ = nmt_module.prepare_data(sx, sy)
    np.testing.assert_array_equal(y, ref.prepare_data(sx, sy)[2])
    assert x.max() == 13


def test_pred_probs_gives_every_pairs_reference_cost(nmt_module, get_model, capsys):
    """dl4mt's pred_probs (kept for its callers): the cost of each pair the
    iterator yields, in order, each id beyond the vocabulary read as UNK,
    against the NumPy reference."""
    m = get_model('baseline')
    rng = np.random.RandomState(8)
    batches = [([list(rng.randint(1, 20, size=n)) for n in lens],
                [list(rng.randint(1, 15, size=n)) for n in lens[::-1]])
               for lens in ((3, 1, 5), (2, 4))]

    def f_log_probs(*inputs):
        return m.forward(*inputs)['cost']
    got = nmt_module.pred_probs(f_log_probs, nmt_module.prepare_data, m.options, batches)
    assert capsys.readouterr().err.splitlines() == ['3 samples computed', '5 samples computed']

    def known(seqs, n_words):
        return [[i if i < n_words else 1 for i in s] for s in seqs]
    want = np.concatenate([ref.cost_per_sentence(
        m.params64(), m.options,
        *ref.prepare_data(known(xs, m.options['n_words_src']), known(ys, m.options['n_words'])))[0]
        for xs, ys in batches])
    assert got.shape == (5,)
    np.testing.assert_allclose(got, want, rtol=1e-5)


# ---------------------------------------------------------------------------
# decoding functions (baseline): f_init and one f_next step
# ---------------------------------------------------------------------------
def test_f_init_and_f_next_baseline(get_model):
    m = get_model('baseline')
    f_init, f_next = m.sampler()
    nf_init, nf_next = ref.make_sampler(m.params64(), m.options)
    x = np.array([[3], [7], [1], [12], [0]], dtype='int64')
    state, ctx = f_init(x)[:2]
    nstate, nctx = nf_init(x)
    np.testing.assert_allclose(ctx, nctx, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(state, nstate, rtol=1e-4, atol=1e-5)
    assert ctx.shape == (5, 1, 2 * TINY['dim']) and state.shape == (1, TINY['dim'])

    # three hypotheses: first step (-1 = zero embedding) and two words
    y_prev = np.array([-1, 4, 10], dtype='int64')
    states = np.tile(state, [3, 1]) + \
        np.random.RandomState(0).uniform(-0.3, 0.3, (3, TINY['dim'])).astype('float32')
    ctx3 = np.tile(ctx, [3, 1])
    out = f_next(y_prev, ctx3, states)
    nout = nf_next(y_prev, ctx3.astype('float64'), states.astype('float64'))
    np.testing.assert_allclose(out[0], nout[0], rtol=1e-4, atol=1e-6)        # probs
    np.testing.assert_allclose(out[2], nout[2], rtol=1e-4, atol=1e-5)        # new state
    np.testing.assert_allclose(out[0].sum(1), 1., rtol=1e-5)


# ---------------------------------------------------------------------------
# teacher-forced pass, every decoder configuration
# ---------------------------------------------------------------------------
def _check_forward(m, batch):
    x, x_mask, y, y_mask = batch
    got = m.forward(x, x_mask, y, y_mask)
    exp = ref.forward(m.params64(), m.options, x, x_mask, y, y_mask)
    assert got['cost'].shape == (x.shape[1],)
    assert got['dec_alphas'].shape == (y.shape[0], x.shape[1], x.shape[0])
    np.testing.assert_allclose(got['cost'], exp['costs'], rtol=1e-4, atol=1e-5,
                               err_msg='%s: per-sentence costs' % m.name)
    # decoder alphas on every target row (padded rows enter the alignment term)
    np.testing.assert_allclose(got['dec_alphas'], exp['dec_alphas'], rtol=1e-4, atol=1e-6,
                               err_msg='%s: dec_alphas' % m.name)
    if exp['prev_alphas'] is not None:
        assert got['prev_alphas'] is not None, '%s: opt_ret has no prev_alphas' % m.name
        assert got['prev_alphas'].shape == (y.shape[0], x.shape[1], y.shape[0])
        valid = y_mask > 0
        # rows that predict a real word: must match exactly
        np.testing.assert_allclose(got['prev_alphas'][valid], exp['prev_alphas'][valid],
                                   rtol=1e-4, atol=1e-6,
                                   err_msg='%s: prev_alphas (valid rows)' % m.name)
    return got, exp


@pytest.mark.parametrize('spec', BATCH_SPECS, ids=['batch1', 'batch2'])
@pytest.mark.parametrize('name', list(CONFIGS))
def test_forward_matches_numpy(get_model, name, spec):
    m = get_model(name)
    batch = make_batch(**spec)
    _check_forward(m, batch)


@pytest.mark.parametrize('name', [n for n in CONFIGS
                                  if n not in ('baseline', 'mean', 'baseline_dropout')])
def test_prev_alphas_on_padded_rows(get_model, name):
    """On padded target rows the window is W(t) = {j <= t : y_mask[j] > 0}
    (brief's definition).  These rows never reach the cost; checked apart
    so that a disagreement there is reported separately."""
    m = get_model(name)
    batch = make_batch(**BATCH_SPECS[0])
    got = m.forward(*batch)
    exp = ref.forward(m.params64(), m.options, *batch)
    np.testing.assert_allclose(got['prev_alphas'], exp['prev_alphas'], rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize('name', list(CONFIGS))
def test_forward_properties(get_model, name):
    """Alphas are distributions over the real source words / the window."""
    m = get_model(name)
    x, x_mask, y, y_mask = make_batch(**BATCH_SPECS[1])
    got = m.forward(x, x_mask, y, y_mask)
    dec_alphas = got['dec_alphas']
    np.testing.assert_allclose(dec_alphas.sum(2), 1., rtol=1e-5)
    assert not (dec_alphas * (1 - x_mask.T[None])).any()
    pa = got['prev_alphas']
    if pa is not None:
        for t in range(y.shape[0]):
            for i in range(y.shape[1]):
                if y_mask[t, i] > 0:
                    np.testing.assert_allclose(pa[t, i].sum(), 1., rtol=1e-5)
                    assert not pa[t, i, t + 1:].any(), 'weight on a future row'
                    assert not (pa[t, i] * (1 - y_mask[:, i])).any(), 'weight on padding'


def test_variants_differ_from_baseline(get_model):
    """Sanity check on the test itself: on the same parameter values, each
    variant's reference cost differs from the baseline reference cost (the
    variant-specific terms are not negligible at these parameter values)."""
    batch = make_batch(**BATCH_SPECS[0])
    base_opts = get_model('baseline').options
    for name in ('mean', 'attentive', 'attentive-dot',
                 'memory', 'selfattn'):
        m = get_model(name)
        p = m.params64()
        out = ref.forward(p, m.options, *batch)
        base = ref.forward(p, base_opts, *batch)
        assert np.abs(out['costs'] - base['costs']).max() > 1e-2, name
