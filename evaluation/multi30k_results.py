"""Gather the Multi30k study into its results page (docs/multi30k.md#results):
the runs of train_multi30k.sh, the ensembles and the Marian anchors of
pipeline/multi30k_study.py.

    python evaluation/multi30k_results.py RUNS_DIR --data data/multi30k --out OUT \\
        [--page docs/multi30k.md --readme README.md] [--bootstrap 2000] [--at N]

RUNS_DIR holds one folder a step, each with its result.json: ``DECODER-seedSEED/``
(a run: its training log and test translations too), ``DECODER-ensemble/``
(an ensemble of a decoder's seeds), ``marian-*/`` (an anchor).  The steps
gathered into OUT before stay when their folders are gone (a fresh machine):
they are read from OUT; a run's folder that trains again (its log's last
training has not ended) is left out, its run kept as gathered.  Writes,
only once every figure could be made (a
translation with the wrong number of lines, a missing log: one error line,
nothing written):

* ``OUT/results.json``: ``runs``, ``ensembles``, ``anchors`` (each step's
  result.json, its command as from the project's root with the README's
  layout), and the figures computed from them: ``decoders`` (mean and
  standard deviation over the seeds), ``comparisons`` (each residual decoder
  against the baseline on each test set: Welch's difference over the seeds
  with its 95% interval, the paired bootstrap over the test sentences with
  the seeds pooled, both with Holm's correction, and what the interval says
  of the papers' gains), each ensemble's ``gain_over_seeds`` and
  ``against_baseline`` (a residual decoder's ensemble against the baseline's
  of the same seeds: the paired bootstrap over the test sentences, Holm's
  correction over those comparisons), ``by_length`` and ``settings``;
* ``OUT/logs/NAME.log.jsonl`` and ``OUT/translations/NAME/TEST.hyp.tok``:
  each step's training log (absolute paths made relative) and test
  translations; an anchor's Marian logs as ``OUT/logs/NAME.train.log`` and
  ``NAME.valid.log``;
* ``OUT/validation.png`` (validation cost and BLEU of every run, each
  anchor's validation BLEU) and
  ``OUT/by_length.png``;
* the tables (evaluation/study_tables.py): into ``--page`` between its
  markers ``<!-- results: begin -->`` and ``<!-- results: end -->``, and the
  short table into ``--readme`` between ``<!-- multi30k table: begin -->`` and
  ``<!-- multi30k table: end -->``; without --page into ``OUT/results.md``.

``--at N`` gathers the runs as scored at an equal budget of N updates
(``train_multi30k.sh --score-at N``: each run's ``at-N/``; a run that ended by
update N is its own), with the validation curves up to update N.
"""
import collections
import glob
import os
import re
import shutil
import statistics
import sys
import tempfile

if __name__ == '__main__':  # run as a file: import from the project root, not this folder
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from evaluation import study_statistics as stats
from evaluation import study_tables
from machinery import cli
from machinery.output_files import write_json, write_text
from machinery.pickle_and_json import load_json
from machinery.text_io import InputError, read_lines
from machinery.training_log import last_training_ended, read_training_log
from machinery.vocab import words
from pipeline import marian_multi30k as marian

TEST_SETS = ('test_2016_flickr', 'test_2017_flickr', 'test_2017_mscoco')
SHORT = {'test_2016_flickr': 'test2016', 'test_2017_flickr': 'test2017',
         'test_2017_mscoco': 'mscoco2017'}
TRG, SRC = 'de', 'en'
BASELINE = 'baseline'
DECODER_ORDER = (BASELINE, 'mean', 'attentive')
LENGTH_TEST_SET = 'test_2016_flickr'
BUDGET = 22000
# the attentive and mean residual decoders' gains over the baseline in the
# AAAI paper's Table 1 (BLEU: en-de, es-en, en-zh; the smallest and largest)
PAPERS_GAINS = {'attentive': (0.6, 1.4), 'mean': (0.3, 1.0)}
# a difference is shown when its p (after Holm's correction) is below this
SIGNIFICANCE = 0.05
LOG = 'model.npz.log.jsonl'
VALID_LOG = 'valid.log'
MARIAN_LOGS = ('train.log', VALID_LOG)   # an anchor's: Marian's own logs
PAGE_MARKERS = ('<!-- results: begin -->', '<!-- results: end -->')
README_MARKERS = ('<!-- multi30k table: begin -->', '<!-- multi30k table: end -->')
KINDS = ('runs', 'ensembles', 'anchors', 'earlier')
# 'earlier': a run trained again under its name (a re-run at a later
# commit); the first training's result, kept beside the one the table uses

