"""Theano's CPU ops of the training graph that did not use a process's
threads well, replaced by ops that split their work over the OpenMP threads
(docs/speed.md#two-cores-in-one-process):

* ``Dot22`` (a matrix product through OpenBLAS, whose own threads add
  little at these sizes, wait by spinning and yielding, and compete with the
  OpenMP threads of the other ops): ``ThreadedDot22`` gives each thread a
  block of the output's rows (or columns), computed by one BLAS call on that
  thread, the BLAS on one thread meanwhile;
* ``Gemm{inplace}`` (z = b z + a x @ y over z: the decoders' products
  with a bias): ``ThreadedGemm``, split as ``ThreadedDot22``, so that no
  op of a graph runs on OpenBLAS's own threads;
* the sums over leading axes (the biases' gradients, ``Sum{axis=[0, 1]}``),
  which Theano's CAReduce computes on one thread: ``LeadingSum`` gives each
  thread a block of the columns;
* the gradient of a gather of rows (the embeddings' ``W[x]``, the output
  layer's real positions): Theano allocates zeros (``Alloc``) and adds each
  gathered row's gradient into them (``AdvancedIncSubtensor1``, through
  NumPy's indexing), both on one thread; ``ScatterRows`` gives each thread a
  block of the output's rows, zeroed, and the rows of the gradient that go
  there, added in the indices' order.

The numbers are Theano's: each output element is the same dot product (the
BLAS's order over k does not depend on the block's rows or columns), or the
same sum (in doubles, or the gathered rows' float32 additions) in the same
order.  One thread: the same single call.
The optimizer that makes the replacements runs in FAST_RUN on the CPU only
(device=cpu); a graph that a GPU runs keeps Theano's ops.
"""
import numpy

from theano_platform import theano_env  # noqa: F401  (configures Theano before its import)
import theano
import theano.tensor as tensor
from theano.compile import optdb
from theano.graph.basic import Apply
from theano.graph.opt import TopoOptimizer, local_optimizer
from theano.tensor import blas as theano_blas
from theano.tensor import basic as theano_basic
from theano.tensor import elemwise as theano_elemwise
from theano.tensor import subtensor as theano_subtensor

from theano_platform import fast_ops, recurrent_ops



class _ThreadedCOp(recurrent_ops._RecurrenceCOp):
    C = ''


class ThreadedDot22(_ThreadedCOp):
    """x (M, K) @ y (K, N) as Dot22, the output's rows (or, when there are
    more columns, its columns) split over the OpenMP threads."""
    __props__ = ()

    def make_node(self, x, y):
        x, y = fast_ops._as_f32(x), fast_ops._as_f32(y)
        if x.ndim != 2 or y.ndim != 2:
            raise TypeError('ThreadedDot22 takes two matrices')
        bz = (x.type.broadcastable[0], y.type.broadcastable[1])
        return Apply(self, [x, y], [tensor.TensorType('float32', bz)()])

    def perform(self, node, inputs, outputs):
        x, y = inputs
        outputs[0][0] = (x @ y).astype('float32')

    def infer_shape(self, fgraph, node, shapes):
        return [(shapes[0][0], shapes[1][1])]

    def c_code(self, node, name, inputs, outputs, sub):
        x, y = inputs
        (z,) = outputs
        return r"""
{
    PyArrayObject* xs = %(x)s;
    PyArrayObject* ys = %(y)s;
    npy_intp lda, ldb;
    int ta = nmt_layout(xs, &lda), tb = nmt_layout(ys, &ldb);
    PyArrayObject* xc = NULL;
    PyArrayObject* yc = NULL;
    if (ta < 0) { xc = (PyArrayObject*)PyArray_NewCopy(xs, NPY_CORDER); xs = xc; ta = xc ? nmt_layout(xs, &lda) : 0; }
    if (tb < 0) { yc = (PyArrayObject*)PyArray_NewCopy(ys, NPY_CORDER); ys = yc; tb = yc ? nmt_layout(ys, &ldb) : 0; }
    if (xs == NULL || ys == NULL) { Py_XDECREF(xc); Py_XDECREF(yc); %(fail)s }
    const npy_intp M = PyArray_DIMS(xs)[0], K = PyArray_DIMS(xs)[1], N = PyArray_DIMS(ys)[1];
    if (PyArray_DIMS(ys)[0] != K) {
        PyErr_SetString(PyExc_ValueError, "ThreadedDot22: shapes do not match");
        Py_XDECREF(xc); Py_XDECREF(yc); %(fail)s
    }
    npy_intp dims[2] = {M, N};
""" % dict(x=x, y=y, fail=sub['fail']) + fast_ops._ALLOC_OUT % dict(
            out=z, nd=2, dims='dims', fail=sub['fail'],
            cleanup='Py_XDECREF(xc); Py_XDECREF(yc);') + r"""
    nmt_parallel_gemm(ta, tb, M, N, K, (const float*)PyArray_DATA(xs), lda,
                      (const float*)PyArray_DATA(ys), ldb, 0.f, (float*)PyArray_DATA(%(z)s), N);
    Py_XDECREF(xc); Py_XDECREF(yc);
}
""" % dict(z=z)


