"""analyze.py and its modules on hand-made attention: every number below is
worked out by hand in the comments."""
import json

import numpy
import pytest

from helpers import error_line, run_command

from analysis import attention_positions  # noqa: E402
from analysis import attention_records  # noqa: E402
from analysis import attention_trees as at  # noqa: E402
from analysis import parseval  # noqa: E402
from machinery.text_io import InputError  # noqa: E402


def record_line(i, target, previous, source=('x', 'y'), inference=None):
    """One alignments line; source attention uniform."""
    src = list(source) + ['<eos>']
    obj = {'id': i, 'score': 1.0, 'source': src, 'target': list(target),
           'source_attention': [[1.0 / len(src)] * len(src) for _ in target],
           'previous_attention': previous}
    if inference:
        obj['inference'] = inference
    return json.dumps(obj)


def record(target, previous, inference=None, i=0):
    return attention_records.parse_record(record_line(i, target, previous,
                                                      inference=inference), 'a.jsonl', i + 1)


# 'a b <eos>': row 0 sees only the start; row 1 sees start + a; row 2 start + a + b
TWO = record(['a', 'b', '<eos>'], [[1.0], [0.3, 0.7], [0.5, 0.2, 0.3]])


# ---------------------------------------------------------------- records

def test_record_items_and_word_matrix():
    assert TWO.words == ['a', 'b'] and TWO.n_start == 1
    numpy.testing.assert_allclose(TWO.word_weights(2), [0.2, 0.3])
    assert TWO.start_weight(2) == 0.5
    # W[t, k]: prediction of word t on word k; row 0 sees no word
    numpy.testing.assert_allclose(TWO.word_matrix(), [[0, 0], [0.7, 0]])
    assert TWO.item_labels(3) == ['<s>', 'a', 'b']


def test_authors_inference_has_two_start_items():
    r = record(['a', 'b', '<eos>'], [[1.0], [0.5, 0.5], [0.2, 0.3, 0.5]], 'authors')
    assert r.n_start == 2
    assert len(r.word_weights(1)) == 0            # the word just produced is not seen
    numpy.testing.assert_allclose(r.word_weights(2), [0.5])   # token 0 ('a')
    assert r.start_weight(2) == pytest.approx(0.5)
    assert r.item_labels(3) == ['<s>', '<s>', 'a']
    numpy.testing.assert_array_equal(r.word_matrix(), numpy.zeros((2, 2)))


@pytest.mark.parametrize('previous, message', [
    ([], 'no target-side attention (baseline'),
    ([[1.0], [0.5, 0.5, 0.0], [0.2, 0.3, 0.5]], 'row 1 has 3 weights, 2 expected'),
    ([[0.0], [0.0, 0.0], [0.0, 0.0, 0.0]], 'all zero'),
    ([[1.0], [0.5, 0.6], [0.2, 0.3, 0.5]], 'not a distribution'),
    ([[1.0], [1.0, 0.0]], '2 rows for 3 output tokens'),
])
def test_bad_previous_attention(previous, message):
    with pytest.raises(InputError) as e:
        record(['a', 'b', '<eos>'], previous)
    assert message in str(e.value) and 'a.jsonl: line 1' in str(e.value)


def test_malformed_lines_name_file_and_line(tmp_path):
    path = tmp_path / 'al.jsonl'
    good = record_line(0, ['a', '<eos>'], [[1.0], [0.4, 0.6]])
    for bad, message in [('{"id": 1,', 'line 2: not valid JSON'),
                         ('[1, 2]', 'line 2: a JSON object'),
                         ('{"id": 1}', "line 2: no field 'source'"),
                         (record_line(5, ['a', '<eos>'], [[1.0], [0.4, 0.6]]),
                          'line 2: id 5 where 1 was expected'),
                         (record_line(1, ['a', '<eos>'], [[1.0], [0.4, 0.6]],
                                      inference='other'), "unknown inference 'other'")]:
        path.write_text(good + '\n' + bad + '\n')
        with pytest.raises(InputError) as e:
            attention_records.read_records(str(path))
        assert str(path) in str(e.value) and message in str(e.value)


