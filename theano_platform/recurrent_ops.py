"""The recurrences of training as C ops over the whole sequence, on the CPU:
the GRU layer (the encoder's two directions, language_model/lm.py's GRU) and
the conditional GRU of every decoder but the memory RNN (docs/speed.md#the-
recurrences-as-c-ops).

Theano's scan ran each time step as some twenty small ops (forty in the
gradient) through its Python loop, recomputed the forward step inside the
gradient's scan, evaluated sigmoid and tanh with scalar libm calls and added
the attention's T_src x n x 2d gradients into new arrays at every step.  Each
op here runs the whole loop in C:

* a step's products with the recurrent weights are one BLAS call per group
  of weights that read the same input (h_prev @ [U | Ux]; h1 @ [W_comb_att |
  U_nl | Ux_nl]; c @ [Wc | Wcx]; the gradient's three mirror them);
* sigmoid and tanh use libmvec's vector functions (fast_ops), the source
  attention fast_ops' C code;
* the forward op keeps what the gradient needs (gates, h1, the query) in an
  extra output, so the gradient recomputes nothing but the attention's tanh;
* the weights' gradients are sums over the steps: one product over all
  steps after the loop (T x n rows), instead of one per step;
* the samples are independent: on several threads each thread runs the loop
  for its share of the batch (its BLAS calls on one thread).

The numbers are those of the scan up to float32 rounding (the sums of a
step's products and of the weights' gradients are taken in another order,
sigmoid and tanh differ from libm's by an ulp or so): tests/test_recurrent_ops.py.
Inside ``fast_ops.original_graph()`` and on a GPU, layers.py builds Theano's
scan instead (the original code's graph).  Every op has a NumPy perform().
"""

import numpy

from theano_platform import theano_env  # noqa: F401  (configures Theano before its import)
import theano
import theano.tensor as tensor
from theano.graph.basic import Apply
from theano.gradient import DisconnectedType, grad_not_implemented

from theano_platform import fast_ops
from theano_platform.fast_ops import F32, _as_f32

# --------------------------------------------------------------------------
# C

