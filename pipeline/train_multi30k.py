"""The Multi30k English->German benchmark: train one decoder with one seed,
then translate and score the three test sets (train_multi30k.sh runs it).

    train_multi30k.sh [--dry-run] [--tiny] [--threads N] DECODER SEED DATA_DIR \\
        [MODEL_DIR] [-- extra nmt.py flags]

DECODER is a variant of the decoder registry (baseline, mean, attentive, ...);
SEED is nmt.py's ``--seed`` (the parameters' initialisation and the order of
the training data).  DATA_DIR is the output of ``pipeline/multi30k.py
prepare`` (docs/multi30k.md).  MODEL_DIR defaults to
``runs/multi30k/DECODER-seedSEED``.

Steps:

1. ``nmt.py`` with MULTI30K_SETTINGS (each chosen for a 2-core CPU; the
   reasons are beside them and in docs/multi30k.md), validating the cost and
   the BLEU of the validation set (batched beam search, BPE undone, against
   the tokenised lowercased reference) every VALID_EVERY updates, and stopping
   when BLEU_PATIENCE validations in a row bring no better BLEU.  It keeps
   ``model.best_bleu.npz`` (best validation BLEU: the model this benchmark
   reports) and ``model.npz`` (best validation cost).
2. ``translate.py`` (beam TEST_BEAM, length-normalised) of the three test
   sets with ``model.best_bleu.npz``, in one call (``tests.bpe.en``, their
   concatenation: one compilation); BPE undone: ``SET.hyp.tok`` (tokenised,
   lowercased) and, detokenised with Moses' detokeniser, ``SET.hyp``.
3. BLEU per test set in the benchmark's two forms: tokenised lowercased
   BLEU-4 against ``SET.tok.de`` (multi-bleu.perl's arithmetic, as the
   Multi30k literature reports), and sacreBLEU of the detokenised output
   against the raw reference, lowercased (``-lc``: the models write
   lowercase).  Everything goes to ``MODEL_DIR/result.json`` (decoder, seed,
   command, updates, wall time, best validation BLEU and cost, BLEU per test
   set), which evaluation/multi30k_results.py gathers.

``--score-at N`` trains nothing: it scores a run (trained or still training)
as if it had stopped after N updates, for comparisons at equal budgets: the
snapshot ``model.iterK.npz`` of its best validation BLEU among the
validations up to update N (snapshots are written at every validation) is
translated and scored as in steps 2 and 3, into ``MODEL_DIR/at-N/`` (its own
``result.json``, with ``budget``: N; evaluation/multi30k_results.py --at N
gathers these).

``--dry-run`` prints the commands and exits.  ``--tiny`` trains a tiny model
for a few updates (TINY_SETTINGS: the whole path in a minute, for tests).
``--threads N`` runs BLAS and OpenMP on N threads (two runs side by side on a
2-core machine: one each).
"""
import gzip
import os
import subprocess
import sys
import time

if __name__ == '__main__':  # run as a file: import from the project root, not this folder
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from machinery import cli
from machinery import distributed
from machinery.output_files import write_json, write_text
from machinery.pickle_and_json import load_json
from pipeline.train_pair import BPE_UNDO, ROOT, _q, decoder_flags, parse_with_extra, run
from machinery.text_io import InputError, read_lines
from machinery.training_log import last_training_ended, read_training_log

SRC, TRG = 'en', 'de'
TEST_SETS = ('test_2016_flickr', 'test_2017_flickr', 'test_2017_mscoco')
TEST_BEAM = 12
VALID_EVERY = 1000
BLEU_PATIENCE = 5
UPDATE_BUDGET = 22000
# a run's own speed on a machine: this quantile of the rates its log gives
# over each 100 updates, so that hours in which other work shared the
# machine do not count
FAST_QUANTILE = 0.9

