"""Training and translation over several MPI workers (docs/distributed.md),
compared with one process: the parameters after 1 and 20 updates (baseline
and attentive residual decoder; two workers on the OpenCL device after 3),
the translation files byte for byte, the
exact resume of a 2-worker run with dropout, a worker killed by a real
signal (the run ends with a line naming it, no hang, the checkpoint
intact), and bad launches (options that differ, a worker without mpi4py).

The MPI runs need Open MPI's mpirun (setup.sh installs it); without it they
are skipped.  As root, Open MPI needs OMPI_ALLOW_RUN_AS_ROOT(_CONFIRM), and
2 workers on fewer cores need --oversubscribe: MPIRUN has both.
"""
import os
import re
import shutil
import subprocess
import time

import numpy
import pytest

from machinery import distributed
from theano_platform import theano_env
from data_parallel import parameter_groups, share_bounds
from gpu_devices import DEVICES, why_not
from tiny_runs import NMT, PY, QUICK_ENV, ROOT, TRAIN_FLAGS, log_events, make_corpus

MPIRUN = shutil.which('mpirun')
needs_mpirun = pytest.mark.skipif(MPIRUN is None, reason='no mpirun on this machine '
                                  '(bash setup.sh installs Open MPI)')
OPENCL_REASON = why_not('opencl')
MPI_ENV = dict(QUICK_ENV, OMPI_ALLOW_RUN_AS_ROOT='1', OMPI_ALLOW_RUN_AS_ROOT_CONFIRM='1',
               OMPI_MCA_rmaps_base_oversubscribe='1', PYTHONUNBUFFERED='1')
TIMEOUT = 300

# TRAIN_FLAGS without dropout, with batches of 5 (18 pairs: shares of 3 and
# 2, and an epoch's last batch of 3), a checkpoint and a model file
# (MODEL.iterN.npz) after every update
FLAGS = [f for f in TRAIN_FLAGS if f not in ('--use_dropout', '--overwrite')]
FLAGS[FLAGS.index('--batch_size') + 1] = '5'
FLAGS += ['--saveFreq', '1']
DECODERS = {'baseline': [],
            'attentive': ['--decoder', 'gru_cond_residual', '--residual', 'attentive',
                          '--att_scoring', 'content']}


def mpirun(n, args, cwd, timeout=TIMEOUT, check=True, env=MPI_ENV):
    proc = subprocess.run([MPIRUN, '-np', str(n), PY] + args, cwd=cwd, env=env,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError('mpirun %s failed (%d):\n%s\n%s'
                             % (args, proc.returncode, proc.stdout[-3000:], proc.stderr[-3000:]))
    return proc


def one_process(args, cwd):
    proc = subprocess.run([PY] + args, cwd=cwd, env=QUICK_ENV, capture_output=True,
                          text=True, timeout=TIMEOUT)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def params(path):
    with numpy.load(str(path)) as f:
        return {k: f[k] for k in f.files if k not in ('history_errs', 'uidx')}


def max_difference(a, b):
    assert sorted(a) == sorted(b)
    return max(float(numpy.abs(a[k] - b[k]).max()) for k in a)


@pytest.fixture(scope='module')
def corpus(tmp_path_factory):
    d = tmp_path_factory.mktemp('mpi')
    make_corpus(d)
    return d


# --------------------------------------------------------------------------
# without MPI

def test_shares_cover_the_batch_in_order():
    for n in range(0, 12):
        for size in (1, 2, 3, 5):
            bounds = [share_bounds(n, size, r) for r in range(size)]
            assert bounds[0][0] == 0 and bounds[-1][1] == n
            assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:]))
            assert max(e - f for f, e in bounds) - min(e - f for f, e in bounds) <= 1


def test_parameter_groups_split_the_values_evenly():
    """Each worker's group of the optimizer's step: contiguous, in order,
    covering every parameter once, each within one parameter of its share."""
    rng = numpy.random.RandomState(0)
    for size in (1, 2, 3, 4):
        for _ in range(20):
            sizes = list(rng.randint(1, 1000, size=rng.randint(1, 12)))
            groups = parameter_groups(sizes, size)
            assert len(groups) == size and groups[0][0] == 0
            assert groups[-1][1] == len(sizes)
            assert all(a[1] == b[0] and a[0] <= a[1] for a, b in zip(groups, groups[1:]))
            # group k ends where the running total is nearest k/size of all
            for k, (_, end) in enumerate(groups[:-1], 1):
                target = sum(sizes) * k / float(size)
                assert all(abs(sum(sizes[:end]) - target) <= abs(sum(sizes[:e]) - target)
                           for e in range(groups[k - 1][0], len(sizes) + 1))
    assert parameter_groups([10, 20, 10], 2) == [(0, 1), (1, 3)]
    # a parameter larger than a share: a group may be empty
    assert parameter_groups([1000, 10], 3) == [(0, 0), (0, 1), (1, 2)]


