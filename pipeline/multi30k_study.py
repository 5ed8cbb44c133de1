"""The Multi30k table in one command: every decoder with every seed trained
and scored by train_multi30k.sh (its settings, its budget: 22,000 updates or
BLEU patience, whichever comes first), each decoder's seeds as one ensemble,
the like-for-like Marian anchors, then everything gathered into the results
page (evaluation/multi30k_results.py).

    .venv/bin/python pipeline/multi30k_study.py DATA_DIR [--dry-run]
        [--decoders baseline,mean,attentive] [--seeds 1-5] [--workers 2]
        [--runs runs/multi30k] [--out docs/multi30k] [--no-runs] [--no-ensembles]
        [--no-marian | --marian-dropouts 0.2,0]

Each step looks at its folder first: a run with its result.json is done and
skipped; a run stopped before its end (a kill, a reboot) is resumed
(``--reload``, train_multi30k.sh finds it); a run trained to its end but not
scored is scored.  So the command can be run again after any interruption
and continues where it was.  An ensemble is made again only when its seeds
changed.  ``--dry-run`` prints every step, its state and its command, and
the estimated time of what is left on this machine: from the runs finished
here when there are some, otherwise from a timing of 60 updates here scaled
by the committed runs' validation and test times (docs/multi30k.md).

On a fresh clone the runs' folders are gone but their results are gathered
in --out (docs/multi30k): the dry run says so under each such run.  Trained
again, a run's new result replaces it in the table and the gathered one is
kept beside it (NAME.earlier1); ``--no-runs`` trains none of them and the
gathering keeps them as they are (``--no-runs --no-ensembles``: the anchors
alone, added to the committed table).
"""
import argparse
import os
import statistics
import sys
import tempfile

if __name__ == '__main__':  # run as a file: import from the project root, not this folder
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from machinery import cli, run_lock
from machinery.pickle_and_json import load_json
from machinery.text_io import InputError, read_lines
from machinery.training_log import read_training_log
from pipeline import marian_multi30k as anchor
from pipeline import train_multi30k as m30k
from pipeline.train_pair import ROOT, _q, run

DECODERS = ('baseline', 'mean', 'attentive')
SEEDS = (1, 2, 3, 4, 5)
WORKERS = 2          # the table's runs: two MPI workers (the dropout noise is a worker's own)
MARIAN_DROPOUTS = (0.2, 0.)
CALIBRATION_UPDATES = 60
COMMITTED = os.path.join(ROOT, 'docs', 'multi30k', 'results.json')


class Step(object):
    """One step of the study: its kind ('run', 'ensemble', 'marian'), name,
    folder, state ('to do', 'resume', 'score', 'done'; 'running': another
    process trains it now) and command."""

    def __init__(self, kind, name, folder, state, command, **info):
        self.kind, self.name, self.folder, self.state = kind, name, folder, state
        self.command, self.info = command, info


def script(name):
    return os.path.join(ROOT, name)


def run_steps(args):
    states = {m30k.NEW: 'to do', m30k.INTERRUPTED: 'resume', m30k.TRAINED: 'score',
              m30k.SCORED: 'done'}
    steps = []
    for seed in args.seeds:            # seed by seed: an early stop leaves whole seeds
        for decoder in args.decoders:
            folder = os.path.join(args.runs, '%s-seed%d' % (decoder, seed))
            command = [script('train_multi30k.sh'), '--workers', str(args.workers)] + (
                ['--tiny'] if args.tiny else []) + [decoder, str(seed), args.data_dir, folder]
            steps.append(Step('run', '%s seed %d' % (decoder, seed), folder,
                              states[m30k.run_state(folder)], command, decoder=decoder,
                              seed=seed))
    return [running_elsewhere(step) for step in steps]


def running_elsewhere(step):
    """The step, its state 'running' while another process trains its folder
    (it holds the folder's model lock, machinery/run_lock.py)."""
    if step.state != 'done':
        step.info['holder'] = run_lock.holder(os.path.join(step.folder, 'model.npz'))
        if step.info['holder']:
            step.state = 'running'
    return step


