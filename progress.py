"""Progress lines of long jobs on stderr: counts, rate and ETA."""
import sys
import time


def format_duration(seconds):
    """H:MM:SS."""
    seconds = int(max(seconds, 0))
    return '%d:%02d:%02d' % (seconds // 3600, seconds // 60 % 60, seconds % 60)


class ProgressLine(object):
    """'<verb> done/total <unit>, rate <unit>/s, ETA H:MM:SS' rewritten in place
    on stderr, at most every ``interval`` seconds and once at the end."""

    def __init__(self, total, verb, unit, stream=None, interval=1.0):
        self.total, self.verb, self.unit = total, verb, unit
        self.stream = stream or sys.stderr
        self.interval = interval
        self.start = self.last = time.time()

    def update(self, done, force=False):
        now = time.time()
        if not force and now - self.last < self.interval and done < self.total:
            return
        self.last = now
        rate = done / max(now - self.start, 1e-9)
        eta = (self.total - done) / rate if rate > 0 else 0
        self.stream.write('\r%s %d/%d %s, %.2f %s/s, ETA %s' % (
            self.verb, done, self.total, self.unit, rate, self.unit,
            format_duration(eta)))
        self.stream.flush()

    def finish(self):
        self.update(self.total, force=True)
        self.stream.write('\n')
        self.stream.flush()