def test_one_process_without_a_launcher(monkeypatch):
    for name in distributed.SIZE_VARIABLES + ('SLURM_STEP_ID',):
        monkeypatch.delenv(name, raising=False)
    assert distributed.launcher_size() is None
    assert distributed.local_workers() == 1
    monkeypatch.setenv('SLURM_NTASKS', '4')       # a batch script, not srun
    assert distributed.launcher_size() is None
    monkeypatch.setenv('SLURM_STEP_ID', '0')
    monkeypatch.setenv('SLURM_NTASKS_PER_NODE', '2(x2)')
    assert distributed.launcher_size() == 4 and distributed.local_workers() == 2


def test_fingerprint_names_files_and_options(tmp_path):
    data = tmp_path / 'a.txt'
    data.write_text('x\n')
    first = distributed.fingerprint({'datasets': [str(data)], 'batch_size': 5})
    data.write_text('y\n')
    second = distributed.fingerprint({'datasets': [str(data)], 'batch_size': 5})
    assert first['--batch_size'] == 5
    assert first['file ' + str(data)] != second['file ' + str(data)]


# --------------------------------------------------------------------------
# the exchanges of an update, under mpirun

# each worker's buffer is numpy.random.RandomState(rank)'s; the pieces of
# COUNTS (worker 1's empty) summed in rank order, and each worker's piece
# of another buffer sent to all
EXCHANGES = """import sys, numpy
sys.path.insert(0, sys.argv[1])
from machinery import distributed
w = distributed.world()
counts = [7, 0, 11]
offsets = [0, 7, 7]
buffers = [numpy.random.RandomState(r).randn(18).astype('float32') for r in range(w.size)]
own = numpy.full(counts[w.rank], numpy.nan, dtype='float32')
w.reduce_scatter(buffers[w.rank].copy(), own, offsets, counts)
a, b = offsets[w.rank], offsets[w.rank] + counts[w.rank]
want = buffers[0][a:b] + buffers[1][a:b] + buffers[2][a:b]
assert numpy.array_equal(own, want), (own, want)
values = numpy.zeros(18, dtype='float32')
values[a:b] = buffers[w.rank][a:b]
w.gather_arrays(values, offsets, counts)
assert numpy.array_equal(values, numpy.concatenate(
    [buffers[r][o:o + c] for r, (o, c) in enumerate(zip(offsets, counts))]))
sys.stdout.write('worker %d: exchanges exact\\n' % w.rank)
"""


@needs_mpirun
def test_reduce_scatter_and_gather_are_exact(tmp_path):
    (tmp_path / 'exchanges.py').write_text(EXCHANGES)
    proc = mpirun(3, ['exchanges.py', ROOT], tmp_path, timeout=120)
    # mpirun interleaves the workers' output: one line may hold two reports
    ranks = re.findall(r'worker (\d+): exchanges exact', proc.stdout)
    assert sorted(ranks) == ['0', '1', '2'], proc.stdout


# --------------------------------------------------------------------------
# training: 2 workers against one process

@needs_mpirun
@pytest.mark.parametrize('decoder', sorted(DECODERS))
def test_two_workers_update_as_one_process(corpus, decoder):
    one, two = 'one_%s.npz' % decoder, 'two_%s.npz' % decoder
    flags = FLAGS + DECODERS[decoder] + ['--finish_after', '20']
    one_process([NMT, '--model', one] + flags, corpus)
    mpirun(2, [NMT, '--model', two] + flags, corpus)
    first = max_difference(params(corpus / one.replace('.npz', '.iter1.npz')),
                           params(corpus / two.replace('.npz', '.iter1.npz')))
    last = max_difference(params(corpus / one), params(corpus / two))
    print('%s: max |difference| after 1 update %.2e, after 20 %.2e' % (decoder, first, last))
    assert first < 1e-5
    assert last < 1e-4
    # the parameters moved (a comparison of two unchanged models proves nothing)
    assert max_difference(params(corpus / one), params(corpus / one.replace(
        '.npz', '.iter1.npz'))) > 1e-3
    # rank 0 alone wrote the log: one start, 20 updates, one end
    logged = log_events(str(corpus / two) + '.log.jsonl')
    events = [e['event'] for e in logged]
    assert events.count('start') == 1 and events.count('update') == 20
    assert logged[0]['workers'] == 2
    assert events[-1] == 'end'


