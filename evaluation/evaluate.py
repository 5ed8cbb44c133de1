"""BLEU of one or more systems against one reference, with significance tests.

    python evaluation/evaluate.py --ref REF [--tokenized] [--lang LANG] [--lowercase]
        [--bootstrap 1000] [--seed 1] [--markdown] [--json FILE]
        SYSTEM [SYSTEM ...]

* ``--tokenized``: Moses ``multi-bleu.perl`` BLEU on tokenised text (the
  papers' Table 1, sacrebleu with ``tokenize='none'`` and no smoothing);
  otherwise sacreBLEU on detokenised text (the NAACL paper's Table 3), with
  sacreBLEU's ``zh`` tokeniser for ``--lang zh`` and ``13a`` otherwise.  BLEU
  is printed with two decimals.
* The first SYSTEM is the baseline.  Each other system is compared with it by
  - sacrebleu's paired bootstrap resampling (``PairedTest``,
    ``test_type='bs'``, as Moses' bootstrap-hypothesis-difference-
    significance.pl): ``--bootstrap`` resamples of the test sentences, the
    same for both systems, seeded with ``--seed`` (through SACREBLEU_SEED).
    Its p-value is TWO-sided: (1 + the number of resamples whose
    |system - baseline| BLEU difference, minus the mean of those differences,
    exceeds the observed |difference|) / (resamples + 1).  It says that the
    systems differ, not which is better; it is never below 1/(resamples + 1),
    and identical outputs get that smallest value too.
  - a one-tailed paired t-test (``scipy.stats.ttest_rel``, alternative
    "greater") over sentence-level BLEU+1: sentence BLEU with add-one
    smoothing of the n-gram precisions for n > 1 (Lin & Och 2004), no
    smoothing of unigrams (sacrebleu's ``add-k`` sentence BLEU).
  The verdict is "significantly better at p<0.05" when the system's corpus
  BLEU is higher than the baseline's and both tests give p < 0.05 (and says
  which one when only one does); a system that is not higher is "not
  significantly better", whatever the p-values.
  In detokenised mode both tests use sacreBLEU's tokenisation, and the
  bootstrap its default (``exp``) smoothing, as the reported BLEU.
* ``--json FILE`` also writes the results as JSON (read by evaluation/results_table.py).

A missing file, text that is not UTF-8, or a system whose line count differs
from the reference's prints one ``error: ...`` line and exits with status 1.
"""
import contextlib
import math
import os
import sys

if __name__ == '__main__':  # run as a file: import from the project root, not this folder
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from machinery import cli  # noqa: E402  (first: without .venv, one line, machinery/__init__.py)

import numpy  # noqa: E402

from machinery import bleu  # noqa: E402
from machinery.output_files import check_outputs, write_json  # noqa: E402
from machinery.progress import ProgressLine
from machinery.text_io import InputError, read_lines

ALPHA = 0.05
# Show bootstrap progress above this many sentence draws (about a second).
PROGRESS_DRAWS = 10 ** 6


# --------------------------------------------------------------------------
# statistics
# --------------------------------------------------------------------------

@contextlib.contextmanager
def sacrebleu_seed(seed):
    """SACREBLEU_SEED set to ``seed`` inside the block (sacrebleu reads its
    bootstrap seed from there), restored afterwards."""
    old = os.environ.get('SACREBLEU_SEED')
    os.environ['SACREBLEU_SEED'] = str(seed)
    try:
        yield
    finally:
        if old is None:
            del os.environ['SACREBLEU_SEED']
        else:
            os.environ['SACREBLEU_SEED'] = old


def paired_bootstrap_p(systems, refs, metric, n_samples, seed, progress=None):
    """sacrebleu's paired-bootstrap p-value of each system against the first.

    ``systems``: lists of hypothesis lines, the baseline first; ``metric``: a
    sacrebleu BLEU.  Returns ``[None, p_1, ...]``.  Every comparison draws
    the same resamples (same seed), as one sacrebleu PairedTest over all
    systems would; they run one at a time so that ``progress(done, total)``
    can follow them.  ``seed`` must be >= 1: sacrebleu does not seed with 0.
    """
    from sacrebleu.significance import PairedTest
    if seed < 1:
        raise ValueError('sacrebleu needs a bootstrap seed >= 1, not %d' % seed)
    p_values = [None]
    if progress is not None:
        progress(0, len(systems) - 1)
    with sacrebleu_seed(seed):
        for i, hyps in enumerate(systems[1:], 1):
            test = PairedTest([('baseline', systems[0]), ('system', hyps)],
                              {'BLEU': metric}, [refs], test_type='bs',
                              n_samples=n_samples)
            p_values.append(float(test()[1]['BLEU'][1].p_value))
            if progress is not None:
                progress(i, len(systems) - 1)
    return p_values


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


def verdict(delta, p_boot, p_t, alpha=ALPHA):
    """Better only with a higher BLEU (delta > 0) and p < alpha."""
    if delta is None or delta <= 0:
        return 'not significantly better'
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

def _progress_line():
    """progress(done, total) over system comparisons, on stderr."""
    state = {}

    def report(done, total):
        if 'line' not in state:
            state['line'] = ProgressLine(total, 'bootstrap:', 'systems', interval=0)
        if done < total:
            state['line'].update(done, force=True)
        else:
            state['line'].finish()
    return report


def _read_inputs(ref_path, system_paths):
    refs = read_lines(ref_path, allow_empty=True)
    systems = []
    for path in system_paths:
        hyps = read_lines(path, allow_empty=True)
        if len(hyps) != len(refs):
            raise InputError('%s has %d lines but the reference %s has %d'
                             % (path, len(hyps), ref_path, len(refs)))
        systems.append(hyps)
    if not refs:
        raise InputError('%s: file is empty' % ref_path)
    return refs, systems


