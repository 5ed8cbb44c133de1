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
skipped with a note.

``--at N`` gathers the runs as scored at an equal budget of N updates
(``train_multi30k.sh --score-at N``: each run's ``at-N/`` folder; a run that
ended by update N is its own), with the validation curves up to update N.
"""
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


def budget_folder(run_dir, at):
    """Where the run's scores at ``at`` updates are: its at-N/ folder, or the
    run itself when it ended by update N (its own result is the same)."""
    own = os.path.join(run_dir, 'result.json')
    if (not os.path.exists(os.path.join(run_dir, 'at-%d' % at, 'result.json'))
            and os.path.exists(own) and load_json(own)['updates'] <= at):
        return run_dir
    return os.path.join(run_dir, 'at-%d' % at)


def find_runs(runs_dir, at=None):
    """[(folder, result)] of the finished runs, by decoder then seed; with
    ``at``, their scores at that budget (folder: the run's at-N/)."""
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
        runs.append((folder, load_json(result_path)))
    if not runs:
        raise InputError('%s: no run folder with a %sresult.json'
                         % (runs_dir, 'at-%d/' % at if at else ''))
    return sorted(runs, key=lambda r: (r[1]['decoder'] != BASELINE, r[1]['decoder'],
                                       r[1]['seed']))


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
    for _, result in runs:
        rows.setdefault(result['decoder'], []).append(result)
    return rows


def pooled(runs, data_dir, decoders, test_set, kind='hyp.tok'):
    """The translations of ``decoders`` on ``test_set`` over the seeds all of
    them have, each decoder's seeds concatenated in the same order, with the
    reference and the source repeated as often: ({decoder: lines}, refs,
    sources, seeds)."""
    by_key = {(r['decoder'], r['seed']): folder for folder, r in runs}
    seeds = sorted(set.intersection(*[{s for d, s in by_key if d == decoder}
                                       for decoder in decoders]))
    ref = read_lines(os.path.join(data_dir, '%s.tok.de' % test_set))
    source = read_lines(os.path.join(data_dir, '%s.tok.en' % test_set))
    hyps = {decoder: sum((read_lines(os.path.join(by_key[(decoder, seed)],
                                                  '%s.%s' % (test_set, kind)),
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
        return None
    metric = bleu_metric(tokenized=True, lowercase=True)
    return paired_bootstrap_p([hyps[BASELINE], hyps[decoder]], refs, metric, n_samples,
                              seed=12345)[1]


def by_length(runs, data_dir, png, test_set=LENGTH_TEST_SET):
    """BLEU (tokenised, lowercased) of each decoder by source length on
    ``test_set``, over the seeds every decoder has (markdown lines; the
    figure into png); no lines when no seed is shared."""
    from evaluation import length_buckets
    decoders = sorted(decoder_rows(runs), key=lambda d: d != BASELINE)
    hyps, refs, sources, seeds = pooled(runs, data_dir, decoders, test_set)
    if not seeds:
        return []
    rows = length_buckets.bleu_by_length([hyps[d] for d in decoders], refs,
                                         [len(words(line)) for line in sources],
                                         tokenized=True, lowercase=True)
    # each test sentence is in the pool once a seed: count it once
    rows = [dict(row, sentences=row['sentences'] // len(seeds)) for row in rows]
    length_buckets.plot_rows(rows, decoders, png, 'BLEU by source length, %s (seeds %s pooled)'
                             % (SHORT[test_set], ', '.join(map(str, seeds))))
    return ['', '%s by source length (tokenised lowercased BLEU over the translations of '
            'seeds %s pooled; sentences: of the test set):'
            % (SHORT[test_set], ', '.join(map(str, seeds))), ''] + \
        length_buckets.format_rows(rows, decoders)


def table(runs, data_dir, n_samples):
    """The results table (markdown lines)."""
    head = ['decoder', 'runs', 'updates', 'valid BLEU']
    head += ['%s tok / sacre' % SHORT[s] for s in TEST_SETS]
    head += ['p vs baseline (%s)' % ', '.join(SHORT[s] for s in TEST_SETS)]
    lines = ['| ' + ' | '.join(head) + ' |', '|' + '---|' * len(head)]
    for decoder, results in decoder_rows(runs).items():
        cells = [decoder, str(len(results)),
                 ', '.join(str(r['updates']) for r in results),
                 fmt(*mean_std([r['best_valid_bleu'] for r in results]))]
        for s in TEST_SETS:
            tok = mean_std([r['test'][s]['bleu_tok_lc'] for r in results])
            sacre = mean_std([r['test'][s].get('sacrebleu_lc') for r in results])
            cells.append('%s / %s' % (fmt(*tok), fmt(*sacre)))
        if decoder == BASELINE:
            cells.append('–')
        else:
            ps = [pooled_bootstrap(runs, data_dir, decoder, s, n_samples) for s in TEST_SETS]
            cells.append(', '.join('–' if p is None else '%.3f' % p for p in ps))
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


def copy_logs(runs, out):
    """Each run's training log into OUT/logs/; {folder: the copy's name}."""
    os.makedirs(os.path.join(out, 'logs'), exist_ok=True)
    names = {}
    for folder, result in runs:
        name = '%s-seed%d.log.jsonl' % (result['decoder'], result['seed'])
        shutil.copyfile(training_log_of(folder), os.path.join(out, 'logs', name))
        names[folder] = os.path.join('logs', name)
    return names


def plot_validation(runs, png, at=None):
    """Validation cost and BLEU of every run (up to update ``at``)."""
    from machinery import plots
    fig, axes = plots.plt.subplots(1, 2, figsize=(11, 4))
    for folder, result in runs:
        events = [e for e in read_training_log(training_log_of(folder))
                  if at is None or e['uidx'] <= at]
        label = '%s seed %d' % (result['decoder'], result['seed'])
        for ax, event, key in ((axes[0], 'validation', 'cost'), (axes[1], 'bleu', 'bleu')):
            points = [(e['uidx'], e[key]) for e in events if e['event'] == event]
            if points:
                ax.plot(*zip(*points), marker='.', label=label)
    plots.finish_panels(fig, axes, ('validation cost (per sentence)',
                                    'validation BLEU (beam 5, tokenised lowercased)'), png,
                        legend_size=7)


def gather(args):
    runs = find_runs(args.runs_dir, args.at)
    os.makedirs(args.out, exist_ok=True)
    logs = copy_logs(runs, args.out)
    write_json(os.path.join(args.out, 'results.json'),
               [dict(result, log=logs[folder],
                     command=portable_command(result.get('command', ''), args.data,
                                              args.runs_dir))
                for folder, result in runs], indent=2)
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
