"""Theano's C modules compiled sooner: several at a time, their common headers
parsed once.

When Theano makes a function it links each node to a compiled C module,
compiling the ones its cache lacks one after the other, each g++ run
parsing Python's and NumPy's headers anew: at the Multi30k size a first
run compiled about 260 modules, one second each on a 2-core EPYC, half of it
in those headers.  Two changes, both leaving the compiled code as it was
(registered in theano_repairs.py, where ``compiler_hook`` routes Theano's
choice of a module's folder through ``module_location`` and its g++ run
through ``run_compiler``, and ``compile_ahead`` wraps the linker):

* Compiling ahead: when the linking of a function meets its first module
  that the cache lacks, the modules of all its nodes that the cache lacks are
  handed to a pool of g++ processes (``NMT_COMPILE_JOBS``, default: the
  cores this process may use; 1 compiles one at a time, as Theano does).
  Each is compiled in a folder of the compile cache as Theano makes one;
  Theano then links node after node as before, given that folder for the
  module, and where it would run g++ finds the library made by the same
  command: byte for byte the library Theano would have compiled there.
* A precompiled prefix: every module Theano writes begins with the same six
  #include lines (PREFIX).  They are compiled once per set of compiler
  options into a GCC precompiled header in the compile folder, and g++ reads
  it first (``-include``), so the module's own includes of those headers
  find them included already.  GCC's precompiled header is the textual
  inclusion of its header, parsed ahead: the same code.  Where GCC cannot
  use it (other options) it reads the header's text instead.
"""
import hashlib
import os
import shutil
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor

JOBS_VARIABLE = "NMT_COMPILE_JOBS"

# the first lines of every module that Theano's CLinker writes
PREFIX = ('#include <Python.h>\n#include <iostream>\n#include "theano_mod_helper.h"\n'
          '#include <math.h>\n#include <numpy/arrayobject.h>\n#include <numpy/arrayscalars.h>\n')

_state = threading.local()      # .linking: the stack of linkings; .ahead: in a pool job
_lock = threading.Lock()
_ahead = {}                     # (module name, source digest) -> Future
_compiled_ahead = {}            # library path -> the options it was compiled with
_pool = []                      # the one ThreadPoolExecutor, made at first use
_prefix_built = {}              # options digest -> header path (None: cannot be built)

stats = {"compiled": 0, "compiled_ahead": 0, "taken": 0, "precompiled_prefix": 0}


def compile_jobs():
    """How many g++ processes compile ahead at once (NMT_COMPILE_JOBS)."""
    value = os.environ.get(JOBS_VARIABLE)
    if value is None:
        return len(os.sched_getaffinity(0))
    if not value.isdigit() or int(value) < 1:
        raise ValueError("%s=%r: give a number of g++ processes, 1 or more"
                         % (JOBS_VARIABLE, value))
    return int(value)


# --------------------------------------------------------------------------
# The compiler run (compile_str's g++, through the compiler_hook repair)

def module_location(dirname, linker):
    """The folder in which Theano compiles a module the cache lacks: the
    folder it was compiled ahead in, if it was (the first module a linking
    lacks starts the compiles ahead), else a new one, as Theano makes it."""
    from theano.link.c.cmodule import dlimport_workdir
    if getattr(linker, "get_dynamic_module", None) is not None:
        module = linker.get_dynamic_module()
        key = (module.code_hash, _digest(module.code()))
        future = _take(key)
        if future is None and _start_compiling_ahead(dirname):
            future = _take(key)
        done = future.result() if future is not None else None
        if done is not None:
            options, location = done
            _compiled_ahead[_library(location, module.code_hash)] = options
            return location
    return dlimport_workdir(dirname)


def run_compiler(cmd, src_code, lib_filename):
    """Compile as compile_str would (cmd writes lib_filename from its
    mod.cpp): (stdout, stderr, status); nothing to do for a library that was
    compiled ahead by the same command."""
    from theano.utils import output_subprocess_Popen
    ahead = getattr(_state, "ahead", False)
    if ahead:
        _state.options = _options(cmd, lib_filename)
    elif _compiled_ahead.pop(lib_filename, None) == _options(cmd, lib_filename):
        stats["taken"] += 1
        return b"", b"", 0
    with _lock:
        stats["compiled_ahead" if ahead else "compiled"] += 1
    return output_subprocess_Popen(with_precompiled_prefix(cmd, src_code, lib_filename))


def _digest(text):
    return hashlib.sha256(text.encode()).hexdigest()


def _library(location, module_name):
    from theano.link.c.cmodule import get_lib_extension
    return os.path.join(location, "%s.%s" % (module_name, get_lib_extension()))


def _options(cmd, lib_filename):
    """The command without the paths of its library and source (which name
    the folder it compiles in)."""
    source = os.path.join(os.path.dirname(lib_filename), "mod.cpp")
    return tuple(a for a in cmd if a not in (lib_filename, source))


def _take(key):
    with _lock:
        return _ahead.pop(key, None)


# --------------------------------------------------------------------------
# The precompiled prefix

def with_precompiled_prefix(cmd, src_code, lib_filename):
    """cmd reading the precompiled PREFIX first, when the source begins with
    it and the header can be built for cmd's options."""
    if not src_code.startswith(PREFIX):
        return cmd
    header = _prefix_header(_options(cmd, lib_filename))
    if header is None:
        return cmd
    with _lock:
        stats["precompiled_prefix"] += 1
    return [cmd[0], "-include", header] + list(cmd[1:])