def ensemble_steps(args, runs):
    """One ensemble a decoder, of the seeds of this plan's runs."""
    steps = []
    for decoder in args.decoders:
        seeds = [r.info['seed'] for r in runs if r.info['decoder'] == decoder]
        folder = os.path.join(args.runs, '%s-ensemble' % decoder)
        result = os.path.join(folder, 'result.json')
        done = os.path.exists(result) and load_json(result).get('seeds') == seeds
        models = [m30k.model_path(Folder(r.folder), '.best_bleu') for r in runs
                  if r.info['decoder'] == decoder]
        command = m30k.translate_command(Folder(folder, args.tiny), m30k.Data(args.data_dir),
                                         models[0], models[1:])
        steps.append(Step('ensemble', '%s ensemble of seeds %s' % (
            decoder, ', '.join(map(str, seeds))), folder, 'done' if done else 'to do',
            command, decoder=decoder, seeds=seeds, models=models))
    return steps


class Folder(object):
    """What train_multi30k's helpers read of their arguments: the folder."""

    def __init__(self, model_dir, tiny=False):
        self.model_dir, self.tiny = model_dir, tiny


def score_ensemble(args, step):
    """The ensemble's translations of the test sets and their scores, into
    its folder's result.json."""
    import time
    from machinery.output_files import write_json
    missing = missing_models(step)
    if missing:
        raise InputError('%s: no such model: the ensemble of %s needs every seed\'s run '
                         '(--seeds names the ones to use)' % (missing[0], step.name))
    os.makedirs(step.folder, exist_ok=True)
    started = time.time()
    tests = m30k.translate_and_score(Folder(step.folder, args.tiny), m30k.Data(args.data_dir),
                                     step.info['models'][0], step.info['models'][1:])
    write_json(os.path.join(step.folder, 'result.json'), {
        'decoder': step.info['decoder'], 'ensemble': True, 'seeds': step.info['seeds'],
        'command': _q(step.command), 'commit': m30k.commit(),
        'total_wall_seconds': round(time.time() - started, 1),
        'test_beam': m30k.TINY_TEST_BEAM if args.tiny else m30k.TEST_BEAM, 'test': tests},
        indent=2)


def marian_steps(args):
    steps = []
    for dropout in args.marian_dropouts:
        folder = os.path.join(args.runs, 'marian-dropout%g-seed1' % dropout)
        command = [sys.executable, script('pipeline/marian_multi30k.py'), 'train',
                   args.data_dir, folder, '--dropout', str(dropout), '--threads',
                   str(args.workers)] + (['--tiny'] if args.tiny else [])
        if os.path.exists(os.path.join(folder, 'result.json')):
            state = 'done'
        else:
            state = 'to do' if anchor.resumed_from(folder) is None else 'resume'
        steps.append(running_elsewhere(Step('marian', 'Marian amun, dropout %g' % dropout,
                                            folder, state, command, dropout=dropout)))
    return steps


def gather_command(args):
    return [sys.executable, script('evaluation/multi30k_results.py'), args.runs, '--data',
            args.data_dir, '--out', args.out] + (
        ['--page', args.page, '--readme', args.readme] if args.page else [])


def plan(args):
    runs = run_steps(args)
    steps = list(runs) if args.train_runs else []
    if args.ensembles:
        steps += ensemble_steps(args, runs)
    if args.marian:
        steps += marian_steps(args)
    return steps


# --------------------------------------------------------------------------
# the estimate

# a Marian run against one of ours: this project trained 1.9-5.3 times
# Marian 1.12's words/s on the CPUs measured (docs/speed.md); Marian's own
# early stopping may end it at another number of updates
MARIAN_RUN_FACTOR = 4.


def finished_here(runs_dir, cpu):
    """The training logs' events of the runs in runs_dir finished on a CPU of
    this model."""
    out = []
    for step_dir in sorted(os.listdir(runs_dir)) if os.path.isdir(runs_dir) else []:
        folder = os.path.join(runs_dir, step_dir)
        result, log = (os.path.join(folder, 'result.json'),
                       os.path.join(folder, 'model.npz.log.jsonl'))
        if not (os.path.exists(result) and os.path.exists(log)):
            continue
        events = read_training_log(log)
        starts = [e for e in events if e['event'] == 'start']
        if starts and starts[0].get('machine', {}).get('cpu') == cpu:
            out.append(events)
    return out


def update_rates(events):
    """The updates a second of a log's update events (each over the updates
    since the one before; the first ones a run logged held their average)."""
    return [e.get('recent_updates_per_second', e.get('updates_per_second'))
            for e in events if e['event'] == 'update']


