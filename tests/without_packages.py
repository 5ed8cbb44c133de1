"""Runs ``SCRIPT ARGS...`` as a Python without the project's environment
runs it: an import of a package that setup.sh installs into .venv (numpy,
theano, ...) fails with ModuleNotFoundError.  test_outside_venv.py starts
the commands through it."""
import importlib.abc
import os
import runpy
import sys

# import names of requirements.txt's packages
INSTALLED = ('numpy', 'theano', 'scipy', 'sacrebleu', 'sacremoses', 'subword_nmt',
             'matplotlib', 'mpi4py', 'pygpu')


class NotInstalled(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in INSTALLED:
            raise ModuleNotFoundError('No module named %r' % name, name=name)
        return None


if __name__ == '__main__':
    script = os.path.abspath(sys.argv[1])
    sys.argv = [script] + sys.argv[2:]
    sys.path[0] = os.path.dirname(script)   # as "python SCRIPT" does
    sys.meta_path.insert(0, NotInstalled())
    runpy.run_path(script, run_name='__main__')
