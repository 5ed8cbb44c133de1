"""The commands with worker processes (translate.py -p N, preprocess.py
--jobs N) under real faults: Ctrl-C sent to the whole command (as a terminal
sends it, to its process group), SIGTERM to the command, kill -9 of one
worker (as the out-of-memory killer does).  Each ends within seconds, with
one line and its documented status, no output and no worker left
(docs/training.md and docs/translation.md, "Faults").

Each case runs in its own folder, its command with SIGINT and SIGTERM at
their defaults (helpers.default_signals): the cases pass however the tests
were started (``nohup pytest ... &`` starts them with SIGINT ignored)."""
import os
import random
import signal
import subprocess
import time

import pytest

from helpers import default_signals
from tiny_runs import NMT, PY, QUICK_ENV, ROOT, TRAIN_FLAGS, make_corpus, run

TRANSLATE = os.path.join(ROOT, 'translate.py')
PREPROCESS = os.path.join(ROOT, 'pipeline', 'preprocess.py')
ENDS_WITHIN = 10    # seconds, from the fault to the command's exit


@pytest.fixture(scope='module')
def model(tmp_path_factory):
    """A tiny model (2 updates) and a source of 3,000 lines; its samplers
    compiled once (Theano's cache), so that the workers only load them."""
    d = tmp_path_factory.mktemp('workers')
    make_corpus(d)
    run([NMT, '--model', 'm.npz', '--finish_after', '2'] + TRAIN_FLAGS, cwd=d)
    run([TRANSLATE, '-p', '2', 'm.npz', 'train.src.pkl', 'train.trg.json', 'valid.src',
         'valid.out'], cwd=d)
    lines = (d / 'train.src').read_text().split('\n')[:-1]
    (d / 'long.src').write_text(''.join('%s %s\n' % (lines[i % 18], lines[i * 7 % 18])
                                        for i in range(3000)))
    return d


@pytest.fixture(scope='module')
def raw_corpus(tmp_path_factory):
    """40,000 lines a side to tokenise: long enough to be stopped midway."""
    d = tmp_path_factory.mktemp('raw')
    words = ("the cat's dog-house sat on a mat , and Fußgänger-Ampel said \"hello\" ; "
             "it is 3.5 km away !").split()
    rng = random.Random(1)
    for lang in ('es', 'en'):
        for name, n in (('train', 40000), ('dev', 20), ('test', 20)):
            (d / ('%s.%s' % (name, lang))).write_text(
                ''.join(' '.join(rng.choice(words) for _ in range(12)) + '\n'
                        for _ in range(n)))
    return d


def children(pid):
    """The processes that ``pid`` forked (their command line is its own)."""
    found = []
    for entry in os.listdir('/proc'):
        try:
            with open('/proc/%s/stat' % entry) as f:
                stat = f.read()
        except (OSError, ValueError):
            continue
        fields = stat[stat.rindex(')') + 2:].split()
        if entry.isdigit() and int(fields[1]) == pid and fields[0] != 'Z':
            found.append(int(entry))
    return sorted(found)


def running(pid):
    try:
        with open('/proc/%d/stat' % pid) as f:
            stat = f.read()
    except OSError:
        return False
    return stat[stat.rindex(')') + 2] != 'Z'


class Command(object):
    """A command started in its own session (as a shell starts a job), in
    the folder ``cwd`` (its stderr in a file there), with the signals at
    their defaults."""

    def __init__(self, args, cwd):
        self.err_path = os.path.join(str(cwd), 'command.err')
        with open(self.err_path, 'w') as err:
            self.proc = subprocess.Popen([PY] + args, cwd=cwd, stdout=subprocess.DEVNULL,
                                         stderr=err, env=QUICK_ENV, start_new_session=True,
                                         preexec_fn=default_signals)

    def stderr(self):
        with open(self.err_path) as f:
            return f.read()

    def wait_for(self, condition, timeout=300):
        end = time.time() + timeout
        while not condition():
            assert self.proc.poll() is None, 'ended early: %s' % self.stderr()
            assert time.time() < end, 'timed out: %s' % self.stderr()
            time.sleep(0.1)

    def workers(self, n):
        """The pids of its n workers, once they are all there."""
        self.wait_for(lambda: len(children(self.proc.pid)) >= n)
        return children(self.proc.pid)

    def end_after(self, fault):
        """Inject ``fault()``: (exit status, seconds to exit, last stderr line)."""
        start = time.time()
        fault()
        try:
            status = self.proc.wait(timeout=60)
        finally:
            if self.proc.poll() is None:
                os.killpg(self.proc.pid, signal.SIGKILL)
        seconds = time.time() - start
        text = self.stderr()
        assert 'Traceback' not in text, text
        lines = text.replace('\r', '\n').strip().split('\n')
        assert len([l for l in lines if l.startswith(('error:', 'interrupted:'))]) == 1, text
        return status, seconds, lines[-1]


