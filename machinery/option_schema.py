"""Each option of a training command declared once, and all else derived.

A command (nmt.py, language_model/lm.py) describes every option of its
``train()`` as an ``Option``: its name (dl4mt's keyword argument), default,
help line, ``--help`` group, role, and where it has them the values it takes,
the values it may not take and the other options its value implies.  The
declarations live beside the code that reads the option (the model's in
nmt_model.py, the training loop's in training_loop.py, ...); an
``OptionSchema`` of a command's declarations gives:

* ``defaults()``, ``fill(given)``: train()'s keyword arguments completed;
* ``check_known``, ``check_values``, ``check_required``: one-line InputErrors
  naming the option;
* ``add_flags(parser)``: the command line, one ``--FLAG`` an option (a
  switch for an option that is off by default, else a value of the
  default's type), in ``GROUPS``;
* ``names(role, ...)``: the role tables: what a reloaded model keeps
  (ARCHITECTURE), what a resumed run may change without a warning
  (SCHEDULE), what shapes no compiled graph (``shapes_graphs``: the function
  cache's key), which options name input files (``input_files``).

The roles (one an option):

* ARCHITECTURE: the model's shape; a reloaded model keeps its saved value;
* GRAPH: shapes the training graph (cost, optimizer, dropout, initialisation);
* DECODING: how the model decodes (its sampler; translate.py may choose
  another);
* RUN: steers a run and shapes no graph (data, validation, seeds);
* SCHEDULE: how long a run goes, what it prints, where it saves: a resumed
  run may change it without a warning.
"""
import argparse
from collections import OrderedDict
from dataclasses import dataclass, replace
from typing import Any, Callable, Optional

from machinery.text_io import InputError

ARCHITECTURE, GRAPH, DECODING, RUN, SCHEDULE = ROLES = (
    'architecture', 'graph', 'decoding', 'run', 'schedule')
# --help's groups, in their order
GROUPS = ('model', 'data', 'optimisation', 'validation and early stopping',
          'saving, resuming and display')
# what an option's value names: input files, or dictionaries (input files
# whose contents a model records: training_options.record_dictionaries)
INPUTS, DICTIONARIES = 'inputs', 'dictionaries'


@dataclass(frozen=True)
class Option(object):
    """One option: ``name`` (the keyword argument of train() and the key of
    the model's options), ``default``, ``help`` (what it does; a value
    option's line gets its default), ``group`` (GROUPS), ``role`` (ROLES).

    choices: the values it takes (a single one: no flag); value_type: of a
    value on the command line (the default's type, str for None); flag: its
    name on the command line (default: the option's); nargs, metavar,
    required: argparse's (required: on the command line, and not empty in
    train()); valid, requirement: a test of a value and what it says ('at
    least 0 and below 1'); implies: value -> {option: value} that a value
    sets where they are not given; files: INPUTS or DICTIONARIES where the
    value names input files."""
    name: str
    default: Any
    help: str
    group: str
    role: str
    choices: Optional[tuple] = None
    value_type: Optional[type] = None
    flag: Optional[str] = None
    nargs: Optional[int] = None
    metavar: Any = None
    required: bool = False
    valid: Optional[Callable[[Any], bool]] = None
    requirement: str = ''
    implies: Optional[Callable[[Any], dict]] = None
    files: Optional[str] = None

    def __post_init__(self):
        if self.group not in GROUPS or self.role not in ROLES:
            raise ValueError('option %s: group %r, role %r' % (self.name, self.group,
                                                                self.role))

    def but(self, **changes):
        """This option with some of its fields changed (another command's
        default, values or help of a shared option)."""
        return replace(self, **changes)

    @property
    def flag_name(self):
        return '--' + (self.flag or self.name)

    def has_flag(self):
        """A value of its own on the command line: not an option with a
        single value (kept in the model's options for the original code)."""
        return self.choices is None or len(self.choices) > 1


