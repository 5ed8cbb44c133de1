"""Reading and writing the file formats of the original dl4mt-tutorial code.

The original (Python 2) code stores
  * dictionaries as pickles of an ``OrderedDict`` word -> id (``corpus.pkl``),
  * model options as a pickle of a plain dict (``model.npz.pkl``),
  * parameters as a numpy ``.npz`` archive, one array per parameter name, plus
    ``history_errs`` (and ``uidx`` in later versions).

This module reads those files whether Python 2 or Python 3 wrote them, and
writes files that the original Python-2 code can read back.  Each saved
pickle has a JSON twin (``.json``) that is easier to inspect.  Every write is
atomic: a reader never sees a partially written file under its final name.

Bad user input (missing, empty or unreadable files, a model that does not
match its options) raises :class:`InputError`; entry points print
``error: <message>`` and exit with status 1.
"""
import collections
import json
import os
import sys
import pickle
import re
import tempfile
import warnings
import zipfile

import numpy

from machinery.cli import CommandError
from machinery.text_io import InputError, check_readable, one_line as _one_line
from machinery.vocab import check_dictionary

# Python 2 can read pickle protocols 0 to 2.
PY2_PROTOCOL = 2


# --------------------------------------------------------------------------
# Atomic writes
# --------------------------------------------------------------------------

def _current_umask():
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write(path, write_fn, mode='wb'):
    """Call ``write_fn(f)`` on a temporary file, then rename it to ``path``.

    The temporary file lives in the same directory (so the rename is atomic),
    is flushed and fsync'ed before the rename, and is removed if ``write_fn``
    raises, so no partial file ever carries the final name.  ``mode`` is
    ``'wb'`` or ``'w'`` (text, UTF-8).  A path that exists and is not a regular
    file (``/dev/null``, a pipe) is written directly: renaming onto it would
    replace the device with a file.  A write that fails (disk full,
    permission denied, no such folder) raises ``cli.CommandError`` naming
    ``path`` and the reason; a file already there is left as it was.
    """
    path = os.fspath(path)
    if os.path.exists(path) and not os.path.isfile(path):
        text = {} if 'b' in mode else {'encoding': 'utf-8', 'newline': '\n'}
        try:
            with open(path, mode, **text) as f:
                write_fn(f)
        except OSError as e:
            raise write_error(path, e) from None
        return
    atomic_write_files([(path, write_fn, mode)])


def atomic_write_files(files):
    """Several files, [(path, write_fn, mode)], as ``atomic_write`` writes
    one, as a group: every one to its temporary name first, then all renamed;
    when a write fails none of them appears (the files already there keep
    their content)."""
    written = []
    try:
        for path, write_fn, mode in files:
            written.append((_write_temporary(os.fspath(path), write_fn, mode), path))
        for tmp, path in written:
            os.replace(tmp, path)
    except BaseException as e:
        error = _discard([tmp for tmp, _ in written], path, e)
        if error is e:
            raise
        raise error from None


def _new_temporary(path):
    """(descriptor, name) of a new empty file beside ``path``, named
    '.NAME.XXXXXXXX.tmp' (temporaries_of matches such names)."""
    return tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(path)),
                            prefix='.' + os.path.basename(path) + '.', suffix='.tmp')


def temporaries_of(names):
    """A compiled pattern of the names of the temporary files (_new_temporary)
    of the files whose names match the regular expression ``names``."""
    return re.compile(r'\.(?:%s)\.[A-Za-z0-9_]+\.tmp$' % names)


def _write_temporary(path, write_fn, mode):
    """The name of a new temporary file beside ``path`` that ``write_fn``
    wrote, flushed and fsync'ed (CommandError naming ``path`` if a write
    fails; nothing is left then)."""
    try:
        fd, tmp = _new_temporary(path)
    except OSError as e:
        raise write_error(path, e) from None
    try:
        if 'b' in mode:
            f = os.fdopen(fd, mode)
        else:
            f = os.fdopen(fd, mode, encoding='utf-8', newline='\n')
        with f:
            write_fn(f)
            f.flush()
            os.fsync(f.fileno())
        # mkstemp creates the file with mode 0600; give it the usual mode.
        os.chmod(tmp, 0o666 & ~_current_umask())
    except BaseException as e:
        error = _discard([tmp], path, e)
        if error is e:
            raise
        raise error from None
    return tmp


