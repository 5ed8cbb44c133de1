"""The run services that the dl4mt core, Theano's layer (theano_platform/)
and the commands need, one module a purpose; none imports either of them.

Commands: cli (how a command ends), progress, worker_processes.  Files:
text_io, output_files (atomic writes), pickle_and_json, vocab (words and
dictionaries), model_io (model files).  Training runs: option_schema,
training_options, training_state, training_log, stop_requests, run_lock,
distributed (MPI workers).  Results: bleu, plots.

Nothing here is run as a command; the commands are the top level's and the
folders' scripts (docs/code.md).
"""
import os
import sys

# The repository's root: a missing module found here is the project's own.
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _outside_the_environment(kind, error):
    """A ModuleNotFoundError for a package that the project installs
    (numpy, theano, ...): the command runs in a Python without .venv."""
    if not issubclass(kind, ModuleNotFoundError) or not error.name:
        return False
    top = error.name.split('.')[0]
    return not (os.path.exists(os.path.join(_ROOT, top + '.py'))
                or os.path.isdir(os.path.join(_ROOT, top)))


def _setup_hint(previous):
    """sys.excepthook: one line saying to run setup.sh instead of the
    traceback of a package that this Python lacks; anything else as before.
    Every command imports this package before any package it installs."""
    def hook(kind, error, tb):
        if not _outside_the_environment(kind, error):
            return previous(kind, error, tb)
        print("error: this Python (%s) has no module %r: the commands run in the "
              "project's environment, .venv: run `bash setup.sh` (then "
              ".venv/bin/python COMMAND; train_*.sh find .venv themselves)"
              % (sys.executable, error.name), file=sys.stderr)
    return hook


sys.excepthook = _setup_hint(sys.excepthook)
