"""Shared launcher of train_es-en.sh, train_en-de.sh and train_en-zh.sh.

The three scripts call it with their pair's settings::

    pipeline/train_pair.py --src-lang es --trg-lang en --vocab 50000 --prog NAME \\
        [--dry-run] [--tiny] DECODER DATA_DIR [MODEL_DIR] [-- extra nmt.py flags]

DECODER is a variant of the decoder registry (layers.VARIANTS: baseline, mean,
attentive, memory, selfattn, ...).  DATA_DIR is the output of ``pipeline/preprocess.py prepare`` for the pair
(``train.bpe.SRC/TRG``, ``dev.bpe.SRC/TRG``, ``dev.tok.TRG``,
``test.bpe.SRC``, ``test.tok.TRG``, ``train.bpe.SRC/TRG.pkl``).  MODEL_DIR
defaults to ``runs/PAIR/DECODER`` (under the current directory), the layout
that evaluation/results_table.py reads.

Steps: train with nmt.py (the papers' settings, PAPER_SETTINGS), then
translate the test set with translate.py (beam 5, length-normalised), undo
BPE and write MODEL_DIR/test.hyp.tok (tokenised), MODEL_DIR/test.hyp
(detokenised) and MODEL_DIR/bleu.json (tokenised multi-bleu BLEU against
``test.tok.TRG``; sacreBLEU against the raw test reference when preprocess
recorded it).

A MODEL_DIR that holds a run is taken up where it stands: an unfinished
run is resumed (nmt.py ``--reload``, unless the extra flags give
``--reload`` or ``--restart``), a trained one is translated and scored, and
one with its bleu.json is left as it is (run_stage).

``--dry-run`` prints the commands (nmt.py's in full) and exits 0.
``--tiny`` is a one-minute CPU run with tiny dimensions (TINY_SETTINGS); when
DATA_DIR holds no prepared data it first writes a toy corpus
(demo/toy_corpus.py) with the pair's language codes into DATA_DIR/raw and
prepares it with pipeline/preprocess.py (100 BPE merges).
"""
import argparse
import os
import shlex
import sys

if __name__ == '__main__':  # run as a file: import from the project root, not this folder
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from machinery import cli
from machinery.output_files import write_json, write_text
from machinery.pickle_and_json import load_json
from pipeline.preprocess import BPE_MARKS
from machinery.text_io import InputError, read_lines
from machinery.training_log import log_path, readable_events
from machinery.training_state import held_run

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))   # the project's root



def decoder_flags(name):
    """nmt.py's flags of a decoder variant of the registry ('attentive', ...)."""
    import layers
    try:
        options = layers.variant_options(name)
    except ValueError as e:
        raise InputError(str(e))
    return [text for key, value in options.items() for text in ('--' + key, value)]


# validation BLEU's post-processing (nmt.py runs it as a shell command)
BPE_UNDO = "sed -r 's/%s//g'" % BPE_MARKS

# The papers' settings (vocabulary size comes from the pair's script).
# Adadelta ignores the learning rate; dl4mt-tutorial passes 0.0001.  The
# initialisation is the original code's, with which the papers trained
# (docs/training.md#initialisation).
PAPER_SETTINGS = [
    ('init', 'dl4mt'), ('dim_word', 500), ('dim', 1024), ('maxlen', 50),
    ('batch_size', 80), ('valid_batch_size', 80),
    ('optimizer', 'adadelta'), ('lrate', 0.0001), ('clip_c', 1.0),
    ('decay_c', 0.0), ('alpha_c', 0.0), ('patience', 10),
    ('validFreq', 5000), ('saveFreq', 10000), ('sampleFreq', 10000),
    ('dispFreq', 1000), ('bleu_valid_freq', 5000), ('bleu_valid_beam', 5),
]
TINY_SETTINGS = [
    ('init', 'dl4mt'), ('dim_word', 16), ('dim', 24), ('maxlen', 50),
    ('batch_size', 16), ('valid_batch_size', 16),
    ('optimizer', 'adadelta'), ('lrate', 0.0001), ('clip_c', 1.0),
    ('decay_c', 0.0), ('alpha_c', 0.0), ('patience', 10),
    ('finish_after', 60), ('validFreq', 30), ('saveFreq', 30),
    ('sampleFreq', 1000), ('dispFreq', 10), ('bleu_valid_freq', 30),
    ('bleu_valid_beam', 5),
]
TINY_CORPUS = ['--train', '2000', '--dev', '50', '--test', '50']
TINY_BPE_MERGES = 100
TEST_BEAM = 5


