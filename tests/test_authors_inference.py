"""The authors' inference (docs/equations.md#the-authors-inference) against the NumPy
reference of it (numpy_reference.make_authors_sampler).

On tiny models: per-step probabilities, the carried memory M' and the
attention rows of the project's f_next (dl4mt's sampler and the batched one,
over a padded batch); greedy and beam translations (k = 1, 5, 5 -n, 12 -n),
their whole final beams and alignment rows; the forced-decoding scorer; and
that it is not the training-consistent summary (docs/equations.md#attentive-residual).
"""
import numpy as np
import pytest

import beam_search
import layers
import numpy_reference as ref
from conftest import Model

SOURCES = [[3, 7, 1, 12, 0], [9, 0], [2, 2, 5, 11, 4, 8, 0], [5, 6, 0]]
TARGETS = [[4, 2, 9, 0], [7, 0], [1, 3, 3, 8, 5, 10, 0], [2, 6, 4, 0]]
MAXLEN = 10

# the authors' inference with scorings other than theirs ('content')
OTHER_SCORINGS = ['attentive-dot', 'attentive-content_scope']


@pytest.fixture(scope='module')
def authors_models(get_model):
    models = {'gru_cond_att': get_model('gru_cond_att')}
    for name in OTHER_SCORINGS:
        models[name] = Model(name, dict(layers.variant_options(name), inference='authors'))
    return models


def column(ids):
    return np.array(ids, dtype='int64')[:, None]


def probabilities(out):
    """p of the next word from f_next's outputs (the batched one has log p only)."""
    return out['probs'] if 'probs' in out else np.exp(beam_search.log_probabilities(out))


def test_options_choose_the_inference(nmt_module):
    fill, check = nmt_module.fill_options, nmt_module.check_options
    assert fill(dict(decoder='gru_cond_att'))['inference'] == 'authors'
    assert fill(dict(decoder='gru_cond_att', inference='training'))['inference'] == 'training'
    assert fill(dict(decoder='gru_cond_residual'))['inference'] == 'training'
    check(fill(dict(decoder='gru_cond_residual', residual='attentive', inference='authors')))
    from machinery.text_io import InputError
    for options in (dict(decoder='gru_cond', inference='authors'),
                    dict(decoder='gru_cond_residual', residual='mean', inference='authors'),
                    dict(decoder='gru_cond_memory', inference='authors'),
                    dict(decoder='gru_cond_att', inference='beam')):
        with pytest.raises(InputError, match='inference'):
            check(fill(options))
    carried = [c.name for c in layers.decoder_of(dict(decoder='gru_cond_att')).carried(
        fill(dict(decoder='gru_cond_att')))]
    assert carried == ['memory', 'memory_keys', 'time']


def _teacher_forced_steps(f_init, f_next, sources, targets):
    """Step f_next over a padded batch, feeding each target; per step the
    named outputs (the test's own loop, independent of beam_search)."""
    x, x_mask = beam_search.padded_batch(sources)
    init = f_init.named({'x': x, 'x_mask': x_mask})
    n = len(sources)
    values = dict(f_next.initial_carry(n), state=init['state'], ctx=init['ctx'],
                  pctx=init.get('pctx'), x_mask=x_mask,
                  y_prev=np.full(n, -1, dtype='int64'))
    steps = []
    for t in range(max(len(y) for y in targets)):
        out = f_next.named(values)
        steps.append(out)
        values.update(f_next.reorder_carry(out, np.arange(n)), state=out['state'],
                      y_prev=np.array([y[t] if t < len(y) else 0 for y in targets]))
    return steps


@pytest.mark.parametrize('name', ['gru_cond_att'] + OTHER_SCORINGS)
def test_steps_match_the_reference(authors_models, name):
    """Probabilities, memory M', weights over its rows, source attention."""
    m = authors_models[name]
    assert m.options['inference'] == 'authors'
    samplers = [m.batched_sampler()]
    if name == 'gru_cond_att':
        samplers.append(m.sampler())      # dl4mt's sampler: one sentence at a time
    for f_init, f_next in samplers:
        batched = 'x_mask' in f_next.inputs
        groups = [list(range(len(SOURCES)))] if batched else [[i] for i in range(len(SOURCES))]
        for group in groups:
            steps = _teacher_forced_steps(f_init, f_next, [SOURCES[i] for i in group],
                                          [TARGETS[i] for i in group])
            for col, i in enumerate(group):
                expected = ref.authors_force_decode(m.params, m.options, column(SOURCES[i]),
                                                    TARGETS[i])
                for t, exp in enumerate(expected):
                    out, what = steps[t], '%s sentence %d step %d' % (name, i, t)
                    np.testing.assert_allclose(probabilities(out)[col], exp['probs'],
                                               rtol=1e-5, atol=1e-6, err_msg=what)
                    np.testing.assert_allclose(out['memory'][:, col], exp['memory'],
                                               rtol=1e-5, atol=1e-6, err_msg=what)
                    assert out['memory'].shape[0] == t + 2      # two zero rows at time 1
                    assert out['time'] == t + 2
                    np.testing.assert_allclose(out['prev_alpha'][col], exp['prev_alpha'],
                                               rtol=1e-5, atol=1e-6, err_msg=what)
                    L = len(SOURCES[i])
                    np.testing.assert_allclose(out['alpha'][col, :L], exp['alpha'],
                                               rtol=1e-5, atol=1e-6, err_msg=what)
                    assert np.all(out['alpha'][col, L:] == 0)   # padding gets none


