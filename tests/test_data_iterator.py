"""Tests for data_iterator: prepare_data and TextIterator."""
import gzip
import pickle

import numpy
import pytest

from data_iterator import TextIterator, prepare_data
from machinery.text_io import InputError


# --------------------------------------------------------------------------
# prepare_data
# --------------------------------------------------------------------------

def test_prepare_data_shapes_padding_masks():
    xs = [[5, 6, 7], [8]]
    ys = [[2], [3, 4]]
    x, x_mask, y, y_mask = prepare_data(xs, ys)
    assert x.dtype == numpy.int64 and y.dtype == numpy.int64
    assert x_mask.dtype == numpy.float32 and y_mask.dtype == numpy.float32
    assert x.tolist() == [[5, 8], [6, 0], [7, 0], [0, 0]]
    assert x_mask.tolist() == [[1, 1], [1, 1], [1, 0], [1, 0]]
    assert y.tolist() == [[2, 3], [0, 4], [0, 0]]
    assert y_mask.tolist() == [[1, 1], [1, 1], [0, 1]]


def test_prepare_data_maxlen_drops_either_side():
    xs = [[1, 1, 1], [2], [3, 3], [4]]
    ys = [[1], [2, 2, 2], [3, 3], [4]]
    # length >= 3 on either side is dropped; length 2 is kept
    x, x_mask, y, y_mask = prepare_data(xs, ys, maxlen=3)
    assert x.tolist() == [[3, 4], [3, 0], [0, 0]]
    assert y.tolist() == [[3, 4], [3, 0], [0, 0]]
    assert x_mask.shape == (3, 2) and y_mask.shape == (3, 2)
    assert prepare_data(xs, ys, maxlen=1) == (None, None, None, None)


# --------------------------------------------------------------------------
# TextIterator
# --------------------------------------------------------------------------

def write_lines(path, lines, gz=False):
    data = ''.join(line + '\n' for line in lines).encode('utf-8')
    opener = gzip.open if gz else open
    with opener(str(path), 'wb') as f:
        f.write(data)
    return str(path)


def numbered_corpus(tmp_path, target_lengths, gz=False):
    """Source line i is the word 'w<i>' (id i + 2); target line i has
    target_lengths[i] words 't'."""
    n = len(target_lengths)
    ext = '.gz' if gz else ''
    src = write_lines(tmp_path / ('src' + ext),
                      ['w%d' % i for i in range(n)], gz)
    trg = write_lines(tmp_path / ('trg' + ext),
                      [' '.join(['t'] * k) for k in target_lengths], gz)
    sdict = {'eos': 0, 'UNK': 1}
    sdict.update(('w%d' % i, i + 2) for i in range(n))
    tdict = {'eos': 0, 'UNK': 1, 't': 2}
    return src, trg, sdict, tdict


def line_numbers(batch):
    return [s[0] - 2 for s in batch[0]]


def test_batches_longest_first_and_short_last_batch(tmp_path):
    # buffer = 2 batches * 2 = 4 pairs: lines 0-3, then lines 4-6
    src, trg, sd, td = numbered_corpus(tmp_path, [1, 3, 2, 4, 2, 5, 1])
    it = TextIterator(src, trg, sd, td, batch_size=2, sort_k_batches=2)
    assert it.lines_total == 7
    batches = [line_numbers(b) for b in it]
    # first buffer sorted by target length: 0(1) 2(2) 1(3) 3(4), popped
    # from the end; second: 6(1) 4(2) 5(5); its last batch is short.
    assert batches == [[3, 1], [2, 0], [5, 4], [6]]


def test_ties_follow_numpy_argsort(tmp_path):
    lengths = [2, 1, 2, 2, 1]
    src, trg, sd, td = numbered_corpus(tmp_path, lengths)
    it = TextIterator(src, trg, sd, td, batch_size=1, sort_k_batches=5)
    got = [line_numbers(b)[0] for b in it]
    expected = list(numpy.array(lengths).argsort()[::-1])
    assert got == expected


