"""The Multi30k path end to end on a tiny made-up mirror: get, prepare,
train_multi30k.sh --tiny for each decoder (a few updates, validation BLEU
with the batched search, the best-BLEU model kept), translation of the three
test sets and their scores in result.json."""
import json
import os
import subprocess
import sys

import pytest

from pipeline import multi30k
from test_multi30k_data import mirror  # noqa: F401  (the tiny mirror fixture)
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


@pytest.mark.parametrize('decoder', ['baseline', 'mean', 'attentive'])
def test_tiny_run_of_each_decoder(prepared, tmp_path, decoder):
    models = tmp_path / 'runs'
    proc = train('--tiny', '--threads', 1, decoder, 3, prepared, models, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads((models / 'result.json').read_text())
    assert result['decoder'] == decoder and result['seed'] == 3
    assert result['updates'] == 8 and result['selected_model'] == 'model.best_bleu.npz'
    assert '--seed 3' in result['command'] and '--use_dropout' in result['command']
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