def test_alignments_from_another_source_file(tmp_path):
    path, src = tmp_path / 'al.jsonl', tmp_path / 'src.txt'
    path.write_text(record_line(0, ['a', '<eos>'], [[1.0], [0.4, 0.6]]) + '\n')
    records = attention_records.read_records(str(path))
    src.write_text('x y\n')
    attention_records.check_source(records, str(path), str(src))
    src.write_text('x z\n')
    with pytest.raises(InputError, match='line 1: the source tokens differ'):
        attention_records.check_source(records, str(path), str(src))
    src.write_text('x y\nx y\n')
    with pytest.raises(InputError, match='has 1 sentences but .* has 2 lines'):
        attention_records.check_source(records, str(path), str(src))


# ---------------------------------------------------------------- positions

def test_positions_two_words():
    s = attention_positions.position_summary([TWO], max_position=3)
    # row 1: words [a=0.7 at -1] -> max at -1; row 2: [a=0.2 at -2, b=0.3 at -1] -> -1
    assert s['predictions'] == 2
    assert s['max_attention_count'] == [2, 0, 0]
    assert s['predictions_with_position'] == [2, 1, 0]
    assert s['max_attention_percent'] == [100.0, 0.0, None]
    assert s['mean_weight'][0] == pytest.approx((0.7 + 0.3) / 2)
    assert s['mean_weight'][1] == pytest.approx(0.2) and s['mean_weight'][2] is None
    # the start outweighs every word in row 2 only (0.5 > 0.3); mean start weight
    assert s['start_max_percent'] == 50.0
    assert s['start_mean_weight'] == pytest.approx((0.3 + 0.5) / 2)
    assert s['max_beyond_window'] == 0


def test_positions_one_word_and_ties():
    one = record(['a', '<eos>'], [[1.0], [0.4, 0.6]])
    tie = record(['a', 'b', '<eos>'], [[1.0], [0.5, 0.5], [0.0, 0.5, 0.5]])
    s = attention_positions.position_summary([one, tie], max_position=2)
    # one: max at -1 (0.6); tie: row 1 -> -1; row 2 a tie between -2 and -1 -> nearest
    assert s['max_attention_count'] == [3, 0]
    assert s['predictions_with_position'] == [3, 1]
    assert s['mean_weight'] == pytest.approx([(0.6 + 0.5 + 0.5) / 3, 0.5])


def test_positions_authors_inference_never_sees_minus_one():
    r = record(['a', 'b', '<eos>'], [[1.0], [0.5, 0.5], [0.2, 0.3, 0.5]], 'authors')
    s = attention_positions.position_summary([r], max_position=2)
    # only row 2 sees a word: token 0 ('a', weight 0.5) at -2
    assert s['predictions'] == 1 and s['inference'] == 'authors'
    assert s['max_attention_percent'] == [None, 100.0]
    assert s['mean_weight'] == [None, 0.5]
    assert s['start_max_percent'] == 0.0     # 0.2 + 0.3 = 0.5 is not above 0.5


def test_positions_window_longer_than_50():
    """57 tokens; row t >= 1 puts all its weight on the first token, at -t."""
    n = 57
    previous = [[1.0]] + [[0.0, 1.0] + [0.0] * (t - 1) for t in range(1, n)]
    r = record(['w%d' % i for i in range(n - 1)] + ['<eos>'], previous)
    s = attention_positions.position_summary([r])
    d = numpy.arange(1, 51)
    # one max at each -1..-50; rows 51..56 have theirs beyond -50
    assert s['max_attention_count'] == [1] * 50 and s['max_beyond_window'] == 6
    # position -d exists for rows t >= d: 56 - d + 1 of them
    assert s['predictions_with_position'] == (57 - d).tolist()
    numpy.testing.assert_allclose(s['max_attention_percent'], 100.0 / (57 - d))
    numpy.testing.assert_allclose(s['mean_weight'], 1.0 / (57 - d))
    assert len(s['mean_weight']) == 50 and s['predictions'] == 56


