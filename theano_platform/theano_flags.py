"""Reading and editing a THEANO_FLAGS string (no imports, no side effects:
usable before theano_env and theano are imported).

THEANO_FLAGS is ``name=value`` items separated by commas; a dotted name and
its ``__`` spelling are the same flag (``gpuarray.preallocate``,
``gpuarray__preallocate``), and the last item of a name wins.
"""


def _key(name):
    return name.strip().replace('.', '__')


def parse(flags):
    """{name: value} of a THEANO_FLAGS string (names with '__'; the last wins)."""
    parsed = {}
    for part in flags.split(','):
        name, _, value = part.partition('=')
        if name.strip():
            parsed[_key(name)] = value.strip()
    return parsed


def value(flags, name):
    """The flag's value in ``flags`` ('' when it is not there)."""
    return parse(flags).get(_key(name), '')


def given(flags, name):
    return _key(name) in parse(flags)


def missing(flags, defaults):
    """The ``name=value`` items of ``defaults`` whose flag ``flags`` does not give."""
    return ['%s=%s' % (name, v) for name, v in defaults if not given(flags, name)]


def with_defaults(flags, defaults):
    """``flags`` with each ``(name, value)`` of ``defaults`` added where
    ``flags`` does not give that flag (the given ones win)."""
    return ','.join([f for f in [flags] + missing(flags, defaults) if f])


def with_values(flags, values):
    """``flags`` with each ``(name, value)`` of ``values`` set, replacing
    what ``flags`` gives for that flag."""
    names = {_key(name) for name, _ in values}
    kept = [f for f in flags.split(',') if f.strip() and _key(f.partition('=')[0]) not in names]
    return ','.join(kept + ['%s=%s' % (name, v) for name, v in values])
