"""The structured log of a training run: one JSON object a line, in
``MODEL.log.jsonl`` next to the model (docs/training.md, "The training log").

nmt.py and language_model/lm.py append an event at each step of a run:

* ``start``: the run began updating (``reloaded``: it resumed a checkpoint;
  ``workers``: the MPI workers; ``machine``: what its arithmetic depends on,
  theano_platform/machine.py);
* ``update`` (every ``dispFreq`` updates): ``cost``, ``updates_per_second``
  and ``words_per_second`` (since the run began, validations included),
  ``recent_updates_per_second`` and ``recent_words_per_second`` (since the
  last update event), ``eta_seconds`` (null when the run has no end in sight);
* ``validation``: ``cost`` (and the language model's ``perplexity``),
  ``best`` (the best so far), ``bad_counter``;
* ``bleu``: ``bleu``, ``best``;
* ``checkpoint``: the files of update ``uidx`` are on disk;
* ``stop``: why the run stops (``reason``, one of ``STOP_REASONS``, and a
  ``message``); ``end``: the model file holds its final parameters
  (``valid_cost``: the final validation cost, or null);
* ``error``: the run ends on an error (``message``: the command's error
  line, without its ``error:``).

Every event has ``event``, ``uidx``, ``epoch`` and ``time`` (seconds since
the epoch).  Its messages name files relative to the run's folder (the
model's), or to the folder the command ran in: a log says nothing of the
machine's folders, and reads the same wherever it is copied.  A resumed run appends to the same file.  Each line is written
by one ``write`` call and flushed, so a reader (demo/demo.py, analysis/
plot_training.py) sees whole lines, except perhaps a last one being written.

An append cut short (a full disk, a kill) never makes the log unreadable: a
run that finds the file without a newline at its end starts on a new line,
and the readers skip a cut line (an event's beginning that is not JSON, at
the log's end or followed by the next run's ``start``), with one warning;
any other line that is not an event is an error that names it.
"""
import json
import math
import os
import re
import sys
import time

from machinery.cli import CommandError
from machinery.output_files import write_error
from machinery.text_io import InputError, check_readable

STOP_REASONS = ('finish_after', 'max_epochs', 'early_stop', 'bleu_early_stop',
                'stop_file', 'signal', 'nan_cost')


class RelativePaths(object):
    """Called with a string: the string with each absolute path under one
    of ``folders`` (the first that holds it) named relative to that folder;
    any other value unchanged."""

    def __init__(self, folders):
        folders = [f.rstrip(os.sep) + os.sep for f in folders if f.rstrip(os.sep)]
        # a folder where a path begins: not inside a longer path or word
        self.pattern = re.compile(r'(?<![\w.~/-])(%s)' % '|'.join(map(re.escape, folders)))

    def __call__(self, value):
        return self.pattern.sub('', value) if isinstance(value, str) else value


def log_path(saveto):
    return saveto + '.log.jsonl'


class TrainingLog(object):
    """Appends the events of a run to ``log_path(saveto)``."""

    def __init__(self, saveto):
        self.path = log_path(saveto)
        self.relative = RelativePaths([os.path.dirname(os.path.abspath(self.path)),
                                       os.getcwd()])
        try:
            self.fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o666)
        except OSError as e:
            raise write_error(self.path, e) from None
        if not _ends_a_line(self.fd):   # the last append was cut short
            self._write_bytes(b'\n')

    def write(self, event, state, **fields):
        """One line: ``event`` at the run's ``state`` (uidx, epoch), with ``fields``."""
        record = {'event': event, 'uidx': state.uidx, 'epoch': state.epoch,
                  'time': round(time.time(), 3)}
        record.update((key, self.relative(_plain(value))) for key, value in fields.items())
        self._write_bytes((json.dumps(record) + '\n').encode('utf-8'))

    def _write_bytes(self, line):
        try:
            written = os.write(self.fd, line)
        except OSError as e:
            raise write_error(self.path, e) from None
        if written != len(line):
            raise CommandError('%s: cannot write: the disk is full' % self.path)

    def close(self):
        os.close(self.fd)


def _ends_a_line(fd):
    """Whether the file is empty or ends with a newline."""
    size = os.fstat(fd).st_size
    return size == 0 or os.pread(fd, 1, size - 1) == b'\n'


def _plain(value):
    """A field's value as JSON has it: numpy scalars as plain numbers,
    non-finite numbers as null."""
    if hasattr(value, 'item'):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def read_training_log(path):
    """The events of a training log, in order (InputError for a missing
    file, or for lines that are not events, naming the file and every such
    line with its cause).  A line cut short by a full disk or a kill is
    skipped, with a warning (LogReader)."""
    check_readable(path)
    reader = LogReader(path)
    events = reader.new_events()
    return events + reader.skip_rest()


def readable_events(path):
    """The events of a training log that can be read (none without the
    file): lines that are not events are passed over, without a word."""
    reader = LogReader(path, quiet=True)
    return reader.new_events() + reader.skip_rest()


def last_training_ended(events):
    """Whether the log's last training process ended (an ``end`` after its
    last ``start``); False without a ``start``: a run still training, or
    one interrupted (killed, or stopped on a signal before its end)."""
    names = [e['event'] for e in events]
    if 'start' not in names:
        return False
    return 'end' in names[len(names) - 1 - names[::-1].index('start'):]


def last_update(path):
    """The highest update number among a log's readable events (0 without)."""
    return max([e['uidx'] for e in readable_events(path)] or [0])


