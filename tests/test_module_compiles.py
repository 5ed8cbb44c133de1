"""theano_platform/module_compiles.py: Theano's C modules compiled ahead, several at a
time, with their common headers precompiled, and still the same code.

That the repairs act at all (and fail without them) is shown by the probes
of test_theano_repairs.py; here: the library is byte for byte Theano's own,
what is not taken is compiled as before, and bad settings say so.
"""
import filecmp
import os
import random

import numpy as np
import pytest

from theano_platform import module_compiles


def _compile_recorded(monkeypatch):
    """Make a function of two modules no cache holds; the (cmd, src_code,
    lib_filename) of every g++ run, and the outputs for an input."""
    import theano
    import theano.tensor as tensor
    from unversioned_op import UnversionedCopy
    runs = []
    run_compiler = module_compiles.run_compiler

    def recording(cmd, src_code, lib_filename):
        runs.append((list(cmd), src_code, lib_filename))
        return run_compiler(cmd, src_code, lib_filename)
    monkeypatch.setattr(module_compiles, 'run_compiler', recording)
    x = tensor.matrix('x')
    k = random.SystemRandom().randrange(10 ** 9)
    fn = theano.function([x], [UnversionedCopy(k)(x) + 1, UnversionedCopy(k + 1)(x * 2)])
    a = np.linspace(-1, 1, 6, dtype='float32').reshape(2, 3)
    return runs, fn(a), a


def test_the_precompiled_prefix_gives_the_library_theano_would_compile(monkeypatch, tmp_path):
    from theano.utils import output_subprocess_Popen
    runs, (plus_one, twice), a = _compile_recorded(monkeypatch)
    assert np.array_equal(plus_one, a + 1) and np.array_equal(twice, a * 2)
    # the libraries Theano keeps (those compiled ahead were moved there)
    modules = [r for r in runs if r[1].startswith(module_compiles.PREFIX)
               and os.path.exists(r[2])]
    assert len(modules) >= 2, 'the function\'s two modules were not compiled: %s' % runs
    for cmd, src_code, lib_filename in modules:
        with_prefix = module_compiles.with_precompiled_prefix(cmd, src_code, lib_filename)
        assert with_prefix[1] == '-include' and os.path.exists(with_prefix[2] + '.gch')
        # Theano's command, as it was before the repairs, into another file
        plain = str(tmp_path / os.path.basename(lib_filename))
        out, err, status = output_subprocess_Popen(
            [plain if a == lib_filename else a for a in cmd])
        assert status == 0, err.decode()
        assert filecmp.cmp(plain, lib_filename, shallow=False), \
            '%s differs from the library compiled without the prefix' % lib_filename


def test_a_source_without_the_prefix_is_compiled_as_given():
    cmd = ['g++', '-shared', '-o', '/x/m.so', '/x/mod.cpp']
    assert module_compiles.with_precompiled_prefix(cmd, 'int f;\n', '/x/m.so') == cmd


def test_a_module_compiled_ahead_by_another_command_is_compiled_again(monkeypatch, tmp_path):
    """A library compiled ahead is kept only if Theano's command is the one
    that compiled it; otherwise Theano's command runs."""
    src_code = 'int f(void) { return 1; }\n'
    (tmp_path / 'mod.cpp').write_text(src_code)
    library = tmp_path / 'mtheano.so'
    cmd = ['g++', '-shared', '-fPIC', '-o', str(library), str(tmp_path / 'mod.cpp')]
    library.write_bytes(b'compiled ahead')
    monkeypatch.setitem(module_compiles._compiled_ahead, str(library), ('g++', '-shared', '-O0'))
    out, err, status = module_compiles.run_compiler(cmd, src_code, str(library))
    assert status == 0, err.decode()
    assert library.read_bytes()[:4] == b'\x7fELF'
    library.write_bytes(b'compiled ahead')
    monkeypatch.setitem(module_compiles._compiled_ahead, str(library),
                        module_compiles._options(cmd, str(library)))
    assert module_compiles.run_compiler(cmd, src_code, str(library)) == (b'', b'', 0)
    assert library.read_bytes() == b'compiled ahead'


@pytest.mark.parametrize('value', ['0', 'two', '-1'])
def test_a_bad_number_of_compile_jobs_names_the_variable(monkeypatch, value):
    monkeypatch.setenv(module_compiles.JOBS_VARIABLE, value)
    with pytest.raises(ValueError, match='NMT_COMPILE_JOBS=%r' % value):
        module_compiles.compile_jobs()


def test_compile_jobs_default_to_the_usable_cores(monkeypatch):
    monkeypatch.delenv(module_compiles.JOBS_VARIABLE, raising=False)
    assert module_compiles.compile_jobs() == len(os.sched_getaffinity(0))
    monkeypatch.setenv(module_compiles.JOBS_VARIABLE, '3')
    assert module_compiles.compile_jobs() == 3


def test_a_forked_child_compiles_ahead_with_its_own_threads():
    """A child forked after this process compiled ahead (the pool's threads
    are the parent's) compiles its own missing modules, without waiting for
    threads it does not have."""
    import multiprocessing
    import theano
    import theano.tensor as tensor
    from unversioned_op import UnversionedCopy
    x = tensor.matrix('x')
    k = random.SystemRandom().randrange(10 ** 9)
    theano.function([x], [UnversionedCopy(k)(x), UnversionedCopy(k + 1)(x)])   # the pool made
    assert module_compiles._pool, 'nothing was compiled ahead in this process'

    def child(queue):
        fn = theano.function([x], [UnversionedCopy(k + 2)(x) * 2, UnversionedCopy(k + 3)(x)])
        queue.put(float(fn(np.ones((2, 2), dtype='float32'))[0].sum()))
    context = multiprocessing.get_context('fork')
    queue = context.Queue()
    process = context.Process(target=child, args=(queue,))
    process.start()
    process.join(300)
    alive = process.is_alive()
    if alive:
        process.kill()
    assert not alive, 'the forked child waited for the parent\'s compile threads'
    assert queue.get(timeout=10) == 8.0
