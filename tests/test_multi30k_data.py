"""pipeline/multi30k.py: get (copy, check, refuse) and prepare, on a tiny
made-up mirror of the dataset's repository layout (data/task1/raw/*.gz)."""
import gzip
import json
import os
import pickle

import pytest

from helpers import error_line, finished, run_command
from pipeline import multi30k

EN = ['A Man in a red Shirt rides a Bike.', 'Two dogs play in the "snow".',
      'A girl climbs a well-known rock wall.', 'The man is cooking.']
DE = ['Ein Mann in einem roten Hemd fährt Fahrrad.', 'Zwei Hunde spielen im „Schnee“.',
      'Ein Mädchen klettert an einer gut-bekannten Felswand.', 'Der Mann kocht.']
TINY_LINES = {'train': 4, 'val': 3, 'test_2016_flickr': 2, 'test_2017_flickr': 2,
              'test_2017_mscoco': 1}


@pytest.fixture
def mirror(tmp_path, monkeypatch):
    """A made-up copy of the repository; the module's line counts and
    checksums are those of its files."""
    raw = tmp_path / 'mirror' / 'data' / 'task1' / 'raw'
    raw.mkdir(parents=True)
    checksums = {}
    for name, lines in TINY_LINES.items():
        for lang, text in (('en', EN), ('de', DE)):
            path = raw / ('%s.%s.gz' % (name, lang))
            with gzip.open(path, 'wt', encoding='utf-8') as f:
                f.writelines(line + '\n' for line in text[:lines])
            checksums[path.name] = multi30k.sha256_of(path)
    monkeypatch.setattr(multi30k, 'LINES', TINY_LINES)
    monkeypatch.setattr(multi30k, 'SHA256', checksums)
    return tmp_path / 'mirror'


def get(capsys, out, base, *extra):
    """'multi30k.py get' in this process: its exit status and stderr (progress
    lines' carriage returns made line ends)."""
    status = multi30k.main(['get', '--out', str(out), '--base', str(base)] + list(extra))
    return status, capsys.readouterr().err.replace('\r', '\n')


def only_verified_files(raw):
    """Every file of raw/ is one of the dataset's, complete and verified; no
    temporary file is left."""
    for name in os.listdir(raw):
        assert name in multi30k.SHA256, name
        assert multi30k.problem_with(os.path.join(raw, name), name, True) is None
    return sorted(os.listdir(raw))


def test_get_from_a_directory(mirror, tmp_path, capsys):
    status, err = get(capsys, tmp_path / 'out', mirror)
    assert status == 0, err
    raw = tmp_path / 'out' / 'raw'
    assert only_verified_files(raw) == sorted(multi30k.SHA256)
    with gzip.open(raw / 'val.de.gz', 'rt', encoding='utf-8') as f:
        assert f.read().splitlines() == DE[:3]
    assert 'copying train.en.gz' in err
    # a second run finds the files there and verified
    status, err = get(capsys, tmp_path / 'out', mirror)
    assert status == 0 and err.count('already there and verified') == 10


def test_get_from_a_file_url(mirror, tmp_path, capsys):
    status, err = get(capsys, tmp_path / 'out', mirror.as_uri())
    assert status == 0, err
    assert only_verified_files(tmp_path / 'out' / 'raw') == sorted(multi30k.SHA256)


def test_a_bad_file_there_is_fetched_again(mirror, tmp_path, capsys):
    assert get(capsys, tmp_path / 'out', mirror)[0] == 0
    (tmp_path / 'out' / 'raw' / 'val.en.gz').write_bytes(b'half a file')
    status, err = get(capsys, tmp_path / 'out', mirror)
    assert status == 0 and 'fetching it again' in err
    assert only_verified_files(tmp_path / 'out' / 'raw') == sorted(multi30k.SHA256)


