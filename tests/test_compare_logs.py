"""analysis/compare_logs.py on logs written here: its verdicts, the float32
distances it reports, resumed runs and bad input.  (tests/test_cli.py
compares two real runs of one command.)"""
import json
import os
import subprocess

import numpy
import pytest

from analysis import compare_logs
from helpers import PY, ROOT, error_line

MACHINE = {'cpu': 'AMD EPYC', 'vector_unit': 'avx2', 'blas_kernels': 'Zen'}


def write_log(path, costs, valids, bleus=(), machine=MACHINE, resumed=(), workers=1):
    """A training log: update events of ``costs`` ({update: cost}), validation
    and bleu events ({update: value}); ``resumed``: (update, cost) pairs
    written again after a restart, as a resumed run appends them."""
    events = [{'event': 'start', 'uidx': 0, 'time': 1.0, 'machine': machine,
               'workers': workers}]
    for u in sorted(set(costs) | set(valids)):
        if u in costs:
            events.append({'event': 'update', 'uidx': u, 'time': 2.0, 'cost': costs[u]})
        if u in valids:
            events.append({'event': 'validation', 'uidx': u, 'time': 2.0, 'cost': valids[u]})
        if u in dict(bleus):
            events.append({'event': 'bleu', 'uidx': u, 'time': 2.0, 'bleu': dict(bleus)[u]})
    if resumed:
        events.append({'event': 'start', 'uidx': resumed[0][0] - 1, 'time': 3.0,
                       'reloaded': True, 'machine': machine})
        events += [{'event': 'update', 'uidx': u, 'time': 4.0, 'cost': c} for u, c in resumed]
    path.write_text(''.join(json.dumps(e) + '\n' for e in events))
    return str(path)


def next_float32(value, steps=1):
    """``value`` moved by ``steps`` float32 ulps."""
    x = numpy.float32(value)
    for _ in range(steps):
        x = numpy.nextafter(x, numpy.float32(numpy.inf))
    return float(x)


COSTS = {100: 33.14643478393555, 200: 33.76267623901367, 300: 29.052993774414062}
# the logs hold float32 values
VALIDS = {200: 60.90305709838867, 300: float(numpy.float32(50.48))}


def compare(tmp_path, capsys, reference, run, *flags):
    status = compare_logs.main([reference, run] + list(flags))
    return status, capsys.readouterr()


def test_identical_logs(tmp_path, capsys):
    a = write_log(tmp_path / 'a.jsonl', COSTS, VALIDS, [(300, 6.7)])
    b = write_log(tmp_path / 'b.jsonl', COSTS, VALIDS, [(300, 6.7)])
    status, out = compare(tmp_path, capsys, a, b)
    assert status == 0
    assert 'batch cost:          3 in both,     3 the same' in out.out
    assert 'machine: the same' in out.out
    assert out.out.splitlines()[-1].startswith('verdict: identical')


def test_batch_costs_apart_in_ulps_with_the_same_validations(tmp_path, capsys):
    """Two batch costs 1 and 3 float32 ulps apart, the validations equal, the
    BLAS kernels another: 'same validations', status 0."""
    moved = dict(COSTS)
    moved.update({200: next_float32(COSTS[200]), 300: next_float32(COSTS[300], 3)})
    a = write_log(tmp_path / 'a.jsonl', COSTS, VALIDS)
    b = write_log(tmp_path / 'b.jsonl', moved, VALIDS,
                  machine=dict(MACHINE, vector_unit='avx512', blas_kernels='Cooperlake'),
                  workers=2)
    status, out = compare(tmp_path, capsys, a, b)
    assert status == 0
    assert 'batch cost:          3 in both,     1 the same; the others up to 3 ulps apart; ' \
           'first at update 200' in out.out
    assert ('machine: vector_unit avx2 -> avx512; blas_kernels Zen -> Cooperlake; '
            'workers 1 -> 2') in out.out
    assert 'verdict: same validations' in out.out and '2 of 3 batch costs up to 3 ulps' in out.out


def test_a_validation_that_differs_is_a_divergence(tmp_path, capsys):
    later = dict(VALIDS)
    later[300] = next_float32(VALIDS[300])
    a = write_log(tmp_path / 'a.jsonl', COSTS, VALIDS)
    b = write_log(tmp_path / 'b.jsonl', COSTS, later)
    status, out = compare(tmp_path, capsys, a, b)
    assert status == 1
    assert out.out.splitlines()[-1] == ('verdict: diverged: the first validation that differs '
                                        'is at update 300; validation costs up to 1 ulps apart '
                                        'from there')
    # up to update 200 they agree
    assert compare(tmp_path, capsys, a, b, '--until', '200')[0] == 0


def test_a_resumed_run_counts_its_later_figures(tmp_path, capsys):
    """The reference was killed after update 300 and resumed from 200: its
    update 300 is logged twice, and the second one is the run's."""
    killed = dict(COSTS)
    killed[300] = 1.0
    a = write_log(tmp_path / 'a.jsonl', killed, VALIDS,
                  resumed=[(300, COSTS[300])])
    b = write_log(tmp_path / 'b.jsonl', COSTS, VALIDS)
    status, out = compare(tmp_path, capsys, a, b)
    assert status == 0 and 'verdict: identical' in out.out


def test_logs_without_a_machine_say_so(tmp_path, capsys):
    a = write_log(tmp_path / 'a.jsonl', COSTS, VALIDS, machine=None)
    b = write_log(tmp_path / 'b.jsonl', COSTS, VALIDS)
    status, out = compare(tmp_path, capsys, a, b)
    assert "machine: not recorded in the reference's log" in out.out


@pytest.mark.parametrize('case', ['no_common_update', 'missing'])
def test_bad_input_is_one_line(tmp_path, capsys, case):
    a = write_log(tmp_path / 'a.jsonl', COSTS, VALIDS)
    if case == 'missing':
        b = str(tmp_path / 'missing.jsonl')
    else:
        b = write_log(tmp_path / 'b.jsonl', {900: 1.0}, {})
    proc = subprocess.run([PY, os.path.join(ROOT, 'analysis', 'compare_logs.py'), a, b],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True)
    assert proc.stdout == ''
    error_line(proc, b if case == 'missing' else 'no update with a figure in both logs',
               alone=True)
