"""Every repair of theano_platform/theano_repairs.py is needed, and together they work.

The probes (tests/repair_probes.py) run in child processes on the CPU and on
an OpenCL device (the CPU's, through pocl: ``bash setup.sh --opencl``), with
every repair, then with one repair left out (NMT_THEANO_REPAIRS_OFF): each
repair has a probe that fails without it, with the failure it exists for.
"""
import importlib
import importlib.util
import inspect
import os
import subprocess
import sys
import traceback

import numpy as np
import pytest

from theano_platform import theano_env
from theano_platform import theano_repairs
from conftest import HERE
from gpu_devices import DEVICES, why_not

OPENCL_REASON = why_not('opencl')
needs_opencl = pytest.mark.skipif(OPENCL_REASON is not None, reason=str(OPENCL_REASON))

CPU_PROBES = ['elemwise_openmp', 'scan', 'scan_reorder', 'scan_output_address',
              'integer_max_min', 'no_mpi_at_import', 'numpy_aliases', 'no_numpy_distutils',
              'whole_key_files', 'props_less_ops_kept', 'external_op_version', 'no_debug_info',
              'precompiled_prefix', 'compile_ahead', 'numpy2_names', 'numpy2_c_api',
              'numpy2_promotion']
GPU_PROBES = ['elemwise', 'scan', 'integer_max_min', 'float_division', 'shape_assert',
              'softmax_grad', 'max_and_argmax', 'cumsum', 'topk', 'dropout', 'multinomial',
              'shared_kernels', 'lazy_reductions', 'lazy_elemwise', 'lazy_inc_subtensor',
              'scan_reorder', 'stable_gpu_sources']