class OptionSchema(object):
    """The options of one command, in --help's order within each group;
    ``fixed``: keys every filled set of options has with these values (the
    kind of model); ``saved_order``: the order of the first keys of a
    filled set (the model files' order, which the original code wrote),
    the other options following in declaration order."""

    def __init__(self, options, fixed=None, saved_order=()):
        self.options = OrderedDict()
        for option in options:
            if option.name in self.options:
                raise ValueError('option %s declared twice' % option.name)
            self.options[option.name] = option
        self.fixed = dict(fixed or {})
        unknown = [name for name in saved_order if name not in self.options]
        if unknown or len(set(saved_order)) != len(saved_order):
            raise ValueError('saved_order: unknown or repeated %s' % unknown)
        self.order = tuple(saved_order) + tuple(name for name in self.options
                                                if name not in saved_order)

    def __getitem__(self, name):
        return self.options[name]

    def __contains__(self, name):
        return name in self.options

    def defaults(self):
        """name -> default, in the saved order."""
        return OrderedDict((name, self.options[name].default) for name in self.order)

    def names(self, *roles):
        """The options of these roles, in declaration order."""
        return tuple(name for name, o in self.options.items() if o.role in roles)

    def fill(self, given):
        """The defaults, updated with the options ``given``, then what their
        values imply where it is not given, and the fixed keys."""
        full = self.defaults()
        full.update(given)
        for option in self.options.values():
            if option.implies is not None:
                for key, value in option.implies(full[option.name]).items():
                    if key not in given:
                        full[key] = value
        full.update(self.fixed)
        return full

    def check_known(self, given):
        unknown = set(given) - set(self.options)
        if unknown:
            raise InputError('unknown option(s): %s' % ', '.join(sorted(unknown)))

    def check_values(self, options, names=None):
        """InputError naming the first option (of ``names``: default all)
        whose value is not one of its choices or fails its test."""
        for name in names or self.options:
            if name not in options:
                continue
            option, value = self.options[name], options[name]
            if option.choices is not None and value not in option.choices:
                raise InputError('%s must be one of %s, not %r'
                                 % (option.flag_name, ', '.join(option.choices), value))
            if option.valid is not None and not option.valid(value):
                raise InputError('%s must be %s, not %r'
                                 % (option.flag_name, option.requirement, value))

    def check_required(self, options):
        """InputError naming the first required option left empty."""
        for option in self.options.values():
            if option.required and not options.get(option.name):
                raise InputError('%s is required' % option.flag_name)

    def shapes_graphs(self, key):
        """Whether an option (or another key of a model's options) may shape
        a compiled graph: all but the RUN and SCHEDULE options and the names
        of files."""
        option = self.options.get(key)
        return option is None or (option.role not in (RUN, SCHEDULE) and option.files is None)

    def input_files(self, options):
        """The paths that ``options`` name as input files."""
        paths = []
        for name, option in self.options.items():
            value = options.get(name)
            if option.files is not None:
                paths.extend([value] if isinstance(value, str) else value or [])
        return paths

    def names_of_files(self, kind):
        return tuple(name for name, o in self.options.items() if o.files == kind)

    def add_flags(self, parser):
        """A flag for every option that has one, in its group of --help
        (argument groups added to ``parser`` in GROUPS' order, returned as
        {name: group}).  No flag has a default: what ``parse_args`` returns
        is what was given."""
        groups = OrderedDict((name, parser.add_argument_group(name)) for name in GROUPS)
        for option in self.options.values():
            if option.has_flag():
                groups[option.group].add_argument(option.flag_name, dest=option.name,
                                                  default=argparse.SUPPRESS,
                                                  **_argument(option))
        return groups


def _argument(option):
    """argparse's keyword arguments of an option's flag."""
    if isinstance(option.default, bool):   # a switch that turns the default over
        return dict(action='store_false' if option.default else 'store_true',
                    help=option.help)
    text = option.help
    if option.default is not None and not option.required:
        text = '%s (default: %s)' % (text, option.default)
    value_type = option.value_type or (str if option.default is None else type(option.default))
    return dict(type=value_type, choices=option.choices, nargs=option.nargs,
                metavar=option.metavar, required=option.required, help=text)