def test_batch_contents(tmp_path):
    src = write_lines(tmp_path / 's', ['a b  c', 'b\tz'])
    trg = write_lines(tmp_path / 't', ['x y', 'y'])
    sd = {'eos': 0, 'UNK': 1, 'a': 2, 'b': 3, 'c': 4}
    td = {'eos': 0, 'UNK': 1, 'x': 2, 'y': 3}
    batches = list(TextIterator(src, trg, sd, td, batch_size=10))
    assert batches == [([[2, 3, 4], [3, 1]], [[2, 3], [3]])]


def test_unk_by_n_words(tmp_path):
    src = write_lines(tmp_path / 's', ['a b c z'])
    trg = write_lines(tmp_path / 't', ['x y q'])
    sd = {'eos': 0, 'UNK': 1, 'a': 2, 'b': 3, 'c': 4}
    td = {'eos': 0, 'UNK': 1, 'x': 2, 'y': 3}
    it = TextIterator(src, trg, sd, td, n_words_source=4, n_words_target=3)
    assert next(it) == ([[2, 3, 1, 1]], [[2, 1, 1]])
    it = TextIterator(src, trg, sd, td)           # -1: no limit
    assert next(it) == ([[2, 3, 4, 1]], [[2, 3, 1]])


def test_maxlen_skips_only_when_both_sides_long(tmp_path):
    src = write_lines(tmp_path / 's', ['a a a', 'a a a', 'a', 'a a'])
    trg = write_lines(tmp_path / 't', ['b b b', 'b', 'b b b', 'b b'])
    sd = {'a': 2}
    td = {'b': 2}
    it = TextIterator(src, trg, sd, td, batch_size=10, maxlen=2)
    source, target = next(it)
    # pair 0 (3, 3) is skipped; (3, 1) and (1, 3) are kept; (2, 2) kept
    assert sorted(map(len, source)) == [1, 2, 3]
    assert sorted(map(len, target)) == [1, 2, 3]
    assert len(source) == 3


def test_buffer_all_skipped_goes_on(tmp_path):
    # Deliberate fix: the original ended the epoch on such a buffer.
    src = write_lines(tmp_path / 's', ['a a a', 'a a a', 'a', 'a'])
    trg = write_lines(tmp_path / 't', ['b b b', 'b b b', 'b', 'b'])
    it = TextIterator(src, trg, {'a': 2}, {'b': 2}, batch_size=1,
                      sort_k_batches=2, maxlen=2)
    assert [b[0] for b in it] == [[[2]], [[2]]]


def test_epoch_reset(tmp_path):
    src, trg, sd, td = numbered_corpus(tmp_path, [1, 3, 2, 4, 2])
    it = TextIterator(src, trg, sd, td, batch_size=2, sort_k_batches=1)
    first = list(it)
    assert it.epoch_pairs_read == 0
    second = list(it)
    assert first == second and len(first) == 3
    with pytest.raises(StopIteration):
        for _ in range(4):
            it.next()


def check_shuffling(it, n):
    epochs = [[line_numbers(b)[0] for b in it] for _ in range(3)]
    for order in epochs:
        assert sorted(order) == list(range(n))
    assert epochs[0] != list(range(n))
    assert epochs[0] != epochs[1] != epochs[2]
    return epochs


@pytest.mark.parametrize('gz', [False, True], ids=['plain', 'gzip'])
def test_shuffle_each_epoch(tmp_path, gz):
    n = 40
    src, trg, sd, td = numbered_corpus(tmp_path, [1] * n, gz)
    it = TextIterator(src, trg, sd, td, batch_size=1, sort_k_batches=1,
                      shuffle_each_epoch=True, seed=7)
    epochs = check_shuffling(it, n)
    rng = numpy.random.RandomState(7)
    assert epochs[0] == rng.permutation(n).tolist()
    assert epochs[1] == rng.permutation(n).tolist()
    it.close()
    # Same seed, same orders.
    it2 = TextIterator(src, trg, sd, td, batch_size=1, sort_k_batches=1,
                       shuffle_each_epoch=True, seed=7)
    assert [line_numbers(b)[0] for b in it2] == epochs[0]


def test_shuffle_off_by_default(tmp_path):
    n = 20
    src, trg, sd, td = numbered_corpus(tmp_path, [1] * n)
    it = TextIterator(src, trg, sd, td, batch_size=1, sort_k_batches=1)
    for _ in range(2):
        assert [line_numbers(b)[0] for b in it] == list(range(n))


