"""Every repair this project makes to theano-pymc 1.1.2, in one place.

theano-pymc 1.1.2 half-converted its GPU back-end (``theano.gpuarray``) to
the interfaces of its 1.1 series, and some of its code predates Python 3.11.
Each repair below is named, says what it fixes and why, and is applied the
same way on every machine: ``install()`` (called by theano_env, which every
entry point imports before Theano) registers an import hook, and each repair
acts when Theano imports the module it repairs.  The installed files are
never changed.  Three kinds:

* ``SourceEdit``: exact texts replaced in the module's source before the
  module runs.  Each edit must find every one of its texts in the source as
  Theano installed it, as many times as it says, before it replaces any;
  otherwise ``import theano`` stops with ``RepairError``, naming the repair
  and the file: a different Theano is never repaired on assumptions.  There
  is no "already repaired" case: a file changed in place (by hand, or by
  this project's releases before the repairs, whose gpu/theano_gpu_fix.py
  edited the installed files) stops the import the same way, and the error
  says how to reinstall the package.  The module runs from the edited
  source, which its loader serves to tracebacks, pdb and ``inspect``: they
  show the lines that run.
* ``CFileEdit``: exact texts replaced, as a ``SourceEdit`` does, in one of
  Theano's C files as Theano reads it to compile it (the readers call
  ``edited_c_file``; repairs ``c_file_reader_*``).
* ``AfterImport``: a function applied to the module once it has run.
* ``Absent``: a module whose import must fail with ImportError.

``NMT_THEANO_REPAIRS_OFF=name,name`` leaves the named repairs out; only the
tests use it, to show that each repair is needed (tests/test_theano_repairs.py).
"""
import hashlib
import importlib.abc
import importlib.util
import linecache
import os
import re
import sys
from collections import OrderedDict

from theano_platform import module_compiles

OFF_VARIABLE = "NMT_THEANO_REPAIRS_OFF"


class RepairError(ImportError):
    """A repair does not fit the installed Theano."""


class Repair(object):
    """A named change to one module of Theano; ``why`` says what it fixes.
    ``changes_compiled_code``: it changes C code that Theano compiles."""

    def __init__(self, name, module, why, changes_compiled_code=False):
        self.name, self.module, self.why = name, module, why
        self.changes_compiled_code = changes_compiled_code


class SourceEdit(Repair):
    """Replace texts in a module's source: each ``(old, new)`` or
    ``(old, new, count)``, ``old`` found exactly ``count`` times (default 1)."""

    def __init__(self, name, module, why, *replacements, changes_compiled_code=False):
        Repair.__init__(self, name, module, why, changes_compiled_code)
        self.replacements = [r if len(r) == 3 else r + (1,) for r in replacements]

    def edit(self, source, path):
        """The source with every replacement made; each text is counted in
        the source as given, before any replacement."""
        for number, (old, new, count) in enumerate(self.replacements, 1):
            found = source.count(old)
            if found != count:
                raise RepairError(
                    "theano_repairs: repair %r expects its text %d of %d %d time(s) in %s, "
                    "found %d: this is not theano-pymc 1.1.2 as the project knows it (a "
                    "copy changed in place? reinstall it: pip install --force-reinstall "
                    "--no-deps theano-pymc==1.1.2)"
                    % (self.name, number, len(self.replacements), count, path, found))
        for old, new, count in self.replacements:
            source = source.replace(old, new)
        return source


class CFileEdit(SourceEdit):
    """Replace texts in Theano's C file ``c_file`` (a path below the theano
    package) as Theano reads it: each ``(old, new)`` or ``(old, new, count)``."""

    def __init__(self, name, c_file, why, *replacements):
        SourceEdit.__init__(self, name, "theano/" + c_file, why, *replacements,
                            changes_compiled_code=True)
        self.c_file = c_file


def edited_c_file(path, source):
    """The text of Theano's C file at ``path``, ``source`` as read, with the
    active CFileEdits of that file made (Theano's readers call this)."""
    for repair in active():
        if isinstance(repair, CFileEdit) and \
                path.replace(os.sep, "/").endswith("/" + repair.module):
            source = repair.edit(source, path)
    return source


class AfterImport(Repair):
    """Call ``apply(module)`` once the module has run."""

    def __init__(self, name, module, why, apply, changes_compiled_code=False):
        Repair.__init__(self, name, module, why, changes_compiled_code)
        self.apply = apply


class Absent(Repair):
    """Make ``import module`` raise ImportError (a None entry in sys.modules)."""


# --------------------------------------------------------------------------
# The repairs

def _hide_c_with_defaults(interface):
    """HideC's hidden hooks return CLinkerOp's defaults; c_code still raises."""
    base = interface.CLinkerOp
    for hook in HIDDEN_HOOKS:
        setattr(interface.HideC, hook, getattr(base, hook))


def _exact_integer_max_min(scalar_basic):
    """ScalarMaximum/ScalarMinimum on integers: the plain comparison."""
    for cls, compare in ((scalar_basic.ScalarMaximum, ">"), (scalar_basic.ScalarMinimum, "<")):
        _wrap_c_code(cls, compare, scalar_basic.discrete_types)


def _wrap_c_code(cls, compare, discrete_types):
    float_c_code = cls.c_code

    def c_code(self, node, name, inputs, outputs, sub):
        if node.outputs[0].type not in discrete_types:
            return float_c_code(self, node, name, inputs, outputs, sub)
        (x, y), (z,) = inputs, outputs
        return "%s = ((%s) %s (%s)) ? (%s) : (%s);" % (z, y, compare, x, y, x)
    cls.c_code = c_code


def _switch_on_floats(scalar_basic):
    """Switch on a float condition compares it with zero."""
    c_code = scalar_basic.Switch.c_code

    def switch_c_code(self, node, name, inputs, outputs, sub):
        if node.inputs[0].type.dtype.startswith("float"):
            inputs = ["(%s != 0)" % inputs[0]] + list(inputs[1:])
        return c_code(self, node, name, inputs, outputs, sub)
    scalar_basic.Switch.c_code = switch_c_code