def _q(cmd):
    return ' '.join(shlex.quote(str(c)) for c in cmd)


def parse_with_extra(parser, argv):
    """parser.parse_args of argv up to '--', with ``extra``: the nmt.py flags
    after it; a DECODER that the registry does not know is the parser's
    error."""
    cut = argv.index('--') if '--' in argv else len(argv)
    args = parser.parse_args(argv[:cut])
    args.extra = argv[cut + 1:]
    try:
        decoder_flags(args.decoder)
    except InputError as e:
        parser.error(str(e))
    return args


def parse_args(argv):
    # the name of the train_*.sh script that runs us, for --help and errors
    prog = argv[argv.index('--prog') + 1] if '--prog' in argv[:-1] else None
    p = cli.ArgumentParser(
        prog=prog,
        description='Train one decoder on one language pair with the papers\' '
        'settings, then score the test set.')
    # a train_*.sh script gives these itself: its --help leaves them out
    def fixed(text):
        return argparse.SUPPRESS if prog else text
    p.add_argument('--src-lang', required=True,
                   help=fixed('the source language\'s code, as in the file names (es)'))
    p.add_argument('--trg-lang', required=True,
                   help=fixed('the target language\'s code (en)'))
    p.add_argument('--vocab', type=int, required=True,
                   help=fixed('the vocabulary size of both sides (the papers: 50000; '
                              'en-zh 25000)'))
    p.add_argument('--prog', default=None, help=argparse.SUPPRESS)
    p.add_argument('--dry-run', action='store_true',
                   help='print the commands and exit')
    p.add_argument('--tiny', action='store_true',
                   help='one-minute CPU run with tiny dimensions (makes toy data '
                   'in DATA_DIR when it has none)')
    p.add_argument('decoder', metavar='DECODER',
                   help='a decoder variant: baseline, mean, attentive, memory, '
                        'selfattn, or one with another scoring (attentive-dot, ...)')
    p.add_argument('data_dir', metavar='DATA_DIR',
                   help='the output of pipeline/preprocess.sh prepare (train, dev and '
                        'test files, dictionaries)')
    p.add_argument('model_dir', metavar='MODEL_DIR', nargs='?',
                   help='the run\'s folder: model, test translation, bleu.json '
                        '(default: runs/PAIR/DECODER)')
    args = parse_with_extra(p, argv)
    args.pair = '%s-%s' % (args.src_lang, args.trg_lang)
    if args.model_dir is None:
        args.model_dir = os.path.join('runs', args.pair, args.decoder)
    return args


class Data(object):
    """The file names of a prepared data directory."""

    def __init__(self, data_dir, src, trg):
        j = lambda name: os.path.join(data_dir, name)
        self.dir = data_dir
        self.train = (j('train.bpe.' + src), j('train.bpe.' + trg))
        self.dicts = (j('train.bpe.%s.pkl' % src), j('train.bpe.%s.pkl' % trg))
        self.valid = (j('dev.bpe.' + src), j('dev.bpe.' + trg))
        self.valid_ref = j('dev.tok.' + trg)
        self.test_src = j('test.bpe.' + src)
        self.test_ref = j('test.tok.' + trg)
        self.config = j('preprocess.json')

    def required(self):
        return list(self.train) + list(self.dicts) + list(self.valid) + [
            self.valid_ref, self.test_src, self.test_ref]

    def missing(self):
        return [f for f in self.required() if not os.path.exists(f)]

    def dictionary_sizes(self):
        return [max(int(i) for i in load_json(pkl[:-len('.pkl')] + '.json').values()) + 1
                for pkl in self.dicts]

    def preprocessing(self):
        """What pipeline/preprocess.py recorded in preprocess.json ({} without it)."""
        return load_json(self.config) if os.path.exists(self.config) else {}

    def raw_test_ref(self, trg):
        """The raw (detokenised) test reference recorded by pipeline/preprocess.py."""
        path = self.preprocessing().get('inputs', {}).get('test', {}).get(trg)
        return path if path and os.path.exists(path) else None


