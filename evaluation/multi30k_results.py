"""Gather the Multi30k runs of train_multi30k.sh into the results page's
figures (docs/multi30k.md#results).

    python evaluation/multi30k_results.py RUNS_DIR --data data/multi30k --out OUT \\
        [--bootstrap 1000]

RUNS_DIR holds one folder a run (``DECODER-seedSEED/``, as train_multi30k.sh
names them) with its ``result.json``, training log and test translations.
Writes into OUT:

* ``results.json``: one object a run (its result.json, and the name of its
  copied log), its command written as from the project's root with the
  README's layout (``.venv/bin/python nmt.py ... data/multi30k/...
  runs/multi30k/...``), whatever folders the run used;
* ``logs/DECODER-seedSEED.log.jsonl``: each run's training log (small: they
  are committed, so that a re-run can be compared with them);
* ``translations/DECODER-seedSEED/TEST.hyp.tok``: each run's test
  translations (tokenised), which the significance tests and the BLEU by
  length read;
* ``results.md``: the table: per decoder, the runs, updates, and the mean and
  standard deviation over the seeds of the validation BLEU and of each test
  set's BLEU in both forms; per residual decoder and test set, the paired
  bootstrap p-value against the baseline (tokenised lowercased BLEU, the
  seeds' translations pooled: seed s of the decoder against seed s of the
  baseline, every seed that both have);
  and below it test2016's BLEU by source length for each decoder
  (evaluation/length_buckets.py; the seeds every decoder has, pooled);
* ``validation.png``: the validation cost and BLEU of every run against the
  update; ``by_length.png``: the BLEU by source length.

It prints the table.  A run folder without result.json (still training) is
skipped with a note.  The runs gathered into OUT before stay in it when
their folders are gone (a fresh machine): their results, logs and kept
translations are read from OUT.  The pooled tests and the BLEU by length
take the seeds whose translations are at hand; the table also gives Welch's
t-test over the seeds' BLEU, which needs only the scores.

``--at N`` gathers the runs as scored at an equal budget of N updates
(``train_multi30k.sh --score-at N``: each run's ``at-N/`` folder; a run that
ended by update N is its own), with the validation curves up to update N.
"""
import collections
import glob
import os
import shutil
import statistics
import sys

if __name__ == '__main__':  # run as a file: import from the project root, not this folder
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from machinery import cli
from machinery.model_io import load_json, write_json, write_text
from machinery.text_io import InputError, read_lines
from machinery.training_log import read_training_log
from machinery.vocab import words

TEST_SETS = ('test_2016_flickr', 'test_2017_flickr', 'test_2017_mscoco')
SHORT = {'test_2016_flickr': 'test2016', 'test_2017_flickr': 'test2017',
         'test_2017_mscoco': 'mscoco2017'}
BASELINE = 'baseline'
LENGTH_TEST_SET = 'test_2016_flickr'


LOG = 'model.npz.log.jsonl'

# a run as gathered: its result.json (with its portable command), its
# training log, and the folder of its TEST.hyp.tok (None: not kept)
Run = collections.namedtuple('Run', 'result log translations')


def run_name(result):
    return '%s-seed%d' % (result['decoder'], result['seed'])


def sort_runs(runs):
    return sorted(runs, key=lambda r: (r.result['decoder'] != BASELINE,
                                       r.result['decoder'], r.result['seed']))


def budget_folder(run_dir, at):
    """Where the run's scores at ``at`` updates are: its at-N/ folder, or the
    run itself when it ended by update N (its own result is the same)."""
    own = os.path.join(run_dir, 'result.json')
    if (not os.path.exists(os.path.join(run_dir, 'at-%d' % at, 'result.json'))
            and os.path.exists(own) and load_json(own)['updates'] <= at):
        return run_dir
    return os.path.join(run_dir, 'at-%d' % at)