# repair: (device kind, probe that fails without it, a fragment of its failure)
NEEDS = {
    'no_compiled_scan': ('cpu', 'scan', 'longintrepr.h'),
    'elemwise_openmp_pragma': ('cpu', 'elemwise_openmp', 'expected primary-expression'),
    'no_mpi_at_import': ('cpu', 'no_mpi_at_import', 'import theano initialised MPI'),
    'exact_integer_max_min': ('cpu', 'integer_max_min', '9007199254740992'),
    # numpy 1: import theano fails on numpy.bool; numpy 2 (which has it): numpy.complex
    'numpy_aliases_scalar': ('cpu', 'numpy_aliases', "module 'numpy' has no attribute"),
    'numpy_aliases_tensor': ('cpu', 'numpy_aliases', 'the constant 1 does not broadcast'),
    'numpy_aliases_random': ('cpu', 'numpy_aliases', "module 'numpy' has no attribute 'int'"),
    'no_numpy_distutils': ('cpu', 'no_numpy_distutils', 'numpy.distutils'),
    'no_numpy_distutils_blas': ('cpu', 'no_numpy_distutils', 'numpy.distutils'),
    'whole_key_files': ('cpu', 'whole_key_files', 'half-written key.pkl'),
    'props_less_ops_kept': ('cpu', 'props_less_ops_kept', 'unversioned'),
    'external_op_version': ('cpu', 'external_op_version', 'differs between processes'),
    'scan_output_address': ('cpu', 'scan_output_address', 'compares the outputs\' contents'),
    'no_debug_info': ('cpu', 'no_debug_info', 'has debug information'),
    'compiler_hook': ('cpu', 'precompiled_prefix', 'no module was compiled with the precompiled'),
    'compile_ahead': ('cpu', 'compile_ahead', 'one after the other'),
    'numpy2_removed_scalar': ('cpu', 'numpy2_names', '`np.cast` was removed'),
    'numpy2_removed_elemwise': ('cpu', 'numpy2_names', '`np.sctype2char` was removed'),
    # NumPy 2's C API (on NumPy 1 their probes pass without them: NUMPY2_ONLY)
    'numpy2_itemsize_blas': ('cpu', 'numpy2_c_api', 'has no member named'),
    'numpy2_itemsize_rng_mrg': ('cpu', 'numpy2_c_api', 'has no member named'),
    'numpy2_itemsize_dimshuffle': ('cpu', 'numpy2_c_api', 'has no member named'),
    'c_file_reader_external_ops': ('cpu', 'numpy2_c_api', 'has no member named'),
    'numpy2_lazylinker': ('cpu', 'numpy2_c_api', 'PyInt_AsLong'),
    'numpy2_inplace_increment': ('cpu', 'numpy2_c_api', 'PyArrayMapIterObject'),
    'numpy2_mrg_mask': ('cpu', 'numpy2_promotion', 'out of bounds for int32'),
    'c_file_reader_lazylinker': ('cpu', 'numpy2_c_api', 'PyInt_AsLong'),
    'hidec_defaults': ('opencl', 'elemwise', "unexpected keyword argument 'c_compiler'"),
    'gpuarray_use_optdb': ('opencl', 'elemwise', "has no attribute 'add_tags'"),
    'op_lifter_fgraph': ('opencl', 'shape_assert',
                         "local_gpua_elemwise() missing 1 required positional argument"),
    'graph_to_gpu_fgraph': ('opencl', 'elemwise',
                            "local_gpua_elemwise() missing 1 required positional argument"),
    'graph_to_gpu_count': ('opencl', 'elemwise', "object of type 'generator' has no len()"),
    'fusion_gpu_test_value': ('opencl', 'elemwise', "has no attribute 'flatten'"),
    'scan_gpu_region': ('opencl', 'scan', 'This is for CUDA arrays'),
    'scan_reorder_overlap': ('opencl', 'scan_reorder', 'Memory copy overlap'),
    'lazy_elemwise_kernels': ('opencl', 'lazy_elemwise', 'a 3-d GpuElemwise'),
    'lazy_inc_subtensor_kernels': ('opencl', 'lazy_inc_subtensor', 'a 3-d GpuIncSubtensor'),
    'lazy_reduction_kernels': ('opencl', 'lazy_reductions', 'reduction builds when made'),
    'switch_on_floats': ('opencl', 'dropout', 'Could not initialize elemwise support'),
    'opencl_kernel_c': ('opencl', 'float_division', 'Could not initialize elemwise support'),
    'lifters_pass_fgraph': ('opencl', 'shape_assert',
                            "_graph() missing 1 required positional argument"),
    'lifters_take_fgraph_dnn_opt': ('opencl', 'softmax_grad',
                                    'takes 4 positional arguments but 5 were given'),
    'lifters_take_fgraph_extra_ops': ('opencl', 'cumsum',
                                      'takes 4 positional arguments but 5 were given'),
    'lifters_take_fgraph_sort': ('opencl', 'topk',
                                 'takes 4 positional arguments but 5 were given'),
    'lifters_take_fgraph_multinomial': ('opencl', 'multinomial',
                                        'takes 4 positional arguments but 5 were given'),
    'multinomial_init': ('opencl', 'multinomial', 'object.__init__() takes exactly one argument'),
    'mrg_uniform_c_op': ('opencl', 'dropout', "Can't instantiate abstract class"),
    'shared_elemwise_kernels': ('opencl', 'shared_kernels', 'more for eight'),
    'stable_context_type_name': ('opencl', 'stable_gpu_sources',
                                 'parameters struct differs between processes'),
    'max_and_argmax_c_op': ('opencl', 'max_and_argmax', "Can't instantiate abstract class"),
}


# repairs of what NumPy 2 changed in its C API and its types' promotion, which
# NumPy 1 (Python 3.10-3.12) cannot be made to show
NUMPY2_ONLY = {r for r in NEEDS if NEEDS[r][1] in ('numpy2_c_api', 'numpy2_promotion')}
NUMPY_MAJOR = int(np.__version__.split('.')[0])


def run_probes(kind, probes, off=()):
    """(exit status, output) of repair_probes.py on a device with repairs off."""
    # the child's own defaults (its compile folder depends on the repairs)
    env = theano_env.device_env(DEVICES.get(kind, 'cpu'))
    env['THEANO_FLAGS'] += ',on_opt_error=raise'
    env[theano_repairs.OFF_VARIABLE] = ','.join(off)
    if kind == 'opencl':
        env['POCL_DEBUG'] = 'llvm'   # probe_shared_kernels counts pocl's builds
    proc = subprocess.run([sys.executable, os.path.join(HERE, 'repair_probes.py')] + probes,
                          env=env, capture_output=True, text=True, timeout=1800)
    return proc.returncode, proc.stdout + proc.stderr


