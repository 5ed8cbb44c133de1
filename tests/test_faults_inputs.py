"""The faults a long run must never hit, found before any work (issue 54):
a new run on a model that holds a run, data that --maxlen empties,
dictionaries whose ids are wrong or whose contents changed under --reload,
an output that is one of the command's inputs.  Each is injected with
hand-made files (a model's files as a run leaves them, without training)
and ends in one line naming the file or option, exit status 1 within
seconds, before anything is compiled, and every file as it was.

Each case works in its own copy of the module's folder; its commands start
with SIGINT and SIGTERM at their defaults (helpers.default_signals).  (The
same faults on a trained model, and --restart: test_faults.py.)"""
import hashlib
import json
import os
import shutil
import time

import numpy
import pytest

from helpers import error_line
from machinery import training_options, vocab, output_files, text_io
from machinery.training_state import resume_path, save_model
from tiny_runs import NMT, ROOT, TRAIN_FLAGS, case_copy, make_corpus, run, write

TRANSLATE = os.path.join(ROOT, 'translate.py')
SCORE = os.path.join(ROOT, 'score.py')
LM = os.path.join(ROOT, 'language_model', 'lm.py')
BUILD_DICTIONARY = os.path.join(ROOT, 'build_dictionary.py')
RESCORE = os.path.join(ROOT, 'evaluation', 'rescore.py')
EVALUATE = os.path.join(ROOT, 'evaluation', 'evaluate.py')
PREPROCESS = os.path.join(ROOT, 'pipeline', 'preprocess.py')
# from the command's start to its exit: Python, Theano's import, the check
ENDS_WITHIN = 30


@pytest.fixture(scope='module')
def master(tmp_path_factory):
    """The tiny corpus and its dictionaries, and m.npz as a run of 4
    updates leaves it: the model file and its options (with the digests of
    the dictionaries), a resume file, a training log."""
    d = tmp_path_factory.mktemp('inputs')
    make_corpus(d)
    import nmt
    options = nmt.fill_options(dict(dim_word=4, dim=5, n_words_src=7, n_words=7,
                                    use_dropout=True, saveto='m.npz'))
    options['dictionary_digests'] = [
        vocab.dictionary_digest(vocab.load_dictionary(str(d / name)))
        for name in ('train.src.pkl', 'train.trg.json')]
    params = nmt.init_params(options)
    save_model(str(d / 'm.npz'), params, [], 4, options)
    numpy.savez(resume_path(str(d / 'm.npz')), uidx=4, epoch=0,
                **{'param__' + k: v for k, v in params.items()})
    events = [dict(event='start', uidx=0, epoch=0, time=1.)] + [
        dict(event='update', uidx=u, epoch=0, time=2., cost=3.) for u in (1, 2, 3, 4)]
    (d / 'm.npz.log.jsonl').write_text(''.join(json.dumps(e) + '\n' for e in events))
    return d


@pytest.fixture
def case(master, tmp_path):
    return case_copy(master, tmp_path)


def digests(folder):
    """{file name: sha256} of every file of a folder (and below)."""
    found = {}
    for root, _, names in os.walk(str(folder)):
        for name in names:
            path = os.path.join(root, name)
            with open(path, 'rb') as f:
                found[os.path.relpath(path, str(folder))] = hashlib.sha256(f.read()).hexdigest()
    return found


def refused(command, folder, message, before=None):
    """Run ``command`` in ``folder``: one error line ``message`` (a prefix
    when it ends with '...'), exit status 1 within ENDS_WITHIN seconds,
    nothing compiled, every file of the folder as it was."""
    before = digests(folder) if before is None else before
    start = time.time()
    proc = run(command, cwd=folder, check=False)
    seconds = time.time() - start
    line = error_line(proc)
    if message.endswith('...'):
        assert line.startswith(message[:-3]), line
    else:
        assert line == message
    assert seconds < ENDS_WITHIN and 'Building model' not in proc.stdout, (seconds, proc.stdout)
    assert digests(folder) == before
    return proc