def find_runs(runs_dir, data_dir, at=None):
    """[Run] of the finished runs in ``runs_dir``; with ``at``, their
    scores at that budget (read from the run's at-N/)."""
    runs = []
    for run_dir in sorted(glob.glob(os.path.join(runs_dir, '*'))):
        if not os.path.isdir(run_dir):
            continue
        folder = budget_folder(run_dir, at) if at else run_dir
        result_path = os.path.join(folder, 'result.json')
        if not os.path.exists(result_path):
            print('note: %s has no result.json (still training?): left out' % folder,
                  file=sys.stderr)
            continue
        result = load_json(result_path)
        result['command'] = portable_command(result.get('command', ''), data_dir, runs_dir)
        runs.append(Run(result, training_log_of(folder), folder))
    return runs


def kept_runs(out, present):
    """[Run] of the runs gathered into ``out`` before whose names are not in
    ``present``: their results, logs and translations as kept there."""
    path = os.path.join(out, 'results.json')
    if not os.path.exists(path):
        return []
    runs = []
    for result in load_json(path):
        if run_name(result) in present:
            continue
        translations = os.path.join(out, 'translations', run_name(result))
        runs.append(Run(result, os.path.join(out, result['log']),
                        translations if os.path.isdir(translations) else None))
    return runs


def all_runs(args):
    """The runs of RUNS_DIR and those kept in OUT, by decoder then seed."""
    runs = find_runs(args.runs_dir, args.data, args.at)
    runs += kept_runs(args.out, {run_name(r.result) for r in runs})
    if not runs:
        raise InputError('%s: no run folder with a %sresult.json'
                         % (args.runs_dir, 'at-%d/' % args.at if args.at else ''))
    return sort_runs(runs)


def mean_std(values):
    """(mean, standard deviation) of the values there are; the deviation is
    None for one value (one seed has no spread to show), both for none."""
    values = [v for v in values if v is not None]
    if not values:
        return None, None
    return statistics.mean(values), (statistics.stdev(values) if len(values) > 1 else None)


def fmt(mean, std):
    if mean is None:
        return '–'
    return '%.2f' % mean if std is None else '%.2f ± %.2f' % (mean, std)


def decoder_rows(runs):
    """{decoder: [result, ...]} in the runs' order."""
    rows = {}
    for run in runs:
        rows.setdefault(run.result['decoder'], []).append(run.result)
    return rows


def pooled(runs, data_dir, decoders, test_set):
    """The translations of ``decoders`` on ``test_set`` over the seeds whose
    translations all of them have, each decoder's seeds concatenated in the
    same order, with the reference and the source repeated as often:
    ({decoder: lines}, refs, sources, seeds)."""
    by_key = {(r.result['decoder'], r.result['seed']): r.translations for r in runs
              if r.translations}
    seeds = sorted(set.intersection(*[{s for d, s in by_key if d == decoder}
                                       for decoder in decoders]))
    ref = read_lines(os.path.join(data_dir, '%s.tok.de' % test_set))
    source = read_lines(os.path.join(data_dir, '%s.tok.en' % test_set))
    hyps = {decoder: sum((read_lines(os.path.join(by_key[(decoder, seed)],
                                                  '%s.hyp.tok' % test_set),
                                     allow_empty=True) for seed in seeds), [])
            for decoder in decoders}
    return hyps, ref * len(seeds), source * len(seeds), seeds


def pooled_bootstrap(runs, data_dir, decoder, test_set, n_samples):
    """Paired bootstrap p of ``decoder`` against the baseline on ``test_set``:
    the translations of every seed both have, concatenated (None when they
    share no seed)."""
    from machinery.bleu import bleu_metric
    from evaluation.evaluate import paired_bootstrap_p
    hyps, refs, _, seeds = pooled(runs, data_dir, (BASELINE, decoder), test_set)
    if not seeds or n_samples <= 0:
        return None, seeds
    metric = bleu_metric(tokenized=True, lowercase=True)
    return paired_bootstrap_p([hyps[BASELINE], hyps[decoder]], refs, metric, n_samples,
                              seed=12345)[1], seeds


