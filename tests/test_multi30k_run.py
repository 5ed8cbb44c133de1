"""The Multi30k path end to end on a tiny made-up mirror: get, prepare,
train_multi30k.sh --tiny for each decoder (a few updates, validation BLEU
with the batched search, the best-BLEU model kept), translation of the three
test sets and their scores in result.json."""
import json
import os
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
    events = [{'event': 'validation', 'uidx': u, 'epoch': 0, 'time': 0., 'cost': c}
              for u, c in ((1000, 50.), (2000, 40.))]
    events += [{'event': 'bleu', 'uidx': 1000, 'epoch': 0, 'time': 0., 'bleu': valid_bleu}]
    (folder / 'model.npz.log.jsonl').write_text(''.join(json.dumps(e) + '\n' for e in events))


def gather_results(runs, data, out, *options):
    """evaluation/multi30k_results.py on the runs; its finished process."""
    proc = subprocess.run([sys.executable, os.path.join(ROOT, 'evaluation', 'multi30k_results.py'),
                           str(runs), '--data', str(data), '--out', str(out)] + list(options),
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return proc


def test_results_gathered(tmp_path):
    data, runs, out = tmp_path / 'data', tmp_path / 'runs', tmp_path / 'out'
    data.mkdir()
    refs = ['ein mann fährt rad', 'zwei hunde spielen im schnee', 'eine frau kocht',
            'ein kind schläft']
    sources = ['a man rides a bike', 'two dogs play in the snow', 'a woman cooks',
               'a child sleeps']
    for test_set in ('test_2016_flickr', 'test_2017_flickr', 'test_2017_mscoco'):
        (data / (test_set + '.tok.de')).write_text('\n'.join(refs) + '\n')
        (data / (test_set + '.tok.en')).write_text('\n'.join(sources) + '\n')
    worse = ['ein mann rad', 'zwei hunde im schnee', 'eine frau', 'ein kind']
    for seed in (1, 2):
        fake_run(runs, data, 'baseline', seed, worse, 30. + seed)
        fake_run(runs, data, 'attentive', seed, refs, 34. + seed)
    (runs / 'mean-seed1').mkdir()        # still training: no result.json
    proc = gather_results(runs, data, out, '--bootstrap', '200')
    assert 'mean-seed1 has no result.json' in proc.stderr
    results = json.loads((out / 'results.json').read_text())
    assert [(r['decoder'], r['seed']) for r in results] == [
        ('baseline', 1), ('baseline', 2), ('attentive', 1), ('attentive', 2)]
    assert results[3]['command'] == (
        '.venv/bin/python nmt.py --model runs/multi30k/attentive-seed2/model.npz '
        '--datasets data/multi30k/train.bpe.en data/multi30k/train.bpe.de')
    assert (out / 'logs' / 'attentive-seed2.log.jsonl').exists()
    assert (out / 'validation.png').stat().st_size > 0
    rows = {line.split(' | ')[0].lstrip('| '): line for line in
            (out / 'results.md').read_text().splitlines()[2:]}
    assert '31.50 ± 0.71' in rows['baseline'] and '35.50 ± 0.71' in rows['attentive']
    bootstrap, welch = rows['attentive'].rstrip(' |').split(' | ')[-2:]
    assert bootstrap.endswith(' (seeds 1, 2)')
    p_values = bootstrap[:-len(' (seeds 1, 2)')].split(', ') + welch.split(', ')
    # Welch over the seeds: BLEU 31, 32 against 35, 36 (t 5.66, 2 degrees of freedom)
    assert welch.split(', ') == ['0.030'] * 3
    assert len(p_values) == 6 and all(0. <= float(p) < 0.05 for p in p_values)
    # test2016 by source length: all 4 sentences have 1-10 words; BLEU over
    # seeds 1 and 2 pooled
    cells = rows['1-10'].rstrip(' |').split(' | ')
    assert cells[1] == '4' and float(cells[2]) < 100. and cells[3] == '100.00'
    assert (out / 'by_length.png').stat().st_size > 0

    # on a machine without two of the runs' folders they are read from out
    table = (out / 'results.md').read_text()
    shutil.rmtree(runs / 'baseline-seed2')
    shutil.rmtree(runs / 'attentive-seed1')
    proc = gather_results(runs, data, out, '--bootstrap', '200')
    assert json.loads((out / 'results.json').read_text()) == results
    assert (out / 'results.md').read_text() == table
    assert (out / 'translations' / 'baseline-seed2' / 'test_2017_mscoco.hyp.tok').read_text() \
        == '\n'.join(worse) + '\n'


def test_results_gathered_at_a_budget(tmp_path):
    """--at 1000: each run's at-1000/ result and translations, its training
    log (from the run's folder) and validation curves up to update 1000."""
    data, runs, out = tmp_path / 'data', tmp_path / 'runs', tmp_path / 'out'
    data.mkdir()
    refs = ['ein mann fährt rad', 'zwei hunde spielen im schnee']
    for test_set in ('test_2016_flickr', 'test_2017_flickr', 'test_2017_mscoco'):
        (data / (test_set + '.tok.de')).write_text('\n'.join(refs) + '\n')
        (data / (test_set + '.tok.en')).write_text('a man rides a bike\ntwo dogs play\n')
    for decoder, bleu in (('baseline', 30.), ('mean', 32.)):
        fake_run(runs, data, decoder, 1, refs, bleu)
        folder = runs / ('%s-seed1' % decoder)
        (folder / 'at-1000').mkdir()
        result = json.loads((folder / 'result.json').read_text())
        result.update(budget=1000, updates=1000, best_valid_bleu=bleu - 10)
        (folder / 'at-1000' / 'result.json').write_text(json.dumps(result))
        for test_set in ('test_2016_flickr', 'test_2017_flickr', 'test_2017_mscoco'):
            shutil.copy(folder / (test_set + '.hyp.tok'), folder / 'at-1000')
    fake_run(runs, data, 'attentive', 1, refs, 33.)  # ended at 2000, not scored at 1000
    # a run that ended by update 1000 is its own result at 1000
    fake_run(runs, data, 'memory', 1, refs, 31.)
    result = json.loads((runs / 'memory-seed1' / 'result.json').read_text())
    (runs / 'memory-seed1' / 'result.json').write_text(json.dumps(dict(result, updates=900)))
    proc = gather_results(runs, data, out, '--bootstrap', '0', '--at', '1000')
    assert 'attentive-seed1/at-1000 has no result.json' in proc.stderr
    results = json.loads((out / 'results.json').read_text())
    assert [(r['decoder'], r['updates'], r['best_valid_bleu']) for r in results] == [
        ('baseline', 1000, 20.), ('mean', 1000, 22.), ('memory', 900, 31.)]
    # one seed a decoder: its figures without a spread (not '± 0.00')
    rows = {line.split(' | ')[0].lstrip('| '): line for line in
            (out / 'results.md').read_text().splitlines()[2:]}
    assert ' | 22.00 | ' in rows['mean'] and '±' not in rows['mean']
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


def test_the_pooled_seeds_are_named_in_the_singular_or_plural():
    from evaluation import multi30k_results
    assert multi30k_results.p_cell([0.0151, None], [3]) == '0.015, – (seed 3)'
    assert multi30k_results.p_cell([0.2], [1, 2]) == '0.200 (seeds 1, 2)'
    assert multi30k_results.p_cell([0.2]) == '0.200'
