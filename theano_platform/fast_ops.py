"""C ops for the hot spots of training and decoding on a CPU (the profiles
are in docs/speed.md), each computing what the Theano graph it replaces
computes, up to float32 rounding.

``attention(pctx, q, U_att, c_tt, cc, mask)``
    The source attention of a decoder step (docs/equations.md#attention).  Theano
    evaluated tanh over T_src x n x 2*dim values (8 million at the papers'
    size) with glibc's scalar ``tanhf`` (up to 2 ulp from the correctly
    rounded value, ~40 ns a value here), again in the gradient, and made
    ten passes over such arrays.  The op makes one pass (the gradient one
    more), skips masked source positions, and uses glibc's vector ``tanhf``
    (libmvec, AVX-512 or AVX2: at most 1 ulp off, ~100 times faster; the
    scalar ``tanhf`` where libmvec does not link).
``output_nll(hidden, W, b, y, y_mask)``
    -log p of the reference words: the 500 x V projection only at the real
    positions, then softmax and -log (as Theano's Softmax computes them) and
    their gradient in one op that keeps no N x V probabilities.
``adadelta_step(p, Eg2, Edx2, g, rho, eps)``
    One Adadelta update of a parameter in one in-place pass.
``log_softmax(x)``
    Decoding's log p of the next word from the logits, one pass a row.

Loops over large arrays run on OMP_NUM_THREADS threads (theano_env: every
core the process may use, one in worker processes that share the cores); threads change no number but the order of a few
double-precision sums.  Inside ``with original_graph():`` the functions
build Theano's own graph instead (the original code's), for comparisons;
so do they on a GPU (device=cuda: the ops are CPU code).  Decoding uses
``attention`` and ``log_softmax``: every op computes each sample (row) on
its own, in the same order whatever the batch, so a sentence gets the same
numbers in the batched and the one-sentence search.
The ops also have NumPy implementations (used by the Python linker).
"""
import contextlib
import functools
import hashlib
import inspect
import os

import numpy
from theano_platform import theano_env  # configures Theano before its import
import theano
import theano.tensor as tensor
from theano.compile import optdb
from theano.graph.basic import Apply
from theano.graph.op import COp
from theano.graph.opt import TopoOptimizer, local_optimizer

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
/* below this many values a loop runs on one thread (theano_env.PARALLEL_MIN);
   the number of threads is OMP_NUM_THREADS' */
#define NMT_PARALLEL_MIN """ + str(theano_env.PARALLEL_MIN) + r"""

/* the OpenMP threads of a loop over `values` values: all of them from
   NMT_PARALLEL_MIN values on, else one */
static int nmt_threads_over(npy_intp values)
{
    #ifdef _OPENMP
    if (values >= NMT_PARALLEL_MIN)
        return omp_get_max_threads();
    #endif
    return 1;
}

/* the calling OpenMP thread's number (0 without OpenMP) */
static int nmt_thread(void)
{
    #ifdef _OPENMP
    return omp_get_thread_num();
    #else
    return 0;
    #endif
}
#if defined(NMT_LIBMVEC) && (defined(__AVX512F__) || defined(__AVX2__))
#include <immintrin.h>
#if defined(__AVX512F__)
extern "C" __m512 _ZGVeN16v_tanhf(__m512);
extern "C" __m512 _ZGVeN16v_expf(__m512);
extern "C" __m512d _ZGVeN8v_exp(__m512d);
#define NMT_W 16
#define NMT_BLOCK(f, src, dst) \
    _mm512_storeu_ps((dst), _ZGVeN16v_##f(_mm512_loadu_ps(src)))
#else
extern "C" __m256 _ZGVdN8v_tanhf(__m256);
extern "C" __m256 _ZGVdN8v_expf(__m256);
extern "C" __m256d _ZGVdN4v_exp(__m256d);
#define NMT_W 8
#define NMT_BLOCK(f, src, dst) \
    _mm256_storeu_ps((dst), _ZGVdN8v_##f(_mm256_loadu_ps(src)))
#endif
#endif

/* z = f(z) over n contiguous floats with libmvec's vector f (tanhf or
   expf), by blocks of NMT_W (the tail goes through a padded block so that
   every value takes the same path); the scalar f without libmvec */
#ifdef NMT_W
#define NMT_VECTOR_INPLACE(f, z, n) do { \
    npy_intp j_ = 0; \
    for (; j_ + NMT_W <= (n); j_ += NMT_W) \
        NMT_BLOCK(f, (z) + j_, (z) + j_); \
    if (j_ < (n)) { \
        float buf_[NMT_W] = {0.f}; \
        memcpy(buf_, (z) + j_, ((n) - j_) * sizeof(float)); \
        NMT_BLOCK(f, buf_, buf_); \
        memcpy((z) + j_, buf_, ((n) - j_) * sizeof(float)); \
    } \
} while (0)
#else
#define NMT_VECTOR_INPLACE(f, z, n) do { \
    for (npy_intp j_ = 0; j_ < (n); ++j_) \
        (z)[j_] = f((z)[j_]); \
} while (0)
#endif

static void nmt_tanh_inplace(float* z, npy_intp n) { NMT_VECTOR_INPLACE(tanhf, z, n); }
static void nmt_expf_inplace(float* z, npy_intp n) { NMT_VECTOR_INPLACE(expf, z, n); }

/* float dot product of n floats (16 partial sums: vectorised) */
static inline float nmt_dot(const float* a, const float* b, npy_intp n)
{
    float part[16] = {0.f};
    npy_intp j = 0;
    for (; j + 16 <= n; j += 16)
        for (int k = 0; k < 16; ++k)
            part[k] += a[j + k] * b[j + k];
    float s = 0.f;
    for (int k = 0; k < 16; ++k)
        s += part[k];
    for (; j < n; ++j)
        s += a[j] * b[j];
    return s;
}

