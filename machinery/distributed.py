"""Several worker processes over MPI: who is who, and what they exchange.

``mpirun -np N python nmt.py ...`` (or ``language_model/lm.py``,
``translate.py``; ``srun`` under Slurm) starts N workers; every one runs the
same program and learns its place from ``world()``: ``rank`` (0 .. N-1),
``size`` (N) and ``is_root`` (rank 0, the worker that writes files and
talks to the user).  Without MPI, ``world()`` is a ``SingleProcess`` whose
exchanges return their argument: mpi4py is imported only when the
environment says that an MPI launcher started this process
(``launcher_size``); started so without mpi4py, the command ends with a
one-line error (docs/distributed.md).

What the workers exchange (docs/distributed.md#how-it-works):

* ``reduce_scatter``: the weighted gradients of each worker's share of the
  batch summed over the workers, each worker receiving the sum over its own
  group of parameters (on the host: each worker sends every other the
  piece it sums, MPI Isend/Irecv);
* ``gather_arrays``: each worker's group of new parameters to every worker
  (MPI Allgatherv);
* ``sum_arrays``: small arrays summed in place over the workers (the cost
  and the gradient's norm of each update; MPI Allreduce);
* ``broadcast_arrays`` / ``broadcast``: rank 0's values (parameters at the
  start, the source sentences of a translation);
* ``gather``: one value per worker, seen by every worker (the stop
  decision of each update, the random streams of a checkpoint, the
  translations);
* ``check_same``: every worker's fingerprint of its options and data files
  against rank 0's; a difference is a ``LaunchError`` that names the option.

Faults: every exchange waits by polling (``_wait``), so that a worker that
died is noticed: a worker on the same machine whose process is gone is a
``WorkerLost`` error naming it (rank, pid, host), and an error of MPI's is
one line too.  A worker that ends with an error ends the whole run
(``finish``: MPI_Abort), so that no worker waits forever for it.
"""
import hashlib
import json
import os
import socket
import sys
import time
import traceback

from machinery.cli import CommandError

# the variables by which launchers tell a process its rank and the number of
# processes: Open MPI's mpirun, MPICH/Intel MPI's Hydra (PMI), Slurm's srun
SIZE_VARIABLES = ('OMPI_COMM_WORLD_SIZE', 'PMI_SIZE', 'PMIX_SIZE', 'SLURM_NTASKS')
LOCAL_SIZE_VARIABLES = ('OMPI_COMM_WORLD_LOCAL_SIZE', 'MPI_LOCALNRANKS',
                        'SLURM_NTASKS_PER_NODE')
# how often a waiting worker looks for the others' processes (seconds)
LIVENESS_INTERVAL = 0.2
# how long a waiting worker polls without pausing (seconds): MPI moves a
# message only while it is polled, so a transfer of the gradients waits for
# each poll; past this, the worker pauses up to a millisecond between polls
# (it is waiting for another worker, not for the transfer)
SPIN_SECONDS = 0.2
# the tag of reduce_scatter's messages
REDUCE_SCATTER_TAG = 17


class LaunchError(CommandError):
    """The workers were not started alike (options, data, MPI itself)."""


class WorkerLost(CommandError):
    """Another worker died or MPI failed: the run cannot go on."""


def mpirun_command(n_workers, command):
    """``command`` as n_workers MPI workers on this machine (Open MPI's
    mpirun), and the environment it needs: as root, Open MPI's consent to
    run; more workers than free cores allowed."""
    import shutil
    mpirun = shutil.which('mpirun')
    if mpirun is None:
        raise LaunchError('%d workers need mpirun (Open MPI: bash setup.sh installs it)'
                          % n_workers)
    env = dict(os.environ, OMPI_MCA_rmaps_base_oversubscribe='1')
    if os.geteuid() == 0:
        env.update(OMPI_ALLOW_RUN_AS_ROOT='1', OMPI_ALLOW_RUN_AS_ROOT_CONFIRM='1')
    return [mpirun, '-np', str(n_workers)] + list(command), env


