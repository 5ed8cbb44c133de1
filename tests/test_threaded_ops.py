"""threaded_ops: the matrix products and the sums over leading axes of the
CPU graphs, split over the OpenMP threads, give Theano's numbers."""
import numpy as np
import pytest

import theano  # noqa: E402
import theano.tensor as tensor  # noqa: E402

from theano_platform import threaded_ops  # noqa: E402
from test_fast_ops import _omp_set_num_threads  # noqa: E402


def _op_names(f):
    return {type(n.op).__name__ for n in f.maker.fgraph.toposort()}


@pytest.fixture(scope='module')
def functions():
    """(x, y, z) -> [x @ y, x.T-based products, z summed over its two first
    axes] in FAST_RUN (the threaded ops) and with Theano's ops alone."""
    x, y, z = tensor.matrix('x'), tensor.matrix('y'), tensor.tensor3('z')
    outs = [tensor.dot(x, y), tensor.dot(x.T, x), tensor.dot(y, y.T), tensor.dot(x[::2], y),
            tensor.tanh(tensor.dot(x, y)) * 3 + tensor.dot(x[::-1], y) * 0.5,   # a Gemm
            z.sum(axis=(0, 1), acc_dtype='float64')]
    fast = theano.function([x, y, z], outs)
    plain = theano.function([x, y, z], outs, mode=theano.compile.mode.get_mode(
        'FAST_RUN').excluding('nmt_threaded_ops'))
    return fast, plain


def _values(m, k, n):
    rng = np.random.RandomState(m + k + n)
    return [rng.standard_normal(s).astype('float32') for s in ((m, k), (k, n), (7, m, n))]


def test_the_optimizer_replaces_dot22_and_leading_sums(functions):
    fast, plain = functions
    assert {'ThreadedDot22', 'ThreadedGemm', 'LeadingSum'} <= _op_names(fast)
    assert not {'Dot22', 'Gemm'} & _op_names(fast)
    assert {'Dot22', 'Gemm'} <= _op_names(plain) and 'ThreadedDot22' not in _op_names(plain)


# the last but one large enough for two threads in every op
@pytest.mark.parametrize('shape', [(300, 70, 45), (40, 90, 700), (1000, 30, 700), (1, 3, 2)])
def test_threaded_products_and_sums_equal_theanos_on_one_and_two_threads(functions, shape):
    fast, plain = functions
    values = _values(*shape)
    expected = plain(*values)
    for threads in (1, 2):
        if not _omp_set_num_threads(threads):
            pytest.skip('no libgomp')
        got = fast(*values)
        for g, e in zip(got, expected):
            # each element the same BLAS dot product, each sum the same order
            np.testing.assert_allclose(g, e, rtol=2e-6, atol=1e-6)
    _omp_set_num_threads(1)
    np.testing.assert_allclose(expected[0], values[0].astype('float64') @ values[1],
                               rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got[-1], values[2].sum((0, 1), dtype='float64'), rtol=1e-6,
                               atol=1e-6)


def test_numpy_perform_of_the_threaded_ops():
    x, y, z = tensor.matrix('x'), tensor.matrix('y'), tensor.tensor3('z')
    f = theano.function([x, y, z], [threaded_ops.ThreadedDot22()(x, y),
                                    threaded_ops.LeadingSum(2)(z)], mode='FAST_COMPILE')
    values = _values(5, 4, 3)
    got = f(*values)
    np.testing.assert_allclose(got[0], values[0] @ values[1], rtol=1e-6)
    np.testing.assert_allclose(got[1], values[2].sum((0, 1)), rtol=1e-6)


