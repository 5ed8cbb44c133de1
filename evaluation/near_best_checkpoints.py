"""How much of a Multi30k run's test BLEU is the choice of its checkpoint.

A run reports the snapshot of its best validation BLEU, but validations a few
tenths of a point apart are a tie on the 1,014 validation sentences.  This
scores every snapshot (``model.iterN.npz``) whose validation BLEU is within
``--within`` points of its run's best, up to the run's last update, on the
three test sets, as train_multi30k.sh scores the run itself (translate.py,
the run's beam, length-normalised; tokenised lowercased BLEU), and sets how
far apart they land beside how far apart the seeds land.  It also scores
the average of each run's near-best checkpoints' parameters, one model
(average_models.py), and compares the decoders on each run's three scores.

    python evaluation/near_best_checkpoints.py RUNS_DIR --data data/multi30k \\
        --out docs/multi30k/checkpoints [--within 0.5] \\
        [--results docs/multi30k/results.json] [--page docs/multi30k.md] [--dry-run]

RUNS_DIR holds the study's run folders (runs/multi30k/DECODER-seedSEED); a run
still training, or whose snapshots are not on this machine, is left out with a
note.  Each snapshot is translated once, into ``RUN/near-best/iter-N/`` (its
``result.json``: update, validation BLEU, test scores); the selected
snapshot's scores are the run's own.  Writes, once every figure is made:

* ``OUT/checkpoints.json``: each run's near-best checkpoints and their test
  scores, and per test set: the spread of each run's checkpoints (largest
  minus smallest BLEU), their standard deviation within a run pooled over the
  runs, how often the selected checkpoint was also the best on the test set,
  and (with ``--results``, the study's results.json) the seeds' standard
  deviation pooled over the decoders, for comparison; and each decoder
  against the baseline over the runs here, scored by the selected checkpoint,
  by the mean over the near-best ones and by their averaged parameters
  (Welch's t, Holm's correction);
* ``OUT/NAME/iter-N/SET.hyp.tok``: the translations of every near-best
  checkpoint that is not the run's selected one (those are in the study's
  translations/);
* ``OUT/NAME/averaged/SET.hyp.tok``: the translations of the average of a
  run's near-best checkpoints' parameters (average_models.py; the model
  itself stays in ``RUN/near-best/averaged/model.npz``), scored as a
  checkpoint is;
* ``OUT/checkpoints.png``: each run's checkpoints on each test set;
* the table and its summary between ``<!-- near-best checkpoints: begin -->``
  and ``<!-- near-best checkpoints: end -->`` of ``--page``.

``--dry-run`` lists the checkpoints and which of them are still to translate.
"""
import argparse
import datetime
import math
import os
import shutil
import sys
import tempfile
import time

if __name__ == '__main__':  # run as a file: import from the project root, not this folder
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from machinery import cli   # first: without .venv, one line (machinery/__init__.py)

import average_models
from evaluation import study_statistics, study_tables
from evaluation.multi30k_results import (SHORT, TEST_SETS, decoder_colours, find_steps,
                                         replace_between, step_order)
from machinery.output_files import write_json, write_text
from machinery.pickle_and_json import load_json
from machinery.text_io import InputError
from machinery.training_log import read_training_log
from pipeline import train_multi30k as m30k

WITHIN = 0.5
PAGE_MARKERS = ('<!-- near-best checkpoints: begin -->', '<!-- near-best checkpoints: end -->')
FOLDER = 'near-best'
AVERAGED = 'averaged'


# --------------------------------------------------------------------------
# which checkpoints

def near_best(events, last_update, within):
    """(the selected 'bleu' event: the one whose parameters the run kept as
    model.best_bleu.npz, [the 'bleu' events up to ``last_update`` within
    ``within`` points of its BLEU, in update order])."""
    best = m30k.best_bleu_event(events, last_update)
    if best is None:
        return None, []
    return best, [e for e in events if e['event'] == 'bleu' and e['uidx'] <= last_update
                  and e['bleu'] >= best['bleu'] - within]


def snapshot(run_dir, update):
    return os.path.join(run_dir, 'model.iter%d.npz' % update)


def checkpoint_dir(run_dir, update):
    return os.path.join(run_dir, FOLDER, 'iter-%d' % update)