/* Source attention of sample n (docs/equations.md#attention): for each source
   position i, y = tanh(pctx[i,n] + q), e = y . U + c, a = exp(e) m[i,n],
   alpha_i = a / sum_i a; ctx = sum_i alpha_i cc[i,n].  Rows with m = 0 get
   alpha = 0 without computing y.  T rows, N samples, k = len(q), K2 =
   len(cc[i,n]); q: the sample's query; alpha: its first weight, the next
   astep floats on; ctx: its K2 outputs; y: scratch of k floats, acc: of K2
   doubles. */
static void nmt_attention_sample(
    const float* pctx, const float* qn, const float* U, float c, const float* cc,
    const float* mask, npy_intp T, npy_intp N, npy_intp k, npy_intp K2,
    npy_intp n, float* alpha, npy_intp astep, float* ctx, float* y, double* acc)
{
    double sum = 0.;
    for (npy_intp i = 0; i < T; ++i) {
        const float m = mask ? mask[i * N + n] : 1.f;
        float a = 0.f;
        if (m != 0.f) {
            const float* p = pctx + (i * N + n) * k;
            for (npy_intp j = 0; j < k; ++j)
                y[j] = p[j] + qn[j];
            nmt_tanh_inplace(y, k);
            a = expf(nmt_dot(y, U, k) + c) * m;
        }
        alpha[i * astep] = a;
        sum += a;
    }
    const float total = (float)sum;
    for (npy_intp j = 0; j < K2; ++j)
        acc[j] = 0.;
    for (npy_intp i = 0; i < T; ++i) {
        const float al = alpha[i * astep] / total;
        alpha[i * astep] = al;
        if (al == 0.f)
            continue;
        const float* ci = cc + (i * N + n) * K2;
        for (npy_intp j = 0; j < K2; ++j) {
            const float w = ci[j] * al;
            acc[j] += (double)w;
        }
    }
    for (npy_intp j = 0; j < K2; ++j)
        ctx[j] = (float)acc[j];
}

/* Its gradient for sample n, from gc = d ctx (K2) and g_alpha (or none; its
   weights gastep floats apart): s_i = g_alpha_i + gc . cc[i,n]; d cc[i,n] =
   alpha_i gc; d e_i = alpha_i (s_i - sum_j alpha_j s_j); d pre = d e_i U (1 -
   y^2) = d pctx[i,n], summed over i into d_q (k); d U += d e_i y; d c +=
   d e_i (returned).  accumulate: d pctx and d cc are added to (else written).
   y: scratch of k floats; gq: k doubles; gU: k doubles (this thread's); s: T
   floats. */
static double nmt_attention_grad_sample(
    const float* pctx, const float* qn, const float* U, const float* cc,
    const float* mask, const float* alpha, npy_intp astep, const float* gc,
    const float* g_alpha, npy_intp gastep, npy_intp T, npy_intp N, npy_intp k,
    npy_intp K2, npy_intp n, float* d_pctx, float* d_q, float* d_cc, int accumulate,
    float* y, double* gq, double* gU, float* s)
{
    double sa = 0.;
    for (npy_intp i = 0; i < T; ++i) {
        const float al = alpha[i * astep];
        const float* ci = cc + (i * N + n) * K2;
        float* di = d_cc + (i * N + n) * K2;
        if (accumulate) {
            if (al != 0.f)
                for (npy_intp j = 0; j < K2; ++j)
                    di[j] += al * gc[j];
        } else {
            for (npy_intp j = 0; j < K2; ++j)
                di[j] = al * gc[j];
        }
        s[i] = (al != 0.f) ? (g_alpha ? g_alpha[i * gastep] : 0.f) + nmt_dot(gc, ci, K2)
                           : 0.f;
        sa += (double)al * s[i];
    }
    for (npy_intp j = 0; j < k; ++j)
        gq[j] = 0.;
    double gc_sum = 0.;
    for (npy_intp i = 0; i < T; ++i) {
        const float al = alpha[i * astep];
        float* dp = d_pctx + (i * N + n) * k;
        const float de = (float)(al * (s[i] - sa));
        const float m = mask ? mask[i * N + n] : 1.f;
        if (de == 0.f || m == 0.f) {
            if (!accumulate)
                memset(dp, 0, k * sizeof(float));
            continue;
        }
        const float* p = pctx + (i * N + n) * k;
        for (npy_intp j = 0; j < k; ++j)
            y[j] = p[j] + qn[j];
        nmt_tanh_inplace(y, k);
        for (npy_intp j = 0; j < k; ++j) {
            const float g = de * U[j] * (1.f - y[j] * y[j]);
            if (accumulate)
                dp[j] += g;
            else
                dp[j] = g;
            gq[j] += g;
            gU[j] += (double)(de * y[j]);
        }
        gc_sum += de;
    }
    for (npy_intp j = 0; j < k; ++j)
        d_q[j] = (float)gq[j];
    return gc_sum;
}

/* One Adadelta step in place (docs/equations.md#adadelta), float32:
   Eg2 = rho Eg2 + (1 - rho) g^2; dx = -sqrt(Edx2 + eps) / sqrt(Eg2 + eps) g;
   Edx2 = rho Edx2 + (1 - rho) dx^2; p += dx */
static void nmt_adadelta(float* p, float* eg2, float* edx2, const float* g,
                         npy_intp n, float rho, float eps)
{
    const float omr = 1.f - rho;
    #pragma omp parallel for schedule(static) if (n >= NMT_PARALLEL_MIN)
    for (npy_intp i = 0; i < n; ++i) {
        const float gi = g[i];
        const float e = rho * eg2[i] + omr * (gi * gi);
        const float dx = -sqrtf(edx2[i] + eps) / sqrtf(e + eps) * gi;
        eg2[i] = e;
        edx2[i] = rho * edx2[i] + omr * (dx * dx);
        p[i] += dx;
    }
}

/* One Adam step in place (optimizers.adam): m = b1 m + omb1 g; v = b2 v +
   omb2 g^2; p -= lr_t m / (e + sqrt(v)), float32 as Theano's graph */