# ---------------------------------------------------------------- trees

def lower(rows):
    """Square matrix from rows of the previous words' weights (row t has t)."""
    n = len(rows)
    m = numpy.zeros((n, n))
    for t, row in enumerate(rows):
        m[t, :len(row)] = row
    return m


def test_trees_of_zero_one_and_two_words():
    assert at.attention_tree(lower([])) is None
    assert at.attention_tree(lower([[]])) == 0
    assert at.attention_tree(lower([[], [1.0]])) == [0, 1]
    assert at.brackets(0, ['a']) == '(a)' and at.brackets(None, []) == '()'
    assert at.constituents(0) == set() and at.constituents([0, 1]) == {(0, 2)}
    assert at.right_branching_tree(1) == 0 and at.right_branching_tree(2) == [0, 1]


def test_split_when_the_focus_moves():
    # foci: 1 -> 0, 2 -> 0, 3 -> 0, 4 -> 3 (moved): [w0 w1 w2 w3] then [w4]
    A = lower([[], [0.9], [0.6, 0.3], [0.5, 0.2, 0.2], [0.1, 0.1, 0.1, 0.6]])
    tree = at.attention_tree(A)
    assert tree == [[0, 1, 2, 3], 4]
    assert at.brackets(tree, 'a b c d e'.split()) == '((a b c d) e)'
    assert at.constituents(tree) == {(0, 4), (0, 5)}


def test_focus_is_taken_inside_the_remaining_span():
    # 2 -> 1 moves from 0: split before 2.  In [2, 5): 3 -> 2; row 4 puts most
    # weight on word 0 (outside the span); inside it, 3 (0.2) beats 2 (0.1)
    A = lower([[], [1.0], [0.2, 0.7], [0.1, 0.1, 0.7], [0.6, 0.1, 0.1, 0.2]])
    assert at.attention_tree(A) == [[0, 1], [[2, 3], 4]]
    assert at.constituents(at.attention_tree(A)) == {(0, 2), (2, 4), (2, 5), (0, 5)}
    A[4] = [0.6, 0.1, 0.2, 0.1, 0]              # inside the span: 2 still -> no split
    assert at.attention_tree(A) == [[0, 1], [2, 3, 4]]


def test_previous_word_attention_gives_pairs_and_first_word_one_phrase():
    prev = lower([[], [1], [0, 1], [0, 0, 1], [0, 0, 0, 1]])
    assert at.attention_tree(prev) == [[0, 1], [[2, 3], 4]]
    first = lower([[], [1], [1, 0], [1, 0, 0], [1, 0, 0, 0]])
    assert at.attention_tree(first) == [0, 1, 2, 3, 4]


def test_no_focus_never_splits_and_ties_go_to_the_nearest():
    # row 2 is all zero (no focus); row 3 ties 0 and 1 -> 1, a move from 0
    A = lower([[], [1.0], [0.0, 0.0], [0.5, 0.5, 0.0]])
    assert at.focus(A, 2, 0) is None and at.focus(A, 3, 0) == 1
    assert at.attention_tree(A) == [[0, 1, 2], 3]


def test_right_branching_baseline():
    tree = at.right_branching_tree(4)
    assert tree == [0, [1, [2, 3]]]
    assert at.constituents(tree) == {(0, 4), (1, 4), (2, 4)}
    assert at.brackets(tree, ['(', 'b', 'c', ')']) == '(-LRB- (b (c -RRB-)))'


# ---------------------------------------------------------------- parseval

