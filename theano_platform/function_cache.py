"""Compiled Theano functions kept from one run to the next: a warm start-up
without graph optimisation.

Theano keeps the C code of each op across processes, but not the optimised
graphs: every training run optimises its graphs again, which is most of its
start-up with a warm C cache.  A compiled function pickles with its optimised
graph (Theano's FunctionMaker keeps it, and unpickling only links it again
while ``config.reoptimize_unpickled_function`` is off, its default), so a run
can save the bundle of functions it compiled and the next run with the same
graphs can load it instead of building and optimising them.

The bundle is kept in Theano's compile folder (``function_cache/``), under a
key made of everything that shapes the graphs: the project's Python source,
Theano's version and whole configuration (device, floatX, optimiser, flags),
the repairs in force and the caller's options.  A different key is a miss,
never a stale graph.  The values of the named shared variables are not
stored: those the caller names (the parameters) come back with the values it
gives at loading, the large all-zero arrays (the optimiser's accumulators and
gradient buffers) as fresh zeros of their shape.  A loaded function is linked
to its C code when it is first called (``LinkedOnFirstCall``): a training
run's first update waits for the training functions alone, not for those of
validation and sampling.

On the CPU only: a GPU function's storage lives on a device context, which
this cache does not save (there the functions are compiled as before).
``NMT_FUNCTION_CACHE=off`` turns the cache off; ``NMT_FUNCTION_CACHE=DIR``
keeps the bundles in DIR.
"""
import copyreg
import glob
import hashlib
import io
import os
import pickle
import sys
import tempfile
import zlib
from contextlib import contextmanager

import numpy

from machinery.output_files import remove_if_there

VARIABLE = 'NMT_FUNCTION_CACHE'
OFF = ('0', 'off', 'no', 'false')
FOLDER = 'function_cache'
KEEP = 16          # bundles kept; the least recently used go first
ZEROS_FROM = 4096  # bytes: an all-zero array this large is stored as its shape
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# the project's folders whose Python files build graphs: the top level (nmt,
# layers, optimizers, ...), theano_platform/ (fast_ops, ...), machinery/,
# the language model
SOURCE_FOLDERS = ('', 'theano_platform', 'machinery', 'language_model')


def enabled():
    """The cache is on: the CPU device, and not turned off by the user."""
    import theano
    return (os.environ.get(VARIABLE, '').lower() not in OFF
            and theano.config.device == 'cpu')


def folder():
    """Where the bundles are kept: NMT_FUNCTION_CACHE's folder, or
    function_cache/ in Theano's compile folder."""
    import theano
    return (os.environ.get(VARIABLE) or
            os.path.join(theano.config.compiledir, FOLDER))


def source_digest():
    """A digest of the Python files that build graphs (SOURCE_FOLDERS): any
    edit of them changes the key."""
    digest = hashlib.sha256()
    for folder in SOURCE_FOLDERS:
        for path in sorted(glob.glob(os.path.join(ROOT, folder, '*.py'))):
            with open(path, 'rb') as f:
                digest.update(os.path.join(folder, os.path.basename(path)).encode() + b'\0' +
                              f.read())
    return digest.hexdigest()


def cache_key(kind, parts):
    """The key of a bundle of ``kind`` built from ``parts`` (a dict of plain
    values: the caller's options), with everything else that shapes a
    compiled graph."""
    import theano
    from theano_platform import theano_repairs
    config = theano.config
    settings = sorted((name, repr(getattr(config, name)))
                      for name in config._config_var_dict)
    # the program: a class it defines pickles as __main__'s, found again
    # only when the same program loads the bundle
    program = getattr(sys.modules.get('__main__'), '__file__', None)
    from theano_platform import fast_ops
    whole = repr((kind, program, sorted((k, repr(v)) for k, v in parts.items()), settings,
                  fast_ops.enabled(),
                  theano.__version__, numpy.__version__, sys.version,
                  [r.name for r in theano_repairs.active()], source_digest()))
    return hashlib.sha256(whole.encode()).hexdigest()[:32]


def _path(key):
    return os.path.join(folder(), key + '.pkl.z')


@contextmanager
def _deep_recursion():
    """Optimised graphs nest deeper than Python's default recursion limit."""
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 50000))
    try:
        yield
    finally:
        sys.setrecursionlimit(limit)


class LinkedOnFirstCall(object):
    """A compiled Theano function as the cache gives it back: its optimised
    graph and storage, linked to its C code (Theano's FunctionMaker.create,
    what unpickling a function does at once) when it is first called or
    asked for an attribute."""

    def __init__(self, maker, input_storage, trust_input):
        self._parts = (maker, input_storage, trust_input)
        self._function = None

    def function(self):
        """The theano Function, linked now if it was not yet."""
        if self._function is None:
            maker, input_storage, trust_input = self._parts
            self._function = maker.create(input_storage, trustme=True)
            self._function.trust_input = trust_input
            self._parts = None
        return self._function

    def __call__(self, *args, **kwargs):
        return self.function()(*args, **kwargs)

    def __getattr__(self, name):   # only for names the wrapper lacks
        if name.startswith('__') or name in ('_parts', '_function'):
            raise AttributeError(name)
        return getattr(self.function(), name)


