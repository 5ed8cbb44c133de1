"""Tests for build_dictionary: the original ids, its quirks, the CLI."""
import collections
import gzip
import json
import os

import pytest

from helpers import ROOT, run_command
import build_dictionary as bd  # noqa: E402
from machinery import vocab  # noqa: E402

SCRIPT = os.path.join(ROOT, 'build_dictionary.py')


def run_cli(*args):
    return run_command('build_dictionary.py', args, cwd=ROOT)


def write(path, text):
    path.write_bytes(text.encode('utf-8'))
    return str(path)


def hand_ranking(counts):
    """Independent computation of argsort(counts)[::-1] for short inputs,
    where numpy's default sort is stable (insertion sort): ascending count,
    ties in order of first appearance; then reversed."""
    ascending = sorted(range(len(counts)), key=lambda i: counts[i])
    return ascending[::-1]


def test_ids_and_ties(tmp_path):
    path = write(tmp_path / 'c.txt', 'a b c\nb c d\nc e\n')
    # first appearance: a1 b2 c3 d1 e1; ascending stable: a d e b c
    expected = [('eos', 0), ('UNK', 1), ('c', 2), ('b', 3), ('e', 4),
                ('d', 5), ('a', 6)]
    d = bd.build_dictionary(path)
    assert isinstance(d, collections.OrderedDict)
    assert list(d.items()) == expected
    words = ['a', 'b', 'c', 'd', 'e']
    ranked = [words[i] for i in hand_ranking([1, 2, 3, 1, 1])]
    assert ranked == ['c', 'b', 'e', 'd', 'a']


def test_single_space_split_and_empty_word(tmp_path):
    # Runs of spaces give '' tokens; an empty line gives ''; tabs stay in
    # words; the line is stripped of ASCII whitespace first.
    path = write(tmp_path / 'c.txt', '  x  y\t\n\nx\ty \n')
    d = bd.build_dictionary(path)
    # line 1 'x  y'      -> ['x', '', 'y']
    # line 2 ''          -> ['']
    # line 3 'x\ty'      -> ['x\ty']
    counts = collections.OrderedDict([('x', 1), ('', 2), ('y', 1),
                                      ('x\ty', 1)])
    words = list(counts)
    ranked = [words[i] for i in hand_ranking(list(counts.values()))]
    assert ranked == ['', 'x\ty', 'y', 'x']
    assert list(d.items()) == [('eos', 0), ('UNK', 1)] + [
        (w, i + 2) for i, w in enumerate(ranked)]


def test_special_words_in_corpus_overwrite_ids(tmp_path):
    path = write(tmp_path / 'c.txt', 'x eos x UNK x eos\n')
    d = bd.build_dictionary(path)
    # counts x3 eos2 UNK1 -> ranking x, eos, UNK -> ids 2, 3, 4; 'eos' and
    # 'UNK' keep their first positions but take the new ids.
    assert list(d.items()) == [('eos', 3), ('UNK', 4), ('x', 2)]


def test_unicode_and_gzip(tmp_path):
    text = 'caf\u00e9 \u4e2d caf\u00e9\n\u00a0a\n'
    plain = bd.build_dictionary(write(tmp_path / 'c.txt', text))
    gz = tmp_path / 'c.txt.gz'
    with gzip.open(str(gz), 'wb') as f:
        f.write(text.encode('utf-8'))
    assert bd.build_dictionary(str(gz)) == plain
    # NBSP is not ASCII whitespace, so it stays part of the word
    assert '\u00a0a' in plain and plain['caf\u00e9'] == 2


def test_cli_writes_pkl_and_json(tmp_path):
    p1 = write(tmp_path / 'a.txt', 'b a b\n')
    p2 = write(tmp_path / 'b.txt', 'caf\u00e9\n')
    out = run_cli(p1, p2)
    assert out.returncode == 0, out.stderr
    assert out.stdout == ''
    d1 = vocab.load_dictionary(p1 + '.pkl')
    assert list(d1.items()) == [('eos', 0), ('UNK', 1), ('b', 2), ('a', 3)]
    with open(p2 + '.json', encoding='utf-8') as f:
        assert json.load(f) == {'eos': 0, 'UNK': 1, 'caf\u00e9': 2}
    with open(p2 + '.pkl', 'rb') as f:
        assert f.read(2) == b'\x80\x02'


@pytest.mark.parametrize('case', ['missing', 'empty', 'not_utf8'])
def test_cli_errors_write_nothing(tmp_path, case):
    good = write(tmp_path / 'good.txt', 'a b\n')
    bad = tmp_path / 'bad.txt'
    if case == 'empty':
        bad.write_bytes(b'')
    elif case == 'not_utf8':
        bad.write_bytes(b'ok\nnot \xff utf8\n')
    out = run_cli(good, bad)
    assert out.returncode == 1
    lines = out.stderr.strip().split('\n')
    assert lines[-1].startswith('error: ' + str(bad))
    if case == 'not_utf8':
        assert 'line 2' in lines[-1]
    assert sorted(os.listdir(str(tmp_path))) == sorted(
        ['good.txt'] + (['bad.txt'] if case != 'missing' else []))


def test_cli_no_arguments():
    out = run_cli()
    assert out.returncode == 2 and 'FILE' in out.stderr
    assert out.stderr.startswith('error: the following arguments are required')