# a step as gathered: its kind, name, result.json (with its portable
# command), its training log (None: none) and the folder of its TEST.hyp.tok
Step = collections.namedtuple('Step', 'kind name result log translations')


# --------------------------------------------------------------------------
# finding the steps

def kind_of(folder_name, result):
    if result.get('ensemble'):
        return 'ensembles'
    if result.get('system') == 'marian' or folder_name.startswith('marian'):
        return 'anchors'
    return 'runs'


def budget_folder(run_dir, at):
    """Where the run's scores at ``at`` updates are: its at-N/ folder, or the
    run itself when it ended by update N (its own result is the same)."""
    own = os.path.join(run_dir, 'result.json')
    if (not os.path.exists(os.path.join(run_dir, 'at-%d' % at, 'result.json'))
            and os.path.exists(own) and load_json(own)['updates'] <= at):
        return run_dir
    return os.path.join(run_dir, 'at-%d' % at)


def marian_log_copy(name, log):
    """Where the gathering keeps an anchor's Marian ``log`` (of MARIAN_LOGS),
    relative to OUT."""
    return os.path.join('logs', '%s.%s' % (name, log))


def find_steps(runs_dir, data_dir, at=None):
    """[Step] of the folders of ``runs_dir`` with a result.json."""
    steps = []
    for step_dir in sorted(glob.glob(os.path.join(runs_dir, '*'))):
        if not os.path.isdir(step_dir) or os.path.basename(step_dir).startswith('calibration'):
            continue
        folder = budget_folder(step_dir, at) if at else step_dir
        result_path = os.path.join(folder, 'result.json')
        if not os.path.exists(result_path):
            print('note: %s has no result.json (still training?): left out' % folder,
                  file=sys.stderr)
            continue
        result = load_json(result_path)
        kind = kind_of(os.path.basename(step_dir), result)
        if at and kind != 'runs':
            continue
        if kind == 'runs' and not at and not training_ended(step_dir):
            print('note: %s is training again (or was interrupted): its result.json is '
                  'of an earlier training: left out' % step_dir, file=sys.stderr)
            continue
        name = os.path.basename(step_dir)
        result = dict(result, name=name,
                      command=portable_command(result.get('command', ''), data_dir, runs_dir))
        log = training_log_of(folder) if kind == 'runs' else None
        if kind == 'anchors':
            result['logs'] = [marian_log_copy(name, f) for f in MARIAN_LOGS
                              if os.path.exists(os.path.join(folder, f))]
        steps.append(Step(kind, name, result, log, folder))
    return steps


def kept_steps(out):
    """[Step] gathered into ``out`` before."""
    path = os.path.join(out, 'results.json')
    if not os.path.exists(path):
        return []
    kept = load_json(path)
    if isinstance(kept, list):          # results.json of before the ensembles: runs only
        kept = {'runs': [dict(r, name='%s-seed%d' % (r['decoder'], r['seed'])) for r in kept]}
    steps = []
    for kind in KINDS:
        for result in kept.get(kind, []):
            translations = os.path.join(out, 'translations', result['name'])
            steps.append(Step(kind, result['name'], result,
                              os.path.join(out, result['log']) if result.get('log') else None,
                              translations if os.path.isdir(translations) else None))
    return steps


def all_steps(args):
    steps = find_steps(args.runs_dir, args.data, args.at)
    present = {s.name: s for s in steps}
    kept = kept_steps(args.out)
    for step in kept:
        if step.name not in present:
            steps.append(step)
        elif step.kind == 'runs' and not same_training(step.result, present[step.name].result):
            steps.append(as_earlier(step, kept))
    if not any(s.kind == 'runs' for s in steps):
        raise InputError('%s: no run folder with a %sresult.json'
                         % (args.runs_dir, 'at-%d/' % args.at if args.at else ''))
    check_logs(steps)
    steps = [s._replace(result=dict(s.result, stop_reason=stop_of(s))) if s.kind == 'runs'
             else s for s in steps]
    return sorted(steps, key=step_order)