def averaged_dir(run_dir):
    return os.path.join(run_dir, FOLDER, AVERAGED)


def scored(run_dir, update):
    path = os.path.join(checkpoint_dir(run_dir, update), 'result.json')
    return load_json(path) if os.path.exists(path) else None


def averaged_scored(run_dir, updates):
    """The result.json of the average of these updates' snapshots, or None
    (none yet, or of other updates)."""
    path = os.path.join(averaged_dir(run_dir), 'result.json')
    done = load_json(path) if os.path.exists(path) else None
    return done if done is not None and done['updates'] == updates else None


def plan_of(step, within):
    """{'step', 'selected', 'near'} of a finished run, or a note (str) saying
    why it is left out."""
    run_dir = step.translations
    selected, near = near_best(read_training_log(step.log), step.result['updates'], within)
    if selected is None:
        return '%s: no validation BLEU in its training log: left out' % run_dir
    updates = [e['uidx'] for e in near]
    averaged = len(near) < 2 or averaged_scored(run_dir, updates)
    missing = [e['uidx'] for e in near if not os.path.exists(snapshot(run_dir, e['uidx']))
               and not (averaged and (e is selected or scored(run_dir, e['uidx'])))]
    if missing:
        return ('%s: no snapshot of update %s here (trained on another machine?): left out'
                % (run_dir, ', '.join(map(str, missing))))
    return {'step': step, 'selected': selected, 'near': near}


# --------------------------------------------------------------------------
# scoring one checkpoint

class Progress(object):
    """'checkpoint 3 of 19 (2.1 min each, ETA 0:34:12)' before each translation."""

    def __init__(self, total):
        self.total, self.done, self.started = total, 0, time.time()

    def next(self, what):
        each = (time.time() - self.started) / self.done if self.done else None
        eta = ('' if each is None else ' (%.1f min each, ETA %s)' % (
            each / 60, datetime.timedelta(seconds=round(each * (self.total - self.done)))))
        self.done += 1
        print('checkpoint %d of %d%s: %s' % (self.done, self.total, eta, what), flush=True)


def check_test_beam(run_dir, test_beam):
    if test_beam not in (m30k.TEST_BEAM, m30k.TINY_TEST_BEAM):
        raise InputError('%s: a test beam of %s, not train_multi30k.sh\'s'
                         % (run_dir, test_beam))


def translate_into(out, model, test_beam, data, record):
    """``record`` with ``test_beam`` and the test scores of ``model``,
    translated and scored in the folder ``out`` as train_multi30k.sh scores
    a run (with the run's beam); written as out/result.json too."""
    args = argparse.Namespace(model_dir=out, tiny=test_beam == m30k.TINY_TEST_BEAM)
    result = dict(record, test_beam=test_beam,
                  test=m30k.translate_and_score(args, data, model))
    write_json(os.path.join(out, 'result.json'), result, indent=2)
    return result


def score_checkpoint(run_dir, event, data, test_beam, progress=None):
    """{'update', 'valid_bleu', 'test_beam', 'test'} of the snapshot of
    ``event``: read from its folder, or translated and scored there."""
    done = scored(run_dir, event['uidx'])
    if done is not None:
        return done
    check_test_beam(run_dir, test_beam)
    out = checkpoint_dir(run_dir, event['uidx'])
    os.makedirs(out, exist_ok=True)
    if progress is not None:
        progress.next('%s, update %d (validation BLEU %.2f)'
                      % (run_dir, event['uidx'], event['bleu']))
    return translate_into(out, snapshot(run_dir, event['uidx']), test_beam, data,
                          {'update': event['uidx'], 'valid_bleu': event['bleu']})


def score_average(plan, data, progress=None):
    """{'updates', 'test_beam', 'test'} of the average of a run's near-best
    checkpoints' parameters (average_models.py): read from RUN/near-best/averaged/,
    or averaged, translated and scored there as the run; None for a run with
    one near-best checkpoint."""
    run_dir, updates = plan['step'].translations, [e['uidx'] for e in plan['near']]
    if len(updates) < 2:
        return None
    done = averaged_scored(run_dir, updates)
    if done is not None:
        return done
    test_beam = plan['step'].result['test_beam']
    check_test_beam(run_dir, test_beam)
    out = averaged_dir(run_dir)
    os.makedirs(out, exist_ok=True)
    model = os.path.join(out, 'model.npz')
    if progress is not None:
        progress.next('%s, the average of updates %s' % (run_dir, ', '.join(map(str, updates))))
    average_models.average_models([snapshot(run_dir, u) for u in updates], model)
    return translate_into(out, model, test_beam, data, {'updates': updates})


