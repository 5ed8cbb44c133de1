"""Compare a training run's log with another's (a published run's, say):
did the re-run compute the same numbers?

    python analysis/compare_logs.py REFERENCE.log.jsonl RUN.log.jsonl [--until N]
        [--in-reference K] [--in-run K]

It pairs the two logs' figures by update, over the updates both have (up to
``--until``): the displayed batch cost of the ``update`` events, the
validation cost and the validation BLEU.  For each it prints how many agree
to the last digit, how far apart the others are (costs in units in the last
place of float32, "ulps"; BLEU in points) and the first update where they
differ; then the fields of the start events' ``machine`` and ``workers``
that differ (theano_platform/machine.py), and a verdict:

* ``identical``: every figure the same;
* ``same validations``: every validation cost and BLEU the same, some batch
  costs a few ulps apart (seen across CPUs whose BLAS kernels differ,
  docs/training.md#reproducibility);
* ``diverged``: a validation differs: the first one, and how far apart the
  validation costs are from there on; or a figure of either log is not
  finite (NaN: the log holds it as null) or the run stopped on a NaN cost.

Exit status 0 for the first two, 1 for ``diverged``, 2 for bad input (a
log that cannot be read: one line naming every line of it that is not an
event, with its cause).  A resumed run's log holds some updates twice
(those after its last checkpoint, done again): the later figures count, as
they led to the model.  A log that holds several runs (a start without
--reload began a new model from update 0 on the same file) is compared by
its last run, or by the K-th that ``--in-reference`` / ``--in-run`` name.
"""
import os
import sys

if __name__ == '__main__':  # run as a file: import from the project root, not this folder
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from machinery import cli  # noqa: E402  (first: without .venv, one line, machinery/__init__.py)

import numpy  # noqa: E402

from machinery.text_io import InputError  # noqa: E402
from machinery.training_log import read_training_log  # noqa: E402

# (name, event, field, unit of the differences)
FIGURES = (('batch cost', 'update', 'cost', 'ulps'),
           ('validation cost', 'validation', 'cost', 'ulps'),
           ('validation BLEU', 'bleu', 'bleu', 'BLEU'))


def figures(events, event, field, until=None):
    """{update: value} of ``field`` in the ``event`` events (the last one
    of an update that a resumed run did twice); a non-finite value (null in
    the log) is nan."""
    return {e['uidx']: float('nan') if e[field] is None else e[field] for e in events
            if e['event'] == event and field in e and (until is None or e['uidx'] <= until)}


def runs_of(events):
    """The runs of a log: its events split before each start that did not
    resume (a new model, from update 0)."""
    runs = [[]]
    for e in events:
        if e['event'] == 'start' and not e.get('reloaded') and any(
                x['event'] == 'start' for x in runs[-1]):
            runs.append([])
        runs[-1].append(e)
    return runs


def one_run(path, events, number, flag):
    """The events of run ``number`` (1-based; None: the last) of a log, and
    a line that says which one when the log holds several."""
    runs = runs_of(events)
    if number is not None and number > len(runs):
        raise InputError('%s: holds %d run%s, not %d (%s)'
                         % (path, len(runs), 's' if len(runs) > 1 else '', number, flag))
    chosen = number or len(runs)
    if len(runs) == 1:
        return runs[0], None
    return runs[chosen - 1], ('%s: holds %d runs (starts without --reload): run %d is '
                              'compared (%s K names another)' % (path, len(runs), chosen,
                                                                flag))


def first_non_finite(events, until):
    """(update, what) of the first figure of ``events`` that is not finite,
    or of a stop on a NaN cost; None if there is none."""
    for e in events:
        if until is not None and e['uidx'] > until:
            continue
        if e['event'] == 'stop' and e.get('reason') == 'nan_cost':
            return e['uidx'], 'the run stopped on a NaN or Inf cost'
        for name, event, field, _ in FIGURES:
            if e['event'] == event and field in e and not _finite(e[field]):
                return e['uidx'], 'its %s is %s' % (name, 'null (NaN or Inf)'
                                                   if e[field] is None else e[field])
    return None


def _finite(value):
    return value is not None and numpy.isfinite(value)


def apart(a, b, unit):
    """How far apart two figures are: float32 ulps, or BLEU points."""
    if unit == 'BLEU':
        return abs(a - b)
    return abs(a - b) / float(numpy.spacing(numpy.float32(max(abs(a), abs(b)))))


class Comparison(object):
    """One figure of the two logs over the updates both have."""

    def __init__(self, name, reference, run, unit):
        self.name, self.unit = name, unit
        self.updates = sorted(u for u in set(reference) & set(run)
                              if _finite(reference[u]) and _finite(run[u]))
        self.differences = [(u, reference[u], run[u], apart(reference[u], run[u], unit))
                            for u in self.updates if reference[u] != run[u]]

    def line(self):
        text = '%-16s %5d in both, %5d the same' % (
            self.name + ':', len(self.updates), len(self.updates) - len(self.differences))
        if self.differences:
            first = self.differences[0]
            text += '; the others up to %s %s apart; first at update %d (%r, %r)' % (
                _amount(max(d[3] for d in self.differences), self.unit), self.unit,
                first[0], first[1], first[2])
        return text


