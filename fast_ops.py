"""Faster C ops for the hot spots of training on a CPU, each computing what
the Theano graph it replaces computes, up to float32 rounding.

The source attention (REFERENCE.md section 3, "attention") is the hot spot:
at every decoder step it evaluates tanh over T_src x n x 2*dim values (8
million at the papers' size) and reduces two such arrays over the source
positions; the backward pass does it twice more.  Theano computes that tanh
with glibc's scalar ``tanhf`` (up to 2 ulp from the correctly rounded value,
about 40 ns a value on this machine) and its float64-accumulating sums over
the first axis with a cache-unfriendly loop.  Here:

``tanh_add(a, b)``
    tanh(a + b[None]) for a (T, ...) and b of a's shape without its first
    axis; the tanh is glibc's vector ``tanhf`` (libmvec, AVX-512 or AVX2:
    at most 1 ulp from the correctly rounded value, about 100 times
    faster), the sum a float32 add as Theano's.  Its gradient is written
    with the op's output (1 - y^2), so the backward pass evaluates no tanh.
    Without libmvec or AVX2 it calls the scalar ``tanhf``, as Theano does.
``sum_rows(x)``, ``sum_rows(x, w)``
    sum_t x[t] (or sum_t x[t] * w[t, ..., None]): each float32 product
    rounded, then accumulated in float64 in the order t = 0, 1, ..., as
    Theano's ``Sum{axis=[0], acc_dtype=float64}`` does, so the numbers are
    the same; the loop streams through memory once.

Inside ``with original_graph():`` these functions build Theano's own graph
instead (the original code's), for comparisons.  The ops also have NumPy
implementations (used by the Python linker).
"""
import contextlib
import functools

import numpy
import theano.tensor as tensor
from theano.graph.basic import Apply
from theano.graph.op import COp

F32 = 'float32'


@functools.lru_cache(maxsize=None)
def libmvec_flags():
    """Compile flags enabling the libmvec path ([] where it does not link)."""
    from theano.link.c.cmodule import GCC_compiler
    probe = """
#include <immintrin.h>
extern "C" __m256 _ZGVdN8v_tanhf(__m256);
int main() {
    float x[8] = {0.f, .1f, .2f, .3f, .4f, .5f, .6f, .7f}, y[8];
    _mm256_storeu_ps(y, _ZGVdN8v_tanhf(_mm256_loadu_ps(x)));
    return y[1] > 0.f ? 0 : 1;
}
"""
    try:
        compiled, ran = GCC_compiler.try_compile_tmp(
            probe, tmp_prefix='nmt_libmvec_', flags=['-lmvec'], try_run=True)
    except Exception:  # no compiler, or any other failure: use tanhf
        return []
    return ['-DNMT_LIBMVEC'] if compiled and ran else []


_SUPPORT = r"""
#include <math.h>
#include <string.h>
#include <stdlib.h>
#if defined(NMT_LIBMVEC) && (defined(__AVX512F__) || defined(__AVX2__))
#include <immintrin.h>
#if defined(__AVX512F__)
extern "C" __m512 _ZGVeN16v_tanhf(__m512);
#define NMT_W 16
#define NMT_TANH_BLOCK(src, dst) \
    _mm512_storeu_ps((dst), _ZGVeN16v_tanhf(_mm512_loadu_ps(src)))
#else
extern "C" __m256 _ZGVdN8v_tanhf(__m256);
#define NMT_W 8
#define NMT_TANH_BLOCK(src, dst) \
    _mm256_storeu_ps((dst), _ZGVdN8v_tanhf(_mm256_loadu_ps(src)))
#endif
#endif

/* z = tanh(z) over n contiguous floats, by blocks of NMT_W (the tail goes
   through a padded block so that every value takes the same path) */
static void nmt_tanh_inplace(float* z, npy_intp n)
{
#ifdef NMT_W
    npy_intp j = 0;
    for (; j + NMT_W <= n; j += NMT_W)
        NMT_TANH_BLOCK(z + j, z + j);
    if (j < n) {
        float buf[NMT_W] = {0.f};
        memcpy(buf, z + j, (n - j) * sizeof(float));
        NMT_TANH_BLOCK(buf, buf);
        memcpy(z + j, buf, (n - j) * sizeof(float));
    }
#else
    for (npy_intp j = 0; j < n; ++j)
        z[j] = tanhf(z[j]);
#endif
}

/* z[t] = tanh(a[t] + b) for t < rows, rows of m floats */
static void nmt_tanh_add(const float* a, const float* b, float* z,
                         npy_intp rows, npy_intp m)
{
    for (npy_intp t = 0; t < rows; ++t) {
        const float* at = a + t * m;
        float* zt = z + t * m;
        for (npy_intp j = 0; j < m; ++j)
            zt[j] = at[j] + b[j];
        nmt_tanh_inplace(zt, m);
    }
}

/* out = sum_t x[t] (* w[t, j / inner]) accumulated in double, t in order */
static void nmt_sum_rows(const float* x, const float* w, float* out,
                         npy_intp rows, npy_intp m, npy_intp inner,
                         double* acc)
{
    for (npy_intp j = 0; j < m; ++j)
        acc[j] = 0.;
    for (npy_intp t = 0; t < rows; ++t) {
        const float* xt = x + t * m;
        if (w == NULL) {
            for (npy_intp j = 0; j < m; ++j)
                acc[j] += (double)xt[j];
        } else {
            const float* wt = w + t * (m / inner);
            for (npy_intp g = 0; g < m / inner; ++g) {
                const float wg = wt[g];
                const float* xg = xt + g * inner;
                double* ag = acc + g * inner;
                for (npy_intp j = 0; j < inner; ++j) {
                    const float p = xg[j] * wg;
                    ag[j] += (double)p;
                }
            }
        }
    }
    for (npy_intp j = 0; j < m; ++j)
        out[j] = (float)acc[j];
}
"""