# ---------------------------------------------------------------- a run there
@pytest.mark.parametrize('left', ['everything', 'resume file', 'log', 'snapshot'])
def test_a_new_run_on_a_model_that_holds_a_run_is_refused(case, left):
    """nmt.py and language_model/lm.py without --reload on a model that holds
    a run (all of its files, or only one of them): one line that says what
    it holds and the two ways on; nothing changed."""
    keep = {'everything': None, 'resume file': 'm.npz.resume.npz',
            'log': 'm.npz.log.jsonl', 'snapshot': 'm.iter2.npz'}[left]
    if keep == 'm.iter2.npz':
        shutil.copy(str(case / 'm.npz'), str(case / keep))
    if keep is not None:
        for name in ('m.npz', 'm.npz.pkl', 'm.npz.json', 'm.npz.resume.npz',
                     'm.npz.log.jsonl'):
            if name != keep:
                os.remove(str(case / name))
    held = {'everything': 'm.npz at update 4, m.npz.resume.npz, m.npz.log.jsonl to update 4',
            'resume file': 'm.npz.resume.npz', 'log': 'm.npz.log.jsonl to update 4',
            'snapshot': 'm.iter2.npz'}[left]
    message = ('error: m.npz: holds a training run (%s): --reload continues it; --restart '
               'moves its files aside and starts a new one' % held)
    refused([NMT, '--model', 'm.npz'] + TRAIN_FLAGS, case, message)
    refused([LM, 'train', '--model', 'm.npz', '--data', 'train.trg'], case, message)


def test_reload_and_restart_and_reload_without_the_model_file(case):
    """--reload with --restart; --reload where the model file is gone but a
    snapshot of its run is there (a new model would write over it)."""
    refused([NMT, '--model', 'm.npz', '--reload', '--restart'] + TRAIN_FLAGS, case,
            'error: --reload and --restart exclude each other: --reload continues the run on '
            'm.npz, --restart starts a new one')
    os.rename(str(case / 'm.npz'), str(case / 'm.iter4.npz'))
    os.remove(str(case / 'm.npz.resume.npz'))
    refused([NMT, '--model', 'm.npz', '--reload'] + TRAIN_FLAGS, case,
            "error: m.npz: no such model file, but m.iter4.npz of its run is there: --reload "
            "needs the model file (put it back; --restart moves the run's files aside and "
            "starts a new model)")


# ---------------------------------------------------------------- --maxlen
def long_lines(n, words='a b c d e'):
    return [' '.join([words] * 5)] * n


@pytest.mark.parametrize('fault', ['training_empty', 'validation_empty', 'nearly_empty',
                                   'language_model'])
def test_data_that_maxlen_empties_is_refused_before_compiling(case, fault):
    """A training corpus, or a validation set, that the length filter leaves
    empty or next to empty: one line naming the files and --maxlen, before
    anything is compiled; no model written."""
    flags = [f for f in TRAIN_FLAGS]
    if fault == 'training_empty':
        flags[flags.index('--maxlen') + 1] = '2'
        command = [NMT, '--model', 'new.npz'] + flags
        message = ('error: --datasets train.src train.trg: --maxlen 2 leaves none of its 18 '
                   'sentence pairs (kept: those shorter than 2 words on every side): nothing '
                   'to train on; raise --maxlen')
    elif fault == 'validation_empty':
        write(case / 'long.src', long_lines(3))
        write(case / 'long.trg', long_lines(3, 'x y z w v'))
        command = [NMT, '--model', 'new.npz', '--valid_datasets', 'long.src', 'long.trg'] + flags
        message = ('error: --valid_datasets long.src long.trg: --maxlen 20 leaves none of its '
                   '3 sentence pairs (skipped: those longer than 20 words on every side): '
                   'nothing to validate on; raise --maxlen')
    elif fault == 'nearly_empty':
        source = (case / 'train.src').read_text().splitlines()
        target = (case / 'train.trg').read_text().splitlines()
        write(case / 'big.src', long_lines(1995) + source[:5])
        write(case / 'big.trg', long_lines(1995, 'x y z w v') + target[:5])
        flags[flags.index('train.src'):flags.index('train.src') + 2] = ['big.src', 'big.trg']
        command = [NMT, '--model', 'new.npz'] + flags
        message = ('error: --datasets big.src big.trg: --maxlen 20 leaves 5 of its 2,000 '
                   'sentence pairs (0.2%; kept: those shorter than 20 words on every side): '
                   'too few to train on; raise --maxlen')
    else:
        command = [LM, 'train', '--model', 'new.npz', '--data', 'train.trg', '--dictionary',
                   'train.trg.json', '--maxlen', '2']
        message = ('error: --data train.trg: --maxlen 2 leaves none of its 18 sentences '
                   '(kept: those shorter than 2 words): nothing to train on; raise --maxlen')
    refused(command, case, message)