def to_translate(plan):
    """The near-best checkpoints still to translate (their 'bleu' events), and
    AVERAGED where their average is."""
    run_dir = plan['step'].translations
    todo = [e for e in plan['near'] if e is not plan['selected']
            and not scored(run_dir, e['uidx'])]
    updates = [e['uidx'] for e in plan['near']]
    return todo + ([AVERAGED] if len(updates) > 1 and not averaged_scored(run_dir, updates)
                   else [])


def checkpoints_of(plan, data, progress):
    """[{'update', 'valid_bleu', 'selected', 'test': {set: BLEU}}] of a run."""
    step, rows = plan['step'], []
    for event in plan['near']:
        if event is plan['selected']:
            tests = step.result['test']
        else:
            tests = score_checkpoint(step.translations, event, data,
                                     step.result['test_beam'], progress)['test']
        rows.append({'update': event['uidx'], 'valid_bleu': round(event['bleu'], 2),
                     'selected': event is plan['selected'],
                     'test': {s: tests[s]['bleu_tok_lc'] for s in TEST_SETS}})
    return rows


# --------------------------------------------------------------------------
# the figures

def pooled_sd(groups):
    """The standard deviation within groups, pooled: sqrt(sum (n_i - 1) s_i^2
    / sum (n_i - 1)); None when no group has two values."""
    squares, freedom = 0., 0
    for values in groups:
        if len(values) > 1:
            mean = sum(values) / len(values)
            squares += sum((v - mean) ** 2 for v in values)
            freedom += len(values) - 1
    return math.sqrt(squares / freedom) if freedom else None


def seeds_sd(results, test_set):
    """The seeds' standard deviation of the study's table, pooled over its
    decoders (each decoder's own mean), or None."""
    if results is None:
        return None
    sds = [(d['test'][test_set]['n'], d['test'][test_set]['sd']) for d in results['decoders']
           if d['test'][test_set].get('sd') is not None]
    freedom = sum(n - 1 for n, _ in sds)
    return math.sqrt(sum((n - 1) * sd ** 2 for n, sd in sds) / freedom) if freedom else None


def selected_test(run, test_set):
    return next(c for c in run['checkpoints'] if c['selected'])['test'][test_set]


def test_set_summary(runs, test_set, results):
    values = [[c['test'][test_set] for c in r['checkpoints']] for r in runs]
    several = [(r, v) for r, v in zip(runs, values) if len(v) > 1]
    spreads = [max(v) - min(v) for _, v in several]
    chosen = [selected_test(r, test_set) for r, _ in several]
    ahead = [c - (sum(v) - c) / (len(v) - 1) for c, (_, v) in zip(chosen, several)]
    averaged = [r['averaged']['test'][test_set] - c for c, (r, _) in zip(chosen, several)
                if r.get('averaged')]
    return {'runs_with_several': len(several),
            'mean_spread': round(sum(spreads) / len(spreads), 2) if spreads else None,
            'largest_spread': round(max(spreads), 2) if spreads else None,
            'pooled_sd_within_run': _round(pooled_sd(values)),
            'selected_also_best': sum(1 for c, (_, v) in zip(chosen, several) if c >= max(v)),
            'selected_ahead_of_others': round(sum(ahead) / len(ahead), 2) if ahead else None,
            'averaged_ahead_of_selected': (round(sum(averaged) / len(averaged), 2)
                                           if averaged else None),
            'averaged_runs': len(averaged),
            'seeds_pooled_sd': _round(seeds_sd(results, test_set))}


def _round(value):
    return None if value is None else round(value, 2)


def averaged_of(plan, data, progress):
    """{'updates', 'test': {set: BLEU}} of a run's averaged near-best
    checkpoints, or None (one checkpoint)."""
    result = score_average(plan, data, progress)
    return None if result is None else {
        'updates': result['updates'],
        'test': {s: result['test'][s]['bleu_tok_lc'] for s in TEST_SETS}}


