"""bleu.py (multi-bleu.perl BLEU), evaluate.py (significance) and results_table.py."""
import json
import math
import os
import subprocess
import sys

import numpy
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import bleu  # noqa: E402
import evaluate  # noqa: E402
import results_table  # noqa: E402

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
                                             100 * 5 / 8, 100 * 2 / 5])
    assert r['bp'] == pytest.approx(math.exp(-3 / 14))
    assert r['ratio'] == pytest.approx(14 / 17)
    assert r['bleu'] == pytest.approx(HAND_BLEU)
    assert round(r['bleu'], 2) == 51.74
    assert bleu.format_multibleu(r) == ('BLEU = 51.74, 92.9/72.7/62.5/40.0 '
                                        '(BP=0.807, ratio=0.824, hyp_len=14, ref_len=17)')


def test_multibleu_matches_sacrebleu_without_tokenisation():
    assert bleu.sacrebleu_tokenized(HYP, REF) == pytest.approx(HAND_BLEU)


def test_sentence_stats_sum_to_corpus():
    rows = [bleu.sentence_stats(h, r) for h, r in zip(HYP, REF)]
    assert rows[1] == [5, 5, 4, 5, 2, 4, 1, 3, 0, 2]
    assert bleu.bleu_from_stats(bleu.sum_stats(rows))['bleu'] == pytest.approx(HAND_BLEU)
    assert evaluate.bleu_vector([bleu.sum_stats(rows)])[0] == pytest.approx(HAND_BLEU)


def test_no_brevity_penalty_when_longer():
    # hyp longer than ref: BP = 1 (multi-bleu only penalises short output)
    r = bleu.corpus_bleu_tokenized(['a b c d e f'], ['a b c d'])
    assert r['bp'] == 1.0
    assert r['bleu'] == pytest.approx(100 * (4 / 6 * 3 / 5 * 2 / 4 * 1 / 3) ** 0.25)


def test_bleu_zero_edge_cases():
    # identical 3-word sentences have no 4-gram: multi-bleu gives 0
    assert bleu.corpus_bleu_tokenized(['a b c'], ['a b c'])['bleu'] == 0.0
    # a zero 4-gram precision gives 0 even with perfect unigrams
    assert bleu.corpus_bleu_tokenized(['d c b a'], ['a b c d'])['bleu'] == 0.0
    # empty hypotheses
    r = bleu.corpus_bleu_tokenized(['', ''], ['a b c d', 'e f g h'])
    assert r['bleu'] == 0.0 and r['hyp_len'] == 0 and r['ref_len'] == 8
    assert bleu.sentence_bleu_plus1(bleu.sentence_stats('', 'a b')) == 0.0


def test_case_sensitive_unless_lowercase():
    assert bleu.corpus_bleu_tokenized(['The a b c'], ['the a b c'])['bleu'] == 0.0
    assert bleu.corpus_bleu_tokenized(['The a b c'], ['the a b c'],
                                      lowercase=True)['bleu'] == pytest.approx(100.0)


def test_sentence_bleu_plus1():
    # sentence 2 above: p1 = 4/5, p2..p4 = 3/5, 2/4, 1/3 after +1; BP = 1
    stats = bleu.sentence_stats(HYP[1], REF[1])
    want = 100 * (4 / 5 * 3 / 5 * 2 / 4 * 1 / 3) ** 0.25
    assert bleu.sentence_bleu_plus1(stats) == pytest.approx(want)


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
                        ('good', [corrupt(l, 0.1, 1000 + i) for i, l in enumerate(refs)])]:
        path = tmp_path / (name + '.txt')
        path.write_text(''.join(l + '\n' for l in lines), encoding='utf-8')
        files[name] = str(path)
    return files


def test_clearly_better_system_is_significant(tmp_path):
    f = _corpus(tmp_path)
    res = evaluate.evaluate(f['ref'], [f['baseline'], f['good']], tokenized=True,
                            n_bootstrap=300, seed=1)
    assert res[1]['bleu'] > res[0]['bleu'] + 10
    assert res[1]['bootstrap_p'] < 0.05 and res[1]['ttest_p'] < 0.05
    assert res[1]['verdict'] == 'significantly better at p<0.05'
    # the worse system compared with the better one is not better
    res = evaluate.evaluate(f['ref'], [f['good'], f['baseline']], tokenized=True,
                            n_bootstrap=300, seed=1)
    assert res[1]['bootstrap_p'] > 0.95 and res[1]['ttest_p'] > 0.95
    assert res[1]['verdict'] == 'not significantly better'


def test_identical_system_is_not_better(tmp_path):
    f = _corpus(tmp_path)
    res = evaluate.evaluate(f['ref'], [f['baseline'], f['baseline']], tokenized=True,
                            n_bootstrap=200, seed=1)
    assert res[1]['delta'] == 0.0
    assert res[1]['bootstrap_p'] == 1.0 and res[1]['ttest_p'] == 1.0
    assert res[1]['verdict'] == 'not significantly better'


def test_bootstrap_is_paired_and_seeded():
    stats = [numpy.array([bleu.sentence_stats(h, r) for h, r in zip(HYP, REF)], float)]
    a = evaluate.paired_bootstrap(stats * 2, 50, seed=3)
    b = evaluate.paired_bootstrap(stats * 2, 50, seed=3)
    assert (a == b).all() and (a[0] == a[1]).all()


def _cli(args):
    return subprocess.run([sys.executable, os.path.join(ROOT, 'evaluate.py')] + args,
                          capture_output=True, text=True)


def test_cli_table(tmp_path):
    f = _corpus(tmp_path)
    proc = _cli(['--ref', f['ref'], '--tokenized', '--bootstrap', '100', '--markdown',
                 '--json', str(tmp_path / 'r.json'), f['baseline'], f['good']])
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert '| system | BLEU | delta | bootstrap p | t-test p | verdict |' in lines
    want = bleu.corpus_bleu_tokenized(open(f['good']).read().splitlines(),
                                      open(f['ref']).read().splitlines())['bleu']
    good_row = [l for l in lines if l.startswith('| ' + f['good'])][0]
    assert ' %.2f ' % want in good_row
    assert 'significantly better at p<0.05' in good_row
    data = json.load(open(tmp_path / 'r.json'))
    assert data['results'][1]['bleu'] == pytest.approx(want)


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


# --------------------------------------------------------------------------
# results_table.py

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


def test_one_tailed_ttest_by_hand():
    from scipy.stats import t as student_t
    sys_scores = [30.0, 25.0, 40.0, 10.0, 22.0]
    base_scores = [28.0, 26.0, 35.0, 9.0, 20.0]
    d = numpy.array(sys_scores) - numpy.array(base_scores)   # 2, -1, 5, 1, 2
    t = d.mean() / (d.std(ddof=1) / math.sqrt(len(d)))
    assert evaluate.one_tailed_ttest(sys_scores, base_scores) == \
        pytest.approx(student_t.sf(t, len(d) - 1))
    assert evaluate.one_tailed_ttest(base_scores, sys_scores) == \
        pytest.approx(1 - student_t.sf(t, len(d) - 1))
