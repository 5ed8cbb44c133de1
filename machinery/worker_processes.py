"""Worker processes that end with their command: translate.py's decoders and
pipeline/preprocess.py's tokenisers (``-p``, ``--jobs``).

    with WorkerPool(start, processes, 'translation') as pool:
        for index, result in pool.map_unordered(items):
            ...

Each of the forked processes calls ``start()`` once (it builds what the work
needs: samplers, a tokeniser) and applies the function that it returns to
the items it takes.  No command hangs on its workers (docs/training.md,
"Faults"):

* Ctrl-C (SIGINT, which a terminal sends to every process of the command):
  the workers ignore it; the parent stops them, and ``cli.run`` prints
  ``interrupted: Ctrl-C (SIGINT)`` (status 130);
* SIGTERM to the parent: the same, ``interrupted: SIGTERM`` (status 143);
* a worker that dies (the out-of-memory killer's SIGKILL): the parent
  learns it from SIGCHLD at once, even inside a blocking read, stops the
  others and fails with one line naming the worker and its signal;
* a worker whose work raises: one line, the worker's error;
* the parent killed by SIGKILL: the kernel ends the workers (PDEATHSIG);
* a signal that lands while the parent hands work to the workers waits
  until the hand-over is done (DeferredSignals).

The commands write their outputs when every result is in, through
output_files' atomic writes: a stopped command leaves no output.
"""
import contextlib
import ctypes
import itertools
import multiprocessing
import os
import queue
import signal
import sys
import traceback

from machinery import cli
from machinery.text_io import InputError

# the signals that the parent handles while the workers start (they are
# blocked meanwhile, so that a new worker never runs the parent's handlers)
PARENT_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGCHLD)
PR_SET_PDEATHSIG = 1
POLL_SECONDS = 1.0   # how often a waiting parent also looks at its workers


class DeferredSignals(object):
    """The Python handlers of ``signums``, wrapped so that inside ``held()``
    a signal is only noted: its handler runs as the block ends.

    multiprocessing's Queue.put takes its lock with a ``with`` statement;
    a handler that raises between the lock's acquire and the ``with``
    taking hold leaves the lock taken, and the queue's close() (at the
    latest at exit) then waits on it for ever: Ctrl-C at that moment hung
    ``preprocess.py --jobs 2`` in about one try in 17."""

    def __init__(self, signums):
        self.signums = signums
        self.previous = {}
        self.noted = []
        self.holding = False

    def install(self):
        """Wrap the handlers in place now (a signal ignored stays ignored)."""
        for signum in self.signums:
            handler = signal.getsignal(signum)
            if callable(handler):
                self.previous[signum] = signal.signal(signum, self._wrap(handler))

    def _wrap(self, handler):
        def on_signal(signum, frame):
            if self.holding:
                self.noted.append((handler, signum))
            else:
                handler(signum, frame)
        return on_signal

    @contextlib.contextmanager
    def held(self):
        self.holding = True
        try:
            yield
        finally:
            self.holding = False
            noted, self.noted = self.noted, []
            for handler, signum in noted:
                handler(signum, None)

    def uninstall(self):
        """The handlers back as they were; the (handler, signum) of each
        signal noted and not yet handled."""
        for signum, handler in self.previous.items():
            signal.signal(signum, handler)
        self.previous = {}
        noted, self.noted = self.noted, []
        return noted


