"""On a GPU back-end device every decoder configuration gives the CPU's numbers.

For each configuration of conftest.CONFIGS: per-sentence costs and one
training update (fused Adadelta, dropout on, as nmt.train) agree to 1e-4
relative, and beam search returns the same translations (a different best
hypothesis is accepted only where the CPU scores both within float32
rounding: a tie).  The numbers come from child processes
(tests/gpu_worker.py): one on the device, one on the CPU (FAST_COMPILE), run
side by side; they exchange .npz files.  Compilation modes on the device:
gpu_worker.modes.

The devices: OpenCL (``bash setup.sh --opencl``: pocl's device on this CPU,
what CI runs) and CUDA (``bash setup.sh --gpu`` and an NVIDIA GPU), each
skipped, with the reason, where it is not set up here (tests/gpu_devices.py).
Where it is set up and the back-end does not come up, the tests fail.
"""
import os
import subprocess
import sys

import numpy as np
import pytest

from theano_platform import theano_env
from conftest import CONFIGS, FULL, HERE
from gpu_devices import DEVICES, why_not
from gpu import check
RTOL = 1e-4
# An update below this fraction of the largest of its configuration is
# compared on that scale: a gradient that is zero in exact arithmetic (that
# of the attention bias c_tt: the softmax ignores a constant added to every
# energy) holds only rounding noise, on either device.
NOISE_FLOOR = 1e-3
# One configuration of each decoder class (the mean residual is the attentive
# one's decoder with another summary), dropout on (making the functions of one
# configuration takes minutes with pocl on 2 cores: CI's budget); every
# configuration with NMT_TESTS_FULL=1, or those NMT_GPU_CONFIGS names.
CI_CONFIGS = ('baseline_dropout', 'attentive', 'memory', 'selfattn')
if os.environ.get('NMT_GPU_CONFIGS'):
    GPU_CONFIGS = [n for n in CONFIGS if n in os.environ['NMT_GPU_CONFIGS'].split(',')]
else:
    GPU_CONFIGS = [n for n in CONFIGS if FULL or n in CI_CONFIGS]
WORKER_TIMEOUT = 3600
# the cases of gpu/check.py
CHECK_CASES = ['attention_scan', 'attention_scan_grad', 'batched_dot', 'embedding',
               'gru_scan', 'gru_scan_grad', 'mrg_dropout', 'softmax_cost', 'target_attention']
KINDS = [pytest.param(kind, marks=pytest.mark.skipif(why_not(kind) is not None,
                                                     reason=str(why_not(kind))))
         for kind in DEVICES]


def _start_worker(device, names, tmp, flags='', part=0):
    """A worker process computing names' numbers on device: (process, .npz, log)."""
    out = os.path.join(tmp, '%s-%d.npz' % (device.replace(':', '_'), part))
    log = open(out[:-4] + '.log', 'w')
    env = theano_env.device_env(device)
    env['THEANO_FLAGS'] += flags
    proc = subprocess.Popen([sys.executable, os.path.join(HERE, 'gpu_worker.py'), out]
                            + names, env=env, stdout=log, stderr=subprocess.STDOUT)
    return proc, out, log