def test_read_ptb_spans_leaves_and_empty_elements():
    leaves, tree = parseval.read_ptb(
        '(ROOT (S (NP (DT the) (NN cat)) (VP (VBD sat)) (. .)))', 'p: line 1')
    assert leaves == ['the', 'cat', 'sat', '.']
    assert at.constituents(tree) == {(0, 2), (0, 4)}       # VP is a single word
    leaves, tree = parseval.read_ptb('( (S (NP (-NONE- *T*)) (VP (VB go) (RB now))))', 'p')
    assert leaves == ['go', 'now'] and at.constituents(tree) == {(0, 2)}
    for bad, message in [('(S (NP a)', 'unbalanced'), ('(S a) b)', 'after the end'),
                         ('S a', 'must start with'), ('(S (-NONE- *))', 'no words')]:
        with pytest.raises(InputError, match=message):
            parseval.read_ptb(bad, 'p: line 3')


def test_tokens_must_match_up_to_escapes():
    parseval.check_tokens(['(', '&quot;', 'x'], ['-LRB-', '``', 'x'], 'p: line 1')
    with pytest.raises(InputError, match=r"p: line 1: .*word 2 is 'dog' in the parse, "
                                         r"'cat' in the translation"):
        parseval.check_tokens(['the', 'cat'], ['the', 'dog'], 'p: line 1')
    with pytest.raises(InputError, match='merge them with --bpe'):
        parseval.check_tokens(['the', 'ca@@', 't'], ['the', 'cat'], 'p: line 1')
    with pytest.raises(InputError, match="word 3 is 'the end'"):
        parseval.check_tokens(['a', 'b', 'c'], ['a', 'b'], 'p: line 1')


def test_bpe_spans_are_mapped_to_words():
    words, word_of = parseval.word_index(['the', 'ca@@', 't', 'sat'], bpe=True)
    assert words == ['the', 'cat', 'sat'] and word_of == [0, 1, 1, 2]
    spans = {(0, 2), (0, 3), (1, 3), (1, 4), (0, 4), (2, 4)}
    # (0,2) and (2,4) cut 'cat'; (1,3) is the single word 'cat'
    assert parseval.project(spans, word_of) == {(0, 2), (1, 3), (0, 3)}


def test_precision_recall():
    c = parseval.Counts()
    c.add({(0, 2), (0, 4)}, {(0, 2), (2, 4), (0, 4)})
    c.add({(0, 3)}, {(1, 3)})
    s = c.scores()
    assert (s['matched'], s['constituents'], s['reference_constituents']) == (2, 3, 4)
    assert s['precision'] == pytest.approx(2 / 3) and s['recall'] == pytest.approx(0.5)
    assert s['f1'] == pytest.approx(2 * (2 / 3) * 0.5 / (2 / 3 + 0.5))


# ---------------------------------------------------------------- the command line

def run(args, cwd):
    return run_command('analysis/analyze.py', args, cwd=cwd, timeout=300)


@pytest.fixture(scope='module')
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp('analyze')
    lines = [
        # 'the cat sat .': 1 -> the; 2 -> cat (moved): [the cat]; in [2, 4): 3 -> sat
        record_line(0, ['the', 'cat', 'sat', '.', '<eos>'],
                    [[1.0], [0.1, 0.9], [0.1, 0.2, 0.7], [0.1, 0.1, 0.1, 0.7],
                     [0.2, 0.2, 0.2, 0.2, 0.2]]),
        record_line(1, ['hi', '<eos>'], [[1.0], [0.5, 0.5]]),
        record_line(2, ['ok', '<eos>'], [[1.0], [0.25, 0.75]]),
    ]
    (d / 'al.jsonl').write_text(''.join(line + '\n' for line in lines))
    (d / 'src.txt').write_text('x y\nx y\nx y\n')
    (d / 'ref.ptb').write_text('(ROOT (S (NP (DT the) (NN cat)) (VP (VBD sat)) (. .)))\n'
                               '(ROOT (UH hi))\n\n')
    return d


