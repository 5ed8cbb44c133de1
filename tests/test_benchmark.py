"""benchmark.py runs end to end on the tiny config and prints its JSON line.

Both commands run at once in subprocesses (the venv's python); most of the
time is Theano's graph optimisation and, on a cold cache, C compilation.
"""
import json
import os
import shutil
import subprocess
import sys

import pytest

from helpers import ROOT  # noqa: E402
from tiny_runs import QUICK_ENV
BENCH = os.path.join(ROOT, 'speed', 'benchmark.py')
TIMEOUT = 1200


def _start(*args):
    return subprocess.Popen([sys.executable, BENCH] + list(args), cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            universal_newlines=True)


def _last_json(proc):
    out, err = proc.communicate(timeout=TIMEOUT)
    assert proc.returncode == 0, err[-3000:]
    lines = out.strip().splitlines()
    assert lines, err[-3000:]
    return json.loads(lines[-1])


def test_benchmark_tiny_train_and_translate():
    train = _start('train', '--config', 'tiny', '--updates', '3')
    translate = _start('translate', '--config', 'tiny', '--sentences', '5',
                       '--batch-size', '2', '--processes', '2', '--profile')
    try:
        r = _last_json(train)
        t = _last_json(translate)
    finally:
        for p in (train, translate):
            if p.poll() is None:
                p.kill()

    assert r['mode'] == 'train' and r['config'] == 'tiny' and r['decoder'] == 'baseline'
    assert r['updates'] == 3 and r['original_style'] is False
    for key in ('words_per_sec', 'updates_per_sec', 'sec_per_update', 'compile_sec',
                'peak_rss_mb'):
        assert r[key] > 0, key
    assert 0 <= r['system_share'] <= 1
    # from the process's start to its first update: the compile and more
    assert r['first_update_after_sec'] > r['compile_sec']
    assert 0 < r['main_thread_cpu_sec_per_update'] <= r['cpu_sec_per_update']
    assert r['compiled_modules'] >= 0 and r['compile_gxx_cpu_sec'] >= 0
    assert r['options']['decoder'] == 'gru_cond' and r['options']['dim'] == 24
    assert r['machine']['cores'] >= 1 and 'blas' in r['machine']

    assert t['mode'] == 'translate' and t['sentences'] == 5 and t['batch_size'] == 2
    assert t['processes'] == 2
    for key in ('sentences_per_sec', 'sentences_per_sec_single', 'sentences_per_sec_processes',
                'tokens_per_sec', 'tokens_per_sec_single', 'compile_sec', 'compile_sec_single',
                'peak_rss_mb'):
        assert t[key] > 0, key
    # the batched search gives the one-sentence search's translations
    assert t['identical'] is True and t['max_score_difference'] < 1e-4
    # --profile: f_next's top ops in each search, and its share of the search
    for kind in ('single', 'batched'):
        prof = t['profile'][kind]
        assert prof['top_ops'] and all(0 < op['share'] <= 1 for op in prof['top_ops'])
        assert 0 < prof['share_of_search_wall'] <= 1


@pytest.mark.skipif(shutil.which('mpirun') is None, reason='no mpirun on this machine '
                    '(bash setup.sh installs Open MPI)')
def test_benchmark_workers_time_the_parts_of_their_update():
    """--workers 2: one process, then two workers, and the time of each part
    of a worker's update (gradients, their sum, the norm, its group's
    clipping and optimizer step, the parameters' exchange)."""
    r = _last_json(_start('train', '--config', 'tiny', '--updates', '3', '--workers', '2'))
    assert r['workers'] == 2 and set(r['side_by_side']) == {'one_process', 'workers'}
    workers = r['side_by_side']['workers']
    assert workers['workers'] == 2 and workers['threads_per_process'] >= 1
    parts = workers['part_sec_per_update']
    assert list(parts) == ['gradients', 'sum', 'norm', 'clip', 'optimizer', 'share']
    assert all(sec > 0 for sec in parts.values())
    system = workers['part_system_sec_per_update']
    assert list(system) == list(parts)
    assert all(0 <= system[p] <= parts[p] * 1.05 + 1e-3 for p in parts)
    assert sum(parts.values()) <= workers['sec_per_update'] * 1.05
    assert r['speedup_words_per_sec'] == pytest.approx(
        workers['words_per_sec'] / r['side_by_side']['one_process']['words_per_sec'], abs=1e-3)


def test_batch_scaling_times_each_size_and_bounds_the_workers():
    """speed/batch_scaling.py: the gradient function and the optimizer's step
    timed at each batch size, the straight line through them and the
    workers' bound computed from the rows it prints."""
    proc = subprocess.Popen([sys.executable, os.path.join(ROOT, 'speed', 'batch_scaling.py'),
                             '--config', 'tiny', '--batch-sizes', '16,2,8', '--updates', '2'],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            universal_newlines=True, env=QUICK_ENV)
    r = _last_json(proc)
    assert [row['batch_size'] for row in r['rows']] == [2, 8, 16]
    assert all(row['gradient_cpu_sec'] > 0 and row['step_cpu_sec'] > 0 for row in r['rows'])
    # tiny's batch is 16, and its half was timed: the bound from those rows
    whole, half = r['rows'][2], r['rows'][1]
    assert r['batch_size'] == 16 and r['workers'] == 2
    assert r['workers_bound'] == pytest.approx(
        (whole['gradient_cpu_sec'] + whole['step_cpu_sec']) /
        (half['gradient_cpu_sec'] + half['step_cpu_sec'] / 2), abs=2e-3)
    assert r['machine']['cores'] >= 1 and r['threads'] == 1


def test_batch_scaling_line_and_bound():
    sys.path.insert(0, ROOT)
    from speed import batch_scaling
    # 10 ms fixed + 2 ms a sentence, the sizes below FIT_FROM left out
    fixed, per = batch_scaling.straight_line([1, 4, 8, 16], [0.5, 0.018, 0.026, 0.042])
    assert fixed == pytest.approx(0.010) and per == pytest.approx(0.002)
    rows = [dict(batch_size=16, gradient_cpu_sec=0.042, step_cpu_sec=0.004),
            dict(batch_size=32, gradient_cpu_sec=0.074, step_cpu_sec=0.004)]
    # (G(32) + A) / (G(16) + A / 2)
    assert batch_scaling.workers_bound(rows, 32, 2) == pytest.approx(0.078 / 0.044)
    assert batch_scaling.workers_bound(rows, 32, 4) is None      # 8 not timed
    assert batch_scaling.workers_bound(rows, 33, 2) is None      # not divisible


def test_batch_scaling_refuses_bad_sizes_in_one_line():
    done = subprocess.run([sys.executable, os.path.join(ROOT, 'speed', 'batch_scaling.py'),
                           '--batch-sizes', '4,x'], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode != 0 and 'batch sizes separated by commas' in done.stderr
    assert 'Traceback' not in done.stderr
