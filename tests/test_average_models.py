"""average_models.py on tiny random models: each parameter the mean of the
inputs', the first input's options, a model that translate.py decodes; one
line and no output for models that cannot be averaged."""
import os

import numpy
import pytest

from helpers import error_line, run_command, save_random_model

SOURCES = ['a b c', 'd e', 'b']


@pytest.fixture(scope='module')
def workdir(tmp_path_factory):
    from machinery import vocab
    d = tmp_path_factory.mktemp('average')
    for name, words in (('src', 'a b c d e f g h'), ('trg', 'x y z w v u')):
        mapping = {w: i for i, w in enumerate(['<eos>', 'UNK'] + words.split())}
        vocab.save_dictionary(mapping, str(d / (name + '.pkl')), str(d / (name + '.json')))
    for name, seed in (('one', 1), ('two', 2), ('three', 3)):
        save_random_model(d / (name + '.npz'), dict(decoder='gru_cond_residual'), seed)
    save_random_model(d / 'baseline.npz', dict(decoder='gru_cond'), 4)
    save_random_model(d / 'bigger.npz', dict(decoder='gru_cond_residual'), 5, n_words=9)
    (d / 'in.txt').write_text(''.join(s + '\n' for s in SOURCES))
    return d


def average(workdir, *args):
    return run_command('average_models.py', args, cwd=workdir)


def arrays(path):
    with numpy.load(str(path)) as archive:
        return {k: archive[k] for k in archive.files}


def test_each_parameter_is_the_mean_of_the_models(workdir):
    proc = average(workdir, 'one.npz', 'two.npz', 'three.npz', '-o', 'avg.npz')
    assert proc.returncode == 0, proc.stderr
    assert 'the mean of 3 models' in proc.stdout
    inputs = [arrays(workdir / (n + '.npz')) for n in ('one', 'two', 'three')]
    averaged = arrays(workdir / 'avg.npz')
    assert 'history_errs' not in averaged and 'uidx' not in averaged
    assert set(averaged) == set(inputs[0]) - {'history_errs', 'uidx'}
    for name, value in averaged.items():
        assert value.dtype == numpy.float32
        expected = (inputs[0][name].astype(float) + inputs[1][name] + inputs[2][name]) / 3
        numpy.testing.assert_allclose(value, expected, rtol=1e-6, atol=1e-7)
        assert not numpy.array_equal(value, inputs[0][name])
    assert ((workdir / 'avg.npz.pkl').read_bytes() == (workdir / 'one.npz.pkl').read_bytes())
    assert (workdir / 'avg.npz.json').exists()


def test_a_model_averaged_with_itself_is_itself_and_decodes_as_it(workdir):
    assert average(workdir, 'one.npz', 'one.npz', '-o', 'same.npz').returncode == 0
    for name, value in arrays(workdir / 'one.npz').items():
        if name not in ('history_errs', 'uidx'):
            assert numpy.array_equal(arrays(workdir / 'same.npz')[name], value), name
    for model in ('one.npz', 'same.npz'):
        run_command('translate.py', ['-k', 3, '--maxlen', 7, model, 'src.pkl', 'trg.pkl',
                                     'in.txt', model + '.out'], cwd=workdir, check=True)
    translations = (workdir / 'same.npz.out').read_text().splitlines()
    assert len(translations) == len(SOURCES)
    assert translations == (workdir / 'one.npz.out').read_text().splitlines()


@pytest.mark.parametrize('other, needles', [
    ('baseline.npz', ('baseline.npz', 'option decoder', 'one architecture')),
    ('bigger.npz', ('bigger.npz', 'n_words'))])
def test_models_of_another_architecture_are_one_line_and_no_file(workdir, other, needles):
    proc = average(workdir, 'one.npz', other, '-o', 'mixed.npz')
    error_line(proc, *needles)
    assert not [f for f in os.listdir(str(workdir)) if f.startswith('mixed')]


def test_bad_arguments_are_one_line(workdir):
    error_line(average(workdir, 'one.npz', '-o', 'x.npz'), 'at least two', status=2)
    error_line(average(workdir, 'one.npz', 'two.npz', '-o', 'one.npz'), 'one.npz',
               'is an input')
    error_line(average(workdir, 'one.npz', 'missing.npz', '-o', 'x.npz'), 'missing.npz')
    assert not (workdir / 'x.npz').exists()
