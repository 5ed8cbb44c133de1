"""lm.py: the language model against the NumPy reference (every residual
variant, both recurrent layers), finite-difference gradients, the one-step
sampler against the training graph, and the command line end to end (eval,
sample, exact resume, bad input)."""
import sys
from collections import OrderedDict

import numpy as np
import pytest

import numpy_reference as ref
from tiny_runs import QUICK_ENV

from helpers import error_line, run_command
PY = sys.executable

TINY = dict(dim_word=6, dim=5, n_words=11, decay_c=0.01)
# name -> options; every residual variant with both recurrent layers
CONFIGS = OrderedDict()
for _enc in ('gru', 'lstm'):
    CONFIGS['%s-none' % _enc] = dict(encoder=_enc, residual='none')
    CONFIGS['%s-mean' % _enc] = dict(encoder=_enc, residual='mean')
    for _sc in ('content', 'content_scope'):
        CONFIGS['%s-attentive-%s' % (_enc, _sc)] = dict(encoder=_enc, residual='attentive',
                                                       att_scoring=_sc)
CONFIGS['lstm-attentive-tied-dropout'] = dict(encoder='lstm', residual='attentive',
                                              tie_embeddings=True, use_dropout=True)
# each residual variant and each recurrent layer at least once (every
# compilation costs ~10-20 s on the 2-core machine)
GRAD_CONFIGS = ['gru-none', 'lstm-mean', 'gru-attentive-content',
                'lstm-attentive-content_scope', 'lstm-attentive-tied-dropout']
SAMPLER_CONFIGS = ['lstm-none', 'gru-mean', 'gru-attentive-content_scope',
                   'lstm-attentive-content', 'lstm-attentive-tied-dropout']


def batch(seed=3, lengths=(4, 1, 6, 0), n_words=11):
    """A padded batch (time-major); words 1..V-1, an empty sentence included."""
    rng = np.random.RandomState(seed)
    seqs = [list(rng.randint(1, n_words, size=n)) for n in lengths]
    from data_iterator import prepare_monolingual
    return prepare_monolingual(seqs)


class LM(object):
    """One configuration: options, perturbed parameters, compiled functions."""

    def __init__(self, overrides):
        from language_model import lm
        import nmt
        self.lm = lm
        self.options = lm.fill_options(dict(TINY, **overrides))
        np.random.seed(1234)
        init = lm.init_params(self.options)
        # perturb the small initial values so that every term matters (the
        # residual's scoring most, so that its attention is far from uniform)
        rng = np.random.RandomState(4321)
        self.params = OrderedDict(
            (k, (v + (1.0 if k.startswith('res_att') else 0.4) *
                 rng.standard_normal(v.shape)).astype('float32'))
            for k, v in init.items())
        self.tparams = nmt.init_tparams(self.params)
        out = lm.build_model(self.tparams, self.options)
        self.trng, self.use_noise, self.y, self.y_mask, self.dec, _, self.cost = out
        self._fns = {}

    def function(self, name, outputs, mode=None):
        import theano
        if name not in self._fns:
            self._fns[name] = theano.function([self.y, self.y_mask], outputs, mode=mode,
                                              on_unused_input='ignore')
        return self._fns[name]

    def forward(self, y, y_mask):
        outs = [self.cost] + ([self.dec['prev_alphas']] if 'prev_alphas' in self.dec else [])
        got = self.function('forward', outs)(y, y_mask)
        return got[0], (got[1] if len(got) > 1 else None)

    def gradients(self, y, y_mask):
        import nmt_model
        import theano.tensor as tensor
        if 'grad' not in self._fns:
            cost = nmt_model.regularised_cost(self.tparams, self.options, self.cost, {}, None,
                                        self.y_mask)
            grads = tensor.grad(cost, wrt=list(self.tparams.values()))
            self.function('grad', [cost] + grads, mode='FAST_COMPILE')
        outs = self._fns['grad'](y, y_mask)
        return float(outs[0]), OrderedDict(zip(self.tparams, outs[1:]))

    def sampler(self):
        if 'sampler' not in self._fns:
            self._fns['sampler'] = self.lm.build_sampler(self.tparams, self.options,
                                                         self.trng, self.use_noise)
        return self._fns['sampler']