static void nmt_adam(float* p, float* m, float* v, const float* g, npy_intp n, float lr_t,
                     float b1, float omb1, float b2, float omb2, float e)
{
    #pragma omp parallel for schedule(static) if (n >= NMT_PARALLEL_MIN)
    for (npy_intp i = 0; i < n; ++i) {
        const float gi = g[i];
        const float mi = b1 * m[i] + omb1 * gi;
        const float vi = b2 * v[i] + omb2 * (gi * gi);
        m[i] = mi;
        v[i] = vi;
        p[i] = p[i] - (lr_t * mi) / (e + sqrtf(vi));
    }
}

/* the sum of the squares (each rounded to float) of n floats, in doubles:
   each chunk of NMT_CHUNK values over 8 partial sums, the chunks' sums in
   order (on OMP_NUM_THREADS threads; the same sum on any number) */
#define NMT_CHUNK 65536
static double nmt_chunk_squares(const float* x, npy_intp n)
{
    double part[8] = {0., 0., 0., 0., 0., 0., 0., 0.};
    npy_intp j = 0;
    for (; j + 8 <= n; j += 8)
        for (int k = 0; k < 8; ++k) {
            const float sq = x[j + k] * x[j + k];
            part[k] += sq;
        }
    double sum = 0.;
    for (int k = 0; k < 8; ++k)
        sum += part[k];
    for (; j < n; ++j) {
        const float sq = x[j] * x[j];
        sum += sq;
    }
    return sum;
}