FAULTS = {
    'ctrl_c': (lambda cmd, workers: os.killpg(cmd.proc.pid, signal.SIGINT),
               130, 'interrupted: Ctrl-C (SIGINT)'),
    'sigterm': (lambda cmd, workers: cmd.proc.send_signal(signal.SIGTERM),
                143, 'interrupted: SIGTERM'),
    'worker_killed': (lambda cmd, workers: os.kill(workers[1], signal.SIGKILL),
                      1, None),
}


def assert_ends_cleanly(cmd, workers, fault, what, n):
    inject, status, message = FAULTS[fault]
    code, seconds, last = cmd.end_after(lambda: inject(cmd, workers))
    assert code == status and seconds < ENDS_WITHIN, (code, seconds, last)
    if message is None:
        message = ('error: %s worker 2 of %d (process %d) was killed by SIGKILL (the '
                   'out-of-memory killer sends it: fewer workers need less memory): '
                   'stopped, nothing written' % (what, n, workers[1]))
    assert last == message
    time.sleep(0.5)
    assert not [w for w in workers if running(w)]


@pytest.mark.parametrize('fault', sorted(FAULTS))
def test_translate_with_workers_ends_at_a_fault(model, tmp_path, fault):
    """translate.py -p 2 in the middle of a long file: Ctrl-C, SIGTERM or a
    worker killed end it within seconds, with one line, no output file
    (nor a temporary one) and no worker left."""
    cmd = Command([TRANSLATE, '-p', '2'] + [str(model / name) for name in (
        'm.npz', 'train.src.pkl', 'train.trg.json', 'long.src')] + ['out.txt'], tmp_path)
    workers = cmd.workers(2)
    cmd.wait_for(lambda: 'translated ' in cmd.stderr())     # decoding is under way
    assert_ends_cleanly(cmd, workers, fault, 'translation', 2)
    assert sorted(os.listdir(str(tmp_path))) == ['command.err']


@pytest.mark.parametrize('fault', sorted(FAULTS))
def test_preprocess_with_jobs_ends_at_a_fault(raw_corpus, tmp_path, fault):
    """preprocess.py prepare --jobs 2 while it tokenises: the same, and the
    output folder holds nothing (its staging folder removed)."""
    out = tmp_path / 'out'
    cmd = Command([PREPROCESS, 'prepare', '--src-lang', 'es', '--trg-lang', 'en'] + [
        arg for name in ('train', 'dev', 'test') for arg in ('--' + name, str(raw_corpus / name))]
        + ['--out', str(out), '--bpe-merges', '20', '--jobs', '2'], tmp_path)
    workers = cmd.workers(2)
    cmd.wait_for(lambda: 'tokenising' in cmd.stderr())
    assert_ends_cleanly(cmd, workers, fault, 'tokenisation', 2)
    assert os.listdir(str(out)) == []


# A pool whose job queue signals the process at the worst moment of its
# second put: the queue's lock just taken, the ``with`` that would release
# it not yet in force.  Without DeferredSignals the handler's exception left
# the lock taken and the queue's close() waited on it for ever.
SIGNAL_INSIDE_PUT = '''
import signal, sys, threading
from machinery import cli
from machinery.worker_processes import WorkerPool

class SignalInsideLock(object):
    def __init__(self, condition):
        self.condition, self.entries = condition, 0
    def __enter__(self):
        self.condition.__enter__()
        if threading.current_thread() is threading.main_thread():
            self.entries += 1
            if self.entries == 2:
                signal.raise_signal(signal.%s)   # its handler runs here
    def __exit__(self, *exc):
        return self.condition.__exit__(*exc)
    def __getattr__(self, name):
        return getattr(self.condition, name)

def work():
    pool = WorkerPool(lambda: str.upper, 2, 'test')
    pool.jobs._notempty = SignalInsideLock(pool.jobs._notempty)
    with pool:
        list(pool.imap(['a line'] * 100))

sys.exit(cli.run(work))
'''


@pytest.mark.parametrize('signum, status, message', [
    ('SIGINT', 130, 'interrupted: Ctrl-C (SIGINT)'),
    ('SIGTERM', 143, 'interrupted: SIGTERM')])
def test_a_signal_inside_the_queues_lock_waits_for_it(signum, status, message):
    """Ctrl-C or SIGTERM while the parent holds the job queue's lock: the
    command still ends at once with its one line (it hung before)."""
    proc = subprocess.run([PY, '-c', SIGNAL_INSIDE_PUT % signum], cwd=ROOT, env=QUICK_ENV,
                          capture_output=True, text=True, timeout=30,
                          preexec_fn=default_signals)
    assert (proc.returncode, proc.stderr.strip()) == (status, message)