@pytest.fixture(scope='module')
def get_lm():
    cache = {}

    def get(name):
        if name not in cache:
            cache[name] = LM(CONFIGS[name])
        return cache[name]
    return get


def reference_cost(model, params, y, y_mask):
    """mean per-sentence cost + L2 (the training cost) of the reference."""
    costs, _, _ = ref.lm_forward(params, model.options, y, y_mask)
    return costs.mean() + ref.l2_term(params, model.options['decay_c'])


# ---------------------------------------------------------------------------
# the model against NumPy
# ---------------------------------------------------------------------------
def test_lstm_layer_matches_numpy():
    import theano
    import theano.tensor as tensor
    import layers
    rng = np.random.RandomState(0)
    nin, dim = 4, 3
    params = layers.param_init_lstm({}, OrderedDict(), prefix='l', nin=nin, dim=dim)
    params = OrderedDict((k, (v + 0.5 * rng.standard_normal(v.shape)).astype('float32'))
                         for k, v in params.items())
    tparams = OrderedDict((k, theano.shared(v)) for k, v in params.items())
    x = tensor.tensor3('x', dtype='float32')
    m = tensor.matrix('m', dtype='float32')
    h, c = layers.lstm_layer(tparams, x, {}, prefix='l', mask=m)
    f = theano.function([x, m], [h, c])
    xs = rng.standard_normal((5, 2, nin)).astype('float32')
    mask = np.array([[1, 1], [1, 1], [1, 0], [1, 0], [0, 0]], dtype='float32')
    got_h, got_c = f(xs, mask)
    hh = np.zeros((2, dim))
    cc = np.zeros((2, dim))
    for t in range(5):
        hh, cc = ref.lstm_step(params['l_W'], params['l_U'], params['l_b'], xs[t], hh, cc,
                               mask[t])
        np.testing.assert_allclose(got_h[t], hh, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(got_c[t], cc, rtol=1e-5, atol=1e-6)
    # a masked step keeps both states
    np.testing.assert_array_equal(got_h[3, 1], got_h[1, 1])
    np.testing.assert_array_equal(got_c[4, 0], got_c[3, 0])


@pytest.mark.parametrize('name', list(CONFIGS))
def test_cost_matches_numpy(get_lm, name):
    model = get_lm(name)
    y, y_mask = batch()
    cost, alphas = model.forward(y, y_mask)
    exp_cost, _, exp_alphas = ref.lm_forward(ref.as_dtype(model.params, 'float64'),
                                             model.options, y, y_mask)
    np.testing.assert_allclose(cost, exp_cost, rtol=2e-5)
    assert (alphas is None) == (exp_alphas is None)
    if alphas is not None:
        np.testing.assert_allclose(alphas, exp_alphas, rtol=1e-4, atol=1e-6)
        # the attention is far from uniform: the variant is visible
        assert np.abs(alphas[5, 2, :6] - 1. / 6).max() > 0.05


@pytest.mark.parametrize('name', SAMPLER_CONFIGS)
def test_sampler_step_by_step_equals_training_graph(get_lm, name):
    """Feeding each sentence's own words through f_next gives the training
    graph's cost, and the attentive residual's weights, row for row."""
    from language_model import lm
    model = get_lm(name)
    y, y_mask = batch(seed=8, lengths=(3, 7, 5))
    cost, alphas = model.forward(y, y_mask)
    f_next = model.sampler()
    values = lm.initial_step_values(f_next, model.options, y.shape[1])
    forced = np.zeros(y.shape[1])
    for t in range(y.shape[0]):
        out = f_next.named(values)
        forced -= np.log(out['probs'][np.arange(y.shape[1]), y[t]]) * y_mask[t]
        if alphas is not None:   # sentences still running at row t
            live = y_mask[t] > 0
            np.testing.assert_allclose(out['prev_alpha'][live], alphas[t, live, :t + 1],
                                       rtol=1e-4, atol=1e-6)
        values = lm.next_step_values(f_next, model.options, out, y[t])
    np.testing.assert_allclose(forced, cost, rtol=1e-5)


@pytest.mark.parametrize('name', GRAD_CONFIGS)
def test_gradients_vs_finite_differences(get_lm, name):
    model = get_lm(name)
    y, y_mask = batch(seed=5, lengths=(3, 5, 1))
    got_cost, grads = model.gradients(y, y_mask)
    p64 = ref.as_dtype(model.params, 'float64')
    assert got_cost == pytest.approx(float(reference_cost(model, p64, y, y_mask)), rel=1e-5)
    rng = np.random.RandomState(11)
    h = 1e-6
    failures = []
    for k, g in grads.items():
        flat = g.ravel()
        picks = set(int(i) for i in np.argsort(-np.abs(flat))[:2])
        picks.update(int(i) for i in rng.choice(flat.size, size=min(2, flat.size),
                                                 replace=False))
        for idx in sorted(picks):
            pos = np.unravel_index(idx, g.shape)
            saved = p64[k][pos]
            p64[k][pos] = saved + h
            cp = reference_cost(model, p64, y, y_mask)
            p64[k][pos] = saved - h
            cm = reference_cost(model, p64, y, y_mask)
            p64[k][pos] = saved
            fd = (cp - cm) / (2 * h)
            if abs(float(g[pos]) - fd) > 2e-4 * abs(fd) + 2e-6:
                failures.append('%s%s: theano %.7g finite-diff %.7g' % (k, pos, g[pos], fd))
    assert not failures, '\n'.join(failures)


def test_parameters_of_the_variants():
    from language_model import lm
    base = dict(TINY, encoder='lstm')
    names = {r: set(lm.init_params(lm.fill_options(dict(base, residual=r))))
             for r in ('none', 'mean')}
    assert names['none'] == names['mean']
    assert {'lm_W', 'lm_U', 'lm_b', 'Wemb_dec', 'ff_logit_W'} <= names['none']
    att = set(lm.init_params(lm.fill_options(dict(base, residual='attentive',
                                                  att_scoring='content_scope'))))
    assert att - names['none'] == {'res_att_W_prev', 'res_att_b_prev', 'res_att_V_prev',
                                   'res_att_W_scope'}
    tied = lm.init_params(lm.fill_options(dict(base, tie_embeddings=True)))
    assert 'ff_logit_W' not in tied and 'ff_logit_b' in tied
    # count_params: from the shapes, as the arrays would have them
    opts = dict(base, residual='attentive')
    assert lm.count_params(opts) == sum(v.size for v in
                                        lm.init_params(lm.fill_options(opts)).values())


def test_paper_configurations():
    """naacl-wiki is the 47M of NAACL Table 6 for every variant; aaai-ptb
    has the sizes of AAAI Table 4."""
    from language_model import lm
    for residual in lm.RESIDUALS:
        opts = dict(lm.config_options('naacl-wiki', residual), residual=residual)
        assert abs(lm.count_params(opts) - 47e6) < 0.6e6, residual
    opts = lm.config_options('aaai-ptb', 'none')
    assert (opts['encoder'], opts['dim_word'], opts['dim'], opts['n_words']) == \
        ('lstm', 150, 300, 10000)


def test_config_sets_sizes_that_the_command_line_does_not(capsys):
    from language_model import lm
    args = lm.parse_args(['train', '--model', 'm.npz', '--data', 'd.txt', '--config',
                          'naacl-wiki', '--residual', 'mean', '--n_words', '50000'])
    kwargs = lm._train_kwargs(args)
    assert (kwargs['dim'], kwargs['dim_word'], kwargs['encoder']) == (296, 296, 'lstm')
    assert kwargs['n_words'] == 50000 and kwargs['residual'] == 'mean'
    line = capsys.readouterr().out
    assert line.startswith('naacl-wiki, residual mean: ') and '(paper: 47M)' in line
    assert format(lm.count_params(kwargs), ',') in line
    kwargs = lm._train_kwargs(lm.parse_args(['train', '--model', 'm.npz', '--data', 'd.txt',
                                             '--config', 'aaai-ptb']))
    assert (kwargs['dim_word'], kwargs['dim'], kwargs['n_words']) == (150, 300, 10000)
    V, e, d = 10000, 150, 300   # embeddings, LSTM, W_s, W_y, output layer
    count = V * e + (e * 4 * d + d * 4 * d + 4 * d) + (d * e + e) + (e * e + e) + (e * V + V)
    assert ('residual none: %s parameters (paper: not stated)' % format(count, ',')
            in capsys.readouterr().out)


def test_monolingual_iterator(tmp_path):
    from data_iterator import MonolingualIterator
    path = tmp_path / 'mono.txt'
    path.write_text('a b c\nb\na a a a a\nc b\n')
    it = MonolingualIterator(str(path), {'a': 2, 'b': 3, 'c': 4}, batch_size=2,
                             maxlen=4, sort_k_batches=2)
    # buffers of 4 lines sorted by length, longest first; the 5-word line skipped
    assert list(it) == [([[2, 3, 4], [4, 3]],), ([[3]],)]


# ---------------------------------------------------------------------------
# the command line
# ---------------------------------------------------------------------------
TRAIN_TEXT = ['x y z', 'y z w v', 'z x', 'w w x y', 'v x y z w', 'x v', 'y', 'z z v x']
TRAIN_FLAGS = ['--data', 'train.txt', '--dim_word', '4', '--dim', '5',
               '--encoder', 'lstm', '--residual', 'attentive', '--att_scoring',
               'content_scope', '--batch_size', '3', '--optimizer', 'adadelta',
               '--clip_c', '1', '--dispFreq', '1', '--sampleFreq', '5', '--use_dropout',
               '--overwrite', '--maxlen', '20']


def run(args, cwd, check=True):
    """lm.py with Theano's quick optimiser (tiny_runs.QUICK_ENV)."""
    return run_command('language_model/lm.py', args, cwd=cwd, check=check, timeout=1200,
                       env=QUICK_ENV)


@pytest.fixture(scope='module')
def workdir(tmp_path_factory):
    d = tmp_path_factory.mktemp('lm')
    (d / 'train.txt').write_text(''.join(s + '\n' for s in TRAIN_TEXT * 2))
    (d / 'valid.txt').write_text('x y z\nw v\nq x\n')   # q: unknown word
    (d / 'empty.txt').write_text('')
    (d / 'bad.txt').write_bytes(b'x y\nz \xff\n')
    # the reference run: 8 updates (shuffled, 6 batches an epoch), validation
    # every 3, a save every 3; the dictionary is built beside the model
    run(['train', '--model', 'full.npz', '--finish_after', '8', '--saveFreq', '3',
         '--validFreq', '3', '--valid', 'valid.txt'] + TRAIN_FLAGS, cwd=d)
    return d


def test_training_writes_model_dictionary_and_history(workdir):
    from machinery.model_io import load_options
    from machinery.vocab import load_dictionary
    with np.load(workdir / 'full.npz') as f:
        assert int(f['uidx']) == 8 and len(f['history_errs']) == 2
    opts = load_options(str(workdir / 'full.npz'))
    assert opts['model_kind'] == 'language_model' and opts['encoder'] == 'lstm'
    d = load_dictionary(str(workdir / 'full.npz.dict.pkl'))
    assert opts['n_words'] == len(d) == 7 and d['eos'] == 0 and d['UNK'] == 1


def test_resume_continues_exactly(workdir):
    """5 updates, then --reload to 8 == 8 updates without a stop (dropout on,
    shuffled data, an epoch boundary crossed after the stop)."""
    common = ['--saveFreq', '3', '--validFreq', '3', '--valid', 'valid.txt']
    run(['train', '--model', 'part.npz', '--finish_after', '5'] + common + TRAIN_FLAGS,
        cwd=workdir)
    proc = run(['train', '--model', 'part.npz', '--finish_after', '8', '--reload']
               + common + TRAIN_FLAGS, cwd=workdir)
    assert 'Resuming at update 5' in proc.stdout
    with np.load(workdir / 'full.npz') as a, np.load(workdir / 'part.npz') as b:
        assert sorted(a.files) == sorted(b.files)
        for k in a.files:
            np.testing.assert_array_equal(a[k], b[k], err_msg=k)


def test_eval_is_the_sum_of_sentence_costs(workdir):
    """The file's cost is the sum of each sentence's cost, computed alone,
    and the perplexity is exp(cost / (words + eos)); the same number as the
    final validation of training."""
    from language_model import lm
    proc = run(['eval', '--model', 'full.npz', 'valid.txt'], cwd=workdir)
    lines = proc.stdout.strip().split('\n')
    fields = dict(line.split(' ', 1) for line in lines)
    assert lines[-1].startswith('perplexity ')
    model = lm.LoadedModel(str(workdir / 'full.npz'))
    from machinery.vocab import words_to_ids
    from data_iterator import prepare_monolingual
    total, words = 0., 0
    for sentence in (workdir / 'valid.txt').read_text().split('\n')[:-1]:
        ids = words_to_ids(sentence.split(), model.word_dict, model.options['n_words'])
        y, y_mask = prepare_monolingual([ids])
        total += float(model.f_log_probs(y, y_mask)[0])
        words += len(ids) + 1
    assert words == (3 + 1) + (2 + 1) + (2 + 1) and fields['words'].startswith('%d ' % words)
    assert float(fields['cost'].split()[0]) == pytest.approx(total, rel=1e-5)
    assert float(fields['perplexity']) == pytest.approx(np.exp(total / words), rel=1e-4)
    with np.load(workdir / 'full.npz') as f:
        assert np.log(float(fields['perplexity'])) == pytest.approx(
            float(min(f['history_errs'])), rel=1e-4)


def test_sample(workdir):
    proc = run(['sample', '--model', 'full.npz', '-n', '4', '--maxlen', '6',
                '--seed', '3'], cwd=workdir)
    lines = proc.stdout.split('\n')
    assert len(lines) == 5 and lines[-1] == ''
    assert all(len(line.split()) <= 6 and set(line.split()) <= set('x y z w v UNK'.split())
               for line in lines[:-1])
    again = run(['sample', '--model', 'full.npz', '-n', '4', '--maxlen', '6',
                 '--seed', '3'], cwd=workdir)
    assert again.stdout == proc.stdout


def _nmt_model(workdir):
    """A model file of nmt.py (its options are all that language_model/lm.py reads first)."""
    import shutil
    from machinery.model_io import save_options
    import nmt
    shutil.copy(workdir / 'full.npz', workdir / 'nmt.npz')
    save_options(nmt.fill_options({}), str(workdir / 'nmt.npz'))
    return 'nmt.npz'


@pytest.mark.parametrize('case', ['empty', 'not_utf8', 'missing', 'nmt_model',
                                  'unknown_option', 'bad_choice'])
def test_bad_input_one_line_error(workdir, case):
    args = {'empty': ['eval', '--model', 'full.npz', 'empty.txt'],
            'not_utf8': ['eval', '--model', 'full.npz', 'bad.txt'],
            'missing': ['eval', '--model', 'full.npz', 'none.txt'],
            'nmt_model': ['eval', '--model', _nmt_model(workdir) if case == 'nmt_model'
                          else '', 'valid.txt'],
            'unknown_option': ['train', '--model', 'u.npz', '--data', 'train.txt',
                               '--no_such_option', '3'],
            'bad_choice': ['train', '--model', 'u.npz', '--data', 'train.txt',
                           '--residual', 'sum']}[case]
    proc = run(args, cwd=workdir, check=False)
    expected = {'empty': 'empty.txt', 'not_utf8': 'line 2', 'missing': 'none.txt',
                'nmt_model': 'translation model', 'unknown_option': 'no_such_option',
                'bad_choice': 'residual'}[case]
    error_line(proc, expected, alone=True,
               status=2 if case in ('unknown_option', 'bad_choice') else 1)
    assert proc.stdout == '' and not (workdir / 'u.npz').exists()


def test_training_on_empty_or_bad_data_writes_nothing(workdir):
    proc = run(['train', '--model', 'e.npz', '--data', 'empty.txt'], cwd=workdir,
               check=False)
    error_line(proc)
    assert not any(p.name.startswith('e.npz') for p in workdir.iterdir())