# nmt.py's settings for the benchmark on a 2-core CPU (docs/multi30k.md):
MULTI30K_SETTINGS = [
    # nmtpy's 128/256 configuration: an update of 32 sentences in ~0.2-0.4 s
    ('dim_word', 128), ('dim', 256),
    # 906 updates an epoch: the model sees more updates in an hour than with 80
    ('batch_size', 32), ('valid_batch_size', 64),
    # the longest training pair has 40-odd BPE units: nothing is cut
    ('maxlen', 100),
    # Adam at 0.0004 from the default initialisation (docs/training.md#initialisation);
    # gradients clipped to norm 1 as the papers do
    ('optimizer', 'adam'), ('lrate', 0.0004), ('clip_c', 1.0),
    # inverted dropout 0.2 of the embeddings, the annotations and the readout:
    # without it the model overfits the 29,000 pairs after about 10,000 updates
    # (test2016 34.65); 0.4 learned about 2,000 updates slower (docs/multi30k.md)
    ('dropout_embedding', 0.2), ('dropout_context', 0.2), ('dropout_readout', 0.2),
    # the dropout masks from dl4mt's fixed stream (worker r: 1234 + r), whatever
    # the seed, as in the table's first nine runs: the seeds differ in their
    # initial parameters and the order of their batches
    ('noise_seed', 1234),
    # validation cost and BLEU about once an epoch (beam 5: ~1 min on one core)
    ('validFreq', VALID_EVERY), ('bleu_valid_freq', VALID_EVERY), ('bleu_valid_beam', 5),
    # model selection and early stopping on validation BLEU; the cost's rule
    # (the original's patience) out of the way
    ('bleu_patience', BLEU_PATIENCE), ('patience', 1000), ('max_epochs', 40),
    # the budget: at most UPDATE_BUDGET updates (its validation included),
    # or BLEU patience, whichever comes first
    ('finish_after', UPDATE_BUDGET),
    ('saveFreq', VALID_EVERY), ('sampleFreq', 100000), ('dispFreq', 100),
]
TINY_SETTINGS = [
    ('dim_word', 8), ('dim', 12), ('batch_size', 8), ('valid_batch_size', 8),
    ('maxlen', 100), ('optimizer', 'adam'), ('lrate', 0.0004), ('clip_c', 1.0),
    ('validFreq', 4), ('bleu_valid_freq', 4), ('bleu_valid_beam', 2),
    ('bleu_patience', 5), ('patience', 1000), ('finish_after', 8),
    ('saveFreq', 4), ('sampleFreq', 100000), ('dispFreq', 2),
]
TINY_TEST_BEAM = 2


class Data(object):
    """The file names of a directory prepared by pipeline/multi30k.py."""

    def __init__(self, data_dir):
        j = lambda name: os.path.join(data_dir, name)  # noqa: E731
        self.dir = data_dir
        self.train = (j('train.bpe.' + SRC), j('train.bpe.' + TRG))
        self.dicts = (j('train.bpe.%s.pkl' % SRC), j('train.bpe.%s.pkl' % TRG))
        self.valid = (j('val.bpe.' + SRC), j('val.bpe.' + TRG))
        self.valid_ref = j('val.tok.' + TRG)
        self.test_src = {s: j('%s.bpe.%s' % (s, SRC)) for s in TEST_SETS}
        self.test_ref = {s: j('%s.tok.%s' % (s, TRG)) for s in TEST_SETS}
        self.raw_ref = {s: j(os.path.join('raw', '%s.%s.gz' % (s, TRG))) for s in TEST_SETS}

    def required(self):
        return (list(self.train) + list(self.dicts) + list(self.valid) + [self.valid_ref] +
                list(self.test_src.values()) + list(self.test_ref.values()))

    def check(self):
        for path in self.required():
            if not os.path.exists(path):
                raise InputError('%s: no such file (prepare %s with pipeline/multi30k.py '
                                 'prepare first; docs/multi30k.md)' % (path, self.dir))

    def dictionary_sizes(self):
        return [max(int(i) for i in load_json(pkl[:-len('.pkl')] + '.json').values()) + 1
                for pkl in self.dicts]