def data_commands(args, data):
    """Commands that make a toy corpus in DATA_DIR (tiny mode)."""
    raw = os.path.join(data.dir, 'raw')
    py = sys.executable
    gen = [py, os.path.join(ROOT, 'demo', 'toy_corpus.py'), 'generate', '--out', raw] + TINY_CORPUS
    prep = [py, os.path.join(ROOT, 'pipeline', 'preprocess.py'), 'prepare',
            '--src-lang', args.src_lang, '--trg-lang', args.trg_lang,
            '--train', os.path.join(raw, 'train'), '--dev', os.path.join(raw, 'dev'),
            '--test', os.path.join(raw, 'test'), '--out', data.dir,
            '--bpe-merges', str(TINY_BPE_MERGES), '--vocab', str(args.vocab)]
    return raw, gen, prep


def model_path(args):
    return os.path.join(args.model_dir, 'model.npz')


def run_stage(args):
    """Where MODEL_DIR stands: 'scored' (bleu.json written), 'trained' (the
    training log ends with its end event), 'unfinished' (it holds a run:
    training_state.held_run), or 'new'."""
    model = model_path(args)
    if os.path.exists(os.path.join(args.model_dir, 'bleu.json')):
        return 'scored'
    events = readable_events(log_path(model))
    if os.path.exists(model) and events and events[-1]['event'] == 'end':
        return 'trained'
    return 'unfinished' if held_run(model) else 'new'


def resume_flags(args, stage):
    """--reload for a folder with an unfinished run, unless the extra flags
    say what to do (--reload, --restart)."""
    if stage != 'unfinished' or {'--reload', '--restart'} & set(args.extra):
        return []
    return ['--reload']


def nmt_command(args, data, n_words, stage='new'):
    model = model_path(args)
    settings = TINY_SETTINGS if args.tiny else PAPER_SETTINGS
    cmd = [sys.executable, os.path.join(ROOT, 'nmt.py'), '--model', model,
           '--datasets'] + list(data.train) + ['--dictionaries'] + list(data.dicts) + [
           '--valid_datasets'] + list(data.valid)
    cmd += ['--n_words_src', str(n_words[0]), '--n_words', str(n_words[1])]
    for key, value in settings:
        cmd += ['--' + key, str(value)]
    cmd += ['--use_dropout']
    cmd += decoder_flags(args.decoder)
    cmd += ['--bleu_valid_ref', data.valid_ref, '--bleu_valid_postprocess', BPE_UNDO]
    return cmd + resume_flags(args, stage) + list(args.extra)


def translate_command(args, data, hyp_bpe):
    return [sys.executable, os.path.join(ROOT, 'translate.py'), '-k', str(TEST_BEAM),
            '-n', '-p', '1', model_path(args),
            data.dicts[0], data.dicts[1], data.test_src, hyp_bpe]


def run(cmd, env=None):
    """Run one step, shown first as a shell line; its error line ends ours
    (env: the step's environment, when not ours)."""
    print('+ ' + _q(cmd), file=sys.stderr, flush=True)
    program = next((a for a in cmd if a.endswith('.py')), cmd[0])
    cli.run_command(cmd, os.path.basename(program), env=env)


def make_tiny_data(args, data):
    raw, gen, prep = data_commands(args, data)
    run(gen)
    for name in ('train', 'dev', 'test'):
        for side, lang in (('src', args.src_lang), ('trg', args.trg_lang)):
            os.replace(os.path.join(raw, '%s.%s' % (name, side)),
                       os.path.join(raw, '%s.%s' % (name, lang)))
    run(prep)


