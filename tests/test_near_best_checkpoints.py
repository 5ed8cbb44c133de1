"""evaluation/near_best_checkpoints.py's arithmetic and page on made-up
figures: which checkpoints are near the best, the pooled standard deviations,
the summary of a test set, the table; bad options in one line.  (The whole
program on a tiny trained run: tests/test_multi30k_run.py.)"""
import math
import statistics
import subprocess
import sys

import pytest

from evaluation import near_best_checkpoints as nbc
from helpers import error_line
from tiny_runs import QUICK_ENV, ROOT


def bleu_events(*pairs):
    return [{'event': 'bleu', 'uidx': u, 'bleu': b} for u, b in pairs] + [
        {'event': 'validation', 'uidx': u, 'cost': 1.} for u, _ in pairs]


def test_near_best_keeps_the_runs_best_and_its_neighbours_up_to_the_last_update():
    events = bleu_events((1000, 30.), (2000, 31.2), (3000, 31.5), (4000, 31.5), (5000, 33.))
    selected, near = nbc.near_best(events, 4000, 0.2)   # update 5000 is past the last
    assert selected['uidx'] == 4000     # the latest of equal bests, as nmt.py keeps it
    assert [e['uidx'] for e in near] == [3000, 4000]
    selected, near = nbc.near_best(events, 4000, 0.5)
    assert [e['uidx'] for e in near] == [2000, 3000, 4000]
    assert any(e is selected for e in near)
    assert nbc.near_best(events, 500, 1.) == (None, [])


def test_pooled_sd_weights_each_run_by_its_degrees_of_freedom():
    groups = [[1., 2., 3.], [10., 14.], [7.]]
    expected = math.sqrt((2 * statistics.variance(groups[0]) + statistics.variance(groups[1]))
                         / 3)
    assert nbc.pooled_sd(groups) == pytest.approx(expected)
    assert nbc.pooled_sd([[5.], [6.]]) is None


def test_seeds_sd_pools_the_decoders_of_the_table():
    results = {'decoders': [{'test': {'t': {'n': 5, 'sd': 0.6}}},
                            {'test': {'t': {'n': 3, 'sd': 0.3}}},
                            {'test': {'t': {'n': 1, 'sd': None}}}]}
    assert nbc.seeds_sd(results, 't') == pytest.approx(math.sqrt((4 * 0.36 + 2 * 0.09) / 6))
    assert nbc.seeds_sd(None, 't') is None


def run(name, *checkpoints):
    """A run's figures: checkpoints as (update, selected, {test set: BLEU})."""
    return {'name': name, 'decoder': name.split('-')[0], 'seed': 1,
            'checkpoints': [{'update': u, 'valid_bleu': 39., 'selected': s, 'test': t}
                            for u, s, t in checkpoints]}


RUNS = [run('baseline-seed1', (1000, False, {'t': 37.0}), (2000, True, {'t': 38.0}),
            (3000, False, {'t': 37.5})),
        run('mean-seed1', (1000, True, {'t': 36.0}), (2000, False, {'t': 36.4})),
        run('attentive-seed1', (5000, True, {'t': 35.0}))]


def test_summary_of_a_test_set():
    summary = nbc.test_set_summary(RUNS, 't', None)
    assert summary['runs_with_several'] == 2
    assert summary['mean_spread'] == pytest.approx((1.0 + 0.4) / 2)
    assert summary['largest_spread'] == pytest.approx(1.0)
    assert summary['selected_also_best'] == 1            # the baseline's, not the mean's
    assert summary['selected_ahead_of_others'] == pytest.approx(
        ((38.0 - 37.25) + (36.0 - 36.4)) / 2, abs=0.01)   # rounded to 0.01
    assert summary['pooled_sd_within_run'] == pytest.approx(round(math.sqrt(
        (0.5 + 0.08) / 3), 2))
    assert summary['seeds_pooled_sd'] is None


def test_the_page_block_shows_the_selected_checkpoint_and_each_range():
    figures = {'within': 0.5, 'test_sets': ['test_2016_flickr'], 'runs': [
        dict(r, checkpoints=[dict(c, test={'test_2016_flickr': c['test']['t']})
                             for c in r['checkpoints']]) for r in RUNS]}
    figures['runs'][0]['averaged'] = {'updates': [1000, 2000, 3000],
                                      'test': {'test_2016_flickr': 37.8}}
    figures['summary'] = {'test_2016_flickr': nbc.test_set_summary(
        figures['runs'], 'test_2016_flickr', None)}
    lines = nbc.page_block(figures)
    assert lines[2] == ('| baseline-seed1 | 1000: 39.00, **2000: 39.00**, 3000: 39.00 | '
                        '38.00 [37.00, 38.00] | 37.80 |')
    assert lines[4] == '| attentive-seed1 | **5000: 39.00** | 35.00 | – |'
    assert lines[-1].startswith('- test2016: the near-best checkpoints of a run 0.70 BLEU '
                                'apart on average (at most 1.00)')
    assert 'in 1 of 2 runs, and +0.17 BLEU from the mean' in lines[-1]
    assert lines[-1].endswith('averaged: -0.20 BLEU from the selected checkpoint on average '
                              '(1 run).')


