"""What demo/demo.py shows: the results table, example translations, the chart,
the choice of the attention figure's sentence, and the mean and spread of
the figures over several seeds."""
import statistics

from demo import toy_language

BINS = ['%d-%d' % b for b in toy_language.DISTANCE_BINS]
COLORS = ['#7f7f7f', '#1f77b4', '#ff7f0e', '#2ca02c', '#d62728']


def fmt_time(seconds):
    seconds = int(round(max(seconds, 0)))
    return '%d:%02d' % (seconds // 60, seconds % 60)


def site_distances(ref_line):
    """Subject-verb distance of each clause of a reference sentence."""
    return [toy_language.clause_distance(c)
            for c in toy_language._split_clauses(ref_line.split())]


# ---------------------------------------------------------------- choices
def figure_sentence(ref_lines):
    """Index of the sentence drawn: the shortest one-clause reference whose
    subject-verb distance is in the longest bin (the first of those); else
    the shortest reference."""
    lo = toy_language.DISTANCE_BINS[-1][0]
    candidates = [(len(r.split()), i) for i, r in enumerate(ref_lines)
                  if len(site_distances(r)) == 1 and (site_distances(r)[0] or 0) >= lo]
    if not candidates:
        candidates = [(len(r.split()), i) for i, r in enumerate(ref_lines)]
    return min(candidates)[1]


def pick_examples(src_lines, ref_lines, hyps, n):
    """n test sentences to show: first those some model gets wrong (in test
    order; those where the models disagree with each other first), then those
    with the longest subject-verb distances.  hyps: {model name: lines}."""
    def wrong(i):
        return [h[i].split() != ref_lines[i].split() for h in hyps.values()]
    errors = [i for i in range(len(ref_lines)) if any(wrong(i))]
    errors.sort(key=lambda i: (all(wrong(i)), i))
    rest = sorted((i for i in range(len(ref_lines)) if i not in set(errors)),
                  key=lambda i: (-max(d or 0 for d in site_distances(ref_lines[i])), i))
    return [{'index': i, 'source': src_lines[i], 'reference': ref_lines[i],
             'distances': site_distances(ref_lines[i]),
             'hypotheses': {name: h[i] for name, h in hyps.items()}}
            for i in (errors + rest)[:n]]


# ---------------------------------------------------------------- text
def _table(head, body):
    widths = [max(len(x[i]) for x in [head] + body) for i in range(len(head))]
    fmt = lambda cells: ' | '.join(  # noqa: E731
        c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))
    return '\n'.join([' ' + fmt(head), '-' + '+'.join('-' * (w + 2) for w in widths) + '-']
                     + [' ' + fmt(b) for b in body])


def _pct(x):
    return '%.1f%%' % (100 * x)


def results_table(results):
    head = (['model', 'status', 'updates', 'train time', 'upd/s', 'valid nats/tok', 'BLEU',
             'exact', 'agreement'] + ['dist %s' % b for b in BINS])
    body = []
    for r in results['models']:
        by = r['agreement_by_distance']
        body.append([r['label'], r['status'], str(r['updates']), fmt_time(r['train_seconds']),
                     '%.2f' % r['updates_per_second'] if r['updates_per_second'] else '-',
                     '%.4f' % r['best_valid_cost'] if r['best_valid_cost'] is not None
                     else '-', '%.2f' % r['bleu'], _pct(r['exact_match']),
                     _pct(r['agreement']['accuracy'])]
                    + ['%s (%d)' % (_pct(by[b]['accuracy']), by[b]['sites']) for b in BINS])
    return _table(head, body)


def print_report(results, log):
    n_test = results['settings']['test']
    ref = results['reference_agreement']
    log('== 4. results on %d test sentences (BLEU: multi-bleu.perl on the toy tokens; '
        'agreement: main verbs whose suffix is the class of their subject noun, of the '
        'produced ones (%d sites); by subject-verb distance in tokens, sites in brackets)'
        % (n_test, ref['sites']))
    log(results_table(results))
    for r in results['models']:
        log('%s: %s (%s); %d of %d agreement sites missing'
            % (r['label'], r['status'], r['status_reason'], r['agreement']['missing'],
               r['agreement']['sites']))
    if results['examples']:
        log('')
        log('example translations (= : same as the reference)')
        names = [r['name'] for r in results['models']]
        width = max(len(x) for x in names + ['reference'])
        for ex in results['examples']:
            log('  test sentence %d, subject-verb distance %s'
                % (ex['index'], ', '.join(map(str, ex['distances']))))
            log('    %s  %s' % ('source'.ljust(width), ex['source']))
            log('    %s  %s' % ('reference'.ljust(width), ex['reference']))
            for name in names:
                hyp = ex['hypotheses'][name]
                log('    %s  %s' % (name.ljust(width), '=' if hyp.split() ==
                                    ex['reference'].split() else hyp))


