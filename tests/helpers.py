"""What the test files share: the repository's root, running one of its
commands (with the signals at their defaults), the check of a command's
one error line (docs/training.md#exit-statuses), and a tiny random model file.

conftest.py puts this folder on sys.path, so a test file imports it as
``from helpers import ROOT, run_command, error_line``.
"""
import os
import signal
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PY = sys.executable


def default_signals():
    """The ``preexec_fn`` of every command a test starts: SIGINT and SIGTERM
    at their defaults in the child, however the tests were started (a shell
    starts a background job, ``cmd &``, and nohup with SIGINT ignored, which
    a child inherits: a command would then not stop at Ctrl-C)."""
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, signal.SIG_DFL)


def run_command(script, args=(), cwd=None, check=False, timeout=900, env=None, python=True):
    """Runs ROOT/script (with this Python unless python=False) with ``args``;
    with check, an AssertionError that shows its output unless it exits 0."""
    cmd = ([PY] if python else []) + [os.path.join(ROOT, script)] + [str(a) for a in args]
    proc = subprocess.run(cmd, cwd=None if cwd is None else str(cwd), capture_output=True,
                          text=True, timeout=timeout, env=env, preexec_fn=default_signals)
    if check and proc.returncode != 0:
        raise AssertionError('%s %s failed (exit status %d):\n%s\n%s'
                             % (script, ' '.join(map(str, args)), proc.returncode,
                                proc.stdout[-3000:], proc.stderr[-3000:]))
    return proc


def finished(status, stderr):
    """What a command run in this process ended with (its exit status, its
    stderr as captured), in the form error_line takes."""
    return subprocess.CompletedProcess([], status, '', stderr)


def error_line(proc, *needles, status=1, alone=False):
    """The command's error line: it ends stderr, is the only ``error:`` or
    ``interrupted:`` line (progress lines and warnings may come before it,
    nothing if ``alone``), holds each of ``needles``, and no traceback was
    printed; the exit status is ``status``."""
    assert proc.returncode == status, (proc.returncode, proc.stderr[-3000:])
    lines = proc.stderr.strip().splitlines()
    assert lines and lines[-1].startswith('error: '), proc.stderr[-3000:]
    ends = sum(line.startswith(('error:', 'interrupted:')) for line in lines)
    assert ends == 1 and (len(lines) == 1 or not alone), proc.stderr[-3000:]
    assert 'Traceback' not in proc.stderr + (proc.stdout or ''), proc.stderr[-3000:]
    for needle in needles:
        assert needle in lines[-1], (needle, lines[-1])
    return lines[-1]


def save_random_model(path, decoder, seed, n_words=8, unk_bias=0., dictionaries=None):
    """A tiny untrained model file (and its options) of ``decoder`` (options
    such as ``dict(decoder='gru_cond')``): nmt.py's initial parameters moved
    by noise of the ``seed``, so that two seeds give two different models."""
    import numpy
    import nmt
    from machinery.training_state import save_model
    options = nmt.fill_options(dict(dim_word=6, dim=5, n_words_src=10, n_words=n_words,
                                    dictionaries=dictionaries or ['src.pkl', 'trg.pkl'],
                                    **decoder))
    numpy.random.seed(seed)
    params = nmt.init_params(options)
    rng = numpy.random.RandomState(seed)
    for k in params:
        params[k] = (params[k] + 0.5 * rng.standard_normal(params[k].shape)).astype('float32')
    params['ff_logit_b'][1] += unk_bias
    save_model(str(path), params, [], 0, options)