def test_a_lot_dropped_by_maxlen_is_said(case, capsys):
    """The length filter that drops more than a tenth of a corpus, not
    nearly all of it: a warning with the counts (training goes on)."""
    from data_iterator import TextIterator
    from training_loop import check_kept
    write(case / 'half.src', long_lines(9) + ['a b'] * 9)
    write(case / 'half.trg', long_lines(9, 'x y') + ['x y'] * 9)
    dicts = [str(case / 'train.src.pkl'), str(case / 'train.trg.json')]
    it = TextIterator(str(case / 'half.src'), str(case / 'half.trg'), *dicts, maxlen=20)
    check_kept(it.count_kept(20), it, '--datasets', 'sentence pairs', 20, 'train', 'kept')
    assert capsys.readouterr().err == (
        'warning: --datasets %s %s: --maxlen 20 drops 9 of its 18 sentence pairs (50.0%%; '
        'kept)\n' % (case / 'half.src', case / 'half.trg'))


# ---------------------------------------------------------------- dictionaries
BAD_IDS = {
    'two words on one id': ({'eos': 0, 'UNK': 1, 'x': 2, 'y': 2},
                            "'x' and 'y' have the same id, 2"),
    'a negative id': ({'eos': 0, 'UNK': 1, 'x': -3}, "'x' has the id -3, a negative one"),
    'a string id': ({'eos': 0, 'UNK': 1, 'x': '2'}, "'x' has the id '2', not an integer"),
    'another tool\'s ids from 0': (
        {'x': 0, 'y': 1, 'eos': 2}, "id 0 is 'x', but the model reads id 0 as the end of a "
                                    "sentence (eos) (build_dictionary.py numbers the words "
                                    "from 2)"),
}


@pytest.mark.parametrize('fault', sorted(BAD_IDS))
def test_dictionary_ids_are_checked_when_loaded(case, fault):
    """A dictionary with two words on one id, a negative id, a string id, or
    an ordinary word on eos's id: one line naming the file and the entry,
    from training, translation, scoring and the language model alike."""
    entries, entry = BAD_IDS[fault]
    (case / 'bad.json').write_text(json.dumps(entries))
    flags = [f if f != 'train.trg.json' else 'bad.json' for f in TRAIN_FLAGS]
    message = 'error: bad.json: %s' % entry
    for command in ([NMT, '--model', 'new.npz'] + flags,
                    [TRANSLATE, '-p', '1', 'm.npz', 'train.src.pkl', 'bad.json', 'valid.src',
                     'out.txt'],
                    [SCORE, '-m', 'm.npz', '-s', 'valid.src', '-t', 'valid.trg', '-o', 'out.txt',
                     '-d', 'train.src.pkl', 'bad.json'],
                    [LM, 'train', '--model', 'new.npz', '--data', 'train.trg', '--dictionary',
                     'bad.json']):
        refused(command, case, message)


def test_reload_with_a_dictionary_rebuilt_in_place(case):
    """--reload after the target dictionary was rebuilt under its name with
    other ids: one line naming it (the model recorded its contents)."""
    words = json.loads((case / 'train.trg.json').read_text())
    words['x'], words['y'] = words['y'], words['x']
    (case / 'train.trg.json').write_text(json.dumps(words))
    refused([NMT, '--model', 'm.npz', '--reload'] + TRAIN_FLAGS, case,
            "error: train.trg.json: not the dictionary that m.npz was trained with (its words "
            "or ids differ): --reload needs the run's dictionaries")


def test_reload_compares_contents_not_paths(case, capsys):
    """The digests (training_options.record_dictionaries): a dictionary moved
    or saved in the other format is the same; one with another id is not;
    options of a model saved before the digests: one line, no check."""
    pkl = vocab.load_dictionary(str(case / 'train.trg.pkl'))
    json_copy = vocab.load_dictionary(str(case / 'train.trg.json'))
    recorded = {'saveto': 'm.npz', 'dictionary_digests': [vocab.dictionary_digest(pkl)]}
    training_options.record_dictionaries(recorded, [json_copy], ['moved.json'], True)
    json_copy['x'] = 99
    with pytest.raises(training_options.InputError, match='moved.json: not the dictionary'):
        training_options.record_dictionaries(recorded, [json_copy], ['moved.json'], True)
    older = {'saveto': 'm.npz'}
    training_options.record_dictionaries(older, [pkl], ['train.trg.pkl'], True)
    assert capsys.readouterr().out == (
        '--reload: m.npz records no digest of its dictionaries (an older file): their '
        'contents are not compared; this run records them\n')
    assert older['dictionary_digests'] == [vocab.dictionary_digest(pkl)]