# ---------------------------------------------------------------- chart
def plot_results(runs, target_cost, path):
    """Validation curves, BLEU, and agreement accuracy by distance."""
    from machinery import plots
    fig, axes = plots.plt.subplots(1, 3, figsize=(14, 3.9))
    ax = axes[0]
    for r, color in zip(runs, COLORS):
        if r['valid_history']:
            u, c = zip(*r['valid_history'])
            ax.plot(u, c, marker='.', color=color, label='%s (%s)' % (r['label'], r['status']))
    ax.axhline(target_cost, color='k', lw=0.8, ls='--', label='converged below')
    ax.set_yscale('log')
    ax.set_xlabel('updates')
    ax.set_title('validation cost (nats per target token)', fontsize=10)
    ax.legend(fontsize=7)
    ax = axes[1]
    bars = ax.bar(range(len(runs)), [r['bleu'] for r in runs], color=COLORS[:len(runs)])
    for b, r in zip(bars, runs):
        ax.text(b.get_x() + b.get_width() / 2, b.get_height(), '%.1f' % r['bleu'],
                ha='center', va='bottom', fontsize=9)
    ax.set_xticks(range(len(runs)))
    ax.set_xticklabels([r['label'] for r in runs], fontsize=7)
    ax.set_ylim(0, 105)
    ax.set_title('BLEU (test)', fontsize=10)
    ax = axes[2]
    width = 0.8 / len(runs)
    for k, (r, color) in enumerate(zip(runs, COLORS)):
        values = [100 * r['agreement_by_distance'][b]['accuracy'] for b in BINS]
        xs = [i + (k - (len(runs) - 1) / 2) * width for i in range(len(BINS))]
        ax.bar(xs, values, width, color=color, label=r['label'])
        for x, v in zip(xs, values):
            ax.text(x, v, '%.0f' % v, ha='center', va='bottom', fontsize=7)
    ax.set_xticks(range(len(BINS)))
    ax.set_xticklabels(['%s tokens' % b for b in BINS])
    ax.set_ylim(0, 110)
    ax.set_title('agreement accuracy (%) by subject-verb distance', fontsize=10)
    ax.legend(fontsize=7, loc='lower left')
    fig.tight_layout()
    plots.save(fig, path, dpi=100)


# ---------------------------------------------------------------- seeds
def figures(run):
    """The figures of one model in one run, for the seed summary."""
    out = {'converged': 1.0 if run['status'] == 'converged' else 0.0,
           'updates': run['updates'], 'train_minutes': run['train_seconds'] / 60.0,
           'best_valid_cost': run['best_valid_cost'], 'bleu': run['bleu'],
           'exact_match': 100 * run['exact_match'],
           'agreement': 100 * run['agreement']['accuracy']}
    for b in BINS:
        out['agreement_' + b] = 100 * run['agreement_by_distance'][b]['accuracy']
    return out


def mean_sd(values):
    """{'mean', 'sd' (sample standard deviation; 0 for one value), 'min',
    'max', 'values'} of a list of numbers (None values left out)."""
    values = [v for v in values if v is not None]
    if not values:
        return None
    return {'mean': statistics.mean(values),
            'sd': statistics.stdev(values) if len(values) > 1 else 0.0,
            'min': min(values), 'max': max(values), 'values': values}


def seed_summary(all_results):
    """{model name: {'label', figure: mean_sd}} over the runs, and the runs'
    total wall times."""
    names = [r['name'] for r in all_results[0]['models']]
    models = {}
    for name in names:
        rows = [figures(m) for res in all_results for m in res['models'] if m['name'] == name]
        label = next(m['label'] for m in all_results[0]['models'] if m['name'] == name)
        models[name] = dict({'label': label},
                            **{k: mean_sd([row[k] for row in rows]) for k in rows[0]})
    return {'runs': len(all_results),
            'seeds': [res['settings']['seed'] for res in all_results],
            'total_minutes': mean_sd([res['total_seconds'] / 60.0 for res in all_results]),
            'load_average': [res.get('load_average') for res in all_results],
            'models': models}


def seed_table(summary):
    """Markdown table: mean ± sd of each figure, per model."""
    cols = [('converged', 'converged', lambda s: '%d/%d' % (round(sum(s['values'])),
                                                          len(s['values']))),
            ('updates', 'updates', '%.0f'), ('train_minutes', 'train min', '%.1f'),
            ('best_valid_cost', 'valid nats/tok', '%.4f'), ('bleu', 'BLEU', '%.2f'),
            ('exact_match', 'exact %', '%.1f'), ('agreement', 'agreement %', '%.1f')]
    cols += [('agreement_' + b, 'dist %s %%' % b, '%.1f') for b in BINS]
    lines = ['| model | ' + ' | '.join(c[1] for c in cols) + ' |',
             '|---|' + '---|' * len(cols)]
    for m in summary['models'].values():
        cells = []
        for key, _, fmt in cols:
            s = m[key]
            if s is None:
                cells.append('-')
            elif callable(fmt):
                cells.append(fmt(s))
            else:
                cells.append((fmt + ' ± ' + fmt) % (s['mean'], s['sd']))
        lines.append('| %s | %s |' % (m['label'], ' | '.join(cells)))
    return '\n'.join(lines)
