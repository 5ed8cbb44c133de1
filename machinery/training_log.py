"""The structured log of a training run: one JSON object a line, in
``MODEL.log.jsonl`` next to the model (docs/training.md, "The training log").

nmt.py and language_model/lm.py append an event at each step of a run:

* ``start``: the run began updating (``reloaded``: it resumed a checkpoint;
  ``workers``: the MPI workers; ``machine``: what its arithmetic depends on,
  machinery/machine.py);
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
and the readers skip a cut line (an event's beginning that is not JSON),
with one warning.
"""
import json
import math
import os
import re
import sys
import time

from machinery.cli import CommandError
from machinery.model_io import write_error
from machinery.text_io import InputError, check_readable, decode_line

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
    file, or a line that is not an event, naming the file and the line).
    A last line without its newline was cut short: skipped, with a warning."""
    check_readable(path)
    reader = LogReader(path)
    events = reader.new_events()
    reader.skip_rest()
    return events


class LogReader(object):
    """Reads a training log as it grows: ``new_events()`` returns the events
    of the whole lines written since the last call (a last line without its
    newline is being written: it waits for the next call).  No file yet: no
    events.  A line cut short by a full disk or a kill (the beginning of an
    event, not JSON) is skipped, with one warning line on stderr."""

    def __init__(self, path):
        self.path, self.offset, self.lines_read = path, 0, 0

    def new_events(self):
        data = self._unread()
        whole = data[:data.rfind(b'\n') + 1]
        self.offset += len(whole)
        events, cut = [], []
        for raw in whole.split(b'\n')[:-1]:
            event = self._event(raw)
            if event is None:
                cut.append(self.lines_read)
            else:
                events.append(event)
        self._warn_cut(cut)
        return events

    def skip_rest(self):
        """The end of a finished log: a last line without its newline was
        cut short; skip it, with a warning."""
        rest = self._unread()
        if rest.strip():
            self.offset += len(rest)
            self.lines_read += 1
            self._warn_cut([self.lines_read])

    def _unread(self):
        try:
            with open(self.path, 'rb') as f:
                f.seek(self.offset)
                return f.read()
        except FileNotFoundError:
            return b''
        except OSError as e:
            raise InputError('%s: cannot read: %s' % (self.path, e.strerror))

    def _event(self, raw):
        """The event of a line, None for a line cut short."""
        self.lines_read += 1
        try:
            event = json.loads(decode_line(raw, self.path, self.lines_read))
        except ValueError:
            if raw.startswith(b'{'):
                return None
            event = None
        if not isinstance(event, dict) or 'event' not in event:
            raise InputError('%s: line %d is not an event of a training log'
                             % (self.path, self.lines_read))
        return event

    def _warn_cut(self, numbers):
        if numbers:
            print('warning: %s: line%s %s cut short (an append interrupted by a full disk '
                  'or a kill): skipped' % (self.path, 's' if len(numbers) > 1 else '',
                                           ', '.join(map(str, numbers))), file=sys.stderr)