# C support code of every GpuElemwise module: the nodes of one op (one
# module) share one GpuElemwise object, and its kernels, per GPU context
SHARED_ELEMWISE = r"""
static struct { gpucontext *ctx; GpuElemwise *ge; int users; } shared_ge[16];

static GpuElemwise *shared_ge_take(gpucontext *ctx) {
    for (int i = 0; i < 16; i++)
        if (shared_ge[i].ge != NULL && shared_ge[i].ctx == ctx) {
            shared_ge[i].users++;
            return shared_ge[i].ge;
        }
    return NULL;
}

static void shared_ge_keep(gpucontext *ctx, GpuElemwise *ge) {
    for (int i = 0; i < 16; i++)
        if (shared_ge[i].ge == NULL) {
            shared_ge[i].ctx = ctx;
            shared_ge[i].ge = ge;
            shared_ge[i].users = 1;
            return;
        }   /* table full: the node keeps its own, freed by its cleanup */
}

static void shared_ge_release(GpuElemwise *ge) {
    for (int i = 0; i < 16; i++)
        if (shared_ge[i].ge != NULL && shared_ge[i].ge == ge) {
            if (--shared_ge[i].users == 0) {
                GpuElemwise_free(ge);
                shared_ge[i].ge = NULL;
            }
            return;
        }
    GpuElemwise_free(ge);
}
"""


def _shared_elemwise_kernels(elemwise):
    """GpuElemwise's nodes take their GpuElemwise from the module's table."""
    op = elemwise.GpuElemwise
    init, cleanup = op.c_init_code_struct, op.c_cleanup_code_struct

    def c_init_code_struct(self, node, name, sub):
        ctx = "%s->ctx" % sub["params"]
        return ("ge = shared_ge_take(%s);\nif (ge == NULL) {\n%s\nshared_ge_keep(%s, ge);\n}\n"
                % (ctx, init(self, node, name, sub), ctx))

    def c_cleanup_code_struct(self, node, name):
        return cleanup(self, node, name).replace("GpuElemwise_free(ge)",
                                                 "shared_ge_release(ge)")
    op.c_init_code_struct = c_init_code_struct
    op.c_cleanup_code_struct = c_cleanup_code_struct
    op.c_support_code = lambda self, **kwargs: SHARED_ELEMWISE


def _lazy_reduction_kernels(elemwise):
    """GpuCAReduceCPY makes its Python kernel when its Python code first
    runs (get_kernel_cache), not when its node is prepared."""
    elemwise.GpuCAReduceCPY.prepare_node = \
        lambda self, node, storage_map, compute_map, impl: None


# C99's float names of the math functions, which OpenCL C spells without
# the suffix (its functions are overloaded on the argument type)
C99_FLOAT_MATH = re.compile(
    r"\b(acos|acosh|asin|asinh|atan|atan2|atanh|cbrt|ceil|copysign|cos|cosh|erf|erfc|"
    r"exp|exp2|expm1|fabs|fdim|floor|fma|fmax|fmin|fmod|hypot|lgamma|log|log10|log1p|"
    r"log2|logb|nextafter|pow|remainder|rint|round|sin|sinh|sqrt|tan|tanh|tgamma|"
    r"trunc)f\(")


def opencl_c(code):
    """C code of a scalar op in OpenCL C's terms: NAN for nan(""), the
    overloaded math functions for C99's float ones (floorf, fmodf, ...)."""
    return C99_FLOAT_MATH.sub(r"\1(", code.replace('nan("")', "NAN"))


def _opencl_kernel_code(elemwise):
    """GpuElemwise's kernel code for an OpenCL device in OpenCL C's terms."""
    generate = elemwise.GpuElemwise._generate_op_string

    def generate_op_string(self, node):
        support_code, kop = generate(self, node)
        if node.inputs[0].type.context.kind == b"opencl":
            kop = opencl_c(kop)
        return support_code, kop
    elemwise.GpuElemwise._generate_op_string = generate_op_string


def _stable_context_type_name(gpuarray_type):
    """GpuContextType's text is its class name, the same in every process
    (ParamsType names its C struct from its types' texts)."""
    gpuarray_type.GpuContextType.__str__ = lambda self: "GpuContextType"


def _whole_key_files(cmodule):
    """KeyData.save_pkl writes a partial file beside key.pkl, then renames it
    over key.pkl (one step on POSIX): a reader sees the old file or the new."""
    pickle = cmodule.pickle

    def save_pkl(self):
        partial = "%s.partial-%d" % (self.key_pkl, os.getpid())
        try:
            with open(partial, "wb") as f:
                pickle.dump(self, f, protocol=pickle.HIGHEST_PROTOCOL)
            os.replace(partial, self.key_pkl)
        except BaseException as error:
            if os.path.exists(partial):
                os.remove(partial)
            if isinstance(error, pickle.PicklingError):
                cmodule._logger.warning(f"Cache leak due to unpickle-able key data {self.keys}")
            raise
    cmodule.KeyData.save_pkl = save_pkl


# HideC's hooks other than c_code, whose MethodNotDefined makes an op run
# its Python code
HIDDEN_HOOKS = ("c_code_cleanup", "c_headers", "c_header_dirs", "c_libraries",
                "c_lib_dirs", "c_support_code", "c_support_code_apply",
                "c_compile_args", "c_no_compile_args", "c_init_code",
                "c_init_code_apply", "c_init_code_struct", "c_support_code_struct",
                "c_cleanup_code_struct")


# the first lines of a lifter whose op has CUDA code only: no lift elsewhere
CUDA_ONLY = ("    from theano.gpuarray.type import get_context\n"
             "    if get_context(%s).kind != b\"cuda\":\n"
             "        return None\n")


def _lifters_take_fgraph(module, lifters, cuda_only=()):
    """The lifters of one module take the function graph first; those named
    in cuda_only lift only onto CUDA devices."""
    name = module.rsplit(".", 1)[1]
    why = ("theano-pymc 1.1 calls every GPU lifter with the function graph "
           "first (see op_lifter_fgraph); these lifters of %s kept the old "
           "signature, fail with a TypeError that Theano only logs, and their "
           "nodes stay on the CPU: %s." % (name, ", ".join(l for l, _ in lifters)))
    if cuda_only:
        why += (" %s lift(s) an op that has CUDA code only, and GraphToGPU "
                "ignores op_lifter's cuda_only: on another device the node would "
                "reach the GPU without code ('No Python implementation'), so it "
                "stays on the CPU there." % ", ".join(cuda_only))
    return SourceEdit(
        "lifters_take_fgraph_" + name, module, why,
        *[("def %s(op, %s, inputs, outputs):\n" % (l, ctx),
           "def %s(fgraph, op, %s, inputs, outputs):\n" % (l, ctx)
           + (CUDA_ONLY % ctx if l in cuda_only else "")) for l, ctx in lifters])