def test_gzip_input_and_dictionary_files(tmp_path):
    src, trg, sd, td = numbered_corpus(tmp_path, [1, 3, 2, 4, 2, 5, 1],
                                       gz=True)
    sdp, tdp = str(tmp_path / 'sd.pkl'), str(tmp_path / 'td.pkl')
    with open(sdp, 'wb') as f:
        pickle.dump(sd, f, protocol=2)
    with open(tdp, 'wb') as f:
        pickle.dump(td, f, protocol=2)
    it = TextIterator(src, trg, sdp, tdp, batch_size=2, sort_k_batches=2)
    assert [line_numbers(b) for b in it] == [[3, 1], [2, 0], [5, 4], [6]]


def test_last_line_without_newline_and_crlf(tmp_path):
    src = tmp_path / 's'
    trg = tmp_path / 't'
    src.write_bytes(b'a\r\nb\xc2\xa0c')       # no final newline; NBSP inside
    trg.write_bytes(b'x\r\ny')
    sd = {'a': 2, 'b\u00a0c': 3}
    it = TextIterator(str(src), str(trg), sd, {'x': 2, 'y': 3}, batch_size=5)
    assert it.lines_total == 2
    source, target = next(it)
    assert sorted(source) == [[2], [3]] and sorted(target) == [[2], [3]]


# --------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------

def one_line_error(excinfo, *fragments):
    msg = str(excinfo.value)
    assert '\n' not in msg
    for fragment in fragments:
        assert fragment in msg, msg


def test_missing_file(tmp_path):
    src, trg, sd, td = numbered_corpus(tmp_path, [1, 2])
    missing = str(tmp_path / 'nope')
    with pytest.raises(InputError) as e:
        TextIterator(missing, trg, sd, td)
    one_line_error(e, missing, 'no such file')
    with pytest.raises(InputError) as e:
        TextIterator(src, missing, sd, td, shuffle_each_epoch=True)
    one_line_error(e, missing, 'no such file')


@pytest.mark.parametrize('shuffle', [False, True])
def test_empty_file(tmp_path, shuffle):
    src, trg, sd, td = numbered_corpus(tmp_path, [1, 2])
    empty = tmp_path / 'empty'
    empty.write_bytes(b'')
    with pytest.raises(InputError) as e:
        TextIterator(src, str(empty), sd, td, shuffle_each_epoch=shuffle)
    one_line_error(e, str(empty), 'empty')
    gz = tmp_path / 'empty.gz'
    with gzip.open(str(gz), 'wb'):
        pass
    with pytest.raises(InputError) as e:
        TextIterator(str(gz), trg, sd, td, shuffle_each_epoch=shuffle)
    one_line_error(e, str(gz), 'empty')


@pytest.mark.parametrize('shuffle', [False, True])
def test_line_count_mismatch(tmp_path, shuffle):
    src = write_lines(tmp_path / 'src', ['a', 'b', 'c'])
    trg = write_lines(tmp_path / 'trg', ['x', 'y'])
    with pytest.raises(InputError) as e:
        TextIterator(src, trg, {}, {}, shuffle_each_epoch=shuffle)
    one_line_error(e, src, trg, '3', '2')


@pytest.mark.parametrize('shuffle', [False, True])
def test_not_utf8(tmp_path, shuffle):
    src = write_lines(tmp_path / 'src', ['a', 'b', 'c'])
    trg = tmp_path / 'trg'
    trg.write_bytes(b'x\ny\n\xff\xfez\n')
    trg2 = tmp_path / 'trg2'
    trg2.write_bytes(b'x\ny\nab c\xff\n')
    it = TextIterator(src, str(trg2), {}, {}, shuffle_each_epoch=shuffle)
    with pytest.raises(InputError) as e:
        list(it)
    one_line_error(e, str(trg2), 'line 3', '(byte 5)')
    it = TextIterator(src, str(trg), {}, {}, shuffle_each_epoch=shuffle)
    with pytest.raises(InputError) as e:
        list(it)
    one_line_error(e, str(trg), 'line 3', 'UTF-8', '(byte 1)')