_RECURRENCE_SUPPORT = r"""
/* BLAS through its Fortran interface, as Theano's own ops call it */
extern "C" void sgemm_(const char*, const char*, const int*, const int*, const int*,
                       const float*, const float*, const int*, const float*,
                       const int*, const float*, float*, const int*);

/* row-major C (M x N) = alpha op(A) op(B) + beta C: op(A) M x K, op(B) K x N;
   lda, ldb, ldc: the row strides of A, B, C as stored */
static void nmt_gemm(int ta, int tb, npy_intp M, npy_intp N, npy_intp K, float alpha,
                     const float* A, npy_intp lda, const float* B, npy_intp ldb,
                     float beta, float* C, npy_intp ldc)
{
    if (M == 0 || N == 0)
        return;
    if (K == 0) {
        for (npy_intp i = 0; i < M; ++i)
            for (npy_intp j = 0; j < N; ++j)
                C[i * ldc + j] = beta == 0.f ? 0.f : beta * C[i * ldc + j];
        return;
    }
    int m = (int)M, n = (int)N, k = (int)K, la = (int)lda, lb = (int)ldb, lc = (int)ldc;
    sgemm_(tb ? "T" : "N", ta ? "T" : "N", &n, &m, &k, &alpha, B, &lb, A, &la, &beta, C, &lc);
}

/* OpenBLAS's thread count (NULL with another BLAS): the ops keep it on one
   thread while they call it, on one OpenMP thread too: OpenBLAS's own
   threads would compete for the cores with the OpenMP threads, which spin
   a while between the ops (theano_env: GOMP_SPINCOUNT) */
extern "C" int openblas_get_num_threads(void) __attribute__((weak));
extern "C" void openblas_set_num_threads(int) __attribute__((weak));

static int nmt_blas_single(void)
{
    if (!openblas_get_num_threads || !openblas_set_num_threads)
        return 0;
    int before = openblas_get_num_threads();
    if (before > 1)
        openblas_set_num_threads(1);
    return before > 1 ? before : 0;
}

static void nmt_blas_restore(int before)
{
    if (before > 0)
        openblas_set_num_threads(before);
}

/* the threads for `work` (flops, values) in `units` that can go to
   different threads: every OpenMP thread for large work, else fewer */
static int nmt_threads_for(double work, npy_intp units)
{
    int nt = 1;
    #ifdef _OPENMP
    nt = omp_get_max_threads();
    #endif
    const double least = 2e6;   /* below, a thread costs more than it saves */
    while (nt > 1 && (work / nt < least || units < nt))
        --nt;
    return nt;
}

/* nmt_gemm with the output's rows (or, when there are more columns, its
   columns) split over the OpenMP threads, each block one BLAS call on its
   thread: every element is the same dot product as in one call */
static void nmt_parallel_gemm_alpha(int ta, int tb, npy_intp M, npy_intp N, npy_intp K,
                                    float alpha, const float* A, npy_intp lda,
                                    const float* B, npy_intp ldb,
                                    float beta, float* C, npy_intp ldc)
{
    const int by_rows = M >= N;
    const npy_intp units = by_rows ? M : N;
    const int nt = nmt_threads_for(2. * M * N * K, units), blas = nmt_blas_single();
    #pragma omp parallel num_threads(nt) if (nt > 1)
    {
        const int t = nmt_thread();
        const npy_intp a = units * t / nt, b = units * (t + 1) / nt;
        if (by_rows)
            nmt_gemm(ta, tb, b - a, N, K, alpha, ta ? A + a : A + a * lda, lda, B, ldb, beta,
                     C + a * ldc, ldc);
        else
            nmt_gemm(ta, tb, M, b - a, K, alpha, A, lda, tb ? B + a * ldb : B + a, ldb, beta,
                     C + a, ldc);
    }
    nmt_blas_restore(blas);
}

static void nmt_parallel_gemm(int ta, int tb, npy_intp M, npy_intp N, npy_intp K,
                              const float* A, npy_intp lda, const float* B, npy_intp ldb,
                              float beta, float* C, npy_intp ldc)
{
    nmt_parallel_gemm_alpha(ta, tb, M, N, K, 1.f, A, lda, B, ldb, beta, C, ldc);
}

/* the layout of a matrix as a row-major operand: 0 C-contiguous, 1 its
   transpose is (F-contiguous), -1 neither; ld: its row stride as stored */
static int nmt_layout(PyArrayObject* a, npy_intp* ld)
{
    const npy_intp r = PyArray_DIMS(a)[0], c = PyArray_DIMS(a)[1];
    const npy_intp s0 = PyArray_STRIDES(a)[0] / 4, s1 = PyArray_STRIDES(a)[1] / 4;
    if ((s1 == 1 || c <= 1) && s0 >= (c > 1 ? c : 1)) { *ld = s0 > 0 ? s0 : 1; return 0; }
    if ((s0 == 1 || r <= 1) && s1 >= (r > 1 ? r : 1)) { *ld = s1 > 0 ? s1 : 1; return 1; }
    return -1;
}

/* z = sigmoid(z) = 1 / (1 + exp(-z)) over n floats (the vector expf) */
static void nmt_sigmoid_inplace(float* z, npy_intp n)
{
    for (npy_intp j = 0; j < n; ++j)
        z[j] = -z[j];
    nmt_expf_inplace(z, n);
    for (npy_intp j = 0; j < n; ++j)
        z[j] = 1.f / (1.f + z[j]);
}

/* the columns [c0, c0 + w) of rows x cols row-major a, added up in doubles
   into acc (w) */
static void nmt_column_sums(const float* a, npy_intp rows, npy_intp cols, npy_intp c0,
                            npy_intp w, double* acc)
{
    for (npy_intp i = 0; i < rows; ++i)
        for (npy_intp j = 0; j < w; ++j)
            acc[j] += a[i * cols + c0 + j];
}

/* column sums as nmt_column_sums, the columns split over nt OpenMP threads
   (each column added up in the same order: the same sums) */
static void nmt_parallel_column_sums(const float* a, npy_intp rows, npy_intp cols,
                                     npy_intp c0, npy_intp w, double* acc, int nt)
{
    #pragma omp parallel num_threads(nt) if (nt > 1)
    {
        const int t = nmt_thread();
        const npy_intp ja = w * t / nt, jb = w * (t + 1) / nt;
        nmt_column_sums(a, rows, cols, c0 + ja, jb - ja, acc + ja);
    }
}

/* the first w columns of rows x src_ld src into rows x dst_ld dst, the rows
   split over the OpenMP threads */
static void nmt_copy_columns(float* dst, npy_intp dst_ld, const float* src, npy_intp src_ld,
                             npy_intp rows, npy_intp w)
{
    #pragma omp parallel for schedule(static) if (rows * w >= NMT_PARALLEL_MIN)
    for (npy_intp r = 0; r < rows; ++r)
        memcpy(dst + r * dst_ld, src + r * src_ld, w * sizeof(float));
}

/* One GRU step of one sample (docs/equations.md#gru) from P = h_prev @ [U |
   Ux] (3d), x_ (2d), xx_ (d), h_prev (d) and the mask m; G (4d) keeps r, u,
   hbar and h_prev @ Ux; h (d): the masked new state. */
static void nmt_gru_row_forward(const float* P, const float* x, const float* xx,
                                const float* hp, float m, npy_intp d, float* G, float* h)
{
    float* r = G;
    float* u = G + d;
    float* hb = G + 2 * d;
    float* uxh = G + 3 * d;
    for (npy_intp j = 0; j < 2 * d; ++j)
        G[j] = P[j] + x[j];
    nmt_sigmoid_inplace(G, 2 * d);
    for (npy_intp j = 0; j < d; ++j) {
        uxh[j] = P[2 * d + j];
        hb[j] = uxh[j] * r[j] + xx[j];
    }
    nmt_tanh_inplace(hb, d);
    for (npy_intp j = 0; j < d; ++j) {
        const float hn = u[j] * hp[j] + (1.f - u[j]) * hb[j];
        h[j] = m * hn + (1.f - m) * hp[j];
    }
}

/* Its gradient from dout = d h (d): D (3d) = d preact (2d: of x_) and d (h_prev
   @ Ux); dxx = d xx_ (d); dprev (d): d h_prev but for D @ [U | Ux]^T. */
static void nmt_gru_row_backward(const float* dout, const float* G, const float* hp,
                                 float m, npy_intp d, float* D, float* dxx, float* dprev)
{
    const float* r = G;
    const float* u = G + d;
    const float* hb = G + 2 * d;
    const float* uxh = G + 3 * d;
    for (npy_intp j = 0; j < d; ++j) {
        const float dh = m * dout[j];
        dprev[j] = (1.f - m) * dout[j] + dh * u[j];
        const float du = dh * (hp[j] - hb[j]);
        const float dpre = dh * (1.f - u[j]) * (1.f - hb[j] * hb[j]);
        dxx[j] = dpre;
        D[2 * d + j] = dpre * r[j];
        D[j] = dpre * uxh[j] * r[j] * (1.f - r[j]);
        D[d + j] = du * u[j] * (1.f - u[j]);
    }
}

/* d U, d Ux: sum over the steps of h_prev^T D (h_prev: h0, then h[t - 1]) */
static void nmt_gru_weight_grads(npy_intp T, npy_intp N, npy_intp d, const float* h0,
                                 const float* h, const float* D, float* dU, float* dUx)
{
    nmt_parallel_gemm(1, 0, d, 2 * d, T ? N : 0, h0, d, D, 3 * d, 0.f, dU, 2 * d);
    nmt_parallel_gemm(1, 0, d, d, T ? N : 0, h0, d, D + 2 * d, 3 * d, 0.f, dUx, d);
    if (T > 1) {
        nmt_parallel_gemm(1, 0, d, 2 * d, (T - 1) * N, h, d, D + N * 3 * d, 3 * d, 1.f, dU,
                          2 * d);
        nmt_parallel_gemm(1, 0, d, d, (T - 1) * N, h, d, D + N * 3 * d + 2 * d, 3 * d, 1.f,
                          dUx, d);
    }
}

/* the threads of a recurrence: every OpenMP thread when the batch is large
   enough (each its share of the samples), else one */
static int nmt_recurrence_threads(npy_intp N)
{
    int nt = 1;
    #ifdef _OPENMP
    nt = omp_get_max_threads();
    #endif
    if (N < 8 * nt)
        nt = (int)(N / 8) > 1 ? (int)(N / 8) : 1;
    return nt;
}

/* the samples [*a, *b) of thread t of nt */
static void nmt_share(npy_intp N, int nt, int t, npy_intp* a, npy_intp* b)
{
    *a = N * t / nt;
    *b = N * (t + 1) / nt;
}

/* The products of a step with the recurrent weights (M = a thread's share of
   the batch, a few dozen rows): the weights packed once a call into column
   panels of NMT_P floats (K x NMT_P each, contiguous, aligned), then each
   block of NMT_RB rows x NMT_P columns accumulated in registers over k, as
   the BLAS's kernels do; the BLAS would pack the weights at every step (as
   long as the product itself here).  The vector type is GCC's: AVX-512,
   AVX2 or SSE by the compile flags. */
#if defined(__AVX512F__)
#define NMT_VW 16
#define NMT_CBV 4
#define NMT_RB 4
#else
#define NMT_VW 8
#define NMT_CBV 2
#define NMT_RB 4
#endif
#define NMT_P (NMT_VW * NMT_CBV)
typedef float nmt_vec __attribute__((vector_size(NMT_VW * 4)));
typedef float nmt_vecu __attribute__((vector_size(NMT_VW * 4), aligned(4)));

typedef struct { float* data; npy_intp K, N; } nmt_panels;

/* C[0:RB, 0:NMT_P] (+)= A[0:RB, 0:K] @ panel (K x NMT_P) */
template <int RB>
static inline void nmt_panel_block(const float* A, npy_intp lda, const float* panel,
                                   npy_intp K, float* C, npy_intp ldc, int accumulate)
{
    nmt_vec acc[RB][NMT_CBV];
    const nmt_vec zero = {};
    for (int r = 0; r < RB; ++r)
        for (int c = 0; c < NMT_CBV; ++c)
            acc[r][c] = accumulate ? *(const nmt_vecu*)(C + r * ldc + c * NMT_VW) : zero;
    for (npy_intp k = 0; k < K; ++k) {
        const nmt_vec* w = (const nmt_vec*)(panel + k * NMT_P);
        for (int r = 0; r < RB; ++r) {
            const float a = A[r * lda + k];
            for (int c = 0; c < NMT_CBV; ++c)
                acc[r][c] += a * w[c];
        }
    }
    for (int r = 0; r < RB; ++r)
        for (int c = 0; c < NMT_CBV; ++c)
            *(nmt_vecu*)(C + r * ldc + c * NMT_VW) = acc[r][c];
}

/* the same for the last, partial panel: C's first `width` columns, through
   a buffer of the panel's width */
template <int RB>
static void nmt_panel_block_part(const float* A, npy_intp lda, const float* panel,
                                 npy_intp K, float* C, npy_intp ldc, npy_intp width,
                                 int accumulate)
{
    float buf[RB * NMT_P];
    for (int r = 0; r < RB; ++r)
        for (npy_intp j = 0; j < NMT_P; ++j)
            buf[r * NMT_P + j] = (accumulate && j < width) ? C[r * ldc + j] : 0.f;
    nmt_panel_block<RB>(A, lda, panel, K, buf, NMT_P, 1);
    for (int r = 0; r < RB; ++r)
        memcpy(C + r * ldc, buf + r * NMT_P, width * sizeof(float));
}

/* rows [0, M) of one panel's columns, in blocks of NMT_RB rows, then 2, 1 */
template <int RB>
static void nmt_panel_rows(npy_intp* r, npy_intp M, const float* A, npy_intp lda,
                           const float* panel, npy_intp K, float* C, npy_intp ldc,
                           npy_intp width, int accumulate)
{
    for (; *r + RB <= M; *r += RB) {
        if (width == NMT_P)
            nmt_panel_block<RB>(A + *r * lda, lda, panel, K, C + *r * ldc, ldc, accumulate);
        else
            nmt_panel_block_part<RB>(A + *r * lda, lda, panel, K, C + *r * ldc, ldc, width,
                                     accumulate);
    }
}

/* C (M x N) (+)= A (M x K) @ B, B packed (K, N: its own), row strides lda, ldc */
static void nmt_panel_gemm(npy_intp M, const float* A, npy_intp lda, const nmt_panels* B,
                           float* C, npy_intp ldc, int accumulate)
{
    const npy_intp K = B->K, N = B->N;
    if (K == 0) {
        if (!accumulate)
            for (npy_intp r = 0; r < M; ++r)
                memset(C + r * ldc, 0, N * sizeof(float));
        return;
    }
    for (npy_intp c0 = 0; c0 < N; c0 += NMT_P) {
        const float* panel = B->data + (c0 / NMT_P) * K * NMT_P;
        const npy_intp width = N - c0 < NMT_P ? N - c0 : NMT_P;
        npy_intp r = 0;
        nmt_panel_rows<NMT_RB>(&r, M, A, lda, panel, K, C + c0, ldc, width, accumulate);
        nmt_panel_rows<2>(&r, M, A, lda, panel, K, C + c0, ldc, width, accumulate);
        nmt_panel_rows<1>(&r, M, A, lda, panel, K, C + c0, ldc, width, accumulate);
    }
}

/* panel q of B = [W_1 | W_2 | ...] (each rows x widths[i]): K = rows, the
   panel's columns c0.. of the parts side by side, zeros past the last */
static void nmt_panel_fill(float* panel, npy_intp q, npy_intp rows, int count,
                           const float** parts, const npy_intp* widths)
{
    const npy_intp c0 = q * NMT_P;
    for (npy_intp k = 0; k < rows; ++k) {
        float* row = panel + k * NMT_P;
        npy_intp at = 0, j = 0;   /* at: the part's first column in B */
        for (int p = 0; p < count && j < NMT_P; at += widths[p++]) {
            const npy_intp from = c0 + j - at;
            if (from < 0 || from >= widths[p])
                continue;
            const npy_intp n = widths[p] - from < NMT_P - j ? widths[p] - from : NMT_P - j;
            memcpy(row + j, parts[p] + k * widths[p] + from, n * sizeof(float));
            j += n;
        }
        memset(row + j, 0, (NMT_P - j) * sizeof(float));
    }
}

/* panel q of B = [W_1 | W_2 | ...]^T: K = the parts' total width, the panel's
   columns: rows c0.. of the parts, zeros past the last */
static void nmt_panel_fill_transposed(float* panel, npy_intp q, npy_intp rows, int count,
                                      const float** parts, const npy_intp* widths,
                                      npy_intp K)
{
    const npy_intp c0 = q * NMT_P, w = rows - c0 < NMT_P ? rows - c0 : NMT_P;
    for (npy_intp j = 0; j < w; ++j) {
        npy_intp at = 0;
        for (int p = 0; p < count; at += widths[p++]) {
            const float* src = parts[p] + (c0 + j) * widths[p];
            for (npy_intp kk = 0; kk < widths[p]; ++kk)
                panel[(at + kk) * NMT_P + j] = src[kk];
        }
    }
    for (npy_intp k = 0; k < K; ++k)
        memset(panel + k * NMT_P + w, 0, (NMT_P - w) * sizeof(float));
}

/* the panels of [W_1 | W_2 | ...] (each rows x widths[i]), or of its
   transpose, a panel a thread at a time */
static int nmt_panels_of(nmt_panels* p, npy_intp rows, int count, const float** parts,
                         const npy_intp* widths, int transposed)
{
    npy_intp total = 0;
    for (int i = 0; i < count; ++i)
        total += widths[i];
    p->K = transposed ? total : rows;
    p->N = transposed ? rows : total;
    const npy_intp K = p->K, panels = (p->N + NMT_P - 1) / NMT_P;
    size_t bytes = ((size_t)(panels * K * NMT_P * sizeof(float)) + 63) / 64 * 64 + 64;
    p->data = (float*)aligned_alloc(64, bytes);
    if (p->data == NULL)
        return 0;
    #pragma omp parallel for schedule(static) if (panels * K * NMT_P >= NMT_PARALLEL_MIN)
    for (npy_intp q = 0; q < panels; ++q) {
        if (transposed)
            nmt_panel_fill_transposed(p->data + q * K * NMT_P, q, rows, count, parts, widths, K);
        else
            nmt_panel_fill(p->data + q * K * NMT_P, q, rows, count, parts, widths);
    }
    return 1;
}
"""


