"""The Multi30k table's like-for-like anchor: Marian 1.12 ``--type amun``
(dl4mt's architecture, an independent implementation) trained on the same
files with the table's settings, then its test translations scored as this
project's are.

    .venv/bin/python pipeline/marian_multi30k.py train DATA_DIR MODEL_DIR \\
        [--dropout 0.2] [--seed 1] [--threads 2] [--tiny] [--dry-run]

Marian comes from the ``pymarian`` wheel in ``.venv-marian`` (installed on
first use, speed/marian.py).  Its settings (MARIAN_SETTINGS): the table's
dimensions (128/256), vocabularies (our dictionaries, as Marian's JSON
vocabularies with eos and UNK at ids 0 and 1), mini-batches of 32 sentences,
Adam 0.0004, gradients clipped to norm 1, the cost averaged over the
sentences of a batch as dl4mt's (``--cost-type ce-mean``; Marian's default
sums it), the two cores splitting each batch (``--sync-sgd``, as our two
workers do); its own data order (shuffled, length-sorted maxi-batches, as
its users run it).  Validation every 1,000 updates by BLEU (beam 5, BPE
undone, tokenised lowercased against ``val.tok.de``: the same score as
train_multi30k.sh's, by an external script) and cross-entropy; early stopping
after 5 validations without a better BLEU, at most 40 epochs: the table's
stopping rule without its 22,000-update budget (Marian's own early stopping).
Its dropout is not ours: ``--dropout DROP`` is Marian's ``--dropout-rnn``
(variational dropout of the RNNs' inputs and states, the closest of its
options to our dropout of the embeddings and the annotations; 0: none).

The test sets are translated by Marian's decoder with the model of the best
validation BLEU (``--keep-best``), beam 12, length-normalised, then scored by
train_multi30k.py's scoring (tokenised lowercased BLEU and sacreBLEU).
``MODEL_DIR/result.json`` has the same fields as a run of the table's, with
``system: marian`` and Marian's version, its ``stop_reason`` (``early_stop``:
Marian's early stopping; ``after``: its ``--after`` bound, 40 epochs) and its
training speed (target words a second, validations left out).

Run again, the command resumes an interrupted training from Marian's last
checkpoint (every 1,000 updates: ``model.npz`` with its optimiser and
progress files, as Marian itself continues a training) and skips a finished
one; the training time is read from Marian's log (``train.log``: one part a
process, from its first line to its last), so a resumed run reports the time
of every part.  ``--tiny`` trains a tiny model for a few updates (the whole
path in seconds, for tests).
"""
import os
import re
import subprocess
import sys
import time

if __name__ == '__main__':  # run as a file: import from the project root, not this folder
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from machinery import cli
from machinery.output_files import write_json, write_text
from machinery.run_lock import ModelLock
from machinery.vocab import load_dictionary
from machinery.text_io import InputError, read_lines
from pipeline import train_multi30k as m30k
from pipeline.train_pair import _q, run
from speed.marian import progress_lines, time_weighted_rate

VALID_EVERY = m30k.VALID_EVERY
PATIENCE = m30k.BLEU_PATIENCE
MAX_EPOCHS = 40
VALID_BEAM = 5
MARIAN_SETTINGS = [
    ('--type', 'amun'), ('--dim-emb', '128'), ('--dim-rnn', '256'),
    ('--mini-batch', '32'), ('--max-length', '100'),
    ('--optimizer', 'adam'), ('--learn-rate', '0.0004'), ('--clip-norm', '1'),
    ('--cost-type', 'ce-mean'),
    ('--valid-freq', '%du' % VALID_EVERY), ('--save-freq', '%du' % VALID_EVERY),
    ('--valid-metrics', 'translation', 'cross-entropy'),
    ('--early-stopping', str(PATIENCE)), ('--after', '%de' % MAX_EPOCHS),
    ('--beam-size', str(VALID_BEAM)), ('--normalize', '1'), ('--valid-mini-batch', '64'),
    ('--disp-freq', '100u'),
]
# a few updates of a tiny model: the whole path, for tests
TINY_SETTINGS = {'--dim-emb': '8', '--dim-rnn': '12', '--mini-batch': '2',
                 '--valid-freq': '4u', '--save-freq': '4u', '--after': '12u',
                 '--disp-freq': '2u'}
