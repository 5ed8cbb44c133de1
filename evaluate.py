"""BLEU of one or more systems against one reference, with significance tests.

    python evaluate.py --ref REF [--tokenized] [--lang LANG] [--lowercase]
        [--bootstrap 1000] [--seed 1] [--markdown] [--json FILE]
        SYSTEM [SYSTEM ...]

* ``--tokenized``: Moses ``multi-bleu.perl`` BLEU on tokenised text (the
  papers' Table 1); otherwise sacreBLEU on detokenised text (the NAACL
  paper's Table 3), with sacreBLEU's ``zh`` tokeniser for ``--lang zh`` and
  ``13a`` otherwise.  BLEU is printed with two decimals.
* The first SYSTEM is the baseline.  Each other system is compared with it by
  - paired bootstrap resampling (Koehn 2004): ``--bootstrap`` resamples of
    the test sentences (with replacement, the same sample for both systems);
    p = the fraction of resamples in which the system's corpus BLEU is NOT
    higher than the baseline's;
  - a one-tailed paired t-test (``scipy.stats.ttest_rel``, alternative
    "greater") over sentence-level BLEU+1: sentence BLEU with add-one
    smoothing of the n-gram precisions for n > 1 (Lin & Och 2004), no
    smoothing of unigrams.
  The verdict is "significantly better at p<0.05" when both tests give
  p < 0.05 (and says which one when only one does).
  In detokenised mode the tests use the n-gram counts of sacreBLEU's
  tokenisation.
* ``--json FILE`` also writes the results as JSON (read by results_table.py).

A missing file, text that is not UTF-8, or a system whose line count differs
from the reference's prints one ``error: ...`` line and exits with status 1.
"""
import argparse
import json
import math
import sys

import numpy

import bleu
from text_io import InputError, read_lines

ALPHA = 0.05


# --------------------------------------------------------------------------
# statistics
# --------------------------------------------------------------------------

def bleu_vector(totals):
    """multi-bleu.perl BLEU (0-100) of each row of summed stats (B x 10)."""
    totals = numpy.asarray(totals, dtype=numpy.float64)
    hyp_len, ref_len = totals[:, 0], totals[:, 1]
    correct, total = totals[:, 2::2], totals[:, 3::2]
    with numpy.errstate(divide='ignore', invalid='ignore'):
        prec = numpy.where(total > 0, correct / numpy.maximum(total, 1), 0.0)
        ok = (prec > 0).all(axis=1) & (hyp_len > 0) & (ref_len > 0)
        log_mean = numpy.where(ok, numpy.log(numpy.where(prec > 0, prec, 1.0))
                               .mean(axis=1), 0.0)
        bp = numpy.where(hyp_len < ref_len,
                         numpy.exp(1.0 - ref_len / numpy.maximum(hyp_len, 1)), 1.0)
    return numpy.where(ok, 100.0 * bp * numpy.exp(log_mean), 0.0)


