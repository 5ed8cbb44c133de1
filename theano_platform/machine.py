"""What a run's arithmetic depends on beside its command and data: the CPU
and its widest vector unit, the BLAS and the kernels it picked, the threads,
the versions.  Two runs of one command on machines where these agree give
the same numbers bit for bit; where they differ, the matrix products may
round differently in their last bits (docs/training.md#reproducibility).

``description()`` is what the training log's ``start`` event and the speed
benchmark record of the machine.  Import it after theano_env (it reads
Theano's configuration).
"""
import os
import platform
from collections import OrderedDict

from theano_platform import theano_env


def cpu_model(path='/proc/cpuinfo'):
    """The CPU's model name ('unknown' where /proc/cpuinfo says none)."""
    try:
        with open(path) as f:
            for line in f:
                if line.startswith('model name'):
                    return line.partition(':')[2].strip()
    except OSError:
        pass
    return platform.processor() or 'unknown'


# /proc/cpuinfo's vendor_id of the makers whose CPUs the project's figures
# are told apart by (docs/speed.md: Intel and AMD, each with its own figures)
VENDORS = {'GenuineIntel': 'Intel', 'AuthenticAMD': 'AMD'}


def cpu_vendor(path='/proc/cpuinfo'):
    """'Intel', 'AMD', the vendor_id of another maker, or 'unknown'."""
    try:
        with open(path) as f:
            for line in f:
                if line.startswith('vendor_id'):
                    vendor = line.partition(':')[2].strip()
                    return VENDORS.get(vendor, vendor)
    except OSError:
        pass
    return 'unknown'


def vector_unit(flags):
    """The widest vector instructions among the CPU's ``flags``: 'avx512',
    'avx2', 'avx' or 'sse' (what Theano's -march=native, OpenBLAS's kernels
    and NumPy's loops are chosen by)."""
    for unit, flag in (('avx512', 'avx512f'), ('avx2', 'avx2'), ('avx', 'avx')):
        if flag in flags:
            return unit
    return 'sse'


def openblas_kernels(blas_ldflags):
    """The kernels of the OpenBLAS that ``blas_ldflags`` link (its
    openblas_get_corename(), in this process: the library is loaded once,
    so this is the one Theano's ops call), or None for another BLAS."""
    library = theano_env.linked_library(blas_ldflags, 'openblas')
    if library is None:
        return None
    import ctypes
    try:
        lib = ctypes.CDLL(library)
        lib.openblas_get_corename.restype = ctypes.c_char_p
        return lib.openblas_get_corename().decode()
    except (OSError, AttributeError):
        return None


def summary(machine):
    """One line of a description(): 'Intel, Intel(R) Xeon(R) ..., avx512,
    OpenBLAS (SkylakeX kernels), 2 cores'."""
    blas = machine['blas']
    if 'openblas' in blas:
        blas = 'OpenBLAS' + (' (%s kernels)' % machine['blas_kernels']
                             if machine['blas_kernels'] else '')
    elif 'mkl' in blas:
        blas = 'MKL'
    return '%s, %s, %s, %s, %d cores' % (machine['cpu_vendor'], machine['cpu'],
                                          machine['vector_unit'], blas, machine['cores'])


def description():
    """The machine as it computes: an OrderedDict of plain values."""
    import numpy
    import theano
    blas = theano.config.blas__ldflags
    return OrderedDict([
        ('cpu', cpu_model()),
        ('cpu_vendor', cpu_vendor()),
        ('cores', theano_env.usable_cores()),
        ('vector_unit', vector_unit(theano_env.cpu_flags())),
        # what Theano compiles its C code for (the user's flags, else the CPU's own)
        ('theano_cxxflags', theano.config.gcc__cxxflags or '-march=native'),
        ('blas', blas or 'numpy'),
        ('blas_kernels', openblas_kernels(blas)),
        ('blas_threads', os.environ.get('OPENBLAS_NUM_THREADS')
         or os.environ.get('MKL_NUM_THREADS')),
        ('device', theano.config.device),
        ('python', platform.python_version()),
        ('numpy', numpy.__version__),
        ('theano', theano.__version__),
    ])
