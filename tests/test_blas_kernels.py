"""theano_env.choose_openblas_core: OpenBLAS never runs its fallback kernels
(Prescott, SSE3) on a CPU with AVX2 or AVX-512 (docs/speed.md#blas-kernels)."""
import os
import subprocess
import sys

import pytest

from theano_platform import theano_env

AVX512 = {'avx2', 'fma', 'avx512f', 'avx512bw', 'avx512vl', 'avx512dq'}


def test_kernels_follow_the_cpu_features():
    assert theano_env.openblas_core_for(AVX512 | {'avx512_bf16'}) == 'CooperLake'
    assert theano_env.openblas_core_for(AVX512) == 'SkylakeX'
    assert theano_env.openblas_core_for({'avx2', 'fma', 'sse3'}) == 'Haswell'
    assert theano_env.openblas_core_for({'sse3', 'avx'}) is None


def test_cpu_flags_read_from_cpuinfo(tmp_path):
    info = tmp_path / 'cpuinfo'
    info.write_text('processor\t: 0\nflags\t\t: fpu sse3 avx2 fma\nbugs\t\t: x\n')
    assert theano_env.cpu_flags(str(info)) == {'fpu', 'sse3', 'avx2', 'fma'}
    assert theano_env.cpu_flags(str(tmp_path / 'missing')) == set()


@pytest.mark.parametrize('found, expected', [('Prescott', 'Haswell'), ('Haswell', None),
                                             ('Zen', None), (None, None)])
def test_only_a_fallback_is_overridden(monkeypatch, found, expected):
    monkeypatch.delenv('OPENBLAS_CORETYPE', raising=False)
    monkeypatch.setattr(theano_env, '_blas_ldflags', lambda: '-L/lib/openblas -lopenblas')
    monkeypatch.setattr(theano_env, 'cpu_flags', lambda: {'avx2', 'fma'})
    monkeypatch.setattr(theano_env, 'openblas_corename', lambda library: found)
    theano_env.choose_openblas_core()
    assert os.environ.get('OPENBLAS_CORETYPE') == expected


def test_the_users_choice_wins(monkeypatch):
    monkeypatch.setenv('OPENBLAS_CORETYPE', 'Nehalem')
    monkeypatch.setattr(theano_env, 'openblas_corename', lambda library: 'Prescott')
    theano_env.choose_openblas_core()
    assert os.environ['OPENBLAS_CORETYPE'] == 'Nehalem'


def test_the_linked_openblas_runs_modern_kernels_here():
    """The library Theano links, in a process set up as every command is."""
    library = theano_env.linked_library(theano_env._blas_ldflags(), 'openblas')
    if library is None or theano_env.openblas_core_for(theano_env.cpu_flags()) is None:
        pytest.skip('no OpenBLAS linked, or a CPU without AVX2')
    env = {k: v for k, v in os.environ.items() if k != 'OPENBLAS_CORETYPE'}
    script = ('import sys; from theano_platform import theano_env; '
              'print(theano_env.openblas_corename(sys.argv[1]))')
    out = subprocess.run([sys.executable, '-c', script, library], env=env,
                         cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                         stdout=subprocess.PIPE, universal_newlines=True, check=True)
    assert out.stdout.strip().lower() in theano_env.MODERN_OPENBLAS_CORES


def test_the_machine_description_reads_the_cpu(tmp_path):
    """theano_platform/machine.py: the model name and the widest vector unit."""
    from theano_platform import machine
    info = tmp_path / 'cpuinfo'
    info.write_text('processor\t: 0\nmodel name\t: AMD EPYC 9654\nflags\t\t: avx2\n')
    assert machine.cpu_model(str(info)) == 'AMD EPYC 9654'
    assert machine.vector_unit(AVX512) == 'avx512'
    assert machine.vector_unit({'avx2', 'fma'}) == 'avx2'
    assert machine.vector_unit({'sse3'}) == 'sse'
    assert machine.openblas_kernels('-L/opt/lib -lmkl_rt') is None


def test_the_linked_library_is_found_in_the_link_flags():
    flags = '-L/usr/lib/x/openblas-pthread -lopenblas'
    assert theano_env.linked_library(flags, 'openblas') == \
        '/usr/lib/x/openblas-pthread/libopenblas.so'
    assert theano_env.linked_library(flags, 'mkl_rt') is None
    assert theano_env.linked_library('-lopenblas', 'openblas') == 'libopenblas.so'


def test_the_machine_description_names_the_kernels_in_use():
    """The kernels the training log records are those of the OpenBLAS that
    Theano links, as theano_env chose them (here, in this process)."""
    from theano_platform import machine
    flags = theano_env._blas_ldflags()
    if '-lopenblas' not in flags.split():
        pytest.skip('no OpenBLAS linked')
    assert machine.openblas_kernels(flags).lower() in theano_env.MODERN_OPENBLAS_CORES


def test_limit_threads_reaches_the_linked_openblas(monkeypatch):
    """theano_env.limit_threads sets the thread count of the OpenBLAS that
    Theano links, found by linked_library."""
    import ctypes
    library = theano_env.linked_library(theano_env._blas_ldflags(), 'openblas')
    if library is None:
        pytest.skip('no OpenBLAS linked')
    for var in theano_env.THREAD_VARIABLES:
        monkeypatch.setenv(var, os.environ.get(var, '1'))   # restored afterwards
    lib = ctypes.CDLL(library)
    before = lib.openblas_get_num_threads()
    try:
        lib.openblas_set_num_threads(ctypes.c_int(2))
        assert lib.openblas_get_num_threads() == 2
        theano_env.limit_threads(1)
        assert lib.openblas_get_num_threads() == 1
    finally:
        lib.openblas_set_num_threads(ctypes.c_int(before))
