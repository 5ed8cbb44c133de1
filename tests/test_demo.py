"""demo.py: argument checks (quick) and a short end-to-end run (slow)."""
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEMO = os.path.join(ROOT, 'demo.py')


def run_demo(*args, timeout=None):
    return subprocess.run([sys.executable, DEMO] + list(args), cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


def test_bad_arguments():
    proc = run_demo('--minutes', '0')
    assert proc.returncode == 2 and '--minutes must be positive' in proc.stderr
    proc = run_demo('--models', 'transformer')
    assert proc.returncode == 2 and '--models' in proc.stderr


def test_unwritable_output_is_one_error_line(tmp_path):
    blocker = tmp_path / 'file'
    blocker.write_text('not a folder')
    proc = run_demo('--out', str(blocker / 'out'))
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith('error: '), proc.stderr


@pytest.mark.slow
def test_short_demo_end_to_end(tmp_path):
    """Both models for 12 s each (compilation cached: about 3 minutes on 2 cores)."""
    out = tmp_path / 'demo'
    proc = run_demo('--minutes', '0.2', '--out', str(out), timeout=1800)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert '[baseline] ' in proc.stdout and '[attentive] ' in proc.stdout
    assert 'upd/s' in proc.stdout
    results = json.loads((out / 'results.json').read_text())
    assert [m['name'] for m in results['models']] == ['baseline', 'attentive']
    assert results['bleu_tokenize'] == 'none'
    for m in results['models']:
        assert isinstance(m['bleu'], float) and 0.0 <= m['bleu'] <= 100.0
        agr = m['agreement']
        assert agr['sites'] == results['reference_agreement']['sites'] > 0
        assert 0 <= agr['correct'] + agr['missing'] <= agr['sites']
        assert m['params'] > 0 and m['updates'] > 0
        hyps = (out / ('%s.test.trg' % m['name'])).read_text().splitlines()
        assert len(hyps) == 300
    assert results['reference_agreement']['accuracy'] == 1.0
    # the residual decoder has the extra attention over previous words
    assert results['models'][1]['params'] > results['models'][0]['params']
    png = (out / 'results.png').read_bytes()
    assert png[:8] == b'\x89PNG\r\n\x1a\n'
    assert 'error:' not in proc.stderr
