"""How every command line of the project ends: exit status 0, or one line on
stderr and a documented status, never a Python traceback for a fault of the
user's or of the machine (docs/training.md, "Faults").

    def main(argv=None):
        return cli.run(lambda: work(parse_args(cli.arguments(argv))))

Exit statuses:

* 0: done;
* 1: ``error: ...``: bad input (``text_io.InputError``), a file that cannot
  be written (disk full, permission denied, no such folder: any ``OSError``
  that reaches here), or a run that cannot go on (``CommandError``);
* 2: a bad command line (``ArgumentParser``: one line naming the option);
* 141: the reader of the output went away (``... | head``), quietly;
* 130 / 143: interrupted by SIGINT (Ctrl-C) / SIGTERM (128 + the signal's
  number, as a shell reports a process that the signal ended); training
  first writes a checkpoint (``Interrupted``).
"""
import argparse
import contextlib
import os
import signal
import subprocess
import sys
import threading

from machinery.text_io import InputError, one_line


class CommandError(Exception):
    """A command that cannot go on (a NaN cost, a step that failed, a file
    that cannot be written): one line; ``status`` is the exit status."""
    status = 1
    label = 'error'


class Interrupted(CommandError):
    """A signal ended the command (after training saved its checkpoint)."""
    label = 'interrupted'

    def __init__(self, signum, message):
        super().__init__(message)
        self.status = 128 + signum


@contextlib.contextmanager
def sigterm_interrupts():
    """Inside: SIGTERM raises ``Interrupted`` (``interrupted: SIGTERM``,
    status 143), as SIGINT raises KeyboardInterrupt, so that ``finally``
    clauses run (worker processes stopped, temporary files removed).
    Outside, SIGTERM ends a command as the system does.  Only the main
    thread takes signals: in another one this does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise_interrupted)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


_caught = []   # the signals that _raise_interrupted raised for


def _raise_interrupted(signum, frame):
    _caught.append(signum)
    raise Interrupted(signum, signal.Signals(signum).name)


def raise_if_interrupted():
    """Interrupted again for a signal whose exception something swallowed
    (an exception raised inside a ``__del__`` is printed and dropped)."""
    if _caught:
        _raise_interrupted(_caught[-1], None)


def os_error_text(error):
    """'PATH: reason' of an OSError (or 'reason' when it names no file)."""
    reason = error.strerror or one_line(error)
    return '%s: %s' % (error.filename, reason) if error.filename else reason


def error_message(error):
    """The text of the one line that reports ``error`` (without its label):
    a command's error as it is, an OSError's file and reason, another
    error's type and text."""
    if isinstance(error, (InputError, CommandError)):
        return str(error)
    if isinstance(error, OSError):
        return os_error_text(error)
    return '%s: %s' % (type(error).__name__, one_line(error))


def run_command(cmd, what, quiet=False, error=CommandError, **popen_args):
    """Run a child command to its end; when it fails, ``error('WHAT failed:
    ...')`` with the child's own error line (child_error); when a signal
    interrupted it (status 130 or 143, or the 'interrupted: SIGNAL ...' line
    of a child under a launcher such as mpirun, which exits 1), Interrupted
    with the signal's status.  ``quiet``: its output is captured (the
    CompletedProcess's stdout, text) and shown only in the error; else it goes
    through, all but the child's error and interrupted lines."""
    interrupted = None
    if quiet:
        proc = subprocess.run(cmd, capture_output=True, text=True, **popen_args)
        lines = (proc.stderr.strip() or proc.stdout.strip()).splitlines()
    else:
        child = subprocess.Popen(cmd, stderr=subprocess.PIPE, **popen_args)
        try:
            with sigterm_interrupts():
                line, interrupted = forward_stderr(child.stderr)
                proc = subprocess.CompletedProcess(cmd, child.wait())
        except BaseException:
            stop_child(child)
            raise
        lines = ['error: ' + line] if line else []
    signum = proc.returncode - 128
    said = interrupted.split()[0] if interrupted else None
    if proc.returncode != 0 and not lines and said in ('SIGINT', 'SIGTERM'):
        raise Interrupted(signal.Signals[said], '%s ended: %s' % (what, interrupted))
    if signum in (signal.SIGINT, signal.SIGTERM):   # the child said so itself
        raise Interrupted(signum, '%s ended by %s' % (what, signal.Signals(signum).name))
    if proc.returncode != 0:
        raise error('%s failed: %s' % (what, child_error(lines, proc.returncode)))
    return proc


# a child of an interrupted command: how long it may take to end by itself
# (the signal went to its whole process group), then, told to stop, to
# write its checkpoint
CHILD_OWN_END_SECONDS = 5
CHILD_STOP_SECONDS = 120


