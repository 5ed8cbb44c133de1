"""The Multi30k path end to end on a tiny made-up mirror: get, prepare,
train_multi30k.sh --tiny for each decoder (a few updates, validation BLEU
with the batched search, the best-BLEU model kept), translation of the three
test sets and their scores in result.json."""
import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from pipeline import multi30k
from test_multi30k_data import mirror  # noqa: F401  (the tiny mirror fixture)
from helpers import error_line
from tiny_runs import QUICK_ENV, ROOT, log_events

SCRIPT = os.path.join(ROOT, 'train_multi30k.sh')


@pytest.fixture
def prepared(mirror, tmp_path):  # noqa: F811
    out = tmp_path / 'multi30k'
    assert multi30k.main(['get', '--out', str(out), '--base', str(mirror)]) == 0
    assert multi30k.main(['prepare', '--raw', str(out / 'raw'), '--out', str(out),
                          '--bpe-merges', '20']) == 0
    return out


def train(*args, cwd):
    return subprocess.run(['bash', SCRIPT] + [str(a) for a in args], cwd=cwd,
                          capture_output=True, text=True, timeout=900,
                          env=dict(QUICK_ENV, PYTHON=sys.executable))


# the baseline trains as 2 MPI workers, with the training graph's dropouts
WORKERS = {'baseline': 2, 'mean': 1, 'attentive': 1}
DROPOUTS = ['--dropout_embedding', '0.1', '--dropout_context', '0.1', '--dropout_readout', '0.1']


