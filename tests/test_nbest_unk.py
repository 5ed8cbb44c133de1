"""The n-best format (translation/nbest.py) and unknown-word replacement (translation/unk_replace.py)."""
import pytest

from translation import nbest
from translation import unk_replace
from machinery.text_io import InputError


def test_nbest_entries_round_trip(tmp_path):
    path = tmp_path / 'list.nbest'
    lines = [nbest.format_entry(0, 'x y', 1.5), nbest.format_entry(0, '', 2.25),
             nbest.format_entry(3, 'z', [0.5, 7.0])]
    assert lines == ['0 ||| x y ||| 1.500000', '0 |||  ||| 2.250000',
                     '3 ||| z ||| 0.500000 7.000000']
    path.write_text(''.join(line + '\n' for line in lines))
    entries = nbest.read_nbest(str(path), n_sources=4)
    assert [(i, h, s) for i, h, s, _ in entries] == [
        (0, 'x y', '1.500000'), (0, '', '2.250000'), (3, 'z', '0.500000 7.000000')]
    with pytest.raises(InputError, match='line 3 refers to sentence 3'):
        nbest.read_nbest(str(path), n_sources=3)


@pytest.mark.parametrize('text,message', [
    ('0 ||| a\n', 'line 1 is not an n-best entry'),
    ('0 ||| a ||| 1\n\n', 'line 2 is empty'),
    ('-1 ||| a ||| 1\n', 'line 1: the sentence number'),
    ('0 ||| a ||| x1\n', "line 1: the score 'x1'"),
    ('', 'empty file')])
def test_nbest_errors_name_file_and_line(tmp_path, text, message):
    path = tmp_path / 'bad.nbest'
    path.write_text(text)
    with pytest.raises(InputError, match=message) as e:
        nbest.read_nbest(str(path))
    assert str(path) in str(e.value) and '\n' not in str(e.value)


def test_unk_dictionary_format(tmp_path):
    path = tmp_path / 'lex.txt'
    path.write_text('haus house 0.3\nhaus home 0.6\nhaus building 0.6\n\n'
                    'katze cat\nkatze kitten\n')
    assert unk_replace.load_dictionary(str(path)) == {'haus': 'home', 'katze': 'cat'}
    for text, message in (('a b c d\n', 'line 1: expected'), ('a b\nc\n', 'line 2: expected'),
                          ('a b x\n', "line 1: the score 'x'")):
        path.write_text(text)
        with pytest.raises(InputError, match=message):
            unk_replace.load_dictionary(str(path))


def test_replace_unknown_by_attention():
    source = ['das', 'Haus', 'Zimmermann']
    attention = [[.7, .2, .05, .05],      # UNK -> das
                 [.1, .1, .1, .7],        # not UNK
                 [.1, .3, .2, .4],        # UNK: eos left out -> Haus
                 [.0, .0, .0, 1.]]
    target = ['UNK', 'is', 'UNK', '<eos>']
    assert unk_replace.replace_unknown(target, source, attention) == [
        'das', 'is', 'Haus', '<eos>']
    assert unk_replace.replace_unknown(target, source, attention, {'Haus': 'house'}) == [
        'das', 'is', 'house', '<eos>']
    assert unk_replace.replace_unknown(['UNK'], [], [[1.]]) == ['UNK']
