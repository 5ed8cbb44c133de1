"""The measure of gpu/check.py (docs/gpu.md#the-checks-measure), on arrays:
no device needed.  Its runs on a device are in test_gpu.py."""
import numpy as np
import pytest

from gpu import check


def _softmax_bias_gradient(energies, upstream, dtype, order):
    """d/dc of sum(upstream * softmax(energies + c)) per row, summed over the
    rows in the given order: zero in exact arithmetic (softmax ignores a
    constant added to every energy), rounding noise in float32."""
    e = energies.astype(dtype)
    p = np.exp(e - e.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    g = upstream.astype(dtype)
    d_energies = p * (g - (p * g).sum(1, keepdims=True))
    total = dtype(0)
    for row in order:
        total = dtype(total + d_energies[row].sum(dtype=dtype))
    return np.array([total]), d_energies


@pytest.fixture(scope='module')
def cancelling_case():
    """(gpu, cpu, reference) outputs of a case whose second output is zero in
    exact arithmetic: two float32 evaluations summing in other orders."""
    rng = np.random.RandomState(3)
    energies, upstream = rng.standard_normal((40, 7)) * 3, rng.standard_normal((40, 7)) * 30
    rows = np.arange(40)
    c_ref, d_ref = _softmax_bias_gradient(energies, upstream, np.float64, rows)
    c_cpu, d_cpu = _softmax_bias_gradient(energies, upstream, np.float32, rows)
    c_gpu, d_gpu = _softmax_bias_gradient(energies, upstream, np.float32, rows[::-1])
    return [d_gpu, c_gpu], [d_cpu, c_cpu], [d_ref, c_ref]


def test_a_gradient_zero_in_exact_arithmetic_holds_noise_and_passes(cancelling_case):
    gpu, cpu, ref = cancelling_case
    scale = np.abs(ref[0]).max()
    # the float64 value is zero at float32's resolution, the float32 ones not:
    # their relative error is enormous, their error a few ulps of the scale
    assert abs(ref[1][0]) < check.UNIT * scale * 1e-6
    assert abs(gpu[1][0]) > 1e3 * abs(ref[1][0])
    verdict = check.case_verdict(gpu, cpu, ref)
    assert verdict['ratio'] <= check.FACTOR, verdict
    assert 0 < verdict['gpu_ulps'] < check.FACTOR


def test_an_output_wrong_beyond_rounding_fails_and_is_named(cancelling_case):
    gpu, cpu, ref = cancelling_case
    wrong = gpu[0].copy()
    # the largest element 1e-5 off: ~80 ulps of it, no rounding does that
    wrong.flat[np.abs(wrong).argmax()] *= 1 + 1e-5
    verdict = check.case_verdict([wrong, gpu[1]], cpu, ref)
    assert verdict['ratio'] > check.FACTOR and verdict['worst'] == 0, verdict
    # a cancelling output that is not noise: 1e-3 of the scale, where the
    # exact value is 0
    verdict = check.case_verdict([gpu[0], gpu[1] + 1e-3 * np.abs(ref[0]).max()], cpu, ref)
    assert verdict['ratio'] > check.FACTOR and verdict['worst'] == 1, verdict


def test_non_finite_or_misshapen_outputs_fail(cancelling_case):
    gpu, cpu, ref = cancelling_case
    nan = gpu[0].copy()
    nan[0, 0] = np.nan
    assert check.case_verdict([nan, gpu[1]], cpu, ref)['ratio'] == float('inf')
    assert check.case_verdict([gpu[0][:-1], gpu[1]], cpu, ref)['ratio'] == float('inf')


def test_random_streams_must_be_equal_to_the_bit():
    sample = np.array([3, 1, 4])
    assert check.exact_verdict([sample, sample], [sample, sample])['ratio'] == 0
    verdict = check.exact_verdict([sample, sample + 1], [sample, sample])
    assert verdict['ratio'] == float('inf') and verdict['worst'] == 1


@pytest.mark.parametrize('argv', [['--seeds', '0'], ['--factor', '0'], ['--factor', 'nan']])
def test_bad_options_are_refused(argv):
    with pytest.raises(SystemExit) as stop:
        check.parse_args(argv)
    assert stop.value.code == 2
