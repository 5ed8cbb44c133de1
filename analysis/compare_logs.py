"""Compare a training run's log with another's (a published run's, say):
did the re-run compute the same numbers?

    python analysis/compare_logs.py REFERENCE.log.jsonl RUN.log.jsonl [--until N]

It pairs the two logs' figures by update, over the updates both have (up to
``--until``): the displayed batch cost of the ``update`` events, the
validation cost and the validation BLEU.  For each it prints how many agree
to the last digit, how far apart the others are (costs in units in the last
place of float32, "ulps"; BLEU in points) and the first update where they
differ; then the fields of the start events' ``machine`` and ``workers``
that differ (machinery/machine.py), and a verdict:

* ``identical``: every figure the same;
* ``same validations``: every validation cost and BLEU the same, some batch
  costs a few ulps apart (seen across CPUs whose BLAS kernels differ,
  docs/training.md#reproducibility);
* ``diverged``: a validation differs: the first one, and how far apart the
  validation costs are from there on.

Exit status 0 for the first two, 1 for ``diverged``, 2 for bad input.  A
resumed run's log holds some updates twice (those after its last
checkpoint, done again): the later figures count, as they led to the model.
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
    of an update that a resumed run did twice)."""
    return {e['uidx']: e[field] for e in events
            if e['event'] == event and e.get(field) is not None
            and (until is None or e['uidx'] <= until)}


def apart(a, b, unit):
    """How far apart two figures are: float32 ulps, or BLEU points."""
    if unit == 'BLEU':
        return abs(a - b)
    return abs(a - b) / float(numpy.spacing(numpy.float32(max(abs(a), abs(b)))))


class Comparison(object):
    """One figure of the two logs over the updates both have."""

    def __init__(self, name, reference, run, unit):
        self.name, self.unit = name, unit
        self.updates = sorted(set(reference) & set(run))
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


def verdict(comparisons):
    """(status, line): 0 for identical or the same validations, 1 otherwise."""
    batch, valid, bleu = comparisons
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


def compare(reference_path, run_path, until=None, out=None):
    """Print the comparison (to ``out``, else stdout); returns the exit
    status (0 or 1)."""
    out = out or sys.stdout
    reference, run = read_training_log(reference_path), read_training_log(run_path)
    comparisons = [Comparison(name, figures(reference, event, field, until),
                              figures(run, event, field, until), unit)
                   for name, event, field, unit in FIGURES]
    if not any(c.updates for c in comparisons):
        raise InputError('%s and %s: no update with a figure in both logs%s'
                         % (reference_path, run_path,
                            ' up to update %d' % until if until else ''))
    last = max(u for c in comparisons for u in c.updates)
    print('reference: %s\nrun:       %s\ncompared up to update %d:'
          % (reference_path, run_path, last), file=out)
    for c in comparisons:
        print('  ' + c.line(), file=out)
    for line in machine_differences(reference, run):
        print(line, file=out)
    status, line = verdict(comparisons)
    print(line, file=out)
    return status


def parse_args(argv):
    p = cli.ArgumentParser(description=cli.summary(__doc__))
    p.add_argument('reference', metavar='REFERENCE', help='the training log to compare with')
    p.add_argument('run', metavar='RUN', help="the re-run's training log")
    p.add_argument('--until', type=cli.positive_int, metavar='N',
                   help='compare the updates up to N only')
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(cli.arguments(argv))
    outcome = []
    status = cli.run(lambda: outcome.append(compare(args.reference, args.run, args.until)))
    return status or outcome[0]


if __name__ == '__main__':
    sys.exit(main())