def split_mpirun(words):
    """(workers, the command) of a command line that mpirun_command made (1 and
    the words themselves for one that has no launcher)."""
    if len(words) > 2 and os.path.basename(words[0]) == 'mpirun' and words[1] == '-np':
        return int(words[2]), list(words[3:])
    return 1, list(words)


def _env_int(names):
    for name in names:
        value = os.environ.get(name, '')
        digits = value.split('(')[0]      # SLURM_NTASKS_PER_NODE may read '2(x3)'
        if digits.isdigit():
            return int(digits)
    return None


def launcher_size():
    """The number of processes an MPI launcher started (None: no launcher).
    Slurm's variables count only under ``srun`` (SLURM_STEP_ID set), not in
    the batch script itself."""
    names = [n for n in SIZE_VARIABLES if n != 'SLURM_NTASKS' or 'SLURM_STEP_ID' in os.environ]
    return _env_int(names)


def local_workers():
    """The number of workers on this machine (1 without a launcher): each
    takes its share of the cores (theano_env)."""
    size = launcher_size()
    if not size or size < 2:
        return 1
    return max(1, _env_int(LOCAL_SIZE_VARIABLES) or 1)


class SingleProcess(object):
    """The one worker of a run without MPI: every exchange is the identity."""
    rank, size, is_root = 0, 1, True

    def sum_arrays(self, buffer, what=None):
        return buffer

    def reduce_scatter(self, buffer, own_sum, offsets, counts, what=None):
        own_sum[...] = buffer
        return own_sum

    def gather_arrays(self, buffer, offsets, counts, what=None):
        return buffer

    def broadcast_arrays(self, arrays, what=None):
        return arrays

    def broadcast(self, value, what=None):
        return value

    def gather(self, value, what=None):
        return [value]

    def check_same(self, fingerprint):
        pass

    def finish(self, status):
        return status


