"""One training run per model path.

A run holds an exclusive ``flock`` on ``MODEL.lock`` (which holds its process
id) from before it loads the data until it ends; a second run on the same
``--model`` stops at once with an error naming the process that holds it.
The run removes the file when it ends (also when it stops on an error).  The
kernel drops the lock when the process ends, however it ends, so a lock file
left by a killed run (``kill -9``, a crash, a node that rebooted) blocks
nothing: the next run locks it.  (A run that locked a file which another
removed in between, checks that its file is still the one of that name, and
locks again.)  ``flock`` works on local file systems and on NFS (Linux
emulates it with NFS locks).

Taking the lock is also the first write of the run into the model's folder:
a folder that does not exist or cannot be written, or a full disk, ends the
run there, before anything is compiled.
"""
import errno
import fcntl
import os
import weakref

from machinery.cli import CommandError
from machinery.output_files import remove_if_there, temporaries_of, write_error
from machinery.training_state import checkpoint_names


def lock_path(saveto):
    return saveto + '.lock'


class ModelLock(object):
    """The lock of the run that writes ``saveto``, held until ``release()``
    (or until the object is collected, or the process ends)."""

    def __init__(self, saveto):
        self.saveto, self.path = saveto, lock_path(saveto)
        fd = self._lock()
        while not _same_file(fd, self.path):   # removed by the run that held it
            os.close(fd)
            fd = self._lock()
        _write_pid(fd, saveto, self.path)
        self.release = weakref.finalize(self, _unlock, fd, self.path)
        remove_stale_temporaries(saveto)

    def _lock(self):
        """A descriptor of the lock file, locked."""
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
        except OSError as e:
            raise write_error(self.saveto, e) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            holder = _holder(fd)
            os.close(fd)
            if e.errno not in (errno.EWOULDBLOCK, errno.EACCES):
                raise write_error(self.saveto, e) from None
            raise CommandError('%s: another training run (%s) is writing this model; '
                               'wait for it, stop it (kill -TERM), or choose another '
                               '--model' % (self.saveto, holder)) from None
        return fd


def holder(saveto):
    """'process N' while a run holds the lock of ``saveto``, else None.  It
    looks by trying a shared lock and letting it go at once (a run that
    starts in that instant is refused as if another held it)."""
    try:
        fd = os.open(lock_path(saveto), os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        return _holder(fd)
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def _same_file(fd, path):
    try:
        return os.stat(path).st_ino == os.fstat(fd).st_ino
    except FileNotFoundError:
        return False


def _holder(fd):
    try:
        pid = os.pread(fd, 32, 0).decode('ascii', 'replace').strip()
    except OSError:
        pid = ''
    return 'process %s' % pid if pid.isdigit() else 'a process'


def _write_pid(fd, saveto, path):
    """This process's id, written over the last one without truncating first
    (on a full disk, the block of the old id is reused)."""
    text = b'%d\n' % os.getpid()
    try:
        os.pwrite(fd, text, 0)
        os.ftruncate(fd, len(text))
    except OSError as e:
        _unlock(fd, path)
        raise write_error(saveto, e) from None


def _unlock(fd, path):
    """Remove the lock file (while still holding it), then let it go."""
    remove_if_there(path)
    os.close(fd)


def remove_stale_temporaries(saveto):
    """The temporary files of a checkpoint or a snapshot (MODEL.iterN.npz,
    .best_bleu, .current) that a kill cut short (output_files.atomic_write names
    them '.NAME.XXXXXXXX.tmp'): whoever holds the lock owns them."""
    folder = os.path.dirname(os.path.abspath(saveto))
    stale = temporaries_of(r'(%s)(\.pkl|\.json)?' % '|'.join(
        checkpoint_names(os.path.basename(saveto))))
    for name in os.listdir(folder):
        if stale.match(name):
            remove_if_there(os.path.join(folder, name))
