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
    """Rates (updates/s, target words/s) and an ETA for the display lines:
    the rates over the updates since the last display (validations that fell
    among them included), the ETA from the mean rate since the run began."""

    def __init__(self, finish_after, max_epochs, pairs_per_epoch):
        self.start = self.window_start = time.time()
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
        """(cost per target word, number of updates) since the last call,
        which starts the next window of the recent rates."""
        figures = (self.recent_cost / max(self.recent_words, 1), self.recent_updates)
        self.recent_cost = self.recent_words = self.recent_updates = 0
        self.window_start = time.time()
        return figures

    def figures(self, uidx):
        """{'updates_per_second', 'words_per_second': since the run began;
        'recent_updates_per_second', 'recent_words_per_second': since the
        last take_recent_cost; 'eta_seconds': from the rates since the run
        began, or None}."""
        now = time.time()
        elapsed = max(now - self.start, 1e-9)
        window = max(now - self.window_start, 1e-9)
        ups = self.updates / elapsed
        etas = []
        if self.finish_after < 10000000:
            etas.append(seconds_left(self.finish_after - uidx, ups))
        if self.total_pairs:
            etas.append(seconds_left(self.total_pairs - self.pairs_done,
                                     self.sentences / elapsed))
        return dict(updates_per_second=ups, words_per_second=self.words / elapsed,
                    recent_updates_per_second=self.recent_updates / window,
                    recent_words_per_second=self.recent_words / window,
                    eta_seconds=min(etas) if etas else None)

    @staticmethod
    def text(figures):
        """'3.79 upd/s 1790 words/s ETA 1:02:00' (the recent rates)."""
        text = '%.2f upd/s %.0f words/s' % (figures['recent_updates_per_second'],
                                           figures['recent_words_per_second'])
        if figures['eta_seconds'] is not None:
            text += ' ETA %s' % format_duration(figures['eta_seconds'])
        return text