def _pickle_linked_on_first_call(f):
    """A theano Function pickled as LinkedOnFirstCall: its maker, and the
    storage of its explicit inputs (as Theano's own pickling keeps it; shared
    variables' containers, shared with the bundle's other functions)."""
    return LinkedOnFirstCall, (f.maker, list(f.input_storage[:len(f.indices)]), f.trust_input)


class _Pickler(pickle.Pickler):
    """Pickles a bundle without the values of the given shared variables
    (a name stands for each) nor those of its large all-zero arrays (the
    optimiser's accumulators and gradient buffers: their shape stands for
    each); its functions unpickle as LinkedOnFirstCall."""

    def __init__(self, f, given):
        from theano.compile.function.types import Function
        pickle.Pickler.__init__(self, f, protocol=pickle.HIGHEST_PROTOCOL)
        self.dispatch_table = copyreg.dispatch_table.copy()
        self.dispatch_table[Function] = _pickle_linked_on_first_call
        self.given = dict((id(var.get_value(borrow=True, return_internal_type=True)), name)
                          for name, var in given.items())

    def persistent_id(self, obj):
        if not isinstance(obj, numpy.ndarray):
            return None
        if id(obj) in self.given:
            return ('given', self.given[id(obj)])
        if obj.nbytes >= ZEROS_FROM and not obj.any():
            # one token an array: two arrays never become one
            return ('zeros', id(obj), obj.shape, obj.dtype.str)
        return None


class _Unpickler(pickle.Unpickler):
    """Puts the given values and fresh zeros back in place of the tokens:
    one array a token (a name), so that an array seen twice is one array
    again and two variables never share one."""

    def __init__(self, f, given):
        pickle.Unpickler.__init__(self, f)
        self.given, self.made = given, {}

    def persistent_load(self, token):
        if token not in self.made:
            if token[0] == 'given':
                self.made[token] = numpy.array(self.given[token[1]], copy=True)
            else:
                self.made[token] = numpy.zeros(token[2], dtype=token[3])
        return self.made[token]


def load(key, given):
    """The bundle saved under ``key``, its given values in place; None when
    there is none or it cannot be read (then it is removed, with one line)."""
    path = _path(key)
    if not os.path.exists(path):
        return None
    try:
        with open(path, 'rb') as f:
            data = zlib.decompress(f.read())
        with _deep_recursion():
            bundle = _Unpickler(io.BytesIO(data), given).load()
    except Exception as error:   # a damaged or foreign file: compile instead
        print('function cache: %s unreadable (%s: %s); compiling instead'
              % (path, type(error).__name__, error), file=sys.stderr)
        remove_if_there(path)
        return None
    os.utime(path)   # recently used
    return bundle


def save(key, bundle, given):
    """Saves ``bundle`` under ``key`` without the values of the shared
    variables in ``given`` (a dict name -> shared variable; ``load`` takes
    their values by these names).  Written whole or not at all; failing to
    save only costs the next run its compile."""
    path = _path(key)
    folder = os.path.dirname(path)
    try:
        data = io.BytesIO()
        with _deep_recursion():
            _Pickler(data, given).dump(bundle)
        _write_whole(path, zlib.compress(data.getbuffer(), 1))   # graphs: 7x smaller
    except Exception as error:
        print('function cache: not saved (%s: %s)' % (type(error).__name__, error),
              file=sys.stderr)
        return
    _forget_old(folder)


# Theano's module cache removes every empty folder of the compile folder when
# a process refreshes it: a function_cache/ just made could go before its
# first file is in it (two MPI workers compiling at once lost both bundles
# so).  The folder and its file are made together, and once more if it went.
FOLDER_ATTEMPTS = 3


def _write_whole(path, data):
    """``data`` into ``path`` under a temporary name, renamed when whole."""
    for attempt in range(FOLDER_ATTEMPTS):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        try:
            fd, partial = tempfile.mkstemp(dir=os.path.dirname(path), suffix='.partial')
        except FileNotFoundError:
            if attempt == FOLDER_ATTEMPTS - 1:
                raise
            continue
        try:
            with os.fdopen(fd, 'wb') as f:
                f.write(data)
            os.replace(partial, path)
            return
        finally:
            remove_if_there(partial)


def _forget_old(folder):
    """Keeps the KEEP most recently used bundles."""
    paths = sorted(glob.glob(os.path.join(folder, '*.pkl.z')), key=os.path.getmtime)
    for path in paths[:-KEEP]:
        remove_if_there(path)
