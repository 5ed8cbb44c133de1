"""Progress lines of long jobs on stderr: counts, rate and ETA."""
import sys
import time


def format_duration(seconds):
    """H:MM:SS."""
    seconds = int(max(seconds, 0))
    return '%d:%02d:%02d' % (seconds // 3600, seconds // 60 % 60, seconds % 60)


class ProgressLine(object):
    """'<verb> done/total <unit>, rate <unit>/s, ETA H:MM:SS' rewritten in place
    on stderr, at most every ``interval`` seconds; the line ends when done
    reaches total.  ``progress(done)`` is ``progress.update(done)``."""

    def __init__(self, total, verb, unit, stream=None, interval=1.0):
        self.total, self.verb, self.unit = total, verb, unit
        self.stream = stream or sys.stderr
        self.interval = interval
        self.start = self.last = time.time()
        self.finished = False

    def update(self, done, force=False):
        now = time.time()
        last = done >= self.total
        if self.finished or (not force and not last and now - self.last < self.interval):
            return
        self.last = now
        rate = done / max(now - self.start, 1e-9)
        eta = (self.total - done) / rate if rate > 0 else 0
        self.stream.write('\r%s %d/%d %s, %.2f %s/s, ETA %s%s' % (
            self.verb, done, self.total, self.unit, rate, self.unit,
            format_duration(eta), '\n' if last else ''))
        self.stream.flush()
        self.finished = last

    __call__ = update

    def finish(self):
        """End the line (at total) if the last update did not."""
        self.update(self.total, force=True)