_GRU_C = r"""
/* The GRU layer's forward loop over samples [a, b): h (T, N, d) from h0, the
   gates G (T, N, 4d) kept; W1: the panels of [U | Ux] (d, 3d); P: scratch
   (b - a) x 3d. */
static void nmt_gru_forward(npy_intp T, npy_intp N, npy_intp d, npy_intp a, npy_intp b,
                            const float* mask, const float* x, const float* xx,
                            const float* h0, const nmt_panels* W1, float* h, float* G, float* P)
{
    const npy_intp nb = b - a;
    for (npy_intp t = 0; t < T; ++t) {
        const float* hp = t ? h + ((t - 1) * N + a) * d : h0 + a * d;
        nmt_panel_gemm(nb, hp, d, W1, P, 3 * d, 0);
        for (npy_intp i = 0; i < nb; ++i) {
            const npy_intp row = t * N + a + i;
            nmt_gru_row_forward(P + i * 3 * d, x + row * 2 * d, xx + row * d, hp + i * d,
                                mask[row], d, G + row * 4 * d, h + row * d);
        }
    }
}

/* Its gradient loop over samples [a, b) from gh = d h (T, N, d): D (T, N, 3d)
   = d preact and d (h_prev @ Ux) of every step, dxx (T, N, d), dh0 (N, d);
   W1T: the panels of [U | Ux]^T; carry, dout: scratch of (b - a) x d and d
   floats. */
static void nmt_gru_backward(npy_intp T, npy_intp N, npy_intp d, npy_intp a, npy_intp b,
                             const float* mask, const float* h0, const nmt_panels* W1T,
                             const float* h, const float* G, const float* gh, float* D,
                             float* dxx, float* dh0, float* carry, float* dout)
{
    const npy_intp nb = b - a;
    memset(carry, 0, nb * d * sizeof(float));
    for (npy_intp t = T - 1; t >= 0; --t) {
        const float* hp = t ? h + ((t - 1) * N + a) * d : h0 + a * d;
        for (npy_intp i = 0; i < nb; ++i) {
            const npy_intp row = t * N + a + i;
            for (npy_intp j = 0; j < d; ++j)
                dout[j] = gh[row * d + j] + carry[i * d + j];
            nmt_gru_row_backward(dout, G + row * 4 * d, hp + i * d, mask[row], d,
                                 D + row * 3 * d, dxx + row * d, carry + i * d);
        }
        nmt_panel_gemm(nb, D + (t * N + a) * 3 * d, 3 * d, W1T, carry, d, 1);
    }
    memcpy(dh0 + a * d, carry, nb * d * sizeof(float));
}

"""


# offsets of what the conditional GRU keeps per step and sample, in units of
# d, the query q (k floats) last: r1 u1 hbar1 (h_prev @ Ux), h1, r2 u2, the
# candidate, h1 @ Ux_nl + bx_nl
_COND_SAVED = r"""
#define NMT_O_H1(d) (4 * (d))
#define NMT_O_G2(d) (5 * (d))
#define NMT_O_CAND(d) (7 * (d))
#define NMT_O_UXNL(d) (8 * (d))
#define NMT_O_Q(d) (9 * (d))
"""

