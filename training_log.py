"""The structured log of a training run: one JSON object a line, in
``MODEL.log.jsonl`` next to the model (docs/training.md, "The training log").

nmt.py and language_model/lm.py append an event at each step of a run:

* ``start``: the run began updating (``reloaded``: it resumed a checkpoint);
* ``update`` (every ``dispFreq`` updates): ``cost``, ``updates_per_second``,
  ``words_per_second``, ``eta_seconds`` (null when the run has no end in sight);
* ``validation``: ``cost`` (and the language model's ``perplexity``),
  ``best`` (the best so far), ``bad_counter``;
* ``bleu``: ``bleu``, ``best``;
* ``checkpoint``: the files of update ``uidx`` are on disk;
* ``stop``: why the run stops (``reason``, one of ``STOP_REASONS``, and a
  ``message``); ``end``: the model file holds its final parameters
  (``valid_cost``: the final validation cost, or null).

Every event has ``event``, ``uidx``, ``epoch`` and ``time`` (seconds since
the epoch).  A resumed run appends to the same file.  Each line is written
by one ``write`` call and flushed, so a reader (demo/demo.py, analysis/
plot_training.py) sees whole lines, except perhaps a last one being written.
"""
import json
import math
import os
import time

from cli import CommandError
from model_io import write_error
from text_io import InputError, check_readable, decode_line

STOP_REASONS = ('finish_after', 'max_epochs', 'early_stop', 'bleu_early_stop',
                'stop_file', 'signal', 'nan_cost')


def log_path(saveto):
    return saveto + '.log.jsonl'


class TrainingLog(object):
    """Appends the events of a run to ``log_path(saveto)``."""

    def __init__(self, saveto):
        self.path = log_path(saveto)
        try:
            self.fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
        except OSError as e:
            raise write_error(self.path, e) from None

    def write(self, event, state, **fields):
        """One line: ``event`` at the run's ``state`` (uidx, epoch), with ``fields``."""
        record = {'event': event, 'uidx': state.uidx, 'epoch': state.epoch,
                  'time': round(time.time(), 3)}
        record.update((key, _plain(value)) for key, value in fields.items())
        line = (json.dumps(record) + '\n').encode('utf-8')
        try:
            written = os.write(self.fd, line)
        except OSError as e:
            raise write_error(self.path, e) from None
        if written != len(line):
            raise CommandError('%s: cannot write: the disk is full' % self.path)

    def close(self):
        os.close(self.fd)


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
    file, or a line that is not an event, naming the file and the line)."""
    check_readable(path)
    return LogReader(path).new_events()


class LogReader(object):
    """Reads a training log as it grows: ``new_events()`` returns the events
    of the whole lines written since the last call (a last line without its
    newline is being written: it waits for the next call).  No file yet: no
    events."""

    def __init__(self, path):
        self.path, self.offset, self.lines_read = path, 0, 0

    def new_events(self):
        try:
            with open(self.path, 'rb') as f:
                f.seek(self.offset)
                data = f.read()
        except FileNotFoundError:
            return []
        except OSError as e:
            raise InputError('%s: cannot read: %s' % (self.path, e.strerror))
        whole = data[:data.rfind(b'\n') + 1]
        self.offset += len(whole)
        return [self._event(raw) for raw in whole.split(b'\n')[:-1]]

    def _event(self, raw):
        self.lines_read += 1
        try:
            event = json.loads(decode_line(raw, self.path, self.lines_read))
        except ValueError:
            event = None
        if not isinstance(event, dict) or 'event' not in event:
            raise InputError('%s: line %d is not an event of a training log'
                             % (self.path, self.lines_read))
        return event
