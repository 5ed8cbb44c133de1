"""The tables and sentences of a study of decoders over seeds, from its
gathered figures (evaluation/multi30k_results.py computes them): what the
results page and the README show, and nothing they compute themselves.

Every figure comes from the ``figures`` dict that results.json holds
(``runs``, ``decoders``, ``comparisons``, ``ensembles``, ``anchors``,
``by_length``, ``settings``, ``earlier``), so a page made again from
results.json is the same page (tests/test_multi30k_run.py checks the README's
table so).
"""
NAMES = {'baseline': 'baseline', 'mean': 'mean residual', 'attentive': 'attentive residual'}
BASELINE = 'baseline'


def name(decoder):
    return NAMES.get(decoder, decoder)


def row(cells):
    return '| ' + ' | '.join(cells) + ' |'


def table(head, rows):
    return [row(head), '|' + '---|' * len(head)] + [row(r) for r in rows]


def mean_sd(stats):
    """'37.77 ± 0.13', or the one value of a single seed, or '–'."""
    if not stats or stats.get('mean') is None:
        return '–'
    if stats.get('sd') is None:
        return '%.2f' % stats['mean']
    return '%.2f ± %.2f' % (stats['mean'], stats['sd'])


def signed(value):
    """'+0.62', '-1.30'; a value that rounds to zero is '+0.00', never '-0.00'."""
    return '%+.2f' % (round(value, 2) + 0.)


def interval(low, high):
    return '[%s, %s]' % (signed(low), signed(high))


def difference(d):
    """'-0.06 [-2.31, +2.10]'."""
    return '%s %s' % (signed(d['difference']), interval(d['low'], d['high']))


def p_text(p):
    if p is None:
        return '–'
    return '< 0.001' if p < 0.001 else '%.3f' % p


def short_names(figures):
    return figures['settings']['short_names']


def test_sets(figures):
    return figures['settings']['test_sets']


# --------------------------------------------------------------------------

def decoders_table(figures):
    """Per decoder: seeds, how they stopped, validation BLEU and each test
    set's tokenised BLEU (mean ± sd over the seeds)."""
    sets = test_sets(figures)
    head = ['decoder', 'seeds', 'stopped by budget / patience', 'valid BLEU'] + [
        short_names(figures)[s] for s in sets]
    rows = []
    for d in figures['decoders']:
        rows.append([name(d['decoder']), ', '.join(map(str, d['seeds'])),
                     '%d / %d' % (d['stopped']['budget'], d['stopped']['patience']),
                     mean_sd(d['valid_bleu'])] + [mean_sd(d['test'][s]) for s in sets])
    return table(head, rows)


def comparisons_table(figures):
    head = ['decoder - baseline', 'test set', 'over the seeds: difference [95% CI]',
            "Welch's p (Holm)", 'over the sentences, seeds pooled: difference [95% CI]',
            'bootstrap p (Holm)', 'what the seeds\' interval says']
    rows = []
    for c in figures['comparisons']:
        w, b = c.get('welch'), c.get('bootstrap')
        rows.append([name(c['decoder']), short_names(figures)[c['test_set']],
                     difference(w) if w else '–',
                     '%s (%s)' % (p_text(w['p']), p_text(w['p_holm'])) if w else '–',
                     ('%s, seeds %s / %s' % (difference(b), ','.join(map(str, b['baseline_seeds'])),
                                             ','.join(map(str, b['seeds'])))) if b else '–',
                     '%s (%s)' % (p_text(b['p']), p_text(b['p_holm'])) if b else '–',
                     c['reading']])
    return table(head, rows)


def run_head(figures):
    return ['updates', 'stopped by', 'best valid BLEU'] + [
        '%s tok / sacre' % short_names(figures)[s] for s in test_sets(figures)] + [
        'training (min)']


