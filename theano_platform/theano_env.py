"""Make theano-pymc 1.1.2 work on Python 3.10-3.13.  Import this before Theano.

Every entry point (nmt.py, translate.py, score.py, speed/benchmark.py, the tests)
imports this module first; the user sets nothing by hand.  What it fixes:

* BLAS: theano-pymc looks its BLAS up in ``numpy.distutils.__config__``, which
  has no ``blas_opt_info`` on recent numpy builds, so ``import theano`` fails
  unless ``blas__ldflags`` is set.  We pick the fastest library present, in
  the order measured on the project's 2-core machine: Debian's OpenBLAS, MKL
  from PyPI, and as a last resort the empty value (NumPy's C-API, 5-15%
  slower).
* threads: BLAS (OpenBLAS, MKL) and the OpenMP loops of fast_ops use every
  core this process may run on (training at the papers' size: 1.5x faster
  on 2 cores than on one); worker processes that share the cores
  (translate.py -p, speed/benchmark.py --processes) call ``limit_threads(1)``;
  the MPI workers on one machine (``mpirun -np N``, distributed.py) take
  an equal share of its cores each.
  OpenMP's idle threads spin a while before they sleep (GOMP_SPINCOUNT).
* memory: the C allocator keeps what an update frees for the next
  (allocator.py: without it, page faults are 5% of a training run's CPU time).
* float32, and a compile cache whose name does not depend on the kernel
  version, so that it survives reboots.

Settings the user gives in THEANO_FLAGS, OPENBLAS_NUM_THREADS,
OMP_NUM_THREADS or MKL_NUM_THREADS win.

Repairs: theano_repairs.install() (every repair of theano-pymc, applied as
Theano imports the module it repairs; among them the Cython scan module that
does not compile on 3.11, left out so that scan runs its Python loop).

GPU: ``THEANO_FLAGS=device=cuda`` (an NVIDIA GPU) or ``device=opencl0:0``
(an OpenCL device, such as the CPU's through pocl) is the one switch
(docs/gpu.md); both go through the same back-end.  Then this module (1)
checks that the set-up made the links libgpuarray loads, (2) re-executes the
interpreter once with them on LD_LIBRARY_PATH (the dynamic loader reads that
variable only when a process starts, and libgpuarray dlopens bare library
names), (3) turns cuDNN off, and (4) after ``import theano`` stops the
program with ``error: ...`` if the GPU did not come up, where Theano would
log the failure and quietly run on the CPU.  Theano itself is never imported
here.
"""
import glob
import logging
import os
import sys
import warnings

from theano_platform import allocator
from machinery import distributed
from theano_platform import theano_flags
from theano_platform import theano_repairs

# Theano 1.1.2 triggers these with numpy 1.23 / Python 3.11; they are noise.
warnings.filterwarnings("ignore", category=DeprecationWarning)
warnings.filterwarnings("ignore", category=FutureWarning)
warnings.filterwarnings("ignore", message=".*numpy.distutils.*")
# theano.gpuarray imports pkg_resources, which setuptools 80 (Python 3.12's
# pin) announces as deprecated with a UserWarning on stderr, before every
# program's own output and its one-line errors
warnings.filterwarnings("ignore", message="pkg_resources is deprecated", category=UserWarning)

THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def usable_cores():
    """The number of cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


# the thread counts this module chose for its own process (not the user's):
# "VAR=value,...".  A child inherits the variables, but a count chosen for
# a launcher on every core is not a worker's: an MPI worker bound to one
# core would run two threads on it (docs/distributed.md#threads).
CHOSEN_THREADS = "NMT_THREADS_CHOSEN"


def _forget_inherited_choice():
    """Drop the thread variables that a parent's theano_env chose for the
    parent (still at the value it chose): this process chooses its own."""
    chosen = os.environ.pop(CHOSEN_THREADS, "")
    for item in chosen.split(","):
        var, _, value = item.partition("=")
        if var in THREAD_VARIABLES and os.environ.get(var) == value:
            del os.environ[var]


def _choose_threads():
    """Every thread variable the user did not set: this process' share of
    the cores (all of them; a worker's part under an MPI launcher)."""
    share = str(max(1, usable_cores() // distributed.local_workers()))
    chosen = []
    for var in THREAD_VARIABLES:
        if var not in os.environ:
            os.environ[var] = share
            chosen.append("%s=%s" % (var, share))
    if chosen:
        os.environ[CHOSEN_THREADS] = ",".join(chosen)


_forget_inherited_choice()
_choose_threads()
# OpenMP's idle threads spin a while (200,000 turns of a wait loop) before they
# sleep: a thread woken from sleep for each op cost training on two threads
# 10% and the one-sentence search 30% (docs/speed.md#two-cores-in-one-process).
# No op runs OpenBLAS's own threads, which the spinning would slow down.
os.environ.setdefault("GOMP_SPINCOUNT", "200000")


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


# OpenBLAS picks its kernels from the CPU's model number; a model newer than
# the library (Debian 12's 0.3.21 on a Sapphire Rapids Xeon) gets "Prescott",
# its SSE3 kernels: 7x slower matrix products than the AVX-512 ones
# (docs/speed.md#blas-kernels).  Then we name the kernels the CPU's features
# allow, before the library loads (it reads OPENBLAS_CORETYPE once, then).
MODERN_OPENBLAS_CORES = ("haswell", "zen", "skylakex", "cooperlake", "sapphirerapids")
_CORENAME_SCRIPT = ("import ctypes, sys; lib = ctypes.CDLL(sys.argv[1]); "
                    "lib.openblas_get_corename.restype = ctypes.c_char_p; "
                    "print(lib.openblas_get_corename().decode())")


def cpu_flags(path="/proc/cpuinfo"):
    """The CPU's feature flags (an empty set where /proc/cpuinfo is missing)."""
    try:
        with open(path) as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.partition(":")[2].split())
    except OSError:
        pass
    return set()


def openblas_core_for(flags):
    """The OpenBLAS kernels the CPU features allow (None: leave it to OpenBLAS)."""
    if {"avx512f", "avx512bw", "avx512vl", "avx512dq"} <= flags:
        return "CooperLake" if "avx512_bf16" in flags else "SkylakeX"
    if {"avx2", "fma"} <= flags:
        return "Haswell"
    return None


def openblas_corename(library):
    """The kernels ``library`` picks by itself here (asked in a child
    process, so that this one loads it later with our choice), or None."""
    import subprocess
    try:
        out = subprocess.run([sys.executable, "-c", _CORENAME_SCRIPT, library],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                             universal_newlines=True, timeout=30, env=dict(
                                 os.environ, OPENBLAS_NUM_THREADS="1"))
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def linked_library(ldflags, name):
    """The file of library ``name`` ("openblas", "mkl_rt") that the link
    flags ``ldflags`` name (``-LDIR -lNAME``: DIR/libNAME.so; without -L the
    bare file name, for the dynamic loader to find), or None."""
    flags = ldflags.split()
    if "-l" + name not in flags:
        return None
    libdir = next((f[2:] for f in flags if f.startswith("-L")), None)
    return os.path.join(libdir or "", "lib%s.so" % name)


def choose_openblas_core():
    """Set OPENBLAS_CORETYPE where the OpenBLAS that Theano links would fall
    back to kernels older than the CPU (the user's setting wins; children
    inherit ours, so the check runs once)."""
    library = linked_library(_blas_ldflags(), "openblas")
    if library is None or "OPENBLAS_CORETYPE" in os.environ:
        return
    wanted = openblas_core_for(cpu_flags())
    found = wanted and openblas_corename(library)
    if found and found.lower() not in MODERN_OPENBLAS_CORES:
        os.environ["OPENBLAS_CORETYPE"] = wanted


def limit_threads(n):
    """Run BLAS and OpenMP on n threads from now on, in this process: for
    workers forked after the libraries read the *_NUM_THREADS variables
    (they read them once, when they load)."""
    import ctypes
    import ctypes.util
    threads_for_children(n)
    ldflags = _blas_ldflags()
    setters = [(ctypes.util.find_library("gomp"), "omp_set_num_threads")]
    for name, setter in (("openblas", "openblas_set_num_threads"),
                         ("mkl_rt", "MKL_Set_Num_Threads")):
        library = linked_library(ldflags, name)
        if library:
            setters.append((library, setter))
    for library, setter in setters:
        try:
            getattr(ctypes.CDLL(library), setter)(ctypes.c_int(n))
        except (OSError, AttributeError, TypeError):
            pass   # not loaded here / not present: nothing runs on its threads


def threads_for_children(n, env=os.environ):
    """n BLAS and OpenMP threads for each process started with ``env``: a
    choice made for them, which they keep."""
    for var in THREAD_VARIABLES:
        env[var] = str(n)
    env.pop(CHOSEN_THREADS, None)


_ADDED = "NMT_THEANO_FLAGS_ADDED"

# below this many values a loop of the CPU ops stays on one thread (OpenMP's
# start costs more than it saves; 65536 rather than 262144 since the idle
# threads spin: training on two threads 1.5% faster): the fast ops'
# NMT_PARALLEL_MIN and Theano's openmp_elemwise_minsize
PARALLEL_MIN = 65536


def configure(allow_gc=None):
    """Set THEANO_FLAGS defaults; must run before the first ``import theano``."""
    flags = os.environ.get("THEANO_FLAGS", "")
    kind = gpu_kind(flags)
    defaults = [
        ("floatX", "float32"),
        ("blas__ldflags", _blas_ldflags()),
        # GPU processes compile into a folder of their own: a CPU and a GPU
        # process never wait for each other's compile lock; the repairs'
        # fingerprint: see theano_repairs.fingerprint
        ("compiledir_format",
         "compiledir_nmt-py%(python_version)s-np%(numpy_version)s-r"
         + theano_repairs.fingerprint() + ("-" + kind if kind else "")),
        # element-wise loops of PARALLEL_MIN values or more on OpenMP's
        # threads; theano_repairs: elemwise_openmp_pragma
        ("openmp", "True"),
        ("openmp_elemwise_minsize", str(PARALLEL_MIN)),
    ]
    if allow_gc is not None:
        defaults.append(("allow_gc", str(bool(allow_gc))))
    if kind:
        # Theano's cuDNN code targets cuDNN 5-7
        defaults.append(("dnn__enabled", "False"))
    extra = theano_flags.missing(flags, defaults)
    os.environ["THEANO_FLAGS"] = theano_flags.with_defaults(flags, defaults)
    # what we added, for device_env (a child on another device gets its own)
    added = [f for f in os.environ.get(_ADDED, "").split(",") if f]
    os.environ[_ADDED] = ",".join(added + extra)


# --------------------------------------------------------------------------
# GPU (THEANO_FLAGS=device=cuda or device=opencl0:0)

# libgpuarray and the bare-name links to the libraries it dlopens, per kind
# of device, that the set-up makes (gpu/libraries.py); Theano also finds
# gpuarray's headers and -lgpuarray under sys.prefix
GPU_LIB_DIR = os.path.join(sys.prefix, "lib")
GPU_LINKS = {"cuda": ("libcuda.so", "libnvrtc.so", "libcublas.so", "libgpuarray.so.3"),
             "opencl": ("libOpenCL.so", "libclblast.so", "libgpuarray.so.3")}
SETUP_COMMAND = {"cuda": "bash setup.sh --gpu", "opencl": "bash setup.sh --opencl"}
_REEXEC_MARK = "NMT_GPU_REEXEC"


def gpu_kind(flags=None):
    """'cuda' or 'opencl' when THEANO_FLAGS asks for such a device (device or
    init_gpu_device), else None."""
    flags = os.environ.get("THEANO_FLAGS", "") if flags is None else flags
    for name in ("device", "init_gpu_device"):
        for kind in GPU_LINKS:
            if theano_flags.value(flags, name).startswith(kind):
                return kind
    return None


def gpu_requested(flags=None):
    """Whether THEANO_FLAGS asks for a GPU back-end device."""
    return gpu_kind(flags) is not None


def device_env(device, env=None):
    """A copy of env (default os.environ) for a child process that runs on
    device ('cpu', 'cuda', 'opencl0:0', ...): THEANO_FLAGS's device replaced, and Theano's
    mark of a parent that holds the GPU removed (the child is a new process,
    not a fork, so it may open its own GPU context)."""
    env = dict(os.environ if env is None else env)
    ours = set(env.pop(_ADDED, "").split(","))
    flags = ",".join(f for f in env.get("THEANO_FLAGS", "").split(",") if f not in ours)
    env["THEANO_FLAGS"] = theano_flags.with_values(flags, [("device", device)])
    env.pop("THEANO_GPU_IS_ALREADY_ACTIVE", None)
    return env


def _fail(reason):
    """One line on stderr and exit status 1."""
    sys.stderr.write("error: GPU requested (THEANO_FLAGS device=%s) but %s\n"
                     % (theano_flags.value(os.environ.get("THEANO_FLAGS", ""), "device")
                        or "cpu", reason))
    sys.stderr.flush()
    raise SystemExit(1)


def _ensure_library_path():
    """Re-execute once with GPU_LIB_DIR first on LD_LIBRARY_PATH."""
    kind = gpu_kind()
    missing = [n for n in GPU_LINKS[kind]
               if not os.path.exists(os.path.join(GPU_LIB_DIR, n))]
    if missing:
        _fail("%s missing in %s: run `%s`%s for this environment"
              % (", ".join(missing), GPU_LIB_DIR, SETUP_COMMAND[kind],
                 " (or `gpu/bundle.sh unpack`)" if kind == "cuda" else ""))
    paths = [p for p in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p]
    if GPU_LIB_DIR in paths:
        return
    if os.environ.get(_REEXEC_MARK) or not sys.executable:
        _fail("%s is not on LD_LIBRARY_PATH; set LD_LIBRARY_PATH=%s before "
              "starting Python" % (GPU_LIB_DIR, GPU_LIB_DIR))
    env = dict(os.environ, LD_LIBRARY_PATH=os.pathsep.join([GPU_LIB_DIR] + paths))
    env[_REEXEC_MARK] = "1"
    sys.stdout.flush()
    sys.stderr.flush()
    # the same command line (``-m pytest``, ``-c ...`` included), but this
    # interpreter, whatever PATH would find for argv[0]
    argv = list(getattr(sys, "orig_argv", None) or [sys.executable] + sys.argv)
    os.execve(sys.executable, [sys.executable] + argv[1:], env)


class _GpuLog(logging.Handler):
    """Keeps the last error Theano's GPU back-end logs (its reason to give up)."""
    reason = ""

    def emit(self, record):
        if record.levelno >= logging.ERROR:
            reason = record.getMessage()
            if record.exc_info and record.exc_info[1] is not None:
                exc = record.exc_info[1]
                reason += ": %s: %s" % (type(exc).__name__,
                                        " ".join(str(exc).split()))
            _GpuLog.reason = reason


def _check_gpu_active(theano_module):
    """After ``import theano``: stop unless the GPU back-end came up whole."""
    gpuarray = sys.modules.get("theano.gpuarray")
    # init_dev sets pygpu_activated before use() finishes: an error logged
    # after it still leaves Theano on the CPU
    if gpuarray is None or not gpuarray.pygpu_activated or _GpuLog.reason:
        _fail("Theano did not start it (%s)"
              % (_GpuLog.reason or "theano.gpuarray was not initialised"))


# pocl's kernel cache breaks when processes build into it at once (pocl
# issue 1480: builds fail at random, "Could not initialize elemwise support"
# here).  Each OpenCL process takes the first free numbered cache of its own,
# held with a lock for its life: processes one after the other share slot 0
# (a warm cache), processes side by side (test workers, two runs at once)
# never share one.
POCL_CACHE_ROOT = os.path.join(os.path.expanduser("~"), ".cache", "nmt-pocl")
_POCL_MARK = "NMT_POCL_SLOT"
_pocl_slot_lock = None


def pocl_cache_slot(root=POCL_CACHE_ROOT):
    """Lock and return the first free cache folder root/slot-N."""
    import fcntl
    global _pocl_slot_lock
    os.makedirs(root, exist_ok=True)
    for n in range(1024):
        lock = open(os.path.join(root, "slot-%d.lock" % n), "w")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            lock.close()
            continue
        _pocl_slot_lock = lock     # held until the process ends
        return os.path.join(root, "slot-%d" % n)
    raise OSError("%s: no free pocl cache slot" % root)


def _take_pocl_cache_slot():
    """POCL_CACHE_DIR: the user's, or a slot of our own (a slot set by the
    process that started this one is its, not ours)."""
    ours = os.environ.get(_POCL_MARK)
    if os.environ.get("POCL_CACHE_DIR", ours) == ours:
        os.environ["POCL_CACHE_DIR"] = os.environ[_POCL_MARK] = pocl_cache_slot()


def _prepare_gpu():
    _ensure_library_path()     # may start this process again: slots after it
    if gpu_kind() == "opencl":
        _take_pocl_cache_slot()
    logging.getLogger("theano.gpuarray").addHandler(_GpuLog())
    theano_repairs.call_after_import("theano", _check_gpu_active)


if "theano" not in sys.modules:
    allocator.keep_freed_memory()
    choose_openblas_core()
    configure()
    theano_repairs.install()
    if gpu_requested():
        _prepare_gpu()