def same_training(kept, result):
    """The kept result is the run's own (gathered before), not that of an
    earlier training under its name: the same commit and training time."""
    return all(kept.get(k) == result.get(k) for k in ('commit', 'train_wall_seconds'))


def as_earlier(step, kept):
    """A kept run that a new training of its name replaces, as an 'earlier'
    step named NAME.earlierN (N: one more than the ``kept`` earlier ones of
    that name)."""
    n = 1 + sum(1 for s in kept if s.kind == 'earlier' and s.result['run'] == step.name)
    name = '%s.earlier%d' % (step.name, n)
    return Step('earlier', name, dict(step.result, name=name, run=step.name), step.log,
                step.translations)


def step_order(step):
    """The decoders in the registry's order of the study (DECODER_ORDER, then
    the others by name), each by seed."""
    decoder = step.result['decoder']
    rank = DECODER_ORDER.index(decoder) if decoder in DECODER_ORDER else len(DECODER_ORDER)
    return rank, decoder, step.result.get('seed', 0), step.name


def portable_command(command, data_dir, runs_dir):
    """``command`` as run from the project's root with the README's layout:
    the interpreter .venv/bin/python, the project's scripts without their
    folder, the data under data/multi30k and the runs under runs/multi30k; an
    MPI launcher (``mpirun -np N``) stays in front."""
    import shlex
    from machinery import distributed
    if not command:
        return command
    places = [(os.path.abspath(data_dir), 'data/multi30k'),
              (os.path.abspath(runs_dir), 'runs/multi30k')]
    words_ = shlex.split(command)
    workers, command_words = distributed.split_mpirun(words_)
    launcher = ['mpirun', '-np', str(workers)] if len(command_words) < len(words_) else []
    first = command_words[0]
    interpreter = ['.venv/bin/python'] if 'python' in os.path.basename(first) else [
        os.path.basename(first)]
    out = launcher + interpreter + [
        os.path.basename(w) if w.endswith(('/nmt.py', '/translate.py')) else w
        for w in command_words[1:]]
    for i, word in enumerate(out):
        for old, new in places:
            if word == old or word.startswith(old + os.sep):
                out[i] = new + word[len(old):]
    return ' '.join(shlex.quote(w) for w in out)


def training_ended(run_dir):
    """Whether the last training in ``run_dir`` ended (its log says so), so
    that its result.json is that training's, not an earlier one's that a
    new training in the same folder will replace."""
    log = os.path.join(run_dir, LOG)
    events = read_training_log(log) if os.path.exists(log) else []
    started = any(e['event'] == 'start' for e in events)   # check_logs: a log without
    return not started or last_training_ended(events)      # its start is an error


def training_log_of(folder):
    """The training log of the run whose results are in ``folder`` (the run's
    folder, or its at-N/)."""
    if os.path.basename(folder).startswith('at-'):
        folder = os.path.dirname(folder)
    return os.path.join(folder, LOG)


# an absolute path of the machine a run ran on, up to its runs/ or data/ folder
MACHINE_PATH = re.compile(r'(?<![\w.])/(?:[^\s"\'/]+/)*?((?:runs|data)/)')


def relative_paths(text):
    """``text`` with the absolute paths of runs/ and data/ made relative
    ('/scratch/me/runs/multi30k/x' -> 'runs/multi30k/x')."""
    return MACHINE_PATH.sub(r'\1', text)


# --------------------------------------------------------------------------
# checks

def check_translations(steps, data_dir):
    """InputError naming the first kept translation whose line count is not
    its test set's (before anything is written)."""
    for s in TEST_SETS:
        lines = len(read_lines(reference(data_dir, s)))
        for step in steps:
            if step.translations is None:
                continue
            path = os.path.join(step.translations, s + '.hyp.tok')
            got = len(read_lines(path, allow_empty=True))
            if got != lines:
                raise InputError('%s: %d lines, but %s has %d: a translation cut short or of '
                                 'another test set' % (path, got, reference(data_dir, s), lines))


