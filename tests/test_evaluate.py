"""machinery/bleu.py (multi-bleu.perl BLEU), evaluation/evaluate.py (significance) and evaluation/results_table.py."""
import json
import math
import os
import subprocess
import sys

import numpy
import pytest

from helpers import ROOT  # noqa: E402

from machinery import bleu  # noqa: E402
from evaluation import evaluate  # noqa: E402
from evaluation import results_table  # noqa: E402

# --------------------------------------------------------------------------
# An independent multi-bleu.perl arithmetic (one reference), to check machinery/bleu.py
# (which is sacrebleu) against.

def _ngram_counts(words, n):
    counts = {}
    for i in range(len(words) - n + 1):
        gram = tuple(words[i:i + n])
        counts[gram] = counts.get(gram, 0) + 1
    return counts


def _matches(hyp_words, ref_words, n):
    """(clipped matches, hypothesis n-grams) of order n."""
    hyp, ref = _ngram_counts(hyp_words, n), _ngram_counts(ref_words, n)
    return (sum(min(c, ref.get(g, 0)) for g, c in hyp.items()),
            max(len(hyp_words) - n + 1, 0))


def multibleu(hyps, refs, lowercase=False):
    """multi-bleu.perl: summed clipped counts, BP on summed lengths, 0 when a
    precision is 0 (or there is no hypothesis word)."""
    fold = str.lower if lowercase else (lambda s: s)
    c = r = 0
    correct, total = [0] * 4, [0] * 4
    for h, ref in zip(hyps, refs):
        hw, rw = fold(h).split(), fold(ref).split()
        c, r = c + len(hw), r + len(rw)
        for n in range(1, 5):
            m, t = _matches(hw, rw, n)
            correct[n - 1] += m
            total[n - 1] += t
    if c == 0 or any(m == 0 for m in correct):
        return 0.0
    bp = math.exp(1 - r / c) if c < r else 1.0
    return 100 * bp * math.exp(sum(math.log(m / t) for m, t in zip(correct, total)) / 4)


def bleu_plus1(hyp, ref):
    """Lin & Och (2004): p1 unsmoothed, (m+1)/(t+1) for n = 2..4, own BP."""
    hw, rw = hyp.split(), ref.split()
    m1, t1 = _matches(hw, rw, 1)
    if m1 == 0:
        return 0.0
    log_p = math.log(m1 / t1)
    for n in range(2, 5):
        m, t = _matches(hw, rw, n)
        log_p += math.log((m + 1) / (t + 1))
    bp = math.exp(1 - len(rw) / len(hw)) if len(hw) < len(rw) else 1.0
    return 100 * bp * math.exp(log_p / 4)


def _random_lines(rng, n, max_len, vocab='a b c d e A B'.split()):
    return [' '.join(rng.choice(vocab) for _ in range(rng.randint(0, max_len + 1)))
            for _ in range(n)]


def _edited(rng, line):
    """A hypothesis made from a reference: words dropped, replaced, inserted."""
    out = []
    for w in line.split():
        x = rng.rand()
        if x > 0.15:
            out.append(w if x < 0.8 else rng.choice(['a', 'b', 'z']))
    return ' '.join(out)


# --------------------------------------------------------------------------
# corpus BLEU on tokenised text
#
# Three sentences; the counts below are derived by hand.
#
# 1. hyp "the cat sat on mat"  vs ref "the cat sat on the mat" (6 words)
#    1-grams the cat sat on mat: all in the ref             5/5
#    2-grams the_cat cat_sat sat_on on_mat: on_mat is not   3/4
#    3-grams the_cat_sat cat_sat_on sat_on_mat: last is not 2/3
#    4-grams the_cat_sat_on cat_sat_on_mat: last is not     1/2
# 2. hyp "there is a cat here" vs ref "there is a dog here" (5 words)
#    1-grams: cat is not in the ref                          4/5
#    2-grams there_is is_a a_cat cat_here                    2/4
#    3-grams there_is_a is_a_cat a_cat_here                  1/3
#    4-grams there_is_a_cat is_a_cat_here                    0/2
# 3. hyp "a b c d" vs ref "a b c d e f" (6 words): every n-gram matches
#                                                 4/4, 3/3, 2/2, 1/1
# Totals: p1 = 13/14, p2 = 8/11, p3 = 5/8, p4 = 2/5
# hyp_len = 5+5+4 = 14 < ref_len = 6+5+6 = 17, so BP = exp(1 - 17/14)
# BLEU = BP * (p1 p2 p3 p4)^(1/4) = exp(-3/14) * (13/77)^(1/4) = 51.74...
HYP = ['the cat sat on mat', 'there is a cat here', 'a b c d']
REF = ['the cat sat on the mat', 'there is a dog here', 'a b c d e f']
HAND_BLEU = 100 * math.exp(1 - 17 / 14) * (13 / 14 * 8 / 11 * 5 / 8 * 2 / 5) ** 0.25


