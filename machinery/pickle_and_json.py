"""Reading the pickles that Python 2 or Python 3 wrote (the original
dl4mt-tutorial code's dictionaries and options) and JSON files, with one-line
errors naming the file (``InputError``)."""
import collections
import json
import pickle

from machinery.text_io import InputError, check_readable, one_line

# Python 2 can read pickle protocols 0 to 2.
PY2_PROTOCOL = 2


def py2_str(value):
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
        return py2_str(obj)
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
                         % (path, type(e).__name__, one_line(e)))
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
        raise InputError('%s: not valid JSON (%s)' % (path, one_line(e)))
