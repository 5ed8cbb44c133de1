"""Every command's --help explains every argument and option, and says in
its description what the command does, in whole sentences."""
import json
import os
import subprocess

import pytest

from helpers import HERE, PY, ROOT
from test_docs import project_files

# folders of library modules, not commands
NOT_COMMANDS = ('machinery', 'theano_platform', 'tests')


def commands():
    """The project's Python files that run as a command."""
    found = []
    for path in project_files():
        rel = os.path.relpath(path, ROOT)
        if not rel.endswith('.py') or rel.split(os.sep)[0] in NOT_COMMANDS:
            continue
        with open(path, encoding='utf-8') as f:
            if "if __name__ == '__main__'" in f.read().replace('"', "'"):
                found.append(rel)
    return sorted(found)


def test_the_commands_are_found():
    found = commands()
    for name in ('nmt.py', 'translate.py', 'score.py', 'build_dictionary.py',
                 'pipeline/multi30k.py', 'speed/benchmark.py', 'analysis/analyze.py'):
        assert name in found


@pytest.mark.parametrize('command', commands())
def test_help_explains_every_argument(command):
    proc = subprocess.run([PY, os.path.join(HERE, 'help_probe.py'),
                           os.path.join(ROOT, command)],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    assert found['descriptions'], '%s: no argument parser reached' % command
    assert not found['missing'], '%s: no help text for %s' % (command,
                                                             ', '.join(found['missing']))
    top = found['descriptions'][min(found['descriptions'], key=len)]
    assert top.strip().endswith(('.', '?', ')')), (
        '%s: its description stops mid-sentence: %r' % (command, top))