def _prefix_header(options):
    """The path of PREFIX as a header precompiled with these compiler options
    (built once per options, in the compile folder), or None."""
    header_options = [a for a in options[1:]      # the compiler's, not the linker's
                      if a not in ("-shared", "-o") and not a.startswith(("-l", "-L", "-Wl,"))]
    digest = hashlib.sha256("\0".join([options[0]] + header_options).encode()).hexdigest()[:16]
    with _lock:
        if digest in _prefix_built:
            return _prefix_built[digest]
        _prefix_built[digest] = header = _build_prefix(options[0], header_options, digest)
    return header


def _build_prefix(compiler, header_options, digest):
    from theano import config
    from theano.utils import output_subprocess_Popen
    folder = os.path.join(config.compiledir, "precompiled_prefix", digest)
    header = os.path.join(folder, "prefix.h")
    if os.path.exists(header + ".gch"):
        return header
    os.makedirs(folder, exist_ok=True)
    scratch = tempfile.mkdtemp(prefix="building-", dir=folder)
    try:
        with open(os.path.join(scratch, "prefix.h"), "w") as f:
            f.write(PREFIX)
        out, err, status = output_subprocess_Popen(
            [compiler] + header_options
            + ["-x", "c++-header", os.path.join(scratch, "prefix.h"),
               "-o", os.path.join(scratch, "prefix.h.gch")])
        if status != 0:
            return None
        # the header first: a reader that finds the .gch finds its header
        os.replace(os.path.join(scratch, "prefix.h"), header)
        os.replace(os.path.join(scratch, "prefix.h.gch"), header + ".gch")
        return header
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


# --------------------------------------------------------------------------
# Compiling ahead (the compile_ahead repair wraps VMLinker.make_all)

class _Linking(object):
    """One function's linking: its nodes and the modules compiled ahead."""

    def __init__(self, linker):
        self.linker, self.started, self.keys = linker, False, []


def linking_compiles_ahead(make_all):
    """VMLinker.make_all within a _Linking: its first missing module starts
    the compiles ahead; at its end the unused ones are waited for and removed."""
    def make_all_compiling_ahead(self, *args, **kwargs):
        stack = _state.__dict__.setdefault("linking", [])
        stack.append(_Linking(self))
        try:
            return make_all(self, *args, **kwargs)
        finally:
            _finish(stack.pop())
    make_all_compiling_ahead.__wrapped__ = make_all
    return make_all_compiling_ahead


def _start_compiling_ahead(dirname):
    """Hand the missing modules of the current linking to the pool (once per
    linking), each to be compiled in a new folder of dirname; False if there
    is nothing to start."""
    stack = getattr(_state, "linking", None)
    if not stack or stack[-1].started or compile_jobs() < 2:
        return False
    linking = stack[-1]
    linking.started = True
    jobs = _missing_modules(linking.linker)
    pool = _thread_pool()
    with _lock:
        for key, job in jobs.items():
            if key not in _ahead:
                _ahead[key] = pool.submit(_compile, job, dirname)
                linking.keys.append(key)
    return bool(jobs)


def _missing_modules(linker):
    """{(module name, source digest): compile_str's arguments} of the modules
    that the linker's C nodes need and the cache lacks."""
    from theano.graph.fg import FunctionGraph
    from theano.graph.op import COp
    from theano.link.c.basic import CLinker, get_module_cache
    from theano.link.c.cmodule import get_module_hash
    if getattr(linker, "c_thunks", None) is False:
        return {}
    cache, jobs = get_module_cache(), {}
    for node in linker.schedule(linker.fgraph):
        if not isinstance(node.op, COp) or type(node.op).make_thunk is not COp.make_thunk:
            continue
        try:
            clinker = CLinker().accept(FunctionGraph(node.inputs, node.outputs))
            key = clinker.cmodule_key()
            if key is None or key in cache.entry_from_key:
                continue
            module = clinker.get_dynamic_module()
            src_code = module.code()
            if get_module_hash(src_code, key) in cache.module_hash_to_key_data:
                continue
            jobs[module.code_hash, _digest(src_code)] = dict(
                compiler=clinker.c_compiler(), module_name=module.code_hash,
                src_code=src_code, include_dirs=clinker.header_dirs(),
                lib_dirs=clinker.lib_dirs(), libs=clinker.libraries(),
                preargs=clinker.compile_args())
        except Exception:     # no C code, or none yet: linking will say
            continue
    return jobs


def _compile(job, dirname):
    """A pool job: (options, folder) of the module compiled in a new folder of
    the compile cache, or None if it did not compile (linking compiles it
    again and reports the error)."""
    from theano.link.c.cmodule import dlimport_workdir
    _state.ahead = True
    location = dlimport_workdir(dirname)
    try:
        job = dict(job)
        job.pop("compiler").compile_str(location=location, py_module=False, **job)
        return _state.options, location
    except Exception:
        shutil.rmtree(location, ignore_errors=True)
        return None


def _thread_pool():
    with _lock:
        if not _pool:
            _pool.append(ThreadPoolExecutor(compile_jobs(), thread_name_prefix="g++"))
        return _pool[0]


def _forget_in_child():
    """A forked child (translate.py's workers, say) has none of the parent's
    threads: it makes its own pool and lock, and has nothing compiling."""
    global _lock
    _lock = threading.Lock()
    del _pool[:]
    _ahead.clear()
    _compiled_ahead.clear()


os.register_at_fork(after_in_child=_forget_in_child)


def _finish(linking):
    """Remove the modules compiled ahead for this linking and not taken
    (waiting for those still compiling): folders without a key, which the
    cache would never use."""
    for key in linking.keys:
        future = _take(key)
        done = future.result() if future is not None else None
        if done is not None:
            shutil.rmtree(done[1], ignore_errors=True)