def _discard(temporaries, path, error):
    """Remove the temporary files of a failed write; the error to raise:
    one line naming ``path`` where an OSError caused it (disk full), else
    ``error`` itself."""
    for tmp in temporaries:
        remove_if_there(tmp)
    cause = _os_error_in(error)
    if cause is not None and not isinstance(error, CommandError):
        return write_error(path, cause)
    return error


def remove_if_there(path):
    """Remove a file, if it is there (and can be removed)."""
    try:
        os.remove(path)
    except OSError:
        pass


def _os_error_in(error):
    """The OSError that ``error`` is or arose from (zipfile's clean-up after
    a failed write raises a ValueError on top of the OSError), else None."""
    while error is not None:
        if isinstance(error, OSError):
            return error
        error = error.__context__
    return None


def check_writable(path):
    """CommandError naming ``path`` unless a file can be written there now
    (its folder exists and takes a new file): a long job checks its outputs
    before it starts.  '-' (standard output) passes."""
    if path == '-':
        return
    if os.path.isdir(path):
        raise CommandError('%s: cannot write: it is a directory' % path)
    try:
        fd, tmp = _new_temporary(path)
    except OSError as e:
        raise write_error(path, e) from None
    os.close(fd)
    os.unlink(tmp)


def check_outputs(outputs, inputs=()):
    """Before a command's work: CommandError naming the output unless each
    of ``outputs`` can be written (check_writable), then check_distinct.
    None and '-' (the standard streams) are skipped."""
    outputs = [os.fspath(p) for p in outputs if p is not None and p != '-']
    for path in outputs:
        check_writable(path)
    check_distinct(outputs, inputs)


def check_distinct(outputs, inputs):
    """InputError naming the output when one of ``outputs`` is one of
    ``inputs`` or of the other outputs by the file's identity (device and
    inode: './NAME', another path or a hard link of a file is that file),
    which writing it (a rename onto the name) would replace."""
    outputs = [os.fspath(p) for p in outputs if p is not None and p != '-']
    inputs = [os.fspath(p) for p in inputs if p is not None and p != '-']
    known = [(file_identity(p), p, True) for p in inputs]
    for path in outputs:
        identity = file_identity(path)
        for other_identity, other, is_input in known:
            if identity == other_identity:
                raise InputError(_same_file_message(path, other, is_input))
        known.append((identity, path, False))


def _same_file_message(output, other, is_input):
    same = '' if output == other else ' (the same file as %s)' % other
    if is_input:
        return ('%s: is an input of this command%s: the output would replace it; choose '
                'another output file' % (output, same))
    return '%s: is another output of this command%s: choose another name for one' % (
        output, same)


def model_files(paths):
    """The files of the models ``paths``: each one's parameters and options."""
    return [path + suffix for path in paths for suffix in ('', '.pkl', '.json')]


def file_identity(path):
    """(device, inode) of an existing file (links followed), else its
    absolute path with links resolved: equal for two names of one file."""
    try:
        st = os.stat(path)
    except OSError:
        return os.path.realpath(path)
    return (st.st_dev, st.st_ino)


def write_error(path, error):
    """The one-line error of a write to ``path`` that failed with ``error``."""
    return CommandError('%s: cannot write: %s' % (path, error.strerror or _one_line(error)))


def write_text(path, text):
    """Write ``text`` (UTF-8) to standard output when ``path`` is ``-``, else
    to ``path`` through ``atomic_write`` (never a half-written file)."""
    if path == '-':
        sys.stdout.write(text)
        sys.stdout.flush()
    else:
        atomic_write(path, lambda f: f.write(text), 'w')


def write_json(path, obj, **dump_options):
    """``obj`` as JSON (``json_text``) through ``write_text``: atomically,
    or to stdout for '-'."""
    write_text(path, json_text(obj, **dump_options))


def json_text(obj, **dump_options):
    """``json.dumps`` with ``dump_options`` (numpy values as plain numbers)
    and a newline."""
    dump_options.setdefault('default', _json_default)
    return json.dumps(obj, **dump_options) + '\n'


