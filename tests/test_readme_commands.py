"""Every command the README shows still runs as shown.

The commands of the README's ``bash`` blocks and of its inline code that start
a project script (``.venv/bin/python SCRIPT``, ``./train_*.sh``,
``pipeline/preprocess.sh``; behind ``mpirun`` or ``srun`` too): the script
exists, answers ``--help`` (of its subcommand, where the README names one)
with status 0, and knows every option the README gives it.  The test commands
use a marker pytest.ini declares.  Training and translating for real are the
other tests' work (tests/test_train_scripts.py, test_translate_cli.py, ...).
"""
import configparser
import os
import re
import shlex
import subprocess
import sys

import pytest

from helpers import ROOT  # noqa: E402
README = os.path.join(ROOT, 'README.md')
SHELL_SCRIPTS = ('./train_', 'pipeline/preprocess.sh')
PYTHON = '.venv/bin/python'


def readme_commands():
    """The README's command lines: those of its bash blocks (continuations
    joined, comments cut) and its inline code that starts a project script."""
    with open(README, encoding='utf-8') as f:
        text = f.read()
    lines = []
    for block in re.findall(r'```bash\n(.*?)```', text, re.S):
        for line in block.replace('\\\n', ' ').split('\n'):
            line = re.sub(r'\s+#.*$', '', line).strip()
            if line and not line.startswith('#'):
                lines.append(line)
    outside = re.sub(r'```.*?```', '', text, flags=re.S)
    for span in re.findall(r'`([^`\n]+)`', outside):
        if span.startswith((PYTHON + ' ',) + SHELL_SCRIPTS) and ' ' in span:
            lines.append(span)
    return lines


def script_calls():
    """(command line, script, the words after it up to a redirection or pipe)
    of every call of a project script."""
    calls = []
    for line in readme_commands():
        for part in re.split(r'&&| \| ', line):
            words = shlex.split(part.replace('...', ''))
            if PYTHON in words:
                words = words[words.index(PYTHON) + 1:]
                if words[:1] == ['-m']:
                    continue
            elif not words or not words[0].startswith(SHELL_SCRIPTS):
                continue
            args = []
            for w in words[1:]:
                if w in ('<', '>') or w.startswith(('<', '>')):
                    break
                args.append(w)
            calls.append((line, words[0], args))
    return calls


CALLS = script_calls()


def test_the_readme_shows_commands_of_every_kind():
    scripts = {script for _, script, _ in CALLS}
    assert {'translate.py', 'nmt.py', 'analysis/analyze.py', './train_es-en.sh',
            'pipeline/preprocess.sh', 'demo/demo.py'} <= scripts, sorted(scripts)


def help_text(script, subcommand=None):
    """(status, output) of SCRIPT [SUBCOMMAND] --help, run with this Python."""
    path = os.path.join(ROOT, script)
    cmd = ([path] if script.endswith('.sh') else [sys.executable, path])
    cmd += ([subcommand] if subcommand else []) + ['--help']
    env = dict(os.environ, PYTHON=sys.executable)
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)
    return proc.returncode, proc.stdout + proc.stderr


_HELP = {}


def cached_help(script, subcommand=None):
    key = (script, subcommand)
    if key not in _HELP:
        _HELP[key] = help_text(script, subcommand)
    return _HELP[key]


def subcommands(usage):
    """The choices of an argparse subcommand in a usage text: {a,b,c}."""
    found = re.search(r'\{([\w,-]+)\}', usage)
    return found.group(1).split(',') if found else []


@pytest.mark.parametrize('line,script,args', CALLS,
                         ids=['%s:%d' % (c[1], i) for i, c in enumerate(CALLS)])
def test_readme_command_runs_and_knows_its_options(line, script, args):
    assert os.path.isfile(os.path.join(ROOT, script)), 'README names %s: %s' % (script, line)
    status, out = cached_help(script)
    assert status == 0, '%s --help: status %d\n%s' % (script, status, out[-2000:])
    subcommand = None
    if args and args[0] in subcommands(out):
        subcommand = args[0]
        status, out = cached_help(script, subcommand)
        assert status == 0, '%s %s --help: status %d\n%s' % (script, subcommand, status,
                                                             out[-2000:])
    for arg in args:
        if arg == '--':   # a training script passes what follows to nmt.py
            script, out = 'nmt.py', cached_help('nmt.py')[1]
            continue
        if not arg.startswith('-') or arg == '-' or re.match(r'-\d', arg):
            continue
        option = arg.split('=', 1)[0]
        assert re.search(r'(^|[\s,\[(])%s\b' % re.escape(option), out, re.M), \
            'README gives %s the option %s, which its --help does not know: %s' % (
                script, option, line)


def test_readme_test_commands_use_markers_that_exist():
    ini = configparser.ConfigParser()
    ini.read(os.path.join(ROOT, 'pytest.ini'))
    declared = {m.split(':')[0].strip() for m in ini['pytest']['markers'].strip().split('\n')}
    used = set()
    for line in readme_commands():
        if '-m pytest' in line:
            for expr in re.findall(r' -m "([^"]+)"', line):
                used |= set(re.findall(r'\w+', expr)) - {'not', 'and', 'or'}
    assert used, 'the README shows no selection of tests'
    assert used <= declared, (used, declared)


def test_setup_usage_is_one_line_before_anything_runs():
    proc = subprocess.run(['bash', os.path.join(ROOT, 'setup.sh'), '--no-such-option'],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.strip().count('\n') == 0 and 'usage: bash setup.sh' in proc.stderr
