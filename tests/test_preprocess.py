"""preprocess.py: raw text -> prepared data -> postprocessed text, and errors."""
import json
import os
import pickle
import re
import subprocess
import sys
from collections import Counter

import pytest

from helpers import ROOT, error_line, run_command

from pipeline import preprocess  # noqa: E402

# Every sentence starts with a capital letter (detruecasing restores it) and
# is written the way the Moses detokeniser writes it back.
ES = [
    'El niño comió una manzana en el jardín.',
    'La señora Pérez vive en Málaga desde hace años.',
    'Mañana el niño irá a la escuela con su madre.',
    '¿Dónde está la estación de tren?',
    'El café de la esquina está cerrado los lunes.',
    'La madre del niño trabaja en el hospital.',
]
EN = [
    'The child ate an apple in the garden.',
    "Mrs Pérez has lived in Málaga for years, hasn't she?",
    'Tomorrow the child will go to school with his mother.',
    'Where is the "train" station?',
    "The café on the corner is closed on Mondays & Tuesdays.",
    "The child's mother works in the hospital.",
]
DE = [
    'Das Kind aß einen Apfel im Garten.',
    'Die neue Fußgänger-Ampel ist seit Dienstag in Betrieb.',
    'Morgen geht das Kind mit seiner Mutter zur Schule.',
    'Wo ist der Bahnhof?',
    'Das Café an der Ecke ist montags geschlossen.',
    'Die Mutter des Kindes arbeitet im Krankenhaus.',
]
ZH_RAW = ['我们在2018年去了北京。', '联合国"禁毒"公约很重要。', '他们喜欢学习中文。']
ZH_SEG = ['我们 在 2018年 去 了 北京 。', '联合国 " 禁毒 " 公约 很 重要 。',
          '他们 喜欢 学习 中文 。']


def write_corpus(directory, langs_lines, sets=('train', 'dev', 'test')):
    """Writes the same sentences as train, dev and test: PREFIX = dir/SET."""
    os.makedirs(directory, exist_ok=True)
    for name in sets:
        for lang, lines in langs_lines.items():
            with open(os.path.join(directory, '%s.%s' % (name, lang)), 'w',
                      encoding='utf-8') as f:
                f.writelines(l + '\n' for l in lines)
    return {name: os.path.join(directory, name) for name in sets}


def prepare(raw, out, src, trg, *extra):
    argv = ['prepare', '--src-lang', src, '--trg-lang', trg, '--train', raw['train'],
            '--dev', raw['dev'], '--test', raw['test'], '--out', str(out)] + list(extra)
    return preprocess.main(argv)


def read(path):
    with open(path, encoding='utf-8') as f:
        return f.read().splitlines()


def postprocess_cli(lines, lang, model_dir):
    proc = subprocess.run(
        [sys.executable, os.path.join(ROOT, 'pipeline', 'preprocess.py'), 'postprocess',
         '--lang', lang, '--model-dir', str(model_dir)],
        input=('\n'.join(lines) + '\n').encode('utf-8'), capture_output=True)
    assert proc.returncode == 0, proc.stderr.decode()
    return proc.stdout.decode('utf-8').splitlines()


@pytest.fixture(scope='module')
def es_en(tmp_path_factory):
    base = tmp_path_factory.mktemp('es_en')
    raw = write_corpus(str(base / 'raw'), {'es': ES, 'en': EN})
    assert prepare(raw, base / 'out', 'es', 'en', '--bpe-merges', '40') == 0
    return base / 'out'


def test_outputs_exist(es_en):
    for name in ('train', 'dev', 'test'):
        for lang in ('es', 'en'):
            assert len(read(es_en / ('%s.bpe.%s' % (name, lang)))) == 6
    for name in ('dev', 'test'):
        for lang in ('es', 'en'):
            assert (es_en / ('%s.tok.%s' % (name, lang))).exists()
    for lang in ('es', 'en'):
        assert (es_en / ('truecase-model.%s' % lang)).exists()
        assert (es_en / ('train.bpe.%s.pkl' % lang)).exists()
        assert (es_en / ('train.bpe.%s.json' % lang)).exists()
    assert (es_en / 'bpe.codes').exists()
    # no temporary directory left behind
    assert not [n for n in os.listdir(es_en) if n.startswith('.')]