def committed_costs():
    """From the committed runs (another machine): (their updates a second
    while updating, the share of their training time in validations, their
    seconds of test translation)."""
    if not os.path.exists(COMMITTED):
        raise InputError('%s: no committed runs to scale the estimate by' % COMMITTED)
    ups, shares, tests = [], [], []
    logs = os.path.dirname(COMMITTED)
    for result in load_json(COMMITTED)['runs']:
        rates = update_rates(read_training_log(os.path.join(logs, result['log'])))
        if not rates or 'total_wall_seconds' not in result:
            continue
        ups.append(statistics.median(rates))
        updating = result['updates'] / ups[-1]
        shares.append(max(0., 1. - updating / result['train_wall_seconds']))
        tests.append(result['total_wall_seconds'] - result['train_wall_seconds'])
    return statistics.median(ups), statistics.median(shares), statistics.median(tests)


def calibrate(args):
    """(updates a second, target words a second or None) of the baseline here
    (CALIBRATION_UPDATES updates of the table's settings, as args.workers
    workers), with the start-up."""
    folder = tempfile.mkdtemp(prefix='calibration-', dir=args.runs if os.path.isdir(
        args.runs) else None)
    command = [script('train_multi30k.sh'), '--workers', str(args.workers), 'baseline', '1',
               args.data_dir, folder, '--', '--finish_after', str(CALIBRATION_UPDATES),
               '--dispFreq', '20', '--validFreq', '100000', '--bleu_valid_freq', '100000',
               '--saveFreq', '100000']
    print('estimate: timing %d updates here (%s)' % (CALIBRATION_UPDATES, _q(command)),
          file=sys.stderr)
    import shutil
    import subprocess
    try:
        subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        log = os.path.join(folder, 'model.npz.log.jsonl')
        events = read_training_log(log) if os.path.exists(log) else []
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    rates = update_rates(events)
    if not rates:
        raise InputError('the timing run trained no update (run it by hand: %s)'
                         % _q(command))
    words = [e['recent_words_per_second'] for e in events
             if e['event'] == 'update' and 'recent_words_per_second' in e]
    return rates[-1], (words[-1] if words else None)


def seconds_per_run(args):
    """(estimated seconds of one run here, the machine otherwise idle; how it
    was estimated; the timing run's target words a second, or None): the
    updates of the budget at this machine's speed (the runs finished here at
    their fastest, or a timing run), the committed runs' share of
    validations and their test translation scaled alike."""
    from theano_platform.machine import cpu_model
    ups_there, valid_share, test_seconds = committed_costs()
    here = [update_rates(events) for events in finished_here(args.runs, cpu_model())]
    here = [m30k.fast_rate(rates) for rates in here if rates]
    timed_words = None
    if here:
        ups = statistics.median(here)
        how = ('%.2f updates/s, the median of %d runs finished here at their fastest '
               '(the %dth percentile of their rates)' % (ups, len(here), 100 * m30k.FAST_QUANTILE))
    else:
        ups, timed_words = calibrate(args)
        how = '%.2f updates/s timed here' % ups
    updating = m30k.UPDATE_BUDGET / ups
    seconds = updating / (1. - valid_share) + test_seconds * ups_there / ups
    return seconds, '%s (the committed runs: %.2f), their validations and test ' \
        'translation scaled alike' % (how, ups_there), timed_words


def marian_factor(args, steps, timed_words=None):
    """(a Marian run's time against one of ours here, how it was found): our
    runs' target words a second here at their fastest (or timed_words, those
    of the timing run, before one has finished here) against those of the
    plan's anchors (their train.log), or MARIAN_RUN_FACTOR before
    an anchor has trained."""
    from theano_platform.machine import cpu_model
    ours = [[e['recent_words_per_second'] for e in events if 'recent_words_per_second' in e]
            for events in finished_here(args.runs, cpu_model())]
    ours = [m30k.fast_rate(rates) for rates in ours if rates]
    timed = not ours and timed_words
    ours = ours or ([timed_words] if timed else [])
    logs = [os.path.join(step.folder, 'train.log') for step in steps if step.kind == 'marian']
    marian = [anchor.words_per_second(read_lines(log, allow_empty=True))[1]
              for log in logs if os.path.exists(log)]
    marian = [rate for rate in marian if rate]
    if not (ours and marian):
        return MARIAN_RUN_FACTOR, 'about %g times one of ours, from the words/s of ' \
            'docs/speed.md' % MARIAN_RUN_FACTOR
    words, marian_words = statistics.median(ours), statistics.median(marian)
    return words / marian_words, '%.1f times one of ours: %.0f target words/s at its ' \
        'fastest here against our %.0f%s' % (words / marian_words, marian_words, words,
                                             ' (the timing run)' if timed else '')