_COND_C = _COND_SAVED + r"""
/* The conditional GRU's forward loop over samples [a, b) (docs/equations.md#
   conditional-gru): states s (T, N, d), contexts c (T, N, K2), weights alpha
   (T, N, Ts); G (T, N, S = 9d + k) kept for the gradient.  The panels of W1
   = [U | Ux], W2 = [W_comb_att | U_nl | Ux_nl] (d, k + 3d), W3 = [Wc | Wcx]
   (K2, 3d).
   Scratch: P1 (nb x 3d), P2 (nb x (k + 3d)), P3 (nb x 3d), y (k), acc (K2
   doubles). */
static void nmt_cond_forward(
    npy_intp T, npy_intp N, npy_intp d, npy_intp k, npy_intp K2, npy_intp Ts,
    npy_intp a, npy_intp b, const float* mask, const float* x, const float* xx,
    const float* h0, const float* pctx, const float* cc, const float* cmask,
    const float* Uatt, float ctt, const float* b_nl, const float* bx_nl,
    const nmt_panels* W1, const nmt_panels* W2, const nmt_panels* W3,
    float* s, float* c, float* alpha, float* G,
    float* P1, float* P2, float* P3, float* y, double* acc)
{
    const npy_intp nb = b - a, S = 9 * d + k, w2 = k + 3 * d;
    for (npy_intp t = 0; t < T; ++t) {
        const float* hp = t ? s + ((t - 1) * N + a) * d : h0 + a * d;
        float* Gt = G + (t * N + a) * S;
        nmt_panel_gemm(nb, hp, d, W1, P1, 3 * d, 0);
        for (npy_intp i = 0; i < nb; ++i) {
            const npy_intp row = t * N + a + i;
            nmt_gru_row_forward(P1 + i * 3 * d, x + row * 2 * d, xx + row * d, hp + i * d,
                                mask[row], d, Gt + i * S, Gt + i * S + NMT_O_H1(d));
        }
        nmt_panel_gemm(nb, Gt + NMT_O_H1(d), S, W2, P2, w2, 0);
        for (npy_intp i = 0; i < nb; ++i) {
            const npy_intp n = a + i, row = t * N + n;
            float* q = Gt + i * S + NMT_O_Q(d);
            memcpy(q, P2 + i * w2, k * sizeof(float));
            nmt_attention_sample(pctx, q, Uatt, ctt, cc, cmask, Ts, N, k, K2, n,
                                 alpha + row * Ts, 1, c + row * K2, y, acc);
        }
        nmt_panel_gemm(nb, c + (t * N + a) * K2, K2, W3, P3, 3 * d, 0);
        for (npy_intp i = 0; i < nb; ++i) {
            const npy_intp row = t * N + a + i;
            float* g = Gt + i * S;
            const float* h1 = g + NMT_O_H1(d);
            float* r2 = g + NMT_O_G2(d);
            float* u2 = r2 + d;
            float* cand = g + NMT_O_CAND(d);
            float* uxnl = g + NMT_O_UXNL(d);
            const float* p2 = P2 + i * w2 + k;
            const float* p3 = P3 + i * 3 * d;
            for (npy_intp j = 0; j < 2 * d; ++j)
                r2[j] = p2[j] + b_nl[j] + p3[j];
            nmt_sigmoid_inplace(r2, 2 * d);
            for (npy_intp j = 0; j < d; ++j) {
                uxnl[j] = p2[2 * d + j] + bx_nl[j];
                cand[j] = uxnl[j] * r2[j] + p3[2 * d + j];
            }
            nmt_tanh_inplace(cand, d);
            const float m = mask[row];
            for (npy_intp j = 0; j < d; ++j) {
                const float h2 = u2[j] * h1[j] + (1.f - u2[j]) * cand[j];
                s[row * d + j] = m * h2 + (1.f - m) * h1[j];
            }
        }
    }
}

/* Its gradient loop over samples [a, b), from gs, gc, galpha = d s, d c, d
   alpha (gc, galpha may be NULL).  Writes, for every step, E2 (T, N, k + 3d)
   = [d q | d (h1 @ U_nl) | d (h1 @ Ux_nl)], E3 (T, N, 3d) = [d (c @ Wc) |
   d (c @ Wcx)], D1 (T, N, 3d) (the first GRU's, as nmt_gru_backward), dxx;
   adds the samples' d pctx and d cc; dh0.  W1T, W2T, W3T: the panels of the
   transposes of nmt_cond_forward's W1, W2, W3.  Returns this thread's sum of d
   c_tt, adds its d U_att to gU (k doubles).  Scratch: carry, dh1 (nb x d),
   dctx (nb x K2), dout (d), y (k), gq (k doubles), sbuf (Ts). */
static double nmt_cond_backward(
    npy_intp T, npy_intp N, npy_intp d, npy_intp k, npy_intp K2, npy_intp Ts,
    npy_intp a, npy_intp b, const float* mask, const float* h0, const float* pctx,
    const float* cc, const float* cmask, const float* Uatt,
    const nmt_panels* W1T, const nmt_panels* W2T, const nmt_panels* W3T,
    const float* s, const float* alpha, const float* G,
    const float* gs, const float* gc, const float* galpha,
    float* E2, float* E3, float* D1, float* dxx, float* dpctx, float* dcc, float* dh0,
    double* gU, float* carry, float* dh1, float* dctx, float* dout, float* y,
    double* gq, float* sbuf)
{
    const npy_intp nb = b - a, S = 9 * d + k, w2 = k + 3 * d;
    double gc_sum = 0.;
    memset(carry, 0, nb * d * sizeof(float));
    for (npy_intp t = T - 1; t >= 0; --t) {
        const float* Gt = G + (t * N + a) * S;
        float* E2t = E2 + (t * N + a) * w2;
        float* E3t = E3 + (t * N + a) * 3 * d;
        /* the second GRU: d s -> d h1 (direct), E3, E2's U_nl and Ux_nl parts */
        for (npy_intp i = 0; i < nb; ++i) {
            const npy_intp row = t * N + a + i;
            const float* g = Gt + i * S;
            const float* h1 = g + NMT_O_H1(d);
            const float* r2 = g + NMT_O_G2(d);
            const float* u2 = r2 + d;
            const float* cand = g + NMT_O_CAND(d);
            const float* uxnl = g + NMT_O_UXNL(d);
            float* e2 = E2t + i * w2;
            float* e3 = E3t + i * 3 * d;
            const float m = mask[row];
            for (npy_intp j = 0; j < d; ++j) {
                const float ds = gs[row * d + j] + carry[i * d + j];
                const float dh2 = m * ds;
                const float du2 = dh2 * (h1[j] - cand[j]);
                dh1[i * d + j] = (1.f - m) * ds + dh2 * u2[j];
                const float dpre = dh2 * (1.f - u2[j]) * (1.f - cand[j] * cand[j]);
                e3[j] = dpre * uxnl[j] * r2[j] * (1.f - r2[j]);
                e3[d + j] = du2 * u2[j] * (1.f - u2[j]);
                e3[2 * d + j] = dpre;
                e2[k + j] = e3[j];
                e2[k + d + j] = e3[d + j];
                e2[k + 2 * d + j] = dpre * r2[j];
            }
        }
        /* d c = gc + E3 @ [Wc | Wcx]^T */
        for (npy_intp i = 0; i < nb; ++i) {
            const npy_intp row = t * N + a + i;
            if (gc)
                memcpy(dctx + i * K2, gc + row * K2, K2 * sizeof(float));
            else
                memset(dctx + i * K2, 0, K2 * sizeof(float));
        }
        nmt_panel_gemm(nb, E3t, 3 * d, W3T, dctx, K2, 1);
        /* the attention: d q into E2, d pctx and d cc added to */
        for (npy_intp i = 0; i < nb; ++i) {
            const npy_intp n = a + i, row = t * N + n;
            gc_sum += nmt_attention_grad_sample(
                pctx, Gt + i * S + NMT_O_Q(d), Uatt, cc, cmask, alpha + row * Ts, 1,
                dctx + i * K2, galpha ? galpha + row * Ts : NULL, 1, Ts, N, k, K2, n,
                dpctx, E2t + i * w2, dcc, 1, y, gq, gU, sbuf);
        }
        /* d h1 += E2 @ [W_comb_att | U_nl | Ux_nl]^T; the first GRU */
        nmt_panel_gemm(nb, E2t, w2, W2T, dh1, d, 1);
        const float* hp = t ? s + ((t - 1) * N + a) * d : h0 + a * d;
        for (npy_intp i = 0; i < nb; ++i) {
            const npy_intp row = t * N + a + i;
            memcpy(dout, dh1 + i * d, d * sizeof(float));
            nmt_gru_row_backward(dout, Gt + i * S, hp + i * d, mask[row], d,
                                 D1 + row * 3 * d, dxx + row * d, carry + i * d);
        }
        nmt_panel_gemm(nb, D1 + (t * N + a) * 3 * d, 3 * d, W1T, carry, d, 1);
    }
    memcpy(dh0 + a * d, carry, nb * d * sizeof(float));
    return gc_sum;
}
"""


class _RecurrenceCOp(fast_ops._FastCOp):
    """fast_ops' C settings, BLAS linked as Theano links its own ops."""

    def c_support_code(self, **kwargs):
        return fast_ops._SUPPORT + _RECURRENCE_SUPPORT + self.C

    def c_libraries(self, **kwargs):
        from theano.tensor.blas import ldflags
        return fast_ops._FastCOp.c_libraries(self) + ldflags()

    def c_lib_dirs(self, **kwargs):
        from theano.tensor.blas import ldflags
        return ldflags(libs=False, libs_dir=True)

    def c_compile_args(self, **kwargs):
        from theano.tensor.blas import ldflags
        return fast_ops._FastCOp.c_compile_args(self) + ldflags(libs=False, flags=True)


def _contiguous_inputs(names, inputs, fail):
    """C: contiguous copies of the inputs under ``names`` (None: a NULL
    pointer), and the C that releases them."""
    return fast_ops._contiguous(list(zip(names, inputs)), fail)


def _alloc_outputs(outputs, dims, cleanup, fail):
    """C: each output allocated with its dims (a C array expression)."""
    return ''.join(fast_ops._ALLOC_OUT % dict(out=out, nd=len(d), dims=name, fail=fail,
                                              cleanup=cleanup)
                   for out, (name, d) in zip(outputs, dims))


def _dims_decl(dims):
    """C declarations of the npy_intp arrays ``dims`` ((name, [expr, ...]))."""
    return ''.join('    npy_intp %s[%d] = {%s};\n' % (name, len(d), ', '.join(d))
                   for name, d in dims)


def _data(name):
    return '((float*)PyArray_DATA(%s))' % name


# --------------------------------------------------------------------------
# the GRU layer