def test_bad_dictionary(tmp_path):
    src, trg, sd, td = numbered_corpus(tmp_path, [1, 2])
    bad = tmp_path / 'd.pkl'
    bad.write_bytes(b'garbage')
    with pytest.raises(InputError) as e:
        TextIterator(src, trg, str(bad), td)
    one_line_error(e, str(bad))
    with pytest.raises(InputError) as e:
        TextIterator(src, trg, sd, str(tmp_path / 'none.json'))
    one_line_error(e, 'none.json', 'no such file')


def test_corrupt_gzip(tmp_path):
    src, trg, sd, td = numbered_corpus(tmp_path, [1, 2])
    bad = tmp_path / 'bad.gz'
    bad.write_bytes(b'not gzip at all')
    with pytest.raises(InputError) as e:
        TextIterator(str(bad), trg, sd, td)
    one_line_error(e, str(bad), 'cannot read')


@pytest.mark.parametrize('shuffle', [False, True])
@pytest.mark.parametrize('stop_after', [0, 1, 3, 5, 9])
def test_position_and_restore_continue_exactly(tmp_path, shuffle, stop_after):
    """An iterator restored from position() yields what the original yields
    next, into the following epoch, without replaying the batches."""
    n = 23
    lengths = [(i * 7) % 5 + 1 for i in range(n)]
    src, trg, sd, td = numbered_corpus(tmp_path, lengths)

    def make():
        return TextIterator(src, trg, sd, td, batch_size=2, sort_k_batches=3,
                            shuffle_each_epoch=shuffle, seed=3)
    original = make()
    for _ in range(stop_after):
        next(original)
    position = original.position()
    rest = list(original) + list(original)        # the epoch's rest, the next epoch

    restored = make()
    restored.restore(position)
    assert list(restored) + list(restored) == rest
    assert len(rest) > 0


def test_position_is_plain_numbers_and_arrays(tmp_path):
    src, trg, sd, td = numbered_corpus(tmp_path, [1, 2, 3])
    it = TextIterator(src, trg, sd, td, batch_size=1, shuffle_each_epoch=True)
    next(it)
    for key, value in it.position().items():
        assert numpy.asarray(value).dtype.kind in 'iuf', key


# --------------------------------------------------------------------------
# one tokenisation of a line into words everywhere
# --------------------------------------------------------------------------

UNICODE_SPACED = ['a\u00a0b c\u3000d', 'e\u2009f\tg  h', '\u3000 i\u00a0']


def test_words_split_on_ascii_whitespace_only():
    """A no-break space, U+3000 or a thin space stays inside its word, as in
    the original's Python 2 byte strings."""
    from machinery import vocab
    for line in UNICODE_SPACED:
        expected = [w.decode('utf-8') for w in line.encode('utf-8').split()]
        assert vocab.words(line) == expected
    assert vocab.words('a\u00a0b c\u3000d') == ['a\u00a0b', 'c\u3000d']


def test_the_same_ids_in_training_scoring_and_translation(tmp_path):
    """Training (TextIterator), scoring (score.pair_ids), translation
    (vocab.sentence_ids) and the output bias's counts (count_words) see the
    same words in lines with Unicode spaces."""
    import score
    from machinery import vocab
    from data_iterator import count_words
    d = {'a\u00a0b': 2, 'c\u3000d': 3, 'e\u2009f': 4, 'g': 5, 'h': 6, '\u3000': 7,
         'i\u00a0': 8, 'a': 9, 'b': 10}
    src, trg = tmp_path / 'src', tmp_path / 'trg'
    for path in (src, trg):
        path.write_text(''.join(line + '\n' for line in UNICODE_SPACED), encoding='utf-8')
    it = TextIterator(str(src), str(trg), d, d, batch_size=10, maxlen=100)
    trained = sorted(next(it)[1])
    options = {'n_words_src': 20, 'n_words': 20}
    scored = sorted(t for _, t in score.pair_ids(UNICODE_SPACED, UNICODE_SPACED, 's', 't',
                                                 [d, d], options))
    translated = sorted(vocab.sentence_ids(line, d)[:-1] for line in UNICODE_SPACED)
    assert trained == scored == translated == sorted([[2, 3], [4, 5, 6], [7, 8]])
    counts, _ = count_words(str(trg), d)
    assert counts[2:9].tolist() == [1] * 7 and counts[1] == 0