def left_of(step):
    """The share of a step's training still to do: all of it, half of an
    interrupted run of ours, an anchor's updates after its checkpoint."""
    if step.state == 'to do':
        return 1.
    if step.kind == 'marian':
        done = anchor.resumed_from(step.folder) or 0
        return max(0., 1. - done / float(m30k.UPDATE_BUDGET))
    return .5


def hours(seconds):
    return '%.1f h' % (seconds / 3600.)


def estimate(args, steps):
    per_run, how, timed_words = seconds_per_run(args)
    factor, marian_how = marian_factor(args, steps, timed_words)
    test_seconds = committed_costs()[2]
    total = 0.
    for step in steps:
        if step.state == 'done':
            continue
        if step.kind == 'run':
            total += per_run * left_of(step)
        elif step.kind == 'ensemble':
            total += test_seconds * len(step.info['seeds']) * 2
        else:
            total += per_run * factor * left_of(step)
    print('estimated time of what is left on this machine, otherwise idle: %s (a run: %s, '
          'from %s; an ensemble of k seeds: about k times a run\'s test translation; a '
          'Marian run: %s)' % (hours(total), hours(per_run), how, marian_how))


# --------------------------------------------------------------------------

def gathered_steps(out):
    """The names of the steps whose results are gathered in out (committed
    ones on a fresh clone)."""
    from evaluation.multi30k_results import kept_steps
    return {step.name for step in kept_steps(out) if step.kind != 'earlier'}


# the option that leaves out a kind of step
LEAVE_OUT = {'run': '--no-runs', 'ensemble': '--no-ensembles', 'marian': '--no-marian'}


def missing_models(step):
    return [m for m in step.info['models'] if not os.path.exists(m)]


def models_missing_to_make(step):
    """The seeds' models missing here for an ensemble still to make ([] for
    any other step)."""
    return missing_models(step) if step.kind == 'ensemble' and step.state != 'done' else []


def dry_run(args):
    steps = plan(args)
    gathered = gathered_steps(args.out)
    for step in steps:
        print('%-36s %-6s %s' % (step.name, step.state, step.folder))
        if step.state == 'running':
            print('    trained now by %s' % step.info['holder'])
        elif step.state != 'done':
            print('    ' + _q(step.command))
        if step.state == 'to do' and os.path.basename(step.folder) in gathered:
            print('    gathered in %s already: done again, its new result takes that one\'s '
                  'place (%s keeps it)' % (args.out, LEAVE_OUT[step.kind]))
        missing = [] if args.train_runs else models_missing_to_make(step)
        if missing:
            print('    needs its seeds\' models, not here: %s' % missing[0])
    print('then: ' + _q(gather_command(args)))
    if args.estimate:
        estimate(args, steps)


def refuse_steps_running_elsewhere(steps):
    """One study at a time: a step that another process trains stops this one
    before it starts anything."""
    for step in steps:
        if step.state == 'running':
            raise InputError('%s: trained now by %s (another study, or the step run by '
                             'hand); wait for it, or stop it (kill -TERM) and run the study '
                             'again' % (step.folder, step.info['holder']))


def refuse_ensembles_without_models(steps):
    """With --no-runs, an ensemble to make whose seeds' models are not here
    stops the study before it starts anything."""
    for step in steps:
        missing = models_missing_to_make(step)
        if missing:
            raise InputError('%s: no such model: the %s needs its seeds\' runs (train '
                             'them: leave out --no-runs; or --no-ensembles)'
                             % (missing[0], step.name))


