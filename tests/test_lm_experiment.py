"""lm_experiment.py: the agreement sites it scores, and a tiny run end to end."""
import json
import os
import subprocess
import sys

from helpers import ROOT, error_line, run_command


def test_agreement_sites_are_the_main_verbs():
    from language_model import lm_experiment
    sentences = ['la burek ki un miso viden yeda .',          # participle: not a site
                 'un rybel opet la khleb pomogi da la rani noso .']
    sites = lm_experiment.agreement_sites(sentences)
    assert sites == [(0, 6, ['yeda', 'yedo', 'yedi'], 0),
                     (1, 5, ['pomoga', 'pomogo', 'pomogi'], 2),
                     (1, 9, ['nosa', 'noso', 'nosi'], 1)]


def test_tiny_experiment_end_to_end(tmp_path):
    out, png = tmp_path / 'exp', tmp_path / 'docs' / 'lm.png'
    proc = subprocess.run(
        [sys.executable, os.path.join(ROOT, 'language_model', 'lm_experiment.py'), '--out', str(out),
         '--plot', str(png), '--train', '200', '--dev', '20', '--test', '30',
         '--updates', '6', '--valid-freq', '3', '--dim_word', '6', '--dim', '8',
         '--batch_size', '8', '--seeds', '1', '2', '--variants', 'baseline', 'attentive'],
        cwd=ROOT, capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads((out / 'results.json').read_text())['results']
    assert [(r['variant'], r['seed']) for r in results] == [
        ('baseline', 1), ('baseline', 2), ('attentive', 1), ('attentive', 2)]
    for r in results:
        assert 1 < r['test_perplexity'] < 200 and 0 <= r['agreement_accuracy'] <= 1
        assert len(r['valid_perplexity_history']) == 2 and r['agreement_sites'] > 30
    assert results[2]['parameters'] > results[0]['parameters']
    # the table on stdout and in results.md, one row per variant
    rows = [line for line in proc.stdout.split('\n') if line.startswith('| LSTM')]
    assert len(rows) == 2 and rows == (out / 'results.md').read_text().split('\n')[2:4]
    assert png.read_bytes()[:4] == b'\x89PNG'


def test_unwritable_output_is_one_error_line(tmp_path):
    blocker = tmp_path / 'file'
    blocker.write_text('not a folder')
    proc = run_command('language_model/lm_experiment.py', ['--out', blocker / 'out'], cwd=ROOT,
                       timeout=600)
    error_line(proc, alone=True)