# where a GPU array's data lies, as scan's Python loop compares it before and
# after a step (scan_gpu_region): pygpu gives CUDA's pointer (offset
# included) only on CUDA, an OpenCL buffer and an offset only on OpenCL
_GPU_ADDRESS = ("(%(a)s.gpudata if %(a)s.context.kind == b'cuda' "
                "else (%(a)s.base_data, %(a)s.offset))")


# module_compiles as the source edits of Theano's compile cache call it
_MODULE_COMPILES = '__import__("theano_platform.module_compiles", fromlist=["run_compiler"])'
# inplace_increment of AdvancedIncSubtensor1's C code (numpy2_inplace_increment)
# on NumPy 2: inc cast to a's type, then a[index] = inc, or numpy.add.at
NUMPY2_INPLACE_INCREMENT = r"""
static int
inplace_increment(PyArrayObject *a, PyObject *index, PyArrayObject *inc,
                  int inc_or_set)
{
    static PyObject *add_at = NULL;   /* numpy.add.at */
    PyObject *cast, *done;
    PyArray_Descr *descr;
    if (PyArray_FailUnlessWriteable(a, "input/output array") < 0) {
        return -1;
    }
    if (PyArray_NDIM(a) == 0) {
        PyErr_SetString(PyExc_IndexError, "0-d arrays can't be indexed.");
        return -1;
    }
    if (add_at == NULL) {
        PyObject *numpy = PyImport_ImportModule("numpy"), *add;
        if (numpy == NULL) {
            return -1;
        }
        add = PyObject_GetAttrString(numpy, "add");
        Py_DECREF(numpy);
        if (add == NULL) {
            return -1;
        }
        add_at = PyObject_GetAttrString(add, "at");
        Py_DECREF(add);
        if (add_at == NULL) {
            return -1;
        }
    }
    descr = PyArray_DESCR(a);
    Py_INCREF(descr);
    cast = PyArray_FromAny((PyObject *)inc, descr, 0, 0, NPY_ARRAY_FORCECAST, NULL);
    if (cast == NULL) {
        return -1;
    }
    if (inc_or_set) {
        done = PyObject_CallFunctionObjArgs(add_at, (PyObject *)a, index, cast, NULL);
        Py_XDECREF(done);
    } else {
        done = PyObject_SetItem((PyObject *)a, index, cast) == 0 ? Py_None : NULL;
    }
    Py_DECREF(cast);
    return done == NULL ? -1 : 0;
}
"""


# this module, as Theano's readers of its C files call it (c_file_reader_*)
_THIS_MODULE = '__import__("theano_platform.theano_repairs", fromlist=["edited_c_file"])'

# NumPy 2's PyArray_Descr has no elsize: the item size of the array instead
# (PyArray_ITEMSIZE, the same number in NumPy 1 and 2)
_ELSIZE = "PyArray_DESCR(%s)->elsize"
_ITEMSIZE = "PyArray_ITEMSIZE(%s)"


def _numpy2_itemsize(module, name, arrays, counts=None):
    """numpy2_itemsize_NAME: every PyArray_DESCR(a)->elsize of the C code in
    ``module`` for the arrays ``arrays`` (texts) becomes PyArray_ITEMSIZE(a)."""
    counts = counts or {}
    return SourceEdit(
        "numpy2_itemsize_" + name, module,
        "NumPy 2 took elsize (and the other size fields) out of the public "
        "PyArray_Descr: the C code of %s reads PyArray_DESCR(x)->elsize and "
        "does not compile ('has no member named elsize').  It reads "
        "PyArray_ITEMSIZE(x), the same number on NumPy 1 and 2." % module,
        *[(_ELSIZE % a, _ITEMSIZE % a, counts.get(a, 1)) for a in arrays],
        changes_compiled_code=True)


