"""Writing files so that no reader ever sees half of one, and refusing an
output that would replace an input.

Every write goes to a temporary file beside its target, is flushed and
fsync'ed, then renamed (``atomic_write``; several files as one group:
``atomic_write_files``); a failed write raises one ``CommandError`` line
naming the file and leaves the file already there as it was.  ``-`` is
standard output.  JSON is written with numpy values as plain numbers.
"""
import json
import os
import re
import sys
import tempfile

import numpy

from machinery.cli import CommandError
from machinery.pickle_and_json import py2_str
from machinery.text_io import InputError, one_line


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
    return CommandError('%s: cannot write: %s' % (path, error.strerror or one_line(error)))


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


def _json_default(obj):
    if isinstance(obj, numpy.generic):
        return obj.item()
    if isinstance(obj, numpy.ndarray):
        return obj.tolist()
    if isinstance(obj, bytes):
        return py2_str(obj)
    if isinstance(obj, (set, frozenset)):
        return sorted(obj)
    return str(obj)