@needs_mpirun
@pytest.mark.skipif(OPENCL_REASON is not None, reason=str(OPENCL_REASON))
def test_two_workers_on_opencl_update_as_one_cpu_process(corpus):
    """The data-parallel path on Theano's GPU back-end (pocl's OpenCL device):
    the gradients and the parameters' exchange go through the device's
    shared variables."""
    flags = FLAGS + ['--finish_after', '3']
    one_process([NMT, '--model', 'cpu_three.npz'] + flags, corpus)
    mpirun(2, [NMT, '--model', 'opencl_three.npz'] + flags, corpus,
           env=theano_env.device_env(DEVICES['opencl'], MPI_ENV))
    start = params(corpus / 'cpu_three.iter1.npz')
    cpu, opencl = params(corpus / 'cpu_three.npz'), params(corpus / 'opencl_three.npz')
    print('OpenCL workers against a CPU process: max |difference| after 3 updates %.2e'
          % max_difference(cpu, opencl))
    assert max_difference(cpu, opencl) < 1e-5
    assert max_difference(cpu, start) > 1e-3


# --------------------------------------------------------------------------
# translation

@needs_mpirun
def test_translation_is_the_same_file(corpus):
    model = corpus / 'one_attentive.npz'
    if not model.exists():
        one_process([NMT, '--model', model.name] + FLAGS + DECODERS['attentive']
                    + ['--finish_after', '3'], corpus)
    common = ['-k', '3', '--batch-size', '2', '--n-best', '--print-word-probabilities',
              model.name, 'train.src.pkl', 'train.trg.json', 'train.src']
    one_process([os.path.join(ROOT, 'translate.py'), '-p', '1', '--alignments', 'one.align']
                + common + ['one.out'], corpus)
    mpirun(2, [os.path.join(ROOT, 'translate.py'), '--alignments', 'two.align']
           + common + ['two.out'], corpus)
    for a, b in (('one.out', 'two.out'), ('one.align', 'two.align')):
        assert (corpus / a).read_bytes() == (corpus / b).read_bytes()
    assert len((corpus / 'one.align').read_text().splitlines()) == 18


@needs_mpirun
def test_two_workers_share_the_validation_translations(corpus):
    """The BLEU validation's translations, each worker translating its share
    of the source, are one process's, line for line (the postprocess command
    gets them all on rank 0: ``tee`` keeps them).  The learning rate is 0,
    so both translate with the same parameters."""
    flags = FLAGS + ['--optimizer', 'adam', '--lrate', '0', '--finish_after', '2',
                     '--valid_datasets', 'train.src', 'train.trg', '--validFreq', '2',
                     '--bleu_valid_freq', '2', '--bleu_valid_ref', 'train.trg',
                     '--bleu_valid_maxlen', '8']
    one_process([NMT, '--model', 'bleu_one.npz'] + flags +
                ['--bleu_valid_postprocess', 'tee bleu_one.hyp'], corpus)
    mpirun(2, [NMT, '--model', 'bleu_two.npz'] + flags +
           ['--bleu_valid_postprocess', 'tee bleu_two.hyp'], corpus)
    one = (corpus / 'bleu_one.hyp').read_text().splitlines()
    assert len(one) == 18 and any(one)
    assert (corpus / 'bleu_two.hyp').read_text().splitlines() == one
    bleus = [[e['bleu'] for e in log_events(str(corpus / name) + '.log.jsonl')
              if e['event'] == 'bleu'] for name in ('bleu_one.npz', 'bleu_two.npz')]
    assert len(bleus[0]) == 1 and bleus[0] == bleus[1]


# --------------------------------------------------------------------------
# dropout, resume, faults

# runs SCRIPT ARGS... as worker OMPI_COMM_WORLD_RANK; worker 1 kills itself
# (SIGKILL) once the checkpoint of update 4 is taken: rank 0 writes it, then
# finds worker 1 gone in the next update's exchange
KILLED_WORKER = """import os, runpy, signal, sys
sys.argv.pop(0)
sys.path[0] = os.path.dirname(os.path.abspath(sys.argv[0]))
if os.environ['OMPI_COMM_WORLD_RANK'] == '1':
    import training_loop
    save = training_loop.TrainingLoop._save
    def save_then_die(self, snapshot):
        save(self, snapshot)
        if self.state.uidx == 4:
            os.kill(os.getpid(), signal.SIGKILL)
    training_loop.TrainingLoop._save = save_then_die
runpy.run_path(sys.argv[0], run_name='__main__')
"""


