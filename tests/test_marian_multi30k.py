"""pipeline/marian_multi30k.py, the Multi30k table's Marian anchor: its
training time and speed read from Marian's log (one part a process), and,
where Marian is installed, the whole path on the tiny mirror: train, resume
an interrupted training from Marian's checkpoint, translate, score."""
import json
import os

import pytest

from pipeline import marian_multi30k as anchor
from speed.marian import ENV_DIR
from helpers import error_line
from test_multi30k_data import mirror  # noqa: F401  (the tiny mirror fixture)
from test_multi30k_run import prepared  # noqa: F401  (the mirror, prepared)

PYMARIAN = os.path.join(ENV_DIR, 'bin', 'pymarian')


def marian_log(*processes):
    """A train.log of Marian processes, each [(second, update, seconds, words/s)]."""
    lines = []
    for process in processes:
        first = process[0][0]
        lines.append('[2026-12-06 10:00:%02d] [marian] Marian v1.12.42 b7be0e964' % first)
        lines.append('[2026-12-06 10:00:%02d] [config] after: 40e' % first)
        for second, update, seconds, rate in process:
            lines.append('[2026-12-06 10:00:%02d] Ep. 1 : Up. %d : Sen. 3,200 : Cost 5.1 : '
                         'Time %.2fs : %.2f words/s : gNorm 0.4' % (second, update, seconds,
                                                                    rate))
        lines.append('[2026-12-06 10:00:%02d] [valid] Ep. 1 : Up. %d : translation : 30.1 : '
                     'new best' % (process[-1][0] + 1, process[-1][1]))
    return lines


def test_training_time_is_the_sum_of_its_processes():
    log = marian_log([(1, 100, 2., 1000.), (5, 200, 2., 3000.)],
                     [(30, 300, 4., 1500.), (40, 400, 2., 1500.)])
    assert anchor.training_parts(log) == [
        {'from_update': 0, 'to_update': 200, 'seconds': 5.},
        {'from_update': 200, 'to_update': 400, 'seconds': 11.}]
    # target words over seconds: (2000 + 6000 + 6000 + 3000) / 10; at its
    # fastest, the 90th percentile of the lines' rates (4 of them: the 4th)
    assert anchor.words_per_second(log) == (1700., 3000.)
    assert anchor.training_parts([]) == [] and anchor.words_per_second([]) == (None, None)


def test_the_summary_says_why_marian_stopped(tmp_path):
    (tmp_path / 'train.log').write_text('\n'.join(marian_log([(1, 100, 1., 50.)])) + '\n')
    valid = ['[2026-12-06 10:00:09] [valid] Ep. 9 : Up. %d : translation : %.1f : %s'
             % (u, b, s) for u, b, s in [(1000, 30., 'new best'), (2000, 29.,
                                                                     'stalled 5 times')]]
    (tmp_path / 'valid.log').write_text('\n'.join(valid) + '\n')
    summary = anchor.training_summary(str(tmp_path))
    assert summary['stop_reason'] == 'early_stop' and summary['best_valid_bleu'] == 30.
    (tmp_path / 'valid.log').write_text(valid[0] + '\n')
    assert anchor.training_summary(str(tmp_path))['stop_reason'] == 'after'


@pytest.mark.skipif(not os.path.exists(PYMARIAN),
                    reason='Marian is not installed (the study installs it on first use)')
def test_an_interrupted_anchor_resumes_from_marians_checkpoint(prepared, tmp_path,  # noqa: F811
                                                              monkeypatch, capsys):
    folder = tmp_path / 'marian-dropout0.2-seed1'
    argv = ['train', str(prepared), str(folder), '--tiny', '--threads', '1']
    # a training that stopped at its checkpoint of update 8: what a kill leaves,
    # less the result.json that only a finished run writes
    monkeypatch.setitem(anchor.TINY_SETTINGS, '--after', '8u')
    assert anchor.main(argv) == 0
    os.remove(folder / 'result.json')
    monkeypatch.setitem(anchor.TINY_SETTINGS, '--after', '12u')
    capsys.readouterr()
    assert anchor.main(argv) == 0
    assert 'resuming from Marian\'s checkpoint at update 8' in capsys.readouterr().err
    result = json.loads((folder / 'result.json').read_text())
    assert [(p['from_update'], p['to_update']) for p in result['training_parts']] == [
        (0, 8), (8, 12)]
    assert result['updates'] == 12 and result['stop_reason'] == 'after'
    assert result['train_wall_seconds'] == sum(p['seconds'] for p in result['training_parts'])
    assert result['words_per_second'] > 0 and result['words_per_second_fast'] > 0
    assert result['version'].startswith('v1.12')
    assert '--dim-emb 8' in result['command'] and '--dropout-rnn 0.2' in result['command']
    assert (folder / result['selected_model']).exists() and result['test_beam'] == 2
    for test_set, scores in result['test'].items():
        hyp = (folder / (test_set + '.hyp.tok')).read_text().splitlines()
        assert len(hyp) == len((prepared / (test_set + '.tok.de')).read_text().splitlines())
        assert 0. <= scores['bleu_tok_lc'] <= 100.
    # run again: nothing to do
    assert anchor.main(argv) == 0
    assert 'nothing to do' in capsys.readouterr().out


def test_the_study_plans_each_anchor_to_do_or_to_resume(prepared, tmp_path, capsys):  # noqa: F811
    from pipeline import multi30k_study
    runs = tmp_path / 'runs'
    interrupted = runs / 'marian-dropout0-seed1'
    interrupted.mkdir(parents=True)
    (interrupted / 'model.npz.progress.yml').write_text('epochs: 9\nbatches: 3000\n')
    assert multi30k_study.main([str(prepared), '--dry-run', '--no-estimate', '--tiny',
                                '--decoders', 'baseline', '--seeds', '1',
                                '--no-ensembles', '--runs', str(runs)]) == 0
    lines = capsys.readouterr().out.splitlines()
    anchors = {line.split()[3]: (line.split()[4], command) for line, command
               in zip(lines, lines[1:]) if line.startswith('Marian')}
    assert anchors['0.2'][0] == 'to' and anchors['0'][0] == 'resume'
    assert all(command.endswith('--tiny') for _, command in anchors.values())
    # one anchor alone
    assert multi30k_study.main([str(prepared), '--dry-run', '--no-estimate', '--tiny',
                                '--decoders', 'baseline', '--seeds', '1', '--no-ensembles',
                                '--runs', str(runs), '--marian-dropouts', '0']) == 0
    assert [line.split()[3] for line in capsys.readouterr().out.splitlines()
            if line.startswith('Marian')] == ['0']
    assert anchor.resumed_from(str(interrupted)) == 3000
    assert anchor.resumed_from(str(tmp_path)) is None


@pytest.mark.parametrize('value, needle', [('0.2,x', "not '0.2,x'"), ('1', 'not 1')])
def test_a_bad_anchor_dropout_is_one_line_naming_the_option(prepared, tmp_path,  # noqa: F811
                                                             value, needle):
    from test_multi30k_run import study
    proc = study(prepared, '--dry-run', '--no-estimate', '--marian-dropouts', value,
                 cwd=tmp_path)
    error_line(proc, '--marian-dropouts', needle, status=2, alone=True)
