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
import theano
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
extern "C" __m512d _ZGVeN8v_exp(__m512d);
#define NMT_W 16
#define NMT_TANH_BLOCK(src, dst) \
    _mm512_storeu_ps((dst), _ZGVeN16v_tanhf(_mm512_loadu_ps(src)))
#else
extern "C" __m256 _ZGVdN8v_tanhf(__m256);
extern "C" __m256d _ZGVdN4v_exp(__m256d);
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

/* One Adadelta step in place (REFERENCE.md section 6), float32:
   Eg2 = rho Eg2 + (1 - rho) g^2; dx = -sqrt(Edx2 + eps) / sqrt(Eg2 + eps) g;
   Edx2 = rho Edx2 + (1 - rho) dx^2; p += dx */
static void nmt_adadelta(float* p, float* eg2, float* edx2, const float* g,
                         npy_intp n, float rho, float eps)
{
    const float omr = 1.f - rho;
    for (npy_intp i = 0; i < n; ++i) {
        const float gi = g[i];
        const float e = rho * eg2[i] + omr * (gi * gi);
        const float dx = -sqrtf(edx2[i] + eps) / sqrtf(e + eps) * gi;
        eg2[i] = e;
        edx2[i] = rho * edx2[i] + omr * (dx * dx);
        p[i] += dx;
    }
}

/* z = expf(z) over n floats: exp in double precision (libmvec), rounded
   to float; equal to glibc's expf but in rare ties (both are within half
   an ulp of the exact value, or nearly so).  Scalar expf without libmvec. */
static void nmt_exp_inplace(float* z, npy_intp n)
{
    npy_intp j = 0;
#if defined(NMT_LIBMVEC) && defined(__AVX512F__)
    for (; j + 8 <= n; j += 8)
        _mm256_storeu_ps(z + j, _mm512_cvtpd_ps(
            _ZGVeN8v_exp(_mm512_cvtps_pd(_mm256_loadu_ps(z + j)))));
#elif defined(NMT_LIBMVEC) && defined(__AVX2__)
    for (; j + 4 <= n; j += 4)
        _mm_storeu_ps(z + j, _mm256_cvtpd_ps(
            _ZGVdN4v_exp(_mm256_cvtps_pd(_mm_loadu_ps(z + j)))));
#endif
    for (; j < n; ++j)
        z[j] = expf(z[j]);
}

/* Softmax of the row r = x + b as Theano's Softmax computes it: the max,
   e = exp(r - max) (left in buf), their sum in double; p_j = (float)(e_j *
   (1 / sum)).  The sum runs over 8 partial sums (vectorised); their order
   changes the double sum by a few units of 1e-16, not the float result. */
static void nmt_softmax_row(const float* x, const float* b, npy_intp V,
                            float* buf, float* rmax, double* sinv)
{
    for (npy_intp j = 0; j < V; ++j)
        buf[j] = x[j] + b[j];
    float m = buf[0];
    for (npy_intp j = 1; j < V; ++j)
        m = (buf[j] > m) ? buf[j] : m;
    for (npy_intp j = 0; j < V; ++j)
        buf[j] = buf[j] - m;
    nmt_exp_inplace(buf, V);
    double part[8] = {0., 0., 0., 0., 0., 0., 0., 0.};
    npy_intp j = 0;
    for (; j + 8 <= V; j += 8)
        for (int k = 0; k < 8; ++k)
            part[k] += buf[j + k];
    double sum = 0.;
    for (int k = 0; k < 8; ++k)
        sum += part[k];
    for (; j < V; ++j)
        sum += buf[j];
    *rmax = m;
    *sinv = 1.0 / sum;
}

/* dx = d cost / d logits of cost = -log p_y with upstream gradient g, as
   Theano's SoftmaxGrad computes it from dp = -g / p_y (zero elsewhere):
   dx_j = p_j (dp_j - s), s = dp_y p_y; db += dx.  buf: scratch, V floats. */
