"""Plot training runs from their training logs (MODEL.log.jsonl, machinery/training_log.py).

    python analysis/plot_training.py MODEL.npz.log.jsonl [MORE.log.jsonl ...]
        --png curves.png [--labels NAME,NAME...] [--reference 'NAME:U=C,U=C,...']

Two panels, one line per run: the training cost of the update events (every
``dispFreq`` updates: the mean cost per target word since the last display,
or in logs older than that figure the displayed batch's cost per sentence)
and the validation cost of the validation events, both against the update
number; a resumed run continues its line.  The validation panel also shows
the word-frequency cost of the validation set (from the first log whose
start event has it) and each ``--reference`` curve: validation costs from
elsewhere (another toolkit's run, say), as update=cost pairs.  It also
prints, per run, its updates, best validation and how it stopped.  The log
may belong to a run still going: the lines written so far are plotted.
"""
import os
import sys

if __name__ == '__main__':  # run as a file: import from the project root, not this folder
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from machinery import cli  # noqa: E402
from machinery.output_files import check_outputs  # noqa: E402
from machinery.text_io import InputError  # noqa: E402
from machinery.training_log import read_training_log  # noqa: E402


def curves(events):
    """{'cost': [(update, training cost)], 'valid': [(update, cost)]} of a
    log's events (training cost: per word where the log has it)."""
    updates = [e for e in events if e['event'] == 'update']
    key = 'cost_per_word' if any('cost_per_word' in e for e in updates) else 'cost'
    return {'cost': [(e['uidx'], e[key]) for e in updates if e.get(key) is not None],
            'valid': [(e['uidx'], e['cost']) for e in events
                      if e['event'] == 'validation' and e.get('cost') is not None]}


def frequency_cost(runs):
    """The word-frequency cost of the validation set in the first log that
    records it, or None."""
    for _, events in runs:
        for e in events:
            if e['event'] == 'start' and e.get('frequency_cost') is not None:
                return e['frequency_cost']
    return None


def parse_reference(text):
    """'NAME:U=C,U=C' -> (NAME, [(U, C), ...])."""
    name, sep, pairs = text.rpartition(':')
    try:
        points = [(int(u), float(c)) for u, c in
                  (pair.split('=') for pair in pairs.split(','))]
    except ValueError:
        points = None
    if not sep or not name or not points:
        raise InputError("--reference %r: expected 'NAME:UPDATE=COST,UPDATE=COST,...'"
                         % text)
    return name, points


def summary(label, events):
    """One line: updates, best validation cost, how the run ended."""
    valid = curves(events)['valid']
    stops = [e for e in events if e['event'] == 'stop']
    best = min(valid, key=lambda p: p[1]) if valid else None
    return '%s: %d updates; best validation %s; %s' % (
        label, max([e['uidx'] for e in events] or [0]),
        '%.4f at update %d' % (best[1], best[0]) if best else 'none',
        'stopped: %s' % stops[-1]['message'] if stops else 'still running or killed')


def plot(runs, png, references=()):
    """runs: [(label, events)]; references: [(label, [(update, cost)])];
    the two panels into ``png``."""
    from machinery import plots
    fig, axes = plots.plt.subplots(1, 2, figsize=(11, 4))
    for label, events in runs:
        for ax, key in zip(axes, ('cost', 'valid')):
            points = curves(events)[key]
            if points:
                ax.plot(*zip(*points), marker='.' if key == 'valid' else None, label=label)
    for label, points in references:
        axes[1].plot(*zip(*points), marker='s', linestyle='--', label=label)
    floor = frequency_cost(runs)
    if floor is not None:
        axes[1].axhline(floor, color='grey', linestyle=':',
                        label='word-frequency cost %.1f' % floor)
    plots.finish_panels(fig, axes, ('training cost (per target word; older logs: per sentence)',
                                    'validation cost (per sentence)'), png)


def plot_logs(args):
    labels = args.labels.split(',') if args.labels else [
        os.path.basename(p)[:-len('.log.jsonl')] if p.endswith('.log.jsonl') else p
        for p in args.logs]
    if len(labels) != len(args.logs):
        raise InputError('--labels names %d runs, but %d logs are given'
                         % (len(labels), len(args.logs)))
    check_outputs([args.png], args.logs)
    runs = [(label, read_training_log(path)) for label, path in zip(labels, args.logs)]
    for label, events in runs:
        print(summary(label, events))
    plot(runs, args.png, [parse_reference(r) for r in args.reference])
    print('plot: %s' % args.png, file=sys.stderr)


def parse_args(argv):
    p = cli.ArgumentParser(description=cli.summary(__doc__))
    p.add_argument('logs', nargs='+', metavar='LOG', help='training logs (MODEL.log.jsonl)')
    p.add_argument('--png', required=True, help='the figure (PNG)')
    p.add_argument('--labels', help='comma-separated run names (default: the file names)')
    p.add_argument('--reference', action='append', default=[], metavar='NAME:U=C,...',
                   help='a validation curve from elsewhere, as update=cost pairs '
                        '(repeatable)')
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(cli.arguments(argv))
    return cli.run(lambda: plot_logs(args))


if __name__ == '__main__':
    sys.exit(main())
