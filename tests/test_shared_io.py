"""The project's one reader of text files, its one word<->id mapping, the
training state's stopping rules, and the progress line."""
import gzip
import os
import io
import sys

import numpy as np
import pytest

from helpers import ROOT
from machinery import text_io
from machinery import vocab
from machinery.progress import ProgressLine, format_duration
from machinery.training_state import TrainingState


def test_read_lines_plain_gzip_crlf_and_last_line(tmp_path):
    plain = tmp_path / 'a.txt'
    plain.write_bytes(b'x y\r\nz\n\xc3\xa9')
    assert text_io.read_lines(str(plain)) == ['x y', 'z', '\u00e9']
    gz = tmp_path / 'a.txt.gz'
    with gzip.open(str(gz), 'wb') as f:
        f.write(b'one\ntwo\n')
    assert list(text_io.iter_lines(str(gz))) == ['one', 'two']


@pytest.mark.parametrize('case', ['missing', 'directory', 'not_utf8', 'empty'])
def test_read_lines_errors_name_file_and_line(tmp_path, case):
    path = tmp_path / 'f.txt'
    if case == 'directory':
        path.mkdir()
    elif case == 'not_utf8':
        path.write_bytes(b'good\nbad \xff here\n')
    elif case == 'empty':
        path.write_bytes(b'')
    with pytest.raises(text_io.InputError) as e:
        text_io.read_lines(str(path), what='sentences')
    msg = str(e.value)
    assert msg.startswith(str(path) + ': ') and '\n' not in msg
    assert {'missing': 'no such file', 'directory': 'is a directory',
            'not_utf8': 'line 2 is not valid UTF-8 text (byte 5',
            'empty': 'no sentences'}[case] in msg


def test_read_lines_allows_empty_and_reads_stdin(tmp_path, monkeypatch):
    path = tmp_path / 'e.txt'
    path.write_bytes(b'')
    assert text_io.read_lines(str(path), allow_empty=True) == []
    monkeypatch.setattr(sys, 'stdin', io.TextIOWrapper(io.BytesIO(b'a\nb c\n')))
    assert text_io.read_lines('-') == ['a', 'b c']


def test_words_to_ids_unknown_and_vocabulary_limit():
    d = {'eos': 0, 'UNK': 1, 'a': 2, 'b': 3, 'c': 4}
    assert vocab.words_to_ids('a b c zz'.split(), d, n_words=4) == [2, 3, 1, 1]
    # n_words <= 0: no limit (the original iterator's rule)
    assert vocab.words_to_ids('a b c zz'.split(), d, n_words=0) == [2, 3, 4, 1]
    assert vocab.words_to_ids('c'.split(), d, n_words=-1) == [4]
    assert vocab.sentence_ids(' a  c ', d, 4) == [2, 1, 0]


def test_ids_to_words_and_inverse_dictionary():
    inv = vocab.invert_dictionary({'eos': 0, 'UNK': 1, 'a': 2, 'b': 3})
    assert inv == {0: '<eos>', 1: 'UNK', 2: 'a', 3: 'b'}
    # a corpus word that took id 0's name does not hide '<eos>'
    assert vocab.invert_dictionary({'eos': 5, 'UNK': 1})[0] == '<eos>'
    assert vocab.ids_to_words([2, 3, 1, 0, 2], inv) == ['a', 'b', 'UNK']
    assert vocab.ids_to_words([9], inv) == ['UNK']


def test_validation_stopping_rule_as_the_original():
    """Bad validations count once there are more than `patience` costs and
    the cost is no better than the best before the last `patience` ones;
    stop when the count exceeds `patience`."""
    state = TrainingState()
    outcomes = [state.record_valid_cost(c, patience=1)
                for c in (5.0, 4.0, 4.5, 4.6, 4.7)]
    assert outcomes == [(True, False), (True, False), (False, False),
                        (False, True), (False, True)]
    assert state.bad_counter == 3
    state = TrainingState()
    for c in (3.0, 3.5, 2.0):
        best, stop = state.record_valid_cost(c, patience=1)
    assert best and not stop and state.bad_counter == 0


def test_bleu_stopping_rule():
    state = TrainingState()
    results = [state.record_bleu(b, patience=2) for b in (10., 12., 11., 11.5, 12.)]
    assert [r[0] for r in results] == [True, True, False, False, True]
    assert [r[1] for r in results] == [False, False, False, True, False]


def test_state_round_trips_through_arrays():
    best = {'W': np.arange(6, dtype='float32').reshape(2, 3)}
    state = TrainingState(uidx=7, epoch=2, history_errs=[3.0, 2.5], bleu_history=[1.5],
                          bad_counter=1, best_params=best,
                          data_position={'buffer_start': 40, 'buffer_taken': 3})

    class Archive(dict):
        files = property(lambda self: list(self))
    back = TrainingState.from_arrays(Archive((k, np.asarray(v))
                                             for k, v in state.to_arrays().items()))
    assert (back.uidx, back.epoch, back.bad_counter) == (7, 2, 1)
    assert back.history_errs == [3.0, 2.5] and back.bleu_history == [1.5]
    np.testing.assert_array_equal(back.best_params['W'], best['W'])
    assert {k: int(v) for k, v in back.data_position.items()} == \
        {'buffer_start': 40, 'buffer_taken': 3}