# "[valid] Ep. 3 : Up. 2000 : translation : 30.12 : new best"
VALID_LINE = re.compile(r'Up\. (\d+) : (translation|cross-entropy) : ([-\d.]+)')
TIME_STAMP = re.compile(r'^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)\]')
PROCESS_START = '[marian] Marian v'


def vocabularies(data, model_dir):
    """Marian's JSON vocabularies of our two dictionaries (paths)."""
    from speed.marian import write_json_vocabulary
    paths = []
    for pkl, n_words in zip(data.dicts, data.dictionary_sizes()):
        path = os.path.join(model_dir, 'vocab.%s.json' % os.path.basename(pkl).split('.')[-2])
        write_json_vocabulary(path, load_dictionary(pkl), n_words)
        paths.append(path)
    return paths


def validation_script(args, data):
    """The script Marian runs on each validation translation: its BLEU."""
    path = os.path.join(args.model_dir, 'valid_bleu.sh')
    write_text(path, '#!/bin/sh\nexec %s %s valid-bleu %s "$@"\n' % (
        _q([sys.executable]), _q([os.path.abspath(__file__)]),
        _q([os.path.abspath(data.valid_ref)])))
    os.chmod(path, 0o755)
    return path


def train_command(args, data, exe, vocabs, script):
    cmd = [exe, '--model', os.path.join(args.model_dir, 'model.npz'),
           '--train-sets'] + list(data.train) + ['--vocabs'] + vocabs + [
           '--dim-vocabs'] + [str(n) for n in data.dictionary_sizes()] + [
           '--valid-sets'] + list(data.valid)
    for option, *values in MARIAN_SETTINGS:
        cmd += [option] + ([TINY_SETTINGS[option]] if args.tiny and option in TINY_SETTINGS
                           else values)
    cmd += ['--valid-script-path', script, '--keep-best',
            '--valid-translation-output', os.path.join(args.model_dir, 'valid.hyp.bpe'),
            '--cpu-threads', str(args.threads), '--seed', str(args.seed),
            '--log', os.path.join(args.model_dir, 'train.log'),
            '--valid-log', os.path.join(args.model_dir, 'valid.log'),
            '--tempdir', args.model_dir, '--quiet-translation']
    if args.threads > 1:
        cmd.append('--sync-sgd')
    if args.dropout > 0:
        cmd += ['--dropout-rnn', str(args.dropout)]
    return cmd


def valid_bleu(ref, hyp_bpe):
    """The validation BLEU Marian early-stops on: BPE undone, tokenised
    lowercased BLEU against ``ref`` (what nmt.py's BLEU validation gives)."""
    from machinery import bleu
    from pipeline.preprocess import undo_bpe
    hyps = [undo_bpe(line) for line in read_lines(hyp_bpe, allow_empty=True)]
    return bleu.corpus_bleu_tokenized(hyps, read_lines(ref), lowercase=True)['bleu']


def update_of(line):
    """The update a progress or validation line of Marian's names (0: none)."""
    progress = progress_lines([line])
    if progress:
        return progress[0][0]
    valid = VALID_LINE.search(line)
    return int(valid.group(1)) if valid else 0