class MPIWorld(object):
    """The workers of an MPI run (mpi4py's COMM_WORLD)."""

    def __init__(self, MPI):
        self.MPI = MPI
        self.comm = MPI.COMM_WORLD
        self.comm.Set_errhandler(MPI.ERRORS_RETURN)
        self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()
        self.is_root = self.rank == 0
        self.host = socket.gethostname()
        self.peers = self._exchange_identities()
        self._last_look = 0.
        self._pieces = None      # reduce_scatter's receive buffers

    def _exchange_identities(self):
        """[(rank, host, pid)] of the other workers (blocking: at start-up,
        before anything can die)."""
        everyone = self.comm.allgather((self.host, os.getpid()))
        return [(r, host, pid) for r, (host, pid) in enumerate(everyone) if r != self.rank]

    # -- waiting ------------------------------------------------------------
    def _wait(self, request, what):
        """Poll ``request`` (or a list of them) until done: for SPIN_SECONDS
        giving up the core between polls only to processes that wait for it
        (``sleep(0)``), then pausing up to 1 ms; every LIVENESS_INTERVAL
        seconds, make sure the other workers on this machine still run."""
        test = ((lambda: self.MPI.Request.Testall(request)) if isinstance(request, list)
                else request.Test)
        try:
            pause, spin_until = 0., time.time() + SPIN_SECONDS
            while not test():
                now = time.time()
                if now < spin_until:
                    time.sleep(0)
                else:
                    time.sleep(pause)
                    pause = min(0.001, pause + 0.0001)
                    now = time.time()
                if now - self._last_look > LIVENESS_INTERVAL:
                    self._last_look = now
                    self._look_for_lost_workers(what)
        except self.MPI.Exception as e:
            raise WorkerLost('worker %d: MPI failed during %s (%s); another worker has '
                             'probably ended' % (self.rank, what, e.Get_error_string()))

    def _look_for_lost_workers(self, what):
        for rank, host, pid in self.peers:
            if host == self.host and not process_runs(pid):
                raise WorkerLost('worker %d (pid %d on %s) ended during %s: the run stops; '
                                 'the last checkpoint is kept' % (rank, pid, host, what))

    # -- exchanges ----------------------------------------------------------
    def sum_arrays(self, buffer, what='a sum'):
        """``buffer`` (one contiguous numpy array) summed over the workers,
        in place."""
        self._wait(self.comm.Iallreduce(self.MPI.IN_PLACE, buffer, op=self.MPI.SUM), what)
        return buffer

    def reduce_scatter(self, buffer, own_sum, offsets, counts,
                       what='the exchange of gradients'):
        """The sum over the workers of this worker's piece of ``buffer``
        (contiguous float32, the same length on every worker; worker r's
        piece: ``counts[r]`` values from ``offsets[r]``) into ``own_sum``.
        Each worker sends every other its piece and adds up its own, in rank
        order (MPI's Ireduce_scatter allocates, and so page-faults, a
        buffer's worth of memory at every call)."""
        pieces = self._received(counts[self.rank])
        requests = []
        for r in range(self.size):
            if r != self.rank and counts[self.rank]:
                requests.append(self.comm.Irecv(pieces[r], source=r, tag=REDUCE_SCATTER_TAG))
            if r != self.rank and counts[r]:
                piece = buffer[offsets[r]:offsets[r] + counts[r]]
                requests.append(self.comm.Isend(piece, dest=r, tag=REDUCE_SCATTER_TAG))
        self._wait(requests, what)
        pieces[self.rank] = buffer[offsets[self.rank]:offsets[self.rank] + counts[self.rank]]
        own_sum[...] = pieces[0]
        for piece in pieces[1:]:
            own_sum += piece
        return own_sum

    def _received(self, count):
        """One float32 array of ``count`` values a worker (kept from call to
        call: no allocation in an update)."""
        import numpy
        if self._pieces is None or self._pieces.shape[1] != count:
            self._pieces = numpy.zeros((self.size, count), dtype='float32')
        return list(self._pieces)

    def gather_arrays(self, buffer, offsets, counts, what='the exchange of parameters'):
        """Every worker's piece of ``buffer`` (contiguous float32: worker
        r's ``counts[r]`` values from ``offsets[r]``) to every worker, in
        place."""
        pieces = [buffer, (counts, offsets), self.MPI.FLOAT]
        self._wait(self.comm.Iallgatherv(self.MPI.IN_PLACE, pieces), what)
        return buffer

    def broadcast_arrays(self, arrays, what='the parameters\' broadcast'):
        """rank 0's values of ``arrays`` (contiguous numpy arrays), in place."""
        for a in arrays:
            self._wait(self.comm.Ibcast(a, root=0), what)
        return arrays

    def broadcast(self, value, what='a broadcast'):
        """rank 0's ``value`` (any picklable object)."""
        return self._objects(value, what, root_only=True)

    def gather(self, value, what='a gather'):
        """Every worker's ``value`` (any picklable object), in rank order,
        on every worker."""
        return self._objects(value, what)

    def _objects(self, value, what, root_only=False):
        """Pickled objects through two non-blocking exchanges: their sizes,
        then the bytes (mpi4py's own object collectives block)."""
        import pickle
        import numpy
        data = numpy.frombuffer(pickle.dumps(value if (self.is_root or not root_only) else None),
                                dtype='uint8')
        sizes = numpy.zeros(self.size, dtype='int64')
        sizes[self.rank] = len(data)
        self.sum_arrays(sizes, what)
        if root_only:
            sizes[1:] = 0
        offsets = numpy.concatenate([[0], numpy.cumsum(sizes)])
        everything = numpy.zeros(int(offsets[-1]), dtype='uint8')
        if sizes[self.rank]:
            everything[offsets[self.rank]:offsets[self.rank + 1]] = data
        self.sum_arrays(everything, what)
        values = [pickle.loads(everything[offsets[r]:offsets[r + 1]].tobytes())
                  for r in range(self.size) if sizes[r]]
        return values[0] if root_only else values

    def check_same(self, fingerprint):
        """LaunchError (on rank 0, which reports it; the others wait for
        rank 0) unless every worker's ``fingerprint`` (a dict: option or
        file -> value) is rank 0's."""
        everyone = self.gather(fingerprint, 'the check of the workers\' options')
        if not self.is_root:
            return
        for rank, theirs in enumerate(everyone[1:], 1):
            for key in sorted(set(fingerprint) | set(theirs)):
                if fingerprint.get(key) != theirs.get(key):
                    raise LaunchError('worker %d was started unlike worker 0: %s differs '
                                      '(%s against %s); every worker needs the same '
                                      'options and data' % (rank, key, _short(theirs.get(key)),
                                                            _short(fingerprint.get(key))))

    def finish(self, status):
        """The end of this worker with exit status ``status``: an error ends
        every worker (MPI_Abort), so that none waits for this one."""
        if status not in (0, 130, 143):
            sys.stdout.flush()
            sys.stderr.flush()
            self.comm.Abort(status)
        return status


