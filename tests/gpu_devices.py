"""Which GPU back-end devices the tests can use here, and why not the others.

CUDA needs ``bash setup.sh --gpu`` and an NVIDIA device; OpenCL needs
``bash setup.sh --opencl`` (pocl gives every CPU an OpenCL device), which the
README's test command runs: on CI the GPU tests run on OpenCL, never skipped.
"""
import importlib.util
import os

from theano_platform import theano_env
from gpu import libraries

# the Theano device of each kind
DEVICES = {'cuda': 'cuda', 'opencl': 'opencl0:0'}


def why_not(kind):
    """A reason to skip the tests of this kind of device, or None."""
    setup = theano_env.SETUP_COMMAND[kind]
    if importlib.util.find_spec('pygpu') is None:
        return 'no GPU set-up: pygpu is not installed (%s)' % setup
    missing = [n for n in theano_env.GPU_LINKS[kind]
               if not os.path.exists(os.path.join(theano_env.GPU_LIB_DIR, n))]
    if missing:
        return 'no %s set-up: %s missing in %s (%s)' % (
            kind, ', '.join(missing), theano_env.GPU_LIB_DIR, setup)
    count = libraries.device_count() if kind == 'cuda' else libraries.opencl_device_count()
    if count < 1:
        return 'no %s device' % kind
    return None


def available():
    """The kinds of device usable here, e.g. ['opencl']."""
    return [kind for kind in DEVICES if why_not(kind) is None]