def check_logs(steps):
    for step in steps:
        if step.log is not None and not [e for e in read_training_log(step.log)
                                         if e['event'] == 'start']:
            raise InputError('%s: a training log without its start (empty?)' % step.log)


def reference(data_dir, test_set):
    return os.path.join(data_dir, '%s.tok.%s' % (test_set, TRG))


# --------------------------------------------------------------------------
# the figures

def stop_of(step):
    """The run's stopping reason (its result's, else its log's last stop)."""
    if step.result.get('stop_reason'):
        return step.result['stop_reason']
    stops = [e for e in read_training_log(step.log) if e['event'] == 'stop']
    return stops[-1]['reason'] if stops else None


def by_budget(result):
    """True: stopped by the update budget (finish_after, or by hand after the
    budget); False: by BLEU patience."""
    return result.get('stop_reason') != 'bleu_early_stop'


def summary(values):
    values = [v for v in values if v is not None]
    if not values:
        return None
    mean, half = stats.mean_interval(values)
    return {'mean': mean, 'sd': statistics.stdev(values) if len(values) > 1 else None,
            'ci95_half_width': half, 'n': len(values)}


def decoder_figures(runs):
    by_decoder = collections.OrderedDict()
    for r in runs:
        by_decoder.setdefault(r['decoder'], []).append(r)
    out = []
    for decoder, results in by_decoder.items():
        budget = sum(1 for r in results if by_budget(r))
        out.append({'decoder': decoder, 'seeds': [r['seed'] for r in results],
                    'stopped': {'budget': budget, 'patience': len(results) - budget},
                    'valid_bleu': summary([r['best_valid_bleu'] for r in results]),
                    'test': {s: summary([r['test'][s]['bleu_tok_lc'] for r in results])
                             for s in TEST_SETS},
                    'test_sacrebleu': {s: summary([r['test'][s].get('sacrebleu_lc')
                                                   for r in results]) for s in TEST_SETS}})
    return out


def reading(decoder, welch):
    """What the seeds' 95% interval of a difference says (a sentence); an
    interval that excludes 0 says whether Holm's correction (welch['p_holm'],
    when given) keeps it."""
    if welch is None:
        return 'too few seeds for an interval'
    low, high = welch['low'], welch['high']
    span = 'between %s and %s BLEU' % (study_tables.signed(low), study_tables.signed(high))
    if low <= 0 <= high:
        return span + ': ' + reading_across_zero(decoder, high)
    text = span + ': %s the baseline' % ('ahead of' if low > 0 else 'behind')
    p_holm = welch.get('p_holm')
    if p_holm is not None and p_holm >= SIGNIFICANCE:
        text += " before the correction for the comparisons, not after it (Holm's p %.3f)" \
            % p_holm
    smallest, largest = PAPERS_GAINS.get(decoder, (None, None))
    return text if smallest is None else text + '; ' + papers_gains_against(
        smallest, largest, low, high)


def papers_gains_against(smallest, largest, low, high):
    """Where the papers' gains (smallest, largest) stand against an interval."""
    if low > largest:
        return "above the papers' largest gain (+%.1f)" % largest
    if high < smallest:
        return "the papers' +%.1f to +%.1f excluded" % (smallest, largest)
    holds_smallest, holds_largest = low <= smallest, high >= largest
    if holds_smallest and holds_largest:
        return "the papers' +%.1f to +%.1f inside it" % (smallest, largest)
    if holds_smallest:
        return "the papers' smallest (+%.1f) inside it, their largest (+%.1f) excluded" % (
            smallest, largest)
    if holds_largest:
        return "the papers' largest (+%.1f) inside it, their smallest (+%.1f) excluded" % (
            largest, smallest)
    return "inside the papers' +%.1f to +%.1f" % (smallest, largest)