REPAIRS = [
    _numpy2_itemsize("theano.tensor.blas", "blas", ["%(_x)s"], {"%(_x)s": 2}),
    _numpy2_itemsize("theano.sandbox.rng_mrg", "rng_mrg",
                     ["%(_A)s", "%(_s)s", "%(_z)s", "%(_A2)s", "%(_s2)s"], {"%(_z)s": 2}),
    CFileEdit(
        "numpy2_itemsize_dimshuffle", "tensor/c_code/dimshuffle.c",
        "DimShuffle's C file reads PyArray_DESCR(x)->elsize, which NumPy 2 "
        "took out of the public PyArray_Descr (see numpy2_itemsize_blas).",
        (_ELSIZE % "basename", _ITEMSIZE % "basename")),
    CFileEdit(
        "numpy2_lazylinker", "link/c/c_code/lazylinker_c.c",
        "The C virtual machine (lazylinker_ext, which runs every compiled "
        "function) took NPY_PY3K and the PyInt_* names of Python 2 from "
        "numpy/npy_3kcompat.h, which NumPy 2 no longer defines: it does "
        "not compile (and builds Python 2's module when it would).  They "
        "are defined after that header as NumPy 1 defined them.",
        ('#include "numpy/npy_3kcompat.h"\n',
         '#include "numpy/npy_3kcompat.h"\n'
         '#ifndef NPY_PY3K  /* theano_repairs: numpy2_lazylinker */\n'
         '#define NPY_PY3K 1\n#endif\n'
         '#ifndef PyInt_Check\n#define PyInt_Check PyLong_Check\n#endif\n'
         '#ifndef PyInt_AsLong\n#define PyInt_AsLong PyLong_AsLong\n#endif\n'
         '#ifndef PyInt_FromLong\n#define PyInt_FromLong PyLong_FromLong\n#endif\n')),
    SourceEdit(
        "c_file_reader_lazylinker", "theano.link.c.lazylinker_c",
        "The C virtual machine's source is read through edited_c_file, "
        "which makes the CFileEdits of it (numpy2_lazylinker).",
        ("code = open(cfile).read()",
         "code = " + _THIS_MODULE + ".edited_c_file(cfile, open(cfile).read())"),
        changes_compiled_code=True),
    SourceEdit(
        "c_file_reader_external_ops", "theano.graph.op",
        "The C files of the ops that read their code from files (ExternalCOp: "
        "DimShuffle, ...) are read through edited_c_file, which makes the "
        "CFileEdits of them (numpy2_itemsize_dimshuffle).",
        ("self.func_codes.append(f.read())",
         "self.func_codes.append(" + _THIS_MODULE + ".edited_c_file(func_file, f.read()))"),
        changes_compiled_code=True),
    SourceEdit(
        "no_mpi_at_import", "theano.tensor.io",
        "theano.tensor.io imports mpi4py.MPI when mpi4py is installed (the "
        "setup installs it for distributed.py), and that import starts MPI: "
        "every process that imports Theano becomes an MPI singleton (Open "
        "MPI puts OMPI_*/PMIX_* variables in its environment).  An mpirun "
        "started from such a process, or from a child that inherited them "
        "(speed/benchmark.py train --workers, tests under pytest-xdist), "
        "takes them for its own and exits with status 1, printing nothing.  "
        "Theano's MPI ops (MPIRecv, MPISend) are left off; distributed.py "
        "imports mpi4py itself, only under an MPI launcher.",
        ("try:\n    from mpi4py import MPI\nexcept ImportError:\n    mpi_enabled = False\n"
         "else:\n    comm = MPI.COMM_WORLD\n    mpi_enabled = True\n",
         "mpi_enabled = False  # theano_repairs: no_mpi_at_import\n")),
    SourceEdit(
        "no_numpy_distutils", "theano.link.c.cmodule",
        "theano.link.c.cmodule imports numpy.distutils, which numpy 1.26 no "
        "longer ships for Python 3.12 (nor numpy 2 at all), only to ask it "
        "for NumPy's C headers: import theano fails.  It asks numpy itself "
        "(numpy.get_include(), the one folder numpy.distutils gave).  The "
        "BLAS look-up through numpy.distutils is never reached: theano_env "
        "sets blas__ldflags.",
        ("\nimport numpy.distutils\n", "\nimport numpy\n"),
        ("numpy.distutils.misc_util.get_numpy_include_dirs()", "[numpy.get_include()]")),
    SourceEdit(
        "elemwise_openmp_pragma", "theano.tensor.elemwise",
        "With openmp=True an Elemwise over contiguous arrays does not compile: "
        "its OpenMP pragma is written as a plain string holding a Python "
        "f-string's field ({int(config.openmp_elemwise_minsize)}), which g++ "
        "reads as C.  The string is made the f-string it was meant to be, so "
        "the loop runs on OpenMP's threads from openmp_elemwise_minsize "
        "values on (theano_env sets both flags).",
        ('contig += """#pragma omp parallel for if(n>={int(config.openmp_elemwise_minsize)})',
         'contig += f"""#pragma omp parallel for if(n>={int(config.openmp_elemwise_minsize)})'),
        changes_compiled_code=True),
    SourceEdit(
        "no_numpy_distutils_blas", "theano.tensor.blas",
        "theano.tensor.blas imports numpy.distutils too, and uses nothing "
        "from it (see no_numpy_distutils).",
        ("import numpy.distutils\n\n\ntry:\n    import numpy.distutils.__config__  # noqa\n"
         "except ImportError:\n    pass\n", "")),
    SourceEdit(
        "numpy_aliases_scalar", "theano.scalar.basic",
        "numpy 1.24 removed numpy.bool and numpy.complex, aliases of Python's "
        "bool and complex (numpy 2 brought numpy.bool back as numpy.bool_), "
        "and Python 3.12 needs numpy 1.26.  Cast takes its Python constructor "
        "from numpy by the dtype's name, numpy.bool for 'bool': without it "
        "import theano fails at convert_to_bool.  'bool' takes Python's bool, "
        "as numpy 1.23's alias gave; the complex ops' Python code takes "
        "Python's complex (the module's own name complex is Theano's op).",
        ("self.ctor = getattr(np, o_type.dtype)",
         "self.ctor = bool if o_type.dtype == \"bool\" else getattr(np, o_type.dtype)"),
        ("isinstance(x, np.complex) or isinstance(y, np.complex)",
         "isinstance(x, __import__(\"builtins\").complex) or "
         "isinstance(y, __import__(\"builtins\").complex)"),
        ("return np.complex(x, y)", "return __import__(\"builtins\").complex(x, y)"),
        ("(np.complex(x, y))", "(__import__(\"builtins\").complex(x, y))", 2)),
    SourceEdit(
        "numpy_aliases_tensor", "theano.tensor.basic",
        "get_scalar_constant_value tells a number by numpy.complex(data), "
        "removed in numpy 1.24 (see numpy_aliases_scalar): every constant then "
        "counts as not a number, so an Alloc of a constant 1 is not "
        "broadcastable, an optimiser's replacement has another type "
        "(BadOptimization, logged), shape checks fail at run time ('Theano "
        "Assert failed!' in the sampler's f_next) and constants are not "
        "folded.  It takes Python's complex, as numpy 1.23's alias gave (the "
        "module's own name complex is Theano's op).",
        ("np.complex(data)  # works", "builtins.complex(data)  # works")),
    SourceEdit(
        "numpy_aliases_random", "theano.tensor.random.basic",
        "theano.tensor.random.basic names numpy.int (removed in numpy 1.24, "
        "see numpy_aliases_scalar) when it is imported: the import fails.  "
        "It takes Python's int, as numpy 1.23's alias gave.",
        ("otypes=[np.int]", "otypes=[int]")),
    SourceEdit(
        "numpy2_removed_scalar", "theano.scalar.basic",
        "NumPy 2 removed numpy.product and numpy.cast.  Mul's Python code "
        "(constant folding of a product of three or more terms, a scalar "
        "graph's Python code) calls numpy.product, and the gradients of "
        "exp2 and the inverse trigonometric and hyperbolic functions build "
        "their constant with numpy.cast: each fails with AttributeError.  "
        "They take numpy.prod and numpy.asarray with the type's dtype, "
        "which give the same numbers on NumPy 1.",
        ("return np.product(inputs)", "return np.prod(inputs)"),
        ("np.cast[x.type](1)", "np.asarray(1, dtype=x.type.dtype)", 6),
        ("np.cast[x.type](2)", "np.asarray(2, dtype=x.type.dtype)")),
    SourceEdit(
        "numpy2_removed_elemwise", "theano.tensor.elemwise",
        "NumPy 2 removed numpy.sctype2char, which an element-wise op's "
        "Python code calls to name the float type of a NumPy function of "
        "integers (constant folding of an integer division, ...): it fails "
        "with AttributeError.  It takes numpy.dtype(...).char, the same "
        "character.",
        ("char = np.sctype2char(out_dtype)", "char = np.dtype(out_dtype).char")),
    SourceEdit(
        "numpy2_inplace_increment", "theano.tensor.inc_code",
        "NumPy 2 removed the MapIter C API (PyArrayMapIterObject, "
        "PyArray_MapIterArray, ...), on which the C code of "
        "AdvancedIncSubtensor1 (a[idx] += b, a[idx] = b: the gradient of every "
        "embedding lookup) increments: it does not compile.  On NumPy 2 it "
        "casts b to a's type, as before, then calls numpy.add.at (which adds "
        "in the order of the indices, as the MapIter loop did) or sets "
        "a[idx] = b; on NumPy 1 the code is the same as before.",
        ('        """\n        typedef void (*inplace_map_binop)',
         '        """\n#if NPY_ABI_VERSION < 0x02000000  /* theano_repairs: numpy2_inplace_increment */\n'
         '        typedef void (*inplace_map_binop)'),
        ("fail:\n    Py_XDECREF(mit);\n\n    return -1;\n}\n\"\"\"",
         "fail:\n    Py_XDECREF(mit);\n\n    return -1;\n}\n#else\n" + NUMPY2_INPLACE_INCREMENT
         + "#endif\n\"\"\""),
        changes_compiled_code=True),
    SourceEdit(
        "numpy2_mrg_mask", "theano.sandbox.rng_mrg",
        "NumPy 2 types an operation between a NumPy integer and a Python "
        "int by the NumPy integer (NEP 50), and refuses a Python int that "
        "does not fit it.  The Python code of the MRG generator (dropout, "
        "sampling, where the C code is not compiled) masks an int32 with "
        "0xFFFFFFFF for float32 and float64 numbers: OverflowError ('Python "
        "integer 4294967295 out of bounds for int32').  NumPy 1 made that "
        "int64 by the value; the mask is an int64, the same numbers on both.",
        ("            mask = 0xFFFFFFFF\n", "            mask = np.int64(0xFFFFFFFF)\n", 2)),
    Absent(
        "no_compiled_scan", "theano.scan.scan_perform_ext",
        "The Cython scan loop bundled with theano-pymc 1.1.2 does not compile "
        "on Python 3.11 and later (longintrepr.h); when its import fails with "
        "ImportError, scan runs its Python loop (the same numbers).  On 3.10 "
        "it would build: the repair keeps every version on the same loop."),
    AfterImport(
        "hidec_defaults", "theano.link.c.interface",
        "The C linker of theano-pymc 1.1 calls every c_* hook of an op and "
        "expects CLinkerOp's defaults ([] or ''); it no longer catches "
        "MethodNotDefined.  HideC, through which every GPU op hides the C code "
        "of its CPU parent (GpuElemwise, GpuAlloc, GpuReshape, GpuJoin, ...), "
        "still raises it from each hook: building the op's C code then fails, "
        "Theano falls back to the op's Python code, and a GPU op without one "
        "stops with 'No Python implementation is provided by this Op'.  The "
        "hidden hooks return the defaults; c_code itself still raises.",
        _hide_c_with_defaults),
    SourceEdit(
        "gpuarray_use_optdb", "theano.gpuarray",
        "theano.gpuarray.use() tags the GPU optimisations in 'optdb', the "
        "optimiser database imported from theano.compile; importing the "
        "submodule theano.gpuarray.optdb replaces that name by the module, "
        "use() fails on add_tags, and Theano logs an error and stays on the "
        "CPU.  use() imports theano.compile's database where it needs it.",
        ("    if default_to_move_computation_to_gpu:\n",
         "    if default_to_move_computation_to_gpu:\n"
         "        from theano.compile import optdb\n")),
    SourceEdit(
        "op_lifter_fgraph", "theano.gpuarray.opt_util",
        "theano-pymc 1.1 gives the GPU lifters the function graph as first "
        "argument, (fgraph, op, context_name, inputs, outputs), but op_lifter "
        "still calls them without it: every lift made by op_lifter fails with "
        "a TypeError that Theano only logs, and the node stays on the CPU.",
        ("new_op = maker(node.op, context_name, node.inputs, node.outputs)",
         "new_op = maker(fgraph, node.op, context_name, node.inputs, node.outputs)")),
    SourceEdit(
        "graph_to_gpu_fgraph", "theano.gpuarray.opt",
        "GraphToGPU, the optimiser that moves whole graphs to the GPU, calls "
        "the lifters without the function graph (see op_lifter_fgraph).",
        ("new_ops = lopt.transform(\n                        node.op,",
         "new_ops = lopt.transform(\n                        fgraph,\n"
         "                        node.op,")),
    SourceEdit(
        "lifters_pass_fgraph", "theano.gpuarray.opt",
        "Three lifters of theano.gpuarray.opt call their graph-level twins "
        "without the function graph (see op_lifter_fgraph): Shape, "
        "SpecifyShape and Assert nodes stay on the CPU.",
        ("_graph(op, context_name, inputs, outputs)",
         "_graph(fgraph, op, context_name, inputs, outputs)", 3)),
    _lifters_take_fgraph("theano.gpuarray.dnn_opt",
                         [("local_gpua_logsoftmax_to_dnn", "ctx_name"),
                          ("local_gpua_softmax_dnn_grad", "ctx_name"),
                          ("local_dnn_argmax", "ctx_name")]),
    _lifters_take_fgraph("theano.gpuarray.extra_ops", [("local_gpua_cumop", "ctx_name")],
                         cuda_only=["local_gpua_cumop"]),
    _lifters_take_fgraph("theano.gpuarray.multinomial",
                         [("local_gpua_multinomial", "context_name"),
                          ("local_gpua_multinomial_wor", "context_name")]),
    _lifters_take_fgraph("theano.gpuarray.sort", [("local_gpua_topkop", "ctx_name")],
                         cuda_only=["local_gpua_topkop"]),
    SourceEdit(
        "multinomial_init", "theano.gpuarray.multinomial",
        "The two multinomial sampling ops of the GPU pass themselves to their "
        "base class's __init__, which object.__init__ refuses under Python 3: "
        "sampling (translate.py's stochastic search, the samples shown during "
        "training) stays on the CPU.",
        ("        super().__init__(self)\n", "        super().__init__()\n", 2)),
    SourceEdit(
        "mrg_uniform_c_op", "theano.gpuarray.rng_mrg",
        "theano-pymc 1.1 split Op (Python code) from COp (C code) and made "
        "perform abstract.  GPUA_mrg_uniform, the MRG random generator on the "
        "GPU (dropout, sampling), has only C code but stayed an Op: it cannot "
        "be made ('Can't instantiate abstract class ... perform'), and "
        "would never run its C code.  It becomes a COp without Python code, "
        "as the other GPU kernels are.",
        ("class GPUA_mrg_uniform(GpuKernelBase, mrg_uniform_base):",
         "from theano.graph.op import _NoPythonCOp\n"
         "from theano.gpuarray.basic_ops import GpuKernelBaseCOp\n\n\n"
         "class GPUA_mrg_uniform(GpuKernelBaseCOp, _NoPythonCOp, mrg_uniform_base):")),
    SourceEdit(
        "max_and_argmax_c_op", "theano.gpuarray.reduction",
        "Likewise GpuMaxAndArgmax, the maximum and its position along an axis "
        "on the GPU, has only C code and no perform: it cannot be made, and "
        "max_and_argmax stays on the CPU.  It becomes a COp without Python "
        "code.",
        ("class GpuMaxAndArgmax(COp):",
         "from theano.graph.op import _NoPythonCOp\n\n\n"
         "class GpuMaxAndArgmax(_NoPythonCOp):")),
    SourceEdit(
        "graph_to_gpu_count", "theano.gpuarray.opt",
        "GraphToGPU counts the nodes a lifter created with len() of "
        "applys_between(), which theano-pymc 1.1 made a generator: a "
        "TypeError after every successful lift.",
        ("applys_between([mapping[i] for i in node.inputs], outputs)\n",
         "list(applys_between([mapping[i] for i in node.inputs], outputs))\n")),
    SourceEdit(
        "fusion_gpu_test_value", "theano.tensor.opt",
        "The element-wise fusion gives each scalar input the first element of "
        "its input's test value with the array method flatten(); a constant on "
        "the GPU (a GpuArray, whose test value is its data) has no such "
        "method, the fusion optimiser fails and the graph keeps unfused nodes.",
        ("tmp.tag.test_value = tv.flatten()[0]",
         "tmp.tag.test_value = np.asarray(tv).flatten()[0]")),
    SourceEdit(
        "elemwise_failed_build", "theano.gpuarray.elemwise",
        "When GpuElemwise's kernel does not build (the device's compiler "
        "rejects it), libgpuarray returns no elemwise object, Theano raises "
        "its error and then frees that missing object in the op's cleanup "
        "code: a segmentation fault instead of the error.  The cleanup frees "
        "only what was made.",
        ("        GpuElemwise_free(ge);\n",
         "        if (ge != NULL) GpuElemwise_free(ge);\n"),
        changes_compiled_code=True),
    SourceEdit(
        "scan_gpu_region", "theano.scan.op",
        "Scan's Python loop notes where each GPU output's memory lies before "
        "a step, to see afterwards whether the step wrote to it in place, "
        "with the CUDA pointer 'gpudata', which pygpu refuses for other "
        "back-ends ('This is for CUDA arrays'): every scan stops on OpenCL.  "
        "There the buffer and offset (base_data, offset) tell the same; "
        "pygpu refuses base_data on CUDA, so each kind keeps its own.",
        ("= var.gpudata\n", "= " + _GPU_ADDRESS % {'a': 'var'} + "\n", 2),
        ("new_var.gpudata == old_data",
         _GPU_ADDRESS % {'a': 'new_var'} + " == old_data", 3)),
    SourceEdit(
        "scan_output_address", "theano.scan.op",
        "Not a fault, a cost: after each step, scan's Python loop asks whether "
        "the step wrote an output into the memory it was given (then nothing "
        "is copied) by comparing the array's 'data' before and after; for a "
        "NumPy array that is a memoryview, and == between memoryviews "
        "compares every element.  The gradient scans' accumulated outputs "
        "(the source context's gradient, T x n x 2d) were compared element "
        "by element at every step: 10% of a Multi30k update.  The address "
        "of the data tells what the loop means to ask (as the Cython loop "
        "does), in constant time; the same values are copied or kept.",
        ("= var.data\n", "= var.__array_interface__['data'][0]\n", 2),
        ("new_var.data == old_data",
         "new_var.__array_interface__['data'][0] == old_data", 3)),
    SourceEdit(
        "scan_reorder_overlap", "theano.scan.op",
        "A scan that keeps only its last steps stores them in a circular "
        "buffer, which it puts in order at the end with two copies inside "
        "one array.  Its test for the order of the copies (pdx >= store // 2) "
        "lets the first one overlap itself when the buffer has an odd number "
        "of rows: NumPy copies overlapping memory correctly, OpenCL refuses "
        "it ('Memory copy overlap': the memory decoder's scan stopped), "
        "CUDA's copy leaves the result undefined.  Comparing 2 * pdx with "
        "the size never overlaps.",
        ("if pdx >= store_steps[idx] // 2:", "if 2 * pdx >= store_steps[idx]:")),
    SourceEdit(
        "lazy_elemwise_kernels", "theano.gpuarray.elemwise",
        "Not a fault, a cost: GpuElemwise_new (libgpuarray) builds, when a "
        "function is made, the kernel for contiguous arrays and, for each "
        "number of dimensions up to the node's, one for 64-bit and one for "
        "32-bit indices: seven programs for a 3-d node, of which a call uses "
        "one or two.  Given 0 dimensions, it builds the contiguous kernel "
        "and the others when a call first needs them (libgpuarray makes "
        "them on demand by design).  With pocl on a CPU each build is 0.1-1 s.",
        ("args, %(nd)s, GE_CONVERT_F16);", "args, 0, GE_CONVERT_F16);"),
        changes_compiled_code=True),
    SourceEdit(
        "lazy_inc_subtensor_kernels", "theano.gpuarray.subtensor",
        "The same for the 'a += b' kernels of GpuIncSubtensor and "
        "GpuAdvancedIncSubtensor (the gradients of every slice and lookup).",
        ("2, args, %(nd)s, GE_CONVERT_F16);", "2, args, 0, GE_CONVERT_F16);"),
        ("2, args, %(params)s->ndim_input_1, GE_CONVERT_F16);",
         "2, args, 0, GE_CONVERT_F16);"),
        changes_compiled_code=True),
    AfterImport(
        "stable_context_type_name", "theano.gpuarray.type",
        "Not a fault of the results, of the compile cache: a ParamsType "
        "names its C struct from a digest of its types' texts, and the GPU "
        "context's type has no text of its own, so Python's default "
        "('<... GpuContextType object at 0x7f...>', an address) went into "
        "the C source of the 16 GPU ops whose parameters hold the context "
        "(GpuAlloc, GpuAllocEmpty, ...).  Two processes that compiled one "
        "of them at once (two workers on a cold cache) left two modules of "
        "one key and different sources, and every later start warned 'The "
        "same cache key is associated to different modules'.  Its text is "
        "its class name; the compiled code is the same.",
        _stable_context_type_name),
    AfterImport(
        "shared_elemwise_kernels", "theano.gpuarray.elemwise",
        "Not a fault, a cost: each GpuElemwise node builds its own kernels "
        "when its function is made, although all nodes of one op (one "
        "compiled module) build the same ones: 80-300 ms a node with pocl, "
        "even from its cache, 150 s of the 270 s that one decoder "
        "configuration's test functions took to make on 2 cores; NVRTC "
        "builds each one too.  The nodes of an op share one GpuElemwise "
        "object per GPU context (counted, freed with the last node).",
        _shared_elemwise_kernels, changes_compiled_code=True),
    AfterImport(
        "lazy_reduction_kernels", "theano.gpuarray.elemwise",
        "Not a fault, a cost: on OpenCL, each node of a sum or product over "
        "axes (GpuCAReduceCPY) makes a pygpu ReductionKernel for its Python "
        "code when the node is prepared, which builds kernels, although the "
        "node runs its C code (with kernels of its own): 30% of the time to "
        "make a model's functions with pocl.  The Python kernel is made when "
        "the Python code first runs.",
        _lazy_reduction_kernels),
    SourceEdit(
        "no_debug_info", "theano.link.c.cmodule",
        "Not a fault, a cost: Theano compiles every C module with debug "
        "information (-g), which only a debugger reads: a sixth of each "
        "module's g++ time.  GCC makes the same code without it.",
        ('cmd = [config.cxx, get_gcc_shared_library_arg(), "-g"]',
         'cmd = [config.cxx, get_gcc_shared_library_arg()]')),
    SourceEdit(
        "compiler_hook", "theano.link.c.cmodule",
        "Not a fault, a cost: each g++ run of Theano parses Python's and "
        "NumPy's headers again (half of its time) and waits for the one "
        "before.  Theano's g++ run goes through module_compiles.run_compiler, "
        "which reads those headers precompiled once, and its choice of a "
        "module's folder through module_location, which gives the folder "
        "where compile_ahead compiled it: the same command, the same library.",
        ("location = dlimport_workdir(self.dirname)",
         "location = " + _MODULE_COMPILES + ".module_location(self.dirname, lnk)"),
        ("p_out = output_subprocess_Popen(cmd)",
         "p_out = " + _MODULE_COMPILES + ".run_compiler(cmd, src_code, lib_filename)")),
    AfterImport(
        "compile_ahead", "theano.link.vm",
        "Not a fault, a cost: Theano compiles the C modules that a function "
        "lacks one after the other as it links its nodes (about 260 at the "
        "Multi30k size on a first run, 1 s each).  At the first one missing, "
        "the linker's other missing modules are compiled by a pool of g++ "
        "processes (module_compiles; NMT_COMPILE_JOBS, default the cores).",
        lambda vm: setattr(vm.VMLinker, "make_all",
                           module_compiles.linking_compiles_ahead(vm.VMLinker.make_all))),
    AfterImport(
        "whole_key_files", "theano.link.c.cmodule",
        "Every process that starts Theano reads the key.pkl of every module "
        "in the compile cache without taking the compile lock, and deletes "
        "the folder of one it cannot read to the end (EOFError: 'broken "
        "cache directory').  Theano writes key.pkl in place, so a process "
        "that starts while another saves a freshly compiled module deletes "
        "that module: the other then logs 'Removing key file ... because "
        "the corresponding module is gone', an optimisation fails or a "
        "training stops.  Seen when many processes compile at once (the test "
        "suite on two cores, the two workers of an mpirun).  The key is "
        "written to a partial file and renamed over key.pkl: a reader finds "
        "no key yet (and leaves the folder alone) or the whole key.",
        _whole_key_files),
    SourceEdit(
        "props_less_ops_kept", "theano.link.c.basic",
        "The compile cache keeps a module across processes only when every "
        "part of its key has a version, and CLinker counts an op's __props__ "
        "among those parts: an op without properties (Dot22, Alloc, "
        "DeepCopyOp, AdvancedSubtensor1, SoftmaxWithBias, the project's "
        "SoftmaxNll, ...) has the empty tuple, which reads as 'no version'.  "
        "Their modules, versioned by c_code_cache_version like any other, "
        "were compiled again by every process and deleted at its exit: 14 "
        "compilations, with external_op_version about 20 CPU seconds of a "
        "start at the Multi30k size.  Empty properties stand in the key as a "
        "marker that is not empty; an op without c_code_cache_version stays "
        "unversioned.",
        ("version.append(node.op.__props__)",
         "version.append(node.op.__props__ or (\"no __props__\",))")),
    SourceEdit(
        "external_op_version", "theano.graph.op",
        "An op whose C code Theano reads from files (ExternalCOp: DimShuffle, "
        "and many GPU ops) takes its version from hash() of that code, and "
        "Python salts the hash of a string anew in every process: the "
        "version never matches the cached module's, so every process "
        "compiles its modules again and adds one more to the compile folder "
        "(1,760 copies of DimShuffle's after a few months of this project's "
        "runs and tests, 350 MB).  The version is a digest of the code, the "
        "same in every process.",
        ("version = (hash(tuple(self.func_codes)),)",
         "version = (__import__(\"hashlib\").sha256("
         "\"\\0\".join(self.func_codes).encode()).hexdigest(),)")),
    AfterImport(
        "exact_integer_max_min", "theano.scalar.basic",
        "The C code of maximum and minimum keeps a third branch, nan(\"\"), "
        "for NaN inputs, also on integers, which cannot be NaN: the "
        "conditional expression then has the type double, rounding int64 "
        "values above 2**53, and OpenCL C, whose nan() takes an integer code, "
        "rejects the kernel of every GpuElemwise with a maximum of shapes "
        "('no matching function for call to _cl_nan').  On integers they "
        "compare and pick, as NumPy does.",
        _exact_integer_max_min, changes_compiled_code=True),
    AfterImport(
        "switch_on_floats", "theano.scalar.basic",
        "Switch writes cond ? a : b, and OpenCL C refuses a float as the "
        "condition of ?: (the dropout of dl4mt switches on use_noise, a "
        "float32): the kernel does not build.  A float condition is compared "
        "with zero, which C reads the same way (NaN true, -0.0 false).",
        _switch_on_floats, changes_compiled_code=True),
    AfterImport(
        "opencl_kernel_c", "theano.gpuarray.elemwise",
        "GpuElemwise writes its kernels from the scalar ops' C code, which "
        "uses C names that OpenCL C does not have: nan(\"\") on floats (a "
        "quiet NaN is NAN in OpenCL C) and C99's float math functions "
        "floorf, fmodf, ... (overloaded floor, fmod, ... in OpenCL C; seen in "
        "the integer division of floats that the training update has).  The "
        "kernels for an OpenCL device use OpenCL C's names; CUDA's are "
        "unchanged (CUDA has C's).",
        _opencl_kernel_code, changes_compiled_code=True),
]