def seed_run(decoder, seed, selected, *others):
    """A run on one test set 't': its selected checkpoint's BLEU, then the others'."""
    return {'name': '%s-seed%d' % (decoder, seed), 'decoder': decoder, 'seed': seed,
            'checkpoints': [{'update': 1000 * (i + 1), 'valid_bleu': 39., 'selected': i == 0,
                             'test': {'t': v}} for i, v in enumerate((selected,) + others)]}


def test_decoders_compared_on_the_selected_checkpoint_and_on_the_near_best_mean():
    runs = [seed_run('baseline', 1, 38.0, 36.0), seed_run('baseline', 2, 38.0, 38.0),
            seed_run('attentive', 1, 40.0), seed_run('attentive', 2, 41.0, 39.0),
            seed_run('mean', 3, 36.0)]            # one seed: no interval, left out
    for r, averaged in zip(runs, (37.0, 38.0, None, 42.0)):
        r['averaged'] = averaged and {'updates': [1000, 2000], 'test': {'t': averaged}}
    [row] = nbc.decoder_comparisons(runs, ['t'])
    assert (row['decoder'], row['seeds'], row['baseline_seeds']) == ('attentive', [1, 2], [1, 2])
    # near-best means: baseline 37, 38; attentive 40, 40.  Selected: 38, 38; 40, 41
    near, selected = row['near_best_mean'], row['selected']
    assert near['difference'] == pytest.approx(2.5)
    # one side without spread: Welch's df is the other side's n - 1 = 1 (t 12.706)
    half = 12.7062 * math.sqrt(0.5 / 2)
    assert (near['low'], near['high']) == pytest.approx((2.5 - half, 2.5 + half), abs=1e-3)
    assert selected['difference'] == pytest.approx(2.5)
    assert (selected['low'], selected['high']) == pytest.approx((2.5 - half, 2.5 + half),
                                                                abs=1e-3)
    assert near['holm_p'] == pytest.approx(near['p'], abs=1e-4)   # a family of one
    # averaged: baseline 37, 38; attentive 40 (one checkpoint: its selected), 42
    averaged = row['averaged']
    assert averaged['difference'] == pytest.approx(3.5)
    from scipy import stats
    va, vb = 0.5 / 2, 2.0 / 2                         # variances of the means
    df = (va + vb) ** 2 / (va ** 2 + vb ** 2)         # Welch-Satterthwaite, n = 2 a side
    half = stats.t.ppf(0.975, df) * math.sqrt(va + vb)
    assert (averaged['low'], averaged['high']) == pytest.approx((3.5 - half, 3.5 + half),
                                                                abs=1e-3)
    assert nbc.decoder_comparisons(runs[2:], ['t']) == []        # no baseline seeds


def test_the_page_block_compares_the_decoders_when_it_can():
    figures = {'within': 0.5, 'test_sets': ['test_2017_flickr'], 'runs': [], 'summary': {
        'test_2017_flickr': {'runs_with_several': 0}}}
    assert not any('compared' in line for line in nbc.page_block(figures))
    test = {'difference': 0.5, 'low': -0.25, 'high': 1.25, 'p': 0.2, 'holm_p': 0.4}
    figures['comparisons'] = [{'decoder': 'attentive', 'test_set': 'test_2017_flickr',
                               'seeds': [1, 2, 3], 'baseline_seeds': [1, 2], 'selected': test,
                               'near_best_mean': dict(test, difference=0.25, p=0.0004),
                               'averaged': dict(test, difference=-0.05)}]
    lines = nbc.page_block(figures)
    assert 'over the 1 comparisons' in lines[-5]
    assert lines[-1] == ('| attentive residual | test2017 | 1,2,3 (1,2) | +0.50 [-0.25, +1.25]; '
                         '0.200 (0.400) | +0.25 [-0.25, +1.25]; < 0.001 (0.400) | '
                         '-0.05 [-0.25, +1.25]; 0.200 (0.400) |')


def test_bad_options_and_an_empty_runs_folder_are_one_line(tmp_path):
    script = [sys.executable, ROOT + '/evaluation/near_best_checkpoints.py']
    proc = subprocess.run(script + [str(tmp_path), '--data', str(tmp_path), '--out',
                                    str(tmp_path / 'out'), '--within', '-1'],
                          capture_output=True, text=True, env=QUICK_ENV)
    assert proc.returncode == 2 and '--within' in proc.stderr.strip().splitlines()[-1]
    proc = subprocess.run(script + [str(tmp_path), '--data', str(tmp_path), '--out',
                                    str(tmp_path / 'out'), '--dry-run'],
                          capture_output=True, text=True, env=QUICK_ENV)
    error_line(proc, 'no finished run with its snapshots')