def test_every_repair_is_listed_here():
    tested = set(NEEDS) | {'elemwise_failed_build'}  # its own test, below
    assert tested == {r.name for r in theano_repairs.REPAIRS}


def test_a_source_edit_that_does_not_fit_stops_with_its_name_and_file():
    edit = theano_repairs.SourceEdit('demo_edit', 'x', 'why', ('old()', 'new()', 2))
    assert edit.edit('a = old()\nb = old()\n', 'x.py') == 'a = new()\nb = new()\n'
    with pytest.raises(theano_repairs.RepairError, match="'demo_edit'.*x.py, found 1"):
        edit.edit('a = old()\n', 'x.py')
    # a file changed in place (by an older release of the project): refused
    # too, with the way out
    with pytest.raises(theano_repairs.RepairError, match='found 0.*force-reinstall'):
        edit.edit('a = new()\nb = new()\n', 'x.py')


def test_each_text_of_an_edit_is_checked_against_the_original():
    """Two replacements that write the same text: the second's original
    missing is not taken for 'already repaired' by the first's result."""
    edit = theano_repairs.SourceEdit('two_texts', 'x', 'why', ('first()', 'done()'),
                                     ('second()', 'done()'))
    assert edit.edit('first()\nsecond()\n', 'x.py') == 'done()\ndone()\n'
    with pytest.raises(theano_repairs.RepairError,
                       match="'two_texts' expects its text 2 of 2 1 time.*found 0"):
        edit.edit('first()\n', 'x.py')


def test_a_c_file_edit_changes_its_file_only_and_refuses_another_text(monkeypatch):
    edit = theano_repairs.CFileEdit('demo_c_edit', 'tensor/c_code/demo.c', 'why',
                                    ('x->elsize', 'PyArray_ITEMSIZE(x)'))
    monkeypatch.setattr(theano_repairs, 'REPAIRS', [edit])
    site = os.path.join('site-packages', 'theano', 'tensor', 'c_code')
    assert theano_repairs.edited_c_file(os.path.join(site, 'demo.c'), 'n = x->elsize;') \
        == 'n = PyArray_ITEMSIZE(x);'
    assert theano_repairs.edited_c_file(os.path.join(site, 'other.c'), 'n = x->elsize;') \
        == 'n = x->elsize;'
    with pytest.raises(theano_repairs.RepairError, match="'demo_c_edit'.*demo.c, found 0"):
        theano_repairs.edited_c_file(os.path.join(site, 'demo.c'), 'n = 4;')


def test_a_traceback_from_an_edited_module_shows_the_edited_line(tmp_path, monkeypatch):
    (tmp_path / 'edited_module.py').write_text(
        '"""A module a repair edits."""\n\n\ndef fail():\n'
        '    raise ValueError("as installed")\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    edit = theano_repairs.SourceEdit(
        'demo_traceback', 'edited_module', 'why',
        ('    raise ValueError("as installed")\n',
         '    # a line more\n    raise ValueError("as edited")  # the edited line\n'))
    finder = theano_repairs._Finder([edit])
    monkeypatch.setattr(sys, 'meta_path', [finder] + sys.meta_path)
    monkeypatch.delitem(sys.modules, 'edited_module', raising=False)
    module = importlib.import_module('edited_module')
    with pytest.raises(ValueError) as raised:
        module.fail()
    text = ''.join(traceback.format_exception(raised.type, raised.value, raised.tb))
    assert 'raise ValueError("as edited")  # the edited line' in text
    assert 'edited_module.py", line 6' in text
    assert inspect.getsource(module.fail).endswith('# the edited line\n')


def test_the_installed_files_are_not_changed():
    theano_dir = os.path.dirname(os.path.dirname(importlib.util.find_spec('theano').origin))
    for repair in theano_repairs.REPAIRS:
        if isinstance(repair, theano_repairs.CFileEdit):
            path = os.path.join(theano_dir, repair.module)
        elif isinstance(repair, theano_repairs.SourceEdit):
            path = importlib.util.find_spec(repair.module).origin
        else:
            continue
        with open(path) as f:
            source = f.read()
        for old, new, count in repair.replacements:
            assert source.count(old) == count, (repair.name, old)