def nmt_command(args, data, n_words):
    settings = TINY_SETTINGS if args.tiny else MULTI30K_SETTINGS
    cmd = [sys.executable, os.path.join(ROOT, 'nmt.py'), '--model', model_path(args),
           '--datasets'] + list(data.train) + ['--dictionaries'] + list(data.dicts) + [
           '--valid_datasets'] + list(data.valid)
    cmd += ['--n_words_src', str(n_words[0]), '--n_words', str(n_words[1])]
    for key, value in settings:
        cmd += ['--' + key, str(value)]
    # no --use_dropout: dl4mt's readout dropout (0.5) held the attention back
    # for thousands of updates here (docs/multi30k.md#training)
    cmd += ['--seed', str(args.seed)] + decoder_flags(args.decoder)
    cmd += ['--bleu_valid_ref', data.valid_ref, '--bleu_valid_postprocess', BPE_UNDO]
    return cmd + list(args.extra)


def model_path(args, suffix=''):
    return os.path.join(args.model_dir, 'model%s.npz' % suffix)


def selected_model(args):
    """The model the benchmark reports: the best by validation BLEU (the
    best by cost when no BLEU validation ran)."""
    best_bleu = model_path(args, '.best_bleu')
    return best_bleu if os.path.exists(best_bleu) else model_path(args)


def translate_command(args, data, model, ensemble=()):
    """translate.py of the test sets' concatenation (tests.bpe.en) into
    tests.hyp.bpe, by ``model`` alone or with the ``ensemble``'s models."""
    beam = TINY_TEST_BEAM if args.tiny else TEST_BEAM
    return [sys.executable, os.path.join(ROOT, 'translate.py'), '-k', str(beam), '-n',
            '-p', '1'] + [word for other in ensemble for word in ('--ensemble', other)] + [
            model, data.dicts[0], data.dicts[1],
            os.path.join(args.model_dir, 'tests.bpe.' + SRC),
            os.path.join(args.model_dir, 'tests.hyp.bpe')]


def translate_test_sets(args, data, model, ensemble=()):
    """{test set: its translation's lines (BPE'd)}, from one translate.py call."""
    sources = {s: read_lines(data.test_src[s]) for s in TEST_SETS}
    write_lines(os.path.join(args.model_dir, 'tests.bpe.' + SRC),
                [line for s in TEST_SETS for line in sources[s]])
    run(translate_command(args, data, model, ensemble))
    hyps = read_lines(os.path.join(args.model_dir, 'tests.hyp.bpe'), allow_empty=True)
    out, start = {}, 0
    for s in TEST_SETS:
        out[s], start = hyps[start:start + len(sources[s])], start + len(sources[s])
    return out


def score_test_set(args, data, test_set, bpe_lines):
    """{'bleu_tok_lc': ..., 'sacrebleu_lc': ...} of a test set's translation;
    writes SET.hyp.tok and SET.hyp."""
    from machinery import bleu
    from pipeline.preprocess import undo_bpe
    from sacremoses import MosesDetokenizer
    hyps = [undo_bpe(line) for line in bpe_lines]
    write_lines(os.path.join(args.model_dir, test_set + '.hyp.tok'), hyps)
    detokenizer = MosesDetokenizer(lang=TRG)
    detok = [detokenizer.detokenize(h.split()) for h in hyps]
    write_lines(os.path.join(args.model_dir, test_set + '.hyp'), detok)
    tok = bleu.corpus_bleu_tokenized(hyps, read_lines(data.test_ref[test_set]),
                                     lowercase=True)
    scores = {'bleu_tok_lc': round(tok['bleu'], 2), 'multi_bleu': bleu.format_multibleu(tok)}
    if os.path.exists(data.raw_ref[test_set]):
        with gzip.open(data.raw_ref[test_set], 'rt', encoding='utf-8') as f:
            refs = [line.rstrip('\n') for line in f]
        scores['sacrebleu_lc'] = round(bleu.detok_bleu(detok, refs, TRG, lowercase=True), 2)
    return scores


