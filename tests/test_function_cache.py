"""The function cache (theano_platform/function_cache.py): a run whose graphs an
earlier run compiled loads them, trains to the same numbers as a run that
compiles them, and a bundle that cannot be used costs a compile, never a
wrong run."""
import os
import pickle
import zlib

import numpy
import pytest

from theano_platform import theano_env  # noqa: F401  (before theano)
import theano

from theano_platform import function_cache
import tiny_runs

LOADED = 'Compiled functions from the cache'
COMPILED = 'Building optimizer'


@pytest.fixture(scope='module')
def corpus(tmp_path_factory):
    directory = tmp_path_factory.mktemp('function_cache')
    tiny_runs.make_corpus(directory)
    return directory


def train(corpus, cache, model, *flags):
    """A 4-update run with the cache in ``cache`` ('off': none); its output."""
    env = dict(tiny_runs.QUICK_ENV, NMT_FUNCTION_CACHE=str(cache))
    proc = tiny_runs.run([tiny_runs.NMT, '--model', model, '--finish_after', '4']
                         + tiny_runs.TRAIN_FLAGS + list(flags), cwd=corpus, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout + proc.stderr


def parameters(path):
    with numpy.load(str(path)) as archive:
        return dict((k, archive[k]) for k in archive.files if not k.startswith(('history', 'uidx', 'zipped')))


def test_a_run_loads_what_an_earlier_run_compiled_and_trains_alike(corpus, tmp_path):
    """The first run compiles and saves; the second (another seed, so other
    initial parameters) loads and ends with the very parameters of a run of
    that seed that compiles."""
    cache = tmp_path / 'cache'
    first = train(corpus, cache, 'first.npz', '--seed', '1')
    assert COMPILED in first and LOADED not in first
    assert len(os.listdir(str(cache))) == 1
    loaded = train(corpus, cache, 'loaded.npz', '--seed', '2')
    assert LOADED in loaded and COMPILED not in loaded
    compiled = train(corpus, 'off', 'compiled.npz', '--seed', '2')
    assert COMPILED in compiled
    got, want = parameters(corpus / 'loaded.npz'), parameters(corpus / 'compiled.npz')
    assert sorted(got) == sorted(want)
    for name in want:
        assert numpy.array_equal(got[name], want[name]), name
    # and the seed did matter: the first run's parameters differ
    assert not numpy.array_equal(parameters(corpus / 'first.npz')['Wemb'], want['Wemb'])


def test_other_graphs_are_compiled_not_loaded(corpus, tmp_path):
    cache = tmp_path / 'cache'
    train(corpus, cache, 'a.npz')
    other = train(corpus, cache, 'b.npz', '--dim', '6')
    assert COMPILED in other and LOADED not in other
    assert len(os.listdir(str(cache))) == 2


def test_a_damaged_bundle_is_compiled_again_and_replaced(corpus, tmp_path):
    cache = tmp_path / 'cache'
    train(corpus, cache, 'damaged_a.npz')
    [name] = os.listdir(str(cache))
    with open(str(cache / name), 'r+b') as f:
        f.truncate(1000)
    out = train(corpus, cache, 'damaged_b.npz')
    assert COMPILED in out and 'unreadable' in out and name in out
    assert LOADED in train(corpus, cache, 'damaged_c.npz')


def test_the_key_holds_the_configuration_and_the_options():
    key = function_cache.cache_key('Model', {'dim': 5})
    assert function_cache.cache_key('Model', {'dim': 5}) == key
    assert function_cache.cache_key('Model', {'dim': 6}) != key
    assert function_cache.cache_key('Other', {'dim': 5}) != key
    with theano.config.change_flags(optimizer='fast_compile'):
        assert function_cache.cache_key('Model', {'dim': 5}) != key


def test_given_values_and_zeros_are_left_out_and_come_back_apart(tmp_path, monkeypatch):
    """Given shared variables are stored as names and loaded with the values
    given then; two all-zero arrays come back as two arrays, not one."""
    monkeypatch.setenv(function_cache.VARIABLE, str(tmp_path))
    weight = theano.shared(numpy.arange(4096, dtype='float32'), name='W')
    zeros_a, zeros_b = numpy.zeros(2048, 'float32'), numpy.zeros(2048, 'float32')
    small = numpy.zeros(3, 'float32')
    bundle = {'W': weight, 'a': zeros_a, 'b': zeros_b, 'a_again': zeros_a, 'small': small}
    function_cache.save('k', bundle, {'param:W': weight})
    assert os.path.getsize(str(tmp_path / 'k.pkl.z')) < 1024   # no value stored
    new_weight = numpy.full(4096, 7, dtype='float32')
    loaded = function_cache.load('k', {'param:W': new_weight})
    assert numpy.array_equal(loaded['W'].get_value(), new_weight)
    assert loaded['a'] is loaded['a_again'] and loaded['a'] is not loaded['b']
    assert not loaded['a'].any() and loaded['a'].shape == (2048,)
    assert numpy.array_equal(loaded['small'], small)
    with open(str(tmp_path / 'k.pkl.z'), 'rb') as f:   # the tokens are in the file
        with pytest.raises(pickle.UnpicklingError):
            pickle.loads(zlib.decompress(f.read()))


def test_an_edit_of_any_graph_building_file_changes_the_digest(tmp_path, monkeypatch):
    monkeypatch.setattr(function_cache, 'ROOT', str(tmp_path))
    for folder in function_cache.SOURCE_FOLDERS:
        (tmp_path / folder).mkdir(exist_ok=True)
        (tmp_path / folder / 'code.py').write_text('x = 1\n')
    digest = function_cache.source_digest()
    for folder in function_cache.SOURCE_FOLDERS:
        (tmp_path / folder / 'code.py').write_text('x = 2\n')
        assert function_cache.source_digest() != digest, folder
        digest = function_cache.source_digest()


def test_loaded_functions_are_linked_when_first_called_and_keep_their_shared_storage(
        tmp_path, monkeypatch):
    """A loaded function is linked at its first call, not at loading; two
    functions over one shared variable still share it (one writes, the other
    reads what was written), and a function never called is never linked."""
    monkeypatch.setenv(function_cache.VARIABLE, str(tmp_path))
    x = theano.tensor.vector('x')
    acc = theano.shared(numpy.zeros(3, 'float32'), name='acc')
    bundle = {'f_add': theano.function([x], [], updates=[(acc, acc + x)]),
              'f_read': theano.function([], acc * 2),
              'f_unused': theano.function([x], x.sum())}
    function_cache.save('lazy', bundle, {})
    loaded = function_cache.load('lazy', {})
    assert all(isinstance(f, function_cache.LinkedOnFirstCall) for f in loaded.values())
    assert all(f._function is None for f in loaded.values())
    loaded['f_add'](numpy.array([1, 2, 3], 'float32'))
    loaded['f_add'](numpy.array([1, 1, 1], 'float32'))
    assert loaded['f_add']._function is not None and loaded['f_read']._function is None
    numpy.testing.assert_array_equal(loaded['f_read'](), [4, 6, 8])
    assert loaded['f_unused']._function is None
    assert loaded['f_read'].maker is loaded['f_read'].function().maker   # attributes pass through


def test_a_folder_removed_by_theanos_cache_cleanup_is_made_again(tmp_path, monkeypatch):
    """Theano's module cache removes the empty folders of its compile folder
    when it refreshes (two MPI workers compiling at once lost both bundles
    so): a save whose folder goes between its making and its file still
    saves."""
    from theano.link.c.cmodule import get_module_cache
    cache = get_module_cache(theano.config.compiledir)
    empty = os.path.join(cache.dirname, 'function_cache_probe_%d' % os.getpid())
    os.makedirs(empty)
    cache.refresh()
    assert not os.path.exists(empty)          # what Theano does to an empty folder
    folder = tmp_path / 'bundles'
    monkeypatch.setenv(function_cache.VARIABLE, str(folder))
    real_mkstemp, removed = function_cache.tempfile.mkstemp, []

    def mkstemp_after_a_refresh(**kwargs):
        if not removed:
            os.rmdir(kwargs['dir'])           # the refresh of another process
            removed.append(kwargs['dir'])
        return real_mkstemp(**kwargs)
    monkeypatch.setattr(function_cache.tempfile, 'mkstemp', mkstemp_after_a_refresh)
    function_cache.save('k', {'small': numpy.zeros(3, 'float32')}, {})
    assert removed and os.listdir(str(folder)) == ['k.pkl.z']
    assert numpy.array_equal(function_cache.load('k', {})['small'], numpy.zeros(3))