def test_an_unknown_repair_name_is_refused(monkeypatch):
    monkeypatch.setenv(theano_repairs.OFF_VARIABLE, 'no_such_repair')
    with pytest.raises(theano_repairs.RepairError, match='no_such_repair'):
        theano_repairs.active()


def test_probes_pass_on_the_cpu_with_the_repairs():
    code, out = run_probes('cpu', CPU_PROBES)
    assert code == 0, out[-3000:]


@pytest.mark.slow
@needs_opencl
def test_probes_pass_on_opencl_with_the_repairs():
    code, out = run_probes('opencl', GPU_PROBES)
    assert code == 0, out[-3000:]


@pytest.mark.parametrize('repair', [
    pytest.param(r, marks=pytest.mark.slow) if NEEDS[r][0] == 'opencl' else r
    for r in sorted(NEEDS)])
def test_each_repair_is_needed(repair):
    kind, probe, failure = NEEDS[repair]
    if kind == 'opencl' and OPENCL_REASON:
        pytest.skip(OPENCL_REASON)
    if repair == 'no_mpi_at_import' and importlib.util.find_spec('mpi4py') is None:
        pytest.skip('mpi4py is not installed (bash setup.sh installs it)')
    code, out = run_probes(kind, [probe], off=[repair])
    if repair == 'no_compiled_scan' and sys.version_info < (3, 11):
        # Python 3.10 still has longintrepr.h: the Cython loop builds and gives
        # NumPy's numbers; the repair keeps 3.10 on the Python loop all the same
        assert code == 0, out[-3000:]
        return
    if repair in NUMPY2_ONLY and NUMPY_MAJOR < 2:
        # NumPy 1's headers have what the repair puts back: the C code, as
        # edited or not, compiles and gives the same numbers
        assert code == 0, out[-3000:]
        return
    assert code != 0, 'probe %s passed without %s:\n%s' % (probe, repair, out[-2000:])
    assert failure in out, out[-3000:]


@pytest.mark.slow
@needs_opencl
def test_a_kernel_that_does_not_build_is_an_error_not_a_crash():
    """With OpenCL C's names left out, the float division's kernel does not
    build: an error naming the op, and without elemwise_failed_build a crash."""
    code, out = run_probes('opencl', ['unbuildable_kernel'], off=['opencl_kernel_c'])
    assert code == 0, out[-3000:]
    code, out = run_probes('opencl', ['unbuildable_kernel'],
                           off=['opencl_kernel_c', 'elemwise_failed_build'])
    assert code < 0, (code, out[-2000:])   # killed by a signal (SIGSEGV)


class _PygpuArray:
    """pygpu's GpuArray as scan_gpu_region meets it: each back-end's address
    only on that back-end (pygpu raises TypeError for the other's)."""

    def __init__(self, kind, buffer, offset):
        self.context = type('Context', (), {'kind': kind})()
        self.buffer, self.offset = buffer, offset

    @property
    def gpudata(self):  # CUDA's pointer, offset included
        if self.context.kind != b'cuda':
            raise TypeError('This is for CUDA arrays.')
        return self.buffer + self.offset

    @property
    def base_data(self):
        if self.context.kind != b'opencl':
            raise TypeError('This is for OpenCL arrays.')
        return self.buffer


@pytest.mark.parametrize('kind', [b'cuda', b'opencl'])
def test_scan_gpu_region_reads_the_address_each_backend_gives(kind):
    """The edited lines of scan's loop, run on arrays of each back-end: the
    address before a step, and after it the same array (written in place)
    and another one (not).  An OpenCL-only edit stopped every scan on CUDA."""
    edit = next(r for r in theano_repairs.REPAIRS if r.name == 'scan_gpu_region')
    (_, before, _), (_, after, _) = edit.replacements
    space = {'var': _PygpuArray(kind, 4096, 16)}
    exec('old_data ' + before, space)
    space['new_var'] = space['var']
    assert eval(after, space) is True
    space['new_var'] = _PygpuArray(kind, 4096, 32)
    assert eval(after, space) is False