class GRULayer(_RecurrenceCOp):
    """The GRU over a sequence: (mask (T, N), x_ (T, N, 2d), xx_ (T, N, d),
    h0 (N, d), U (d, 2d), Ux (d, d)) -> (h (T, N, d), gates (T, N, 4d): what
    the gradient reads)."""
    __props__ = ()
    C = _GRU_C

    def make_node(self, mask, x, xx, h0, U, Ux):
        inputs = [_as_f32(v) for v in (mask, x, xx, h0, U, Ux)]
        if [v.ndim for v in inputs] != [2, 3, 3, 2, 2, 2]:
            raise TypeError('gru_layer takes mask (T, N), x_ (T, N, 2d), xx_ (T, N, d), '
                            'h0 (N, d), U (d, 2d), Ux (d, d)')
        return Apply(self, inputs, [tensor.ftensor3(), tensor.ftensor3()])

    def perform(self, node, inputs, outputs):
        mask, x, xx, h0, U, Ux = inputs
        h, gates = _gru_forward_numpy(mask, x, xx, h0, numpy.concatenate([U, Ux], 1))
        outputs[0][0], outputs[1][0] = h, gates

    def infer_shape(self, fgraph, node, shapes):
        T, N = shapes[1][0], shapes[1][1]
        d = shapes[4][0]
        return [(T, N, d), (T, N, 4 * d)]

    def L_op(self, inputs, outputs, output_grads):
        mask, x, xx, h0, U, Ux = inputs
        h, gates = outputs
        gh = output_grads[0]
        if isinstance(gh.type, DisconnectedType):
            gh = tensor.zeros_like(h)
        dx, dxx, dh0, dU, dUx = GRULayerGrad()(mask, h0, U, Ux, h, gates, gh)
        return [grad_not_implemented(self, 0, mask, 'the mask is data'),
                dx, dxx, dh0, dU, dUx]

    def c_code(self, node, name, inputs, outputs, sub):
        fail = sub['fail']
        h, gates = outputs
        code, cleanup = _contiguous_inputs(('mc', 'xc', 'xxc', 'h0c', 'uc', 'uxc'), inputs, fail)
        dims = [('h_dims', ['T', 'N', 'd']), ('g_dims', ['T', 'N', '4 * d'])]
        return '{\n' + code + _GRU_CHECKS % dict(cleanup=cleanup, fail=fail) + \
            _dims_decl(dims) + _alloc_outputs(outputs, dims, cleanup, fail) + r"""
    const float* parts[2] = {%(U)s, %(Ux)s};
    npy_intp widths[2] = {2 * d, d};
    nmt_panels W1;
    int failed = !nmt_panels_of(&W1, d, 2, parts, widths, 0);
    const int nt = nmt_recurrence_threads(N);
    #pragma omp parallel num_threads(nt) if (nt > 1)
    {
        const int tid = nmt_thread();
        npy_intp a, b;
        nmt_share(N, nt, tid, &a, &b);
        float* P = (float*)malloc(((b - a) * 3 * d + 1) * sizeof(float));
        if (P == NULL || failed)
            failed = 1;
        else
            nmt_gru_forward(T, N, d, a, b, %(M)s, %(X)s, %(XX)s, %(H0)s, &W1, %(h)s, %(g)s, P);
        free(P);
    }
    free(W1.data);
    %(cleanup)s
    if (failed) { PyErr_NoMemory(); %(fail)s }
}
""" % dict(U=_data('uc'), Ux=_data('uxc'), M=_data('mc'), X=_data('xc'), XX=_data('xxc'),
           H0=_data('h0c'), h=_data(h), g=_data(gates), cleanup=cleanup, fail=fail)


_GRU_CHECKS = r"""
    npy_intp T = PyArray_DIMS(xc)[0], N = PyArray_DIMS(xc)[1], d = PyArray_DIMS(uxc)[0];
    if (PyArray_DIMS(mc)[0] != T || PyArray_DIMS(mc)[1] != N ||
        PyArray_DIMS(xc)[2] != 2 * d || PyArray_DIMS(xxc)[0] != T ||
        PyArray_DIMS(xxc)[1] != N || PyArray_DIMS(xxc)[2] != d ||
        PyArray_DIMS(h0c)[0] != N || PyArray_DIMS(h0c)[1] != d ||
        PyArray_DIMS(uc)[0] != d || PyArray_DIMS(uc)[1] != 2 * d ||
        PyArray_DIMS(uxc)[1] != d) {
        PyErr_SetString(PyExc_ValueError, "gru_layer: shapes do not match");
        %(cleanup)s %(fail)s
    }
"""


class GRULayerGrad(_RecurrenceCOp):
    """GRULayer's gradient: (mask, h0, U, Ux, h, gates, d h) -> (d x_, d xx_,
    d h0, d U, d Ux)."""
    __props__ = ()
    C = _GRU_C

    def make_node(self, mask, h0, U, Ux, h, gates, gh):
        inputs = [_as_f32(v) for v in (mask, h0, U, Ux, h, gates, gh)]
        outputs = [tensor.ftensor3(), tensor.ftensor3(), tensor.fmatrix(), tensor.fmatrix(),
                   tensor.fmatrix()]
        return Apply(self, inputs, outputs)

    def perform(self, node, inputs, outputs):
        mask, h0, U, Ux, h, gates, gh = inputs
        grads = _gru_backward_numpy(mask, h0, numpy.concatenate([U, Ux], 1), h, gates, gh)
        for out, g in zip(outputs, grads):
            out[0] = g

    def infer_shape(self, fgraph, node, shapes):
        T, N, d = shapes[4]
        return [(T, N, 2 * d), (T, N, d), shapes[1], shapes[2], shapes[3]]

    def c_code(self, node, name, inputs, outputs, sub):
        fail = sub['fail']
        dx, dxx, dh0, dU, dUx = outputs
        code, cleanup = _contiguous_inputs(('mc', 'h0c', 'uc', 'uxc', 'hc', 'gc', 'ghc'),
                                           inputs, fail)
        dims = [('dx_dims', ['T', 'N', '2 * d']), ('dxx_dims', ['T', 'N', 'd']),
                ('dh0_dims', ['N', 'd']), ('du_dims', ['d', '2 * d']), ('dux_dims', ['d', 'd'])]
        return '{\n' + code + r"""
    npy_intp T = PyArray_DIMS(hc)[0], N = PyArray_DIMS(hc)[1], d = PyArray_DIMS(hc)[2];
""" + _dims_decl(dims) + _alloc_outputs(outputs, dims, cleanup, fail) + r"""
    const float* parts[2] = {%(U)s, %(Ux)s};
    npy_intp widths[2] = {2 * d, d};
    nmt_panels W1T;
    int failed = !nmt_panels_of(&W1T, d, 2, parts, widths, 1);
    float* D = (float*)malloc((T * N * 3 * d + 1) * sizeof(float));
    failed = failed || D == NULL;
    const int nt = nmt_recurrence_threads(N);
    #pragma omp parallel num_threads(nt) if (nt > 1)
    {
        const int tid = nmt_thread();
        npy_intp a, b;
        nmt_share(N, nt, tid, &a, &b);
        float* carry = (float*)malloc(((b - a) * d + 1) * sizeof(float));
        float* dout = (float*)malloc((d + 1) * sizeof(float));
        if (carry == NULL || dout == NULL || failed)
            failed = 1;
        else
            nmt_gru_backward(T, N, d, a, b, %(M)s, %(H0)s, &W1T, %(H)s, %(G)s, %(GH)s, D,
                             %(dxx)s, %(dh0)s, carry, dout);
        free(carry); free(dout);
    }
    if (!failed) {
        nmt_gru_weight_grads(T, N, d, %(H0)s, %(H)s, D, %(dU)s, %(dUx)s);
        nmt_copy_columns(%(dx)s, 2 * d, D, 3 * d, T * N, 2 * d);
    }
    free(W1T.data); free(D);
    %(cleanup)s
    if (failed) { PyErr_NoMemory(); %(fail)s }
}
""" % dict(U=_data('uc'), Ux=_data('uxc'), M=_data('mc'), H0=_data('h0c'), H=_data('hc'),
           G=_data('gc'), GH=_data('ghc'), dx=_data(dx), dxx=_data(dxx), dh0=_data(dh0),
           dU=_data(dU), dUx=_data(dUx), cleanup=cleanup, fail=fail)


def _sigmoid(x):
    return (1. / (1. + numpy.exp(-x))).astype(F32)


def _gru_forward_rows(P, x, xx, hp, m):
    """NumPy nmt_gru_row_forward over rows: (gates (n, 4d), h (n, d))."""
    d = hp.shape[1]
    ru = _sigmoid(P[:, :2 * d] + x)
    r, u, uxh = ru[:, :d], ru[:, d:], P[:, 2 * d:]
    hb = numpy.tanh(uxh * r + xx).astype(F32)
    h = (m[:, None] * (u * hp + (1 - u) * hb) + (1 - m)[:, None] * hp).astype(F32)
    return numpy.concatenate([r, u, hb, uxh], 1), h


def _gru_backward_rows(dout, gates, hp, m):
    """NumPy nmt_gru_row_backward over rows: (D (n, 3d), dxx, dprev)."""
    d = hp.shape[1]
    r, u, hb, uxh = (gates[:, i * d:(i + 1) * d] for i in range(4))
    dh = m[:, None] * dout
    dprev = (1 - m)[:, None] * dout + dh * u
    dpre = dh * (1 - u) * (1 - hb * hb)
    D = numpy.concatenate([dpre * uxh * r * (1 - r), dh * (hp - hb) * u * (1 - u),
                           dpre * r], 1)
    return D.astype(F32), dpre.astype(F32), dprev.astype(F32)