def test_tokenised_references_are_moses_style(es_en):
    tok = read(es_en / 'dev.tok.en')
    assert '@@' not in ' '.join(tok)
    # escaped like Moses, clitic split, punctuation split, truecased start
    # "Mrs" is never seen inside a sentence: the truecaser leaves it as it is
    assert tok[1] == "Mrs Pérez has lived in Málaga for years , hasn &apos;t she ?"
    assert tok[3] == 'Where is the &quot; train &quot; station ?'
    assert tok[4].endswith('Mondays &amp; Tuesdays .')
    assert tok[5].startswith('the child &apos;s mother')


def test_bpe_output_is_segmented(es_en):
    text = ' '.join(read(es_en / 'train.bpe.es') + read(es_en / 'train.bpe.en'))
    assert '@@ ' in text
    # undoing BPE gives the tokenised, truecased text back
    for lang in ('es', 'en'):
        assert [preprocess.undo_bpe(l) for l in read(es_en / ('dev.bpe.%s' % lang))] \
            == read(es_en / ('dev.tok.%s' % lang))


@pytest.mark.parametrize('lang,raw', [('en', EN), ('es', ES)])
def test_round_trip_es_en(es_en, lang, raw):
    bpe = read(es_en / ('test.bpe.%s' % lang))
    assert postprocess_cli(bpe, lang, es_en) == raw


def test_round_trip_de_compound_with_dash(tmp_path):
    raw = write_corpus(str(tmp_path / 'raw'), {'en': EN, 'de': DE})
    assert prepare(raw, tmp_path / 'out', 'en', 'de', '--bpe-merges', '30') == 0
    tok = read(tmp_path / 'out' / 'dev.tok.de')
    assert 'Fußgänger @-@ Ampel' in tok[1]          # aggressive dash splitting
    post = preprocess.Postprocessor('de')
    assert [post(l) for l in read(tmp_path / 'out' / 'test.bpe.de')] == DE


def test_postprocess_detruecase_like_moses():
    post = preprocess.Postprocessor('en')
    # first letter of the line and after a sentence end; delayed after a quote
    assert post('the c@@ at sle@@ eps . it is &quot; fine &quot; .') == \
        'The cat sleeps. It is "fine".'
    assert post('&quot; yes , &quot; he said .') == '"Yes," he said.'


def test_bpe_merges_option(tmp_path):
    raw = write_corpus(str(tmp_path / 'raw'), {'es': ES, 'en': EN})
    sizes = {}
    for merges in (5, 60):
        out = tmp_path / ('m%d' % merges)
        assert prepare(raw, out, 'es', 'en', '--bpe-merges', str(merges)) == 0
        codes = [l for l in read(out / 'bpe.codes') if not l.startswith('#version')]
        assert len(codes) == merges
        sizes[merges] = sum(len(l.split()) for l in read(out / 'train.bpe.en'))
    assert sizes[60] < sizes[5]                       # more merges, fewer tokens


def test_separate_bpe(tmp_path):
    raw = write_corpus(str(tmp_path / 'raw'), {'es': ES, 'en': EN})
    out = tmp_path / 'out'
    assert prepare(raw, out, 'es', 'en', '--bpe-merges', '10', '--separate-bpe') == 0
    assert not (out / 'bpe.codes').exists()
    es_codes = read(out / 'bpe.codes.es')[1:]
    en_codes = read(out / 'bpe.codes.en')[1:]
    assert len(es_codes) == len(en_codes) == 10 and es_codes != en_codes
    assert json.load(open(out / 'preprocess.json'))['joint_bpe'] is False


def test_vocab_limit(tmp_path):
    raw = write_corpus(str(tmp_path / 'raw'), {'es': ES, 'en': EN})
    out = tmp_path / 'out'
    assert prepare(raw, out, 'es', 'en', '--bpe-merges', '40', '--vocab', '12') == 0
    counts = Counter(w for l in read(out / 'train.bpe.en') for w in l.split(' '))
    with open(out / 'train.bpe.en.pkl', 'rb') as f:
        d = pickle.load(f)
    d = {(k.decode('utf-8') if isinstance(k, bytes) else k): v for k, v in d.items()}
    assert d == json.load(open(out / 'train.bpe.en.json', encoding='utf-8'))
    assert sorted(d.values()) == list(range(12))
    assert d['eos'] == 0 and d['UNK'] == 1
    kept = [w for w in d if w not in ('eos', 'UNK')]
    dropped = [w for w in counts if w not in d]
    assert dropped, 'the test corpus must have more than 10 word types'
    # the most frequent words are kept, in order of frequency
    assert min(counts[w] for w in kept) >= max(counts[w] for w in dropped)
    assert [counts[w] for w in sorted(kept, key=d.get)] == \
        sorted((counts[w] for w in kept), reverse=True)