def evaluate(ref_path, system_paths, tokenized=False, lang=None, lowercase=False,
             n_bootstrap=1000, seed=1, progress=None):
    """The results as a list of dicts, the baseline first.

    ``progress(done, total)`` follows the bootstrap, one system at a time,
    when it draws more than PROGRESS_DRAWS sentences.
    """
    refs, systems = _read_inputs(ref_path, system_paths)
    tokenize = 'none' if tokenized else bleu.sacrebleu_tokenize_name(lang)
    results = [dict(system=path, **bleu.corpus_bleu(hyps, refs, tokenized, lang,
                                                     lowercase))
               for path, hyps in zip(system_paths, systems)]
    sent_scores = [bleu.sentence_bleu_plus1(hyps, refs, tokenize, lowercase)
                   for hyps in systems]
    p_boot = [None] * len(systems)
    if n_bootstrap > 0 and len(systems) > 1:
        if len(refs) * n_bootstrap * (len(systems) - 1) <= PROGRESS_DRAWS:
            progress = None
        p_boot = paired_bootstrap_p(systems, refs,
                                    bleu.bleu_metric(tokenized, lang, lowercase),
                                    n_bootstrap, seed, progress)
    base = results[0]
    base.update({'delta': None, 'bootstrap_p': None, 'ttest_p': None,
                 'verdict': 'baseline'})
    for i, res in enumerate(results[1:], 1):
        delta = res['bleu'] - base['bleu']
        p_t = one_tailed_ttest(sent_scores[i], sent_scores[0])
        res.update({'delta': delta, 'bootstrap_p': p_boot[i], 'ttest_p': p_t,
                    'verdict': verdict(delta, p_boot[i], p_t)})
    return results


def _fmt_p(p):
    return '-' if p is None else '%.4f' % p


def format_table(results, markdown=False):
    header = ['system', 'BLEU', 'delta', 'bootstrap p', 't-test p', 'verdict']
    rows = []
    for r in results:
        rows.append([r['system'], '%.2f' % r['bleu'],
                     '-' if r['delta'] is None else '%+.2f' % r['delta'],
                     _fmt_p(r['bootstrap_p']), _fmt_p(r['ttest_p']), r['verdict']])
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
    tests = ('paired bootstrap (sacrebleu, two-sided): %d resamples, seed %d; one-tailed '
             'paired t-test over sentence BLEU+1 (add-one smoothing for n>1)'
             % (args.bootstrap, args.seed))
    return 'reference: %s\nmetric: %s\n%s' % (args.ref, metric, tests)


def parse_args(argv):
    p = cli.ArgumentParser(
        description='BLEU with significance tests; the first SYSTEM is the baseline. '
        'A system is "significantly better" when its BLEU is higher and p < %g. The usual '
        'case on tokenised output: evaluate.py --tokenized --lowercase --ref REF BASELINE '
        'OTHER.' % ALPHA)
    texts = p.add_argument_group('what is compared')
    texts.add_argument('systems', nargs='+', metavar='SYSTEM',
                       help='translations, one line per reference line; the first is the '
                            'baseline the others are tested against')
    texts.add_argument('--ref', required=True,
                       help='reference translation, one line a sentence')
    bleu = p.add_argument_group('BLEU')
    bleu.add_argument('--tokenized', action='store_true',
                      help='multi-bleu.perl BLEU on tokenised text (default: sacreBLEU '
                      'on detokenised text)')
    bleu.add_argument('--lang', default=None,
                      help='target language (zh: sacreBLEU zh tokeniser)')
    bleu.add_argument('--lowercase', action='store_true',
                      help='case-insensitive (multi-bleu -lc)')
    tests = p.add_argument_group('significance')
    tests.add_argument('--bootstrap', type=int, default=1000,
                       help='resamples of sacrebleu\'s paired bootstrap (0: none; default '
                       '1000). Its p-value is two-sided, as Moses\' '
                       'bootstrap-hypothesis-difference-significance: the share of '
                       'resamples whose mean-centred |BLEU difference| exceeds the '
                       'observed one, (count + 1) / (resamples + 1); it does not say '
                       'which system is better')
    tests.add_argument('--seed', type=int, default=1,
                       help='bootstrap seed, >= 1 (passed to sacrebleu as SACREBLEU_SEED; '
                            'default 1)')
    out = p.add_argument_group('output')
    out.add_argument('--markdown', action='store_true',
                     help='print the results as a Markdown table instead of plain text')
    out.add_argument('--json', metavar='FILE', help='also write the results as JSON')
    args = p.parse_args(argv)
    if args.bootstrap < 0:
        p.error('--bootstrap must be >= 0')
    if args.seed < 1:
        p.error('--seed must be >= 1 (sacrebleu does not seed its bootstrap with 0)')
    return args


def _write_json(path, args, results):
    write_json(path, {'reference': args.ref, 'tokenized': args.tokenized,
                      'lang': args.lang, 'lowercase': args.lowercase,
                      'bootstrap': args.bootstrap, 'seed': args.seed, 'results': results},
               indent=2)


def evaluate_and_report(args):
    check_outputs([args.json], [args.ref] + args.systems)
    results = evaluate(args.ref, args.systems, args.tokenized, args.lang,
                       args.lowercase, args.bootstrap, args.seed, _progress_line())
    if args.json:
        _write_json(args.json, args, results)
    print(describe(args))
    print()
    print(format_table(results, args.markdown))


def main(argv=None):
    args = parse_args(cli.arguments(argv))
    return cli.run(lambda: evaluate_and_report(args))


if __name__ == '__main__':
    sys.exit(main())