def atomic_savez(path, **arrays):
    """``numpy.savez(path, **arrays)`` written atomically, under the name as
    given (numpy would append ``.npz`` to a name that lacks it).

    The archive is written as numpy.savez writes it (an uncompressed zip of
    one .npy entry per array), but inside a ``with``: when a write fails (a
    full disk), numpy.savez leaves its zip file to the garbage collector,
    whose late close fails on the closed file and prints a traceback.
    """
    def write(f):
        with zipfile.ZipFile(f, mode='w', compression=zipfile.ZIP_STORED,
                             allowZip64=True) as archive:
            for name, value in arrays.items():
                with archive.open(name + '.npy', 'w', force_zip64=True) as entry:
                    numpy.lib.format.write_array(entry, numpy.asanyarray(value))
    atomic_write(path, write, 'wb')


# --------------------------------------------------------------------------
# Pickles from Python 2 or 3
# --------------------------------------------------------------------------

def _to_str(value):
    """Decode a Python-2 byte string: UTF-8, or latin-1 if not valid UTF-8."""
    try:
        return value.decode('utf-8')
    except UnicodeDecodeError:
        return value.decode('latin-1')


def bytes_to_str(obj):
    """Recursively turn bytes into str in dicts, lists and tuples.

    Dicts keep their type (``OrderedDict`` stays ordered) and their order.
    """
    if isinstance(obj, bytes):
        return _to_str(obj)
    if isinstance(obj, dict):
        out = collections.OrderedDict() if isinstance(
            obj, collections.OrderedDict) else {}
        for key, value in obj.items():
            out[bytes_to_str(key)] = bytes_to_str(value)
        return out
    if isinstance(obj, list):
        return [bytes_to_str(v) for v in obj]
    if isinstance(obj, tuple):
        return tuple(bytes_to_str(v) for v in obj)
    return obj


def load_pickle(path):
    """Load a pickle written by Python 2 or Python 3.

    Python-2 ``str`` objects are loaded as bytes (``encoding='bytes'``, which
    also lets numpy rebuild Python-2 scalars and arrays from their raw data)
    and then decoded to str, recursively, by :func:`bytes_to_str`.
    """
    check_readable(path, allow_empty=False)
    try:
        with open(path, 'rb') as f:
            obj = pickle.load(f, encoding='bytes')
    except OSError as e:
        raise InputError('%s: cannot read: %s' % (path, e.strerror or e))
    except Exception as e:  # pickle raises many kinds of errors
        raise InputError('%s: not a readable pickle (%s: %s)'
                         % (path, type(e).__name__, _one_line(e)))
    return bytes_to_str(obj)


def load_json(path):
    """The value of a JSON file (objects as OrderedDicts); InputError naming
    the file when it is missing, empty or not JSON."""
    check_readable(path, allow_empty=False)
    try:
        with open(path, 'r', encoding='utf-8') as f:
            return json.load(f, object_pairs_hook=collections.OrderedDict)
    except OSError as e:
        raise InputError('%s: cannot read: %s' % (path, e.strerror or e))
    except (ValueError, UnicodeDecodeError) as e:
        raise InputError('%s: not valid JSON (%s)' % (path, _one_line(e)))


# --------------------------------------------------------------------------
# Dictionaries
# --------------------------------------------------------------------------

def file_as_named_or_beside(name, model_path):
    """The file a model's options name: ``name`` itself, else the file of
    that name beside the model file (a model moved with its dictionaries);
    None when neither is there."""
    for candidate in (name, os.path.join(os.path.dirname(os.path.abspath(model_path)),
                                         os.path.basename(name))):
        if os.path.isfile(candidate):
            return candidate
    return None


def load_dictionary(path):
    """Load a word -> id dictionary from a ``.json`` file or a pickle;
    keys come back as str.  Its ids are checked (vocab.check_dictionary):
    InputError naming the file and the entry."""
    path = os.fspath(path)
    if path.endswith('.json'):
        d = load_json(path)
    else:
        d = load_pickle(path)
    if not isinstance(d, dict):
        raise InputError('%s: expected a dictionary word -> id, found %s'
                         % (path, type(d).__name__))
    check_dictionary(d, path)
    return d