def reading_across_zero(decoder, high):
    """reading() of an interval that holds 0: which of the papers' gains it
    holds too."""
    smallest, largest = PAPERS_GAINS.get(decoder, (None, None))
    if smallest is None:
        return 'no difference is excluded'
    if high < smallest:
        return "no gain inside it, the papers' +%.1f to +%.1f excluded" % (smallest, largest)
    if high < largest:
        return "no gain and the papers' smallest (+%.1f) inside it, their largest " \
            '(+%.1f) excluded' % (smallest, largest)
    return "no gain and the papers' +%.1f to +%.1f inside it: not decided" % (
        smallest, largest)


class Statistics(object):
    """The sentence statistics of every kept translation, computed once."""

    def __init__(self, data_dir):
        self.data_dir, self.cache = data_dir, {}
        self.refs = {s: read_lines(reference(data_dir, s)) for s in TEST_SETS}

    def of(self, step, test_set):
        key = (step.name, test_set)
        if key not in self.cache:
            hyps = read_lines(os.path.join(step.translations, test_set + '.hyp.tok'),
                              allow_empty=True)
            self.cache[key] = stats.sentence_statistics(hyps, self.refs[test_set])
        return self.cache[key]

    def pool(self, steps, test_set):
        import numpy
        return numpy.stack([self.of(step, test_set) for step in steps])


def with_translations(steps, decoder):
    return [s for s in steps if s.kind == 'runs' and s.result['decoder'] == decoder
            and s.translations]


def comparisons(steps, decoders, sentence_stats, n_samples):
    results = {d['decoder']: [s.result for s in steps if s.kind == 'runs'
                              and s.result['decoder'] == d['decoder']] for d in decoders}
    out = []
    if BASELINE not in results:
        return out
    for d in decoders:
        decoder = d['decoder']
        if decoder == BASELINE:
            continue
        for s in TEST_SETS:
            welch = stats.welch([r['test'][s]['bleu_tok_lc'] for r in results[BASELINE]],
                                [r['test'][s]['bleu_tok_lc'] for r in results[decoder]])
            welch = welch._asdict() if welch else None
            base, mine = with_translations(steps, BASELINE), with_translations(steps, decoder)
            boot = None
            if base and mine and n_samples > 0:
                boot = stats.pooled_bootstrap(sentence_stats.pool(base, s),
                                              sentence_stats.pool(mine, s), n_samples)._asdict()
                boot.update(baseline_seeds=[b.result['seed'] for b in base],
                            seeds=[m.result['seed'] for m in mine])
            out.append({'decoder': decoder, 'test_set': s, 'welch': welch, 'bootstrap': boot})
    for key in ('welch', 'bootstrap'):
        adjusted = stats.holm([c[key]['p'] if c[key] else None for c in out])
        for c, p in zip(out, adjusted):
            if c[key]:
                c[key]['p_holm'] = p
    for c in out:
        c['reading'] = reading(c['decoder'], c['welch'])
    return out


def ensemble_figures(steps, ensembles, runs, sentence_stats, n_samples):
    """Each ensemble's gain over its seeds' mean, and each residual decoder's
    ensemble against the baseline's ensemble of the same seeds."""
    against = ensemble_comparisons([s for s in steps if s.kind == 'ensembles'],
                                   sentence_stats, n_samples)
    out = []
    for e in ensembles:
        seeds = [r['test'][TEST_SETS[0]]['bleu_tok_lc'] for r in runs
                 if r['decoder'] == e['decoder'] and r['seed'] in e['seeds']]
        gain = (e['test'][TEST_SETS[0]]['bleu_tok_lc'] - statistics.mean(seeds)
                if len(seeds) == len(e['seeds']) else None)
        out.append(dict(e, gain_over_seeds=gain, against_baseline=against.get(e['name'])))
    return out


def ensemble_comparisons(ensembles, sentence_stats, n_samples):
    """{ensemble name: {test set: bootstrap}}: the paired bootstrap over the
    test sentences of a residual decoder's ensemble against the baseline's
    ensemble of the same seeds (one translation each, so the test set's
    uncertainty only); Holm's correction over all of them."""
    if n_samples <= 0:
        return {}
    baselines = {tuple(e.result['seeds']): e for e in ensembles
                 if e.result['decoder'] == BASELINE and e.translations}
    found = []
    for e in ensembles:
        base = baselines.get(tuple(e.result['seeds']))
        if e.result['decoder'] == BASELINE or not (base and e.translations):
            continue
        for s in TEST_SETS:
            boot = stats.pooled_bootstrap(sentence_stats.pool([base], s),
                                          sentence_stats.pool([e], s), n_samples)
            found.append((e.name, s, boot._asdict()))
    adjusted = stats.holm([boot['p'] for _, _, boot in found])
    out = {}
    for (name, s, boot), p in zip(found, adjusted):
        out.setdefault(name, {})[s] = dict(boot, p_holm=p)
    return out


