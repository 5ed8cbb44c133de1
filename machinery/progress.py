"""Progress of long jobs: counts, rates and ETAs (ProgressLine: a line on
stderr rewritten in place; Progress: the training loop's rates and ETA)."""
import sys
import time


def format_duration(seconds):
    """H:MM:SS."""
    seconds = int(max(seconds, 0))
    return '%d:%02d:%02d' % (seconds // 3600, seconds // 60 % 60, seconds % 60)


def seconds_left(remaining, rate):
    """The ETA of ``remaining`` units at ``rate`` units a second (0 before
    any rate is known)."""
    return remaining / rate if rate > 0 else 0.


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
        eta = seconds_left(self.total - done, rate)
        self.stream.write('\r%s %d/%d %s, %.2f %s/s, ETA %s%s' % (
            self.verb, done, self.total, self.unit, rate, self.unit,
            format_duration(eta), '\n' if last else ''))
        self.stream.flush()
        self.finished = last

    __call__ = update

    def finish(self):
        """End the line (at total) if the last update did not."""
        self.update(self.total, force=True)


class Progress(object):
    """Rates (updates/s, target words/s) and an ETA for the display lines."""

    def __init__(self, finish_after, max_epochs, pairs_per_epoch):
        self.start = time.time()
        self.updates = self.words = self.sentences = self.pairs_done = 0
        self.recent_cost = self.recent_words = self.recent_updates = 0
        self.finish_after = finish_after
        self.total_pairs = (max_epochs * pairs_per_epoch) if pairs_per_epoch else None

    def add(self, n_sentences, n_words, cost=0.):
        """An update on ``n_sentences`` sentences with ``n_words`` target
        words; ``cost``: the batch's mean cost per sentence."""
        self.updates += 1
        self.sentences += n_sentences
        self.words += n_words
        self.recent_cost += float(cost) * n_sentences
        self.recent_words += n_words
        self.recent_updates += 1

    def take_recent_cost(self):
        """(cost per target word, number of updates) since the last call."""
        figures = (self.recent_cost / max(self.recent_words, 1), self.recent_updates)
        self.recent_cost = self.recent_words = self.recent_updates = 0
        return figures

    def figures(self, uidx):
        """(updates/s, target words/s, ETA in seconds or None)."""
        elapsed = max(time.time() - self.start, 1e-9)
        ups, wps = self.updates / elapsed, self.words / elapsed
        etas = []
        if self.finish_after < 10000000:
            etas.append(seconds_left(self.finish_after - uidx, ups))
        if self.total_pairs:
            etas.append(seconds_left(self.total_pairs - self.pairs_done,
                                     self.sentences / elapsed))
        return ups, wps, (min(etas) if etas else None)

    @staticmethod
    def text(ups, wps, eta):
        text = '%.2f upd/s %.0f words/s' % (ups, wps)
        if eta is not None:
            text += ' ETA %s' % format_duration(eta)
        return text