def _short(value, width=60):
    text = json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= width else text[:width - 3] + '...'


def process_runs(pid):
    """Whether process ``pid`` runs (a zombie does not)."""
    try:
        with open('/proc/%d/stat' % pid) as f:
            return f.read().rsplit(')', 1)[1].split()[0] not in ('Z', 'X')
    except (OSError, IndexError):
        try:
            os.kill(pid, 0)
            return True
        except ProcessLookupError:
            return False
        except PermissionError:
            return True


_WORLD = None


def world():
    """This process's place among the workers (SingleProcess without MPI)."""
    global _WORLD
    if _WORLD is None:
        size = launcher_size()
        if not size or size < 2:
            _WORLD = SingleProcess()
        else:
            _WORLD = MPIWorld(_import_mpi(size))
    return _WORLD


def _import_mpi(size):
    try:
        from mpi4py import MPI
    except (ImportError, RuntimeError, OSError) as e:   # no mpi4py, or no libmpi it can load
        raise LaunchError('started by an MPI launcher as one of %d workers, but mpi4py '
                          'cannot be imported (%s): bash setup.sh installs it, or start '
                          'one process without mpirun' % (size, e))
    return MPI


def quiet_workers():
    """Only rank 0 prints on stdout (the others' progress is rank 0's)."""
    if world().rank > 0:
        sys.stdout = open(os.devnull, 'w')


def run(action):
    """cli.run for the commands that may run as several workers: the world
    first (a launch error is the command's one-line error), and a failing
    worker ends them all, a fault of the program's own (its traceback
    printed) too: the others would wait for it, and MPI's exit for them."""
    from machinery import cli
    try:
        status = cli.run(lambda: (world(), quiet_workers(), action()))
    except Exception:
        if _WORLD is None or _WORLD.size == 1:
            raise
        traceback.print_exc()
        status = 1
    if _WORLD is None:
        return status
    return _WORLD.finish(status)


# --------------------------------------------------------------------------
# fingerprints of a launch

def file_digest(path, edge=1 << 20):
    """Size and SHA-1 of the first and last MiB of a file: quick at any size,
    and different for two data files that differ in more than their middle."""
    h = hashlib.sha1()
    size = os.path.getsize(path)
    with open(path, 'rb') as f:
        h.update(f.read(edge))
        if size > edge:
            f.seek(max(edge, size - edge))
            h.update(f.read())
    return '%d bytes, sha1 %s' % (size, h.hexdigest()[:12])


def fingerprint(options):
    """{option: value} of a run's options, and {FILE: digest} of every file
    that an option names (data, dictionaries)."""
    prints = {}
    for key, value in sorted(options.items()):
        prints['--' + key] = value if isinstance(value, (int, float, str, bool, type(None),
                                                          list, tuple)) else repr(value)
        for item in (value if isinstance(value, (list, tuple)) else [value]):
            if isinstance(item, str) and item and os.path.isfile(item):
                prints['file ' + item] = file_digest(item)
    return prints