def run_cells(figures, r):
    """A run's cells under ``run_head``."""
    return [str(r['updates']), r.get('stop_reason') or '–', '%.2f' % r['best_valid_bleu']] + [
        '%.2f / %s' % (r['test'][s]['bleu_tok_lc'],
                       '%.2f' % r['test'][s]['sacrebleu_lc']
                       if r['test'][s].get('sacrebleu_lc') is not None else '–')
        for s in test_sets(figures)] + ['%.0f' % (r['train_wall_seconds'] / 60.)
                                        if r.get('train_wall_seconds') else '–']


def run_name(r):
    return '%s seed %d' % (name(r['decoder']), r['seed'])


def runs_table(figures):
    return table(['run'] + run_head(figures),
                 [[run_name(r)] + run_cells(figures, r) for r in figures['runs']])


def earlier_table(figures):
    """Each run trained twice under its name: the earlier training beside the
    one the table uses, with their commits."""
    current = {r['name']: r for r in figures['runs']}
    rows = []
    for e in figures.get('earlier', []):
        for label, r in (('earlier', e), ('the table\'s', current.get(e['run']))):
            if r is not None:
                rows.append([run_name(r), label, str(r.get('commit') or '–')] +
                            run_cells(figures, r))
    return table(['run', 'training', 'commit'] + run_head(figures), rows)


def ensembles_table(figures):
    sets = test_sets(figures)
    head = ['ensemble', 'seeds'] + [short_names(figures)[s] for s in sets] + [
        'gain over its seeds\' mean (%s)' % short_names(figures)[sets[0]]]
    rows = []
    for e in figures['ensembles']:
        rows.append([name(e['decoder']), ', '.join(map(str, e['seeds']))] + [
            '%.2f' % e['test'][s]['bleu_tok_lc'] for s in sets] + [
            signed(e['gain_over_seeds']) if e.get('gain_over_seeds') is not None else '–'])
    return table(head, rows)


def ensemble_comparisons_table(figures):
    """Each residual ensemble against the baseline's: difference [95% CI]; p (Holm)."""
    sets = test_sets(figures)
    rows = []
    for e in figures['ensembles']:
        against = e.get('against_baseline')
        if against:
            rows.append(['%s - baseline (seeds %s)' % (name(e['decoder']),
                                                      ', '.join(map(str, e['seeds'])))] + [
                '%s; %s (%s)' % (difference(against[s]), p_text(against[s]['p']),
                                 p_text(against[s]['p_holm'])) if s in against else '–'
                for s in sets])
    return table(['ensemble - baseline ensemble'] + [short_names(figures)[s] for s in sets],
                 rows) if rows else []


def anchor_name(anchor):
    """'Marian v1.12.42, dropout 0.2': an anchor's row and line label."""
    version = (anchor.get('version') or '').split(' ')[0]     # 'v1.12.42 COMMIT DATE'
    return 'Marian %s, dropout %g' % (version, anchor.get('dropout_rnn', 0))


def anchors_table(figures):
    sets = test_sets(figures)
    head = ['system', 'updates (stopped by)', 'best valid BLEU'] + [
        short_names(figures)[s] for s in sets] + ['training (min)']
    rows = []
    for a in figures['anchors']:
        rows.append([anchor_name(a),
                     '%d (%s)' % (a['updates'], a.get('stop_reason', '–')),
                     '%.2f' % a['best_valid_bleu'] if a.get('best_valid_bleu') else '–'] + [
            '%.2f' % a['test'][s]['bleu_tok_lc'] for s in sets] + [
            '%.0f' % (a['train_wall_seconds'] / 60.)])
    return table(head, rows)


def by_length_table(figures):
    lengths = figures.get('by_length')
    if not lengths:
        return []
    decoders = lengths['decoders']
    head = ['source words', 'sentences'] + [name(d) for d in decoders] + [
        '%s - baseline [95%% CI]' % name(d) for d in decoders if d != BASELINE]
    rows = []
    for b in lengths['buckets']:
        rows.append([b['bucket'], str(b['sentences'])] + ['%.2f' % b['bleu'][d] for d in decoders]
                    + [difference(b['difference'][d]) for d in decoders if d != BASELINE])
    return table(head, rows)


