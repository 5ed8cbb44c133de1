"""Make theano-pymc 1.1.2 work on Python 3.11.  Import this before Theano.

Every entry point (nmt.py, translate.py, score.py, benchmark.py, the tests)
imports this module first; the user sets nothing by hand.  What it fixes:

* BLAS: theano-pymc looks its BLAS up in ``numpy.distutils.__config__``, which
  has no ``blas_opt_info`` on recent numpy builds, so ``import theano`` fails
  unless ``blas__ldflags`` is set.  We pick the fastest library present, in
  the order measured on the project's 2-core machine: Debian's OpenBLAS, MKL
  from PyPI, and as a last resort the empty value (NumPy's C-API, 5-15%
  slower).
* scan: the bundled Cython scan module does not compile on 3.11.  We make its
  import fail with ImportError so that scan uses its Python loop (bit-identical
  results; decoding never uses scan).
* one BLAS thread (as fast as two on the 2-core machine, and right for the
  several processes of translate.py), float32, and a compile cache whose name
  does not depend on the kernel version, so that it survives reboots.

Settings the user gives in THEANO_FLAGS or OPENBLAS_NUM_THREADS win.
"""
import glob
import os
import sys
import sysconfig
import warnings

# Theano 1.1.2 triggers these with numpy 1.23 / Python 3.11; they are noise.
warnings.filterwarnings("ignore", category=DeprecationWarning)
warnings.filterwarnings("ignore", category=FutureWarning)
warnings.filterwarnings("ignore", message=".*numpy.distutils.*")

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")


def _blas_ldflags():
    """Link flags of the best BLAS found here, or '' for NumPy's C-API."""
    for libdir in sorted(glob.glob("/usr/lib/*/openblas-pthread")) + sorted(
            glob.glob("/usr/lib/*/openblas")):
        if glob.glob(os.path.join(libdir, "libopenblas.so*")):
            return "-L%s -lopenblas" % libdir
    venv_lib = os.path.join(sys.prefix, "lib")
    if glob.glob(os.path.join(venv_lib, "libmkl_rt.so*")):
        return "-L%s -lmkl_rt -Wl,-rpath,%s" % (venv_lib, venv_lib)
    return ""


def _flag_given(flags, name):
    return any(part.split("=")[0].strip().replace(".", "__") == name
               for part in flags.split(",") if part.strip())


def configure(allow_gc=None):
    """Set THEANO_FLAGS defaults; must run before the first ``import theano``."""
    flags = os.environ.get("THEANO_FLAGS", "")
    defaults = [
        ("floatX", "float32"),
        ("blas__ldflags", _blas_ldflags()),
        ("compiledir_format",
         "compiledir_nmt-py%(python_version)s-np%(numpy_version)s"),
        # openmp=True is broken in theano-pymc 1.1.2
        ("openmp", "False"),
    ]
    if allow_gc is not None:
        defaults.append(("allow_gc", str(bool(allow_gc))))
    extra = ["%s=%s" % (k, v) for k, v in defaults if not _flag_given(flags, k)]
    os.environ["THEANO_FLAGS"] = ",".join([f for f in [flags] + extra if f])
    # A None entry makes ``from theano.scan import scan_perform_ext`` raise
    # ImportError, which scan answers by using its Python loop.
    sys.modules.setdefault("theano.scan.scan_perform_ext", None)


if "theano" not in sys.modules:
    configure()