# C snippets shared by the ops' c_code: contiguous float32 copies of inputs,
# an output of the wanted shape (kept between calls when it fits)
_CONTIGUOUS = r"""
    PyArrayObject* %(dst)s = PyArray_GETCONTIGUOUS(%(src)s);
    if (%(dst)s == NULL) { %(fail)s }
"""
_ALLOC_OUT = r"""
    if (%(out)s == NULL || PyArray_NDIM(%(out)s) != %(nd)s ||
        !PyArray_IS_C_CONTIGUOUS(%(out)s) ||
        !PyArray_CompareLists(PyArray_DIMS(%(out)s), %(dims)s, %(nd)s)) {
        Py_XDECREF(%(out)s);
        %(out)s = (PyArrayObject*)PyArray_EMPTY(%(nd)s, %(dims)s, NPY_FLOAT32, 0);
        if (%(out)s == NULL) { %(cleanup)s %(fail)s }
    }
"""


class _FastCOp(COp):
    """Shared C settings of the ops of this module."""

    def c_support_code(self, **kwargs):
        return _SUPPORT

    def c_headers(self, **kwargs):
        return ['<math.h>', '<string.h>', '<stdlib.h>']

    def c_compile_args(self, **kwargs):
        return ['-O3'] + libmvec_flags()

    def c_libraries(self, **kwargs):
        return ['mvec'] if libmvec_flags() else []

    def c_code_cache_version(self):
        return (1, bool(libmvec_flags()))


def _as_f32(x):
    x = tensor.as_tensor_variable(x)
    if x.dtype != F32:
        raise TypeError('fast ops take float32 tensors, not %s' % x.dtype)
    return x


class TanhAdd(_FastCOp):
    """tanh(a + b[None]): a (T, ...), b of a's shape without the first axis."""
    __props__ = ()

    def make_node(self, a, b):
        a, b = _as_f32(a), _as_f32(b)
        if b.ndim != a.ndim - 1:
            raise ValueError('b must have one axis fewer than a')
        return Apply(self, [a, b], [a.type()])

    def perform(self, node, inputs, outputs):
        a, b = inputs
        outputs[0][0] = numpy.tanh(a + b[None]).astype(F32)

    def infer_shape(self, fgraph, node, shapes):
        return [shapes[0]]

    def L_op(self, inputs, outputs, output_grads):
        (y,), (gz,) = outputs, output_grads
        # d tanh(u) / du = 1 - tanh(u)^2, from the output: no tanh again
        ga = gz * (numpy.float32(1.) - tensor.sqr(y))
        return [ga, sum_rows(ga)]

    def c_code(self, node, name, inputs, outputs, sub):
        a, b = inputs
        (z,) = outputs
        fail = sub['fail']
        nd = node.inputs[0].ndim
        return '{\n' + (
            _CONTIGUOUS % dict(dst='ac', src=a, fail=fail) +
            _CONTIGUOUS % dict(dst='bc', src=b, fail='Py_DECREF(ac); ' + fail) + r"""
    {
    npy_intp rows = PyArray_DIMS(ac)[0];
    npy_intp m = rows > 0 ? PyArray_SIZE(ac) / rows : 0;
    if (PyArray_SIZE(bc) != m) {
        PyErr_SetString(PyExc_ValueError, "tanh_add: b does not match a[0]");
        Py_DECREF(ac); Py_DECREF(bc); %(fail)s
    }
""" % dict(fail=fail) + _ALLOC_OUT % dict(
                out=z, nd=nd, dims='PyArray_DIMS(ac)', fail=fail,
                cleanup='Py_DECREF(ac); Py_DECREF(bc);') + r"""
    nmt_tanh_add((const float*)PyArray_DATA(ac), (const float*)PyArray_DATA(bc),
                 (float*)PyArray_DATA(%(z)s), rows, m);
    Py_DECREF(ac); Py_DECREF(bc);
    }
""" % dict(z=z)) + '}\n'


