"""demo.py: argument checks, the stopping rule and the distance bins on
hand-made inputs (quick), and one short end-to-end run (slow)."""
import json
import os
import types

import pytest

from helpers import ROOT, error_line, run_command
DEMO = os.path.join(ROOT, 'demo', 'demo.py')

from demo import demo  # noqa: E402
from demo import report  # noqa: E402
from demo import toy_language  # noqa: E402
from demo.convergence import ConvergenceRule  # noqa: E402
from machinery.stop_requests import stop_path  # noqa: E402
from machinery.training_log import log_path  # noqa: E402

# hand-made toy sentences: subject-verb distance 3 (voyin .. zvalo, class o)
# and 5 (uchit .. risova, class a)
SRC = ['a soldier called the letter .',
       'the teacher small painted the ship old often .']
REF = ['un voyin la pismo zvalo .',
       'la mali uchit chasto la stari korab risova .']


def run_demo(*args, timeout=None):
    return run_command('demo/demo.py', args, cwd=ROOT, timeout=timeout)


def test_bad_arguments():
    proc = run_demo('--threads', '0')
    assert proc.returncode == 2 and 'argument --threads: must be at least 1' in proc.stderr
    proc = run_demo('--models', 'transformer')
    assert proc.returncode == 2 and '--models' in proc.stderr
    proc = run_demo('--seeds', '1,1')
    assert proc.returncode == 2 and '--seeds' in proc.stderr
    proc = run_demo('--test', '10', '--figure-sentence', '10')
    assert proc.returncode == 2 and '--figure-sentence' in proc.stderr


def test_unwritable_output_is_one_error_line(tmp_path):
    blocker = tmp_path / 'file'
    blocker.write_text('not a folder')
    proc = run_demo('--out', str(blocker / 'out'))
    error_line(proc, alone=True)


# ---------------------------------------------------------------- stopping rule
def test_rule_converges_at_the_target():
    rule = ConvergenceRule(target=0.05, window=3, min_gain=0.02)
    assert rule.add(2.0) is None and rule.add(0.5) is None
    reason = rule.add(0.04)
    assert reason is not None and '0.0400' in reason
    assert rule.best() == 0.04


def test_rule_plateau_needs_a_full_window():
    rule = ConvergenceRule(target=0.01, window=3, min_gain=0.02)
    # still learning: each window improves the best cost by > 2 %
    for cost in (1.0, 0.9, 0.8, 0.7, 0.6):
        assert rule.add(cost) is None
    # three validations without a 2 % gain on 0.6: a plateau
    assert rule.add(0.599) is None and rule.add(0.65) is None
    reason = rule.add(0.61)
    assert reason is not None and reason.startswith('plateau')


def test_rule_rejects_bad_input():
    with pytest.raises(ValueError):
        ConvergenceRule(target=0)
    with pytest.raises(ValueError):
        ConvergenceRule(window=0)
    with pytest.raises(ValueError):
        ConvergenceRule().add(float('nan'))


class FakeProc(object):
    """A finished training process: what Training needs of a Popen."""
    def poll(self):
        return 0


def fake_training(tmp_path, events):
    """demo.Training over a training log holding ``events`` (a model file
    beside it, as nmt.py leaves)."""
    model = str(tmp_path / 'm.npz')
    open(model, 'wb').close()
    with open(log_path(model), 'w') as f:
        f.writelines(json.dumps(dict(e, epoch=0)) + '\n' for e in events)
    args = types.SimpleNamespace(target_cost=0.1, plateau_window=3, plateau_gain=0.02,
                                 max_updates=300)
    run = {'name': 'm', 'model': model, 'output': str(tmp_path / 'm.out')}
    training = demo.Training(args, run, {'dev_tokens_per_sentence': 10.0}, FakeProc())
    return training, training.result(training.follow(poll_seconds=0))


def test_training_converged_asks_the_run_to_stop(tmp_path):
    t, info = fake_training(tmp_path, [
        {'event': 'start', 'uidx': 0, 'time': 10.0},
        {'event': 'update', 'uidx': 100, 'time': 20.0, 'cost': 9.0,
         'updates_per_second': 10.0},
        {'event': 'validation', 'uidx': 100, 'time': 21.0, 'cost': 5.0},  # 0.5 nats/token
        {'event': 'validation', 'uidx': 200, 'time': 31.0, 'cost': 0.5},  # 0.05 <= 0.1
        {'event': 'validation', 'uidx': 300, 'time': 41.0, 'cost': 0.4},  # after: ignored
        {'event': 'stop', 'uidx': 201, 'time': 42.0, 'reason': 'stop_file'}])
    assert info['status'] == 'converged' and info['updates'] == 200
    assert info['valid_history'] == [(100, 0.5), (200, 0.05)]
    assert info['train_seconds'] == 32.0 and info['updates_per_second'] == 10.0
    assert os.path.exists(stop_path(t.run['model']))    # the request to stop


