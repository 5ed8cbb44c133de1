"""BLAS and OpenMP threads a process (theano_platform/theano_env.py): a
user's count wins; a count that theano_env chose for a launcher is not an MPI
worker's, which takes its share of the cores; a count chosen for the
children (threads_for_children) reaches them."""
import os
import subprocess
import sys

import pytest

from helpers import ROOT
from theano_platform import theano_env

# a child's thread variables, as theano_env leaves them
PRINT_THREADS = ('import os; from theano_platform import theano_env; '
                 'print(",".join(os.environ[v] for v in theano_env.THREAD_VARIABLES))')
# an MPI worker's environment: two workers on this machine
WORKER = {'OMPI_COMM_WORLD_SIZE': '2', 'OMPI_COMM_WORLD_LOCAL_SIZE': '2'}


def _threads(env, code=PRINT_THREADS):
    out = subprocess.run([sys.executable, '-c', code], env=env, cwd=ROOT,
                         capture_output=True, text=True, check=True)
    return out.stdout.strip().splitlines()[-1].split(',')


def _clean_env(**extra):
    env = {k: v for k, v in os.environ.items()
           if k not in theano_env.THREAD_VARIABLES and k != theano_env.CHOSEN_THREADS}
    env.update(extra)
    return env


def _launcher(child_env_code):
    """Code of a launcher that imports theano_env (choosing its own count),
    then starts a worker with the environment that ``child_env_code`` makes
    of its own (``env``), and prints the launcher's and the worker's counts."""
    return ('import os, subprocess, sys; from theano_platform import theano_env; '
            'own = os.environ["OMP_NUM_THREADS"]; env = dict(os.environ, **%r); %s; '
            'worker = subprocess.run([sys.executable, "-c", %r], env=env, '
            'capture_output=True, text=True, check=True).stdout.strip(); '
            'print(own + "," + worker)' % (WORKER, child_env_code, PRINT_THREADS))


@pytest.fixture(scope='module')
def cores():
    n = theano_env.usable_cores()
    if n < 2:
        pytest.skip('one core: a launcher and a worker get one thread each either way')
    return n


def test_a_launchers_count_is_not_a_workers(cores):
    launcher, *worker = _threads(_clean_env(), _launcher('pass'))
    assert launcher == str(cores)
    assert worker == [str(cores // 2)] * 3


def test_a_count_chosen_for_the_children_reaches_them(cores):
    """Even the launcher's own count, when given on purpose."""
    launcher, *worker = _threads(_clean_env(), _launcher(
        'theano_env.threads_for_children(%d, env)' % cores))
    assert worker == [str(cores)] * 3


def test_the_users_count_wins_in_a_worker():
    env = _clean_env(OMP_NUM_THREADS='3', **WORKER)
    assert _threads(env)[1] == '3'