def training_parts(train_log):
    """One {'from_update', 'to_update', 'seconds'} per Marian process of its
    log (a resumed training appends to it): from the process's first line to
    its last (Marian's time stamps, to the second)."""
    from datetime import datetime
    parts, last_update = [], 0
    for line in train_log:
        stamp = TIME_STAMP.match(line)
        if not stamp:
            continue
        when = datetime.strptime(stamp.group(1), '%Y-%m-%d %H:%M:%S').timestamp()
        if PROCESS_START in line or not parts:
            parts.append({'from_update': last_update, 'to_update': last_update,
                          'first': when, 'last': when})
        last_update = max(last_update, update_of(line))
        parts[-1].update(to_update=last_update, last=when)
    return [{'from_update': p['from_update'], 'to_update': p['to_update'],
             'seconds': p['last'] - p['first']} for p in parts]


def words_per_second(train_log):
    """Marian's training speed over its whole log: the target words of its
    progress lines over their time (validations and saving left out); and at
    its fastest (m30k.fast_rate of their rates: the hours in which other work
    shared the machine left out, as the study's estimate does for our runs)."""
    rows = progress_lines(train_log)
    rate = time_weighted_rate([(sec, wps) for _, sec, wps in rows])
    if rate is None:
        return None, None
    return round(rate, 1), round(m30k.fast_rate([wps for _, _, wps in rows]), 1)


def validation_points(valid_log):
    """{'translation': [(update, BLEU)], 'cross-entropy': [(update, cost)]}
    of the validations of Marian's valid.log, in its order."""
    points = {'translation': [], 'cross-entropy': []}
    for found in filter(None, map(VALID_LINE.search, valid_log)):
        points[found.group(2)].append((int(found.group(1)), float(found.group(3))))
    return points


def training_summary(model_dir):
    """What Marian's logs say of its training: updates, best validation BLEU
    and cross-entropy, why it stopped, its parts, its speed."""
    train_log = read_lines(os.path.join(model_dir, 'train.log'), allow_empty=True)
    valid = read_lines(os.path.join(model_dir, 'valid.log'), allow_empty=True)
    points = validation_points(valid)
    bleus = [bleu for _, bleu in points['translation']]
    costs = [cost for _, cost in points['cross-entropy']]
    parts = training_parts(train_log)
    stalled = any('stalled %d times' % PATIENCE in line for line in valid)
    overall, fastest = words_per_second(train_log)
    return {'updates': parts[-1]['to_update'] if parts else 0,
            'stop_reason': 'early_stop' if stalled else 'after',
            'best_valid_bleu': max(bleus) if bleus else None,
            'best_valid_cost': min(costs) if costs else None,
            'training_parts': parts,
            'train_wall_seconds': round(sum(p['seconds'] for p in parts), 1),
            'words_per_second': overall, 'words_per_second_fast': fastest}


def marian_version(exe):
    done = subprocess.run([exe, '--version'], capture_output=True, text=True)
    return (done.stdout + done.stderr).strip().splitlines()[0] if done.returncode == 0 else None


def scoring_beam(args):
    return m30k.TINY_TEST_BEAM if args.tiny else m30k.TEST_BEAM


def resumed_from(model_dir):
    """The update of Marian's checkpoint in ``model_dir`` that a training
    there continues from (None: it starts anew)."""
    progress = os.path.join(model_dir, 'model.npz.progress.yml')
    if not os.path.exists(progress):
        return None
    found = [re.match(r'batches: (\d+)$', line) for line in read_lines(progress)]
    return next((int(m.group(1)) for m in found if m), 0)


def translate_and_score(args, data, vocabs):
    """Marian's decoder (beam 12, length-normalised) on the test sets with the
    best-BLEU model; their scores."""
    from speed.marian import decode_speed
    model = os.path.join(args.model_dir, 'model.npz.best-translation.npz')
    if not os.path.exists(model):
        raise InputError('%s: no best-BLEU model (did Marian validate?)' % model)
    tests = {}
    for test_set in m30k.TEST_SETS:
        decoded = decode_speed(model, vocabs, data.test_src[test_set], scoring_beam(args),
                               mini_batch=64, threads=args.threads)
        m30k.write_lines(os.path.join(args.model_dir, test_set + '.hyp.bpe'),
                         decoded['outputs'])
        tests[test_set] = m30k.score_test_set(args, data, test_set, decoded['outputs'])
        print('%s: BLEU %.2f (tokenised, lowercased)' % (test_set,
                                                         tests[test_set]['bleu_tok_lc']))
    return tests