def execute(args):
    steps = plan(args)
    refuse_steps_running_elsewhere(steps)
    if not args.train_runs:
        refuse_ensembles_without_models(steps)
    runs = run_steps(args)
    for step in runs if args.train_runs else []:
        if step.state != 'done':
            print('study: %s (%s)' % (step.name, step.state), file=sys.stderr)
            run(step.command)
    if args.ensembles:
        for step in ensemble_steps(args, run_steps(args)):
            if step.state != 'done':
                print('study: %s' % step.name, file=sys.stderr)
                score_ensemble(args, step)
    if args.marian:
        for step in marian_steps(args):
            if step.state != 'done':
                run(step.command)
    run(gather_command(args))


def seed_list(text):
    """'1-5' or '1,2,4' -> [1, 2, ...]."""
    seeds = []
    for part in text.split(','):
        lo, _, hi = part.partition('-')
        try:
            seeds += list(range(int(lo), int(hi or lo) + 1))
        except ValueError:
            raise argparse.ArgumentTypeError('seeds are numbers and ranges, e.g. 1-5 or 1,3,5; '
                                        'not %r' % text)
    return seeds


def dropout_list(text):
    """'0.2,0' -> [0.2, 0.0]: the anchors' Marian --dropout-rnn values."""
    try:
        dropouts = [float(part) for part in text.split(',')]
    except ValueError:
        raise argparse.ArgumentTypeError('dropouts are numbers, e.g. 0.2,0; not %r' % text)
    bad = [d for d in dropouts if not 0 <= d < 1]
    if bad:
        raise argparse.ArgumentTypeError('a dropout is at least 0 and below 1, not %g' % bad[0])
    return dropouts


def parse_args(argv):
    p = cli.ArgumentParser(description=__doc__.split('\n\n')[0].replace('\n', ' '))
    p.add_argument('data_dir', metavar='DATA_DIR',
                   help='the output of pipeline/multi30k.py prepare (e.g. data/multi30k)')
    p.add_argument('--dry-run', action='store_true',
                   help='print every step, its state, its command and the estimated time; '
                   'train nothing')
    p.add_argument('--no-estimate', dest='estimate', action='store_false',
                   help='with --dry-run: no estimate (it times %d updates when no run has '
                   'finished here)' % CALIBRATION_UPDATES)
    p.add_argument('--decoders', type=lambda t: t.split(','), default=list(DECODERS),
                   help='the decoders, comma-separated (default: %s)' % ','.join(DECODERS))
    p.add_argument('--seeds', type=seed_list, default=list(SEEDS),
                   help='the seeds: 1-5 or 1,3,5 (default: 1-5)')
    p.add_argument('--workers', type=cli.positive_int, default=WORKERS,
                   help='MPI workers of each run (default %d, as the table\'s runs: the '
                   'numbers depend on it)' % WORKERS)
    p.add_argument('--runs', default=os.path.join('runs', 'multi30k'),
                   help='the runs\' folders (default: runs/multi30k)')
    p.add_argument('--out', default=os.path.join('docs', 'multi30k'),
                   help='where the gathered results go (default: docs/multi30k)')
    p.add_argument('--page', default=os.path.join('docs', 'multi30k.md'),
                   help='the results page whose tables the gathering rewrites '
                   '(default: docs/multi30k.md; "" for none)')
    p.add_argument('--readme', default='README.md',
                   help='the README whose short table the gathering rewrites')
    p.add_argument('--no-runs', dest='train_runs', action='store_false',
                   help='train no run of the seeds: their results stay as gathered in '
                   '--out (a fresh clone; with --no-ensembles: the anchors alone)')
    p.add_argument('--no-ensembles', dest='ensembles', action='store_false',
                   help='no ensemble of each decoder\'s seeds')
    p.add_argument('--no-marian', dest='marian', action='store_false',
                   help='no Marian anchors (pipeline/marian_multi30k.py)')
    p.add_argument('--marian-dropouts', type=dropout_list, default=list(MARIAN_DROPOUTS),
                   help='the anchors, by their dropout, comma-separated (default: %s; '
                   'e.g. 0 for the one without dropout alone)'
                   % ','.join('%g' % d for d in MARIAN_DROPOUTS))
    p.add_argument('--tiny', action='store_true',
                   help='tiny models for a few updates (train_multi30k.sh --tiny: tests)')
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(cli.arguments(argv))
    return cli.run(lambda: dry_run(args) if args.dry_run else execute(args))


if __name__ == '__main__':
    sys.exit(main())