def test_progress_line_rate_and_eta(monkeypatch):
    from machinery import progress
    assert format_duration(3725.9) == '1:02:05'
    clock = [100.0]
    monkeypatch.setattr(progress.time, 'time', lambda: clock[0])
    out = io.StringIO()
    line = ProgressLine(10, 'translated', 'sentences', stream=out, interval=0)
    clock[0] = 102.0                        # 4 sentences in 2 s: 6 left, 3 s
    line.update(4)
    assert out.getvalue() == '\rtranslated 4/10 sentences, 2.00 sentences/s, ETA 0:00:03'
    clock[0] = 105.0
    line.finish()
    assert out.getvalue().endswith('10/10 sentences, 2.00 sentences/s, ETA 0:00:00\n')


def test_training_rates_are_recent_and_the_eta_from_the_whole_run(monkeypatch):
    """A pause (a long validation, a stopped process) lowers the display's
    recent rates in its own window only; the rates since the start, which
    the ETA uses, keep it."""
    from machinery import progress
    clock = [0.0]
    monkeypatch.setattr(progress.time, 'time', lambda: clock[0])
    rates = progress.Progress(finish_after=400, max_epochs=10, pairs_per_epoch=None)
    for _ in range(100):                    # 100 updates of 50 words in 10 s
        rates.add(32, 50, cost=1.)
    clock[0] = 10.0
    first = rates.figures(100)
    assert first['recent_updates_per_second'] == first['updates_per_second'] == 10.
    rates.take_recent_cost()
    clock[0] = 40.0                         # a 30 s pause, then 100 updates in 10 s
    for _ in range(100):
        rates.add(32, 50, cost=1.)
    clock[0] = 50.0
    second = rates.figures(200)
    assert second['updates_per_second'] == 4. and second['words_per_second'] == 200.
    assert second['recent_updates_per_second'] == 100. / 40.
    rates.take_recent_cost()
    clock[0] = 60.0
    for _ in range(100):
        rates.add(32, 50, cost=1.)
    third = rates.figures(300)
    assert third['recent_updates_per_second'] == 10. and third['recent_words_per_second'] == 500.
    assert third['eta_seconds'] == 100 / 5.  # 100 updates left at 300 / 60 s
    assert progress.Progress.text(third) == '10.00 upd/s 500 words/s ETA 0:00:20'


def test_a_child_command_that_fails_or_is_interrupted():
    """cli.run_command: the child's own error line; a child interrupted by
    SIGTERM (status 143) ends the parent as interrupted, with that status."""
    from machinery import cli
    import pytest
    fails = [sys.executable, '-c', 'import sys; print("error: x.txt: no such file", '
             'file=sys.stderr); sys.exit(1)']
    with pytest.raises(cli.CommandError, match='^step failed: x.txt: no such file$'):
        cli.run_command(fails, 'step', quiet=True)
    with pytest.raises(cli.Interrupted) as raised:
        cli.run_command([sys.executable, '-c', 'import sys; sys.exit(143)'], 'step')
    assert raised.value.status == 143 and str(raised.value) == 'step ended by SIGTERM'
    # a launcher (mpirun) that exits 1 after its workers said they were interrupted
    launcher = [sys.executable, '-c', 'import sys; [print("interrupted: SIGTERM at update %d: '
                'the checkpoint is in m.npz" % u, file=sys.stderr) for u in (7, 8)]; sys.exit(1)']
    with pytest.raises(cli.Interrupted) as raised:
        cli.run_command(launcher, 'nmt.py')
    assert raised.value.status == 143
    assert str(raised.value) == 'nmt.py ended: SIGTERM at update 8: the checkpoint is in m.npz'
    # an error line wins over an interrupted one: the step failed
    both = [sys.executable, '-c', 'import sys; print("interrupted: SIGINT", file=sys.stderr); '
            'print("error: disk full", file=sys.stderr); sys.exit(1)']
    with pytest.raises(cli.CommandError, match='^step failed: disk full$') as raised:
        cli.run_command(both, 'step')
    assert not isinstance(raised.value, cli.Interrupted)


def test_a_command_stopped_stops_its_child(tmp_path):
    """cli.run_command in a command that gets SIGTERM (kill PID, the child in
    another process group): the child is told to stop too and ends, not left
    running on its own; the command ends as interrupted (status 143)."""
    import signal
    import subprocess
    import time
    pid_file = tmp_path / 'child.pid'
    child = ('import os, sys, time; open(sys.argv[1], "w").write(str(os.getpid())); '
             'time.sleep(120)')
    parent = ('import sys; from machinery import cli; sys.exit(cli.run(lambda: '
              'cli.run_command([sys.executable, "-c", %r, %r], "step", '
              'start_new_session=True)))' % (child, str(pid_file)))
    proc = subprocess.Popen([sys.executable, '-c', parent], cwd=ROOT, stderr=subprocess.PIPE,
                            text=True)
    for _ in range(600):
        if pid_file.exists() and pid_file.read_text():
            break
        time.sleep(0.05)
    child_pid = int(pid_file.read_text())
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    assert err.strip() == 'interrupted: SIGTERM'
    # the child ended (its parent reaped it): no such process any more
    with pytest.raises(ProcessLookupError):
        os.kill(child_pid, 0)