def test_memory_starts_with_two_zero_rows(authors_models):
    m = authors_models['gru_cond_att']
    f_init, f_next = m.batched_sampler()
    steps = _teacher_forced_steps(f_init, f_next, SOURCES[:1], TARGETS[:1])
    assert np.all(steps[0]['memory'] == 0) and steps[0]['memory'].shape[0] == 2
    assert np.all(steps[1]['memory'][:2] == 0) and np.any(steps[1]['memory'][2] != 0)
    np.testing.assert_array_equal(steps[0]['prev_alpha'][0], [1.])
    np.testing.assert_allclose(steps[1]['prev_alpha'][0], [.5, .5], rtol=1e-6)


def _reference_beams(m, k):
    nf_init, nf_next = ref.make_authors_sampler(m.params, m.options)
    return [ref.beam_search(nf_init, nf_next, column(src), k=k, maxlen=MAXLEN,
                            memory=ref.authors_memory(m.options)) for src in SOURCES]


@pytest.mark.parametrize('k,normalize', [(1, False), (5, False), (5, True), (12, True)])
def test_translations_match_the_reference(authors_models, k, normalize):
    """The batched search's translation, its whole final beam (the n-best
    list: hypotheses and scores) and its alignment rows, for every source."""
    m = authors_models['gru_cond_att']
    x, x_mask = beam_search.padded_batch(SOURCES)
    beams = beam_search.batch_beam_search([m.batched_sampler()], x, x_mask, k, MAXLEN)
    for i, (hyps, (samples, scores)) in enumerate(zip(beams, _reference_beams(m, k))):
        what = 'sentence %d, k=%d' % (i, k)
        assert [h.words for h in hyps] == [list(map(int, s)) for s in samples], what
        np.testing.assert_allclose([float(h.score) for h in hyps], scores,
                                   rtol=1e-5, err_msg=what)
        best = beam_search.ranked(hyps, normalize)[0][0]
        assert best.words == ref.best_hypothesis(samples, scores, normalise=normalize)
        expected = ref.authors_force_decode(m.params, m.options, column(SOURCES[i]),
                                            best.words)
        assert len(best.align) == len(best.prev_align) == len(expected)
        for t, exp in enumerate(expected):
            np.testing.assert_allclose(best.align[t], exp['alpha'], rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(best.prev_align[t], exp['prev_alpha'],
                                       rtol=1e-5, atol=1e-6)


def test_it_is_not_the_training_summary(authors_models):
    """Step 1 agrees with the training graph (both summaries are the zero
    embedding); from step 2 on the probabilities differ."""
    m = authors_models['gru_cond_att']
    p = m.params
    for src, trg in zip(SOURCES, TARGETS):
        if len(trg) < 3:
            continue
        x, y = column(src), column(trg)
        training = ref.forward(p, m.options, x, np.ones(x.shape, 'float32'), y,
                               np.ones(y.shape, 'float32'))['probs'][:, 0]
        authors = [s['probs'] for s in ref.authors_force_decode(p, m.options, x, trg)]
        np.testing.assert_allclose(authors[0], training[0], rtol=1e-5)
        assert max(np.abs(a - b).max() for a, b in zip(authors[1:], training[1:])) > 1e-3
        f_init, f_next = m.batched_sampler()
        steps = _teacher_forced_steps(f_init, f_next, [src], [trg])
        assert np.abs(probabilities(steps[2])[0] - training[2]).max() > 1e-3


def test_forced_decoding_scorer(authors_models):
    """score.py --inference authors: the sum over the target of -log p of the
    authors' sampler (here: the reference's), over a padded batch."""
    import score
    m = authors_models['gru_cond_att']
    scorer = score.sampler_scorer(*m.batched_sampler())
    pairs = [(s[:-1], t[:-1]) for s, t in zip(SOURCES, TARGETS)]
    costs = score.score_pairs(scorer, pairs, batch_size=3, progress=False)
    for i, (src, trg) in enumerate(zip(SOURCES, TARGETS)):
        steps = ref.authors_force_decode(m.params, m.options, column(src), trg)
        expected = sum(-np.log(s['probs'][w]) for s, w in zip(steps, trg))
        assert costs[i] == pytest.approx(float(expected), rel=1e-5)