def length_figures(steps, decoders, sentence_stats, data_dir, n_samples,
                   test_set=LENGTH_TEST_SET):
    """test_set's BLEU by source length of each decoder over its runs with
    translations, and each residual decoder's difference with its bootstrap
    interval (None when a decoder has no translations)."""
    from evaluation import length_buckets
    import numpy
    names = [d['decoder'] for d in decoders]
    pools = {d: with_translations(steps, d) for d in names}
    if not all(pools.values()) or BASELINE not in pools:
        return None
    lengths = [len(words(line)) for line in read_lines(
        os.path.join(data_dir, '%s.tok.%s' % (test_set, SRC)))]
    edges = length_buckets.DEFAULT_EDGES
    buckets = []
    for b, bucket in enumerate(length_buckets.bucket_names(edges)):
        subset = numpy.array([i for i, n in enumerate(lengths)
                              if length_buckets.bucket_of(n, edges) == b])
        if not len(subset):
            continue
        pooled = {d: sentence_stats.pool(pools[d], test_set) for d in names}
        buckets.append({
            'bucket': bucket, 'sentences': int(len(subset)),
            'bleu': {d: stats.pooled_bleu(pooled[d], subset) for d in names},
            'difference': {d: stats.pooled_bootstrap(pooled[BASELINE], pooled[d],
                                                     n_samples, subset=subset)._asdict()
                           for d in names if d != BASELINE}})
    pool = '; '.join('%s %s' % (study_tables.name(d), seeds_text(
        [s.result['seed'] for s in pools[d]])) for d in names)
    return {'test_set': test_set, 'decoders': names, 'pool': pool, 'buckets': buckets}


def seeds_text(seeds):
    """'seed 3', 'seeds 3, 4'."""
    return '%s %s' % ('seed' if len(seeds) == 1 else 'seeds', ', '.join(map(str, seeds)))


def settings(n_samples):
    from machinery.bleu import detok_signature
    return {'test_sets': list(TEST_SETS), 'short_names': SHORT, 'test_beam': 12,
            'budget_updates': BUDGET, 'bootstrap_samples': n_samples,
            'papers_gains': {k: '+%.1f to +%.1f' % v for k, v in PAPERS_GAINS.items()},
            'sacrebleu_signature': detok_signature(TRG, lowercase=True)}


def figures_of(steps, data_dir, n_samples):
    """Everything results.json holds: the steps' results and the figures."""
    kept = {kind: [as_kept(s) for s in steps if s.kind == kind] for kind in KINDS}
    runs = kept['runs']
    decoders = decoder_figures(runs)
    sentence_stats = Statistics(data_dir)
    return {
        'settings': settings(n_samples),
        'runs': runs,
        'ensembles': ensemble_figures(steps, kept['ensembles'], runs, sentence_stats,
                                      n_samples),
        'anchors': kept['anchors'],
        'earlier': kept['earlier'],
        'decoders': decoders,
        'comparisons': comparisons(steps, decoders, sentence_stats, n_samples),
        'by_length': length_figures(steps, decoders, sentence_stats, data_dir,
                                    n_samples) if n_samples > 0 else None}


# --------------------------------------------------------------------------
# writing

def copy_text(path, copy, transform=None):
    """``path`` to ``copy`` (``transform`` applied to its text)."""
    with open(path, encoding='utf-8') as f:
        text = f.read()
    os.makedirs(os.path.dirname(copy), exist_ok=True)
    write_text(copy, transform(text) if transform else text)


def as_kept(step):
    """``step``'s result as results.json keeps it: with the name of its log's
    copy (OUT/logs/NAME.log.jsonl) when it has a log."""
    if step.log is None:
        return step.result
    return dict(step.result, log=os.path.join('logs', step.name + '.log.jsonl'))