# runs SCRIPT ARGS... as worker OMPI_COMM_WORLD_RANK; worker 0 meets a fault
# of the program's own (an exception that no error line names) after update 2
FAULTY_ROOT = """import os, runpy, sys
sys.argv.pop(0)
sys.path[0] = os.path.dirname(os.path.abspath(sys.argv[0]))
if os.environ['OMPI_COMM_WORLD_RANK'] == '0':
    import training_loop
    def fault(self, prepared, due):
        if self.state.uidx == 2:
            raise ValueError('a fault of the program')
    training_loop.TrainingLoop._after_update = fault
runpy.run_path(sys.argv[0], run_name='__main__')
"""


@needs_mpirun
def test_a_fault_of_one_worker_ends_every_worker(corpus):
    """An exception on rank 0 (a bug, not an error line) ends the run with
    its traceback and a non-zero status within seconds: the other worker
    does not wait for it, nor rank 0's MPI exit for the other."""
    (corpus / 'faulty_root.py').write_text(FAULTY_ROOT)
    started = time.time()
    proc = mpirun(2, [str(corpus / 'faulty_root.py'), NMT, '--model', 'faulty.npz']
                  + FLAGS + ['--finish_after', '10'], corpus, timeout=120, check=False)
    assert proc.returncode != 0
    assert 'ValueError: a fault of the program' in proc.stderr
    assert time.time() - started < 100
    events = [e['event'] for e in log_events(str(corpus / 'faulty.npz') + '.log.jsonl')]
    assert events.count('update') == 2


@needs_mpirun
def test_killed_worker_ends_the_run_and_the_checkpoint_resumes(corpus):
    """Dropout on: a 2-worker run to update 8 in one go, against one killed
    (SIGKILL to worker 1) after a checkpoint and resumed to update 8."""
    flags = FLAGS + ['--use_dropout', '--saveFreq', '2']
    mpirun(2, [NMT, '--model', 'straight.npz', '--finish_after', '8'] + flags, corpus)
    with numpy.load(str(corpus / 'straight.npz.resume.npz')) as f:
        assert int(f['workers']) == 2
        # the optimizer's accumulators of both workers' groups (Adadelta: two
        # a parameter), as one process writes them
        n_params = len([k for k in f.files if k.startswith('param__')])
        assert len([k for k in f.files if k.startswith('optim__')]) == 2 * n_params
        # each worker's own dropout stream (noise seed + rank)
        assert not numpy.array_equal(f['rng__0'], f['rng_worker1__0'])

    (corpus / 'killed_worker.py').write_text(KILLED_WORKER)
    proc = mpirun(2, ['killed_worker.py', NMT, '--model', 'killed.npz',
                      '--finish_after', '1000000'] + flags, corpus, timeout=900, check=False)
    assert proc.returncode != 0
    lines = [line for line in proc.stderr.splitlines() if line.startswith('error:')]
    assert lines and 'worker 1 (pid' in lines[0], proc.stderr[-3000:]
    with numpy.load(str(corpus / 'killed.npz.resume.npz')) as f:
        assert int(f['uidx']) == 4
    mpirun(2, [NMT, '--model', 'killed.npz', '--finish_after', '8', '--reload'] + flags,
           corpus)
    straight, resumed = (params(corpus / 'straight.npz'), params(corpus / 'killed.npz'))
    assert max_difference(straight, resumed) == 0.


# runs SCRIPT ARGS... as worker OMPI_COMM_WORLD_RANK, worker 1 changed: with
# "batch" its --batch_size is one more, with "no-mpi" it cannot import mpi4py
UNLIKE_WORKER = """import os, runpy, sys
change = sys.argv.pop(1)
if os.environ['OMPI_COMM_WORLD_RANK'] == '1':
    if change == 'batch':
        i = sys.argv.index('--batch_size') + 1
        sys.argv[i] = str(int(sys.argv[i]) + 1)
    else:
        sys.modules['mpi4py'] = None
sys.argv.pop(0)
sys.path[0] = os.path.dirname(os.path.abspath(sys.argv[0]))
runpy.run_path(sys.argv[0], run_name='__main__')
"""


@needs_mpirun
@pytest.mark.parametrize('change,message', [('batch', '--batch_size'),
                                            ('no-mpi', 'mpi4py cannot be imported')])
def test_workers_started_unlike_stop_with_one_line(corpus, change, message):
    (corpus / 'unlike_worker.py').write_text(UNLIKE_WORKER)
    model = 'unlike_%s.npz' % change
    proc = mpirun(2, ['unlike_worker.py', change, NMT, '--model', model,
                      '--finish_after', '2'] + FLAGS, corpus, timeout=120, check=False)
    assert proc.returncode != 0
    errors = [line for line in proc.stderr.splitlines() if line.startswith('error:')]
    assert len(errors) == 1 and message in errors[0], proc.stderr[-3000:]
    if change == 'batch':
        assert 'worker 1' in errors[0]
    assert not (corpus / model).exists()
