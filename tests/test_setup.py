"""setup.sh cannot half-fail: what it needs is checked before anything is made,
each refusal is one line, and an environment an earlier run left without pip
is made anew.

setup.sh runs from a copy in a temporary folder (it works where it lies), as a
user who is not root (a stand-in ``id``), so that it installs nothing with
apt; the copy's requirements.txt holds no package, so nothing is downloaded.
"""
import os
import shutil
import subprocess
import sys

import pytest

from helpers import ROOT  # noqa: E402


@pytest.fixture
def setup_copy(tmp_path):
    """A folder with setup.sh and an empty requirements.txt, and a bin folder
    whose ``id`` says uid 1000 (not root: no apt-get)."""
    shutil.copy(os.path.join(ROOT, 'setup.sh'), tmp_path / 'setup.sh')
    (tmp_path / 'requirements.txt').write_text('# nothing\n')
    bin_dir = tmp_path / 'bin'
    bin_dir.mkdir()
    fake_id = bin_dir / 'id'
    fake_id.write_text('#!/bin/sh\necho 1000\n')
    fake_id.chmod(0o755)
    return tmp_path


def run_setup(folder, **env):
    environ = dict(os.environ, PATH='%s:%s' % (folder / 'bin', os.environ['PATH']))
    environ.pop('PYTHONPATH', None)
    environ.update(env)
    return subprocess.run(['bash', str(folder / 'setup.sh')], cwd=str(folder), env=environ,
                          capture_output=True, text=True, timeout=600)


def refusal(proc):
    """The stderr of a run that stopped, as one line."""
    assert proc.returncode != 0, proc.stdout + proc.stderr
    lines = [l for l in proc.stderr.splitlines() if l.strip()]
    assert len(lines) == 1, proc.stderr
    return lines[0]


def test_an_unsupported_python_stops_in_one_line_before_anything_is_made(setup_copy):
    old = setup_copy / 'bin' / 'python3.9'
    old.write_text('#!/bin/sh\necho 3.9\n')   # answers every question with its version
    old.chmod(0o755)
    line = refusal(run_setup(setup_copy, PYTHON=str(old)))
    assert line.startswith('setup: Python 3.9') and 'not supported' in line
    assert '3.10, 3.11, 3.12 or 3.13' in line and 'PYTHON=' in line
    assert not (setup_copy / '.venv').exists()


def test_a_missing_python_stops_in_one_line(setup_copy):
    line = refusal(run_setup(setup_copy, PYTHON='no-such-python3'))
    assert "no Python 'no-such-python3'" in line


def without_ensurepip(folder):
    """A PYTHONPATH folder whose ensurepip cannot be imported: what Debian's
    Python is without python3-venv (its ensurepip lives in that package)."""
    stub = folder / 'no-ensurepip' / 'ensurepip'
    stub.mkdir(parents=True)
    (stub / '__init__.py').write_text(
        "raise ModuleNotFoundError(\"No module named 'ensurepip'\")\n")
    return str(folder / 'no-ensurepip')


def test_a_python_without_ensurepip_stops_in_one_line_and_makes_no_venv(setup_copy):
    proc = run_setup(setup_copy, PYTHON=sys.executable,
                     PYTHONPATH=without_ensurepip(setup_copy))
    line = refusal(proc)
    assert 'cannot make a virtual environment (no ensurepip)' in line, line
    assert 'run bash setup.sh again' in line
    assert not (setup_copy / '.venv').exists()


def test_a_venv_left_without_pip_is_made_anew(setup_copy):
    venv = setup_copy / '.venv'
    subprocess.run([sys.executable, '-m', 'venv', '--without-pip', str(venv)], check=True)
    assert (venv / 'bin' / 'python').exists()      # what a failed venv leaves behind
    proc = run_setup(setup_copy, PYTHON=sys.executable)
    assert 'is incomplete (no working pip' in proc.stderr and 'making it anew' in proc.stderr, \
        proc.stderr
    pip = subprocess.run([str(venv / 'bin' / 'python'), '-m', 'pip', '--version'],
                         capture_output=True, text=True)
    assert pip.returncode == 0, pip.stderr


def test_gpu_set_up_on_another_python_stops_in_one_line(setup_copy):
    if sys.version_info[:2] == (3, 11):
        other = setup_copy / 'bin' / 'python3.12'
        other.write_text('#!/bin/sh\necho 3.12\n')
        other.chmod(0o755)
        python = str(other)
    else:
        python = sys.executable
    proc = subprocess.run(['bash', str(setup_copy / 'setup.sh'), '--gpu'], cwd=str(setup_copy),
                          env=dict(os.environ, PYTHON=python), capture_output=True, text=True,
                          timeout=60)
    line = refusal(proc)
    assert '--gpu needs Python 3.11' in line and 'on no package registry' in line
    assert not (setup_copy / '.venv').exists()
