"""Reading and writing the model files of the original dl4mt-tutorial code.

The original (Python 2) code stores
  * model options as a pickle of a plain dict (``model.npz.pkl``),
  * parameters as a numpy ``.npz`` archive, one array per parameter name, plus
    ``history_errs`` (and ``uidx`` in later versions).

This module reads those files whether Python 2 or Python 3 wrote them, and
writes files that the original Python-2 code can read back; each options
pickle has a JSON twin (``.json``) that is easier to inspect.  Every write is
atomic (machinery/output_files.py).  Dictionaries are machinery/vocab.py's.

Bad user input (missing, empty or unreadable files, a model that does not
match its options) raises :class:`InputError`; entry points print
``error: <message>`` and exit with status 1.
"""
import os
import pickle
import warnings
import zipfile

import numpy

from machinery.output_files import atomic_write, atomic_write_files, json_text
from machinery.pickle_and_json import PY2_PROTOCOL, load_json, load_pickle
from machinery.text_io import InputError, check_readable, one_line


def file_as_named_or_beside(name, model_path):
    """The file a model's options name: ``name`` itself, else the file of
    that name beside the model file (a model moved with its dictionaries);
    None when neither is there."""
    for candidate in (name, os.path.join(os.path.dirname(os.path.abspath(model_path)),
                                         os.path.basename(name))):
        if os.path.isfile(candidate):
            return candidate
    return None


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


def save_options(options, model_path):
    """Write ``model_path.pkl`` (protocol 2, for Python 2) and ``.json``."""
    model_path = os.fspath(model_path)
    plain = dict(options)
    text = json_text(plain, indent=2, sort_keys=True, ensure_ascii=False)
    atomic_write_files([
        (model_path + '.pkl', lambda f: pickle.dump(plain, f, protocol=PY2_PROTOCOL), 'wb'),
        (model_path + '.json', lambda f: f.write(text), 'w')])


# the kinds of model, as options['model_kind'] names them
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
                             % (self.path, one_line(e)))
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
                          % (self.path, name, one_line(error)))

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
