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
    assert {'ThreadedDot22', 'LeadingSum'} <= _op_names(fast)
    assert 'Dot22' not in _op_names(fast)
    assert 'Dot22' in _op_names(plain) and 'ThreadedDot22' not in _op_names(plain)


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