static double nmt_sum_squares(const float* x, npy_intp n)
{
    const npy_intp chunks = (n + NMT_CHUNK - 1) / NMT_CHUNK;
    if (chunks <= 1)
        return nmt_chunk_squares(x, n);
    double* sums = (double*)malloc(chunks * sizeof(double));
    if (sums == NULL)
        return NAN;   /* shows in the norm, never silently */
    #pragma omp parallel for schedule(static) if (n >= NMT_PARALLEL_MIN)
    for (npy_intp c = 0; c < chunks; ++c) {
        const npy_intp a = c * NMT_CHUNK;
        sums[c] = nmt_chunk_squares(x + a, n - a < NMT_CHUNK ? n - a : NMT_CHUNK);
    }
    double sum = 0.;
    for (npy_intp c = 0; c < chunks; ++c)
        sum += sums[c];
    free(sums);
    return sum;
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

/* the sum of n floats in double, over 8 partial sums (vectorised); their
   order changes the sum by a few units of 1e-16, not a float result */
static double nmt_sum(const float* buf, npy_intp n)
{
    double part[8] = {0., 0., 0., 0., 0., 0., 0., 0.};
    npy_intp j = 0;
    for (; j + 8 <= n; j += 8)
        for (int k = 0; k < 8; ++k)
            part[k] += buf[j + k];
    double sum = 0.;
    for (int k = 0; k < 8; ++k)
        sum += part[k];
    for (; j < n; ++j)
        sum += buf[j];
    return sum;
}

/* the largest of n > 0 floats, over 16 partial maxima (vectorised; the
   maximum does not depend on the order) */
static float nmt_max(const float* x, npy_intp n)
{
    float part[16];
    for (int k = 0; k < 16; ++k)
        part[k] = x[0];
    npy_intp j = 0;
    for (; j + 16 <= n; j += 16)
        for (int k = 0; k < 16; ++k)
            part[k] = (x[j + k] > part[k]) ? x[j + k] : part[k];
    float m = x[0];
    for (int k = 0; k < 16; ++k)
        m = (part[k] > m) ? part[k] : m;
    for (; j < n; ++j)
        m = (x[j] > m) ? x[j] : m;
    return m;
}

/* Softmax of the row r = x + b as Theano's Softmax computes it: the max,
   e = exp(r - max) (left in buf), their sum in double; p_j = (float)(e_j *
   (1 / sum)). */
static void nmt_softmax_row(const float* x, const float* b, npy_intp V,
                            float* buf, float* rmax, double* sinv)
{
    for (npy_intp j = 0; j < V; ++j)
        buf[j] = x[j] + b[j];
    const float m = nmt_max(buf, V);
    for (npy_intp j = 0; j < V; ++j)
        buf[j] = buf[j] - m;
    nmt_exp_inplace(buf, V);
    *rmax = m;
    *sinv = 1.0 / nmt_sum(buf, V);
}

/* log softmax(x) of a row (decoding's log p): r = x - max, out = r -
   log(sum exp(r)), exp by the vector expf (the terms only enter the double
   sum).  buf: V floats. */
static void nmt_log_softmax_row(const float* x, npy_intp V, float* buf, float* out)
{
    const float m = nmt_max(x, V);
    for (npy_intp j = 0; j < V; ++j)
        buf[j] = x[j] - m;
    nmt_expf_inplace(buf, V);
    const float log_sum = (float)log(nmt_sum(buf, V));
    for (npy_intp j = 0; j < V; ++j)
        out[j] = (x[j] - m) - log_sum;
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
        return ['<math.h>', '<string.h>', '<stdlib.h>', '<omp.h>']

    def c_compile_args(self, **kwargs):
        return ['-O3', '-fopenmp'] + libmvec_flags()

    def c_libraries(self, **kwargs):
        return ['mvec'] if libmvec_flags() else []

    def c_code_cache_version(self):
        # with the digest of the op's class and support code: Theano reuses a
        # module whose key it knows, so an edit of the C must change the key
        return (6, bool(libmvec_flags()), _c_digest(type(self), self.c_support_code()))


@functools.lru_cache(maxsize=None)
def _c_digest(op_class, support_code):
    """A digest of an op's C: its class's source (its c_code) and its
    support code."""
    try:
        source = inspect.getsource(op_class)
    except (OSError, TypeError):    # no source file: the class's name alone
        source = op_class.__qualname__
    return hashlib.sha256((source + support_code).encode()).hexdigest()[:16]


def _as_f32(x):
    x = tensor.as_tensor_variable(x)
    if x.dtype != F32:
        raise TypeError('fast ops take float32 tensors, not %s' % x.dtype)
    return x


class SourceAttention(_FastCOp):
    """The source attention of one decoder step in one op: (pctx (T, N, k),
    q (N, k), U_att (k, 1), c_tt (1,), cc (T, N, K2)[, mask (T, N)]) ->
    (ctx (N, K2), alpha (T, N)); see ``attention``."""
    __props__ = ('has_mask',)

    def __init__(self, has_mask):
        self.has_mask = bool(has_mask)

    def make_node(self, pctx, q, U, c, cc, mask=None):
        inputs = [_as_f32(v) for v in (pctx, q, U, c, cc)]
        if self.has_mask:
            inputs.append(_as_f32(mask))
        if [v.ndim for v in inputs] != [3, 2, 2, 1, 3] + [2] * self.has_mask:
            raise TypeError('attention takes pctx (T, N, k), q (N, k), U (k, 1), '
                            'c (1,), cc (T, N, K2)[, mask (T, N)]')
        return Apply(self, inputs, [tensor.fmatrix(), tensor.fmatrix()])

    def perform(self, node, inputs, outputs):
        pctx, q, U, c, cc = inputs[:5]
        mask = inputs[5] if self.has_mask else numpy.ones(pctx.shape[:2], F32)
        y = numpy.tanh(pctx + q[None]).astype(F32)
        a = (numpy.exp(((y @ U)[..., 0] + c).astype(F32)) * mask).astype(F32)
        alpha = (a / a.sum(0, dtype='float64').astype(F32)).astype(F32)
        outputs[0][0] = (cc * alpha[..., None]).astype(F32).sum(
            0, dtype='float64').astype(F32)
        outputs[1][0] = alpha

    def infer_shape(self, fgraph, node, shapes):
        return [(shapes[0][1], shapes[4][2]), shapes[0][:2]]

    def L_op(self, inputs, outputs, output_grads):
        g_ctx, g_alpha = output_grads
        ctx, alpha = outputs
        if isinstance(g_ctx.type, theano.gradient.DisconnectedType):
            g_ctx = tensor.zeros_like(ctx)
        has_galpha = not isinstance(g_alpha.type, theano.gradient.DisconnectedType)
        args = [inputs[0], inputs[1], inputs[2], inputs[4]] + inputs[5:] + [alpha, g_ctx]
        grads = SourceAttentionGrad(self.has_mask, has_galpha)(
            *(args + ([g_alpha] if has_galpha else [])))
        d_pctx, d_q, d_U, d_c, d_cc = grads
        out = [d_pctx, d_q, d_U, d_c, d_cc]
        if self.has_mask:
            out.append(theano.gradient.grad_not_implemented(
                self, 5, inputs[5], 'the attention mask is data'))
        return out

    def c_code(self, node, name, inputs, outputs, sub):
        mask = inputs[5] if self.has_mask else None
        return _attention_forward_c(inputs[:5] + [mask], outputs, sub)


class SourceAttentionGrad(_FastCOp):
    """Gradient of SourceAttention: (d pctx, d q, d U_att, d c_tt, d cc)."""
    __props__ = ('has_mask', 'has_galpha')

    def __init__(self, has_mask, has_galpha):
        self.has_mask, self.has_galpha = bool(has_mask), bool(has_galpha)

    def make_node(self, pctx, q, U, cc, *rest):
        inputs = [_as_f32(v) for v in (pctx, q, U, cc) + rest]
        outputs = [tensor.ftensor3(), tensor.fmatrix(), tensor.fmatrix(),
                   tensor.fvector(), tensor.ftensor3()]
        return Apply(self, inputs, outputs)

    def _split(self, inputs):
        pctx, q, U, cc = inputs[:4]
        rest = list(inputs[4:])
        mask = rest.pop(0) if self.has_mask else None
        alpha, g_ctx = rest[0], rest[1]
        g_alpha = rest[2] if self.has_galpha else None
        return pctx, q, U, cc, mask, alpha, g_ctx, g_alpha

    def perform(self, node, inputs, outputs):
        pctx, q, U, cc, mask, alpha, g_ctx, g_alpha = self._split(inputs)
        live = alpha != 0
        s = numpy.einsum('nk,ink->in', g_ctx, cc).astype(F32)
        if g_alpha is not None:
            s = (s + g_alpha).astype(F32)
        s = numpy.where(live, s, 0).astype(F32)
        sa = (alpha.astype('float64') * s).sum(0)
        de = (alpha * (s - sa)).astype(F32)
        if mask is not None:
            de[mask == 0] = 0.
        y = numpy.tanh(pctx + q[None]).astype(F32)
        d_pre = (de[..., None] * U[:, 0] * (1 - y * y)).astype(F32)
        outputs[0][0] = d_pre
        outputs[1][0] = d_pre.sum(0, dtype='float64').astype(F32)
        outputs[2][0] = (de[..., None] * y).astype(F32).sum(
            (0, 1), dtype='float64').astype(F32)[:, None]
        outputs[3][0] = numpy.array([de.sum(dtype='float64')], F32)
        outputs[4][0] = (alpha[..., None] * g_ctx[None]).astype(F32)

    def infer_shape(self, fgraph, node, shapes):
        return [shapes[0], shapes[1], shapes[2], (1,), shapes[3]]

    def c_code(self, node, name, inputs, outputs, sub):
        return _attention_backward_c(list(self._split(inputs)), outputs, sub)


def _contiguous(pairs, fail):
    """C declaring contiguous copies (dst, src) of inputs (NULL where src is
    None), and the C releasing them all."""
    code, done = '', []
    for dst, src in pairs:
        if src is None:
            code += 'PyArrayObject* %s = NULL;\n' % dst
        else:
            undo = ''.join('Py_XDECREF(%s); ' % d for d in done)
            code += _CONTIGUOUS % dict(dst=dst, src=src, fail=undo + fail)
        done.append(dst)
    return code, ''.join('Py_XDECREF(%s); ' % d for d in done)


_ATTENTION_CHECKS = r"""
    npy_intp T = PyArray_DIMS(pc)[0], N = PyArray_DIMS(pc)[1], k = PyArray_DIMS(pc)[2];
    npy_intp K2 = PyArray_DIMS(ccc)[2];
    if (PyArray_DIMS(qc)[0] != N || PyArray_DIMS(qc)[1] != k || PyArray_SIZE(uc) != k ||
        PyArray_DIMS(ccc)[0] != T || PyArray_DIMS(ccc)[1] != N ||
        (mc && (PyArray_DIMS(mc)[0] != T || PyArray_DIMS(mc)[1] != N))) {
        PyErr_SetString(PyExc_ValueError, "attention: shapes do not match");
        %(cleanup)s %(fail)s
    }
    const float* M = mc ? (const float*)PyArray_DATA(mc) : NULL;
    int no_memory = 0;
"""


def _attention_forward_c(inputs, outputs, sub):
    pctx, q, U, c, cc, mask = inputs
    ctx, alpha = outputs
    fail = sub['fail']
    code, cleanup = _contiguous([('pc', pctx), ('qc', q), ('uc', U), ('cvc', c),
                                 ('ccc', cc), ('mc', mask)], fail)
    code = '{\n' + code + _ATTENTION_CHECKS % dict(cleanup=cleanup, fail=fail)
    code += r"""
    npy_intp ctx_dims[2] = {N, K2};
    npy_intp alpha_dims[2] = {T, N};
"""
    for out, dims in ((ctx, 'ctx_dims'), (alpha, 'alpha_dims')):
        code += _ALLOC_OUT % dict(out=out, nd=2, dims=dims, fail=fail, cleanup=cleanup)
    code += r"""
    const float cv = PyArray_SIZE(cvc) > 0 ? ((const float*)PyArray_DATA(cvc))[0] : 0.f;
    #pragma omp parallel if (T * N * k >= NMT_PARALLEL_MIN)
    {
        float* y = (float*)malloc((k > 0 ? k : 1) * sizeof(float));
        double* acc = (double*)malloc((K2 > 0 ? K2 : 1) * sizeof(double));
        #pragma omp for schedule(static)
        for (npy_intp n = 0; n < N; ++n) {
            if (y == NULL || acc == NULL) { no_memory = 1; continue; }
            nmt_attention_sample((const float*)PyArray_DATA(pc),
                                 (const float*)PyArray_DATA(qc) + n * k,
                                 (const float*)PyArray_DATA(uc), cv,
                                 (const float*)PyArray_DATA(ccc), M, T, N, k, K2, n,
                                 (float*)PyArray_DATA(%(alpha)s) + n, N,
                                 (float*)PyArray_DATA(%(ctx)s) + n * K2, y, acc);
        }
        free(y); free(acc);
    }
    %(cleanup)s
    if (no_memory) { PyErr_NoMemory(); %(fail)s }
}
""" % dict(alpha=alpha, ctx=ctx, cleanup=cleanup, fail=fail)
    return code


def _attention_backward_c(inputs, outputs, sub):
    pctx, q, U, cc, mask, alpha, g_ctx, g_alpha = inputs
    d_pctx, d_q, d_U, d_c, d_cc = outputs
    fail = sub['fail']
    code, cleanup = _contiguous([('pc', pctx), ('qc', q), ('uc', U), ('ccc', cc),
                                 ('mc', mask), ('ac', alpha), ('gcc', g_ctx),
                                 ('gac', g_alpha)], fail)
    code = '{\n' + code + _ATTENTION_CHECKS % dict(cleanup=cleanup, fail=fail)
    code += r"""
    npy_intp dq_dims[2] = {N, k}, du_dims[2] = {k, 1}, dc_dims[1] = {1};
"""
    for out, nd, dims in ((d_pctx, 3, 'PyArray_DIMS(pc)'), (d_q, 2, 'dq_dims'),
                          (d_U, 2, 'du_dims'), (d_c, 1, 'dc_dims'),
                          (d_cc, 3, 'PyArray_DIMS(ccc)')):
        code += _ALLOC_OUT % dict(out=out, nd=nd, dims=dims, fail=fail, cleanup=cleanup)
    code += r"""
    const int nt = nmt_threads_over(T * N * k);
    /* each thread sums its samples' d U and d c in its own doubles */
    double* gU = (double*)calloc((size_t)nt * (k > 0 ? k : 1), sizeof(double));
    double* gcs = (double*)calloc(nt, sizeof(double));
    if (gU == NULL || gcs == NULL) {
        free(gU); free(gcs); PyErr_NoMemory(); %(cleanup)s %(fail)s
    }
    #pragma omp parallel num_threads(nt)
    {
        const int tid = nmt_thread();
        float* y = (float*)malloc((k > 0 ? k : 1) * sizeof(float));
        double* gq = (double*)malloc((k > 0 ? k : 1) * sizeof(double));
        float* s = (float*)malloc((T > 0 ? T : 1) * sizeof(float));
        #pragma omp for schedule(static)
        for (npy_intp n = 0; n < N; ++n) {
            if (y == NULL || gq == NULL || s == NULL) { no_memory = 1; continue; }
            gcs[tid] += nmt_attention_grad_sample(
                (const float*)PyArray_DATA(pc), (const float*)PyArray_DATA(qc) + n * k,
                (const float*)PyArray_DATA(uc), (const float*)PyArray_DATA(ccc), M,
                (const float*)PyArray_DATA(ac) + n, N,
                (const float*)PyArray_DATA(gcc) + n * K2,
                gac ? (const float*)PyArray_DATA(gac) + n : NULL, N, T, N, k, K2, n,
                (float*)PyArray_DATA(%(d_pctx)s), (float*)PyArray_DATA(%(d_q)s) + n * k,
                (float*)PyArray_DATA(%(d_cc)s), 0, y, gq, gU + (size_t)tid * k, s);
        }
        free(y); free(gq); free(s);
    }
    for (npy_intp j = 0; j < k; ++j) {
        double sum = 0.;
        for (int t = 0; t < nt; ++t)
            sum += gU[(size_t)t * k + j];
        ((float*)PyArray_DATA(%(d_U)s))[j] = (float)sum;
    }
    double csum = 0.;
    for (int t = 0; t < nt; ++t)
        csum += gcs[t];
    ((float*)PyArray_DATA(%(d_c)s))[0] = (float)csum;
    free(gU); free(gcs);
    %(cleanup)s
    if (no_memory) { PyErr_NoMemory(); %(fail)s }
}
""" % dict(d_pctx=d_pctx, d_q=d_q, d_U=d_U, d_c=d_c, d_cc=d_cc, cleanup=cleanup, fail=fail)
    return code


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
    #pragma omp parallel if (N * V >= NMT_PARALLEL_MIN)
    {
        float* buf = (float*)malloc((V > 0 ? V : 1) * sizeof(float));
        #pragma omp for schedule(static)
        for (npy_intp i = 0; i < N; ++i) {
            const npy_int64 yi = Y[i];
            float m; double si;
            if (buf == NULL || yi < 0 || yi >= V) { bad_index = 1; continue; }
            nmt_softmax_row(X + i * V, B, V, buf, &m, &si);
            ((float*)PyArray_DATA(%(cost)s))[i] = -logf((float)(buf[yi] * si));
        }
        free(buf);
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
    /* each thread sums its rows' d b in its own double array */
    const int nt = nmt_threads_over(N * V);
    double* acc = (double*)calloc((size_t)nt * (V > 0 ? V : 1), sizeof(double));
    if (acc == NULL) { PyErr_NoMemory(); %(cleanup)s %(fail)s }
    #pragma omp parallel num_threads(nt)
    {
        const int tid = nmt_thread();
        float* buf = (float*)malloc((V > 0 ? V : 1) * sizeof(float));
        #pragma omp for schedule(static)
        for (npy_intp i = 0; i < N; ++i) {
            const npy_int64 yi = Y[i];
            if (buf == NULL || yi < 0 || yi >= V) { bad_index = 1; continue; }
            nmt_nll_grad_row(X + i * V, B, V, yi, ((float*)PyArray_DATA(%(g)s))[i], buf,
                             (float*)PyArray_DATA(%(dx)s) + i * V, acc + (size_t)tid * V);
        }
        free(buf);
    }
    for (npy_intp j = 0; j < V; ++j) {
        double sum = 0.;
        for (int k = 0; k < nt; ++k)
            sum += acc[(size_t)k * V + j];
        ((float*)PyArray_DATA(%(db)s))[j] = (float)sum;
    }
    free(acc);
""" % dict(g=g, dx=dx, db=db, fail=sub['fail'],
           cleanup='Py_DECREF(xc); Py_DECREF(bc); Py_DECREF(yc);'), [
            (dx, 'NPY_FLOAT32', '2', 'PyArray_DIMS(xc)'), (db, 'NPY_FLOAT32', '1', '&V')])


class LogSoftmax(_FastCOp):
    """log softmax of every row of x (N, V): decoding's log p of the next
    word from the logits, one pass over each row (no gradient)."""
    __props__ = ()

    def make_node(self, x):
        x = _as_f32(x)
        if x.ndim != 2:
            raise TypeError('log_softmax takes x (N, V)')
        return Apply(self, [x], [tensor.fmatrix()])

    def perform(self, node, inputs, outputs):
        outputs[0][0] = _log_softmax_numpy(inputs[0])

    def infer_shape(self, fgraph, node, shapes):
        return shapes

    def c_code(self, node, name, inputs, outputs, sub):
        (x,), (out,), fail = inputs, outputs, sub['fail']
        code, cleanup = _contiguous([('xc', x)], fail)
        code = '{\n' + code + r"""
    npy_intp N = PyArray_DIMS(xc)[0], V = PyArray_DIMS(xc)[1];
    npy_intp dims[2] = {N, V};
    int no_memory = 0;
"""
        code += _ALLOC_OUT % dict(out=out, nd=2, dims='dims', fail=fail, cleanup=cleanup)
        return code + r"""
    #pragma omp parallel if (N * V >= NMT_PARALLEL_MIN)
    {
        float* buf = (float*)malloc((V > 0 ? V : 1) * sizeof(float));
        #pragma omp for schedule(static)
        for (npy_intp i = 0; i < N; ++i) {
            if (buf == NULL) { no_memory = 1; continue; }
            if (V > 0)
                nmt_log_softmax_row((const float*)PyArray_DATA(xc) + i * V, V, buf,
                                    (float*)PyArray_DATA(%(out)s) + i * V);
        }
        free(buf);
    }
    %(cleanup)s
    if (no_memory) { PyErr_NoMemory(); %(fail)s }
}
""" % dict(out=out, cleanup=cleanup, fail=fail)


def _log_softmax_numpy(x):
    """log softmax of the rows of x in NumPy (float32 values, double sums)."""
    r = (x - x.max(axis=1, keepdims=True)).astype(F32) if x.shape[1] else x.astype(F32)
    log_sum = numpy.log(numpy.exp(r).sum(axis=1, dtype='float64', keepdims=True))
    return (r - log_sum.astype(F32)).astype(F32)


class _InPlaceStep(_FastCOp):
    """An optimizer's step of one parameter: (p, acc1, acc2, g, *scalars) ->
    (p, acc1, acc2) updated in one pass.  Built out of place; in FAST_RUN an
    optimizer of Theano's inplace phase (like its own for Gemm or
    IncSubtensor) makes it update the shared variables' arrays in place:
    Theano's own graph allocated new arrays for all of them at every update.
    (An in-place op in the graph from the start makes every optimizer step
    validate the destroy map: minutes of compile time.)  A subclass names
    its C function (LOOP, called as LOOP(p, acc1, acc2, g, n, *scalars,
    *constants)), its constants and its NumPy step."""
    SCALARS = ()

    def _init_inplace(self, inplace):
        self.inplace = bool(inplace)
        if self.inplace:
            self.destroy_map = {0: [0], 1: [1], 2: [2]}

    def as_inplace(self):
        return type(self)(*[getattr(self, k) for k in self.__props__[:-1]], inplace=True)

    def constants(self):
        """The C values of the op's constants, after the scalars."""
        return [repr(float(getattr(self, k))) + 'f' for k in self.__props__[:-1]]

    def make_node(self, p, acc1, acc2, g, *scalars):
        inputs = [_as_f32(v) for v in (p, acc1, acc2, g)]
        scalars = [_as_f32(v) for v in scalars]
        if len(scalars) != len(self.SCALARS) or any(v.ndim != 0 for v in scalars):
            raise TypeError('%s takes the scalars %s' % (type(self).__name__, self.SCALARS))
        return Apply(self, inputs + scalars, [v.type() for v in inputs[:3]])

    def perform(self, node, inputs, outputs):
        p, acc1, acc2 = inputs[:3]
        if not self.inplace:
            p, acc1, acc2 = p.copy(), acc1.copy(), acc2.copy()
        self.numpy_step(p, acc1, acc2, inputs[3], *inputs[4:])
        for out, v in zip(outputs, (p, acc1, acc2)):
            out[0] = v

    def infer_shape(self, fgraph, node, shapes):
        return shapes[:3]

    def c_code(self, node, name, inputs, outputs, sub):
        fail = sub['fail']
        names = ('pc', 'ec', 'dc')
        code, cleanup = _contiguous([('gc', inputs[3])], fail)
        code = '{\n' + code
        for i, (dst, src, out) in enumerate(zip(names, inputs[:3], outputs)):
            undo = cleanup + ''.join('Py_DECREF(%s); ' % n for n in names[:i])
            if self.inplace:   # work on the input (a contiguous copy if need be)
                code += _CONTIGUOUS % dict(dst=dst, src=src, fail=undo + fail)
            else:              # work on a new array, a copy of the input
                code += r"""
    PyArrayObject* %(dst)s = (PyArrayObject*)PyArray_NewCopy(%(src)s, NPY_CORDER);
    if (%(dst)s == NULL) { %(undo)s %(fail)s }
""" % dict(dst=dst, src=src, undo=undo, fail=fail)
        args = ['((const float*)PyArray_DATA(%s))[0]' % v for v in inputs[4:]]
        code += r"""
    npy_intp n = PyArray_SIZE(pc);
    if (PyArray_SIZE(ec) != n || PyArray_SIZE(dc) != n || PyArray_SIZE(gc) != n) {
        PyErr_SetString(PyExc_ValueError, "%(name)s: sizes differ");
        %(cleanup)s Py_DECREF(pc); Py_DECREF(ec); Py_DECREF(dc); %(fail)s
    }
    %(loop)s((float*)PyArray_DATA(pc), (float*)PyArray_DATA(ec),
             (float*)PyArray_DATA(dc), (const float*)PyArray_DATA(gc), n, %(args)s);
    %(cleanup)s
""" % dict(cleanup=cleanup, fail=fail, loop=self.LOOP, name=type(self).__name__,
           args=', '.join(args + self.constants()))
        for dst, src, out in zip(names, inputs[:3], outputs):
            if self.inplace:
                # a non-contiguous input was copied: write the result back
                code += r"""
    if (%(dst)s != %(src)s && PyArray_CopyInto(%(src)s, %(dst)s) != 0) {
        Py_DECREF(%(dst)s); %(fail)s
    }
    Py_DECREF(%(dst)s);
    Py_XDECREF(%(out)s);
    %(out)s = %(src)s;
    Py_INCREF(%(out)s);
""" % dict(dst=dst, src=src, out=out, fail=fail)
            else:
                code += 'Py_XDECREF(%(out)s);\n%(out)s = %(dst)s;\n' % dict(out=out, dst=dst)
        return code + '}\n'


class AdadeltaStep(_InPlaceStep):
    """One Adadelta step of a parameter: (p, Eg2, Edx2, g) -> (p, Eg2, Edx2)
    updated (docs/equations.md#adadelta)."""
    __props__ = ('rho', 'eps', 'inplace')
    LOOP = 'nmt_adadelta'

    def __init__(self, rho, eps, inplace=False):
        self.rho, self.eps = float(rho), float(eps)
        self._init_inplace(inplace)

    def constants(self):
        return [repr(self.rho), repr(self.eps)]

    def numpy_step(self, p, eg2, edx2, g):
        rho, eps = numpy.float32(self.rho), numpy.float32(self.eps)
        eg2 *= rho
        eg2 += (numpy.float32(1.) - rho) * (g * g)
        dx = -numpy.sqrt(edx2 + eps) / numpy.sqrt(eg2 + eps) * g
        edx2 *= rho
        edx2 += (numpy.float32(1.) - rho) * (dx * dx)
        p += dx


class AdamStep(_InPlaceStep):
    """One Adam step of a parameter (optimizers.adam, dl4mt's): (p, m, v, g,
    lr_t) -> (p, m, v) updated: m = b1 m + (1 - b1) g, v = b2 v + (1 - b2)
    g^2, p -= lr_t m / (sqrt(v) + e), in float32 as Theano's graph of it.
    b1, b2, e: their float32 values."""
    __props__ = ('b1', 'b2', 'e', 'inplace')
    LOOP = 'nmt_adam'
    SCALARS = ('lr_t',)

    def __init__(self, b1, b2, e, inplace=False):
        self.b1, self.b2, self.e = (float(numpy.float32(v)) for v in (b1, b2, e))
        self._init_inplace(inplace)

    def constants(self):
        one = numpy.float32(1.)
        return [repr(float(v)) + 'f' for v in (self.b1, one - numpy.float32(self.b1), self.b2,
                                               one - numpy.float32(self.b2), self.e)]

    def numpy_step(self, p, m, v, g, lr_t):
        f = numpy.float32
        b1, b2, e = f(self.b1), f(self.b2), f(self.e)
        m *= b1
        m += (f(1.) - b1) * g
        v *= b2
        v += (f(1.) - b2) * (g * g)
        p -= (f(lr_t) * m) / (e + numpy.sqrt(v))


@local_optimizer([AdadeltaStep, AdamStep], inplace=True)
def _step_inplace(fgraph, node):
    if isinstance(node.op, _InPlaceStep) and not node.op.inplace:
        return node.op.as_inplace()(*node.inputs, return_list=True)
    return False


optdb.register('nmt_optimizer_step_inplace',
               TopoOptimizer(_step_inplace, failure_callback=TopoOptimizer.warn_inplace),
               60, 'fast_run', 'inplace')


class SquaredNorm(_FastCOp):
    """sum over the arrays of sum(x ** 2) (the gradient's squared norm of
    clipping), as Theano's graph of it computes it: each array's squares in
    float32 summed in doubles, rounded to float32, the arrays' sums added in
    float32 in order; one pass over each array and no array of squares."""
    __props__ = ()

    def make_node(self, *arrays):
        arrays = [_as_f32(v) for v in arrays]
        return Apply(self, arrays, [tensor.fscalar()])

    def perform(self, node, inputs, outputs):
        total = numpy.float32(0.)
        for x in inputs:
            total = numpy.float32(total + numpy.float32(
                numpy.square(x).sum(dtype='float64')))
        outputs[0][0] = numpy.asarray(total, dtype=F32)

    def infer_shape(self, fgraph, node, shapes):
        return [()]

    def c_code(self, node, name, inputs, outputs, sub):
        fail = sub['fail']
        (out,) = outputs
        code = '{\n    float total = 0.f;\n'
        for i, x in enumerate(inputs):
            code += r"""
    {
        PyArrayObject* xc = PyArray_GETCONTIGUOUS(%(x)s);
        if (xc == NULL) { %(fail)s }
        total += (float)nmt_sum_squares((const float*)PyArray_DATA(xc), PyArray_SIZE(xc));
        Py_DECREF(xc);
    }
""" % dict(x=x, fail=fail)
        return code + r"""
    if (%(out)s == NULL) {
        %(out)s = (PyArrayObject*)PyArray_EMPTY(0, NULL, NPY_FLOAT32, 0);
        if (%(out)s == NULL) { %(fail)s }
    }
    ((float*)PyArray_DATA(%(out)s))[0] = total;
}
""" % dict(out=out, fail=fail)


def _output_layer_c_code(inputs, sub, body, allocations):
    """C code around an output-layer loop: contiguous x (N, V), b (V,) and
    y (N,) as X, B, Y; the outputs allocated; a check of the word ids (the
    loop sets bad_index; a failed scratch allocation counts as one)."""
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
    code += body + r"""
    %(cleanup)s
    if (bad_index) {
        PyErr_SetString(PyExc_IndexError, "output layer: a word id is out of range (or no memory)");
        %(fail)s
    }
}
""" % dict(cleanup=cleanup, fail=fail)
    return code


_softmax_nll = SoftmaxNll()
_ENABLED = [True]


@contextlib.contextmanager
def original_graph():
    """Graphs built inside this block use Theano's own ops (the original)."""
    _ENABLED.append(False)
    try:
        yield
    finally:
        _ENABLED.pop()


# NMT_THEANO_OPS=1: every graph with Theano's own ops, as the original code
# builds them (the C ops sum in another order: float32 rounding, within the
# fidelity tests' tolerances); docs/speed.md#what-differs-from-the-original-code
THEANO_OPS_VARIABLE = 'NMT_THEANO_OPS'


def theano_ops_asked():
    """NMT_THEANO_OPS=1 (or any value but 0 and empty) is set."""
    return os.environ.get(THEANO_OPS_VARIABLE, '0') not in ('', '0')


def enabled():
    """Whether graphs built now use the C ops: on the CPU only (device=cpu;
    the GPU backend gets Theano's own graph), outside original_graph(), and
    not with NMT_THEANO_OPS=1."""
    return _ENABLED[-1] and theano.config.device == 'cpu' and not theano_ops_asked()


def attention(pctx, q, U_att, c_tt, cc, mask=None):
    """The source attention (docs/equations.md#attention) as one C op (Theano's
    graph of it: layers.attention_graph): alpha = softmax over
    the source of (tanh(pctx + q) U_att + c_tt), masked (exp without max
    subtraction, times the mask, normalised, as the original computes);
    ctx = sum_i alpha_i cc_i.  Returns (ctx (N, K2), alpha (T, N)).  The op
    reads pctx and cc once (twice for the gradient), skips masked source
    positions and evaluates tanh with the vector tanhf; its dot product with
    U_att sums in another order than BLAS (float32 rounding)."""
    op = SourceAttention(mask is not None)
    return op(*([pctx, q, U_att, c_tt, cc] + ([mask] if mask is not None else [])))


def log_softmax(x):
    """log softmax over the rows of x (N, V): decoding's log p of the next
    word (beam_search reads it from f_next).  On the CPU one C op
    (LogSoftmax); otherwise Theano's graph of it."""
    if enabled():
        return LogSoftmax()(x)
    shifted = x - x.max(axis=1, keepdims=True)
    return shifted - tensor.log(tensor.exp(shifted).sum(axis=1, keepdims=True))


def output_nll(hidden, W, b, y, y_mask):
    """-log p(y_t | ...) at every target position (T x n), p = softmax(hidden
    @ W + b): the project's one cost formula (nmt_model.sentence_costs sums it).
    Theano's graph (on a GPU, in original_graph()) is the original's: the
    softmax, then -log of the reference word's probability; the caller
    masks the padded positions.  The fast graph computes the output layer
    only at the real positions (0 elsewhere), and the softmax, -log and
    their gradient in one op (no N x V probabilities kept, no N x V one-hot
    gradient)."""
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
    """(p, Eg2, Edx2) after one Adadelta step (in place once compiled)."""
    return AdadeltaStep(rho, eps)(p, eg2, edx2, g)


def adam_step(p, m, v, g, lr_t, b1, b2, e):
    """(p, m, v) after one Adam step with the corrected rate lr_t (in place
    once compiled)."""
    return AdamStep(b1, b2, e)(p, m, v, g, lr_t)


def squared_norm(arrays):
    """sum over the arrays of sum(x ** 2): one C op on the CPU, else
    Theano's graph of it."""
    if enabled():
        return SquaredNorm()(*arrays)
    total = 0.
    for x in arrays:
        total += (x ** 2).sum()
    return total