def stop_child(child):
    """A child whose parent is interrupted (SIGTERM, Ctrl-C) or fails is told
    to stop too (SIGTERM: a training writes its checkpoint and ends), and
    killed when it has not ended in CHILD_STOP_SECONDS: no step goes on
    training unseen after the command that started it has ended."""
    for stop, seconds in ((None, CHILD_OWN_END_SECONDS), (child.terminate, CHILD_STOP_SECONDS),
                          (child.kill, None)):
        if stop:
            stop()
        try:
            child.wait(seconds)
            return
        except subprocess.TimeoutExpired:
            continue


def child_error(lines, status):
    """What a failed child said: its last ``error:`` line, else its last
    line, else its exit status."""
    errors = [line for line in lines if line.startswith('error:')]
    if errors:
        return errors[-1][len('error:'):].strip()
    return lines[-1].strip() if lines else 'exit status %d' % status


def forward_stderr(stream):
    """Copy a child's stderr (a binary pipe) to ours as it comes, except its
    'error:' and 'interrupted:' lines: (the error line, the last interrupted
    line), each without its label, or None (progress lines ending in \\r pass too)."""
    said, pending = {}, b''
    for chunk in iter(lambda: stream.read1(4096), b''):
        pending += chunk
        while True:
            cut = max(pending.rfind(b'\n'), pending.rfind(b'\r'))
            if cut < 0:
                break
            for piece in pending[:cut + 1].splitlines(keepends=True):
                text = piece.decode('utf-8', 'replace')
                label = text.partition(': ')[0]
                if label in ('error', 'interrupted') and ': ' in text:
                    said[label] = text[len(label) + 2:].strip()   # the last one
                else:
                    sys.stderr.write(text)
            pending = pending[cut + 1:]
    sys.stderr.write(pending.decode('utf-8', 'replace'))
    sys.stderr.flush()
    return said.get('error'), said.get('interrupted')


def positive_int(text):
    """An argparse type: an integer of at least 1 (a bad value is the
    parser's one-line error naming the option, exit status 2)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError('%r is not an integer' % text)
    if value < 1:
        raise argparse.ArgumentTypeError('must be at least 1, not %d' % value)
    return value


def arguments(argv):
    """The command line's arguments: ``argv``, else the process's."""
    return sys.argv[1:] if argv is None else argv


def run(action):
    """Run ``action()`` (a command's work) and return its exit status."""
    try:
        action()
    except (InputError, CommandError) as e:
        return _fail(getattr(e, 'label', 'error'), error_message(e), getattr(e, 'status', 1))
    except BrokenPipeError:
        return _reader_left()
    except OSError as e:
        return _fail('error', error_message(e), 1)
    except KeyboardInterrupt:
        return _fail('interrupted', 'Ctrl-C (SIGINT)', 128 + signal.SIGINT)
    return 0


def _reader_left():
    """The reader of our output went away (``... | head``): stop quietly,
    as a filter does on SIGPIPE (status 128 + 13); what is still buffered
    goes nowhere."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    return 128 + signal.SIGPIPE


def _fail(label, message, status):
    print('%s: %s' % (label, ' '.join(message.split())), file=sys.stderr)
    return status


class ArgumentParser(argparse.ArgumentParser):
    """argparse with its errors on one line, status 2:
    ``error: MESSAGE (PROG --help lists the options)``; a flag is accepted
    in either spelling, ``--batch-size`` or ``--batch_size`` (the project's
    convention: dl4mt's training options keep their names, the other flags
    are spelt with dashes; docs/code.md)."""

    def error(self, message):
        self.exit(2, 'error: %s (%s --help lists the options)\n' % (message, self.prog))

    def parse_known_args(self, args=None, namespace=None):
        args = sys.argv[1:] if args is None else list(args)
        end = args.index('--') if '--' in args else len(args)
        spelt = [self._known_spelling(a) for a in args[:end]] + args[end:]
        return argparse.ArgumentParser.parse_known_args(self, spelt, namespace)

    def _known_spelling(self, arg):
        """``arg`` with its flag in the spelling this parser knows, when it
        knows the other one only."""
        flag, equals, value = arg.partition('=')
        if not flag.startswith('--') or flag in self._option_string_actions:
            return arg
        for other in (flag[:2] + flag[2:].replace('-', '_'), flag[:2] + flag[2:].replace('_', '-')):
            if other in self._option_string_actions:
                return other + equals + value
        return arg


def summary(doc):
    """A command's --help description from its module docstring: the first
    paragraph, on one line (a first line alone may stop mid-sentence)."""
    return ' '.join(doc.strip().split('\n\n')[0].split())