class WorkerPool(object):
    """``processes`` forked workers of a command, stopped when the ``with``
    block ends, however it ends; ``what`` names them in messages."""

    def __init__(self, start, processes, what):
        self.what = what
        context = multiprocessing.get_context('fork')
        self.jobs, self.results = context.Queue(), context.Queue()
        self.workers = [context.Process(target=_serve, daemon=True,
                                        args=(start, self.jobs, self.results, os.getpid()))
                        for _ in range(processes)]
        self.previous = signal.SIG_DFL
        self.stack = contextlib.ExitStack()
        self.signals = DeferredSignals(PARENT_SIGNALS)

    def __enter__(self):
        self.stack.enter_context(cli.sigterm_interrupts())
        self.previous = signal.signal(signal.SIGCHLD, self._child_ended)
        self.signals.install()
        try:
            signal.pthread_sigmask(signal.SIG_BLOCK, PARENT_SIGNALS)
            try:
                for worker in self.workers:
                    worker.start()
            finally:
                signal.pthread_sigmask(signal.SIG_UNBLOCK, PARENT_SIGNALS)
        except BaseException:
            self.__exit__(*sys.exc_info())
            raise
        return self

    def __exit__(self, *exc):
        self.signals.holding = True     # nothing interrupts the stopping
        try:
            self._stop_workers()
            self.jobs.cancel_join_thread()   # its feeder may wait on a full pipe
            self.jobs.close()
            self.results.close()
        finally:
            noted = self.signals.uninstall()
            signal.signal(signal.SIGCHLD, self.previous)
            self.stack.close()
        if exc[0] is None:      # Ctrl-C or SIGTERM while stopping: handled now
            for handler, signum in noted:
                if signum != signal.SIGCHLD:     # the workers we stopped
                    handler(signum, None)

    def map_unordered(self, items, chunksize=1):
        """(index, result) of every item, in the order the workers finish
        them (at most two chunks a worker are on their way at a time, so a
        long input is read as it goes)."""
        items = iter(items)
        chunks = enumerate(iter(lambda: list(itertools.islice(items, chunksize)), []))
        on_their_way = sum(self._send(chunks) for _ in range(2 * len(self.workers)))
        while on_their_way:
            start, results = self._receive()
            on_their_way += self._send(chunks) - 1
            for offset, result in enumerate(results):
                yield start * chunksize + offset, result

    def imap(self, items, chunksize=1):
        """The result of every item, in their order."""
        waiting, expected = {}, 0
        for index, result in self.map_unordered(items, chunksize):
            waiting[index] = result
            while expected in waiting:
                yield waiting.pop(expected)
                expected += 1

    def _send(self, chunks):
        """1 if a chunk went to the workers, 0 when there are none left."""
        chunk = next(chunks, None)
        if chunk is None:
            return 0
        with self.signals.held():
            self.jobs.put(chunk)
        return 1

    def _receive(self):
        while True:
            cli.raise_if_interrupted()
            try:
                start, results = self.results.get(timeout=POLL_SECONDS)
            except queue.Empty:
                self._check_workers()
                continue
            if start is None:
                raise cli.CommandError('%s worker failed: %s' % (self.what, results))
            return start, results

    def _child_ended(self, signum, frame):
        self._check_workers()

    def _check_workers(self):
        """CommandError naming the first worker that died."""
        for number, worker in enumerate(self.workers, 1):
            code = worker.exitcode
            if code:
                raise cli.CommandError('%s worker %d of %d (process %d) %s: stopped, '
                                       'nothing written'
                                       % (self.what, number, len(self.workers), worker.pid,
                                          _death(code)))

    def _stop_workers(self):
        started = [w for w in self.workers if w.pid is not None]
        for worker in started:
            if worker.exitcode is None:
                worker.terminate()
        for worker in started:
            worker.join(timeout=5)
            if worker.exitcode is None:
                worker.kill()
                worker.join()


def _death(exitcode):
    """How a worker ended, from its exit code (-N: killed by signal N)."""
    if exitcode > 0:
        return 'ended with status %d' % exitcode
    name = signal.Signals(-exitcode).name
    if -exitcode == signal.SIGKILL:
        return 'was killed by SIGKILL (the out-of-memory killer sends it: fewer ' \
               'workers need less memory)'
    return 'was killed by %s' % name


def _serve(start, jobs, results, parent):
    """A worker: the parent's signals left to the parent, then the items
    it takes, until the parent stops it."""
    _become_worker(parent)
    try:
        work = start()
        while True:
            index, chunk = jobs.get()
            results.put((index, [work(item) for item in chunk]))
    except Exception as e:
        results.put((None, _error_line(e)))


def _become_worker(parent):
    signal.signal(signal.SIGINT, signal.SIG_IGN)     # the parent stops us
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    _die_with_parent()
    signal.pthread_sigmask(signal.SIG_UNBLOCK, PARENT_SIGNALS)
    if os.getppid() != parent:    # it died before we asked
        os._exit(1)


def _die_with_parent():
    """SIGKILL to this process when its parent ends (Linux' prctl)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass


def _error_line(error):
    """The error of a worker's work in one line; an unexpected one with
    where it was raised."""
    if isinstance(error, (InputError, cli.CommandError)):
        return cli.error_message(error)
    where = traceback.extract_tb(error.__traceback__)[-1]
    return '%s (%s, line %d)' % (cli.error_message(error), os.path.basename(where.filename),
                                 where.lineno)