def figures_of(plans, data, within, results):
    progress = Progress(sum(len(to_translate(p)) for p in plans))
    runs = [{'name': p['step'].name, 'decoder': p['step'].result['decoder'],
             'seed': p['step'].result['seed'], 'checkpoints': checkpoints_of(p, data, progress),
             'averaged': averaged_of(p, data, progress)} for p in plans]
    return {'within': within, 'test_sets': list(TEST_SETS), 'runs': runs,
            'summary': {s: test_set_summary(runs, s, results) for s in TEST_SETS},
            'comparisons': decoder_comparisons(runs, list(TEST_SETS))}


# --------------------------------------------------------------------------
# the decoders compared on a score less tied to one checkpoint

SCORINGS = ('selected', 'near_best_mean', 'averaged')


def run_score(run, test_set, scoring):
    """A run's BLEU on a test set: its selected checkpoint's, the mean over
    its near-best checkpoints (the selected one among them), or that of the
    average of their parameters (a run with one: its selected checkpoint's)."""
    if scoring == 'selected' or (scoring == 'averaged' and not run.get('averaged')):
        return selected_test(run, test_set)
    if scoring == 'averaged':
        return run['averaged']['test'][test_set]
    values = [c['test'][test_set] for c in run['checkpoints']]
    return sum(values) / len(values)


def decoder_comparisons(runs, test_sets):
    """Each other decoder against the baseline on each test set, over the runs
    here (the seeds as the sample: Welch's t, study_statistics.welch), scored
    each way of SCORINGS; Holm's correction over the comparisons of one
    scoring.  [] without two baseline runs."""
    seeds = {}
    for r in runs:
        seeds.setdefault(r['decoder'], []).append(r)
    baseline = seeds.get(study_tables.BASELINE, [])
    rows = [{'decoder': d, 'test_set': s, 'seeds': sorted(r['seed'] for r in seeds[d]),
             'baseline_seeds': sorted(r['seed'] for r in baseline)}
            for d in seeds if d != study_tables.BASELINE for s in test_sets]
    for scoring in SCORINGS:
        tests = [study_statistics.welch([run_score(r, row['test_set'], scoring) for r in baseline],
                                        [run_score(r, row['test_set'], scoring)
                                         for r in seeds[row['decoder']]]) for row in rows]
        adjusted = study_statistics.holm([None if t is None else t.p for t in tests])
        for row, test, holm_p in zip(rows, tests, adjusted):
            row[scoring] = None if test is None else dict(
                {k: round(v, 4) for k, v in test._asdict().items()}, holm_p=round(holm_p, 4))
    return [row for row in rows if row['selected'] is not None]


# --------------------------------------------------------------------------
# the page and the plot

def checkpoint_cells(run):
    return ', '.join(('**%d: %.2f**' if c['selected'] else '%d: %.2f')
                     % (c['update'], c['valid_bleu']) for c in run['checkpoints'])


def test_cell(run, test_set):
    """'37.97 [37.41, 38.05]': the selected one's BLEU, [the smallest, the largest]."""
    values = [c['test'][test_set] for c in run['checkpoints']]
    selected = selected_test(run, test_set)
    return '%.2f' % selected if len(values) == 1 else '%.2f [%.2f, %.2f]' % (
        selected, min(values), max(values))


def averaged_cell(run, test_sets):
    averaged = run.get('averaged')
    return '–' if not averaged else ' / '.join('%.2f' % averaged['test'][s] for s in test_sets)


def summary_lines(figures):
    lines = []
    for s in figures['test_sets']:
        f = figures['summary'][s]
        if not f['runs_with_several']:
            continue
        seeds = ('' if f['seeds_pooled_sd'] is None else
                 '; the seeds\' standard deviation in the table, pooled over the decoders: '
                 '%.2f' % f['seeds_pooled_sd'])
        lines.append('- %s: the near-best checkpoints of a run %.2f BLEU apart on average '
                     '(at most %.2f); their standard deviation within a run %.2f%s. The '
                     'selected checkpoint was also the best on %s in %d of %d runs, and '
                     '%s BLEU from the mean of its run\'s other near-best ones on '
                     'average.'
                     % (SHORT[s], f['mean_spread'], f['largest_spread'],
                        f['pooled_sd_within_run'], seeds, SHORT[s], f['selected_also_best'],
                        f['runs_with_several'], study_tables.signed(f['selected_ahead_of_others']))
                     + averaged_sentence(f))
    return lines


