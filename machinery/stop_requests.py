"""Requests that a training run stop: SIGTERM, SIGINT, or the stop file.

Schedulers (Slurm, PBS, Kubernetes) send SIGTERM, then kill the job after a
grace period; Ctrl-C sends SIGINT; ``touch MODEL.stop`` (what demo/demo.py
does) asks a run to stop as if it had reached ``--finish_after``.  The
training loop asks ``reason()`` once per update, after the update and what
follows it (validation, checkpoint): the signal handlers only record the
signal, so no update and no save is ever cut in the middle, and a second
signal while the checkpoint is written changes nothing.  (Before the loop
installs its handlers, while the run loads and compiles, a signal ends the
command at once: there is nothing to save yet.)

With several workers (one process per worker, each with its own
``StopRequests``), the decision is a value that the workers combine once per
update (any worker's request stops all of them after the same update), so
that they agree on the update whose checkpoint is written
(docs/training.md, "Stopping a run"; ``TrainingLoop._agreed_reason``).
Rank 0 alone watches the stop file; every worker handles the signals.
"""
import os
import signal

SIGNALS = (signal.SIGTERM, signal.SIGINT)


def stop_path(saveto):
    return saveto + '.stop'


def signal_name(signum):
    return signal.Signals(signum).name


class StopRequests(object):
    """The stop requests of the run that writes ``saveto``."""

    def __init__(self, saveto, watch_file=True):
        self.stop_file = stop_path(saveto)
        self.watch_file = watch_file
        self.signum = None
        self.previous = {}

    def install(self):
        """Handle SIGTERM and SIGINT from now on; a stop file left by an
        earlier run is removed."""
        if self.watch_file and os.path.exists(self.stop_file):
            os.remove(self.stop_file)
        for signum in SIGNALS:
            self.previous[signum] = signal.signal(signum, self._handle)

    def restore(self):
        """The handlers as they were before ``install``."""
        for signum, handler in self.previous.items():
            signal.signal(signum, handler)
        self.previous = {}

    def _handle(self, signum, frame):
        if self.signum is None:
            self.signum = signum
            # not print(): the handler may run inside a print of the loop
            os.write(2, ('%s: the run stops after this update, with a checkpoint\n'
                         % signal_name(signum)).encode())

    def reason(self):
        """'signal', 'stop_file' or None."""
        if self.signum is not None:
            return 'signal'
        if self.watch_file and os.path.exists(self.stop_file):
            os.remove(self.stop_file)
            return 'stop_file'
        return None