def test_multibleu_matches_hand_computation():
    r = bleu.corpus_bleu_tokenized(HYP, REF)
    assert r['hyp_len'] == 14 and r['ref_len'] == 17
    assert r['precisions'] == pytest.approx([100 * 13 / 14, 100 * 8 / 11,
                                             100 * 5 / 8, 100 * 2 / 5], abs=1e-9)
    assert r['bp'] == pytest.approx(math.exp(-3 / 14), abs=1e-12)
    assert r['ratio'] == pytest.approx(14 / 17, abs=1e-12)
    assert r['bleu'] == pytest.approx(HAND_BLEU, abs=1e-9)
    assert bleu.format_multibleu(r) == ('BLEU = 51.74, 92.9/72.7/62.5/40.0 '
                                        '(BP=0.807, ratio=0.824, hyp_len=14, ref_len=17)')


def test_exact_match_is_100():
    r = bleu.corpus_bleu_tokenized(REF, REF)
    assert r['bleu'] == pytest.approx(100.0, abs=1e-9) and r['bp'] == 1.0


def test_no_brevity_penalty_when_longer():
    # hyp longer than ref: BP = 1 (multi-bleu only penalises short output)
    r = bleu.corpus_bleu_tokenized(['a b c d e f'], ['a b c d'])
    assert r['bp'] == 1.0
    assert r['bleu'] == pytest.approx(100 * (4 / 6 * 3 / 5 * 2 / 4 * 1 / 3) ** 0.25,
                                      abs=1e-9)


def test_brevity_penalty_when_shorter():
    # 4 of the reference's 8 words, in order: every precision is 1
    r = bleu.corpus_bleu_tokenized(['a b c d'], ['a b c d e f g h'])
    assert r['bleu'] == pytest.approx(100 * math.exp(1 - 8 / 4), abs=1e-9)


def test_bleu_zero_edge_cases():
    # identical 3-word sentences have no 4-gram: multi-bleu gives 0
    assert bleu.corpus_bleu_tokenized(['a b c'], ['a b c'])['bleu'] == 0.0
    # a zero 4-gram precision gives 0 even with perfect unigrams
    r = bleu.corpus_bleu_tokenized(['d c b a'], ['a b c d'])
    assert r['bleu'] == 0.0 and r['precisions'][0] == pytest.approx(100.0)
    # empty hypotheses
    r = bleu.corpus_bleu_tokenized(['', ''], ['a b c d', 'e f g h'])
    assert r['bleu'] == 0.0 and r['hyp_len'] == 0 and r['ref_len'] == 8
    assert r['bp'] == 0.0 and r['ratio'] == 0.0
    # no lines at all (sacrebleu itself raises there)
    r = bleu.corpus_bleu_tokenized([], [])
    assert r['bleu'] == 0.0 and r['hyp_len'] == r['ref_len'] == 0


def test_case_sensitive_unless_lowercase():
    assert bleu.corpus_bleu_tokenized(['The a b c'], ['the a b c'])['bleu'] == 0.0
    assert bleu.corpus_bleu_tokenized(['The a b c'], ['the a b c'],
                                      lowercase=True)['bleu'] == pytest.approx(100.0)


def test_line_count_mismatch_raises():
    with pytest.raises(ValueError):
        bleu.corpus_bleu_tokenized(['a'], ['a', 'b'])


def test_multibleu_on_random_corpora():
    # short sentences (no 4-gram), empty ones, case differences, many zeros
    rng = numpy.random.RandomState(1)
    checked = nonzero = 0
    for trial in range(300):
        n = rng.randint(1, 7)
        refs = _random_lines(rng, n, rng.choice([0, 3, 6, 12, 25]))
        if trial % 3:
            hyps = [_edited(rng, line) for line in refs]
        else:
            hyps = _random_lines(rng, n, rng.choice([0, 2, 4, 8]))
        for lowercase in (False, True):
            want = multibleu(hyps, refs, lowercase)
            got = bleu.corpus_bleu_tokenized(hyps, refs, lowercase)['bleu']
            assert got == pytest.approx(want, abs=1e-9), (hyps, refs, lowercase)
            checked += 1
            nonzero += want > 0
    assert nonzero > 100 and checked - nonzero > 100     # both kinds of case


