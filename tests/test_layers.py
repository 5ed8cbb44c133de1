"""The layers of docs/code.md hold: machinery/ (the run services) imports
no other part of the project, theano_platform/ (Theano's layer) imports only
machinery/ besides itself; an import never runs back up."""
import ast
import os

import pytest

from helpers import ROOT

# what each lower layer may import of the project's own modules
ALLOWED = {'machinery': {'machinery'},
           'theano_platform': {'machinery', 'theano_platform'}}


def project_names():
    """The top-level names of the project's modules: its .py files and its
    packages (folders with an __init__.py)."""
    names = set()
    for entry in os.listdir(ROOT):
        path = os.path.join(ROOT, entry)
        if entry.endswith('.py'):
            names.add(entry[:-3])
        elif os.path.isfile(os.path.join(path, '__init__.py')):
            names.add(entry)
    return names


def imported_names(path):
    """The top-level names that a file imports, at any depth of its code
    (imports inside functions count), with their line numbers."""
    with open(path, encoding='utf-8') as f:
        tree = ast.parse(f.read(), path)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name.split('.')[0], node.lineno
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module.split('.')[0], node.lineno


def upward_imports(layer):
    """'FILE:LINE imports NAME' for each import of ``layer``'s modules that
    its rule does not allow."""
    own = project_names()
    found = []
    folder = os.path.join(ROOT, layer)
    for name in sorted(os.listdir(folder)):
        if not name.endswith('.py'):
            continue
        path = os.path.join(folder, name)
        for module, line in imported_names(path):
            if module in own and module not in ALLOWED[layer]:
                found.append('%s/%s:%d imports %s' % (layer, name, line, module))
    return found


@pytest.mark.parametrize('layer', sorted(ALLOWED))
def test_no_import_runs_back_up(layer):
    assert upward_imports(layer) == []


def test_the_rule_sees_an_upward_import(tmp_path, monkeypatch):
    """The check finds an import of the core placed inside a function."""
    layer = tmp_path / 'machinery'
    layer.mkdir()
    (layer / '__init__.py').write_text('')
    (layer / 'helper.py').write_text('def f():\n    import nmt_model\n    return nmt_model\n')
    (tmp_path / 'nmt_model.py').write_text('')
    monkeypatch.setattr(__import__(__name__), 'ROOT', str(tmp_path))
    assert upward_imports('machinery') == ['machinery/helper.py:2 imports nmt_model']


def test_the_layers_are_packages():
    assert {'machinery', 'theano_platform'} <= project_names()