class ThreadedGemm(_ThreadedCOp):
    """Theano's Gemm{inplace}, z = b z + a (x @ y) written over z, the rows
    (or columns) of z split over the OpenMP threads as in ThreadedDot22."""
    __props__ = ()
    destroy_map = {0: [0]}

    def make_node(self, z, a, x, y, b):
        z, a, x, y, b = (fast_ops._as_f32(v) for v in (z, a, x, y, b))
        if (z.ndim, a.ndim, x.ndim, y.ndim, b.ndim) != (2, 0, 2, 2, 0):
            raise TypeError('ThreadedGemm takes a matrix, a scalar, two matrices, a scalar')
        return Apply(self, [z, a, x, y, b], [z.type()])

    def perform(self, node, inputs, outputs):
        z, a, x, y, b = inputs
        product = a * (x @ y)
        z[...] = product if b == 0 else b * z + product   # b = 0: z's values unread
        outputs[0][0] = z

    def infer_shape(self, fgraph, node, shapes):
        return [shapes[0]]

    def c_code(self, node, name, inputs, outputs, sub):
        z, a, x, y, b = inputs
        return r"""
{
    PyArrayObject* xs = %(x)s;
    PyArrayObject* ys = %(y)s;
    PyArrayObject* zs = %(z)s;
    npy_intp lda, ldb, ldz;
    int ta = nmt_layout(xs, &lda), tb = nmt_layout(ys, &ldb), tz = nmt_layout(zs, &ldz);
    PyArrayObject* xc = NULL;
    PyArrayObject* yc = NULL;
    PyArrayObject* zc = NULL;
    if (ta < 0) { xc = (PyArrayObject*)PyArray_NewCopy(xs, NPY_CORDER); xs = xc; ta = xc ? nmt_layout(xs, &lda) : 0; }
    if (tb < 0) { yc = (PyArrayObject*)PyArray_NewCopy(ys, NPY_CORDER); ys = yc; tb = yc ? nmt_layout(ys, &ldb) : 0; }
    if (tz < 0) { zc = (PyArrayObject*)PyArray_NewCopy(zs, NPY_CORDER); zs = zc; tz = zc ? nmt_layout(zs, &ldz) : 0; }
    if (xs == NULL || ys == NULL || zs == NULL) { Py_XDECREF(xc); Py_XDECREF(yc); Py_XDECREF(zc); %(fail)s }
    const npy_intp M = PyArray_DIMS(xs)[0], K = PyArray_DIMS(xs)[1], N = PyArray_DIMS(ys)[1];
    if (PyArray_DIMS(ys)[0] != K || PyArray_DIMS(zs)[0] != M || PyArray_DIMS(zs)[1] != N) {
        PyErr_SetString(PyExc_ValueError, "ThreadedGemm: shapes do not match");
        Py_XDECREF(xc); Py_XDECREF(yc); Py_XDECREF(zc); %(fail)s
    }
    const float alpha = *(const float*)PyArray_DATA(%(a)s), beta = *(const float*)PyArray_DATA(%(b)s);
    const float* X = (const float*)PyArray_DATA(xs);
    const float* Y = (const float*)PyArray_DATA(ys);
    if (tz == 0)
        nmt_parallel_gemm_alpha(ta, tb, M, N, K, alpha, X, lda, Y, ldb, beta,
                                (float*)PyArray_DATA(zs), ldz);
    else    /* z stored as its transpose: z' = b z' + a (y' @ x') */
        nmt_parallel_gemm_alpha(!tb, !ta, N, M, K, alpha, Y, ldb, X, lda, beta,
                                (float*)PyArray_DATA(zs), ldz);
    int failed = zc != NULL && PyArray_CopyInto(%(z)s, zc) < 0;
    Py_XDECREF(xc); Py_XDECREF(yc); Py_XDECREF(zc);
    if (failed) { %(fail)s }
    Py_XDECREF(%(out)s);
    %(out)s = %(z)s;
    Py_INCREF(%(out)s);
}
""" % dict(x=x, y=y, z=z, a=a, b=b, out=outputs[0], fail=sub['fail'])


