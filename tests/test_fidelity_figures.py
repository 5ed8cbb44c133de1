"""tests/fidelity_figures.py --compare: what it lets through and what it does not.

(The figures themselves are what the fixture-exactness tests check against
the NumPy reference; recording them needs every decoder compiled, so the
record is run by hand on each Python: docs/replication.md#python-versions.)
"""
import json

import numpy as np
import pytest

import fidelity_figures


def _write(path, cost=25.0, grad=(1e-3, -2.0), hypotheses=((5, 0),), extra=None):
    arrays = {'about': np.array('{}'),
              'baseline/costs/regularised': np.float32(cost),
              'baseline/grads/Wemb': np.array(grad, dtype='float32'),
              'baseline/beam/0/scores': np.array([1.5], dtype='float32'),
              'baseline/beam/0/hypotheses': np.array(json.dumps(hypotheses))}
    arrays.update(extra or {})
    np.savez(str(path), **arrays)
    return str(path)


def _within(tmp_path, **changes):
    a = _write(tmp_path / 'a.npz')
    b = _write(tmp_path / 'b.npz', **changes)
    with np.load(a) as fa, np.load(b) as fb:
        return {kind: ok for (_, kind), (_, _, ok) in fidelity_figures.differences(fa, fb).items()}


def test_float32_rounding_passes_and_larger_differences_do_not(tmp_path):
    assert all(_within(tmp_path, cost=25.0 * (1 + 3e-7)).values())
    assert _within(tmp_path, cost=25.01) == {'costs': False, 'grads': True, 'beam': True}
    # a gradient near zero is held to the absolute tolerance
    assert not _within(tmp_path, grad=(1.01e-3, -2.0))['grads']


def test_other_hypotheses_fail(tmp_path):
    assert not _within(tmp_path, hypotheses=((5, 7, 0),))['beam']


def test_compare_command_exits_1_and_names_a_missing_figure(tmp_path, capsys):
    a = _write(tmp_path / 'a.npz')
    assert fidelity_figures.main(['--compare', a, a]) == 0
    b = _write(tmp_path / 'b.npz', cost=30.0)
    assert fidelity_figures.main(['--compare', a, b]) == 1
    assert 'NO' in capsys.readouterr().out
    c = _write(tmp_path / 'c.npz', extra={'mean/costs/regularised': np.float32(1.)})
    with pytest.raises(SystemExit) as stop:
        fidelity_figures.main(['--compare', a, c])
    assert 'mean/costs/regularised' in str(stop.value)