@pytest.mark.parametrize('layout', ['rows', 'columns', 'strided'])
def test_threaded_gemm_writes_over_z_in_any_layout(layout):
    """z = b z + a x @ y over a z stored by rows, by columns (a transpose)
    or with strides on both axes (computed in a copy, copied back), on two
    threads; b = 0 reads nothing of z (a NaN
    there stays out), as BLAS's gemm."""
    z, x, y, a, b = (tensor.matrix('z'), tensor.matrix('x'), tensor.matrix('y'),
                     tensor.scalar('a'), tensor.scalar('b'))
    f = theano.function([theano.In(z, mutable=True), a, x, y, b],
                        threaded_ops.ThreadedGemm()(z, a, x, y, b), accept_inplace=True)
    rng = np.random.RandomState(3)
    m, k, n = 300, 70, 240
    xv, yv = (rng.standard_normal(s).astype('float32') for s in ((m, k), (k, n)))
    start = rng.standard_normal((m, n)).astype('float32')

    def stored(values):
        if layout == 'columns':
            return np.asfortranarray(values)
        if layout == 'strided':      # neither rows nor columns contiguous: a copy
            room = np.zeros((2 * m, 2 * n), 'float32')
            room[::2, ::2] = values
            return room[::2, ::2]
        return values.copy()

    if not _omp_set_num_threads(2):
        pytest.skip('no libgomp')
    try:
        over = stored(start)
        got = f(over, 0.5, xv, yv, 2.)
        unread = f(stored(np.full((m, n), np.nan, 'float32')), 1., xv, yv, 0.)
    finally:
        _omp_set_num_threads(1)
    expected = 2 * start.astype('float64') + 0.5 * (xv.astype('float64') @ yv)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(over, expected, rtol=1e-4, atol=1e-4)    # written over z
    np.testing.assert_allclose(unread, xv.astype('float64') @ yv, rtol=1e-4, atol=1e-4)


@pytest.fixture(scope='module')
def row_gradients():
    """idx, g -> the gradient of sum(W[idx] * g) over W (n x D: Theano's
    AdvancedIncSubtensor1 into an Alloc of zeros), in FAST_RUN (ScatterRows)
    and with Theano's ops alone."""
    w, g, idx = tensor.matrix('w'), tensor.matrix('g'), tensor.lvector('idx')
    grad = theano.grad((w[idx] * g).sum(), w)
    fast = theano.function([w, idx, g], grad)
    plain = theano.function([w, idx, g], grad, mode=theano.compile.mode.get_mode(
        'FAST_RUN').excluding('nmt_threaded_ops'))
    return fast, plain


# n x D from 65,536 values on: the rows split over two threads
@pytest.mark.parametrize('n, d, m', [(700, 128, 2000), (9, 5, 30), (3, 4, 0)])
def test_scatter_rows_equals_theanos_increments_on_one_and_two_threads(row_gradients, n, d, m):
    fast, plain = row_gradients
    assert 'ScatterRows' in _op_names(fast)
    assert not {'AdvancedIncSubtensor1', 'Alloc'} & _op_names(fast)
    assert 'AdvancedIncSubtensor1' in _op_names(plain)
    rng = np.random.RandomState(n + d + m)
    w = rng.standard_normal((n, d)).astype('float32')
    # repeated rows (summed in the indices' order) and negative indices
    idx = rng.randint(-n, n, size=m).astype('int64')
    g = rng.standard_normal((m, d)).astype('float32')
    expected = plain(w, idx, g)
    for threads in (1, 2):
        if not _omp_set_num_threads(threads):
            pytest.skip('no libgomp')
        np.testing.assert_array_equal(fast(w, idx, g), expected)
    _omp_set_num_threads(1)
    by_hand = np.zeros((n, d), 'float64')
    np.add.at(by_hand, idx, g.astype('float64'))
    np.testing.assert_allclose(expected, by_hand, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize('mode', ['FAST_RUN', 'FAST_COMPILE'])   # C, NumPy
def test_scatter_rows_refuses_an_index_out_of_bounds(mode):
    g, idx = tensor.matrix('g'), tensor.lvector('idx')
    f = theano.function([g, idx], threaded_ops.ScatterRows()(g, idx, 4, 3), mode=mode)
    g_value = np.ones((2, 3), 'float32')
    np.testing.assert_array_equal(f(g_value, np.array([1, -4]))[[0, 1]],
                                  [[1, 1, 1], [1, 1, 1]])
    for bad in ([1, 4], [-5, 0]):
        with pytest.raises((IndexError, ValueError)):
            f(g_value, np.array(bad))
