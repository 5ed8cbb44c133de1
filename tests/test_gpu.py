"""On the GPU every decoder configuration gives the CPU's numbers.

For each configuration of conftest.CONFIGS: per-sentence costs and one
training update (fused Adadelta, dropout on, as nmt.train) agree to 1e-4
relative, and beam search returns the same translations (a different best
hypothesis is accepted only where the CPU scores both within float32
rounding: a tie).  The numbers come from child processes (tests/gpu_worker.py),
some with device=cuda (FAST_RUN, as nmt.py runs, for the configurations
conftest compiles in FAST_RUN; see gpu_worker.gpu_mode) and some with
device=cpu (FAST_COMPILE), run side by side; they exchange .npz files.

Skipped, with the reason, where there is no GPU: pygpu or the CUDA links of
``setup.sh --gpu`` missing, or no CUDA device.  Where they are there and the
GPU does not come up, the tests fail.
"""
import importlib.util
import os
import subprocess
import sys

import numpy as np
import pytest

from gpu import cuda_libs
import theano_env
from conftest import CONFIGS, HERE

RTOL = 1e-4
# every configuration, or the subset NMT_GPU_CONFIGS names (for a short GPU lease)
GPU_CONFIGS = [n for n in CONFIGS if not os.environ.get('NMT_GPU_CONFIGS')
               or n in os.environ['NMT_GPU_CONFIGS'].split(',')]
WORKER_TIMEOUT = 1800


def why_no_gpu():
    """A reason to skip, or None when a GPU should work here."""
    if importlib.util.find_spec('pygpu') is None:
        return 'no GPU set-up: pygpu is not installed (bash setup.sh --gpu)'
    missing = [n for n in theano_env.GPU_LINKS
               if not os.path.exists(os.path.join(theano_env.GPU_LIB_DIR, n))]
    if missing:
        return 'no GPU set-up: %s missing in %s (bash setup.sh --gpu)' % (
            ', '.join(missing), theano_env.GPU_LIB_DIR)
    if cuda_libs.device_count() < 1:
        return 'no CUDA device'
    return None


REASON = why_no_gpu()
pytestmark = pytest.mark.skipif(REASON is not None, reason=str(REASON))


def _start_workers(device, names, tmp, n_procs):
    """n_procs worker processes on device sharing names round-robin."""
    procs = []
    for i in range(n_procs):
        chunk = names[i::n_procs]
        if not chunk:
            continue
        out = os.path.join(tmp, '%s-%d.npz' % (device, i))
        log = open(os.path.join(tmp, '%s-%d.log' % (device, i)), 'w')
        env = theano_env.device_env(device)
        # Each worker compiles into its own folder (no waiting for another's
        # compile lock); the CPU reference compiles in FAST_COMPILE (the same
        # graphs, optimised less: several times quicker to compile).
        env['THEANO_FLAGS'] += (',compiledir_format=compiledir_nmt-py%%(python_version)s-'
                                'np%%(numpy_version)s-test-%s%d' % (device, i))
        if device == 'cpu':
            env['THEANO_FLAGS'] += ',mode=FAST_COMPILE'
        proc = subprocess.Popen([sys.executable, os.path.join(HERE, 'gpu_worker.py'), out]
                                + chunk, env=env, stdout=log, stderr=subprocess.STDOUT)
        procs.append((proc, out, log))
    return procs


def _collect(procs):
    results = {}
    for proc, out, log in procs:
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
        results.update(np.load(out).items())
    return results


@pytest.fixture(scope='module')
def numbers(tmp_path_factory):
    """{'cuda': {...}, 'cpu': {...}}: every configuration's numbers per device."""
    tmp = str(tmp_path_factory.mktemp('gpu'))
    names = GPU_CONFIGS
    cores = os.cpu_count() or 2
    # the GPU workers compile the most (FAST_RUN, GPU kernels)
    procs = {'cuda': min(len(names), cores), 'cpu': min(len(names), max(1, cores // 4))}
    running = {d: _start_workers(d, names, tmp, n) for d, n in procs.items()}
    return {d: _collect(procs) for d, procs in running.items()}


def rel_diff(a, b):
    a, b = np.asarray(a, dtype='float64'), np.asarray(b, dtype='float64')
    assert a.shape == b.shape
    return np.abs(a - b).max() / max(np.abs(b).max(), 1e-30)


def test_workers_ran_on_their_devices(numbers):
    assert str(numbers['cuda']['device']).startswith('cuda')
    assert str(numbers['cpu']['device']) == 'cpu'


@pytest.mark.parametrize('name', GPU_CONFIGS)
def test_costs(numbers, name):
    gpu, cpu = numbers['cuda'], numbers['cpu']
    key = '%s/costs' % name
    assert np.all(np.isfinite(gpu[key])) and cpu[key].shape == (3,)
    assert rel_diff(gpu[key], cpu[key]) <= RTOL


@pytest.mark.parametrize('name', GPU_CONFIGS)
def test_training_update(numbers, name):
    gpu, cpu = numbers['cuda'], numbers['cpu']
    assert rel_diff(gpu['%s/train_cost' % name], cpu['%s/train_cost' % name]) <= RTOL
    prefix = '%s/delta/' % name
    params = sorted(k for k in cpu if k.startswith(prefix))
    assert params and sorted(k for k in gpu if k.startswith(prefix)) == params
    worst = max((rel_diff(gpu[k], cpu[k]), k) for k in params)
    assert worst[0] <= RTOL, 'update of %s differs by %.3g' % (worst[1], worst[0])
    # the update really moved the parameters
    assert all(np.abs(cpu[k]).max() > 0 for k in params)


def _hypotheses(numbers, device, name, i):
    samples = [s for s in numbers[device]['%s/beam/%d/samples' % (name, i)]]
    scores = numbers[device]['%s/beam/%d/scores' % (name, i)]
    return dict(zip(samples, scores))


def _best(hyps):
    """The translation as translate.py -n picks it: lowest score per token."""
    return min(hyps, key=lambda s: (hyps[s] / len(s.split()), s))


@pytest.mark.parametrize('name', GPU_CONFIGS)
def test_beam_search(numbers, name):
    n = len([k for k in numbers['cpu'] if k.startswith('%s/beam/' % name)]) // 2
    assert n > 0
    for i in range(n):
        gpu, cpu = _hypotheses(numbers, 'cuda', name, i), _hypotheses(numbers, 'cpu', name, i)
        for hyp in set(gpu) & set(cpu):
            assert abs(gpu[hyp] - cpu[hyp]) <= RTOL * abs(cpu[hyp]), (name, i, hyp)
        g_best, c_best = _best(gpu), _best(cpu)
        if g_best != c_best:
            # accepted only as a float32 tie: the CPU scores both (almost) alike
            assert g_best in cpu, (name, i, g_best, c_best)
            per_token = [cpu[h] / len(h.split()) for h in (g_best, c_best)]
            assert abs(per_token[0] - per_token[1]) <= RTOL * abs(per_token[1]), \
                (name, i, g_best, c_best, per_token)