def train_and_score(args):
    from speed.marian import ENV_DIR, marian_command
    data = m30k.Data(args.data_dir)
    data.check()
    # a dry run installs nothing: Marian's command where it would be
    exe = marian_command() if not args.dry_run else os.path.join(ENV_DIR, 'bin', 'pymarian')
    if not args.dry_run and os.path.exists(os.path.join(args.model_dir, 'result.json')):
        print('%s: already trained and scored (its result.json); nothing to do'
              % args.model_dir)
        return
    os.makedirs(args.model_dir, exist_ok=True)
    # one training of a folder at a time, as nmt.py's runs (machinery/run_lock.py)
    lock = None if args.dry_run else ModelLock(os.path.join(args.model_dir, 'model.npz'))
    vocabs = vocabularies(data, args.model_dir)
    cmd = train_command(args, data, exe, vocabs, validation_script(args, data))
    if args.dry_run:
        print(_q(cmd))
        return
    write_text(os.path.join(args.model_dir, 'command.txt'), _q(cmd) + '\n')
    checkpoint = resumed_from(args.model_dir)
    if checkpoint is not None:
        print('%s: resuming from Marian\'s checkpoint at update %d'
              % (args.model_dir, checkpoint), file=sys.stderr)
    run(cmd)
    started = time.time()
    tests = translate_and_score(args, data, vocabs)
    trained = training_summary(args.model_dir)
    result = dict({'system': 'marian', 'decoder': 'marian-amun', 'seed': args.seed,
                   'dropout_rnn': args.dropout, 'command': _q(cmd),
                   'version': marian_version(exe), 'threads': args.threads}, **trained)
    result.update(total_wall_seconds=round(trained['train_wall_seconds'] +
                                           time.time() - started, 1),
                  selected_model='model.npz.best-translation.npz',
                  test_beam=scoring_beam(args), test=tests)
    write_json(os.path.join(args.model_dir, 'result.json'), result, indent=2)
    lock.release()
    print('result: %s' % os.path.join(args.model_dir, 'result.json'))


def parse_args(argv):
    p = cli.ArgumentParser(description=__doc__.split('\n\n')[0].replace('\n', ' '))
    sub = p.add_subparsers(dest='command', required=True)
    t = sub.add_parser('train', help='train Marian on the table\'s files, then translate '
                       'and score the test sets')
    t.add_argument('data_dir', metavar='DATA_DIR',
                   help='the output of pipeline/multi30k.py prepare')
    t.add_argument('model_dir', metavar='MODEL_DIR', help='the run\'s folder')
    t.add_argument('--dropout', type=float, default=0.2,
                   help="Marian's --dropout-rnn (0: no dropout; default 0.2)")
    t.add_argument('--seed', type=int, default=1, help="Marian's --seed (default 1)")
    t.add_argument('--threads', type=cli.positive_int, default=2,
                   help='CPU threads; above 1 they split each batch (--sync-sgd) (default 2)')
    t.add_argument('--tiny', action='store_true',
                   help='a tiny model for a few updates (tests)')
    t.add_argument('--dry-run', action='store_true', help='print Marian\'s command and exit')
    v = sub.add_parser('valid-bleu', help='(Marian runs it) the BLEU of a validation '
                       'translation')
    v.add_argument('ref', help='the tokenised lowercased reference (val.tok.de)')
    v.add_argument('hyp', help='Marian\'s translation, in BPE units')
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(cli.arguments(argv))
    if args.command == 'valid-bleu':
        return cli.run(lambda: print('%.4f' % valid_bleu(args.ref, args.hyp)))
    return cli.run(lambda: train_and_score(args))


if __name__ == '__main__':
    sys.exit(main())