# --------------------------------------------------------------------------
# sentence BLEU+1

def test_sentence_bleu_plus1_by_hand():
    cases = [
        # sentence 2 above: p1 = 4/5, p2..p4 = 3/5, 2/4, 1/3 after +1; BP = 1
        (HYP[1], REF[1], 100 * (4 / 5 * 3 / 5 * 2 / 4 * 1 / 3) ** 0.25),
        # 2 words: p1 = 2/2, p2 = (1+1)/(1+1), p3 = p4 = (0+1)/(0+1); BP = exp(1 - 3/2)
        ('a b', 'a b c', 100 * math.exp(1 - 3 / 2)),
        # 3 words, all match: still all four orders, each 1
        ('a b c', 'a b c', 100.0),
        # one word, no match; then the empty hypothesis
        ('x', 'a b c', 0.0),
        ('', 'a b c', 0.0),
        # 'b a' matches both unigrams, no bigram: p2 = 1/2
        ('b a', 'a b', 100 * (1 * 1 / 2 * 1 * 1) ** 0.25),
    ]
    got = bleu.sentence_bleu_plus1([c[0] for c in cases], [c[1] for c in cases])
    for (hyp, ref, want), g in zip(cases, got):
        assert g == pytest.approx(want, abs=1e-9), (hyp, ref)


def test_sentence_bleu_plus1_on_random_sentences():
    rng = numpy.random.RandomState(2)
    refs = _random_lines(rng, 400, 12) + _random_lines(rng, 200, 3)
    hyps = [_edited(rng, line) for line in refs[:300]] + _random_lines(rng, 300, 5)
    got = bleu.sentence_bleu_plus1(hyps, refs)
    want = [bleu_plus1(h, r) for h, r in zip(hyps, refs)]
    assert got == pytest.approx(want, abs=1e-9)
    assert sum(1 for w in want if w > 0) > 200


def test_sentence_bleu_plus1_lowercase():
    assert bleu.sentence_bleu_plus1(['The cat'], ['the cat']) == [
        pytest.approx(100 * (1 / 2 * 1 / 2) ** 0.25)]   # p1 = 1/2, p2 = (0+1)/(1+1)
    assert bleu.sentence_bleu_plus1(['The cat'], ['the cat'], lowercase=True) == [
        pytest.approx(100.0)]


def test_detok_bleu_uses_zh_tokeniser():
    hyp, ref = ['我们去了北京。'], ['我们去了北京。']
    assert bleu.detok_bleu(hyp, ref, 'zh') == pytest.approx(100.0)
    # 13a would see one token and no 4-gram
    assert bleu.detok_bleu(hyp, ref, 'en') < 100.0


# --------------------------------------------------------------------------
# significance

def _corpus(tmp_path):
    rng = numpy.random.RandomState(0)
    words = ['w%d' % i for i in range(300)]
    refs = [' '.join(rng.choice(words, size=rng.randint(8, 20))) for _ in range(80)]

    def corrupt(line, rate, seed):
        r = numpy.random.RandomState(seed)
        return ' '.join(w if r.rand() > rate else 'x%d' % r.randint(1000)
                        for w in line.split())
    files = {}
    for name, lines in [('ref', refs),
                        ('baseline', [corrupt(l, 0.5, i) for i, l in enumerate(refs)]),
                        ('good', [corrupt(l, 0.1, 1000 + i) for i, l in enumerate(refs)]),
                        ('close', [corrupt(l, 0.48, 2000 + i) for i, l in enumerate(refs)])]:
        path = tmp_path / (name + '.txt')
        path.write_text(''.join(l + '\n' for l in lines), encoding='utf-8')
        files[name] = str(path)
    return files


def _lines(path):
    return open(path, encoding='utf-8').read().splitlines()


def test_clearly_better_system_is_significant(tmp_path):
    f = _corpus(tmp_path)
    res = evaluate.evaluate(f['ref'], [f['baseline'], f['good']], tokenized=True,
                            n_bootstrap=300, seed=1)
    assert res[1]['bleu'] > res[0]['bleu'] + 10
    assert res[1]['bleu'] == pytest.approx(multibleu(_lines(f['good']), _lines(f['ref'])),
                                           abs=1e-9)
    assert res[1]['bootstrap_p'] < 0.05 and res[1]['ttest_p'] < 0.05
    assert res[1]['verdict'] == 'significantly better at p<0.05'


