"""BLEU as the papers computed it, plus the pieces significance tests need.

* :func:`corpus_bleu_tokenized` reproduces Moses' ``multi-bleu.perl`` on
  tokenised text with a single reference: whitespace tokens, n = 1..4,
  clipped n-gram counts, case-sensitive unless ``lowercase=True`` (``-lc``).
  Its quirks are kept: the brevity penalty uses the summed reference length
  (with one reference the "closest" length is that reference's length),
  ``BP = exp(1 - ref_len / hyp_len)`` only when ``hyp_len < ref_len``, and
  the score is 0 as soon as one n-gram precision is 0 (``my_log(0)`` is
  ``-9999999999``).  An empty hypothesis corpus gives 0 (the Perl script
  divides by zero there).
* :func:`sentence_stats` gives the per-sentence counts
  ``[hyp_len, ref_len, m1, t1, m2, t2, m3, t3, m4, t4]``; summed over any
  sample of sentences they give that sample's corpus BLEU through
  :func:`bleu_from_stats` (bootstrap resampling).
* :func:`sentence_bleu_plus1` is sentence-level BLEU with the +1 smoothing of
  Lin & Och (2004) for n > 1 (BLEU+1), used for the paired t-test.
* :func:`detok_bleu` is sacrebleu's detokenised BLEU (``tokenize='zh'`` for
  Chinese, ``'13a'`` otherwise).
"""
import math
from collections import Counter

MAX_N = 4
# Index of the fields in a stats vector.
HYP_LEN, REF_LEN = 0, 1


def _ngrams(words, n):
    return Counter(tuple(words[i:i + n]) for i in range(len(words) - n + 1))


def sentence_stats(hyp, ref, lowercase=False):
    """Counts for one sentence pair (strings, whitespace-tokenised).

    Returns a list of 10 ints: hypothesis length, reference length, then for
    n = 1..4 the clipped matches and the number of hypothesis n-grams.
    """
    if lowercase:
        hyp, ref = hyp.lower(), ref.lower()
    h, r = hyp.split(), ref.split()
    stats = [len(h), len(r)]
    for n in range(1, MAX_N + 1):
        hyp_counts = _ngrams(h, n)
        ref_counts = _ngrams(r, n)
        matches = sum(min(c, ref_counts[g]) for g, c in hyp_counts.items())
        stats += [matches, max(len(h) - n + 1, 0)]
    return stats


def corpus_stats(hyp_lines, ref_lines, lowercase=False):
    """Per-sentence stats for aligned lists of lines (lengths must agree)."""
    hyp_lines, ref_lines = list(hyp_lines), list(ref_lines)
    if len(hyp_lines) != len(ref_lines):
        raise ValueError('%d hypothesis lines but %d reference lines'
                         % (len(hyp_lines), len(ref_lines)))
    return [sentence_stats(h, r, lowercase) for h, r in zip(hyp_lines, ref_lines)]


def sum_stats(stats_rows):
    total = [0] * (2 + 2 * MAX_N)
    for row in stats_rows:
        for i, v in enumerate(row):
            total[i] += v
    return total


def bleu_from_stats(stats):
    """multi-bleu.perl's arithmetic on summed stats; returns the result dict."""
    hyp_len, ref_len = stats[HYP_LEN], stats[REF_LEN]
    precisions = []
    for n in range(MAX_N):
        correct, total = stats[2 + 2 * n], stats[3 + 2 * n]
        precisions.append(correct / total if total else 0.0)
    if ref_len == 0 or hyp_len == 0:
        bp = 0.0 if hyp_len == 0 else 1.0
        ratio = hyp_len / ref_len if ref_len else 0.0
        return {'bleu': 0.0, 'precisions': [100.0 * p for p in precisions],
                'bp': bp, 'ratio': ratio, 'hyp_len': hyp_len, 'ref_len': ref_len}
    bp = math.exp(1.0 - ref_len / hyp_len) if hyp_len < ref_len else 1.0
    if min(precisions) > 0:
        bleu = bp * math.exp(sum(math.log(p) for p in precisions) / MAX_N)
    else:
        bleu = 0.0
    return {'bleu': 100.0 * bleu, 'precisions': [100.0 * p for p in precisions],
            'bp': bp, 'ratio': hyp_len / ref_len,
            'hyp_len': hyp_len, 'ref_len': ref_len}


def corpus_bleu_tokenized(hyp_lines, ref_lines, lowercase=False):
    """multi-bleu.perl BLEU of tokenised hypotheses against one reference.

    Returns ``{'bleu': 0-100, 'precisions': [p1..p4 in %], 'bp', 'ratio',
    'hyp_len', 'ref_len'}``.
    """
    return bleu_from_stats(sum_stats(corpus_stats(hyp_lines, ref_lines,
                                                  lowercase)))


def format_multibleu(result):
    """The line multi-bleu.perl prints."""
    p = result['precisions']
    return ('BLEU = %.2f, %.1f/%.1f/%.1f/%.1f (BP=%.3f, ratio=%.3f, '
            'hyp_len=%d, ref_len=%d)' % (result['bleu'], p[0], p[1], p[2], p[3],
                                         result['bp'], result['ratio'],
                                         result['hyp_len'], result['ref_len']))


def sentence_bleu_plus1(stats):
    """Sentence BLEU (0-100) with +1 smoothing for n > 1 (Lin & Och 2004).

    p1 = m1 / t1 (unsmoothed), pn = (mn + 1) / (tn + 1) for n = 2..4, and the
    usual brevity penalty from the sentence's own lengths.  0 when the
    hypothesis is empty or has no unigram match.
    """
    hyp_len, ref_len = stats[HYP_LEN], stats[REF_LEN]
    if hyp_len == 0 or stats[2] == 0:
        return 0.0
    log_p = math.log(stats[2] / stats[3])
    for n in range(1, MAX_N):
        log_p += math.log((stats[2 + 2 * n] + 1.0) / (stats[3 + 2 * n] + 1.0))
    bp = math.exp(1.0 - ref_len / hyp_len) if hyp_len < ref_len else 1.0
    return 100.0 * bp * math.exp(log_p / MAX_N)


def sacrebleu_tokenize_name(lang):
    return 'zh' if (lang or '').lower().startswith('zh') else '13a'


def detok_bleu(hyp_lines, ref_lines, lang):
    """sacrebleu BLEU (0-100) on detokenised text: ``zh`` tokeniser for
    Chinese, ``13a`` otherwise, default settings otherwise (the NAACL
    paper's Table 3 style)."""
    import sacrebleu
    hyp_lines, ref_lines = list(hyp_lines), list(ref_lines)
    if len(hyp_lines) != len(ref_lines):
        raise ValueError('%d hypothesis lines but %d reference lines'
                         % (len(hyp_lines), len(ref_lines)))
    return float(sacrebleu.corpus_bleu(
        hyp_lines, [ref_lines], tokenize=sacrebleu_tokenize_name(lang)).score)


def sacrebleu_tokenized(hyp_lines, ref_lines):
    """sacrebleu with ``tokenize='none', force=True``: an independent
    implementation that should agree with :func:`corpus_bleu_tokenized` on
    pre-tokenised text."""
    import sacrebleu
    return float(sacrebleu.corpus_bleu(list(hyp_lines), [list(ref_lines)],
                                       tokenize='none', force=True).score)