class SumRows(_FastCOp):
    """sum_t x[t], or sum_t x[t] * w[t][..., None] (w: x's shape less the
    last axis), each product rounded to float32, accumulated in float64."""
    __props__ = ('weighted',)

    def __init__(self, weighted=False):
        self.weighted = weighted

    def make_node(self, x, w=None):
        x = _as_f32(x)
        inputs = [x]
        if self.weighted:
            w = _as_f32(w)
            if w.ndim != x.ndim - 1:
                raise ValueError('w must have one axis fewer than x')
            inputs.append(w)
        out = tensor.TensorType(F32, x.broadcastable[1:])()
        return Apply(self, inputs, [out])

    def perform(self, node, inputs, outputs):
        x = inputs[0]
        if self.weighted:
            x = (x * inputs[1][..., None]).astype(F32)
        outputs[0][0] = x.sum(axis=0, dtype='float64').astype(F32)

    def infer_shape(self, fgraph, node, shapes):
        return [shapes[0][1:]]

    def L_op(self, inputs, outputs, output_grads):
        (g,) = output_grads
        x = inputs[0]
        if not self.weighted:
            return [tensor.alloc(g, *x.shape)]
        w = inputs[1]
        # the same expressions as the gradient of (x * w[..., None]).sum(0)
        g_rows = tensor.shape_padleft(g)
        return [g_rows * tensor.shape_padright(w), (g_rows * x).sum(axis=x.ndim - 1)]

    def c_code(self, node, name, inputs, outputs, sub):
        x = inputs[0]
        (out,) = outputs
        fail = sub['fail']
        nd = node.inputs[0].ndim
        code = '{\n' + _CONTIGUOUS % dict(dst='xc', src=x, fail=fail)
        if self.weighted:
            code += _CONTIGUOUS % dict(dst='wc', src=inputs[1],
                                       fail='Py_DECREF(xc); ' + fail)
        else:
            code += 'PyArrayObject* wc = NULL;\n'
        cleanup = 'Py_DECREF(xc); Py_XDECREF(wc);'
        return code + r"""
    {
    npy_intp rows = PyArray_DIMS(xc)[0];
    npy_intp m = 1, inner = %(nd)s > 1 ? PyArray_DIMS(xc)[%(nd)s - 1] : 1;
    for (int d = 1; d < %(nd)s; ++d) m *= PyArray_DIMS(xc)[d];
    if (wc != NULL && (PyArray_DIMS(wc)[0] != rows || (inner > 0 &&
                       PyArray_SIZE(wc) != rows * (m / inner)))) {
        PyErr_SetString(PyExc_ValueError, "sum_rows: w does not match x");
        %(cleanup)s %(fail)s
    }
""" % dict(nd=nd, cleanup=cleanup, fail=fail) + _ALLOC_OUT % dict(
            out=out, nd=nd - 1, dims='PyArray_DIMS(xc) + 1', fail=fail,
            cleanup=cleanup) + r"""
    double* acc = (double*)malloc((m > 0 ? m : 1) * sizeof(double));
    if (acc == NULL) { PyErr_NoMemory(); %(cleanup)s %(fail)s }
    nmt_sum_rows((const float*)PyArray_DATA(xc),
                 wc ? (const float*)PyArray_DATA(wc) : NULL,
                 (float*)PyArray_DATA(%(out)s), rows, m, inner > 0 ? inner : 1, acc);
    free(acc);
    %(cleanup)s
    }
}
""" % dict(out=out, cleanup=cleanup, fail=fail)


_tanh_add = TanhAdd()
_sum_rows = SumRows(False)
_weighted_sum_rows = SumRows(True)
_ENABLED = [True]


@contextlib.contextmanager
def original_graph():
    """Graphs built inside this block use Theano's own ops (the original)."""
    _ENABLED.append(False)
    try:
        yield
    finally:
        _ENABLED.pop()


def enabled():
    return _ENABLED[-1]


def tanh_add(a, b):
    """tanh(a + b[None]) (see the module's docstring)."""
    if not enabled():
        return tensor.tanh(a + tensor.shape_padleft(b))
    return _tanh_add(a, b)


def sum_rows(x, w=None):
    """sum over the first axis of x, or of x * w[..., None]."""
    if not enabled():
        return (x if w is None else x * tensor.shape_padright(w)).sum(0)
    return _sum_rows(x) if w is None else _weighted_sum_rows(x, w)