def test_truncated_gzip(mirror, tmp_path, capsys):
    path = mirror / 'data' / 'task1' / 'raw' / 'val.de.gz'
    data = path.read_bytes()
    path.write_bytes(data[:len(data) // 2])
    line = error_line(finished(*get(capsys, tmp_path / 'out', mirror)))
    assert 'val.de.gz' in line and 'truncated or corrupt' in line
    assert 'val.de.gz' not in only_verified_files(tmp_path / 'out' / 'raw')


def test_wrong_number_of_lines(mirror, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(multi30k.LINES, 'test_2017_mscoco', 5)
    line = error_line(finished(*get(capsys, tmp_path / 'out', mirror)))
    assert 'test_2017_mscoco.en.gz' in line and '1 lines, not the 5' in line
    assert 'test_2017_mscoco.en.gz' not in only_verified_files(tmp_path / 'out' / 'raw')


def test_wrong_checksum(mirror, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(multi30k.SHA256, 'train.de.gz', '0' * 64)
    line = error_line(finished(*get(capsys, tmp_path / 'out', mirror)))
    assert 'train.de.gz' in line and 'SHA-256' in line and '--no-checksum' in line
    assert os.listdir(tmp_path / 'out' / 'raw') == ['train.en.gz']
    # --no-checksum accepts the copy (a later version of the dataset, say)
    status, err = get(capsys, tmp_path / 'out', mirror, '--no-checksum')
    assert status == 0, err
    assert len(os.listdir(tmp_path / 'out' / 'raw')) == 10


def test_missing_file(mirror, tmp_path, capsys):
    os.unlink(mirror / 'data' / 'task1' / 'raw' / 'test_2016_flickr.en.gz')
    line = error_line(finished(*get(capsys, tmp_path / 'out', mirror)))
    assert 'test_2016_flickr.en.gz' in line and 'no such file' in line
    assert 'test_2016_flickr.en.gz' not in only_verified_files(tmp_path / 'out' / 'raw')


def test_not_a_copy_of_the_repository(tmp_path, capsys):
    line = error_line(finished(*get(capsys, tmp_path / 'out', tmp_path / 'nowhere')))
    assert 'nowhere: no such directory' in line


def test_unreachable_address(tmp_path, capsys):
    line = error_line(finished(*get(capsys, tmp_path / 'out', 'http://127.0.0.1:9/')))
    assert line.startswith('error: cannot reach http://127.0.0.1:9/')
    assert '--base can name a local copy' in line
    assert only_verified_files(tmp_path / 'out' / 'raw') == []


def test_command_line_errors_are_one_line(tmp_path):
    """As a program: the unreachable address, and a language the dataset's
    five sets lack, refused before anything is fetched or made."""
    for extra, needles in ((['--base', 'http://127.0.0.1:9/'], ['cannot reach']),
                           (['--langs', 'en', 'fr'], ['fr', 'en and de'])):
        out = tmp_path / ('out%d' % len(extra))
        proc = run_command('pipeline/multi30k.py', ['get', '--out', out] + extra)
        error_line(proc, *needles, alone=True)
    assert not os.path.exists(tmp_path / 'out3')


def test_prepare(mirror, tmp_path, capsys):
    out = tmp_path / 'out'
    assert get(capsys, out, mirror)[0] == 0
    status = multi30k.main(['prepare', '--raw', str(out / 'raw'), '--out', str(out),
                            '--bpe-merges', '20'])
    assert status == 0, capsys.readouterr().err
    for name, lines in TINY_LINES.items():
        for lang in ('en', 'de'):
            tok = (out / ('%s.tok.%s' % (name, lang))).read_text('utf-8').splitlines()
            bpe = (out / ('%s.bpe.%s' % (name, lang))).read_text('utf-8').splitlines()
            assert len(tok) == len(bpe) == lines
            assert tok == [l.lower() for l in tok]
            assert [l.replace('@@ ', '') for l in bpe] == tok
    tok_en = (out / 'train.tok.en').read_text('utf-8').splitlines()
    tok_de = (out / 'train.tok.de').read_text('utf-8').splitlines()
    assert tok_en[0] == 'a man in a red shirt rides a bike .'
    assert tok_en[2] == 'a girl climbs a well-known rock wall .'       # no dash splits
    assert tok_de[1] == 'zwei hunde spielen im &quot; schnee &quot; .'  # „“ -> ", escaped
    for lang in ('en', 'de'):
        with open(out / ('train.bpe.%s.pkl' % lang), 'rb') as f:
            word_to_id = pickle.load(f)
        ids = {(w.decode('utf-8') if isinstance(w, bytes) else w): i
               for w, i in word_to_id.items()}
        assert ids['eos'] == 0 and ids['UNK'] == 1
        assert ids == json.loads((out / ('train.bpe.%s.json' % lang)).read_text('utf-8'))
        assert (out / ('bpe.vocab.%s' % lang)).exists()
    assert (out / 'bpe.codes').exists()
    settings = json.loads((out / 'preprocess.json').read_text('utf-8'))
    assert settings['lowercase'] and settings['normalize_punctuation']
    assert settings['aggressive_dash_splits'] is False
    assert settings['bpe_vocabulary_threshold'] == 1 and settings['lines'] == TINY_LINES
    assert not [n for n in os.listdir(out) if n.startswith('.')]


def test_prepare_without_the_data(tmp_path, capsys):
    status = multi30k.main(['prepare', '--raw', str(tmp_path / 'raw'),
                            '--out', str(tmp_path / 'out')])
    line = error_line(finished(status, capsys.readouterr().err))
    assert 'train.en.gz: no such file' in line and 'multi30k.py get' in line
    assert not os.path.exists(tmp_path / 'out')