def save_dictionary(word_to_id, pkl_path, json_path):
    """Write a dictionary as a Python-2-readable pickle and as JSON.

    The pickle holds an ``OrderedDict`` with UTF-8 ``bytes`` keys (Python 2
    reads them as ``str``, the type its lookups use) and int values, protocol
    2.  The JSON object lists the words in id order.
    """
    items = sorted(word_to_id.items(), key=lambda kv: int(kv[1]))
    od = collections.OrderedDict()
    for word, idx in word_to_id.items():
        key = word.encode('utf-8') if isinstance(word, str) else bytes(word)
        od[key] = int(idx)
    text = json_text(collections.OrderedDict((w, int(i)) for w, i in items),
                     ensure_ascii=False, indent=2)
    atomic_write_files([(pkl_path, lambda f: pickle.dump(od, f, protocol=PY2_PROTOCOL), 'wb'),
                        (json_path, lambda f: f.write(text), 'w')])


# --------------------------------------------------------------------------
# Options
# --------------------------------------------------------------------------

def load_options(model_path):
    """Options dict from ``model_path.pkl`` (preferred) or ``model_path.json``."""
    model_path = os.fspath(model_path)
    pkl_path, json_path = model_path + '.pkl', model_path + '.json'
    if os.path.exists(pkl_path):
        options = load_pickle(pkl_path)
        path = pkl_path
    elif os.path.exists(json_path):
        options = load_json(json_path)
        path = json_path
    else:
        raise InputError('%s: no such file (nor %s): the model options are '
                         'missing' % (pkl_path, json_path))
    if not isinstance(options, dict):
        raise InputError('%s: expected a dictionary of options, found %s'
                         % (path, type(options).__name__))
    return dict(options)


# --------------------------------------------------------------------------
# Kinds of model
# --------------------------------------------------------------------------

TRANSLATION_MODEL, LANGUAGE_MODEL = 'translation_model', 'language_model'
KIND_NAMES = {TRANSLATION_MODEL: 'a translation model (nmt.py)',
              LANGUAGE_MODEL: 'a language model of language_model/lm.py'}


def model_kind(options):
    """The kind of model that saved ``options``: ``options['model_kind']``
    (language_model/lm.py writes it), else a translation model where the
    options name a decoder (nmt.py's and the original code's files); None
    for another."""
    kind = options.get('model_kind')
    if kind is None and 'decoder' in options:
        return TRANSLATION_MODEL
    return kind


def check_model_kind(path, options, expected):
    """InputError naming ``path`` unless its ``options`` (as saved) are
    those of a model of kind ``expected``: every command that loads a model
    refuses another kind before any work."""
    kind = model_kind(options)
    if kind != expected:
        found = KIND_NAMES.get(kind, 'a model of another kind (no model_kind in its options)')
        raise InputError('%s: %s, not %s' % (path, found, KIND_NAMES[expected]))


def _json_default(obj):
    if isinstance(obj, numpy.generic):
        return obj.item()
    if isinstance(obj, numpy.ndarray):
        return obj.tolist()
    if isinstance(obj, bytes):
        return _to_str(obj)
    if isinstance(obj, (set, frozenset)):
        return sorted(obj)
    return str(obj)


def save_options(options, model_path):
    """Write ``model_path.pkl`` (protocol 2, for Python 2) and ``.json``."""
    model_path = os.fspath(model_path)
    plain = dict(options)
    text = json_text(plain, indent=2, sort_keys=True, ensure_ascii=False)
    atomic_write_files([
        (model_path + '.pkl', lambda f: pickle.dump(plain, f, protocol=PY2_PROTOCOL), 'wb'),
        (model_path + '.json', lambda f: f.write(text), 'w')])


# --------------------------------------------------------------------------
# Parameters
# --------------------------------------------------------------------------