def _amount(value, unit):
    return '%.2f' % value if unit == 'BLEU' else '%.3g' % value


def setup_of(events):
    """The first start event's ``machine`` record with its ``workers``, or
    None for a log older than the record."""
    start = next((e for e in events if e['event'] == 'start'), {})
    if start.get('machine') is None:
        return None
    return dict(start['machine'], workers=start.get('workers'))


def machine_differences(reference, run):
    """Lines naming the fields of the machine records (and the workers)
    that differ."""
    machines = [setup_of(events) for events in (reference, run)]
    if None in machines:
        which = ' and '.join(n for n, m in zip(('the reference', 'the run'), machines)
                             if m is None)
        return ['machine: not recorded in %s\'s log' % which]
    keys = [k for k in machines[0] if machines[0].get(k) != machines[1].get(k)]
    if not keys:
        return ['machine: the same']
    return ['machine: ' + '; '.join('%s %s -> %s' % (k, machines[0].get(k), machines[1].get(k))
                                    for k in keys)]


def verdict(comparisons, non_finite=()):
    """(status, line): 0 for identical or the same validations, 1 otherwise;
    ``non_finite``: (log, (update, what)) of the logs with a figure that is
    not finite, a divergence."""
    batch, valid, bleu = comparisons
    if non_finite:
        return 1, 'verdict: diverged: %s' % '; '.join(
            '%s at update %d: %s' % (log, update, what) for log, (update, what) in non_finite)
    if not any(c.differences for c in comparisons):
        return 0, 'verdict: identical: every figure the same to the last digit'
    if not valid.differences and not bleu.differences:
        return 0, ('verdict: same validations: every validation cost and BLEU the same to the '
                   'last digit; %d of %d batch costs up to %s ulps apart'
                   % (len(batch.differences), len(batch.updates),
                      _amount(max(d[3] for d in batch.differences), 'ulps')))
    firsts = [c.differences[0][0] for c in (valid, bleu) if c.differences]
    after = [d[3] for d in valid.differences]
    return 1, ('verdict: diverged: the first validation that differs is at update %d%s'
               % (min(firsts), '; validation costs up to %s ulps apart from there'
                  % _amount(max(after), 'ulps') if after else ''))


def compare(reference_path, run_path, until=None, out=None, runs=(None, None)):
    """Print the comparison (to ``out``, else stdout) of the runs ``runs``
    (1-based numbers, None: the last) of the two logs; returns the exit
    status (0 or 1)."""
    out = out or sys.stdout
    logs = []
    for path, number, flag in zip((reference_path, run_path), runs,
                                  ('--in-reference', '--in-run')):
        events, note = one_run(path, read_training_log(path), number, flag)
        logs.append(events)
        if note:
            print(note, file=out)
    reference, run = logs
    comparisons = [Comparison(name, figures(reference, event, field, until),
                              figures(run, event, field, until), unit)
                   for name, event, field, unit in FIGURES]
    non_finite = [(name, first_non_finite(events, until))
                  for name, events in (('the reference', reference), ('the run', run))]
    non_finite = [(name, found) for name, found in non_finite if found]
    if not any(c.updates for c in comparisons) and not non_finite:
        raise InputError('%s and %s: no update with a figure in both logs%s'
                         % (reference_path, run_path,
                            ' up to update %d' % until if until else ''))
    last = max([u for c in comparisons for u in c.updates] or [0])
    print('reference: %s\nrun:       %s\ncompared up to update %d:'
          % (reference_path, run_path, last), file=out)
    for c in comparisons:
        print('  ' + c.line(), file=out)
    for line in machine_differences(reference, run):
        print(line, file=out)
    status, line = verdict(comparisons, non_finite)
    print(line, file=out)
    return status


def parse_args(argv):
    p = cli.ArgumentParser(description=cli.summary(__doc__))
    p.add_argument('reference', metavar='REFERENCE', help='the training log to compare with')
    p.add_argument('run', metavar='RUN', help="the re-run's training log")
    p.add_argument('--until', type=cli.positive_int, metavar='N',
                   help='compare the updates up to N only')
    p.add_argument('--in-reference', type=cli.positive_int, metavar='K',
                   help='the K-th run of a reference log that holds several (default: '
                        'the last)')
    p.add_argument('--in-run', type=cli.positive_int, metavar='K',
                   help='the K-th run of the re-run\'s log (default: the last)')
    return p.parse_args(argv)


# the exit status of bad input (1 is a divergence)
BAD_INPUT = 2


def main(argv=None):
    args = parse_args(cli.arguments(argv))
    outcome = []
    status = cli.run(lambda: outcome.append(compare(args.reference, args.run, args.until,
                                                    runs=(args.in_reference, args.in_run))))
    if outcome:
        return outcome[0]
    return BAD_INPUT if status == 1 else status


if __name__ == '__main__':
    sys.exit(main())
