"""A C op whose module no cache keeps: compiled anew by every process.

Theano keeps a compiled module across processes only when its op has a
C code version; this op has none, and its property enters its code, so each
``UnversionedCopy(k)`` with a new ``k`` compiles a module of its own (the
tests of the compiler's repairs need modules that are really compiled).
"""
import theano.tensor as tensor
from theano.graph.basic import Apply
from theano.graph.op import COp


class UnversionedCopy(COp):
    """y = a copy of x, through C code that names k."""
    __props__ = ('k',)

    def __init__(self, k):
        self.k = k

    def make_node(self, x):
        x = tensor.as_tensor_variable(x)
        return Apply(self, [x], [x.type()])

    def perform(self, node, inputs, outputs):
        outputs[0][0] = inputs[0].copy()

    def c_code(self, node, name, inputs, outputs, sub):
        return """/* copy number %(k)s */
        Py_XDECREF(%(z)s);
        %(z)s = (PyArrayObject*)PyArray_FromAny((PyObject*)%(x)s, NULL, 0, 0,
                                                NPY_ARRAY_ENSURECOPY, NULL);
        if (!%(z)s) %(fail)s
        """ % dict(k=self.k, x=inputs[0], z=outputs[0], fail=sub['fail'])

    def c_code_cache_version(self):
        return ()
