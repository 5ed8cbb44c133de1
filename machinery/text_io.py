"""Reading the project's text inputs, and the one error for bad input.

Every entry point reads user files through these functions and reports
:class:`InputError` as one line ``error: <message>`` with exit status 1.
The messages name the file, and the line where there is one.
"""
import gzip
import os
import sys


class InputError(Exception):
    """Bad user input: the message is one line and names the file (and line)."""


def one_line(error):
    """An exception's text squeezed onto one line."""
    return ' '.join(str(error).split()) or type(error).__name__


def check_readable(path, allow_empty=True):
    """Raise InputError unless ``path`` is an existing, readable regular file."""
    path = os.fspath(path)
    if not os.path.exists(path):
        raise InputError('%s: no such file' % path)
    if os.path.isdir(path):
        raise InputError('%s: is a directory, not a file' % path)
    if not os.access(path, os.R_OK):
        raise InputError('%s: cannot read: permission denied' % path)
    if not allow_empty and os.path.getsize(path) == 0:
        raise InputError('%s: file is empty' % path)


def open_binary(path):
    """A binary file object; ``.gz`` files are decompressed on the fly."""
    check_readable(path)
    try:
        return gzip.open(path, 'rb') if path.endswith('.gz') else open(path, 'rb')
    except OSError as e:
        raise InputError('%s: cannot read: %s' % (path, e.strerror or one_line(e)))


def decode_line(raw, path, number):
    """A line of bytes as text without its line ending; number is 1-based."""
    try:
        text = raw.decode('utf-8')
    except UnicodeDecodeError as e:
        raise InputError('%s: line %d is not valid UTF-8 text (byte %d of the line)'
                         % (path, number, e.start + 1))
    return text.rstrip('\n').rstrip('\r')


def iter_lines(path):
    """Yield the lines of a UTF-8 text file (``.gz`` too) one at a time."""
    with open_binary(path) as f:
        try:
            for number, raw in enumerate(f, 1):
                yield decode_line(raw, path, number)
        except (OSError, EOFError) as e:
            raise InputError('%s: cannot read: %s' % (path, one_line(e)))


def count_lines(path):
    """The number of lines of a text file (``.gz`` too): its newlines, and a
    last line without one."""
    count, last = 0, b'\n'
    with open_binary(path) as f:
        try:
            for chunk in iter(lambda: f.read(1 << 20), b''):
                count += chunk.count(b'\n')
                last = chunk[-1:]
        except (OSError, EOFError) as e:
            raise InputError('%s: cannot read: %s' % (path, one_line(e)))
    return count + (last != b'\n')


def read_lines(path, allow_empty=False, what='text'):
    """All lines of a UTF-8 file as a list ('-' reads standard input).

    A file with no lines is an InputError unless ``allow_empty``; ``what``
    names the content in that message ('source sentences', say).
    """
    if path == '-':
        name, raw = '<stdin>', sys.stdin.buffer.read()
        chunks = raw.split(b'\n')
        if chunks and chunks[-1] == b'':
            chunks.pop()
        lines = [decode_line(c, name, i) for i, c in enumerate(chunks, 1)]
    else:
        name, lines = path, list(iter_lines(path))
    if not lines and not allow_empty:
        raise InputError('%s: empty file, no %s in it' % (name, what))
    return lines
