"""The training log (machinery/training_log.py): its reader on hand-made files, the
plotting command, and a real run asked to stop through the stop file."""
import json
import os
import subprocess

import numpy
import pytest

from machinery.text_io import InputError
from tiny_runs import PY, ROOT, make_corpus, start_training, wait_for_event
from machinery.training_log import LogReader, last_training_ended, read_training_log

PLOT = os.path.join(ROOT, 'analysis', 'plot_training.py')


def event(kind, uidx, **fields):
    return json.dumps(dict(event=kind, uidx=uidx, epoch=0, time=100.0 + uidx, **fields))


def test_reader_takes_whole_lines_only(tmp_path):
    path = tmp_path / 'm.npz.log.jsonl'
    reader = LogReader(str(path))
    assert reader.new_events() == []                    # no file yet
    whole, part = event('start', 0), event('update', 1, cost=3.5)
    path.write_text(whole + '\n' + part[:10])           # a line being written
    assert [e['event'] for e in reader.new_events()] == ['start']
    with open(path, 'a') as f:
        f.write(part[10:] + '\n')
    assert reader.new_events() == [json.loads(part)]
    assert reader.new_events() == []
    assert [e['event'] for e in read_training_log(str(path))] == ['start', 'update']


def test_reader_names_a_line_that_is_no_event(tmp_path):
    path = tmp_path / 'bad.log.jsonl'
    path.write_text(event('start', 0) + '\n[1, 2]\n' + event('update', 1) + '\n')
    with pytest.raises(InputError, match='bad.log.jsonl: line 2 is not an event'):
        read_training_log(str(path))


def test_plot_training_draws_and_summarises(tmp_path):
    log = tmp_path / 'run.npz.log.jsonl'
    log.write_text('\n'.join([
        event('start', 0), event('update', 10, cost=9.0), event('validation', 10, cost=5.0),
        event('update', 20, cost=7.0), event('validation', 20, cost=4.0),
        event('stop', 20, reason='finish_after', message='update 20 of --finish_after 20'),
    ]) + '\n')
    proc = subprocess.run([PY, PLOT, str(log), '--png', str(tmp_path / 'c.png')],
                          capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == ('run.npz: 20 updates; best validation 4.0000 at update '
                                   '20; stopped: update 20 of --finish_after 20')
    assert (tmp_path / 'c.png').read_bytes()[:8] == b'\x89PNG\r\n\x1a\n'
    proc = subprocess.run([PY, PLOT, str(log), '--labels', 'a,b', '--png', 'd.png'],
                          capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 1 and not (tmp_path / 'd.png').exists()
    assert proc.stderr == 'error: --labels names 2 runs, but 1 logs are given\n'


@pytest.mark.slow
def test_stop_file_ends_a_real_run(tmp_path):
    """A run asked to stop through MODEL.stop ends after the update in
    progress, as at --finish_after: a checkpoint, the best parameters in the
    model file, exit status 0."""
    make_corpus(tmp_path)
    log = str(tmp_path / 'm.npz.log.jsonl')
    proc = start_training(tmp_path, 'm.npz', '--saveFreq', '1000', '--validFreq', '5',
                          '--valid_datasets', 'valid.src', 'valid.trg')
    wait_for_event(proc, log, 'validation', min_uidx=5)
    (tmp_path / 'm.npz.stop').write_text('')
    assert proc.wait(timeout=300) == 0, (tmp_path / 'm.npz.out').read_text()
    events = read_training_log(log)
    kinds = [e['event'] for e in events]
    assert kinds[0] == 'start' and kinds[-3:] == ['checkpoint', 'stop', 'end']
    stop = events[-2]
    assert stop['reason'] == 'stop_file' and stop['uidx'] == events[-3]['uidx']
    assert not (tmp_path / 'm.npz.stop').exists()
    with numpy.load(tmp_path / 'm.npz') as f:
        assert int(f['uidx']) == stop['uidx']
        assert len(f['history_errs']) == len([k for k in kinds if k == 'validation'])
    proc = subprocess.run([PY, PLOT, log, '--png', 'curves.png'], capture_output=True,
                          text=True, cwd=tmp_path)
    assert proc.returncode == 0 and 'stopped: asked to stop' in proc.stdout


def test_the_log_names_files_relative_to_the_run_or_the_working_folder(tmp_path,
                                                                      monkeypatch):
    """Messages that name absolute paths in the model's folder or the folder
    the command runs in name them relative to it (a committed log names no
    folder of the machine it ran on); other text stays."""
    from machinery.training_log import TrainingLog
    from machinery.training_state import TrainingState
    run, work = tmp_path / 'runs' / 'r1', tmp_path / 'work'
    run.mkdir(parents=True)
    work.mkdir()
    monkeypatch.chdir(work)
    log = TrainingLog(str(run / 'm.npz'))
    log.write('stop', TrainingState(), reason='signal',
              message='SIGTERM: the checkpoint is in %s; valid %s; not %s2/x, /etc/hosts'
                      % (run / 'm.npz', work / 'data' / 'valid.src', run))
    log.close()
    [stop] = read_training_log(str(run / 'm.npz.log.jsonl'))
    assert stop['message'] == ('SIGTERM: the checkpoint is in m.npz; valid data/valid.src; '
                               'not %s2/x, /etc/hosts' % run)
    assert stop['reason'] == 'signal' and stop['uidx'] == 0


def test_last_training_ended_reads_the_last_process_of_the_log():
    """An 'end' after the last 'start': ended; a resumption that has not
    ended yet, or a log without a start: not (the Multi30k gathering leaves
    such a run out, train_multi30k.py resumes it)."""
    def log(*names):
        return [{'event': name, 'uidx': i, 'epoch': 0, 'time': 0.} for i, name in enumerate(names)]

    assert last_training_ended(log('start', 'update', 'stop', 'end'))
    assert last_training_ended(log('start', 'stop', 'start', 'end'))
    assert not last_training_ended(log('start', 'update', 'stop', 'end', 'start', 'update'))
    assert not last_training_ended(log('start', 'update', 'stop'))
    assert not last_training_ended(log('update', 'end'))
    assert not last_training_ended([])