def averaged_sentence(summary):
    if not summary.get('averaged_runs'):
        return ''
    runs = summary['averaged_runs']
    return (' Their parameters averaged: %s BLEU from the selected checkpoint on average '
            '(%d run%s).' % (study_tables.signed(summary['averaged_ahead_of_selected']), runs,
                             '' if runs == 1 else 's'))


SCORING_NAMES = {'selected': 'selected checkpoint', 'near_best_mean': 'near-best mean',
                 'averaged': 'averaged parameters'}


def welch_cell(test):
    """'+0.52 [-0.14, +1.18]; 0.086 (0.513)'."""
    return '%s; %s (%s)' % (study_tables.difference(test), study_tables.p_text(test['p']),
                            study_tables.p_text(test['holm_p']))


def comparison_lines(figures):
    comparisons = figures.get('comparisons')
    if not comparisons:
        return []
    lead = ('**The decoders compared on scores less tied to one checkpoint**: each run '
            'scored by its selected checkpoint, by the mean of its near-best checkpoints\' '
            'BLEU, and by the average of their parameters (one model, '
            '`average_models.py`); the difference to the baseline over the seeds here and '
            'its 95%% interval by Welch\'s t; Holm\'s correction over the %d comparisons '
            'of each scoring in brackets.' % len(comparisons))
    head = ['decoder - baseline', 'test set', 'seeds (baseline\'s)'] + [
        '%s: difference [95%% CI] ; Welch\'s p (Holm)' % SCORING_NAMES[k] for k in SCORINGS]
    rows = [[study_tables.name(c['decoder']), SHORT[c['test_set']],
             '%s (%s)' % (','.join(map(str, c['seeds'])), ','.join(map(str, c['baseline_seeds'])))]
            + [welch_cell(c[k]) for k in SCORINGS] for c in comparisons]
    return ['', lead, ''] + study_tables.table(head, rows)


def page_block(figures):
    head = ['run', 'checkpoints within %.1f of the best validation BLEU (update: BLEU; '
            'selected in bold)' % figures['within']] + [
        '%s: selected [range]' % SHORT[s] for s in figures['test_sets']] + [
        'their parameters averaged: %s' % ' / '.join(SHORT[s] for s in figures['test_sets'])]
    rows = [[r['name'], checkpoint_cells(r)] + [test_cell(r, s) for s in figures['test_sets']]
            + [averaged_cell(r, figures['test_sets'])] for r in figures['runs']]
    return (study_tables.table(head, rows) + [''] + summary_lines(figures)
            + comparison_lines(figures))


def plot(figures, png):
    """A panel a test set: each run's near-best checkpoints (the selected
    one a large marker, their averaged parameters a cross), a colour a decoder."""
    from machinery import plots
    runs = figures['runs']
    colours = decoder_colours(list(dict.fromkeys(r['decoder'] for r in runs)))
    fig, axes = plots.plt.subplots(1, len(figures['test_sets']),
                                   figsize=(4.2 * len(figures['test_sets']), 4))
    for ax, test_set in zip(axes, figures['test_sets']):
        labelled = set()
        for x, run in enumerate(runs):
            colour = colours[run['decoder']]
            others = [c['test'][test_set] for c in run['checkpoints'] if not c['selected']]
            chosen = selected_test(run, test_set)
            label = None if run['decoder'] in labelled else study_tables.name(run['decoder'])
            labelled.add(run['decoder'])
            ax.plot([x] * len(others), others, 'o', markersize=4, color=colour, alpha=0.6)
            ax.plot([x], [chosen], 'D', markersize=8, color=colour, label=label)
            if run.get('averaged'):
                ax.plot([x + 0.3], [run['averaged']['test'][test_set]], 'x', markersize=7,
                        markeredgewidth=2, color=colour)
        for marker, what in (('D', 'selected'), ('o', 'other near-best'),
                             ('x', 'their parameters averaged')):
            ax.plot([], [], marker, color='grey', markeredgewidth=2 if marker == 'x' else 1,
                    linestyle='none', label=what)
        ax.set_xticks(range(len(runs)))
        ax.set_xticklabels([r['name'].replace('-seed', ' ') for r in runs], rotation=60,
                           fontsize=7)
    plots.finish_panels(fig, axes, ['%s BLEU' % SHORT[s]
                                    for s in figures['test_sets']], png, xlabel='run',
                        legend_size=8, legend_below=True)