def active():
    """The repairs in force: all but those NMT_THEANO_REPAIRS_OFF names."""
    off = set(filter(None, os.environ.get(OFF_VARIABLE, "").split(",")))
    unknown = off - set(r.name for r in REPAIRS)
    if unknown:
        raise RepairError("theano_repairs: %s names no repair: %s"
                          % (OFF_VARIABLE, ", ".join(sorted(unknown))))
    return [r for r in REPAIRS if r.name not in off]


def fingerprint():
    """A short digest of the repairs in force that change the C code Theano
    compiles, for the name of its compile cache: Theano keys a compiled op by
    the op's version number, not its code, so a module compiled under other
    repairs must not be reused."""
    digest = hashlib.sha1()
    for r in active():
        if r.changes_compiled_code:
            digest.update(repr((r.name, r.module, getattr(r, "replacements", None))).encode())
    return digest.hexdigest()[:8]


class _RepairingLoader(importlib.abc.Loader):
    """Runs a module from its edited source, then its after-import repairs."""

    def __init__(self, loader, edits, afters):
        self.loader, self.edits, self.afters = loader, edits, afters

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def __getattr__(self, name):   # get_filename, is_package, ...: the file's loader's
        return getattr(self.loader, name)

    def get_source(self, fullname):
        """The module's source as it runs: with its edits."""
        source = self.loader.get_source(fullname)
        path = self.loader.get_filename(fullname)
        for edit in self.edits:
            source = edit.edit(source, path)
        return source

    def exec_module(self, module):
        if self.edits:
            path = self.loader.get_filename(module.__name__)
            source = self.get_source(module.__name__)
            # tracebacks read their lines from linecache: the edited ones (an
            # entry without a modification time is never reread from the file)
            linecache.cache[path] = (len(source), None, source.splitlines(True), path)
            exec(compile(source, path, "exec"), module.__dict__)
        else:
            self.loader.exec_module(module)
        for repair in self.afters:
            repair.apply(module)