def _gru_forward_numpy(mask, x, xx, h0, W1):
    T, N = x.shape[:2]
    d = h0.shape[1]
    h = numpy.zeros((T, N, d), F32)
    gates = numpy.zeros((T, N, 4 * d), F32)
    hp = h0
    for t in range(T):
        gates[t], h[t] = _gru_forward_rows(hp @ W1, x[t], xx[t], hp, mask[t])
        hp = h[t]
    return h, gates


def _gru_backward_numpy(mask, h0, W1, h, gates, gh):
    T, N, d = h.shape
    D = numpy.zeros((T, N, 3 * d), F32)
    dxx = numpy.zeros((T, N, d), F32)
    carry = numpy.zeros((N, d), F32)
    for t in reversed(range(T)):
        hp = h[t - 1] if t else h0
        D[t], dxx[t], dprev = _gru_backward_rows(gh[t] + carry, gates[t], hp, mask[t])
        carry = (dprev + D[t] @ W1.T).astype(F32)
    hprev = numpy.concatenate([h0[None], h[:-1]], 0).reshape(T * N, d)
    dW1 = (hprev.T @ D.reshape(T * N, 3 * d)).astype(F32)
    return D[..., :2 * d].copy(), dxx, carry, dW1[:, :2 * d].copy(), dW1[:, 2 * d:].copy()


def gru_layer(mask, x_, xx_, h0, U, Ux):
    """The GRU states over the sequence (T, N, d) (docs/equations.md#gru)
    from the input projections x_ and xx_ and the mask, as one C op."""
    return GRULayer()(mask, x_, xx_, h0, U, Ux)[0]


# --------------------------------------------------------------------------
# the conditional GRU

# the decoder's recurrent weights, in layers.GRU_COND_SEQ_PARAMS' order
COND_WEIGHTS = ('U', 'Wc', 'W_comb_att', 'U_att', 'c_tt', 'Ux', 'Wcx',
                'U_nl', 'Ux_nl', 'b_nl', 'bx_nl')

_COND_CHECKS = r"""
    npy_intp T = PyArray_DIMS(xc)[0], N = PyArray_DIMS(xc)[1], d = PyArray_DIMS(Uxc)[0];
    npy_intp Ts = PyArray_DIMS(pcc)[0], k = PyArray_DIMS(pcc)[2], K2 = PyArray_DIMS(ccc)[2];
    if (PyArray_DIMS(mc)[0] != T || PyArray_DIMS(mc)[1] != N ||
        PyArray_DIMS(xc)[2] != 2 * d || PyArray_DIMS(xxc)[0] != T ||
        PyArray_DIMS(xxc)[1] != N || PyArray_DIMS(xxc)[2] != d ||
        PyArray_DIMS(h0c)[0] != N || PyArray_DIMS(h0c)[1] != d ||
        PyArray_DIMS(pcc)[1] != N || PyArray_DIMS(ccc)[0] != Ts || PyArray_DIMS(ccc)[1] != N ||
        (cmc && (PyArray_DIMS(cmc)[0] != Ts || PyArray_DIMS(cmc)[1] != N)) ||
        PyArray_DIMS(Uc)[0] != d || PyArray_DIMS(Uc)[1] != 2 * d ||
        PyArray_DIMS(Wcc)[0] != K2 || PyArray_DIMS(Wcc)[1] != 2 * d ||
        PyArray_DIMS(Wcac)[0] != d || PyArray_DIMS(Wcac)[1] != k ||
        PyArray_SIZE(Uattc) != k || PyArray_SIZE(cttc) != 1 || PyArray_DIMS(Uxc)[1] != d ||
        PyArray_DIMS(Wcxc)[0] != K2 || PyArray_DIMS(Wcxc)[1] != d ||
        PyArray_DIMS(Unlc)[0] != d || PyArray_DIMS(Unlc)[1] != 2 * d ||
        PyArray_DIMS(Uxnlc)[0] != d || PyArray_DIMS(Uxnlc)[1] != d ||
        PyArray_SIZE(bnlc) != 2 * d || PyArray_SIZE(bxnlc) != d) {
        PyErr_SetString(PyExc_ValueError, "cond_gru_layer: shapes do not match");
        %(cleanup)s %(fail)s
    }
    const float* p1[2] = {(float*)PyArray_DATA(Uc), (float*)PyArray_DATA(Uxc)};
    const float* p2[3] = {(float*)PyArray_DATA(Wcac), (float*)PyArray_DATA(Unlc),
                          (float*)PyArray_DATA(Uxnlc)};
    const float* p3[2] = {(float*)PyArray_DATA(Wcc), (float*)PyArray_DATA(Wcxc)};
    npy_intp w1[2] = {2 * d, d}, w2s[3] = {k, 2 * d, d};
    nmt_panels W1, W2, W3;
    int failed = !nmt_panels_of(&W1, d, 2, p1, w1, %(transposed)d);
    failed = !nmt_panels_of(&W2, d, 3, p2, w2s, %(transposed)d) || failed;
    failed = !nmt_panels_of(&W3, K2, 2, p3, w1, %(transposed)d) || failed;
    const float* CM = cmc ? (const float*)PyArray_DATA(cmc) : NULL;
"""

# the C names of the conditional GRU's inputs, in the op's order
_COND_INPUT_NAMES = ('mc', 'xc', 'xxc', 'h0c', 'pcc', 'ccc', 'cmc',
                     'Uc', 'Wcc', 'Wcac', 'Uattc', 'cttc', 'Uxc', 'Wcxc',
                     'Unlc', 'Uxnlc', 'bnlc', 'bxnlc')


def _cond_inputs(has_cmask, inputs):
    """The conditional GRU's inputs with None for a missing context mask."""
    inputs = list(inputs)
    return inputs[:6] + ([inputs[6]] if has_cmask else [None]) + inputs[6 + has_cmask:]


class CondGRULayer(_RecurrenceCOp):
    """The conditional GRU with attention over a sequence: (mask (T, N), x_
    (T, N, 2d), xx_ (T, N, d), h0 (N, d), pctx (Ts, N, k), cc (Ts, N, K2)[,
    context mask (Ts, N)], the weights of COND_WEIGHTS) -> (states (T, N, d),
    contexts (T, N, K2), alphas (T, N, Ts), saved (T, N, 9d + k): what the
    gradient reads)."""
    __props__ = ('has_cmask',)
    C = _COND_C

    def __init__(self, has_cmask):
        self.has_cmask = bool(has_cmask)

    def make_node(self, *args):
        inputs = [_as_f32(v) for v in args]
        ndims = [2, 3, 3, 2, 3, 3] + [2] * self.has_cmask + [2, 2, 2, 2, 1, 2, 2, 2, 2, 1, 1]
        if [v.ndim for v in inputs] != ndims:
            raise TypeError('cond_gru_layer takes mask, x_, xx_, h0, pctx, cc[, context '
                            'mask] and the weights %s' % ', '.join(COND_WEIGHTS))
        return Apply(self, inputs, [tensor.ftensor3() for _ in range(4)])

    def perform(self, node, inputs, outputs):
        for out, value in zip(outputs, _cond_forward_numpy(*_cond_inputs(self.has_cmask, inputs))):
            out[0] = value

    def infer_shape(self, fgraph, node, shapes):
        T, N = shapes[1][0], shapes[1][1]
        d, Ts, k, K2 = shapes[3][1], shapes[4][0], shapes[4][2], shapes[5][2]
        return [(T, N, d), (T, N, K2), (T, N, Ts), (T, N, 9 * d + k)]

    def L_op(self, inputs, outputs, output_grads):
        states, ctxs, alphas, saved = outputs
        g_states, g_ctxs, g_alphas = output_grads[:3]
        if isinstance(g_states.type, DisconnectedType):
            g_states = tensor.zeros_like(states)
        extra = [g for g in (g_ctxs, g_alphas) if not isinstance(g.type, DisconnectedType)]
        grad_op = CondGRULayerGrad(self.has_cmask,
                                   not isinstance(g_ctxs.type, DisconnectedType),
                                   not isinstance(g_alphas.type, DisconnectedType))
        grads = grad_op(*(list(inputs) + [states, ctxs, alphas, saved, g_states] + extra))
        masks = [0] + ([6] if self.has_cmask else [])
        out, it = [], iter(grads)
        for i, v in enumerate(inputs):
            out.append(grad_not_implemented(self, i, v, 'the masks are data')
                       if i in masks else next(it))
        return out

    def c_code(self, node, name, inputs, outputs, sub):
        fail = sub['fail']
        s, c, alpha, saved = outputs
        code, cleanup = _contiguous_inputs(_COND_INPUT_NAMES,
                                           _cond_inputs(self.has_cmask, inputs), fail)
        cleanup_all = cleanup + 'free(W1.data); free(W2.data); free(W3.data);'
        dims = [('s_dims', ['T', 'N', 'd']), ('c_dims', ['T', 'N', 'K2']),
                ('a_dims', ['T', 'N', 'Ts']), ('g_dims', ['T', 'N', '9 * d + k'])]
        return '{\n' + code + _COND_CHECKS % dict(cleanup=cleanup, fail=fail, transposed=0) + \
            _dims_decl(dims) + _alloc_outputs(outputs, dims, cleanup_all, fail) + r"""
    const int nt = nmt_recurrence_threads(N);
    #pragma omp parallel num_threads(nt) if (nt > 1)
    {
        const int tid = nmt_thread();
        npy_intp a, b;
        nmt_share(N, nt, tid, &a, &b);
        const npy_intp nb = b - a;
        float* P1 = (float*)malloc((nb * 3 * d + 1) * sizeof(float));
        float* P2 = (float*)malloc((nb * (k + 3 * d) + 1) * sizeof(float));
        float* P3 = (float*)malloc((nb * 3 * d + 1) * sizeof(float));
        float* y = (float*)malloc((k + 1) * sizeof(float));
        double* acc = (double*)malloc((K2 + 1) * sizeof(double));
        if (P1 == NULL || P2 == NULL || P3 == NULL || y == NULL || acc == NULL || failed)
            failed = 1;
        else
            nmt_cond_forward(T, N, d, k, K2, Ts, a, b, %(M)s, %(X)s, %(XX)s, %(H0)s, %(PC)s,
                             %(CC)s, CM, %(Uatt)s, %(ctt)s[0], %(bnl)s, %(bxnl)s, &W1, &W2, &W3,
                             %(s)s, %(c)s, %(alpha)s, %(saved)s, P1, P2, P3, y, acc);
        free(P1); free(P2); free(P3); free(y); free(acc);
    }
    %(cleanup_all)s
    if (failed) { PyErr_NoMemory(); %(fail)s }
}
""" % dict(M=_data('mc'), X=_data('xc'), XX=_data('xxc'), H0=_data('h0c'), PC=_data('pcc'),
           CC=_data('ccc'), Uatt=_data('Uattc'), ctt=_data('cttc'), bnl=_data('bnlc'),
           bxnl=_data('bxnlc'), s=_data(s), c=_data(c), alpha=_data(alpha),
           saved=_data(saved), cleanup_all=cleanup_all, fail=fail)