def keep_steps(steps, out):
    """Each step's training log into OUT/logs/ (absolute paths made relative)
    and its test translations into OUT/translations/NAME/; an earlier
    training's first (its files are those its run's copies replace)."""
    for step in sorted(steps, key=lambda s: s.kind != 'earlier'):
        if step.log is not None:
            copy_text(step.log, os.path.join(out, as_kept(step)['log']), relative_paths)
        for copy in step.result.get('logs', []):   # an anchor's, from its folder
            source = os.path.join(step.translations or '',
                                  os.path.basename(copy)[len(step.name) + 1:])
            if os.path.exists(source):
                copy_text(source, os.path.join(out, copy), relative_paths)
        if step.translations:
            for s in TEST_SETS:
                source = os.path.join(step.translations, s + '.hyp.tok')
                copy = os.path.join(out, 'translations', step.name, s + '.hyp.tok')
                if not (os.path.exists(copy) and os.path.samefile(source, copy)):
                    copy_text(source, copy)


def decoder_colours(decoders):
    """{decoder: colour}: one colour a decoder, in every figure."""
    from machinery import plots
    cycle = plots.plt.rcParams['axes.prop_cycle'].by_key()['color']
    return {d: cycle[k % len(cycle)] for k, d in enumerate(decoders)}


def anchor_validation_bleu(step, out):
    """[(update, BLEU)] of an anchor's validations: its folder's valid.log
    (Marian's), else the copy gathered into ``out`` before."""
    for path in (os.path.join(step.translations or '', VALID_LOG),
                 os.path.join(out, marian_log_copy(step.name, VALID_LOG))):
        if os.path.exists(path):
            return marian.validation_points(read_lines(path, allow_empty=True))['translation']
    return []


def plot_validation(steps, png, out, at=None):
    """Validation cost and BLEU of every run (up to update ``at``): a
    colour a decoder, a line a seed; each Marian anchor's BLEU (validated by
    the same script) in black, a line style each."""
    from machinery import plots
    runs = [s for s in steps if s.kind == 'runs' and s.log is not None]
    colours = decoder_colours(list(collections.OrderedDict.fromkeys(
        s.result['decoder'] for s in runs)))
    fig, axes = plots.plt.subplots(1, 2, figsize=(11, 4))
    labelled = set()
    for step in runs:
        decoder = step.result['decoder']
        events = [e for e in read_training_log(step.log) if at is None or e['uidx'] <= at]
        label = None if decoder in labelled else study_tables.name(decoder)
        labelled.add(decoder)
        for ax, event, key in ((axes[0], 'validation', 'cost'), (axes[1], 'bleu', 'bleu')):
            points = [(e['uidx'], e[key]) for e in events if e['event'] == event]
            if points:
                ax.plot(*zip(*points), marker='.', linewidth=1, color=colours[decoder],
                        alpha=0.8, label=label)
    anchors = [s for s in steps if s.kind == 'anchors'] if at is None else []
    for step, style in zip(anchors, ('--', ':', '-.')):
        points = anchor_validation_bleu(step, out)
        if points:
            axes[1].plot(*zip(*points), linestyle=style, linewidth=2, color='black', zorder=3,
                         label=study_tables.anchor_name(step.result))
    plots.finish_panels(fig, axes, ('validation cost (per sentence), a line a seed',
                                    'validation BLEU (beam 5, tokenised lowercased)'), png,
                        legend_size=7)