def test_training_out_of_budget(tmp_path):
    t, info = fake_training(tmp_path, [
        {'event': 'start', 'uidx': 0, 'time': 10.0},
        {'event': 'validation', 'uidx': 100, 'time': 21.0, 'cost': 5.0},
        {'event': 'update', 'uidx': 300, 'time': 30.0, 'cost': 9.0,
         'updates_per_second': 10.0},
        {'event': 'stop', 'uidx': 300, 'time': 31.0, 'reason': 'finish_after'}])
    assert info['status'] == 'out of budget' and info['updates'] == 300
    assert not os.path.exists(stop_path(t.run['model']))


def test_training_failure_is_the_runs_error_line(tmp_path):
    model = str(tmp_path / 'm.npz')
    (tmp_path / 'm.out').write_text('Loading data\nerror: train.src: file is empty\n')
    args = types.SimpleNamespace(target_cost=0.1, plateau_window=3, plateau_gain=0.02,
                                 max_updates=300)
    run = {'name': 'm', 'model': model, 'output': str(tmp_path / 'm.out')}
    with pytest.raises(demo.DemoError, match='training m failed: train.src: file is empty'):
        demo.Training(args, run, {'dev_tokens_per_sentence': 10.0}, FakeProc()).result(1)


# ---------------------------------------------------------------- distance bins
def test_distance_bins():
    assert [toy_language.distance_bin(d) for d in (2, 3, 4, 5, 7, 8, 10, 11, None)] == \
        [None, '3-4', '3-4', '5-7', '5-7', '8-10', '8-10', None, None]
    assert [report.site_distances(r) for r in REF] == [[3], [5]]
    assert toy_language.clause_distance('un voyin la pismo'.split()) is None


def test_agreement_by_distance():
    wrong = REF[1].replace('risova', 'risovo')
    by = toy_language.agreement_by_distance(SRC, [REF[0], wrong], REF)
    assert list(by) == ['3-4', '5-7', '8-10']
    assert (by['3-4']['sites'], by['3-4']['correct'], by['3-4']['accuracy']) == (1, 1, 1.0)
    assert (by['5-7']['sites'], by['5-7']['correct'], by['5-7']['missing']) == (1, 0, 0)
    assert by['8-10']['sites'] == 0 and by['8-10']['accuracy'] == 0.0
    # a site missing in the hypothesis is counted in the reference's bin
    by = toy_language.agreement_by_distance(SRC, ['.', REF[1]], REF)
    assert by['3-4']['missing'] == 1 and by['5-7']['correct'] == 1
    with pytest.raises(ValueError):
        toy_language.agreement_by_distance(SRC, REF, REF[:1])


def test_examples_show_errors_first():
    hyps = {'a': REF[:], 'b': [REF[0], REF[1].replace('risova', 'risovo')]}
    ex = report.pick_examples(SRC, REF, hyps, 2)
    assert [e['index'] for e in ex] == [1, 0]
    assert ex[0]['hypotheses']['b'].endswith('risovo .')


# ---------------------------------------------------------------- end to end
@pytest.mark.slow
def test_short_demo_end_to_end(tmp_path):
    """Both models on a tiny corpus, stopped by the rule at their first
    validation (target cost set high): about 2-3 minutes on 2 cores."""
    out = tmp_path / 'demo'
    proc = run_demo('--train', '1000', '--dev', '30', '--test', '30', '--max-updates', '60',
                    '--valid-every', '20', '--disp-every', '20', '--target-cost', '50',
                    '--examples', '2', '--out', str(out), timeout=1500)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert 'error:' not in proc.stderr
    assert '[baseline] converged: ' in proc.stdout and '[attentive] converged: ' in proc.stdout
    results = json.loads((out / 'results.json').read_text())
    assert {'settings', 'data', 'reference_agreement', 'reference_agreement_by_distance',
            'models', 'examples', 'figure_sentence', 'total_seconds', 'load_average',
            'files'} <= set(results)
    assert [m['name'] for m in results['models']] == ['baseline', 'attentive']
    ref_by = results['reference_agreement_by_distance']
    assert list(ref_by) == ['3-4', '5-7', '8-10']
    assert all(b['accuracy'] == 1.0 for b in ref_by.values() if b['sites'])
    for m in results['models']:
        assert m['status'] == 'converged' and m['updates'] == 20
        assert m['valid_history'][0][0] == 20
        assert 0.0 <= m['bleu'] <= 100.0
        assert m['agreement']['sites'] == results['reference_agreement']['sites'] > 0
        by = m['agreement_by_distance']
        assert list(by) == list(ref_by)
        assert [b['sites'] for b in by.values()] == [b['sites'] for b in ref_by.values()]
        hyps = (out / ('%s.test.trg' % m['name'])).read_text().splitlines()
        assert len(hyps) == 30
    # the residual decoder has the extra attention over previous words
    assert results['models'][1]['params'] > results['models'][0]['params']
    assert len(results['examples']) == 2
    for key in ('chart', 'attention'):
        assert open(results['files'][key], 'rb').read(8) == b'\x89PNG\r\n\x1a\n'
    assert 'out of budget' not in proc.stdout.split('== 4.')[1]