def test_cli_positions(files):
    proc = run(['positions', 'al.jsonl', 'al.jsonl', '--labels', 'A,B', '--json', 'p.json',
                '--csv', 'p.csv', '--png', 'p.png', '--source', 'src.txt'], files)
    assert proc.returncode == 0, proc.stderr
    result = json.loads((files / 'p.json').read_text())
    assert sorted(result) == ['A', 'B']
    a = result['A']
    assert len(a['max_attention_percent']) == len(a['mean_weight']) == 50
    # 6 predictions see a word, all with the max at -1 (row 4 of sentence 0: a tie)
    assert a['predictions'] == 6 and a['max_attention_percent'][:3] == [100.0, 0.0, 0.0]
    assert a['mean_weight'][0] == pytest.approx((0.9 + 0.7 + 0.7 + 0.2 + 0.5 + 0.75) / 6)
    assert a['mean_weight'][1] == pytest.approx((0.2 + 0.1 + 0.2) / 3)
    assert a['mean_weight'][4] is None
    assert (files / 'p.csv').read_text().split('\n')[1].startswith('A,-1,100.0,')
    assert (files / 'p.png').read_bytes()[:4] == b'\x89PNG'
    assert 'reading al.jsonl: 3/3 sentences' in proc.stderr


def test_cli_trees_matrix_and_parseval(files):
    proc = run(['trees', 'al.jsonl', '--png', 't.png'], files)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == '((the cat) (sat .))\n(hi)\n(ok)\n'
    assert (files / 't.png').read_bytes()[:4] == b'\x89PNG'
    proc = run(['trees', 'al.jsonl', '-i', '0', '--right-branching'], files)
    assert proc.stdout == '(the (cat (sat .)))\n'
    proc = run(['matrix', 'al.jsonl', 'al.jsonl', '-i', '0', '--png', 'm.png'], files)
    assert proc.returncode == 0 and (files / 'm.png').read_bytes()[:4] == b'\x89PNG'
    proc = run(['parseval', 'al.jsonl', 'ref.ptb', '--json', 'pe.json'], files)
    assert proc.returncode == 0, proc.stderr
    rows = {r['trees']: r for r in json.loads((files / 'pe.json').read_text())}
    # reference {(0,2), (0,4)}; attention {(0,2), (2,4), (0,4)}; right {(0,4), (1,4), (2,4)}
    att, right = rows['attention'], rows['right-branching']
    assert (att['precision'], att['recall']) == (pytest.approx(2 / 3), 1.0)
    assert (right['precision'], right['recall']) == (pytest.approx(1 / 3), 0.5)
    assert att['sentences'] == 2 and att['skipped'] == 1
    assert 'right-branching' in proc.stdout and '0.667' in proc.stdout


@pytest.mark.parametrize('case', ['json', 'baseline', 'source', 'parse', 'index'])
def test_cli_errors_are_one_line_and_write_nothing(files, case):
    good = (files / 'al.jsonl').read_text().split('\n')
    args = ['positions', 'bad.jsonl', '--json', 'never.json']
    if case == 'json':
        (files / 'bad.jsonl').write_text(good[0] + '\n{"id": 1, "score"\n')
        expect = 'bad.jsonl: line 2: not valid JSON'
    elif case == 'baseline':
        (files / 'bad.jsonl').write_text(record_line(0, ['a', '<eos>'], []) + '\n')
        expect = 'no target-side attention'
    elif case == 'source':
        (files / 'bad.jsonl').write_text('\n'.join(good))
        (files / 'other.txt').write_text('x y\nx z\nx y\n')
        args += ['--source', 'other.txt']
        expect = 'line 2: the source tokens differ from other.txt'
    elif case == 'parse':
        (files / 'bad.ptb').write_text('(S (DT the) (NN dog) (VB sat) (. .))\n\n\n')
        args = ['parseval', 'al.jsonl', 'bad.ptb', '--json', 'never.json']
        expect = "bad.ptb: line 1: the parse does not match the translation: word 2"
    else:
        args = ['matrix', 'al.jsonl', '-i', '3', '--png', 'never.png']
        expect = 'al.jsonl: no sentence 3'
    proc = run(args, files)
    error_line(proc, expect)
    assert not (files / 'never.json').exists() and not (files / 'never.png').exists()