def page_block(figures):
    """The results page's generated part (markdown lines)."""
    s = figures['settings']
    lines = ['Tokenised lowercased BLEU (multi-bleu.perl\'s arithmetic); mean ± standard '
             'deviation over the seeds; each run the model of its best validation BLEU, '
             'beam %d, length-normalised.' % s['test_beam'], ''] + decoders_table(figures)
    lines += ['', '**Against the baseline.** Over the seeds: the difference of the mean BLEU '
              "and its 95%% interval by Welch's t (the seeds as the sample). Over the "
              'sentences: the paired bootstrap of the pooled BLEU (%d resamples of the test '
              'set\'s sentences, each with its translations by every seed: the seeds whose '
              'translations are kept). Holm\'s correction over the %d comparisons in '
              'brackets. The papers\' gains (AAAI Table 1, attentive: %s; mean: %s) are '
              'read against the seeds\' interval.'
              % (s['bootstrap_samples'], len(figures['comparisons']),
                 s['papers_gains']['attentive'], s['papers_gains']['mean']), '']
    lines += comparisons_table(figures)
    if figures['ensembles']:
        lines += ['', '**Ensembles** of each decoder\'s seeds (translate.py --ensemble, '
                  'beam %d):' % s['test_beam'], ''] + ensembles_table(figures)
        against = ensemble_comparisons_table(figures)
        if against:
            lines += ['', 'Each residual ensemble against the baseline\'s ensemble of the same '
                      'seeds, over the sentences (the paired bootstrap, %d resamples; one '
                      'translation each, so the test set\'s uncertainty only, not the '
                      'seeds\'): difference [95%% CI]; p (Holm over the %d):'
                      % (s['bootstrap_samples'],
                         sum(len(e.get('against_baseline') or {}) for e in figures['ensembles'])),
                      ''] + against
    if figures['anchors']:
        lines += ['', '**Marian** 1.12 `--type amun` on the same files and settings, '
                  'scored alike ([anchors](#anchors)):', ''] + anchors_table(figures)
    if figures.get('by_length'):
        lines += ['', '**%s by source length** over the seeds whose translations are kept '
                  '(%s; sentences: of the test set; the intervals by the paired bootstrap):'
                  % (short_names(figures)[figures['by_length']['test_set']],
                     figures['by_length']['pool']), ''] + by_length_table(figures)
    lines += ['', '**Every run:**', ''] + runs_table(figures)
    if figures.get('earlier'):
        lines += ['', '**Seeds trained twice.** A run trained again under its name (the same '
                  'command at a later commit; the table uses the later training): both '
                  'trainings side by side, how far apart two trainings of one seed and '
                  'setting land.', ''] + earlier_table(figures)
    lines += ['', 'sacreBLEU (the second figure of each run): detokenised output against the '
              'raw reference, signature `%s`.' % s['sacrebleu_signature']]
    return lines


def readme_block(figures):
    """The README's short table: each decoder's test BLEU, then each residual
    decoder's difference to the baseline with its 95% interval."""
    sets = test_sets(figures)
    head = ['Multi30k en-de, BLEU'] + [short_names(figures)[s] for s in sets]
    rows = [['%s (%d seeds)' % (name(d['decoder']), len(d['seeds']))] +
            [mean_sd(d['test'][s]) for s in sets] for d in figures['decoders']]
    by_pair = {(c['decoder'], c['test_set']): c for c in figures['comparisons']}
    for d in figures['decoders']:
        if d['decoder'] == BASELINE:
            continue
        rows.append(['%s - baseline, 95%% CI' % name(d['decoder'])] + [
            difference(by_pair[(d['decoder'], s)]['welch'])
            if by_pair.get((d['decoder'], s), {}).get('welch') else '–' for s in sets])
    return table(head, rows)