def paired_bootstrap(stats_list, n_samples, seed, progress=None, chunk=100):
    """Corpus BLEU of every system on ``n_samples`` resamples of the sentences.

    ``stats_list``: one (N x 10) array of per-sentence stats per system.
    Returns a (systems x n_samples) array; every system sees the same
    resamples.  ``progress(done, total)`` is called at every tenth of the
    work when the work is big (over 10 million sentence draws).
    """
    rng = numpy.random.RandomState(seed)
    n = stats_list[0].shape[0]
    out = numpy.zeros((len(stats_list), n_samples))
    report = progress if n * n_samples > 10 ** 7 else None
    step = max(1, n_samples // 10)
    done = 0
    while done < n_samples:
        b = min(chunk, n_samples - done)
        counts = numpy.zeros((b, n))
        for row in range(b):
            counts[row] = numpy.bincount(rng.randint(0, n, size=n), minlength=n)
        for s, stats in enumerate(stats_list):
            out[s, done:done + b] = bleu_vector(counts @ stats)
        if report is not None and (done + b) // step > done // step:
            report(done + b, n_samples)
        done += b
    return out


def one_tailed_ttest(system, baseline):
    """p-value of H1 "system > baseline" (paired); 1.0 when they never differ."""
    from scipy import stats
    system, baseline = numpy.asarray(system), numpy.asarray(baseline)
    diff = system - baseline
    if len(diff) < 2 or numpy.allclose(diff, diff[0]):
        # no variance: a t statistic is undefined
        if len(diff) and diff[0] > 0:
            return 0.0
        return 1.0
    p = stats.ttest_rel(system, baseline, alternative='greater').pvalue
    return 1.0 if math.isnan(p) else float(p)


def verdict(p_boot, p_t, alpha=ALPHA):
    boot = p_boot is not None and p_boot < alpha
    t = p_t is not None and p_t < alpha
    if boot and t:
        return 'significantly better at p<%g' % alpha
    if boot:
        return 'significantly better at p<%g by bootstrap only' % alpha
    if t:
        return 'significantly better at p<%g by t-test only' % alpha
    return 'not significantly better'


# --------------------------------------------------------------------------
# evaluation
# --------------------------------------------------------------------------

def _progress(done, total):
    print('bootstrap: %d/%d resamples' % (done, total), file=sys.stderr, flush=True)


def evaluate(ref_path, system_paths, tokenized=False, lang=None, lowercase=False,
             n_bootstrap=1000, seed=1, progress=None):
    """The results as a list of dicts, the baseline first."""
    refs = read_lines(ref_path, allow_empty=True)
    hyps_all = []
    for path in system_paths:
        hyps = read_lines(path, allow_empty=True)
        if len(hyps) != len(refs):
            raise InputError('%s has %d lines but the reference %s has %d'
                                  % (path, len(hyps), ref_path, len(refs)))
        hyps_all.append(hyps)
    if not refs:
        raise InputError('%s: file is empty' % ref_path)

    if tokenized:
        tok = (lambda s: s)
    else:
        from sacrebleu.metrics import BLEU
        tok = BLEU(tokenize=bleu.sacrebleu_tokenize_name(lang)).tokenizer
    tok_refs = [tok(r.strip()) for r in refs]
    results, stats_list, sent_scores = [], [], []
    for path, hyps in zip(system_paths, hyps_all):
        rows = [bleu.sentence_stats(tok(h.strip()), r, lowercase)
                for h, r in zip(hyps, tok_refs)]
        stats_list.append(numpy.array(rows, dtype=numpy.float64))
        sent_scores.append([bleu.sentence_bleu_plus1(r) for r in rows])
        detail = bleu.bleu_from_stats(bleu.sum_stats(rows))
        if tokenized:
            score = detail['bleu']
        else:
            import sacrebleu
            score = sacrebleu.corpus_bleu(
                hyps, [refs], tokenize=bleu.sacrebleu_tokenize_name(lang),
                lowercase=lowercase).score
        results.append({'system': path, 'bleu': float(score),
                        'precisions': detail['precisions'], 'bp': detail['bp'],
                        'ratio': detail['ratio'], 'hyp_len': detail['hyp_len'],
                        'ref_len': detail['ref_len']})

    boot = None
    if n_bootstrap > 0 and len(system_paths) > 1:
        boot = paired_bootstrap(stats_list, n_bootstrap, seed, progress)
    base = results[0]
    base.update({'delta': None, 'bootstrap_p': None, 'ttest_p': None,
                 'verdict': 'baseline'})
    for i, res in enumerate(results[1:], 1):
        p_boot = float(numpy.mean(boot[i] <= boot[0])) if boot is not None else None
        p_t = one_tailed_ttest(sent_scores[i], sent_scores[0])
        res.update({'delta': res['bleu'] - base['bleu'], 'bootstrap_p': p_boot,
                    'ttest_p': p_t, 'verdict': verdict(p_boot, p_t)})
    return results


def _fmt_p(p, n_bootstrap=None):
    if p is None:
        return '-'
    if n_bootstrap and p == 0:
        return '<%.4g' % (1.0 / n_bootstrap)
    return '%.4f' % p


def format_table(results, markdown=False, n_bootstrap=None):
    header = ['system', 'BLEU', 'delta', 'bootstrap p', 't-test p', 'verdict']
    rows = []
    for r in results:
        rows.append([r['system'], '%.2f' % r['bleu'],
                     '-' if r['delta'] is None else '%+.2f' % r['delta'],
                     _fmt_p(r['bootstrap_p'], n_bootstrap), _fmt_p(r['ttest_p']),
                     r['verdict']])
    if markdown:
        lines = ['| ' + ' | '.join(header) + ' |',
                 '|' + '|'.join(['---', '---:', '---:', '---:', '---:', '---']) + '|']
        lines += ['| ' + ' | '.join(row) + ' |' for row in rows]
        return '\n'.join(lines)
    widths = [max(len(x[i]) for x in [header] + rows) for i in range(len(header))]
    return '\n'.join('  '.join(c.ljust(w) if i in (0, 5) else c.rjust(w)
                               for i, (c, w) in enumerate(zip(row, widths))).rstrip()
                     for row in [header] + rows)


def describe(args):
    if args.tokenized:
        metric = 'multi-bleu.perl BLEU on tokenised text (%s)' % (
            'lowercased' if args.lowercase else 'case-sensitive')
    else:
        metric = 'sacreBLEU on detokenised text, tokenize=%s%s' % (
            bleu.sacrebleu_tokenize_name(args.lang), ', lowercased' if args.lowercase else '')
    tests = ('paired bootstrap: %d resamples, seed %d; one-tailed paired t-test over '
             'sentence BLEU+1 (add-one smoothing for n>1)' % (args.bootstrap, args.seed))
    return 'reference: %s\nmetric: %s\n%s' % (args.ref, metric, tests)


def parse_args(argv):
    p = argparse.ArgumentParser(description='BLEU with significance tests; the first '
                                'SYSTEM is the baseline.')
    p.add_argument('--ref', required=True, help='reference translation, one line a sentence')
    p.add_argument('--tokenized', action='store_true',
                   help='multi-bleu.perl BLEU on tokenised text (default: sacreBLEU '
                   'on detokenised text)')
    p.add_argument('--lang', default=None, help='target language (zh: sacreBLEU zh tokeniser)')
    p.add_argument('--lowercase', action='store_true', help='case-insensitive (multi-bleu -lc)')
    p.add_argument('--bootstrap', type=int, default=1000, help='resamples (0: no bootstrap)')
    p.add_argument('--seed', type=int, default=1)
    p.add_argument('--markdown', action='store_true')
    p.add_argument('--json', metavar='FILE', help='also write the results as JSON')
    p.add_argument('systems', nargs='+', metavar='SYSTEM')
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.bootstrap < 0:
        print('error: --bootstrap must be >= 0', file=sys.stderr)
        return 1
    try:
        results = evaluate(args.ref, args.systems, args.tokenized, args.lang,
                           args.lowercase, args.bootstrap, args.seed, _progress)
    except InputError as e:
        print('error: %s' % e, file=sys.stderr)
        return 1
    print(describe(args))
    print()
    print(format_table(results, args.markdown, args.bootstrap))
    if args.json:
        with open(args.json, 'w', encoding='utf-8') as f:
            json.dump({'reference': args.ref, 'tokenized': args.tokenized,
                       'lang': args.lang, 'lowercase': args.lowercase,
                       'bootstrap': args.bootstrap, 'seed': args.seed,
                       'results': results}, f, indent=2)
            f.write('\n')
    return 0


if __name__ == '__main__':
    sys.exit(main())
