"""A tiny parallel corpus and the command lines that train on it, for the
tests that run the programs end to end (test_cli.py, test_training_log.py,
test_faults.py)."""
import json
import os
import shutil
import signal
import subprocess
import time

from helpers import PY, ROOT, default_signals, run_command
from theano_platform import theano_flags

NMT = os.path.join(ROOT, 'nmt.py')

SRC = ['a b c', 'b c d e', 'c a', 'd d a b', 'e a c b d', 'a e']
TRG = ['x y', 'y z w', 'z x v', 'w w', 'v x y z', 'x v w']

TRAIN_FLAGS = ['--datasets', 'train.src', 'train.trg',
               '--dictionaries', 'train.src.pkl', 'train.trg.json',
               '--dim_word', '4', '--dim', '5', '--n_words_src', '7', '--n_words', '7',
               '--batch_size', '2', '--optimizer', 'adadelta', '--clip_c', '1',
               '--dispFreq', '1', '--sampleFreq', '1000', '--use_dropout', '--overwrite',
               '--no_shuffle', '--maxlen', '20']
# Theano's quick graph optimisation for the programs these tests run (a tiny
# model's updates take milliseconds either way; compiling takes about half
# the time): what the tests check does not depend on it, and a run and the
# run it is compared with always compile alike.  The production mode's graphs
# are checked in-process (test_forward_vs_numpy.py, test_fast_ops.py).
QUICK_ENV = dict(os.environ, THEANO_FLAGS=theano_flags.with_defaults(
    os.environ.get('THEANO_FLAGS', ''), [('optimizer', 'fast_compile')]))


def write(path, lines):
    with open(path, 'w', encoding='utf-8') as f:
        f.write(''.join(line + '\n' for line in lines))


def make_corpus(directory):
    """train.src/.trg (18 pairs), valid.src/.trg and the dictionaries."""
    write(directory / 'train.src', SRC * 3)
    write(directory / 'train.trg', TRG * 3)
    write(directory / 'valid.src', SRC[:3])
    write(directory / 'valid.trg', TRG[:3])
    run([os.path.join(ROOT, 'build_dictionary.py'), 'train.src', 'train.trg'], cwd=directory)


def case_copy(folder, tmp_path):
    """A test case's own copy of a module's ``folder`` (tmp_path/case), so
    that no case finds what another left."""
    copy = tmp_path / 'case'
    shutil.copytree(str(folder), str(copy))
    return copy


def run(args, cwd, check=True, env=QUICK_ENV):
    """The script args[0] (a path) with Theano's quick optimiser."""
    return run_command(args[0], args[1:], cwd=cwd, check=check, env=env)


def start_training(cwd, model, *flags):
    """A training process that runs until it is stopped (output in MODEL.out)."""
    out = open(os.path.join(str(cwd), model + '.out'), 'w')
    return subprocess.Popen([PY, NMT, '--model', model, '--finish_after', '1000000']
                            + TRAIN_FLAGS + list(flags), cwd=cwd, stdout=out,
                            stderr=subprocess.STDOUT, preexec_fn=default_signals,
                            env=dict(QUICK_ENV, PYTHONUNBUFFERED='1'))


def freeze(proc, timeout=10):
    """SIGSTOP ``proc`` and wait until every thread of it has stopped (the
    signal is delivered asynchronously: a running process goes on for a
    moment after send_signal returns)."""
    proc.send_signal(signal.SIGSTOP)
    tasks = '/proc/%d/task' % proc.pid
    end = time.time() + timeout
    while time.time() < end:
        states = []
        for task in os.listdir(tasks):
            try:
                with open(os.path.join(tasks, task, 'stat')) as f:
                    states.append(f.read().rsplit(')', 1)[1].split()[0])
            except OSError:        # a thread that ended meanwhile
                pass
        if states and all(state in 'tT' for state in states):
            return
        time.sleep(0.001)
    raise AssertionError('process %d did not stop within %d s of SIGSTOP' % (proc.pid, timeout))


def log_events(path):
    """The whole lines of a training log so far, as dicts."""
    if not os.path.exists(path):
        return []
    with open(path, 'rb') as f:
        return [json.loads(line) for line in f.read().split(b'\n')[:-1]]


def wait_for_event(proc, log, event, min_uidx=0, skip=0, timeout=600):
    """Wait until the log has ``event`` at update >= min_uidx after its
    first ``skip`` events; the events so far."""
    end = time.time() + timeout
    while time.time() < end:
        events = log_events(log)
        if any(e['event'] == event and e['uidx'] >= min_uidx for e in events[skip:]):
            return events
        if proc.poll() is not None:
            raise AssertionError('training ended (status %s) before %s' % (proc.returncode,
                                                                            event))
        time.sleep(0.2)
    proc.kill()
    raise AssertionError('no %s event in %s after %d s' % (event, log, timeout))