# the fields of the events that hold a figure: a number, or null (a
# non-finite number, as the writer keeps it)
FIGURE_FIELDS = ('cost', 'cost_per_word', 'bleu', 'valid_cost')


class LogReader(object):
    """Reads a training log as it grows: ``new_events()`` returns the events
    of the whole lines written since the last call (a last line without its
    newline is being written: it waits for the next call).  No file yet: no
    events.

    A line cut short by a full disk or a kill (the beginning of an event,
    not JSON) is the log's last line, or the next run, which starts on a
    new line, follows it with its ``start`` event: such a line is skipped
    with one warning on stderr (a cut line at the end of what is there so
    far waits for the next call, or ``skip_rest``).  Any other line that is
    not an event (an event has an ``event`` name, an integer ``uidx``, and
    numbers in its FIGURE_FIELDS) is an InputError that names every such
    line and its cause.  ``quiet``: such lines are passed over without a
    word."""

    def __init__(self, path, quiet=False):
        self.path, self.quiet = path, quiet
        self.offset, self.lines_read = 0, 0

    def new_events(self):
        data = self._unread()
        lines = data[:data.rfind(b'\n') + 1].split(b'\n')[:-1]
        parsed = [_parse_line(raw) for raw in lines]
        while parsed and parsed[-1][0] is _CUT:       # wait for what follows
            parsed.pop()
        self.offset += sum(len(raw) + 1 for raw in lines[:len(parsed)])
        return self._events(parsed, at_the_end=False)

    def skip_rest(self):
        """The end of a finished log: the events of the lines that
        ``new_events`` held back; cut lines at the end are skipped, with a
        warning."""
        data = self._unread()
        self.offset += len(data)
        lines = data.split(b'\n')
        if lines and not lines[-1].strip():
            lines.pop()
        return self._events([_parse_line(raw) for raw in lines], at_the_end=True)

    def _events(self, parsed, at_the_end):
        """The events of ``parsed`` lines ((event or _CUT or None, cause)),
        numbered from lines_read + 1; a run of cut lines is cut short when
        a start event follows it, or the end of the log (``at_the_end``)."""
        events, cut, bad = [], [], []
        pending = []
        first = self.lines_read + 1
        for number, (event, cause) in enumerate(parsed, first):
            if event is _CUT:
                pending.append((number, cause))
                continue
            if pending:
                (cut if event is not None and event['event'] == 'start' else bad).extend(
                    pending)
                pending = []
            if event is None:
                bad.append((number, cause))
            else:
                events.append(event)
        (cut if at_the_end else bad).extend(pending)
        self.lines_read += len(parsed)
        if not self.quiet:
            self._warn_cut([n for n, _ in cut])
            if bad:
                raise InputError(_bad_lines_message(self.path, bad))
        return events

    def _unread(self):
        try:
            with open(self.path, 'rb') as f:
                f.seek(self.offset)
                return f.read()
        except FileNotFoundError:
            return b''
        except OSError as e:
            raise InputError('%s: cannot read: %s' % (self.path, e.strerror))

    def _warn_cut(self, numbers):
        if numbers:
            print('warning: %s: line%s %s cut short (an append interrupted by a full disk '
                  'or a kill): skipped' % (self.path, 's' if len(numbers) > 1 else '',
                                           ', '.join(map(str, numbers))), file=sys.stderr)


_CUT = object()   # a line that begins as an event does and is not JSON


def _parse_line(raw):
    """(event, None) for a line that is an event; (_CUT, 'not JSON') for
    the beginning of one; (None, cause) for another line."""
    try:
        value = json.loads(raw.decode('utf-8'))
    except UnicodeDecodeError:
        return None, 'not UTF-8 text'
    except ValueError:
        return (_CUT if raw.startswith(b'{') else None), 'not JSON'
    if not isinstance(value, dict) or not isinstance(value.get('event'), str):
        return None, 'no event name' if isinstance(value, dict) else 'not a JSON object'
    uidx = value.get('uidx')
    if 'uidx' not in value:
        return None, 'no uidx'
    if isinstance(uidx, bool) or not isinstance(uidx, int):
        return None, 'uidx %s is not an update number' % json.dumps(uidx)
    for field in FIGURE_FIELDS:
        figure = value.get(field)
        if isinstance(figure, bool) or not isinstance(figure, (int, float, type(None))):
            return None, '%s %s is not a number' % (field, json.dumps(figure))
    return value, None


def _bad_lines_message(path, bad):
    """One line naming every line of ``bad`` ((number, cause)), grouped by
    cause, consecutive numbers as ranges."""
    if len(bad) == 1:
        return '%s: line %d is not an event of a training log: %s' % (path, bad[0][0],
                                                                      bad[0][1])
    causes = {}
    for number, cause in bad:
        causes.setdefault(cause, []).append(number)
    return '%s: %d lines are not events of a training log: %s' % (
        path, len(bad), '; '.join('%s: %s' % (_line_numbers(numbers), cause)
                                  for cause, numbers in causes.items()))


def _line_numbers(numbers):
    """'line 3', 'lines 3, 5-9'."""
    ranges = []
    for n in numbers:
        if ranges and ranges[-1][1] == n - 1:
            ranges[-1][1] = n
        else:
            ranges.append([n, n])
    text = ', '.join('%d' % a if a == b else '%d-%d' % (a, b) for a, b in ranges)
    return ('line ' if len(numbers) == 1 else 'lines ') + text