class LeadingSum(_ThreadedCOp):
    """The sum of a float32 array over its first ``axes`` axes, in doubles,
    as Theano's Sum{acc_dtype=float64} of them: the columns (the values of
    the other axes) split over the OpenMP threads."""
    __props__ = ('axes',)

    def __init__(self, axes):
        self.axes = int(axes)

    def make_node(self, x):
        x = fast_ops._as_f32(x)
        if x.ndim <= self.axes:
            raise TypeError('LeadingSum takes more axes than it sums')
        out = tensor.TensorType('float32', x.type.broadcastable[self.axes:])()
        return Apply(self, [x], [out])

    def perform(self, node, inputs, outputs):
        x = inputs[0]
        outputs[0][0] = x.sum(axis=tuple(range(self.axes)), dtype='float64').astype('float32')

    def infer_shape(self, fgraph, node, shapes):
        return [shapes[0][self.axes:]]

    def c_code(self, node, name, inputs, outputs, sub):
        (x,), (z,), fail = inputs, outputs, sub['fail']
        code, cleanup = fast_ops._contiguous([('xc', x)], fail)
        return '{\n' + code + r"""
    const int nd = PyArray_NDIM(xc), axes = %(axes)d;
    npy_intp rows = 1, cols = 1;
    for (int i = 0; i < nd; ++i) {
        if (i < axes) rows *= PyArray_DIMS(xc)[i];
        else cols *= PyArray_DIMS(xc)[i];
    }
""" % dict(axes=self.axes) + fast_ops._ALLOC_OUT % dict(
            out=z, nd='nd - axes', dims='PyArray_DIMS(xc) + axes', fail=fail,
            cleanup=cleanup) + r"""
    const float* X = (const float*)PyArray_DATA(xc);
    float* Z = (float*)PyArray_DATA(%(z)s);
    double* acc = (double*)calloc(cols + 1, sizeof(double));
    const int no_memory = acc == NULL;
    if (!no_memory) {
        nmt_parallel_column_sums(X, rows, cols, 0, cols, acc,
                                 nmt_threads_for((double)rows * cols, cols / 64));
        for (npy_intp j = 0; j < cols; ++j)
            Z[j] = (float)acc[j];
    }
    free(acc);
    %(cleanup)s
    if (no_memory) { PyErr_NoMemory(); %(fail)s }
}
""" % dict(z=z, cleanup=cleanup, fail=fail)


class ScatterRows(_ThreadedCOp):
    """(y (M, D), idx (M,), n, D) -> zeros (n, D) with y[i] added to row
    idx[i] for i = 0..M-1 in order (negative indices count from the end), as
    Theano's AdvancedIncSubtensor1 adds into an Alloc of zeros: the output's
    rows split over the OpenMP threads, each thread adding the rows that
    fall in its block."""
    __props__ = ()

    def make_node(self, y, idx, n, d):
        y = fast_ops._as_f32(y)
        idx = tensor.cast(tensor.as_tensor_variable(idx), 'int64')
        n, d = (tensor.cast(tensor.as_tensor_variable(v), 'int64') for v in (n, d))
        if y.ndim != 2 or idx.ndim != 1 or n.ndim != 0 or d.ndim != 0:
            raise TypeError('ScatterRows takes y (M, D), idx (M,) and the scalars n, D')
        return Apply(self, [y, idx, n, d], [tensor.fmatrix()])

    def perform(self, node, inputs, outputs):
        y, idx, n, d = inputs
        if y.shape[1] != d or len(idx) != len(y):
            raise ValueError('ScatterRows: shapes do not match')
        z = numpy.zeros((int(n), int(d)), dtype='float32')
        numpy.add.at(z, idx, y)   # in the indices' order
        outputs[0][0] = z

    def infer_shape(self, fgraph, node, shapes):
        return [(node.inputs[2], node.inputs[3])]

    def connection_pattern(self, node):
        return [[True], [False], [False], [False]]

    def c_code(self, node, name, inputs, outputs, sub):
        (y, idx, n, d), (z,), fail = inputs, outputs, sub['fail']
        code, cleanup = fast_ops._contiguous([('yc', y), ('ic', idx)], fail)
        return '{\n' + code + r"""
    const npy_intp M = PyArray_DIMS(yc)[0], D = PyArray_DIMS(yc)[1];
    const npy_intp n = (npy_intp)((npy_int64*)PyArray_DATA(%(n)s))[0];
    const npy_int64* I = (const npy_int64*)PyArray_DATA(ic);
    int bad = PyArray_SIZE(ic) != M || D != ((npy_int64*)PyArray_DATA(%(d)s))[0] || n < 0;
    for (npy_intp i = 0; i < M && !bad; ++i)
        bad = I[i] < -n || I[i] >= n;
    if (bad) {
        PyErr_SetString(PyExc_IndexError,
                        "ScatterRows: shapes do not match, or an index is out of bounds");
        %(cleanup)s %(fail)s
    }
    npy_intp dims[2] = {n, D};
""" % dict(n=n, d=d, cleanup=cleanup, fail=fail) + fast_ops._ALLOC_OUT % dict(
            out=z, nd='2', dims='dims', fail=fail, cleanup=cleanup) + r"""
    const float* Y = (const float*)PyArray_DATA(yc);
    float* Z = (float*)PyArray_DATA(%(z)s);
    const int nt = nmt_threads_over(n * D);
    #pragma omp parallel num_threads(nt) if (nt > 1)
    {
        const int t = nmt_thread();
        const npy_intp a = n * t / nt, b = n * (t + 1) / nt;
        memset(Z + a * D, 0, (b - a) * D * sizeof(float));
        for (npy_intp i = 0; i < M; ++i) {
            const npy_intp r = (npy_intp)(I[i] < 0 ? I[i] + n : I[i]);
            if (r < a || r >= b)
                continue;
            float* zr = Z + r * D;
            const float* yi = Y + i * D;
            for (npy_intp j = 0; j < D; ++j)
                zr[j] += yi[j];
        }
    }
    %(cleanup)s
}
""" % dict(z=z, cleanup=cleanup)