def training_parts(events):
    """One {'from_update', 'to_update', 'seconds'} per training process of the
    log (a run resumed with --reload has several): from its 'start' event to its
    last event, so the compile before training is not counted."""
    parts = []
    for event in events:
        if event['event'] == 'start':
            parts.append({'from_update': event['uidx'], 'start': event['time']})
        if parts:
            parts[-1].update(to_update=event['uidx'],
                             seconds=round(event['time'] - parts[-1]['start'], 1))
    return [{k: v for k, v in part.items() if k != 'start'} for part in parts]


def stop_reason(events):
    """Why the run's last training process stopped (the log's last 'stop'
    event: finish_after, bleu_early_stop, signal, ...), None without one."""
    stops = [e for e in events if e['event'] == 'stop']
    return stops[-1]['reason'] if stops else None


def validation_summary(events):
    """(updates, best validation BLEU, best validation cost) from the training log."""
    bleus = [e['bleu'] for e in events if e['event'] == 'bleu']
    costs = [e['cost'] for e in events if e['event'] == 'validation']
    return (max([e['uidx'] for e in events] or [0]), max(bleus) if bleus else None,
            min(costs) if costs else None)


def commit():
    """The project's commit (with '+changes' when the tree differs), or None."""
    try:
        head = subprocess.run(['git', 'rev-parse', '--short', 'HEAD'], cwd=ROOT,
                              capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(['git', 'status', '--porcelain', '--untracked-files=no'],
                               cwd=ROOT, capture_output=True, text=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return head + ('+changes' if dirty else '')


def write_lines(path, lines):
    write_text(path, ''.join(line + '\n' for line in lines))


def translate_and_score(args, data, model, ensemble=()):
    """{test set: scores} of ``model``'s translations (with the ``ensemble``'s
    models: of the ensemble's); files into args.model_dir."""
    translations = translate_test_sets(args, data, model, ensemble)
    tests = {}
    for test_set in TEST_SETS:
        tests[test_set] = score_test_set(args, data, test_set, translations[test_set])
        print('%s: BLEU %.2f (tokenised, lowercased); sacreBLEU %s (lowercased)'
              % (test_set, tests[test_set]['bleu_tok_lc'],
                 tests[test_set].get('sacrebleu_lc', 'n/a')))
    return tests


def best_bleu_event(events, budget):
    """The 'bleu' event up to update ``budget`` whose parameters nmt.py keeps
    as model.best_bleu.npz: the best BLEU, the latest of equal ones (a score
    equal to the best so far is a new best: TrainingState.record_bleu); None
    without one."""
    bleus = [e for e in events if e['event'] == 'bleu' and e['uidx'] <= budget]
    return max(bleus, key=lambda e: (e['bleu'], e['uidx'])) if bleus else None


def snapshot_at(model_dir, events, budget):
    """(the best 'bleu' event up to update ``budget``, its snapshot's path)."""
    best = best_bleu_event(events, budget)
    if best is None:
        raise InputError('%s: no validation BLEU up to update %d in its training log'
                         % (model_dir, budget))
    path = os.path.join(model_dir, 'model.iter%d.npz' % best['uidx'])
    if not os.path.exists(path):
        raise InputError('%s: no snapshot of update %d, the best validation BLEU up to '
                         'update %d' % (path, best['uidx'], budget))
    return best, path


def score_at(args):
    """--score-at: the run scored as if it had stopped after args.score_at updates."""
    data = Data(args.data_dir)
    data.check()
    events = read_training_log(model_path(args) + '.log.jsonl')
    if max(e['uidx'] for e in events) < args.score_at:
        raise InputError('%s: the run has not reached update %d yet'
                         % (args.model_dir, args.score_at))
    best, snapshot = snapshot_at(args.model_dir, events, args.score_at)
    run_dir, args.model_dir = args.model_dir, os.path.join(args.model_dir,
                                                           'at-%d' % args.score_at)
    os.makedirs(args.model_dir, exist_ok=True)
    started = time.time()
    tests = translate_and_score(args, data, snapshot)
    within = [e for e in events if e['uidx'] <= args.score_at]
    _, _, best_cost = validation_summary(within)
    parts = training_parts(within)
    result = dict(load_json(os.path.join(run_dir, 'result.json'))
                  if os.path.exists(os.path.join(run_dir, 'result.json')) else {},
                  decoder=args.decoder, seed=args.seed, budget=args.score_at,
                  updates=args.score_at, best_valid_bleu=best['bleu'],
                  best_valid_cost=best_cost, selected_model=os.path.basename(snapshot),
                  train_wall_seconds=round(sum(p['seconds'] for p in parts), 1),
                  training_parts=parts, scoring_seconds=round(time.time() - started, 1),
                  test_beam=TINY_TEST_BEAM if args.tiny else TEST_BEAM, test=tests)
    if 'command' not in result:   # a run stopped before its end: what command.txt says
        result['command'] = read_lines(os.path.join(run_dir, 'command.txt'))[0]
        workers, _ = distributed.split_mpirun(result['command'].split())
        result.update(workers=workers, commit=None)
    result.pop('total_wall_seconds', None)
    write_json(os.path.join(args.model_dir, 'result.json'), result, indent=2)
    print('result: %s' % os.path.join(args.model_dir, 'result.json'))


# what a run folder holds: nothing of a run; a run stopped before its end
# (resumed with --reload); a run trained to its end whose test sets are not
# scored yet; a run with its result.json
NEW, INTERRUPTED, TRAINED, SCORED = 'new', 'interrupted', 'trained', 'scored'


def run_state(model_dir):
    """NEW, INTERRUPTED, TRAINED or SCORED: how far the run in model_dir got
    (its training log says whether its last training process ended)."""
    if os.path.exists(os.path.join(model_dir, 'result.json')):
        return SCORED
    log = os.path.join(model_dir, 'model.npz.log.jsonl')
    if not os.path.exists(log):
        return NEW
    events = read_training_log(log)
    if not any(e['event'] == 'start' for e in events):
        return NEW
    return TRAINED if last_training_ended(events) else INTERRUPTED


def fast_rate(rates):
    """The FAST_QUANTILE quantile of ``rates``: a run's speed when it had the
    machine to itself."""
    ordered = sorted(rates)
    return ordered[min(len(ordered) - 1, int(FAST_QUANTILE * len(ordered)))]


def train_and_score(args):
    data = Data(args.data_dir)
    if args.dry_run:
        return dry_run(args, data)
    data.check()
    state = run_state(args.model_dir)
    if state == SCORED:
        print('%s: already trained and scored (its result.json); nothing to do'
              % args.model_dir)
        return
    if state == INTERRUPTED and '--reload' not in args.extra:
        print('%s: an interrupted run: resuming it (--reload)' % args.model_dir)
        args.extra = list(args.extra) + ['--reload']
    cmd = nmt_command(args, data, data.dictionary_sizes())
    if args.threads:
        from theano_platform import theano_env
        theano_env.threads_for_children(args.threads)
    env = None
    if args.workers > 1:
        cmd, env = distributed.mpirun_command(args.workers, cmd)
    os.makedirs(args.model_dir, exist_ok=True)
    commands = os.path.join(args.model_dir, 'command.txt')
    if state == TRAINED:
        print('%s: trained to its end; scoring its test sets' % args.model_dir)
    else:   # one line a training process: the run's command, then its resumptions
        previous = read_lines(commands) if state == INTERRUPTED and os.path.exists(
            commands) else []
        write_text(commands, ''.join(line + '\n' for line in previous + [_q(cmd)]))
        run(cmd, env=env)
    trained = time.time()
    model = selected_model(args)
    tests = translate_and_score(args, data, model)
    events = read_training_log(model_path(args) + '.log.jsonl')
    updates, best_bleu, best_cost = validation_summary(events)
    parts = training_parts(events)
    result = {'decoder': args.decoder, 'seed': args.seed,
              'command': read_lines(commands)[0] if os.path.exists(commands) else _q(cmd),
              'commit': commit(), 'threads': args.threads, 'workers': args.workers,
              'updates': updates, 'stop_reason': stop_reason(events),
              'train_wall_seconds': round(sum(p['seconds'] for p in parts), 1),
              'training_parts': parts,
              # training plus translating and scoring the test sets
              'total_wall_seconds': round(sum(p['seconds'] for p in parts)
                                          + time.time() - trained, 1),
              'best_valid_bleu': best_bleu, 'best_valid_cost': best_cost,
              'selected_model': os.path.basename(model), 'test_beam': (
                  TINY_TEST_BEAM if args.tiny else TEST_BEAM), 'test': tests}
    write_json(os.path.join(args.model_dir, 'result.json'), result, indent=2)
    print('result: %s' % os.path.join(args.model_dir, 'result.json'))


def dry_run(args, data):
    print('# train')
    cmd = nmt_command(args, data, ['N_WORDS_SRC', 'N_WORDS'])
    if args.workers > 1:
        cmd = distributed.mpirun_command(args.workers, cmd)[0]
    print(_q(cmd))
    print('# the test sets, concatenated into %s: translate, then per set undo BPE, '
          'detokenise, score' % os.path.join(args.model_dir, 'tests.bpe.' + SRC))
    print(_q(translate_command(args, data, model_path(args, '.best_bleu'))))


def parse_args(argv):
    p = cli.ArgumentParser(
        prog='train_multi30k.sh',
        description='Train one decoder with one seed on Multi30k en-de, then '
        'translate and score its three test sets.')
    p.add_argument('--dry-run', action='store_true', help='print the commands and exit')
    p.add_argument('--tiny', action='store_true',
                   help='a tiny model for a few updates (tests)')
    p.add_argument('--threads', type=cli.positive_int, default=0,
                   help='BLAS/OpenMP threads of each command (default: every core)')
    p.add_argument('--workers', type=cli.positive_int, default=1,
                   help='train as this many MPI workers, each on its share of every batch '
                        '(data-parallel: the same updates; docs/distributed.md); each takes '
                        'an equal share of the cores unless --threads says otherwise')
    p.add_argument('--score-at', type=cli.positive_int, metavar='N',
                   help='train nothing: score the run in MODEL_DIR as if it had stopped '
                        'after N updates (its best validation BLEU up to N), into '
                        'MODEL_DIR/at-N/')
    p.add_argument('decoder', metavar='DECODER',
                   help='a decoder variant: baseline, mean, attentive, ...')
    p.add_argument('seed', metavar='SEED', type=int,
                   help='nmt.py\'s --seed (docs/training.md#seeds); the table\'s runs '
                        'are seeds 1-5')
    p.add_argument('data_dir', metavar='DATA_DIR',
                   help='the output of pipeline/multi30k.py prepare')
    p.add_argument('model_dir', metavar='MODEL_DIR', nargs='?',
                   help='the run\'s folder: model, training log, translations, '
                        'result.json (default: runs/multi30k/DECODER-seedSEED)')
    args = parse_with_extra(p, argv)
    if args.model_dir is None:
        args.model_dir = os.path.join('runs', 'multi30k', '%s-seed%d' % (args.decoder,
                                                                       args.seed))
    return args


def main(argv=None):
    args = parse_args(cli.arguments(argv))
    return cli.run(lambda: score_at(args) if args.score_at else train_and_score(args))


if __name__ == '__main__':
    sys.exit(main())
