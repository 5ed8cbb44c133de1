"""The documents: every relative link of README.md and docs/*.md reaches an
existing file (and, with a #fragment into a Markdown file, one of its
headings); every citation docs/equations.md#SECTION in the project names a
heading of that page; and no project file names a path that a clone does not
have (the spec outside the repository, or an absolute path of a machine)."""
import os
import re
import subprocess

import pytest

from helpers import ROOT  # noqa: E402
DOCS = os.path.join(ROOT, 'docs')
EQUATIONS = os.path.join(DOCS, 'equations.md')

# Built from pieces so that this file does not name them itself.
FORBIDDEN = [
    '..' + '/shared',            # the spec folder outside the repository
    'REFERENCE' + '.md',         # its page
    '/' + 'work/',               # the work tree of the machine it was written on
]
# Text files of the project that the scan reads.
TEXT_SUFFIXES = ('.py', '.md', '.sh', '.txt', '.ini', '.cfg', '.toml', '.json', '.yml',
                 '.yaml')
# .gitignore holds patterns relative to the repository root (its 'work' line
# is a folder of the clone), not paths of a machine.
NOT_SCANNED = {'.gitignore'}
SKIP_DIRS = {'.git', '.venv', '__pycache__', '.pytest_cache', 'demo_output', 'runs',
             'lm_experiment_output', '.whl', '.gl', '.gpubundle', 'work'}

LINK = re.compile(r'!?\[[^\]]*\]\(([^)\s]+)\)')
CITATION = re.compile(r'docs/equations\.md#([a-z0-9_-]+)')


def documents():
    return [os.path.join(ROOT, 'README.md')] + sorted(
        os.path.join(DOCS, name) for name in os.listdir(DOCS) if name.endswith('.md'))


def slug(heading):
    """GitHub's anchor of a Markdown heading."""
    text = heading.strip().lower()
    text = re.sub(r'[^\w\- ]', '', text)
    return text.replace(' ', '-')


def anchors(path):
    """The anchors of a Markdown file's headings (code blocks skipped;
    repeated headings get -1, -2, ... as on GitHub)."""
    seen, out, in_code = {}, set(), False
    with open(path, encoding='utf-8') as f:
        for line in f:
            if line.startswith('```'):
                in_code = not in_code
                continue
            m = None if in_code else re.match(r'#{1,6} (.+)', line)
            if m:
                base = slug(m.group(1))
                n = seen.get(base, 0)
                seen[base] = n + 1
                out.add(base if n == 0 else '%s-%d' % (base, n))
    return out


def without_code(text):
    """Markdown text without its fenced code blocks and inline code."""
    text = re.sub(r'^```.*?^```', '', text, flags=re.S | re.M)
    return re.sub(r'`[^`\n]*`', '', text)


def project_files():
    """The project's files: git's tracked and untracked-but-not-ignored files
    when this is a git work tree, else a walk that skips outputs."""
    try:
        out = subprocess.run(['git', 'ls-files', '-co', '--exclude-standard', '-z'],
                             cwd=ROOT, capture_output=True, check=True).stdout
        names = [n for n in out.decode('utf-8').split('\0') if n]
        if names:
            return [os.path.join(ROOT, n) for n in names
                    if os.path.isfile(os.path.join(ROOT, n))]
    except (OSError, subprocess.CalledProcessError):
        pass
    files = []
    for top, dirs, names in os.walk(ROOT):
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS and not d.startswith('.venv')]
        files += [os.path.join(top, n) for n in names]
    return files


@pytest.mark.parametrize('doc', documents(), ids=lambda p: os.path.relpath(p, ROOT))
def test_relative_links_reach_files_and_headings(doc):
    with open(doc, encoding='utf-8') as f:
        text = without_code(f.read())
    broken = []
    for m in LINK.finditer(text):
        target = m.group(1)
        if re.match(r'[a-z]+:', target):        # http:, https:, mailto:
            continue
        path, _, fragment = target.partition('#')
        full = os.path.normpath(os.path.join(os.path.dirname(doc), path)) if path else doc
        if not os.path.exists(full):
            broken.append('%s (no such file)' % target)
        elif fragment and full.endswith('.md') and fragment not in anchors(full):
            broken.append('%s (no such heading)' % target)
    assert not broken, '%s: %s' % (os.path.relpath(doc, ROOT), '; '.join(broken))


def test_equation_citations_name_headings():
    sections = anchors(EQUATIONS)
    bad = []
    for path in project_files():
        if not path.endswith(('.py', '.md', '.sh')):
            continue
        with open(path, encoding='utf-8', errors='replace') as f:
            for number, line in enumerate(f, 1):
                for section in CITATION.findall(line):
                    if section not in sections:
                        bad.append('%s:%d: #%s' % (os.path.relpath(path, ROOT), number,
                                                   section))
    assert not bad, 'citations of missing sections of docs/equations.md: ' + ', '.join(bad)