def plot_by_length(lengths, png):
    """BLEU by source length, and each residual decoder's difference to the
    baseline with its interval (a decoder keeps its colour in both panels;
    the intervals side by side)."""
    from machinery import plots
    fig, axes = plots.plt.subplots(1, 2, figsize=(11, 4))
    buckets = lengths['buckets']
    x = list(range(len(buckets)))
    colours = decoder_colours(lengths['decoders'])
    others = [d for d in lengths['decoders'] if d != BASELINE]
    for d in lengths['decoders']:
        style = dict(marker='o', color=colours[d], label=study_tables.name(d))
        axes[0].plot(x, [b['bleu'][d] for b in buckets], **style)
        if d == BASELINE:
            continue
        shift = 0.08 * (others.index(d) - (len(others) - 1) / 2.)
        diffs = [b['difference'][d] for b in buckets]
        axes[1].errorbar([i + shift for i in x], [v['difference'] for v in diffs], capsize=3,
                         yerr=[[v['difference'] - v['low'] for v in diffs],
                               [v['high'] - v['difference'] for v in diffs]], **style)
    axes[1].axhline(0, color='grey', linewidth=0.8)
    for ax in axes:
        ax.set_xticks(x)
        ax.set_xticklabels(['%s\n(%d)' % (b['bucket'], b['sentences']) for b in buckets])
    name = SHORT[lengths['test_set']]
    plots.finish_panels(fig, axes, ('%s BLEU, the seeds pooled' % name,
                                    'difference to the baseline, 95% bootstrap interval'),
                        png, xlabel='source words (sentences)', legend_size=7)


def replace_between(path, markers, lines):
    """``path`` with the text between its two marker lines replaced by ``lines``."""
    with open(path, encoding='utf-8') as f:
        text = f.read()
    begin, end = markers
    if text.count(begin) != 1 or text.count(end) != 1 or text.index(begin) > text.index(end):
        raise InputError('%s: needs the lines %s and %s once each, in that order, around '
                         'the generated table' % (path, begin, end))
    head, rest = text.split(begin)
    _, tail = rest.split(end)
    return head + begin + '\n' + '\n'.join(lines) + '\n' + end + tail


def gather(args):
    steps = all_steps(args)
    check_translations(steps, args.data)
    figures = figures_of(steps, args.data, args.bootstrap)
    page = (replace_between(args.page, PAGE_MARKERS, study_tables.page_block(figures))
            if args.page else None)
    readme = (replace_between(args.readme, README_MARKERS, study_tables.readme_block(figures))
              if args.readme else None)
    # every figure is made: now the files
    scratch = tempfile.mkdtemp(dir=args.out if os.path.isdir(args.out) else None)
    try:
        plot_validation(steps, os.path.join(scratch, 'validation.png'), args.out, args.at)
        if figures['by_length']:
            plot_by_length(figures['by_length'], os.path.join(scratch, 'by_length.png'))
        keep_steps(steps, args.out)
        write_json(os.path.join(args.out, 'results.json'), figures, indent=2)
        for png in os.listdir(scratch):
            os.replace(os.path.join(scratch, png), os.path.join(args.out, png))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if page is not None:
        write_text(args.page, page)
    else:
        write_text(os.path.join(args.out, 'results.md'),
                   '\n'.join(study_tables.page_block(figures)) + '\n')
    if readme is not None:
        write_text(args.readme, readme)
    print('\n'.join(study_tables.readme_block(figures)))


def parse_args(argv):
    p = cli.ArgumentParser(description='Gather the Multi30k study (runs, ensembles, Marian '
                           'anchors) into results.json, its logs and translations, the '
                           'figures and the tables of the results page.')
    p.add_argument('runs_dir', metavar='RUNS_DIR',
                   help='the steps\' folders (runs/multi30k: DECODER-seedSEED, '
                   'DECODER-ensemble, marian-*)')
    p.add_argument('--data', required=True,
                   help='the prepared data (pipeline/multi30k.py prepare): the references')
    p.add_argument('--out', required=True,
                   help='the folder of results.json, logs/, translations/, the figures '
                   '(docs/multi30k)')
    p.add_argument('--page', help='the results page whose generated tables are replaced '
                   '(docs/multi30k.md); without it, OUT/results.md')
    p.add_argument('--readme', help='the README whose short Multi30k table is replaced')
    p.add_argument('--bootstrap', type=int, default=2000,
                   help='resamples of the paired bootstrap (0: none; default 2000)')
    p.add_argument('--at', type=cli.positive_int, metavar='N',
                   help='the runs as scored at N updates (train_multi30k.sh --score-at N)')
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(cli.arguments(argv))
    os.makedirs(args.out, exist_ok=True)
    return cli.run(lambda: gather(args))


if __name__ == '__main__':
    sys.exit(main())
