"""A command started with a Python that lacks the project's packages (no
.venv: train_*.sh fall back to python3) ends with one line that says to run
setup.sh (machinery/__init__.py), not a ModuleNotFoundError traceback."""
import os
import subprocess

import pytest

from helpers import HERE, PY, ROOT
from test_help import commands

WITHOUT = os.path.join(HERE, 'without_packages.py')
SHELL_SCRIPTS = ('train_es-en.sh', 'train_en-de.sh', 'train_en-zh.sh', 'train_multi30k.sh')


def check_outcome(proc, must_fail=False):
    """--help needs nothing (status 0), or the one setup line (status 1)."""
    assert 'Traceback' not in proc.stderr, proc.stderr[-3000:]
    if proc.returncode == 0 and not must_fail:
        return
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1 and len(lines) == 1, (proc.returncode, proc.stderr[-3000:])
    assert lines[0].startswith('error: this Python (') and 'bash setup.sh' in lines[0]


@pytest.mark.parametrize('command', commands())
def test_a_command_without_the_environment_says_to_run_setup(command):
    proc = subprocess.run([PY, WITHOUT, os.path.join(ROOT, command), '--help'],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    check_outcome(proc, must_fail=command in ('nmt.py', 'translate.py', 'score.py'))


@pytest.mark.parametrize('script', SHELL_SCRIPTS)
def test_train_scripts_without_the_environment_say_to_run_setup(script, tmp_path):
    """train_*.sh without .venv run PYTHON (or python3): here a Python
    without the packages."""
    python = tmp_path / 'python'
    python.write_text('#!/bin/sh\nexec "%s" "%s" "$@"\n' % (PY, WITHOUT))
    python.chmod(0o755)
    proc = subprocess.run([os.path.join(ROOT, script), '--dry-run', 'baseline', '1',
                           str(tmp_path)], capture_output=True, text=True, timeout=300,
                          cwd=str(tmp_path), env=dict(os.environ, PYTHON=str(python)))
    check_outcome(proc, must_fail=True)