def test_zh_whitespace_keeps_segmentation(tmp_path):
    en = EN[:3]
    raw = write_corpus(str(tmp_path / 'raw'), {'en': en, 'zh': ZH_SEG})
    out = tmp_path / 'out'
    assert prepare(raw, out, 'en', 'zh', '--bpe-merges', '10') == 0
    assert read(out / 'dev.tok.zh') == ZH_SEG          # no escaping, no re-split
    assert not (out / 'truecase-model.zh').exists()     # no truecasing for zh
    assert postprocess_cli(read(out / 'test.bpe.zh'), 'zh', out) == ZH_SEG


def test_zh_chars_mode(tmp_path):
    raw = write_corpus(str(tmp_path / 'raw'), {'en': EN[:3], 'zh': ZH_RAW})
    out = tmp_path / 'out'
    assert prepare(raw, out, 'en', 'zh', '--bpe-merges', '10', '--zh-split', 'chars') == 0
    tok = read(out / 'dev.tok.zh')
    cjk = re.compile('[\u4e00-\u9fff]')
    for line in tok:
        for token in line.split():
            if cjk.search(token):
                assert len(token) == 1, token           # one CJK character a token
    assert tok[0] == '我 们 在 2018 年 去 了 北 京 。'
    assert '&quot;' in tok[1]
    assert not (out / 'truecase-model.zh').exists()
    # the mode is read from preprocess.json
    assert postprocess_cli(read(out / 'test.bpe.zh'), 'zh', out) == ZH_RAW


def _run_cli(argv):
    return run_command('pipeline/preprocess.py', argv)


def _prepare_argv(raw, out, src='es', trg='en'):
    return ['prepare', '--src-lang', src, '--trg-lang', trg, '--train', raw['train'],
            '--dev', raw['dev'], '--test', raw['test'], '--out', str(out),
            '--bpe-merges', '10']




def _no_final_outputs(out):
    return not os.path.exists(out) or os.listdir(out) == []


def test_missing_input(tmp_path):
    raw = write_corpus(str(tmp_path / 'raw'), {'es': ES, 'en': EN})
    os.unlink(raw['dev'] + '.en')
    proc = _run_cli(_prepare_argv(raw, tmp_path / 'out'))
    error_line(proc, raw['dev'] + '.en', 'no such file', alone=True)
    assert _no_final_outputs(str(tmp_path / 'out'))


def test_line_count_mismatch(tmp_path):
    raw = write_corpus(str(tmp_path / 'raw'), {'es': ES, 'en': EN})
    with open(raw['test'] + '.en', 'a', encoding='utf-8') as f:
        f.write('One line too many.\n')
    proc = _run_cli(_prepare_argv(raw, tmp_path / 'out'))
    error_line(proc, raw['test'] + '.es', raw['test'] + '.en', '6', '7', alone=True)
    assert _no_final_outputs(str(tmp_path / 'out'))


def test_not_utf8(tmp_path):
    raw = write_corpus(str(tmp_path / 'raw'), {'es': ES, 'en': EN})
    with open(raw['train'] + '.es', 'wb') as f:
        for i, line in enumerate(ES):
            f.write((line.encode('latin-1') if i == 2 else line.encode('utf-8')) + b'\n')
    proc = _run_cli(_prepare_argv(raw, tmp_path / 'out'))
    error_line(proc, raw['train'] + '.es', 'line 3', 'UTF-8', alone=True)
    assert _no_final_outputs(str(tmp_path / 'out'))


def test_failure_midway_leaves_no_final_outputs(tmp_path, monkeypatch):
    raw = write_corpus(str(tmp_path / 'raw'), {'es': ES, 'en': EN})
    out = tmp_path / 'out'

    def boom(path, vocab):
        raise preprocess.InputError('%s: simulated failure' % path)
    monkeypatch.setattr(preprocess, 'vocabulary_dictionary', boom)
    assert prepare(raw, out, 'es', 'en', '--bpe-merges', '10') == 1
    assert os.listdir(out) == []


