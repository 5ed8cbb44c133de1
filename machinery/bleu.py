"""BLEU as the papers computed it, through sacrebleu (pinned 2.4.3).

* :func:`corpus_bleu_tokenized`: Moses ``multi-bleu.perl`` BLEU of tokenised
  text against one reference (the papers' Table 1), computed by sacrebleu with
  ``tokenize='none', force=True, smooth_method='none'``.  The two agree on
  every input because, with a single reference:
  - tokens are whitespace-separated words in both (``str.split``), and
    ``lowercase=True`` (multi-bleu ``-lc``) lowercases before splitting;
  - clipped n-gram matches and hypothesis n-gram totals (n = 1..4) are the
    same counts, and the "closest" reference length is the reference length;
  - ``BP = exp(1 - r/c)`` only when ``c < r`` (summed lengths), else 1;
  - a zero precision gives 0: sacrebleu leaves it at 0 and floors its log
    at -9999999999, so ``exp`` underflows to exactly 0.0, as multi-bleu's
    ``my_log`` does; an order with no hypothesis n-gram at all (every
    sentence shorter than n) stops sacrebleu's loop with that precision and
    the higher ones at 0, so again 0;
  - no match at all gives 0 before any of this;
  - sacrebleu averages the logs of percentages, multi-bleu of fractions:
    the scores differ by rounding only (~1e-13 relative).
  Where multi-bleu divides by zero (no hypothesis word) the result is BLEU
  0, with BP 0 when the reference has words and BP 1 when it has none
  (``c >= r``); no lines at all gives that too (sacrebleu itself raises).
* :func:`sentence_bleu_plus1`: sentence BLEU with the +1 smoothing of Lin &
  Och (2004), sacrebleu's ``smooth_method='add-k'`` with k = 1: unigram
  precision unsmoothed, ``(m_n + 1) / (t_n + 1)`` for n = 2..4, the
  sentence's own brevity penalty, 0 when no unigram matches (then no n-gram
  matches) or the hypothesis is empty.  ``effective_order=True`` only
  silences sacrebleu's warning: after adding 1 no order has a zero total, so
  all four orders are always used.
* :func:`detok_bleu`: sacreBLEU on detokenised text, ``zh`` tokeniser for
  Chinese and ``13a`` otherwise (the NAACL paper's Table 3).
* :func:`bleu_metric`: the sacrebleu metric behind each of these, for
  evaluation/evaluate.py's paired bootstrap.
"""
from sacrebleu.metrics import BLEU

MAX_N = 4


def sacrebleu_tokenize_name(lang):
    return 'zh' if (lang or '').lower().startswith('zh') else '13a'


def bleu_metric(tokenized=True, lang=None, lowercase=False):
    """The sacrebleu corpus BLEU: multi-bleu.perl arithmetic on tokenised text
    (``tokenized``), or sacreBLEU's defaults on detokenised text."""
    if tokenized:
        return BLEU(tokenize='none', force=True, smooth_method='none',
                    lowercase=lowercase)
    return BLEU(tokenize=sacrebleu_tokenize_name(lang), lowercase=lowercase)


def _check_lengths(hyp_lines, ref_lines):
    if len(hyp_lines) != len(ref_lines):
        raise ValueError('%d hypothesis lines but %d reference lines'
                         % (len(hyp_lines), len(ref_lines)))


def corpus_bleu(hyp_lines, ref_lines, tokenized=True, lang=None, lowercase=False):
    """Corpus BLEU against one reference as ``{'bleu': 0-100, 'precisions':
    [p1..p4 in %], 'bp', 'ratio', 'hyp_len', 'ref_len'}``."""
    hyp_lines, ref_lines = list(hyp_lines), list(ref_lines)
    _check_lengths(hyp_lines, ref_lines)
    if not hyp_lines:
        score = BLEU.compute_bleu([0] * MAX_N, [0] * MAX_N, 0, 0)
    else:
        score = bleu_metric(tokenized, lang, lowercase).corpus_score(
            hyp_lines, [ref_lines])
    return {'bleu': float(score.score),
            'precisions': [float(p) for p in score.precisions],
            'bp': float(score.bp), 'ratio': float(score.ratio),
            'hyp_len': int(score.sys_len), 'ref_len': int(score.ref_len)}


def corpus_bleu_tokenized(hyp_lines, ref_lines, lowercase=False):
    """multi-bleu.perl BLEU of tokenised hypotheses against one reference
    (result dict as :func:`corpus_bleu`)."""
    return corpus_bleu(hyp_lines, ref_lines, True, None, lowercase)


def detok_bleu(hyp_lines, ref_lines, lang, lowercase=False):
    """sacreBLEU (0-100) on detokenised text, default settings otherwise."""
    return corpus_bleu(hyp_lines, ref_lines, False, lang, lowercase)['bleu']


def detok_signature(lang, lowercase=False):
    """sacreBLEU's signature of :func:`detok_bleu`'s score (one reference):
    what to print beside each of its figures."""
    metric = bleu_metric(False, lang, lowercase)
    metric.corpus_score(['a'], [['a']])      # sacrebleu signs a metric that has scored
    return str(metric.get_signature())


def format_multibleu(result):
    """The line multi-bleu.perl prints."""
    p = result['precisions']
    return ('BLEU = %.2f, %.1f/%.1f/%.1f/%.1f (BP=%.3f, ratio=%.3f, '
            'hyp_len=%d, ref_len=%d)' % (result['bleu'], p[0], p[1], p[2], p[3],
                                         result['bp'], result['ratio'],
                                         result['hyp_len'], result['ref_len']))


def sentence_bleu_plus1(hyp_lines, ref_lines, tokenize='none', lowercase=False):
    """BLEU+1 (0-100) of each hypothesis line against its reference line.

    ``tokenize``: a sacrebleu tokeniser name ('none' for tokenised text).
    """
    hyp_lines, ref_lines = list(hyp_lines), list(ref_lines)
    _check_lengths(hyp_lines, ref_lines)
    metric = BLEU(tokenize=tokenize, force=True, lowercase=lowercase,
                  smooth_method='add-k', smooth_value=1, effective_order=True)
    return [float(metric.sentence_score(h, [r]).score)
            for h, r in zip(hyp_lines, ref_lines)]