class _Finder(importlib.abc.MetaPathFinder):
    def __init__(self, repairs):
        self.by_module = OrderedDict()
        for r in repairs:
            self.by_module.setdefault(r.module, []).append(r)

    def find_spec(self, fullname, path=None, target=None):
        repairs = self.by_module.get(fullname)
        if not repairs:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        spec.loader = _RepairingLoader(
            spec.loader, [r for r in repairs if isinstance(r, SourceEdit)],
            [r for r in repairs if isinstance(r, AfterImport)])
        return spec


def install():
    """Apply every active repair as Theano imports its modules (once)."""
    if any(isinstance(f, _Finder) for f in sys.meta_path):
        return
    if "theano" in sys.modules:
        raise RepairError("theano_repairs: Theano was imported before the repairs "
                          "(import theano_env first)")
    repairs = active()
    for r in repairs:
        if isinstance(r, Absent):
            sys.modules.setdefault(r.module, None)
    sys.meta_path.insert(0, _Finder([r for r in repairs
                                     if not isinstance(r, (Absent, CFileEdit))]))


def call_after_import(module, function):
    """Call ``function(module)`` once ``module`` has run, through the repairs'
    import hook, the project's only one (theano_env: the check that the GPU
    back-end came up).  After install()."""
    finder = next((f for f in sys.meta_path if isinstance(f, _Finder)), None)
    if finder is None:
        raise RepairError("theano_repairs: install() comes before call_after_import()")
    finder.by_module.setdefault(module, []).append(
        AfterImport(function.__name__, module, function.__doc__ or "", function))