def _collect(worker):
    proc, out, log = worker
    try:
        code = proc.wait(timeout=WORKER_TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        code = 'timeout'
    log.close()
    if code != 0:
        with open(log.name) as f:
            tail = f.read()[-3000:]
        pytest.fail('worker %s exited %s:\n%s' % (out, code, tail))
    return dict(np.load(out).items())


@pytest.fixture(scope='module', params=KINDS)
def numbers(request, tmp_path_factory):
    """{'gpu': {...}, 'cpu': {...}, 'device': ...}: every configuration's
    numbers on one kind of GPU device and on the CPU."""
    tmp = str(tmp_path_factory.mktemp('gpu'))
    device = DEVICES[request.param]
    # the device's configurations over two processes (two cores), the CPU
    # reference in FAST_COMPILE (the same graphs, Python code: nothing to compile)
    gpu = [_start_worker(device, GPU_CONFIGS[i::2], tmp, part=i)
           for i in range(min(2, len(GPU_CONFIGS)))]
    cpu = _start_worker('cpu', GPU_CONFIGS, tmp, ',mode=FAST_COMPILE')
    result = {'gpu': {}, 'cpu': _collect(cpu), 'device': device}
    for worker in gpu:
        result['gpu'].update(_collect(worker))
    return result


def rel_diff(a, b):
    a, b = np.asarray(a, dtype='float64'), np.asarray(b, dtype='float64')
    assert a.shape == b.shape
    return np.abs(a - b).max() / max(np.abs(b).max(), 1e-30)


def test_workers_ran_on_their_devices(numbers):
    assert str(numbers['gpu']['device']) == numbers['device']
    assert str(numbers['cpu']['device']) == 'cpu'


@pytest.mark.parametrize('name', GPU_CONFIGS)
def test_costs(numbers, name):
    gpu, cpu = numbers['gpu'], numbers['cpu']
    key = '%s/costs' % name
    assert np.all(np.isfinite(gpu[key])) and cpu[key].shape == (3,)
    assert rel_diff(gpu[key], cpu[key]) <= RTOL


@pytest.mark.parametrize('name', GPU_CONFIGS)
def test_training_update(numbers, name):
    gpu, cpu = numbers['gpu'], numbers['cpu']
    assert rel_diff(gpu['%s/train_cost' % name], cpu['%s/train_cost' % name]) <= RTOL
    prefix = '%s/delta/' % name
    params = sorted(k for k in cpu if k.startswith(prefix))
    assert params and sorted(k for k in gpu if k.startswith(prefix)) == params
    largest = max(np.abs(cpu[k]).max() for k in params)
    for k in params:
        # new - old of float32 parameters: each side rounds the new value to
        # the parameter's ulp, so two ulps of its size are allowed beyond 1e-4;
        # a tiny update is compared on the scale of the largest (NOISE_FLOOR)
        ulp = np.finfo(np.float32).eps * float(cpu[k.replace('/delta/', '/param_max/')])
        diff = np.abs(gpu[k] - cpu[k]).max()
        size = max(np.abs(cpu[k]).max(), NOISE_FLOOR * largest)
        assert diff <= RTOL * size + 2 * ulp, \
            'update of %s differs by %.3g relative (%.3g; ulp %.3g)' % (k, diff / size, diff, ulp)
    # the update really moved the parameters
    assert all(np.abs(cpu[k]).max() > 0 for k in params)


def _hypotheses(numbers, side, name, i):
    samples = [s for s in numbers[side]['%s/beam/%d/samples' % (name, i)]]
    scores = numbers[side]['%s/beam/%d/scores' % (name, i)]
    return dict(zip(samples, scores))


def _best(hyps):
    """The translation as translate.py -n picks it: lowest score per token."""
    return min(hyps, key=lambda s: (hyps[s] / len(s.split()), s))


@pytest.mark.parametrize('name', GPU_CONFIGS)
def test_beam_search(numbers, name):
    n = len([k for k in numbers['cpu'] if k.startswith('%s/beam/' % name)]) // 2
    assert n > 0
    for i in range(n):
        gpu, cpu = _hypotheses(numbers, 'gpu', name, i), _hypotheses(numbers, 'cpu', name, i)
        for hyp in set(gpu) & set(cpu):
            assert abs(gpu[hyp] - cpu[hyp]) <= RTOL * abs(cpu[hyp]), (name, i, hyp)
        g_best, c_best = _best(gpu), _best(cpu)
        if g_best != c_best:
            # accepted only as a float32 tie: the CPU scores both (almost) alike
            assert g_best in cpu, (name, i, g_best, c_best)
            per_token = [cpu[h] / len(h.split()) for h in (g_best, c_best)]
            assert abs(per_token[0] - per_token[1]) <= RTOL * abs(per_token[1]), \
                (name, i, g_best, c_best, per_token)


@pytest.mark.parametrize('kind', KINDS)
def test_gpu_check_passes(kind):
    """gpu/check.py, every kind of graph the models use, on the device
    against the CPU and float64: every case passes (MRG streams exact), with
    nodes on the GPU."""
    env = theano_env.device_env(DEVICES[kind])
    proc = subprocess.run([sys.executable, os.path.join(os.path.dirname(HERE), 'gpu', 'check.py'),
                           '--seed', '1'], env=env, capture_output=True, text=True,
                          timeout=WORKER_TIMEOUT)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    rows = [line.split() for line in proc.stdout.splitlines()
            if line.split() and line.split()[0] in CHECK_CASES]
    assert sorted(r[0] for r in rows) == sorted(CHECK_CASES)
    for row in rows:
        on_gpu, nodes = map(int, row[6].split('/'))
        assert 0 < on_gpu <= nodes and row[8] == 'yes', row
        assert float(row[1]) <= check.FACTOR, row


def test_side_by_side_opencl_processes_never_share_a_pocl_cache(tmp_path):
    """theano_env.pocl_cache_slot: a process holds its slot for its life;
    one beside it takes the next, one after it the same again."""
    root = str(tmp_path / 'pocl')
    code = ('import sys; from theano_platform import theano_env; print(theano_env.pocl_cache_slot(sys.argv[1]),'
            ' flush=True); sys.stdin.read()')

    def holder():
        return subprocess.Popen([sys.executable, '-c', code, root], cwd=os.path.dirname(HERE),
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    first = holder()
    assert first.stdout.readline().strip() == os.path.join(root, 'slot-0')
    beside = holder()
    assert beside.stdout.readline().strip() == os.path.join(root, 'slot-1')
    for proc in (first, beside):
        proc.stdin.close()
        assert proc.wait(timeout=60) == 0
    after = holder()
    assert after.stdout.readline().strip() == os.path.join(root, 'slot-0')
    after.stdin.close()
    assert after.wait(timeout=60) == 0


@pytest.mark.parametrize('kind', KINDS)
def test_a_device_that_does_not_come_up_is_one_error_line(kind):
    """A device number the machine lacks: Theano only logs its failure and
    would go on on the CPU; the check after 'import theano' (an after-import
    hook of theano_repairs) stops with one line and status 1."""
    device = {'opencl': 'opencl0:9', 'cuda': 'cuda9'}[kind]
    code = 'from theano_platform import theano_env; import theano; print("went on")'
    proc = subprocess.run([sys.executable, '-c', code],
                          env=theano_env.device_env(device), cwd=os.path.dirname(HERE),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1 and 'went on' not in proc.stdout
    errors = [line for line in proc.stderr.splitlines() if line.startswith('error:')]
    assert len(errors) == 1 and 'Theano did not start it' in errors[0], proc.stderr[-2000:]