def test_worse_system_is_not_better_although_bootstrap_p_is_small(tmp_path):
    # the bootstrap p is two-sided: a clearly worse system differs too
    f = _corpus(tmp_path)
    res = evaluate.evaluate(f['ref'], [f['good'], f['baseline']], tokenized=True,
                            n_bootstrap=300, seed=1)
    assert res[1]['delta'] < -10
    assert res[1]['bootstrap_p'] < 0.05 and res[1]['ttest_p'] > 0.95
    assert res[1]['verdict'] == 'not significantly better'


def test_identical_system_is_not_better(tmp_path):
    f = _corpus(tmp_path)
    res = evaluate.evaluate(f['ref'], [f['baseline'], f['baseline']], tokenized=True,
                            n_bootstrap=200, seed=1)
    assert res[1]['delta'] == 0.0 and res[1]['ttest_p'] == 1.0
    # sacrebleu's statistic is 0 on every resample; its p is the smallest one
    assert res[1]['bootstrap_p'] == pytest.approx(1 / 201)
    assert res[1]['verdict'] == 'not significantly better'


def test_close_system_bootstrap_p_in_range_and_seeded(tmp_path, monkeypatch):
    f = _corpus(tmp_path)
    monkeypatch.setenv('SACREBLEU_SEED', '99')
    systems = [f['baseline'], f['close']]
    runs = [evaluate.evaluate(f['ref'], systems, tokenized=True, n_bootstrap=200,
                              seed=s)[1]['bootstrap_p'] for s in (1, 1, 2)]
    assert all(0.0 <= p <= 1.0 for p in runs)
    assert runs[0] == runs[1]
    assert os.environ['SACREBLEU_SEED'] == '99'     # restored after each call


def test_bootstrap_per_system_equals_one_paired_test(tmp_path, monkeypatch):
    # the p-values of one sacrebleu PairedTest over all systems
    from sacrebleu.significance import PairedTest
    f = _corpus(tmp_path)
    refs = _lines(f['ref'])
    systems = [_lines(f[k]) for k in ('baseline', 'close', 'good')]
    calls = []
    got = evaluate.paired_bootstrap_p(systems, refs, bleu.bleu_metric(True), 100, 7,
                                      lambda done, total: calls.append((done, total)))
    monkeypatch.setenv('SACREBLEU_SEED', '7')
    test = PairedTest([(str(i), s) for i, s in enumerate(systems)],
                      {'BLEU': bleu.bleu_metric(True)}, [refs], test_type='bs',
                      n_samples=100)
    want = [r.p_value for r in test()[1]['BLEU']]
    assert got == want and got[0] is None
    assert calls == [(0, 2), (1, 2), (2, 2)]


def _cli(args):
    return subprocess.run([sys.executable, os.path.join(ROOT, 'evaluation', 'evaluate.py')] + args,
                          capture_output=True, text=True)


def test_cli_table(tmp_path):
    f = _corpus(tmp_path)
    proc = _cli(['--ref', f['ref'], '--tokenized', '--bootstrap', '100', '--markdown',
                 '--json', str(tmp_path / 'r.json'), f['baseline'], f['good']])
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert '| system | BLEU | delta | bootstrap p | t-test p | verdict |' in lines
    want = multibleu(_lines(f['good']), _lines(f['ref']))
    good_row = [l for l in lines if l.startswith('| ' + f['good'])][0]
    assert ' %.2f ' % want in good_row
    assert 'significantly better at p<0.05' in good_row
    data = json.load(open(tmp_path / 'r.json'))
    assert data['results'][1]['bleu'] == pytest.approx(want, abs=1e-9)
    assert set(data['results'][1]) == {'system', 'bleu', 'precisions', 'bp', 'ratio',
                                       'hyp_len', 'ref_len', 'delta', 'bootstrap_p',
                                       'ttest_p', 'verdict'}


def test_cli_detokenised_default(tmp_path):
    ref = tmp_path / 'ref'
    ref.write_text('The cat sat on the mat.\nIt is fine, thanks.\n', encoding='utf-8')
    proc = _cli(['--ref', str(ref), '--bootstrap', '0', str(ref)])
    assert proc.returncode == 0, proc.stderr
    assert 'tokenize=13a' in proc.stdout and '100.00' in proc.stdout