# --------------------------------------------------------------------------
# the command

def plans_of(args):
    steps = sorted((s for s in find_steps(args.runs_dir, args.data) if s.kind == 'runs'),
                   key=step_order)
    plans = []
    for step in steps:
        plan = plan_of(step, args.within)
        if isinstance(plan, str):
            print('note: ' + plan, file=sys.stderr)
        else:
            plans.append(plan)
    if not plans:
        raise InputError('%s: no finished run with its snapshots' % args.runs_dir)
    return plans


def dry_run(plans):
    for plan in plans:
        todo = to_translate(plan)
        for e in plan['near']:
            state = ('selected' if e is plan['selected'] else
                     'to translate' if e in todo else 'scored')
            print('%-24s update %6d  validation BLEU %.2f  %s'
                  % (plan['step'].name, e['uidx'], e['bleu'], state))
        if len(plan['near']) > 1:
            print('%-24s their average                     %s' % (
                plan['step'].name, 'to translate' if AVERAGED in todo else 'scored'))


def keep_translations(plans, out):
    """The translations (and result.json) of each run's other near-best
    checkpoints and of their average into OUT/NAME/iter-N/ and OUT/NAME/averaged/."""
    for plan in plans:
        run_dir = plan['step'].translations
        sources = [checkpoint_dir(run_dir, e['uidx']) for e in plan['near']
                   if e is not plan['selected']]
        for source in sources + ([averaged_dir(run_dir)] if sources else []):
            target = os.path.join(out, plan['step'].name, os.path.basename(source))
            os.makedirs(target, exist_ok=True)
            for name in ['result.json'] + [s + '.hyp.tok' for s in TEST_SETS]:
                shutil.copyfile(os.path.join(source, name), os.path.join(target, name))


def analyse(args):
    data = m30k.Data(args.data)
    plans = plans_of(args)
    if args.dry_run:
        return dry_run(plans)
    data.check()
    results = load_json(args.results) if args.results else None
    figures = figures_of(plans, data, args.within, results)
    block = page_block(figures)
    page = replace_between(args.page, PAGE_MARKERS, block) if args.page else None
    os.makedirs(args.out, exist_ok=True)
    scratch = tempfile.mkdtemp(dir=args.out)
    try:
        plot(figures, os.path.join(scratch, 'checkpoints.png'))
        keep_translations(plans, args.out)
        write_json(os.path.join(args.out, 'checkpoints.json'), figures, indent=2)
        os.replace(os.path.join(scratch, 'checkpoints.png'),
                   os.path.join(args.out, 'checkpoints.png'))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if page is not None:
        write_text(args.page, page)
    print('\n'.join(block))


def within_points(text):
    value = float(text)
    if not value >= 0:
        raise argparse.ArgumentTypeError('not a number of BLEU points >= 0: %r' % text)
    return value


def parse_args(argv):
    p = cli.ArgumentParser(description='Score the checkpoints of each Multi30k run whose '
                           'validation BLEU is near its best on the test sets: how much of '
                           'a run\'s test BLEU is the choice of its checkpoint.')
    p.add_argument('runs_dir', metavar='RUNS_DIR', help='the runs\' folders (runs/multi30k)')
    p.add_argument('--data', required=True,
                   help='the prepared data (pipeline/multi30k.py prepare)')
    p.add_argument('--out', required=True,
                   help='the folder of checkpoints.json, checkpoints.png and the '
                   'translations (docs/multi30k/checkpoints)')
    p.add_argument('--within', type=within_points, default=WITHIN,
                   help='validation BLEU points below the run\'s best (default %g)' % WITHIN)
    p.add_argument('--results', help='the study\'s results.json: the seeds\' spread beside')
    p.add_argument('--page', help='the page whose near-best checkpoints table is replaced '
                   '(docs/multi30k.md)')
    p.add_argument('--dry-run', action='store_true',
                   help='list the checkpoints and what is still to translate')
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(cli.arguments(argv))
    return cli.run(lambda: analyse(args))


if __name__ == '__main__':
    sys.exit(main())