class CondGRULayerGrad(_RecurrenceCOp):
    """CondGRULayer's gradient: (its inputs, its outputs, d states[, d
    contexts][, d alphas]) -> the gradients of its inputs but the masks, in
    their order."""
    __props__ = ('has_cmask', 'has_gctx', 'has_galpha')
    C = _COND_C

    def __init__(self, has_cmask, has_gctx, has_galpha):
        self.has_cmask, self.has_gctx, self.has_galpha = (
            bool(has_cmask), bool(has_gctx), bool(has_galpha))

    def _split(self, inputs):
        """(the forward op's inputs with None for a missing context mask,
        its four outputs, [d states, d contexts or None, d alphas or None])."""
        n_in = 17 + self.has_cmask
        forward = _cond_inputs(self.has_cmask, inputs[:n_in])
        outs, rest = list(inputs[n_in:n_in + 4]), list(inputs[n_in + 4:])
        gs = rest.pop(0)
        gc = rest.pop(0) if self.has_gctx else None
        ga = rest.pop(0) if self.has_galpha else None
        return forward, outs, [gs, gc, ga]

    def make_node(self, *args):
        inputs = [_as_f32(v) for v in args]
        forward, _, _ = self._split(inputs)
        outputs = [v.type() for i, v in enumerate(forward) if v is not None and i not in (0, 6)]
        return Apply(self, inputs, outputs)

    def perform(self, node, inputs, outputs):
        forward, outs, gradients = self._split(inputs)
        for out, value in zip(outputs, _cond_backward_numpy(forward, outs, gradients)):
            out[0] = value

    def infer_shape(self, fgraph, node, shapes):
        forward, _, _ = self._split(shapes)
        return [s for i, s in enumerate(forward) if s is not None and i not in (0, 6)]

    def c_code(self, node, name, inputs, outputs, sub):
        fail = sub['fail']
        forward, outs, gradients = self._split(inputs)
        names = _COND_INPUT_NAMES + ('sc', 'ctxc', 'ac', 'gvc', 'gsc', 'gcc', 'gac')
        code, cleanup = _contiguous_inputs(names, forward + outs + gradients, fail)
        cleanup_all = cleanup + 'free(W1.data); free(W2.data); free(W3.data);'
        grads = dict(zip(('dx', 'dxx', 'dh0', 'dpctx', 'dcc', 'dU', 'dWc', 'dWca', 'dUatt',
                          'dctt', 'dUx', 'dWcx', 'dUnl', 'dUxnl', 'dbnl', 'dbxnl'), outputs))
        dims = [(grads[n] + '_dims', d) for n, d in (
            ('dx', ['T', 'N', '2 * d']), ('dxx', ['T', 'N', 'd']), ('dh0', ['N', 'd']),
            ('dpctx', ['Ts', 'N', 'k']), ('dcc', ['Ts', 'N', 'K2']), ('dU', ['d', '2 * d']),
            ('dWc', ['K2', '2 * d']), ('dWca', ['d', 'k']), ('dUatt', ['k', '1']),
            ('dctt', ['1']), ('dUx', ['d', 'd']), ('dWcx', ['K2', 'd']),
            ('dUnl', ['d', '2 * d']), ('dUxnl', ['d', 'd']), ('dbnl', ['2 * d']),
            ('dbxnl', ['d']))]
        data = dict((n, _data(v)) for n, v in grads.items())
        data.update(M=_data('mc'), H0=_data('h0c'), PC=_data('pcc'), CC=_data('ccc'),
                    Uatt=_data('Uattc'), S=_data('sc'), C=_data('ctxc'), A=_data('ac'),
                    G=_data('gvc'), GS=_data('gsc'),
                    GC='gcc ? %s : NULL' % _data('gcc'), GA='gac ? %s : NULL' % _data('gac'),
                    cleanup_all=cleanup_all, fail=fail)
        return '{\n' + code + _COND_CHECKS % dict(cleanup=cleanup, fail=fail, transposed=1) + \
            _dims_decl(dims) + _alloc_outputs(outputs, dims, cleanup_all, fail) + r"""
    const npy_intp w2 = k + 3 * d, rows = T * N;
    float* E2 = (float*)malloc((rows * w2 + 1) * sizeof(float));
    float* E3 = (float*)malloc((rows * 3 * d + 1) * sizeof(float));
    float* D1 = (float*)malloc((rows * 3 * d + 1) * sizeof(float));
    const int nt = nmt_recurrence_threads(N);
    double* gU = (double*)calloc((size_t)nt * k + 1, sizeof(double));
    double* gcs = (double*)calloc(nt, sizeof(double));
    failed = failed || E2 == NULL || E3 == NULL || D1 == NULL || gU == NULL || gcs == NULL;
    if (!failed) {
        memset(%(dpctx)s, 0, Ts * N * k * sizeof(float));
        memset(%(dcc)s, 0, Ts * N * K2 * sizeof(float));
    }
    #pragma omp parallel num_threads(nt) if (nt > 1)
    {
        const int tid = nmt_thread();
        npy_intp a, b;
        nmt_share(N, nt, tid, &a, &b);
        const npy_intp nb = b - a;
        float* carry = (float*)malloc((nb * d + 1) * sizeof(float));
        float* dh1 = (float*)malloc((nb * d + 1) * sizeof(float));
        float* dctx = (float*)malloc((nb * K2 + 1) * sizeof(float));
        float* dout = (float*)malloc((d + 1) * sizeof(float));
        float* y = (float*)malloc((k + 1) * sizeof(float));
        double* gq = (double*)malloc((k + 1) * sizeof(double));
        float* sbuf = (float*)malloc((Ts + 1) * sizeof(float));
        if (carry == NULL || dh1 == NULL || dctx == NULL || dout == NULL || y == NULL ||
            gq == NULL || sbuf == NULL || failed)
            failed = 1;
        else
            gcs[tid] = nmt_cond_backward(
                T, N, d, k, K2, Ts, a, b, %(M)s, %(H0)s, %(PC)s, %(CC)s, CM, %(Uatt)s,
                &W1, &W2, &W3, %(S)s, %(A)s, %(G)s, %(GS)s, %(GC)s, %(GA)s, E2, E3, D1,
                %(dxx)s, %(dpctx)s, %(dcc)s, %(dh0)s, gU + (size_t)tid * k, carry, dh1,
                dctx, dout, y, gq, sbuf);
        free(carry); free(dh1); free(dctx); free(dout); free(y); free(gq); free(sbuf);
    }
    if (!failed) {
        const npy_intp S = 9 * d + k;
        const float* H1 = %(G)s + NMT_O_H1(d);
        nmt_gru_weight_grads(T, N, d, %(H0)s, %(S)s, D1, %(dU)s, %(dUx)s);
        nmt_parallel_gemm(1, 0, d, k, rows, H1, S, E2, w2, 0.f, %(dWca)s, k);
        nmt_parallel_gemm(1, 0, d, 2 * d, rows, H1, S, E2 + k, w2, 0.f, %(dUnl)s, 2 * d);
        nmt_parallel_gemm(1, 0, d, d, rows, H1, S, E2 + k + 2 * d, w2, 0.f, %(dUxnl)s, d);
        nmt_parallel_gemm(1, 0, K2, 2 * d, rows, %(C)s, K2, E3, 3 * d, 0.f, %(dWc)s, 2 * d);
        nmt_parallel_gemm(1, 0, K2, d, rows, %(C)s, K2, E3 + 2 * d, 3 * d, 0.f, %(dWcx)s, d);
        double* sums = (double*)calloc(3 * d + 1, sizeof(double));
        if (sums == NULL)
            failed = 1;
        else {
            nmt_parallel_column_sums(E3, rows, 3 * d, 0, 2 * d, sums,
                                     nmt_threads_over(rows * 2 * d));
            nmt_parallel_column_sums(E2, rows, w2, k + 2 * d, d, sums + 2 * d,
                                     nmt_threads_over(rows * d));
            for (npy_intp j = 0; j < 2 * d; ++j)
                %(dbnl)s[j] = (float)sums[j];
            for (npy_intp j = 0; j < d; ++j)
                %(dbxnl)s[j] = (float)sums[2 * d + j];
        }
        free(sums);
        for (npy_intp j = 0; j < k; ++j) {
            double sum = 0.;
            for (int t = 0; t < nt; ++t)
                sum += gU[(size_t)t * k + j];
            %(dUatt)s[j] = (float)sum;
        }
        double csum = 0.;
        for (int t = 0; t < nt; ++t)
            csum += gcs[t];
        %(dctt)s[0] = (float)csum;
        nmt_copy_columns(%(dx)s, 2 * d, D1, 3 * d, rows, 2 * d);
    }
    free(E2); free(E3); free(D1); free(gU); free(gcs);
    %(cleanup_all)s
    if (failed) { PyErr_NoMemory(); %(fail)s }
}
""" % data