def test_postprocess_not_utf8():
    proc = subprocess.run([sys.executable, os.path.join(ROOT, 'pipeline', 'preprocess.py'),
                           'postprocess', '--lang', 'en'],
                          input=b'fine .\n\xff\xfe bad\n', capture_output=True)
    assert proc.returncode == 1
    assert proc.stderr.decode().strip() == 'error: <stdin>: line 2 is not valid UTF-8'


def test_wrapper_script(tmp_path):
    proc = subprocess.run([os.path.join(ROOT, 'pipeline', 'preprocess.sh'), 'postprocess',
                           '--lang', 'de'], input='die Fuß@@ gänger @-@ Ampel .\n',
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == 'Die Fußgänger-Ampel.\n'


def test_multi30k_style_tokenisation():
    tokenize = preprocess.Tokenizer('de', lowercase=True, normalize_punctuation=True,
                                    aggressive_dash_splits=False)
    # lowercased, „quotes“ normalised to ", escaped; the dash stays in its word
    assert tokenize('Die „neue“ Fußgänger-Ampel.') == \
        'die &quot; neue &quot; fußgänger-ampel .'


def test_lowercase_option(tmp_path):
    raw = write_corpus(str(tmp_path / 'raw'), {'en': EN, 'de': DE})
    out = tmp_path / 'out'
    assert prepare(raw, out, 'en', 'de', '--bpe-merges', '30', '--lowercase',
                   '--normalize-punctuation', '--no-aggressive-dash-splits') == 0
    tok = read(out / 'dev.tok.de')
    assert tok == [l.lower() for l in tok] and 'fußgänger-ampel' in tok[1]
    assert not [n for n in os.listdir(out) if n.startswith('truecase-model')]
    config = json.load(open(out / 'preprocess.json'))
    assert config['lowercase'] and config['normalize_punctuation']
    assert config['aggressive_dash_splits'] is False and config['truecase_models'] == {}


def test_bpe_vocabulary_threshold(tmp_path):
    raw = write_corpus(str(tmp_path / 'raw'), {'es': ES, 'en': EN})
    plain, kept, split = tmp_path / 'plain', tmp_path / 'kept', tmp_path / 'split'
    assert prepare(raw, plain, 'es', 'en', '--bpe-merges', '40') == 0
    assert prepare(raw, kept, 'es', 'en', '--bpe-merges', '40',
                   '--bpe-vocabulary-threshold', '1') == 0
    assert prepare(raw, split, 'es', 'en', '--bpe-merges', '40',
                   '--bpe-vocabulary-threshold', '3') == 0
    # bpe.vocab.LANG: the units of the BPE'd training data and their counts
    train = read(kept / 'train.bpe.en')
    counts = Counter(w for l in train for w in l.split())
    assert {l.split()[0]: int(l.split()[1]) for l in read(kept / 'bpe.vocab.en')} == counts
    # every training unit is in the vocabulary: threshold 1 changes nothing here
    assert train == read(plain / 'train.bpe.en')
    # threshold 3: a unit seen fewer than 3 times is split back into smaller
    # units, down to single characters
    units = [u for l in read(split / 'train.bpe.en') for u in l.split()]
    assert units != [u for l in train for u in l.split()]
    assert all(counts[u] >= 3 or len(u.replace('@@', '')) == 1 for u in units)
    # a threshold that no unit reaches splits every word into characters
    # (subword-nmt alone would take the empty vocabulary for none)
    assert prepare(raw, tmp_path / 'chars', 'es', 'en', '--bpe-merges', '40',
                   '--bpe-vocabulary-threshold', '1000') == 0
    assert all(len(u.replace('@@', '')) == 1
               for l in read(tmp_path / 'chars' / 'train.bpe.en') for u in l.split())


def test_undoing_bpe_in_python_and_in_the_validation_command_agree():
    """preprocess.undo_bpe and train_pair.BPE_UNDO (nmt.py's shell
    post-processing of validation BLEU) share one pattern, and read it alike."""
    import subprocess
    from pipeline import preprocess
    from pipeline.train_pair import BPE_UNDO
    lines = ['a wo@@ rd and a@@ no@@ ther', 'ends in a mark@@', 'ends in a mark@@ ', 'no marks']
    shell = subprocess.run(BPE_UNDO, shell=True, input='\n'.join(lines) + '\n',
                           capture_output=True, text=True, check=True).stdout.splitlines()
    assert shell == [preprocess.undo_bpe(line) for line in lines]
    assert shell[0] == 'a word and another'