class Archive(object):
    """An .npz archive (``numpy.load``) whose faults are InputErrors naming
    the file: missing, empty, truncated, not an archive, an entry whose data
    cannot be read.  ``files``, ``archive[name]``, ``close()``, ``with``."""

    def __init__(self, path):
        self.path = os.fspath(path)
        check_readable(self.path, allow_empty=False)
        try:
            self.npz = numpy.load(self.path, allow_pickle=False)
        except OSError as e:
            raise InputError('%s: cannot read: %s' % (self.path, e.strerror or e))
        except Exception as e:
            raise InputError('%s: not a readable .npz archive, truncated or corrupt (%s)'
                             % (self.path, _one_line(e)))
        self.files = self.npz.files

    def __getitem__(self, name):
        """The entry's array.  The ValueError of an entry that needs pickle
        (history_errs of some old files) is left to the caller."""
        try:
            return self.npz[name]
        except ValueError as e:
            if 'allow_pickle' in str(e):
                raise
            error = e
        except Exception as e:   # zipfile, zlib and numpy raise many kinds
            error = e
        raise self._unreadable(name, error)

    def _unreadable(self, name, error):
        return InputError('%s: cannot read %s, the file is truncated or corrupt (%s)'
                          % (self.path, name, _one_line(error)))

    def shape(self, name):
        """The shape of an entry, from its header alone (its data is not read)."""
        readers = {(1, 0): numpy.lib.format.read_array_header_1_0,
                   (2, 0): numpy.lib.format.read_array_header_2_0}
        try:
            with self.npz.zip.open(name + '.npy') as member:
                read = readers.get(numpy.lib.format.read_magic(member))
                if read is not None:
                    return tuple(read(member)[0])
        except Exception as e:   # zipfile and numpy raise many kinds
            raise self._unreadable(name, e) from None
        return self[name].shape

    def close(self):
        self.npz.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


# the entries of a model file besides its parameters
MODEL_FILE_EXTRAS = ('history_errs', 'uidx', 'zipped_params')


def load_params(path, params, strict=False):
    """Overwrite the arrays of ``params`` with those stored in ``path``.

    As in the original: a name missing from the archive warns
    ``'NAME is not in the archive'`` and keeps its initial value; archive
    entries that ``params`` does not name are ignored (never read).  With
    ``strict`` (the project's commands) both are an InputError: the file
    does not match its options.  Values are cast to float32.  A shape
    mismatch raises :class:`InputError`.
    """
    path = os.fspath(path)
    with Archive(path) as archive:
        if strict:
            check_parameter_names(path, archive.files, params)
        for name, init in list(params.items()):
            if name not in archive.files:
                warnings.warn('%s is not in the archive' % name)
                continue
            value = archive[name]
            want = numpy.shape(init)
            if value.shape != want:
                raise InputError(
                    '%s: parameter %s has shape %s but the options say %s: '
                    'model and options/dictionaries do not match'
                    % (path, name, tuple(value.shape), tuple(want)))
            params[name] = value.astype('float32')
    return params


def check_parameter_names(path, names, params):
    """InputError naming ``path`` unless its entries ``names`` are the
    parameters ``params`` (and MODEL_FILE_EXTRAS)."""
    missing = [n for n in params if n not in names]
    unknown = [n for n in names if n not in params and n not in MODEL_FILE_EXTRAS]
    problems = []
    if missing:
        problems.append('%d of its %d parameters are not in the file (%s)'
                        % (len(missing), len(params), _first_names(missing)))
    if unknown:
        problems.append('the file has %d parameters that the options do not name (%s)'
                        % (len(unknown), _first_names(unknown)))
    if problems:
        raise InputError('%s: the model file does not match its options: %s'
                         % (path, '; '.join(problems)))


def _first_names(names, shown=3):
    return ', '.join(names[:shown]) + (', ...' if len(names) > shown else '')


def count_archive_params(path):
    """The number of parameters (floating-point entries but history_errs) of
    a model file."""
    with Archive(path) as archive:
        arrays = (archive[k] for k in archive.files if k not in ('history_errs', 'uidx'))
        return int(sum(a.size for a in arrays if a.dtype.kind == 'f'))


def load_archive_extras(path):
    """``{'history_errs': [float, ...], 'uidx': int}`` from an npz archive.

    Missing (or unreadable without pickle) entries give ``[]`` and ``0``.
    """
    path = os.fspath(path)
    extras = {'history_errs': [], 'uidx': 0}
    with Archive(path) as archive:
        if 'history_errs' in archive.files:
            try:
                extras['history_errs'] = [float(v) for v in archive['history_errs'].ravel()]
            except (ValueError, TypeError):
                warnings.warn('%s: history_errs cannot be read, starting '
                              'with an empty history' % path)
        if 'uidx' in archive.files:
            try:
                extras['uidx'] = int(archive['uidx'])
            except (ValueError, TypeError):
                warnings.warn('%s: uidx cannot be read, using 0' % path)
    return extras