@pytest.mark.parametrize('decoder', ['baseline', 'mean', 'attentive'])
def test_tiny_run_of_each_decoder(prepared, tmp_path, decoder):
    models = tmp_path / 'runs'
    workers = WORKERS[decoder]
    if workers > 1 and shutil.which('mpirun') is None:
        pytest.skip('no mpirun on this machine (bash setup.sh installs Open MPI)')
    extra = ['--'] + DROPOUTS if workers > 1 else []
    proc = train('--tiny', '--threads', 1, '--workers', workers, decoder, 3, prepared, models,
                 *extra, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads((models / 'result.json').read_text())
    assert result['decoder'] == decoder and result['seed'] == 3
    assert result['workers'] == workers
    assert ('mpirun -np 2 ' in result['command']) == (workers > 1)
    if workers > 1:
        assert '--dropout_readout 0.1' in result['command']
    assert result['updates'] == 8 and result['selected_model'] == 'model.best_bleu.npz'
    assert '--seed 3' in result['command'] and '--use_dropout' not in result['command']
    [part] = result['training_parts']
    assert (part['from_update'], part['to_update']) == (0, 8)
    assert result['train_wall_seconds'] == part['seconds'] > 0
    assert result['total_wall_seconds'] > result['train_wall_seconds']
    for test_set in ('test_2016_flickr', 'test_2017_flickr', 'test_2017_mscoco'):
        scores = result['test'][test_set]
        assert 0. <= scores['bleu_tok_lc'] <= 100. and 0. <= scores['sacrebleu_lc'] <= 100.
        hyp = (models / (test_set + '.hyp.tok')).read_text().splitlines()
        assert len(hyp) == len((prepared / (test_set + '.tok.de')).read_text().splitlines())
        assert '@@' not in ' '.join(hyp)
    events = log_events(str(models / 'model.npz.log.jsonl'))
    assert [e['uidx'] for e in events if e['event'] == 'bleu'] == [4, 8]
    start = next(e for e in events if e['event'] == 'start')
    assert start['frequency_cost'] > 0
    assert all('cost_per_word' in e for e in events if e['event'] == 'update')
    assert (models / 'model.npz').exists() and (models / 'model.best_bleu.npz').exists()
    if decoder == 'mean':
        scored_at_a_budget(prepared, models, tmp_path, events)
    if decoder == 'attentive':
        near_best_checkpoints(prepared, models, tmp_path, events, result)


def scored_at_a_budget(prepared, models, tmp_path, events):
    """--score-at 4: the snapshot of update 4 (the only validation up to 4)
    translated and scored into at-4/; a budget the run has not reached: one
    error line."""
    proc = train('--tiny', '--threads', 1, '--score-at', 4, 'mean', 3, prepared, models,
                 cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    at = json.loads((models / 'at-4' / 'result.json').read_text())
    assert (at['budget'], at['updates'], at['selected_model']) == (4, 4, 'model.iter4.npz')
    assert at['best_valid_bleu'] == next(e['bleu'] for e in events if e['event'] == 'bleu')
    assert at['decoder'] == 'mean' and '--seed 3' in at['command']
    assert [(p['from_update'], p['to_update']) for p in at['training_parts']] == [(0, 4)]
    for test_set in ('test_2016_flickr', 'test_2017_flickr', 'test_2017_mscoco'):
        assert 0. <= at['test'][test_set]['bleu_tok_lc'] <= 100.
        assert (models / 'at-4' / (test_set + '.hyp.tok')).exists()
    proc = train('--tiny', '--score-at', 100, 'mean', 3, prepared, models, cwd=tmp_path)
    error_line(proc, 'not reached update 100', alone=True)
    assert not (models / 'at-100').exists()


NEAR_BEST = os.path.join(ROOT, 'evaluation', 'near_best_checkpoints.py')
NEAR_MARKERS = ('<!-- near-best checkpoints: begin -->', '<!-- near-best checkpoints: end -->')


def near_best(*args, cwd):
    return subprocess.run([sys.executable, NEAR_BEST] + [str(a) for a in args], cwd=cwd,
                          capture_output=True, text=True, timeout=900, env=QUICK_ENV)


def near_best_checkpoints(prepared, models, tmp_path, events, result):
    """evaluation/near_best_checkpoints.py on the tiny run (as attentive-seed3
    of a runs folder): both validations within 100 points of the best; the
    selected one's scores are the run's own (its snapshot is the best-BLEU
    model, and translated again it scores the same), the other translated
    and scored into near-best/; the page's table between its markers; a run
    whose snapshot is gone is left out, and with no run left: one error
    line, the page untouched."""
    import numpy
    from evaluation import near_best_checkpoints as nbc
    runs, out, page = tmp_path / 'study', tmp_path / 'checkpoints', tmp_path / 'page.md'
    runs.mkdir()
    os.symlink(models, runs / 'attentive-seed3')
    page.write_text('# page\n%s\nstale table\n%s\nend\n' % NEAR_MARKERS)
    proc = near_best(runs, '--data', prepared, '--out', out, '--within', 100, '--page', page,
                     cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert 'checkpoint 1 of 2: ' in proc.stdout   # the other one, then the two averaged
    assert 'checkpoint 2 of 2 (' in proc.stdout and 'the average of updates 4, 8' in proc.stdout
    figures = json.loads((out / 'checkpoints.json').read_text())
    [run] = figures['runs']
    bleus = [e for e in events if e['event'] == 'bleu']
    [best] = [e for e in bleus if e['best']][-1:]     # the last new best the log says
    assert [c['update'] for c in run['checkpoints']] == [e['uidx'] for e in bleus] == [4, 8]
    [chosen] = [c for c in run['checkpoints'] if c['selected']]
    [other] = [c for c in run['checkpoints'] if not c['selected']]
    assert chosen['update'] == best['uidx']
    best_model, snapshot = (numpy.load(str(models / name)) for name in
                            ('model.best_bleu.npz', 'model.iter%d.npz' % best['uidx']))
    assert all(numpy.array_equal(best_model[k], snapshot[k]) for k in best_model.files)
    for test_set in ('test_2016_flickr', 'test_2017_flickr', 'test_2017_mscoco'):
        assert chosen['test'][test_set] == result['test'][test_set]['bleu_tok_lc']
        assert 0. <= other['test'][test_set] <= 100.
        hyp = out / 'attentive-seed3' / ('iter-%d' % other['update']) / (test_set + '.hyp.tok')
        assert len(hyp.read_text().splitlines()) == len(
            (prepared / (test_set + '.tok.de')).read_text().splitlines())
    assert run['averaged']['updates'] == [4, 8]
    averaged, other_snapshot = (numpy.load(str(path)) for path in (
        models / 'near-best' / 'averaged' / 'model.npz',
        models / ('model.iter%d.npz' % other['update'])))
    for k in averaged.files:
        numpy.testing.assert_allclose(averaged[k], (snapshot[k].astype(float)
                                                    + other_snapshot[k]) / 2, rtol=1e-6)
    for test_set in ('test_2016_flickr', 'test_2017_flickr', 'test_2017_mscoco'):
        assert 0. <= run['averaged']['test'][test_set] <= 100.
        assert (out / 'attentive-seed3' / 'averaged' / (test_set + '.hyp.tok')).exists()
    again = nbc.score_checkpoint(str(models), best, multi30k_data(prepared), result['test_beam'])
    assert {s: v['bleu_tok_lc'] for s, v in again['test'].items()} == chosen['test']
    text = page.read_text()
    assert '| attentive-seed3 | ' in text and 'stale table' not in text and text.endswith('end\n')
    assert (out / 'checkpoints.png').stat().st_size > 0
    proc = near_best(runs, '--data', prepared, '--out', out, '--within', 100, '--dry-run',
                     cwd=tmp_path)
    assert proc.returncode == 0 and 'to translate' not in proc.stdout, proc.stdout
    shutil.rmtree(str(models / 'near-best' / ('iter-%d' % other['update'])))
    os.remove(str(models / ('model.iter%d.npz' % other['update'])))
    proc = near_best(runs, '--data', prepared, '--out', tmp_path / 'again', '--within', 100,
                     '--page', page, cwd=tmp_path)
    assert 'no snapshot of update %d' % other['update'] in proc.stderr
    error_line(proc, 'no finished run with its snapshots')
    assert page.read_text() == text and not (tmp_path / 'again' / 'checkpoints.json').exists()


def multi30k_data(prepared):
    from pipeline import train_multi30k
    return train_multi30k.Data(str(prepared))


def test_missing_data_is_one_line(tmp_path):
    proc = train('baseline', 1, tmp_path / 'nothing', cwd=tmp_path)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [
        'error: %s: no such file (prepare %s with pipeline/multi30k.py prepare first; '
        'docs/multi30k.md)' % (tmp_path / 'nothing' / 'train.bpe.en', tmp_path / 'nothing')]


def test_dry_run_shows_the_settings(tmp_path):
    proc = train('--dry-run', 'attentive', 2, tmp_path, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert '--optimizer adam --lrate 0.0004' in proc.stdout
    assert '--residual attentive' in proc.stdout and '-k 12' in proc.stdout


def fake_run(runs, data, decoder, seed, hyps, valid_bleu):
    """A finished run's folder: result.json, a training log, translations."""
    folder = runs / ('%s-seed%d' % (decoder, seed))
    folder.mkdir(parents=True)
    tests = {}
    for test_set in ('test_2016_flickr', 'test_2017_flickr', 'test_2017_mscoco'):
        (folder / (test_set + '.hyp.tok')).write_text('\n'.join(hyps) + '\n')
        tests[test_set] = {'bleu_tok_lc': valid_bleu, 'sacrebleu_lc': valid_bleu - 1}
    command = ('/usr/venv/bin/python /somewhere/project/nmt.py --model %s/model.npz '
               '--datasets %s/train.bpe.en %s/train.bpe.de' % (folder, data, data))
    result = {'decoder': decoder, 'seed': seed, 'updates': 2000, 'test': tests,
              'best_valid_bleu': valid_bleu, 'best_valid_cost': 40., 'command': command}
    (folder / 'result.json').write_text(json.dumps(result))
    events = [{'event': 'start', 'uidx': 0, 'epoch': 0, 'time': 0.}]
    events += [{'event': 'validation', 'uidx': u, 'epoch': 0, 'time': 0., 'cost': c}
               for u, c in ((1000, 50.), (2000, 40.))]
    events += [{'event': 'bleu', 'uidx': 1000, 'epoch': 0, 'time': 0., 'bleu': valid_bleu},
               {'event': 'stop', 'uidx': 2000, 'epoch': 0, 'time': 0.,
                'reason': 'finish_after'},
               {'event': 'end', 'uidx': 2000, 'epoch': 0, 'time': 0., 'valid_cost': 40.}]
    (folder / 'model.npz.log.jsonl').write_text(''.join(json.dumps(e) + '\n' for e in events))


def gather_results(runs, data, out, *options):
    """evaluation/multi30k_results.py on the runs; its finished process."""
    proc = subprocess.run([sys.executable, os.path.join(ROOT, 'evaluation', 'multi30k_results.py'),
                           str(runs), '--data', str(data), '--out', str(out)] +
                          [str(o) for o in options],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return proc


def write_test_sets(data, refs, sources):
    data.mkdir()
    for test_set in ('test_2016_flickr', 'test_2017_flickr', 'test_2017_mscoco'):
        (data / (test_set + '.tok.de')).write_text('\n'.join(refs) + '\n')
        (data / (test_set + '.tok.en')).write_text('\n'.join(sources) + '\n')


REFS = ['ein mann fährt rad', 'zwei hunde spielen im schnee', 'eine frau kocht',
        'ein kind schläft']
SOURCES = ['a man rides a bike', 'two dogs play in the snow', 'a woman cooks',
           'a child sleeps']
WORSE = ['ein mann rad', 'zwei hunde im schnee', 'eine frau', 'ein kind']
PAGE = 'intro\n<!-- results: begin -->\nold\n<!-- results: end -->\nafter\n'
README = 'top\n<!-- multi30k table: begin -->\nold\n<!-- multi30k table: end -->\nend\n'


def gathered_study(tmp_path):
    """Two seeds of the baseline and of the attentive decoder, an ensemble,
    a Marian anchor and a run still training, gathered into out/ and the
    page and README copies; (data, runs, out, page, readme, results)."""
    data, runs, out = tmp_path / 'data', tmp_path / 'runs', tmp_path / 'out'
    write_test_sets(data, REFS, SOURCES)
    for seed in (1, 2):
        fake_run(runs, data, 'baseline', seed, WORSE, 30. + seed)
        fake_run(runs, data, 'attentive', seed, REFS, 34. + seed)
    ensemble, marian = runs / 'attentive-ensemble', runs / 'marian-dropout0.2-seed1'
    base_ensemble = runs / 'baseline-ensemble'
    for folder, lines in ((ensemble, REFS), (marian, REFS), (base_ensemble, WORSE)):
        folder.mkdir()
        for test_set in TEST_SETS:
            (folder / (test_set + '.hyp.tok')).write_text('\n'.join(lines) + '\n')
    for folder, decoder, bleu in ((ensemble, 'attentive', 37.), (base_ensemble, 'baseline', 33.)):
        (folder / 'result.json').write_text(json.dumps({
            'decoder': decoder, 'ensemble': True, 'seeds': [1, 2], 'command': 'x',
            'test': {s: {'bleu_tok_lc': bleu} for s in TEST_SETS}}))
    (marian / 'result.json').write_text(json.dumps({
        'system': 'marian', 'decoder': 'marian-amun', 'seed': 1, 'dropout_rnn': 0.2,
        'version': 'v1.12', 'updates': 9000, 'stop_reason': 'early_stop',
        'best_valid_bleu': 33., 'train_wall_seconds': 600., 'command': 'pymarian',
        'test': {s: {'bleu_tok_lc': 33.} for s in TEST_SETS}}))
    (marian / 'train.log').write_text(
        '[2026-12-06 10:00:00] [config] model: /scratch/me/runs/multi30k/%s/model.npz\n'
        % marian.name)
    (marian / 'valid.log').write_text('[2026-12-06 10:00:09] [valid] Ep. 9 : Up. 9000 : '
                                      'translation : 33 : new best\n')
    (runs / 'mean-seed1').mkdir()        # still training: no result.json
    page, readme = tmp_path / 'page.md', tmp_path / 'README.md'
    page.write_text(PAGE)
    readme.write_text(README)
    proc = gather_results(runs, data, out, '--bootstrap', '200', '--page', page,
                          '--readme', readme)
    assert 'mean-seed1 has no result.json' in proc.stderr
    return data, runs, out, page, readme, json.loads((out / 'results.json').read_text())


TEST_SETS = ('test_2016_flickr', 'test_2017_flickr', 'test_2017_mscoco')


def table_rows(text):
    """{first cell: the row's cells} of the first row of each name."""
    rows = {}
    for line in text.splitlines():
        if line.startswith('| '):
            rows.setdefault(line.split(' | ')[0].lstrip('| '), line.rstrip(' |').split(' | '))
    return rows


def test_an_anchors_validation_curve_is_read_from_its_folder_or_its_gathered_copy(tmp_path):
    from evaluation import multi30k_results as gathering
    folder, out = tmp_path / 'marian-dropout0-seed1', tmp_path / 'out'
    folder.mkdir()
    (folder / 'valid.log').write_text(''.join(
        '[2026-12-07 06:38:25] [valid] Ep. 2 : Up. %d : %s : %s : new best\n' % line
        for line in [(1000, 'translation', '6.3171'), (1000, 'cross-entropy', '64.5164'),
                     (2000, 'translation', '20.3991')]))
    step = gathering.Step('anchors', folder.name, {}, None, str(folder))
    curve = [(1000, 6.3171), (2000, 20.3991)]
    assert gathering.anchor_validation_bleu(step, str(out)) == curve
    # its folder gone: the copy a gathering kept in out/logs/
    (out / 'logs').mkdir(parents=True)
    shutil.move(str(folder / 'valid.log'), str(out / 'logs' / (folder.name + '.valid.log')))
    kept = step._replace(translations=str(out / 'translations' / folder.name))
    assert gathering.anchor_validation_bleu(kept, str(out)) == curve
    assert gathering.anchor_validation_bleu(kept, str(tmp_path)) == []


def test_results_gathered(tmp_path):
    data, runs, out, page, readme, results = gathered_study(tmp_path)
    assert [(r['decoder'], r['seed']) for r in results['runs']] == [
        ('baseline', 1), ('baseline', 2), ('attentive', 1), ('attentive', 2)]
    assert results['runs'][3]['command'] == (
        '.venv/bin/python nmt.py --model runs/multi30k/attentive-seed2/model.npz '
        '--datasets data/multi30k/train.bpe.en data/multi30k/train.bpe.de')
    base_ensemble, ensemble = results['ensembles']
    assert [(e['decoder'], e['seeds']) for e in results['ensembles']] == [
        ('baseline', [1, 2]), ('attentive', [1, 2])]
    # the ensemble against its seeds' mean (35, 36 on test2016)
    assert ensemble['gain_over_seeds'] == pytest.approx(1.5)
    # against the baseline's ensemble over the sentences: the references
    # (BLEU 100) against worse lines (no 4-gram right: 0), never behind in a
    # resample; the same p on the 3 identical test sets, so Holm's is 3 p
    assert base_ensemble['against_baseline'] is None
    assert sorted(ensemble['against_baseline']) == sorted(TEST_SETS)
    for boot in ensemble['against_baseline'].values():
        assert boot['difference'] == pytest.approx(100.) and boot['low'] >= 0
        assert boot['p_holm'] == pytest.approx(min(1., 3 * boot['p']))
    [anchor] = results['anchors']
    assert anchor['name'] == 'marian-dropout0.2-seed1'
    # Marian's own logs, kept with their paths relative
    assert anchor['logs'] == ['logs/marian-dropout0.2-seed1.train.log',
                              'logs/marian-dropout0.2-seed1.valid.log']
    assert (out / anchor['logs'][0]).read_text() == (
        '[2026-12-06 10:00:00] [config] model: runs/multi30k/%s/model.npz\n' % anchor['name'])
    assert 'Up. 9000' in (out / anchor['logs'][1]).read_text()
    assert (out / 'logs' / 'attentive-seed2.log.jsonl').exists()
    assert (out / 'validation.png').stat().st_size > 0
    assert (out / 'by_length.png').stat().st_size > 0
    [decoder] = [d for d in results['decoders'] if d['decoder'] == 'baseline']
    assert decoder['test']['test_2016_flickr']['mean'] == pytest.approx(31.5)
    comparison = results['comparisons'][0]
    assert (comparison['decoder'], comparison['test_set']) == ('attentive', 'test_2016_flickr')
    # Welch over the seeds: BLEU 31, 32 against 35, 36 (t 5.66, 2 degrees of freedom)
    assert comparison['welch']['p'] == pytest.approx(0.0299, abs=1e-4)
    assert comparison['welch']['difference'] == pytest.approx(4.)
    assert comparison['welch']['p_holm'] == pytest.approx(3 * 0.0299, abs=3e-4)
    assert comparison['bootstrap']['seeds'] == [1, 2]
    # the references against worse lines: never behind in a resample
    assert comparison['bootstrap']['difference'] > 0 and comparison['bootstrap']['low'] >= 0
    # 4 BLEU ahead (+0.96 to +7.04), but Holm's p 0.09 takes it back
    assert comparison['reading'].endswith("ahead of the baseline before the correction for "
                                          "the comparisons, not after it (Holm's p 0.090); "
                                          "the papers' largest (+1.4) inside it, their "
                                          "smallest (+0.6) excluded")
    # the page's and the README's tables, between their markers
    text = page.read_text()
    assert text.startswith('intro\n<!-- results: begin -->\n') and text.endswith(
        '<!-- results: end -->\nafter\n') and 'old' not in text
    rows = table_rows(text)
    assert rows['baseline'][1:4] == ['1, 2', '2 / 0', '31.50 ± 0.71']
    assert rows['ensemble'] and 'signature `nrefs:1|case:lc' in text
    against = rows['attentive residual - baseline (seeds 1, 2)']
    assert len(against) == 4 and all(c.startswith('+100.00 [') for c in against[1:])
    readme_rows = table_rows(readme.read_text())
    assert readme_rows['attentive residual (2 seeds)'][1] == '35.50 ± 0.71'
    assert readme_rows['attentive residual - baseline, 95% CI'][1].startswith('+4.00 [')
    assert not (out / 'results.md').exists()
    # by length: all 4 sentences have 1-10 words; seeds 1 and 2 pooled
    bucket = results['by_length']['buckets'][0]
    assert (bucket['bucket'], bucket['sentences']) == ('1-10', 4)
    assert bucket['bleu']['attentive'] == pytest.approx(100.)


def test_results_gathered_again_without_the_run_folders(tmp_path):
    """On a machine without some steps' folders they are read from out: the
    same results and page."""
    data, runs, out, page, readme, results = gathered_study(tmp_path)
    text = page.read_text()
    shutil.rmtree(runs / 'baseline-seed2')
    shutil.rmtree(runs / 'attentive-seed1')
    shutil.rmtree(runs / 'attentive-ensemble')
    gather_results(runs, data, out, '--bootstrap', '200', '--page', page, '--readme', readme)
    assert json.loads((out / 'results.json').read_text()) == results
    assert page.read_text() == text
    assert (out / 'translations' / 'baseline-seed2' / 'test_2017_mscoco.hyp.tok').read_text() \
        == '\n'.join(WORSE) + '\n'


def test_a_seed_training_again_is_left_out_until_it_ends(tmp_path):
    """A run folder whose seed trains again (its log's last training has not
    ended) still holds the result.json of its earlier training: gathering it
    leaves the folder out, with a note, and keeps the gathered run as it was
    (it once replaced the table's row with the stale result)."""
    data, runs, out, page, readme, first = gathered_study(tmp_path)
    kept = (out / 'results.json').read_text()
    log = runs / 'baseline-seed1' / 'model.npz.log.jsonl'
    with log.open('a') as f:
        f.write(json.dumps({'event': 'start', 'uidx': 0, 'epoch': 0, 'time': 9.}) + '\n')
    proc = gather_results(runs, data, out, '--bootstrap', '200', '--page', page)
    assert 'baseline-seed1 is training again' in proc.stderr
    assert (out / 'results.json').read_text() == kept
    assert not (out / 'logs' / 'baseline-seed1.earlier1.log.jsonl').exists()


def test_a_seed_trained_again_keeps_its_earlier_training(tmp_path):
    """A run folder trained again (another commit) replaces the run in the
    table; the earlier training stays in results.json and on the page as
    NAME.earlier1 with its own log and translations, whether its folder is
    there or not; a third training is earlier2."""
    data, runs, out, page, readme, first = gathered_study(tmp_path)
    old_log = (out / 'logs' / 'baseline-seed1.log.jsonl').read_text()

    def train_again(commit, bleu):
        shutil.rmtree(runs / 'baseline-seed1', ignore_errors=True)
        fake_run(runs, data, 'baseline', 1, REFS, bleu)
        result = json.loads((runs / 'baseline-seed1' / 'result.json').read_text())
        result.update(commit=commit, train_wall_seconds=60. * bleu)
        (runs / 'baseline-seed1' / 'result.json').write_text(json.dumps(result))

    train_again('c0ffee1', 40.)
    gather_results(runs, data, out, '--bootstrap', '200', '--page', page)
    results = json.loads((out / 'results.json').read_text())
    [earlier] = results['earlier']
    assert (earlier['name'], earlier['run'], earlier['best_valid_bleu']) == (
        'baseline-seed1.earlier1', 'baseline-seed1', 31.)
    assert results['runs'][0]['best_valid_bleu'] == 40. and results['runs'][0]['commit'] == 'c0ffee1'
    assert (out / earlier['log']).read_text() == old_log
    assert (out / 'translations' / 'baseline-seed1.earlier1' / 'test_2016_flickr.hyp.tok'
            ).read_text() == '\n'.join(WORSE) + '\n'
    assert (out / 'translations' / 'baseline-seed1' / 'test_2016_flickr.hyp.tok'
            ).read_text() == '\n'.join(REFS) + '\n'
    text = page.read_text()
    assert '**Seeds trained twice.**' in text
    assert '| baseline seed 1 | earlier | – | 2000 |' in text
    assert '| baseline seed 1 | the table\'s | c0ffee1 | 2000 |' in text
    # gathered again, with and without the run's folder: the same
    gather_results(runs, data, out, '--bootstrap', '200', '--page', page)
    assert json.loads((out / 'results.json').read_text()) == results
    shutil.rmtree(runs / 'baseline-seed1')
    gather_results(runs, data, out, '--bootstrap', '200', '--page', page)
    assert json.loads((out / 'results.json').read_text()) == results
    train_again('c0ffee2', 41.)
    gather_results(runs, data, out, '--bootstrap', '200', '--page', page)
    results = json.loads((out / 'results.json').read_text())
    assert [(e['name'], e['best_valid_bleu']) for e in results['earlier']] == [
        ('baseline-seed1.earlier1', 31.), ('baseline-seed1.earlier2', 40.)]
    assert [r['name'] for r in results['runs']].count('baseline-seed1') == 1


def test_faulty_inputs_of_the_gathering_write_nothing(tmp_path):
    """A kept translation with lines missing, an empty training log, a page
    without its markers: one error line naming the file, exit 1, and
    results.json, the page and the README as they were."""
    data, runs, out, page, readme, results = gathered_study(tmp_path)
    before = {p: p.read_bytes() for p in (out / 'results.json', page, readme)}
    hyp = runs / 'attentive-seed2' / 'test_2017_flickr.hyp.tok'
    hyp.write_text('\n'.join(REFS[:2]) + '\n')
    command = [sys.executable, os.path.join(ROOT, 'evaluation', 'multi30k_results.py'),
               str(runs), '--data', str(data), '--out', str(out), '--page', str(page),
               '--readme', str(readme)]
    proc = subprocess.run(command, capture_output=True, text=True)
    error_line(proc, '%s: 2 lines, but' % hyp)
    hyp.write_text('\n'.join(REFS) + '\n')
    (runs / 'baseline-seed1' / 'model.npz.log.jsonl').write_text('')
    proc = subprocess.run(command, capture_output=True, text=True)
    error_line(proc, 'baseline-seed1/model.npz.log.jsonl: a training log without its start')
    fake_run(runs, data, 'baseline', 3, WORSE, 30.)
    shutil.rmtree(runs / 'baseline-seed1')
    page.write_text('no markers\n')
    proc = subprocess.run(command, capture_output=True, text=True)
    error_line(proc, 'page.md: needs the lines <!-- results: begin -->')
    for path, data_ in before.items():
        if path != page:
            assert path.read_bytes() == data_, path


def test_logs_keep_no_absolute_path_of_the_machine():
    from evaluation.multi30k_results import relative_paths
    text = ('{"message": "asked to stop (/scratch/me/runs/multi30k/a-seed3/model.npz.stop)", '
            '"data": "/home/me/x/data/multi30k/val.tok.de", "path": "runs/multi30k/a"}')
    assert relative_paths(text) == (
        '{"message": "asked to stop (runs/multi30k/a-seed3/model.npz.stop)", '
        '"data": "data/multi30k/val.tok.de", "path": "runs/multi30k/a"}')


def test_results_gathered_at_a_budget(tmp_path):
    """--at 1000: each run's at-1000/ result and translations, its training
    log (from the run's folder) and validation curves up to update 1000."""
    data, runs, out = tmp_path / 'data', tmp_path / 'runs', tmp_path / 'out'
    refs = ['ein mann fährt rad', 'zwei hunde spielen im schnee']
    write_test_sets(data, refs, ['a man rides a bike', 'two dogs play'])
    for decoder, bleu in (('baseline', 30.), ('mean', 32.)):
        fake_run(runs, data, decoder, 1, refs, bleu)
        folder = runs / ('%s-seed1' % decoder)
        (folder / 'at-1000').mkdir()
        result = json.loads((folder / 'result.json').read_text())
        result.update(budget=1000, updates=1000, best_valid_bleu=bleu - 10)
        (folder / 'at-1000' / 'result.json').write_text(json.dumps(result))
        for test_set in TEST_SETS:
            shutil.copy(folder / (test_set + '.hyp.tok'), folder / 'at-1000')
    fake_run(runs, data, 'attentive', 1, refs, 33.)  # ended at 2000, not scored at 1000
    # a run that ended by update 1000 is its own result at 1000
    fake_run(runs, data, 'memory', 1, refs, 31.)
    result = json.loads((runs / 'memory-seed1' / 'result.json').read_text())
    (runs / 'memory-seed1' / 'result.json').write_text(json.dumps(dict(result, updates=900)))
    proc = gather_results(runs, data, out, '--bootstrap', '0', '--at', '1000')
    assert 'attentive-seed1/at-1000 has no result.json' in proc.stderr
    results = json.loads((out / 'results.json').read_text())['runs']
    assert [(r['decoder'], r['updates'], r['best_valid_bleu']) for r in results] == [
        ('baseline', 1000, 20.), ('mean', 1000, 22.), ('memory', 900, 31.)]
    # one seed a decoder: its figures without a spread (not '± 0.00')
    rows = table_rows((out / 'results.md').read_text())
    assert rows['mean residual'][3] == '22.00' and '±' not in ' '.join(rows['mean residual'])
    assert (out / 'logs' / 'mean-seed1.log.jsonl').exists()
    assert (out / 'validation.png').stat().st_size > 0


def test_training_parts_of_a_resumed_run():
    """A run resumed with --reload: one part per training process, each from
    its start event to its last event."""
    from pipeline.train_multi30k import training_parts
    events = [{'event': 'start', 'uidx': 0, 'time': 100.0},
              {'event': 'update', 'uidx': 50, 'time': 160.0},
              {'event': 'stop', 'uidx': 70, 'time': 190.5},
              {'event': 'start', 'uidx': 70, 'time': 1000.0},
              {'event': 'update', 'uidx': 100, 'time': 1040.0},
              {'event': 'end', 'uidx': 120, 'time': 1075.0}]
    assert training_parts(events) == [
        {'from_update': 0, 'to_update': 70, 'seconds': 90.5},
        {'from_update': 70, 'to_update': 120, 'seconds': 75.0}]


def test_the_command_of_a_run_as_workers_keeps_its_launcher():
    import importlib
    results = importlib.import_module('evaluation.multi30k_results')
    command = ('/usr/bin/mpirun -np 2 /opt/x/.venv/bin/python /opt/x/nmt.py --model '
               '/scratch/runs/baseline-seed1/model.npz --datasets /d/m30k/train.bpe.en --reload')
    assert results.portable_command(command, '/d/m30k', '/scratch/runs') == (
        'mpirun -np 2 .venv/bin/python nmt.py --model runs/multi30k/baseline-seed1/model.npz '
        '--datasets data/multi30k/train.bpe.en --reload')


STUDY = os.path.join(ROOT, 'pipeline', 'multi30k_study.py')


def study(*args, cwd):
    return subprocess.run([sys.executable, STUDY] + [str(a) for a in args], cwd=cwd,
                          capture_output=True, text=True, timeout=1800,
                          env=dict(QUICK_ENV, PYTHON=sys.executable, OMP_NUM_THREADS='1',
                                   OPENBLAS_NUM_THREADS='1'))


def wait_for_update(log, process, seconds=600):
    import time
    deadline = time.time() + seconds
    while time.time() < deadline and process.poll() is None:
        if os.path.exists(log) and '"event": "update"' in open(log).read():
            return
        time.sleep(0.2)
    raise AssertionError('no update in %s' % log)


@pytest.mark.slow
def test_the_study_in_one_command(prepared, tmp_path):
    """pipeline/multi30k_study.py: the plan of a dry run; a run interrupted by
    SIGTERM is resumed, not restarted; every run scored, each decoder's seeds
    as an ensemble, the results page and README made; run again, nothing is
    trained and the page is the same."""
    import signal
    runs, out = tmp_path / 'runs', tmp_path / 'out'
    page, readme = tmp_path / 'page.md', tmp_path / 'README.md'
    page.write_text(PAGE)
    readme.write_text(README)
    common = ['--tiny', '--workers', 1, '--decoders', 'baseline,attentive', '--seeds', '1-2',
              '--runs', runs, '--out', out, '--page', page, '--readme', readme, '--no-marian']
    proc = study(prepared, '--dry-run', '--no-estimate', *common, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    planned = [line.split()[:3] for line in proc.stdout.splitlines() if not line.startswith(
        (' ', 'then'))]
    assert planned == [['baseline', 'seed', '1'], ['attentive', 'seed', '1'],
                       ['baseline', 'seed', '2'], ['attentive', 'seed', '2'],
                       ['baseline', 'ensemble', 'of'], ['attentive', 'ensemble', 'of']]
    assert proc.stdout.count('to do') == 6 and 'multi30k_results.py' in proc.stdout
    # baseline seed 1 killed during its training
    folder = runs / 'baseline-seed1'
    first = subprocess.Popen(['bash', SCRIPT, '--tiny', 'baseline', '1', str(prepared),
                              str(folder), '--', '--finish_after', '100000', '--dispFreq', '1'],
                             cwd=tmp_path, env=dict(QUICK_ENV, PYTHON=sys.executable),
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             start_new_session=True)
    wait_for_update(str(folder / 'model.npz.log.jsonl'), first)
    os.killpg(first.pid, signal.SIGTERM)
    first.wait(timeout=120)
    proc = study(prepared, '--dry-run', '--no-estimate', *common, cwd=tmp_path)
    assert 'baseline seed 1' in proc.stdout and ' resume ' in proc.stdout
    proc = study(prepared, *common, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    events = log_events(str(folder / 'model.npz.log.jsonl'))
    assert [e['event'] for e in events].count('start') == 2      # resumed, not restarted
    results = json.loads((out / 'results.json').read_text())
    assert [(r['decoder'], r['seed']) for r in results['runs']] == [
        ('baseline', 1), ('baseline', 2), ('attentive', 1), ('attentive', 2)]
    assert [(e['decoder'], e['seeds']) for e in results['ensembles']] == [
        ('baseline', [1, 2]), ('attentive', [1, 2])]
    for name in ('attentive-seed2', 'attentive-ensemble'):
        assert (out / 'translations' / name / 'test_2016_flickr.hyp.tok').exists()
    assert '| baseline (2 seeds) |' in readme.read_text()
    text = page.read_text()
    # again: everything is done; nothing trained, the same page
    proc = study(prepared, *common, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert 'study:' not in proc.stderr and page.read_text() == text


def test_the_study_refuses_a_step_another_process_trains(tmp_path):
    """A run folder whose model lock another process holds (a second study,
    or the step started by hand) shows as 'running' in the plan, and the
    study stops in one line before it starts anything; the lock let go,
    the plan says 'resume'."""
    from machinery.run_lock import ModelLock
    runs = tmp_path / 'runs'
    (runs / 'attentive-seed1').mkdir(parents=True)
    (runs / 'attentive-seed1' / 'model.npz.log.jsonl').write_text(json.dumps(
        {'event': 'start', 'uidx': 0, 'epoch': 0, 'time': 0.}) + '\n')
    lock = ModelLock(str(runs / 'attentive-seed1' / 'model.npz'))
    common = ['--decoders', 'baseline,attentive', '--seeds', '1', '--runs', runs,
              '--out', tmp_path / 'out', '--page', '', '--no-ensembles', '--no-marian']
    proc = study(tmp_path / 'data', '--dry-run', '--no-estimate', *common, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith('baseline seed 1') and ' to do ' in lines[0]
    at = next(i for i, line in enumerate(lines) if line.startswith('attentive seed 1'))
    assert lines[at].split()[3] == 'running'
    assert lines[at + 1].strip() == 'trained now by process %d' % os.getpid()
    proc = study(tmp_path / 'data', *common, cwd=tmp_path)
    error_line(proc, 'attentive-seed1: trained now by process %d' % os.getpid(),
               'kill -TERM')
    assert not (runs / 'baseline-seed1').exists()       # nothing started
    lock.release()
    proc = study(tmp_path / 'data', '--dry-run', '--no-estimate', *common, cwd=tmp_path)
    assert re.search(r'^attentive seed 1 +resume ', proc.stdout, re.M)


def test_the_study_on_a_fresh_clone_keeps_what_is_gathered(tmp_path):
    """Without the runs' folders (a fresh clone), a run or an ensemble whose
    result is gathered in --out says so in the plan with the option that
    keeps it; --no-runs plans no run, and an ensemble without its seeds'
    models stops the study in one line before it starts anything."""
    runs, out = tmp_path / 'runs', tmp_path / 'out'
    out.mkdir()
    (out / 'results.json').write_text(json.dumps({
        'runs': [{'name': 'baseline-seed1', 'decoder': 'baseline', 'seed': 1}],
        'ensembles': [{'name': 'baseline-ensemble', 'decoder': 'baseline', 'seeds': [1]}]}))
    common = ['--decoders', 'baseline,attentive', '--seeds', '1', '--runs', runs,
              '--out', out, '--page', '', '--no-marian']
    proc = study(tmp_path / 'data', '--dry-run', '--no-estimate', *common, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    notes = [lines[i - 2].split()[:2] + [line.split('(')[-1]] for i, line in enumerate(lines)
             if 'gathered in' in line]
    assert notes == [['baseline', 'seed', '--no-runs keeps it)'],
                     ['baseline', 'ensemble', '--no-ensembles keeps it)']]
    proc = study(tmp_path / 'data', '--dry-run', '--no-estimate', '--no-runs', *common,
                 cwd=tmp_path)
    assert ' seed 1 ' not in proc.stdout and proc.stdout.count('needs its seeds') == 2
    proc = study(tmp_path / 'data', '--no-runs', *common, cwd=tmp_path)
    error_line(proc, 'baseline-seed1/model.best_bleu.npz: no such model', '--no-ensembles')
    assert not runs.exists()                    # nothing started


def between(path, markers):
    text = open(path, encoding='utf-8').read()
    return text.split(markers[0] + '\n')[1].split(markers[1])[0].rstrip('\n').split('\n')


def test_the_committed_tables_are_those_of_the_committed_results():
    """The README's short table and the results page's tables are what
    docs/multi30k/results.json gives (a gathering rewrites all three)."""
    from evaluation import multi30k_results, study_tables
    with open(os.path.join(ROOT, 'docs', 'multi30k', 'results.json'), encoding='utf-8') as f:
        figures = json.load(f)
    assert between(os.path.join(ROOT, 'README.md'), multi30k_results.README_MARKERS) == \
        study_tables.readme_block(figures)
    assert between(os.path.join(ROOT, 'docs', 'multi30k.md'), multi30k_results.PAGE_MARKERS) \
        == study_tables.page_block(figures)
    for run in figures['runs']:
        assert os.path.exists(os.path.join(ROOT, 'docs', 'multi30k', run['log']))


def test_startup_times_runs_to_their_first_update(prepared, tmp_path):
    """speed/startup.py: a short run of train_multi30k.sh's command, timed
    from the command to the log's events."""
    done = subprocess.run([sys.executable, os.path.join(ROOT, 'speed', 'startup.py'),
                           str(prepared), '--tiny', '--runs', '1'], cwd=tmp_path,
                          capture_output=True, text=True, timeout=900, env=QUICK_ENV)
    assert done.returncode == 0, done.stdout + done.stderr
    r = json.loads(done.stdout.strip().splitlines()[-1])
    assert r['mode'] == 'startup' and r['workers'] == 1 and r['tiny'] is True
    assert [row['run'] for row in r['runs']] == [1]
    for row in r['runs']:
        assert row['updates'] == 3
        assert 0 < row['start_event_sec'] <= row['first_update_sec'] <= row['end_sec']
    assert not list(tmp_path.glob('nmt_startup_*'))   # the runs' folders are gone
    missing = subprocess.run([sys.executable, os.path.join(ROOT, 'speed', 'startup.py'),
                              str(tmp_path / 'nothing')], capture_output=True, text=True)
    error_line(missing, 'train.bpe.en: no such file', 'pipeline/multi30k.py prepare first')


def test_the_estimate_scales_marian_by_an_anchor_trained_here(tmp_path):
    """Before an anchor has trained here a Marian run is MARIAN_RUN_FACTOR of
    ours; after, ours over its target words/s at their fastest (the timing
    run's before a run of ours has finished here); an anchor resumed at
    update 11,000 has half its budget left."""
    from pipeline import multi30k_study as study
    from pipeline import train_multi30k as m30k
    from theano_platform.machine import cpu_model
    runs = tmp_path / 'runs'
    run = runs / 'baseline-seed1'
    run.mkdir(parents=True)
    (run / 'result.json').write_text('{}')
    events = [{'event': 'start', 'uidx': 0, 'epoch': 0, 'time': 0.,
               'machine': {'cpu': cpu_model()}}] + [
        {'event': 'update', 'uidx': 100 * (i + 1), 'epoch': 0, 'time': 0.,
         'recent_words_per_second': w} for i, w in enumerate([1000.] * 5 + [4000.] * 5)]
    (run / 'model.npz.log.jsonl').write_text(''.join(json.dumps(e) + '\n' for e in events))
    args = study.parse_args(['data', '--runs', str(runs)])
    assert study.marian_factor(args, study.marian_steps(args))[0] == study.MARIAN_RUN_FACTOR
    anchor = runs / 'marian-dropout0.2-seed1'
    anchor.mkdir()
    (anchor / 'train.log').write_text(''.join(
        '[2026-12-07 10:00:00] Ep. 1 : Up. %d : Sen. 3,200 : Cost 5.1 : Time 30.00s : '
        '%.2f words/s : gNorm 0.4\n' % (100 * (i + 1), 1000.) for i in range(5)))
    # before a run of ours has finished here: the timing run's words/s
    (run / 'result.json').unlink()
    factor, how = study.marian_factor(args, study.marian_steps(args), timed_words=2500.)
    assert factor == 2.5 and how.endswith('our 2500 (the timing run)')
    (run / 'result.json').write_text('{}')
    factor, how = study.marian_factor(args, study.marian_steps(args), timed_words=2500.)
    assert factor == 4. and how.startswith('4.0 times one of ours: 1000 target words/s')
    (anchor / 'model.npz.progress.yml').write_text('epochs: 9\nbatches: 11000\n')
    [step] = [s for s in study.marian_steps(args) if s.folder == str(anchor)]
    assert step.state == 'resume' and study.left_of(step) == .5


def test_the_estimate_takes_a_run_at_its_fastest():
    """The study's estimate: a run's speed on this machine is the 90th
    percentile of its logged rates, so that hours shared with other work
    (the low rates) do not count."""
    from pipeline import multi30k_study as study
    from pipeline import train_multi30k as m30k
    events = ([{'event': 'start'}, {'event': 'update', 'updates_per_second': 1.0}] +
              [{'event': 'update', 'updates_per_second': 0.9,
                'recent_updates_per_second': r} for r in [0.5] * 5 + [4.0] * 4 + [4.4]])
    rates = study.update_rates(events)
    assert rates == [1.0] + [0.5] * 5 + [4.0] * 4 + [4.4]
    assert m30k.fast_rate(rates) == 4.0
    assert m30k.fast_rate([3.0]) == 3.0