def final_evaluation(args, data):
    """Translate the test set, undo BPE, score, write bleu.json."""
    from machinery import bleu
    from pipeline.preprocess import Postprocessor, undo_bpe
    hyp_bpe = os.path.join(args.model_dir, 'test.hyp.bpe')
    run(translate_command(args, data, hyp_bpe))
    hyps = [undo_bpe(line) for line in read_lines(hyp_bpe, allow_empty=True)]
    tok = bleu.corpus_bleu_tokenized(hyps, read_lines(data.test_ref))
    _write_lines(os.path.join(args.model_dir, 'test.hyp.tok'), hyps)
    post = Postprocessor(args.trg_lang, data.preprocessing().get('zh_split', 'whitespace'))
    detok = [post(h) for h in hyps]
    _write_lines(os.path.join(args.model_dir, 'test.hyp'), detok)
    result = {'pair': args.pair, 'decoder': args.decoder,
              'bleu': tok['bleu'], 'multi_bleu': bleu.format_multibleu(tok),
              'test_ref': data.test_ref,
              'hypothesis': os.path.join(args.model_dir, 'test.hyp.tok'),
              'beam': TEST_BEAM}
    raw_ref = data.raw_test_ref(args.trg_lang)
    if raw_ref:
        result['detok_bleu'] = bleu.detok_bleu(detok, read_lines(raw_ref), args.trg_lang)
        result['detok_ref'] = raw_ref
    write_json(os.path.join(args.model_dir, 'bleu.json'), result, indent=2)
    print('test BLEU (tokenised): %s' % result['multi_bleu'])
    if 'detok_bleu' in result:
        print('test BLEU (sacreBLEU, detokenised): %.2f' % result['detok_bleu'])


def _write_lines(path, lines):
    write_text(path, ''.join(l + '\n' for l in lines))


def main(argv=None):
    args = parse_args(cli.arguments(argv))
    return cli.run(lambda: train_and_score(args))


def train_and_score(args):
    data = Data(args.data_dir, args.src_lang, args.trg_lang)
    need_data = args.tiny and not os.path.exists(data.train[0])
    stage = run_stage(args)
    if args.dry_run:
        return dry_run(args, data, need_data, stage)
    if stage == 'scored':
        print(stage_note(args, stage))
        return
    if need_data:
        make_tiny_data(args, data)
    missing = data.missing()
    if missing:
        raise InputError('%s: no such file (prepare DATA_DIR with pipeline/preprocess.py '
                         'prepare first)' % missing[0])
    n_words = data.dictionary_sizes() if args.tiny else [args.vocab, args.vocab]
    os.makedirs(args.model_dir, exist_ok=True)
    if stage_note(args, stage):
        print(stage_note(args, stage), file=sys.stderr)
    if stage != 'trained':
        cmd = nmt_command(args, data, n_words, stage)
        write_text(os.path.join(args.model_dir, 'command.txt'), _q(cmd) + '\n')
        run(cmd)
    final_evaluation(args, data)


# what train_and_score says of a MODEL_DIR that holds a run
STAGE_NOTES = {
    'scored': '%s: finished already (its bleu.json is written): nothing to do; to train '
              'again, give another MODEL_DIR',
    'trained': '%s: trained already (its training log ends the run): translating and '
               'scoring the test set',
    'unfinished': '%s: an unfinished run: nmt.py --reload continues it',
}


def stage_note(args, stage):
    """The line that says what is done with MODEL_DIR's ``stage`` (None for
    a new one, or when the extra flags say what to do with a run)."""
    if stage not in STAGE_NOTES or (stage == 'unfinished' and not resume_flags(args, stage)):
        return None
    return STAGE_NOTES[stage] % (args.model_dir if stage == 'scored' else model_path(args))


def dry_run(args, data, need_data, stage):
    if stage_note(args, stage):
        print('# ' + stage_note(args, stage))
    if stage == 'scored':
        return
    if need_data:
        raw, gen, prep = data_commands(args, data)
        print('# make toy data (DATA_DIR has none)')
        print(_q(gen))
        print('# rename %s/{train,dev,test}.{src,trg} to .%s / .%s'
              % (raw, args.src_lang, args.trg_lang))
        print(_q(prep))
    if args.tiny:
        n_words = (data.dictionary_sizes() if not need_data
                   else ['VOCAB_FROM_DATA', 'VOCAB_FROM_DATA'])
    else:
        n_words = [args.vocab, args.vocab]
        missing = data.missing()
        if missing:
            print('note: %s does not exist yet' % missing[0], file=sys.stderr)
    if stage != 'trained':
        print('# train')
        print(_q(nmt_command(args, data, n_words, stage)))
    print('# test: translate, undo BPE, score into %s'
          % os.path.join(args.model_dir, 'bleu.json'))
    print(_q(translate_command(args, data,
                               os.path.join(args.model_dir, 'test.hyp.bpe'))))


if __name__ == '__main__':
    sys.exit(main())