def _zeros_alloc(var):
    """(n, D) of a 2-d Alloc of the constant 0 that ``var`` is, else None."""
    node = var.owner
    if node is None or not isinstance(node.op, theano_basic.Alloc) or var.ndim != 2:
        return None
    try:
        value = theano_basic.get_scalar_constant_value(node.inputs[0])
    except theano_basic.NotScalarConstantError:
        return None
    return tuple(node.inputs[1:]) if value == 0 else None


@local_optimizer([theano_blas.Dot22, theano_blas.Gemm, theano_elemwise.Sum,
                  theano_subtensor.AdvancedIncSubtensor1])
def _threaded(fgraph, node):
    """Dot22 of float32 matrices -> ThreadedDot22; Gemm{inplace} ->
    ThreadedGemm; Sum over leading axes of a float32 array in doubles ->
    LeadingSum; the rows of a float32 matrix added into zeros at integer
    indices -> ScatterRows (CPU graphs only; not with NMT_THEANO_OPS=1)."""
    if theano.config.device != 'cpu' or fast_ops.theano_ops_asked():
        return False
    op, out = node.op, node.outputs[0]
    if isinstance(op, theano_subtensor.AdvancedIncSubtensor1):
        return _scatter_rows(node)
    if out.dtype != 'float32' or any(i.dtype != 'float32' for i in node.inputs):
        return False
    if isinstance(op, theano_blas.Dot22):
        return [ThreadedDot22()(*node.inputs)]
    if type(op) is theano_blas.Gemm and op.inplace:
        return [ThreadedGemm()(*node.inputs)]
    if (type(op) is theano_elemwise.Sum and op.axis is not None and op.acc_dtype == 'float64'
            and list(op.axis) == list(range(len(op.axis))) and 0 < len(op.axis) < node.inputs[0].ndim):
        return [LeadingSum(len(op.axis))(node.inputs[0])]
    return False


def _scatter_rows(node):
    """AdvancedIncSubtensor1 (inc, in place or not) of float32 rows y (M, D),
    neither axis broadcast, into a 2-d Alloc of zeros -> ScatterRows."""
    x, y, idx = node.inputs
    shape = _zeros_alloc(x)
    if (shape is None or node.op.set_instead_of_inc or x.dtype != 'float32'
            or any(x.broadcastable)   # ScatterRows' output broadcasts on no axis
            or y.dtype != 'float32' or y.ndim != 2 or any(y.broadcastable)
            or idx.ndim != 1 or idx.dtype not in tensor.integer_dtypes):
        return False
    return [ScatterRows()(y, idx, *shape)]


# after Theano's BLAS optimisations have made the Dot22 (BlasOpt 1.7, the
# in-place BLAS ops 70), before the element-wise ops go in place (75)
optdb.register('nmt_threaded_ops', TopoOptimizer(_threaded), 70.5, 'fast_run')