def test_cli_line_count_mismatch(tmp_path):
    f = _corpus(tmp_path)
    short = tmp_path / 'short.txt'
    short.write_text('a b c\n', encoding='utf-8')
    proc = _cli(['--ref', f['ref'], '--tokenized', f['baseline'], str(short)])
    assert proc.returncode == 1 and proc.stdout == ''
    assert proc.stderr.strip() == ('error: %s has 1 lines but the reference %s has 80'
                                   % (short, f['ref']))


def test_cli_missing_file(tmp_path):
    f = _corpus(tmp_path)
    proc = _cli(['--ref', f['ref'], str(tmp_path / 'nope.txt')])
    assert proc.returncode == 1
    assert proc.stderr.strip() == 'error: %s: no such file' % (tmp_path / 'nope.txt')


def test_cli_seed_must_be_positive(tmp_path):
    f = _corpus(tmp_path)
    proc = _cli(['--ref', f['ref'], '--seed', '0', f['baseline'], f['good']])
    assert proc.returncode == 2 and proc.stdout == ''
    assert proc.stderr.startswith('error: --seed must be >= 1')
    assert len(proc.stderr.strip().splitlines()) == 1


def test_cli_unwritable_json_writes_nothing(tmp_path):
    f = _corpus(tmp_path)
    proc = _cli(['--ref', f['ref'], '--bootstrap', '0', '--json',
                 str(tmp_path / 'no' / 'r.json'), f['baseline']])
    assert proc.returncode == 1 and proc.stdout == ''
    assert proc.stderr.startswith('error: %s: cannot write' % (tmp_path / 'no' / 'r.json'))


def test_one_tailed_ttest_by_hand():
    from scipy.stats import t as student_t
    sys_scores = [30.0, 25.0, 40.0, 10.0, 22.0]
    base_scores = [28.0, 26.0, 35.0, 9.0, 20.0]
    d = numpy.array(sys_scores) - numpy.array(base_scores)   # 2, -1, 5, 1, 2
    t = d.mean() / (d.std(ddof=1) / math.sqrt(len(d)))       # 1.8 / (sqrt(4.7)/sqrt(5))
    assert t == pytest.approx(1.8 / math.sqrt(4.7 / 5))
    assert evaluate.one_tailed_ttest(sys_scores, base_scores) == \
        pytest.approx(student_t.sf(t, len(d) - 1))
    assert evaluate.one_tailed_ttest(base_scores, sys_scores) == \
        pytest.approx(1 - student_t.sf(t, len(d) - 1))


# --------------------------------------------------------------------------
# evaluation/results_table.py

def _fake_run(root, pair, decoder, bleu_value, shapes):
    d = root / pair / decoder
    d.mkdir(parents=True)
    arrays = {'p%d' % i: numpy.zeros(s, dtype='float32') for i, s in enumerate(shapes)}
    arrays['history_errs'] = numpy.array([1.0, 2.0])
    arrays['uidx'] = numpy.array(7)
    numpy.savez(str(d / 'model.npz'), **arrays)
    (d / 'bleu.json').write_text(json.dumps({'bleu': bleu_value}))
    return d


def test_results_table(tmp_path, capsys):
    runs = tmp_path / 'runs'
    _fake_run(runs, 'es-en', 'baseline', 24.877, [(1000, 1000), (300,)])
    _fake_run(runs, 'es-en', 'attentive', 25.678, [(1000, 1000), (300,), (2000, 100)])
    _fake_run(runs, 'en-de', 'baseline', 22.39, [(10, 10)])
    plot = tmp_path / 'bleu.png'
    assert results_table.main([str(runs), '--plot', str(plot)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == '| Model | Params (es-en) | es-en | en-de |'
    assert out[2] == '| NMT baseline | 1.0M | 24.88 | 22.39 |'
    # 1,200,300 values, truncated to 0.1M
    assert out[3] == '| Self-attentive residual connections | 1.2M | 25.68 | - |'
    assert plot.exists() and plot.read_bytes()[:4] == b'\x89PNG'


def test_results_table_from_evaluate_json(tmp_path, capsys):
    js = tmp_path / 'e.json'
    js.write_text(json.dumps({'results': [
        {'system': 'x/newstest2013.baseline.en', 'bleu': 24.88},
        {'system': 'x/newstest2013.average.en', 'bleu': 25.15}]}))
    assert results_table.main(['--evaluate-json', 'es-en=%s' % js]) == 0
    out = capsys.readouterr().out
    assert '| Mean residual connections | - | 25.15 |' in out


def test_truncated_millions():
    assert results_table.truncate_millions(108725885) == '108.7M'
    assert results_table.truncate_millions(108725885 + 251000) == '108.9M'