static void nmt_nll_grad_row(const float* x, const float* b, npy_intp V,
                             npy_int64 y, float g, float* buf, float* dx,
                             double* db)
{
    if (g == 0.f) {
        memset(dx, 0, V * sizeof(float));
        return;
    }
    float m;
    double sinv;
    nmt_softmax_row(x, b, V, buf, &m, &sinv);
    const float p_y = (float)(buf[y] * sinv);
    const float dy = (-g) / p_y;
    const float t = dy * p_y;
    const double s = t;
    const double db_y = db[y];
    for (npy_intp j = 0; j < V; ++j) {
        const float sm = (float)(buf[j] * sinv);
        const float d = (float)(0. - s * sm);
        dx[j] = d;
        db[j] += d;
    }
    /* the reference word: dx_y = t - s p_y */
    db[y] = db_y + (dx[y] = (float)((double)t - s * p_y));
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


class SoftmaxNll(_FastCOp):
    """-log softmax(x + b)[y] for every row of x (N, V), as the original
    computes it (Theano's Softmax, then -log of the probability).  Its
    gradient recomputes the probabilities instead of storing N x V of them."""
    __props__ = ()

    def make_node(self, x, b, y):
        x, b = _as_f32(x), _as_f32(b)
        y = tensor.as_tensor_variable(y)
        if x.ndim != 2 or b.ndim != 1 or y.ndim != 1 or y.dtype != 'int64':
            raise TypeError('softmax_nll takes x (N, V), b (V,) and int64 y (N,)')
        return Apply(self, [x, b, y], [tensor.fvector()])

    def perform(self, node, inputs, outputs):
        x, b, y = inputs
        p_y = _softmax_numpy(x, b)[numpy.arange(len(y)), y]
        outputs[0][0] = (-numpy.log(p_y)).astype(F32)

    def infer_shape(self, fgraph, node, shapes):
        return [(shapes[0][0],)]

    def connection_pattern(self, node):
        return [[True], [True], [False]]

    def L_op(self, inputs, outputs, output_grads):
        x, b, y = inputs
        dx, db = SoftmaxNllGrad()(output_grads[0], x, b, y)
        return [dx, db, theano.gradient.DisconnectedType()()]

    def c_code(self, node, name, inputs, outputs, sub):
        (cost,) = outputs
        return _output_layer_c_code(inputs, sub, r"""
    for (npy_intp i = 0; i < N && !bad_index; ++i) {
        const npy_int64 yi = Y[i];
        float m; double si;
        if (yi < 0 || yi >= V) { bad_index = 1; break; }
        nmt_softmax_row(X + i * V, B, V, buf, &m, &si);
        ((float*)PyArray_DATA(%(cost)s))[i] = -logf((float)(buf[yi] * si));
    }
""" % dict(cost=cost), [(cost, 'NPY_FLOAT32', '1', '&N')])


def _softmax_numpy(x, b):
    """Theano's softmax of x + b in NumPy (float32 values, double sums)."""
    r = (x + b).astype(F32)
    rmax = r.max(axis=1, keepdims=True) if r.shape[1] else numpy.zeros((len(r), 1), F32)
    e = numpy.exp((r - rmax).astype(F32)).astype(F32)
    return (e * (1. / e.sum(axis=1, dtype='float64'))[:, None]).astype(F32)


class SoftmaxNllGrad(_FastCOp):
    """Gradient of SoftmaxNll's cost: (d x (N, V), d b (V,))."""
    __props__ = ()

    def make_node(self, g, x, b, y):
        inputs = [_as_f32(g), _as_f32(x), _as_f32(b), tensor.as_tensor_variable(y)]
        return Apply(self, inputs, [tensor.fmatrix(), tensor.fvector()])

    def perform(self, node, inputs, outputs):
        g, x, b, y = inputs
        sm = _softmax_numpy(x, b)
        rows = numpy.arange(len(y))
        t = ((-g) / sm[rows, y]).astype(F32) * sm[rows, y]
        dx = -(t[:, None].astype('float64') * sm)
        dx[rows, y] += t
        dx[g == 0] = 0.
        outputs[0][0] = dx.astype(F32)
        outputs[1][0] = dx.astype(F32).sum(axis=0, dtype='float64').astype(F32)

    def infer_shape(self, fgraph, node, shapes):
        return [shapes[1], shapes[2]]

    def c_code(self, node, name, inputs, outputs, sub):
        g = inputs[0]
        dx, db = outputs
        return _output_layer_c_code(inputs[1:], sub, r"""
    double* acc = (double*)calloc(V > 0 ? V : 1, sizeof(double));
    if (acc == NULL) { free(buf); PyErr_NoMemory(); %(cleanup)s %(fail)s }
    for (npy_intp i = 0; i < N; ++i) {
        const npy_int64 yi = Y[i];
        if (yi < 0 || yi >= V) { bad_index = 1; break; }
        nmt_nll_grad_row(X + i * V, B, V, yi, ((float*)PyArray_DATA(%(g)s))[i], buf,
                         (float*)PyArray_DATA(%(dx)s) + i * V, acc);
    }
    for (npy_intp j = 0; j < V; ++j)
        ((float*)PyArray_DATA(%(db)s))[j] = (float)acc[j];
    free(acc);
""" % dict(g=g, dx=dx, db=db, fail=sub['fail'],
           cleanup='Py_DECREF(xc); Py_DECREF(bc); Py_DECREF(yc);'), [
            (dx, 'NPY_FLOAT32', '2', 'PyArray_DIMS(xc)'), (db, 'NPY_FLOAT32', '1', '&V')])


class AdadeltaStep(_FastCOp):
    """One Adadelta step of a parameter, in place: (p, Eg2, Edx2, g) ->
    (p, Eg2, Edx2) updated; one pass over the four arrays instead of
    Theano's several, which also allocated new arrays at every update."""
    __props__ = ('rho', 'eps')

    def __init__(self, rho, eps):
        self.rho, self.eps = float(rho), float(eps)
        self.destroy_map = {0: [0], 1: [1], 2: [2]}

    def make_node(self, p, eg2, edx2, g):
        inputs = [_as_f32(v) for v in (p, eg2, edx2, g)]
        return Apply(self, inputs, [v.type() for v in inputs[:3]])

    def perform(self, node, inputs, outputs):
        p, eg2, edx2, g = inputs
        rho, eps = numpy.float32(self.rho), numpy.float32(self.eps)
        eg2 *= rho
        eg2 += (numpy.float32(1.) - rho) * (g * g)
        dx = -numpy.sqrt(edx2 + eps) / numpy.sqrt(eg2 + eps) * g
        edx2 *= rho
        edx2 += (numpy.float32(1.) - rho) * (dx * dx)
        p += dx
        for out, v in zip(outputs, (p, eg2, edx2)):
            out[0] = v

    def infer_shape(self, fgraph, node, shapes):
        return shapes[:3]

    def c_code(self, node, name, inputs, outputs, sub):
        fail = sub['fail']
        code = '{\n' + _CONTIGUOUS % dict(dst='gc', src=inputs[3], fail=fail)
        names = ('pc', 'ec', 'dc')
        for i, (dst, src) in enumerate(zip(names, inputs[:3])):
            undo = ''.join('Py_DECREF(%s); ' % n for n in ('gc',) + names[:i])
            code += _CONTIGUOUS % dict(dst=dst, src=src, fail=undo + fail)
        code += r"""
    npy_intp n = PyArray_SIZE(pc);
    if (PyArray_SIZE(ec) != n || PyArray_SIZE(dc) != n || PyArray_SIZE(gc) != n) {
        PyErr_SetString(PyExc_ValueError, "adadelta_step: sizes differ");
        Py_DECREF(gc); Py_DECREF(pc); Py_DECREF(ec); Py_DECREF(dc); %(fail)s
    }
    nmt_adadelta((float*)PyArray_DATA(pc), (float*)PyArray_DATA(ec),
                 (float*)PyArray_DATA(dc), (const float*)PyArray_DATA(gc), n,
                 %(rho)r, %(eps)r);
""" % dict(fail=fail, rho=self.rho, eps=self.eps)
        for dst, src, out in zip(names, inputs[:3], outputs):
            # a non-contiguous input was copied: write the result back into it
            code += r"""
    if (%(dst)s != %(src)s && PyArray_CopyInto(%(src)s, %(dst)s) != 0) {
        Py_DECREF(%(dst)s); %(fail)s
    }
    Py_DECREF(%(dst)s);
    Py_XDECREF(%(out)s);
    %(out)s = %(src)s;
    Py_INCREF(%(out)s);
""" % dict(dst=dst, src=src, out=out, fail=fail)
        return code + 'Py_DECREF(gc);\n}\n'


def _output_layer_c_code(inputs, sub, body, allocations):
    """C code around an output-layer loop: contiguous x (N, V), b (V,) and
    y (N,) as X, B, Y; a scratch row buf; the outputs allocated; an index
    check."""
    x, b, y = inputs
    fail = sub['fail']
    cleanup = 'Py_DECREF(xc); Py_DECREF(bc); Py_DECREF(yc);'
    code = '{\n' + _CONTIGUOUS % dict(dst='xc', src=x, fail=fail)
    code += _CONTIGUOUS % dict(dst='bc', src=b, fail='Py_DECREF(xc); ' + fail)
    code += _CONTIGUOUS % dict(dst='yc', src=y, fail='Py_DECREF(xc); Py_DECREF(bc); ' + fail)
    code += r"""
    npy_intp N = PyArray_DIMS(xc)[0], V = PyArray_DIMS(xc)[1];
    if (PyArray_DIMS(bc)[0] != V || PyArray_DIMS(yc)[0] != N) {
        PyErr_SetString(PyExc_ValueError, "output layer: shapes of x, b, y differ");
        %(cleanup)s %(fail)s
    }
    const float* X = (const float*)PyArray_DATA(xc);
    const float* B = (const float*)PyArray_DATA(bc);
    const npy_int64* Y = (const npy_int64*)PyArray_DATA(yc);
    int bad_index = 0;
""" % dict(cleanup=cleanup, fail=fail)
    for out, typenum, nd, dims in allocations:
        code += _ALLOC_OUT.replace('NPY_FLOAT32', typenum) % dict(
            out=out, nd=nd, dims=dims, fail=fail, cleanup=cleanup)
    code += r"""
    float* buf = (float*)malloc((V > 0 ? V : 1) * sizeof(float));
    if (buf == NULL) { PyErr_NoMemory(); %(cleanup)s %(fail)s }
""" % dict(cleanup=cleanup, fail=fail)
    code += body + r"""
    free(buf);
    %(cleanup)s
    if (bad_index) {
        PyErr_SetString(PyExc_IndexError, "output layer: a word id is out of range");
        %(fail)s
    }
}
""" % dict(cleanup=cleanup, fail=fail)
    return code


_tanh_add = TanhAdd()
_sum_rows = SumRows(False)
_softmax_nll = SoftmaxNll()
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


def output_nll(hidden, W, b, y, y_mask):
    """-log p(y_t | ...) at every target position (T x n), p = softmax(hidden
    @ W + b) as the original computes it; 0 where y_mask is 0.  The fast
    graph computes the output layer only at the real positions, and the
    softmax, -log and their gradient in one op (no N x V probabilities kept,
    no N x V one-hot gradient)."""
    steps, n_samples = y.shape[0], y.shape[1]
    y_flat = y.flatten()
    if not enabled():
        logit = tensor.dot(hidden, W) + b
        probs = tensor.nnet.softmax(logit.reshape([steps * n_samples, W.shape[1]]))
        idx = tensor.arange(y_flat.shape[0]) * W.shape[1] + y_flat
        return -tensor.log(probs.flatten()[idx]).reshape([steps, n_samples])
    mask_flat = y_mask.flatten()
    rows = tensor.nonzero(mask_flat)[0]
    h = hidden.reshape([steps * n_samples, hidden.shape[2]])[rows]
    cost = _softmax_nll(tensor.dot(h, W), b, y_flat[rows])
    cost = tensor.set_subtensor(tensor.zeros_like(mask_flat)[rows], cost)
    return cost.reshape([steps, n_samples])


def adadelta_step(p, eg2, edx2, g, rho, eps):
    """(p, Eg2, Edx2) after one Adadelta step, computed in place (the
    function using it must be compiled with accept_inplace=True)."""
    return AdadeltaStep(rho, eps)(p, eg2, edx2, g)


def sum_rows(x, w=None):
    """sum over the first axis of x, or of x * w[..., None]."""
    if not enabled():
        return (x if w is None else x * tensor.shape_padright(w)).sum(0)
    return _sum_rows(x) if w is None else _weighted_sum_rows(x, w)