def seeds_welch_p(baseline, results, test_set):
    """Welch's t-test of the seeds' tokenised lowercased BLEU on
    ``test_set``, ``results`` against ``baseline`` (None under two seeds a
    side): the seeds as the sample, where the bootstrap's sample is the test
    set's sentences."""
    from scipy.stats import ttest_ind
    a, b = ([r['test'][test_set]['bleu_tok_lc'] for r in rs] for rs in (baseline, results))
    if min(len(a), len(b)) < 2:
        return None
    return float(ttest_ind(b, a, equal_var=False).pvalue)


def seeds_text(seeds):
    """'seed 3', 'seeds 1, 2'."""
    return '%s %s' % ('seed' if len(seeds) == 1 else 'seeds', ', '.join(map(str, seeds)))


def p_cell(values, seeds=None):
    cell = ', '.join('–' if p is None else '%.3f' % p for p in values)
    return cell + (' (%s)' % seeds_text(seeds) if seeds else '')


def by_length(runs, data_dir, png, test_set=LENGTH_TEST_SET):
    """BLEU (tokenised, lowercased) of each decoder by source length on
    ``test_set``, over the seeds every decoder has (markdown lines; the
    figure into png); no lines when no seed is shared."""
    from evaluation import length_buckets
    decoders = sorted(decoder_rows(runs), key=lambda d: d != BASELINE)
    hyps, refs, sources, seeds = pooled(runs, data_dir, decoders, test_set)
    if not seeds:
        return ['', '%s by source length: no seed whose translations every decoder '
                'has kept' % SHORT[test_set]]
    rows = length_buckets.bleu_by_length([hyps[d] for d in decoders], refs,
                                         [len(words(line)) for line in sources],
                                         tokenized=True, lowercase=True)
    # each test sentence is in the pool once a seed: count it once
    rows = [dict(row, sentences=row['sentences'] // len(seeds)) for row in rows]
    pool = seeds_text(seeds) + (' pooled' if len(seeds) > 1 else '')
    length_buckets.plot_rows(rows, decoders, png, 'BLEU by source length, %s (%s)'
                             % (SHORT[test_set], pool))
    return ['', '%s by source length (tokenised lowercased BLEU over the translations of '
            '%s; sentences: of the test set):' % (SHORT[test_set], pool), ''] + \
        length_buckets.format_rows(rows, decoders)


def table(runs, data_dir, n_samples):
    """The results table (markdown lines)."""
    head = ['decoder', 'runs', 'updates', 'valid BLEU']
    head += ['%s tok / sacre' % SHORT[s] for s in TEST_SETS]
    head += ['p vs baseline, paired bootstrap of the pooled seeds (%s)'
             % ', '.join(SHORT[s] for s in TEST_SETS),
             "p vs baseline, Welch's t over the seeds"]
    lines = ['| ' + ' | '.join(head) + ' |', '|' + '---|' * len(head)]
    rows = decoder_rows(runs)
    for decoder, results in rows.items():
        cells = [decoder, str(len(results)),
                 ', '.join(str(r['updates']) for r in results),
                 fmt(*mean_std([r['best_valid_bleu'] for r in results]))]
        for s in TEST_SETS:
            tok = mean_std([r['test'][s]['bleu_tok_lc'] for r in results])
            sacre = mean_std([r['test'][s].get('sacrebleu_lc') for r in results])
            cells.append('%s / %s' % (fmt(*tok), fmt(*sacre)))
        if decoder == BASELINE or BASELINE not in rows:
            cells += ['–', '–']
        else:
            tests = [pooled_bootstrap(runs, data_dir, decoder, s, n_samples) for s in TEST_SETS]
            cells.append(p_cell([p for p, _ in tests], tests[0][1]))
            cells.append(p_cell([seeds_welch_p(rows[BASELINE], results, s)
                                 for s in TEST_SETS]))
        lines.append('| ' + ' | '.join(cells) + ' |')
    return lines


def portable_command(command, data_dir, runs_dir):
    """``command`` as run from the project's root with the README's layout:
    the interpreter .venv/bin/python, nmt.py without its folder, the data
    under data/multi30k and the runs under runs/multi30k; an MPI launcher
    (``mpirun -np N``, train_multi30k.sh --workers) stays in front."""
    import shlex
    places = [(os.path.abspath(data_dir), 'data/multi30k'),
              (os.path.abspath(runs_dir), 'runs/multi30k')]
    words = shlex.split(command)
    from machinery import distributed
    workers, command = distributed.split_mpirun(words)
    launcher = ['mpirun', '-np', str(workers)] if len(command) < len(words) else []
    words = command
    out = launcher + ['.venv/bin/python'] + [
        os.path.basename(w) if w.endswith('/nmt.py') else w for w in words[1:]]
    for i, word in enumerate(out):
        for old, new in places:
            if word == old or word.startswith(old + os.sep):
                out[i] = new + word[len(old):]
    return ' '.join(shlex.quote(w) for w in out)


def training_log_of(folder):
    """The training log of the run whose results are in ``folder`` (the run's
    folder, or its at-N/)."""
    if os.path.basename(folder).startswith('at-'):
        folder = os.path.dirname(folder)
    return os.path.join(folder, LOG)


def copy_into(path, copy):
    """``path`` to ``copy`` (nothing when it is that file already)."""
    os.makedirs(os.path.dirname(copy), exist_ok=True)
    if not (os.path.exists(copy) and os.path.samefile(path, copy)):
        shutil.copyfile(path, copy)


def keep_runs(runs, out):
    """Each run's training log into OUT/logs/ and its test translations into
    OUT/translations/NAME/; the runs as kept there."""
    kept = []
    for run in runs:
        name = run_name(run.result)
        log = os.path.join('logs', name + '.log.jsonl')
        copy_into(run.log, os.path.join(out, log))
        translations = None
        if run.translations:
            translations = os.path.join(out, 'translations', name)
            for s in TEST_SETS:
                copy_into(os.path.join(run.translations, s + '.hyp.tok'),
                          os.path.join(translations, s + '.hyp.tok'))
        kept.append(Run(dict(run.result, log=log), os.path.join(out, log), translations))
    return kept


def plot_validation(runs, png, at=None):
    """Validation cost and BLEU of every run (up to update ``at``)."""
    from machinery import plots
    fig, axes = plots.plt.subplots(1, 2, figsize=(11, 4))
    for run in runs:
        events = [e for e in read_training_log(run.log) if at is None or e['uidx'] <= at]
        label = '%s seed %d' % (run.result['decoder'], run.result['seed'])
        for ax, event, key in ((axes[0], 'validation', 'cost'), (axes[1], 'bleu', 'bleu')):
            points = [(e['uidx'], e[key]) for e in events if e['event'] == event]
            if points:
                ax.plot(*zip(*points), marker='.', label=label)
    plots.finish_panels(fig, axes, ('validation cost (per sentence)',
                                    'validation BLEU (beam 5, tokenised lowercased)'), png,
                        legend_size=7)


def gather(args):
    runs = keep_runs(all_runs(args), args.out)
    write_json(os.path.join(args.out, 'results.json'), [r.result for r in runs], indent=2)
    lines = table(runs, args.data, args.bootstrap)
    lines += by_length(runs, args.data, os.path.join(args.out, 'by_length.png'))
    write_text(os.path.join(args.out, 'results.md'), '\n'.join(lines) + '\n')
    plot_validation(runs, os.path.join(args.out, 'validation.png'), args.at)
    print('\n'.join(lines))


def parse_args(argv):
    p = cli.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('runs_dir', metavar='RUNS_DIR')
    p.add_argument('--data', required=True, help='the prepared data (pipeline/multi30k.py)')
    p.add_argument('--out', required=True, help='the folder of results.json, logs/, ...')
    p.add_argument('--bootstrap', type=int, default=1000,
                   help='resamples of the paired bootstrap (0: none)')
    p.add_argument('--at', type=cli.positive_int, metavar='N',
                   help='the runs as scored at N updates (train_multi30k.sh --score-at N)')
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(cli.arguments(argv))
    return cli.run(lambda: gather(args))


if __name__ == '__main__':
    sys.exit(main())