def _cond_forward_numpy(mask, x, xx, h0, pctx, cc, cmask, U, Wc, W_comb_att, U_att, c_tt,
                        Ux, Wcx, U_nl, Ux_nl, b_nl, bx_nl):
    """NumPy nmt_cond_forward: (states, contexts, alphas, saved)."""
    T, N = x.shape[:2]
    d, k, K2, Ts = h0.shape[1], pctx.shape[2], cc.shape[2], pctx.shape[0]
    cmask = numpy.ones((Ts, N), F32) if cmask is None else cmask
    W1 = numpy.concatenate([U, Ux], 1)
    s = numpy.zeros((T, N, d), F32)
    c = numpy.zeros((T, N, K2), F32)
    alpha = numpy.zeros((T, N, Ts), F32)
    saved = numpy.zeros((T, N, 9 * d + k), F32)
    hp = h0
    for t in range(T):
        g1, h1 = _gru_forward_rows(hp @ W1, x[t], xx[t], hp, mask[t])
        q = (h1 @ W_comb_att).astype(F32)
        e = (numpy.tanh(pctx + q[None]).astype(F32) @ U_att)[..., 0] + c_tt[0]
        a = numpy.exp(e.astype(F32)) * cmask
        a = (a / a.sum(0, dtype='float64')).astype(F32)          # Ts x N
        c[t] = (cc * a[..., None]).sum(0, dtype='float64').astype(F32)
        alpha[t] = a.T
        ru2 = _sigmoid(h1 @ U_nl + b_nl + c[t] @ Wc)
        r2, u2 = ru2[:, :d], ru2[:, d:]
        uxnl = (h1 @ Ux_nl + bx_nl).astype(F32)
        cand = numpy.tanh(uxnl * r2 + c[t] @ Wcx).astype(F32)
        m = mask[t][:, None]
        s[t] = m * (u2 * h1 + (1 - u2) * cand) + (1 - m) * h1
        saved[t] = numpy.concatenate([g1, h1, r2, u2, cand, uxnl, q], 1)
        hp = s[t]
    return s, c, alpha, saved


def _cond_backward_numpy(forward, outs, gradients):
    """NumPy nmt_cond_backward and the weights' gradients: the gradients of
    the forward op's inputs but the masks, in their order."""
    (mask, x, xx, h0, pctx, cc, cmask, U, Wc, W_comb_att, U_att, c_tt, Ux, Wcx, U_nl,
     Ux_nl, b_nl, bx_nl) = forward
    s, c, alpha, saved = outs
    gs, gc, ga = gradients
    T, N, d = s.shape
    k, Ts = pctx.shape[2], pctx.shape[0]
    cmask = numpy.ones((Ts, N), F32) if cmask is None else cmask
    W1 = numpy.concatenate([U, Ux], 1)
    parts = [saved[..., i * d:(i + 1) * d] for i in range(9)]
    h1s, r2s, u2s, cands, uxnls = parts[4], parts[5], parts[6], parts[7], parts[8]
    qs = saved[..., 9 * d:]
    D1 = numpy.zeros((T, N, 3 * d), F32)
    E2 = numpy.zeros((T, N, k + 3 * d), F32)
    E3 = numpy.zeros((T, N, 3 * d), F32)
    dxx = numpy.zeros((T, N, d), F32)
    dpctx, dcc = numpy.zeros_like(pctx), numpy.zeros_like(cc)
    dUatt, dctt = numpy.zeros(k, 'float64'), 0.
    carry = numpy.zeros((N, d), F32)
    for t in reversed(range(T)):
        m = mask[t][:, None]
        ds = gs[t] + carry
        dh2 = m * ds
        dpre = dh2 * (1 - u2s[t]) * (1 - cands[t] ** 2)
        E3[t] = numpy.concatenate([dpre * uxnls[t] * r2s[t] * (1 - r2s[t]),
                                   dh2 * (h1s[t] - cands[t]) * u2s[t] * (1 - u2s[t]), dpre], 1)
        dh1 = (1 - m) * ds + dh2 * u2s[t]
        dctx = (0 if gc is None else gc[t]) + E3[t] @ numpy.concatenate([Wc, Wcx], 1).T
        a = alpha[t].T                                               # Ts x N
        sc = numpy.einsum('nk,ink->in', dctx, cc) + (0 if ga is None else ga[t].T)
        sc = numpy.where(a != 0, sc, 0)
        de = (a * (sc - (a.astype('float64') * sc).sum(0))).astype(F32)
        de[cmask == 0] = 0.
        y = numpy.tanh(pctx + qs[t][None]).astype(F32)
        dpre_att = de[..., None] * U_att[:, 0] * (1 - y * y)
        dpctx += dpre_att
        dcc += a[..., None] * dctx[None]
        dUatt += (de[..., None] * y).sum((0, 1), dtype='float64')
        dctt += de.sum(dtype='float64')
        E2[t] = numpy.concatenate([dpre_att.sum(0), E3[t][:, :2 * d], dpre * r2s[t]], 1)
        dh1 = dh1 + E2[t] @ numpy.concatenate([W_comb_att, U_nl, Ux_nl], 1).T
        hp = s[t - 1] if t else h0
        D1[t], dxx[t], dprev = _gru_backward_rows(dh1, saved[t][:, :4 * d], hp, mask[t])
        carry = (dprev + D1[t] @ W1.T).astype(F32)
    rows = T * N
    hprev = numpy.concatenate([h0[None], s[:-1]], 0).reshape(rows, d)
    dW1 = hprev.T @ D1.reshape(rows, 3 * d)
    dW2 = h1s.reshape(rows, d).T @ E2.reshape(rows, k + 3 * d)
    dW3 = c.reshape(rows, -1).T @ E3.reshape(rows, 3 * d)
    sums3, sums2 = E3.reshape(rows, -1).sum(0, dtype='float64'), E2.reshape(rows, -1).sum(0)
    grads = [D1[..., :2 * d], dxx, carry, dpctx, dcc, dW1[:, :2 * d], dW3[:, :2 * d],
             dW2[:, :k], dUatt[:, None], numpy.array([dctt]), dW1[:, 2 * d:], dW3[:, 2 * d:],
             dW2[:, k:k + 2 * d], dW2[:, k + 2 * d:], sums3[:2 * d], sums2[k + 2 * d:]]
    return [numpy.ascontiguousarray(g, dtype=F32) for g in grads]


def cond_gru_layer(mask, x_, xx_, h0, pctx, cc, context_mask, weights):
    """(states (T, N, d), contexts (T, N, K2), alphas (T, N, Ts)) of the
    conditional GRU over the sequence (docs/equations.md#conditional-gru) as
    one C op; ``weights`` in COND_WEIGHTS' order."""
    op = CondGRULayer(context_mask is not None)
    args = [mask, x_, xx_, h0, pctx, cc] + ([context_mask] if context_mask is not None else [])
    return op(*(args + list(weights)))[:3]
