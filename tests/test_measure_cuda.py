"""gpu/measure_cuda.sh's order and budget (docs/gpu.md#when-a-gpu-is-lent),
with MEASURE_PYTHON an interpreter that prints what it was asked to run:
no device, no Theano."""
import os
import re
import stat
import subprocess

from helpers import ROOT, error_line

SCRIPT = os.path.join(ROOT, 'gpu', 'measure_cuda.sh')
HEADER = re.compile(r'^== \S+ \(limit (\d+) s, (\d+) threads, (\d+) s after the start\): (.*)$')


def _measure(tmp_path, seconds, **env):
    echo = tmp_path / 'python'
    echo.write_text('#!/bin/sh\necho "flags=$THEANO_FLAGS jobs=$NMT_COMPILE_JOBS"\n')
    echo.chmod(echo.stat().st_mode | stat.S_IXUSR)
    env = dict(os.environ, MEASURE_PYTHON=str(echo), MEASURE_CACHE=str(tmp_path / 'cache'),
               **env)
    return subprocess.run(['bash', SCRIPT, str(tmp_path / 'out'), str(seconds)], env=env,
                          capture_output=True, text=True, timeout=120)


def _runs(tmp_path, log):
    """[(limit, threads, seconds after the start, command, its output)]."""
    runs = []
    for line in (tmp_path / 'out' / log).read_text().splitlines():
        m = HEADER.match(line)
        if m:
            runs.append([int(m.group(1)), int(m.group(2)), int(m.group(3)), m.group(4), ''])
        elif runs and ' flags=' in line:
            runs[-1][4] = line.split(' ', 1)[1]   # without the time it came
    return runs


def test_the_papers_size_runs_first_on_every_core_then_the_lanes_share_them(tmp_path):
    proc = _measure(tmp_path, 1000, MEASURE_RESERVE='200', MEASURE_DEVICE='opencl0:0',
                    MEASURE_LANES='cpu profile')
    assert proc.returncode == 0, proc.stderr
    cores = len(os.sched_getaffinity(0))
    papers = _runs(tmp_path, 'papers.log')
    assert [r[3].split('--decoder ')[1].split()[0] for r in papers] == ['baseline', 'attentive']
    (base_limit, base_threads, _, base, base_out), (att_limit, _, _, _, att_out) = papers
    # the baseline may take half of step 1 (1000 - 200 s), the attentive
    # decoder all of step 1 that is left; both on every core, on the device
    assert 390 <= base_limit <= 395 and 790 <= att_limit <= 795
    assert base_threads == cores and '--config paper' in base and '--updates 100' in base
    assert base_out.startswith('flags=device=opencl0:0,') and base_out.endswith(' jobs=%d' % cores)
    assert 'theano-gpu' in att_out
    share = max(1, cores // 2)
    cpu = _runs(tmp_path, 'cpu.log')
    assert len(cpu) == 3 and all(r[1] == share and r[0] >= 980 for r in cpu)
    assert 'flags=device=cpu,' in cpu[0][4] and 'theano-cpu' in cpu[0][4]
    (profile,) = _runs(tmp_path, 'profile.log')
    assert '--profile' in profile[3] and '--updates 5' in profile[3]
    assert 'theano-gpu' in profile[4] and profile[1] == share


def test_what_the_budget_does_not_reach_is_skipped_and_said(tmp_path):
    proc = _measure(tmp_path, 12, MEASURE_LANES='translate check')
    assert proc.returncode == 0, proc.stderr
    out = tmp_path / 'out'
    assert (out / 'papers.log').read_text().count('== skipped for want of time') == 2
    for log in ('translate.log', 'check.log'):
        assert (out / log).read_text().startswith('== skipped for want of time')


def test_a_reserve_of_the_whole_budget_runs_the_lanes_alone(tmp_path):
    proc = _measure(tmp_path, 300, MEASURE_RESERVE='300', MEASURE_LANES='translate')
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / 'out' / 'papers.log').read_text().count('== skipped for want of time') == 2
    (translate,) = _runs(tmp_path, 'translate.log')
    assert translate[0] >= 290 and translate[1] == len(os.sched_getaffinity(0))


def test_a_bad_lane_or_budget_is_refused_before_anything_runs(tmp_path):
    proc = _measure(tmp_path, 100, MEASURE_LANES='cpu gpu-a')
    error_line(proc, 'unknown lane gpu-a', 'MEASURE_LANES', status=2, alone=True)
    proc = _measure(tmp_path, '10m')
    error_line(proc, 'not a whole number: 10m', status=2, alone=True)
    assert not (tmp_path / 'out').exists()
