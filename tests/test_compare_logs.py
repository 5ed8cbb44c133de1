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
               alone=True, status=2)


def log_text(events):
    return ''.join((e if isinstance(e, str) else json.dumps(e)) + '\n' for e in events)


def test_a_log_of_several_runs_compares_its_last_or_the_one_named(tmp_path, capsys):
    """A log that a new run without --reload appended to (two starts from
    update 0): its last run is compared, and says so; --in-run 1 the first;
    a third run that is not there is one line."""
    a = write_log(tmp_path / 'a.jsonl', COSTS, VALIDS)
    first = {**COSTS, 100: 2.0}
    b = tmp_path / 'b.jsonl'
    b.write_text(open(write_log(tmp_path / 'x.jsonl', first, VALIDS)).read()
                 + open(write_log(tmp_path / 'y.jsonl', COSTS, VALIDS)).read())
    status, out = compare(tmp_path, capsys, a, str(b))
    assert status == 0 and out.out.splitlines()[0] == (
        '%s: holds 2 runs (starts without --reload): run 2 is compared (--in-run K names '
        'another)' % b)
    assert out.out.splitlines()[-1].startswith('verdict: identical')
    status, out = compare(tmp_path, capsys, a, str(b), '--in-run', '1')
    assert status == 0 and 'batch cost:          3 in both,     2 the same' in out.out
    status, out = compare(tmp_path, capsys, a, str(b), '--in-run', '3')
    assert status == 2 and out.err == 'error: %s: holds 2 runs, not 3 (--in-run)\n' % b


@pytest.mark.parametrize('bad', ['nan_cost', 'null_validation', 'nan_stop'])
def test_nan_is_a_divergence(tmp_path, capsys, bad):
    """A NaN cost (NaN in the log, or null: the writer's NaN), or a run that
    stopped on a NaN cost: 'diverged', exit status 1."""
    a = write_log(tmp_path / 'a.jsonl', COSTS, VALIDS)
    b = tmp_path / 'b.jsonl'
    if bad == 'nan_cost':
        b.write_text(open(write_log(tmp_path / 'x.jsonl', {**COSTS, 200: 1.0},
                                    VALIDS)).read().replace('1.0}', 'NaN}'))
        line = "the run at update 200: its batch cost is nan"
    elif bad == 'null_validation':
        write_log(b, COSTS, {**VALIDS, 300: None})
        line = 'the run at update 300: its validation cost is null (NaN or Inf)'
    else:
        write_log(b, COSTS, VALIDS)
        with open(b, 'a') as f:
            f.write(json.dumps({'event': 'stop', 'uidx': 301, 'reason': 'nan_cost'}) + '\n')
        line = 'the run at update 301: the run stopped on a NaN or Inf cost'
    status, out = compare(tmp_path, capsys, a, str(b))
    assert status == 1 and 'nan ulps' not in out.out
    assert out.out.splitlines()[-1] == 'verdict: diverged: ' + line


def test_every_malformed_line_is_named(tmp_path):
    """Lines that are not events (not JSON in the middle of a run, a cost
    that is not a number, no uidx): one line naming each with its cause,
    exit status 2; a line cut short in the middle is not taken for an
    append cut short (that one is followed by the next run's start)."""
    events = [{'event': 'start', 'uidx': 0}, {'event': 'update', 'uidx': 1, 'cost': 2.0},
              '{"event": "update", "uidx": 2, "co', {'event': 'update', 'uidx': 3, 'cost': 'x'},
              {'event': 'update', 'cost': 1.0}, {'event': 'update', 'uidx': 5, 'cost': 1.0},
              '{"event": "upd', '{"event": "valid', {'event': 'update', 'uidx': 6, 'cost': 1.0}]
    bad = tmp_path / 'bad.jsonl'
    bad.write_text(log_text(events))
    a = write_log(tmp_path / 'a.jsonl', COSTS, VALIDS)
    proc = subprocess.run([PY, os.path.join(ROOT, 'analysis', 'compare_logs.py'), a, str(bad)],
                          capture_output=True, text=True)
    assert proc.stdout == ''
    line = error_line(proc, status=2, alone=True)
    assert line == ('error: %s: 5 lines are not events of a training log: lines 3, 7-8: not '
                    'JSON; line 4: cost "x" is not a number; line 5: no uidx' % bad)
    assert 'cut short' not in proc.stderr


def test_a_line_cut_before_the_next_run_is_skipped(tmp_path, capsys):
    """A line cut by a full disk, then the start of the run that resumed:
    skipped with one warning, the rest compared."""
    a = write_log(tmp_path / 'a.jsonl', COSTS, VALIDS)
    b = tmp_path / 'b.jsonl'
    text = open(write_log(tmp_path / 'x.jsonl', COSTS, VALIDS)).read().splitlines()
    cut = text[:3] + ['{"event": "upd'] + [json.dumps({'event': 'start', 'uidx': 100,
                                                        'reloaded': True})] + text[3:]
    b.write_text('\n'.join(cut) + '\n')
    status, out = compare(tmp_path, capsys, a, str(b))
    assert status == 0 and out.err == ('warning: %s: line 4 cut short (an append interrupted '
                                       'by a full disk or a kill): skipped\n' % b)