# ---------------------------------------------------------------- outputs
def output_cases(folder):
    """(name, command, the input it would replace, the error line)."""
    os.link(str(folder / 'valid.src'), str(folder / 'linked.src'))
    nbest = folder / 'nbest.txt'
    nbest.write_text('0 ||| x y ||| -1.0\n1 ||| y z ||| -2.0\n2 ||| z ||| -3.0\n')
    translate = [TRANSLATE, '-p', '1', 'm.npz', 'train.src.pkl', 'train.trg.json', 'valid.src']
    same = 'is an input of this command: the output would replace it; choose another output file'
    other = ('is an input of this command (the same file as %s): the output would replace it; '
             'choose another output file')
    return [
        ('translate, same name', translate + ['valid.src'], 'valid.src',
         'error: valid.src: ' + same),
        ('translate, ./name', translate + ['./valid.src'], 'valid.src',
         'error: ./valid.src: ' + other % 'valid.src'),
        ('translate, hard link', translate + ['linked.src'], 'valid.src',
         'error: linked.src: ' + other % 'valid.src'),
        ('translate, the model', translate + ['m.npz'], 'm.npz', 'error: m.npz: ' + same),
        ('translate --alignments', translate[:1] + ['--alignments', 'train.trg.json']
         + translate[1:] + ['out.txt'], 'train.trg.json', 'error: train.trg.json: ' + same),
        ('score', [SCORE, '-m', 'm.npz', '-s', 'valid.src', '-t', 'valid.trg', '-o',
                   'valid.trg'], 'valid.trg', 'error: valid.trg: ' + same),
        ('rescore', [RESCORE, '-m', 'm.npz', '-s', 'valid.src', '-i', 'nbest.txt', '-o',
                     'nbest.txt'], 'nbest.txt', 'error: nbest.txt: ' + same),
        ('build_dictionary', [BUILD_DICTIONARY, 'train.src.pkl', 'train.src'],
         'train.src.pkl', 'error: train.src.pkl: ' + same),
        ('evaluate --json', [EVALUATE, '--ref', 'valid.trg', '--json', 'valid.trg',
                             'valid.trg'], 'valid.trg', 'error: valid.trg: ' + same),
        ('nmt.py --model', [NMT, '--model', 'train.src'] + TRAIN_FLAGS, 'train.src',
         'error: train.src: ' + same),
    ]


@pytest.mark.parametrize('name', ['translate, same name', 'translate, ./name',
                                  'translate, hard link', 'translate, the model',
                                  'translate --alignments', 'score', 'rescore',
                                  'build_dictionary', 'evaluate --json', 'nmt.py --model'])
def test_an_output_that_is_an_input_is_refused(case, name):
    """translate.py, score.py, evaluation/rescore.py, build_dictionary.py,
    evaluation/evaluate.py, nmt.py (a model on a corpus file) with an output
    that is one of their inputs (its name, another name of it, a hard link):
    one line, the input unchanged."""
    found = {n: rest for n, *rest in output_cases(case)}
    command, victim, message = found[name]
    before = digests(case)
    refused(command, case, message, before)
    assert (case / victim).exists()


def test_preprocess_output_that_is_an_input(case):
    """pipeline/preprocess.py prepare with --out in the raw files' folder,
    where a raw file has the name of an output (dev.tok.en): refused before
    tokenising."""
    for name in ('train', 'dev.tok', 'test'):
        for lang, text in (('es', 'hola mundo .'), ('en', 'hello world .')):
            write(case / ('%s.%s' % (name, lang)), [text] * 3)
    refused([PREPROCESS, 'prepare', '--src-lang', 'es', '--trg-lang', 'en', '--train', 'train',
             '--dev', 'dev.tok', '--test', 'test', '--out', '.', '--bpe-merges', '5'], case,
            'error: ./dev.tok.es: is an input of this command (the same file as dev.tok.es): '
            'the output would replace it; choose another output file')


def test_check_outputs_tells_two_outputs_apart(tmp_path):
    """Two outputs that name one file (neither there yet): the second is refused."""
    (tmp_path / 'b').mkdir()
    with pytest.raises(text_io.InputError, match='b/../out.txt: is another output of this '
                                                  'command'):
        output_files.check_outputs([str(tmp_path / 'out.txt'), str(tmp_path / 'b/../out.txt')])
    assert os.listdir(str(tmp_path)) == ['b']