def test_no_file_names_paths_outside_the_clone():
    found = []
    for path in project_files():
        name = os.path.basename(path)
        if name in NOT_SCANNED or not name.endswith(TEXT_SUFFIXES) and '.' in name:
            continue
        try:
            with open(path, encoding='utf-8') as f:
                text = f.read()
        except (UnicodeDecodeError, OSError):
            continue
        for bad in FORBIDDEN:
            if bad in text:
                found.append('%s names %s' % (os.path.relpath(path, ROOT), bad))
    assert not found, '; '.join(found)


# -- committed logs and results ---------------------------------------------------

# the folders of a machine that a log or a result may name (built from pieces,
# as FORBIDDEN): a run's folder, a home, a temporary folder
MACHINE_FOLDERS = ['/' + name + '/' for name in ('work', 'root', 'home', 'tmp')]
# what a run writes: logs, results, translations
OUTPUT_SUFFIXES = ('.log', '.jsonl', '.json', '.tok', '.out', '.csv', '.txt')
# docs/multi30k/ holds the Multi30k runs' outputs (the integrator's)
MULTI30K = os.path.join('docs', 'multi30k') + os.sep


def committed_outputs(inside_multi30k):
    """The committed logs and results (files under docs/ with an output's
    suffix): those in docs/multi30k/, or the others."""
    out = []
    for path in project_files():
        rel = os.path.relpath(path, ROOT)
        if rel.startswith('docs' + os.sep) and rel.endswith(OUTPUT_SUFFIXES) and \
                rel.startswith(MULTI30K) == inside_multi30k:
            out.append(path)
    return out


@pytest.mark.parametrize('inside_multi30k', [False, True],
                         ids=['docs', 'docs/multi30k'])
def test_committed_logs_name_no_folder_of_a_machine(inside_multi30k):
    """A committed log or result names files relative to its run's folder or
    the repository (training_log.RelativePaths), never a folder of the machine
    it ran on."""
    outputs = committed_outputs(inside_multi30k)
    assert outputs
    found = []
    for path in outputs:
        with open(path, encoding='utf-8', errors='replace') as f:
            for number, line in enumerate(f, 1):
                hits = [folder for folder in MACHINE_FOLDERS if folder in line]
                if hits:
                    found.append('%s:%d names %s' % (os.path.relpath(path, ROOT), number,
                                                     ', '.join(hits)))
                    break
    assert not found, '; '.join(found)


def test_readme_is_an_entry_point():
    with open(os.path.join(ROOT, 'README.md'), encoding='utf-8') as f:
        lines = f.read().split('\n')
    assert len(lines) <= 300, 'README.md has %d lines: details belong in docs/' % len(lines)


# -- the repairs of Theano that the documents name ------------------------------

REPAIR_TABLE_ROW = re.compile(r'^\| ((?:`[a-z0-9_*]+`(?:, )?)+) \|', re.M)
REPAIR_NAME = re.compile(r'`([a-z0-9_*]+)`')


def repair_names(patterns):
    """The repairs of theano_repairs.REPAIRS that each name or pattern
    ('lifters_take_fgraph_*') stands for: {pattern: [names]}."""
    import fnmatch
    from theano_platform import theano_repairs
    names = [r.name for r in theano_repairs.REPAIRS]
    return {p: fnmatch.filter(names, p) for p in patterns}


def check_named_repairs(patterns, where, every=False):
    """Each pattern names a repair; with ``every``, each repair is named."""
    from theano_platform import theano_repairs
    found = repair_names(patterns)
    unknown = sorted(p for p, names in found.items() if not names)
    assert not unknown, '%s names repairs that theano_repairs.REPAIRS has not: %s' % (
        where, ', '.join(unknown))
    if every:
        named = set(n for names in found.values() for n in names)
        missing = [r.name for r in theano_repairs.REPAIRS if r.name not in named]
        assert not missing, '%s lacks the repairs %s' % (where, ', '.join(missing))


def test_the_repair_table_of_gpu_md_is_the_list_of_repairs():
    """docs/gpu.md's table has a row for every repair of
    theano_platform/theano_repairs.py, and no row for one that is not there."""
    with open(os.path.join(DOCS, 'gpu.md'), encoding='utf-8') as f:
        text = f.read()
    table = text[text.index('| repair | what goes wrong without it |'):]
    table = table[:table.index('\n\n')]
    patterns = [n for row in REPAIR_TABLE_ROW.findall(table) for n in REPAIR_NAME.findall(row)]
    assert len(patterns) > 20
    check_named_repairs(patterns, 'docs/gpu.md', every=True)


def test_requirements_name_repairs_that_exist():
    with open(os.path.join(ROOT, 'requirements.txt'), encoding='utf-8') as f:
        text = f.read().replace('\n#', '')
    named = re.findall(r'theano_repairs\.py:\s*([^)]*)\)', text)
    patterns = [p.strip() for group in named for p in group.split(',')]
    assert patterns
    check_named_repairs(patterns, 'requirements.txt')
