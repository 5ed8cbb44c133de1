"""The faults of docs/training.md's fault matrix, injected for real: a small
full file system, a read-only one, a folder that does not exist, truncated
and foreign checkpoint files, real signals to real training processes, a
second real process on the same model, a new run on a trained model.  Each
test checks the message (one line, no traceback), the exit status and the
files left.  (The faults found before anything is compiled, with
hand-made files: test_faults_inputs.py.)

Each case works in its own copy of the module's trained folder, and its
commands start with SIGINT and SIGTERM at their defaults
(helpers.default_signals).  The programs compile with Theano's quick
optimiser (tiny_runs.QUICK_ENV)."""
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time

import numpy
import pytest

from machinery import model_io
from machinery import training_log

from helpers import default_signals, error_line

from tiny_runs import (NMT, PY, QUICK_ENV, ROOT, TRAIN_FLAGS, case_copy, log_events, freeze,
                       make_corpus, run, start_training, wait_for_event)

BUILD_DICTIONARY = os.path.join(ROOT, 'build_dictionary.py')
TRANSLATE = os.path.join(ROOT, 'translate.py')
SCORE = os.path.join(ROOT, 'score.py')
LM = os.path.join(ROOT, 'language_model', 'lm.py')
CHECKPOINT = ('', '.pkl', '.json', '.resume.npz')


def train(cwd, model, *flags, check=True):
    return run([NMT, '--model', model] + TRAIN_FLAGS + list(flags), cwd=cwd, check=check)


def snapshot(folder):
    """{file name: bytes} of a folder."""
    return {name: open(os.path.join(folder, name), 'rb').read()
            for name in sorted(os.listdir(folder))
            if os.path.isfile(os.path.join(folder, name))}


def temporaries(folder):
    return [n for n in os.listdir(folder) if n.endswith('.tmp')]


def assert_same_parameters(a, b):
    with numpy.load(a) as x, numpy.load(b) as y:
        assert sorted(x.files) == sorted(y.files)
        for k in x.files:
            numpy.testing.assert_array_equal(x[k], y[k], err_msg=k)


@pytest.fixture(scope='module')
def master(tmp_path_factory):
    """The corpus, and base.npz: 4 updates, checkpoints at 2 and 4 (model,
    options, resume file, log).  The cases work in copies of it."""
    d = tmp_path_factory.mktemp('faults')
    make_corpus(d)
    train(d, 'base.npz', '--finish_after', '4', '--saveFreq', '2')
    return d


@pytest.fixture
def trained(master, tmp_path):
    return case_copy(master, tmp_path)


corpus = trained    # (the cases that train their own model)


def cut(path, size):
    """Truncate a file to its first ``size`` bytes."""
    path.write_bytes(path.read_bytes()[:size])


def copy_model(folder, source, target):
    for suffix in CHECKPOINT:
        shutil.copy(os.path.join(str(folder), source + suffix),
                    os.path.join(str(folder), target + suffix))


class Mount(object):
    """A tmpfs of ``size`` mounted on a new folder (needs root, or
    CAP_SYS_ADMIN: the test is skipped without it); unmounted at the end."""

    def __init__(self, folder, size, read_only=False):
        self.path = str(folder)
        os.makedirs(self.path)
        options = 'size=%s' % size + (',ro' if read_only else '')
        proc = subprocess.run(['mount', '-t', 'tmpfs', '-o', options, 'tmpfs', self.path],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            pytest.skip('cannot mount a small file system here (needs root): %s'
                        % proc.stderr.strip())

    def fill(self):
        """Write a file until the file system is full."""
        fd = os.open(os.path.join(self.path, 'filler'),
                     os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        try:
            while os.write(fd, b'\0' * 4096):
                pass
        except OSError:
            pass
        finally:
            os.close(fd)

    def unmount(self):
        subprocess.run(['umount', '-l', self.path], capture_output=True)


@pytest.fixture
def small_fs(tmp_path):
    mount = Mount(tmp_path / 'small', '8m')
    yield mount
    mount.unmount()


# ---------------------------------------------------------------- write errors
def test_disk_full_while_saving(trained, small_fs):
    """A checkpoint on a full disk: one line naming the file and the reason,
    status 1, the checkpoint already on disk left whole; likewise the outputs
    of another entry point."""
    fs = small_fs.path
    copy_model(trained, 'base.npz', os.path.join(fs, 'm.npz'))
    shutil.copy(str(trained / 'train.src'), fs)
    # the lock and the log of an earlier run, each in a block that its next
    # writes reuse: the first write that needs a new block is the checkpoint's
    shutil.copy(str(trained / 'base.npz.log.jsonl'), os.path.join(fs, 'm.npz.log.jsonl'))
    with open(os.path.join(fs, 'm.npz.lock'), 'w') as f:    # as a killed run leaves it
        f.write('4242\n')
    small_fs.fill()
    before = snapshot(fs)
    proc = train(trained, os.path.join(fs, 'm.npz'), '--reload', '--finish_after', '8',
                 '--saveFreq', '2', '--dispFreq', '1000', check=False)
    assert proc.returncode == 1
    line = error_line(proc)
    assert line == ('error: %s/m.npz.resume.npz: cannot write: No space left on device; '
                    'the files already on disk are whole: --reload continues from the '
                    'newest checkpoint among them' % fs)
    error = log_events(os.path.join(fs, 'm.npz.log.jsonl'))[-1]   # the log's block had room
    # the log names the file relative to the run's folder (training_log.RelativePaths)
    assert error['event'] == 'error'
    assert error['message'] == line[len('error: '):].replace(fs + os.sep, '')
    after, changing = snapshot(fs), ('m.npz.log.jsonl', 'm.npz.lock')
    assert temporaries(fs) == []
    assert {k: v for k, v in after.items() if k not in changing} == \
        {k: v for k, v in before.items() if k not in changing}
    small_fs.fill()    # again: the run removed its lock file
    proc = run([BUILD_DICTIONARY, os.path.join(fs, 'train.src')], cwd=fs, check=False)
    assert proc.returncode == 1
    assert error_line(proc) == ('error: %s/train.src.pkl: cannot write: No space left '
                                    'on device' % fs)
    assert not os.path.exists(os.path.join(fs, 'train.src.pkl')) and temporaries(fs) == []
    # with room for the first file of the pair only, neither appears
    os.remove(os.path.join(fs, 'filler'))
    with open(os.path.join(fs, 'filler'), 'wb') as f:
        f.write(b'\0' * (4096 * ((os.statvfs(fs).f_bavail - 1))))
    proc = run([BUILD_DICTIONARY, os.path.join(fs, 'train.src')], cwd=fs, check=False)
    assert error_line(proc) == ('error: %s/train.src.json: cannot write: No space left '
                                    'on device' % fs)
    assert not os.path.exists(os.path.join(fs, 'train.src.pkl')) and temporaries(fs) == []


def test_unwritable_model_stops_before_compiling(corpus, tmp_path):
    """--model in a folder that does not exist, or on a read-only file system:
    one line naming the model, before the data is read and anything compiled."""
    missing = str(tmp_path / 'no' / 'm.npz')
    proc = train(corpus, missing, check=False)
    assert proc.returncode == 1 and 'Building model' not in proc.stdout
    assert error_line(proc) == 'error: %s: cannot write: No such file or directory' % missing
    read_only = Mount(tmp_path / 'ro', '1m', read_only=True)
    try:
        proc = train(corpus, os.path.join(read_only.path, 'm.npz'), check=False)
    finally:
        read_only.unmount()
    assert proc.returncode == 1 and 'Building model' not in proc.stdout
    assert error_line(proc) == ('error: %s/m.npz: cannot write: Read-only file system'
                                    % read_only.path)


@pytest.mark.parametrize('flags, message', [
    (['--bleu_valid_freq', '5', '--bleu_valid_ref', 'train.trg'],
     'error: --bleu_valid_ref train.trg has 18 lines but the validation source '
     'valid.src has 3'),
    (['--bleu_valid_freq', '5'], 'error: --bleu_valid_freq needs --bleu_valid_ref'),
    (['--external_validation_script', './no-such-script.sh'],
     "error: --external_validation_script: './no-such-script.sh' is not a program "
     "that can be run"),
])
def test_validation_options_checked_before_compiling(corpus, flags, message):
    """A BLEU reference with other lines than the validation source, BLEU
    validation without a reference, an external validation script that does
    not exist: one line at start, not a traceback hours into the run (the
    sound options are those of the runs of test_train_scripts.py and
    test_multi30k_run.py)."""
    proc = train(corpus, 'valid_options.npz', '--valid_datasets', 'valid.src', 'valid.trg',
                 '--finish_after', '1', *flags, check=False)
    assert proc.returncode == 1 and 'Building model' not in proc.stdout
    assert error_line(proc) == message


def test_permission_denied(corpus):
    """A folder the user may not write: build_dictionary.py's outputs there
    (as root, the program runs as user nobody, whom the folder denies)."""
    command = []
    if os.geteuid() == 0:
        if not shutil.which('setpriv'):
            pytest.skip('root needs setpriv (util-linux) to run the program as another user')
        command = ['setpriv', '--reuid=65534', '--regid=65534', '--clear-groups']
        probe = subprocess.run(command + [PY, '-c', ''], capture_output=True, text=True)
        if probe.returncode != 0:   # e.g. a Python under /root, which nobody may not read
            pytest.skip('user nobody cannot run %s: %s' % (PY, probe.stderr.strip()[-200:]))
    base = tempfile.mkdtemp()    # pytest's folders are the owner's alone
    try:
        folder = os.path.join(base, 'locked')
        os.mkdir(folder)
        shutil.copy(str(corpus / 'train.src'), folder)
        os.chmod(folder, 0o555)
        os.chmod(base, 0o755)
        proc = subprocess.run(command + [PY, BUILD_DICTIONARY, 'locked/train.src'],
                              capture_output=True, text=True, cwd=base)
        assert proc.returncode == 1
        assert error_line(proc) == ('error: locked/train.src.pkl: cannot write: '
                                        'Permission denied')
        assert sorted(os.listdir(folder)) == ['train.src']
    finally:
        os.chmod(os.path.join(base, 'locked'), 0o755)
        shutil.rmtree(base)


def test_translation_output_in_a_missing_folder(trained):
    """translate.py checks its outputs before it loads and decodes."""
    proc = run([TRANSLATE, '-p', '1', 'base.npz', 'train.src.pkl', 'train.trg.pkl',
                'valid.src', 'no/such/folder/out.txt'], cwd=trained, check=False)
    assert proc.returncode == 1
    assert error_line(proc) == ('error: no/such/folder/out.txt: cannot write: No such '
                                    'file or directory')


# ---------------------------------------------------------------- corrupt files
def test_truncated_resume_file_and_reload_model_only(trained):
    """A truncated resume file at --reload: one line naming it, before
    compiling; --reload_model_only then goes on from the model file alone,
    and a warning names every training setting that changed."""
    copy_model(trained, 'base.npz', 'cut.npz')
    cut(trained / 'cut.npz.resume.npz', 300)
    proc = train(trained, 'cut.npz', '--reload', '--finish_after', '6', check=False)
    assert proc.returncode == 1 and 'Building model' not in proc.stdout
    line = error_line(proc)
    assert line.startswith('error: cut.npz.resume.npz: not a readable .npz archive, '
                           'truncated or corrupt (')
    assert line.endswith('; the model file cut.npz is sound: --reload_model_only starts '
                         'from its parameters (optimizer and data position fresh), as the '
                         'original code reloads')
    (trained / 'other.src').write_text((trained / 'train.src').read_text())
    flags = [f if f != 'train.src' else 'other.src' for f in TRAIN_FLAGS]
    flags[flags.index('--batch_size') + 1] = '3'
    proc = run([NMT, '--model', 'cut.npz', '--reload', '--reload_model_only',
                '--finish_after', '6'] + flags, cwd=trained)
    assert 'No optimizer state: the optimizer starts fresh' in proc.stdout
    assert proc.stderr.strip() == (
        'warning: --reload with training settings other than those of cut.npz: batch_size '
        '2 -> 3; datasets train.src train.trg -> other.src train.trg')
    with numpy.load(trained / 'cut.npz') as f:
        assert int(f['uidx']) == 6    # the model file's 4 updates, then 2


def test_foreign_resume_file(trained):
    """A resume file of another model (a parameter of another shape)."""
    copy_model(trained, 'base.npz', 'foreign.npz')
    path = trained / 'foreign.npz.resume.npz'
    with numpy.load(path) as f:
        arrays = {k: f[k] for k in f.files}
    arrays['param__Wemb'] = numpy.zeros((9, 4), dtype='float32')
    numpy.savez(path, **arrays)
    proc = train(trained, 'foreign.npz', '--reload', check=False)
    assert proc.returncode == 1 and 'Building model' not in proc.stdout
    assert error_line(proc).startswith(
        'error: foreign.npz.resume.npz: belongs to another model (parameter Wemb has shape '
        '(9, 4), the model file (7, 4)); the model file foreign.npz is sound')


@pytest.mark.parametrize('damage', ['npz', 'pkl', 'json'])
def test_corrupt_model_files(trained, damage):
    """A truncated model file, options pickle or dictionary: one line naming
    the file, for training (--reload) and translation alike."""
    copy_model(trained, 'base.npz', 'bad.npz')
    dictionary = 'train.trg.json'
    if damage == 'npz':
        cut(trained / 'bad.npz', 300)
        expected = 'error: bad.npz: not a readable .npz archive, truncated or corrupt ('
    elif damage == 'pkl':
        cut(trained / 'bad.npz.pkl', 40)
        expected = 'error: bad.npz.pkl: not a readable pickle ('
    else:
        dictionary = 'bad.json'
        (trained / dictionary).write_text('{"eos": 0, "UNK": ')
        expected = 'error: bad.json: not valid JSON ('
    flags = [f if f != 'train.trg.json' else dictionary for f in TRAIN_FLAGS] + ['--reload']
    commands = [[NMT, '--model', 'bad.npz'] + flags,
                [TRANSLATE, '-p', '1', 'bad.npz', 'train.src.pkl', dictionary, 'valid.src',
                 'bad.out']]
    for command in commands:
        proc = run(command, cwd=trained, check=False)
        assert proc.returncode == 1
        assert error_line(proc).startswith(expected)
    assert not (trained / 'bad.out').exists()


# ---------------------------------------------------------------- signals, two runs
def test_sigterm_checkpoints_and_reload_continues_exactly(corpus):
    """SIGTERM (then SIGINT at once, while the run saves) to a real run: it
    saves a checkpoint of the update it was at, says so in one line, exits
    with 143, and --reload then ends bit-identical to a run without the
    signal.  While it ran, a second run on the same model was refused."""
    flags = ['--saveFreq', '1000', '--validFreq', '4', '--valid_datasets', 'valid.src',
             'valid.trg']
    log = str(corpus / 'sig.npz.log.jsonl')
    proc = start_training(corpus, 'sig.npz', *flags)
    wait_for_event(proc, log, 'update', min_uidx=3)
    freeze(proc)   # paused (its lock held): the folder stays as it is
    before = snapshot(str(corpus))
    for flag in ('--reload', '--restart'):   # --restart moves nothing of a running run
        second = train(corpus, 'sig.npz', '--finish_after', '5', flag, *flags, check=False)
        assert second.returncode == 1 and 'Building model' not in second.stdout
        assert error_line(second) == (
            'error: sig.npz: another training run (process %d) is writing this model; wait '
            'for it, stop it (kill -TERM), or choose another --model' % proc.pid)
    now = snapshot(str(corpus))
    assert now == before, sorted(n for n in set(now) | set(before) if now.get(n) != before.get(n))
    proc.send_signal(signal.SIGCONT)
    proc.send_signal(signal.SIGTERM)
    note = 'SIGTERM: the run stops after this update, with a checkpoint'
    deadline = time.time() + 60
    while note not in (corpus / 'sig.npz.out').read_text() and time.time() < deadline:
        time.sleep(0.01)
    proc.send_signal(signal.SIGINT)      # while it finishes and saves: changes nothing
    assert proc.wait(timeout=300) == 143
    stop = [e for e in log_events(log) if e['event'] == 'stop'][-1]
    uidx = stop['uidx']
    out = (corpus / 'sig.npz.out').read_text().strip().split('\n')
    assert out[-1] == ('interrupted: SIGTERM at update %d: the checkpoint of update %d is in '
                       'sig.npz; --reload continues from it' % (uidx, uidx))
    assert stop['reason'] == 'signal' and 'Traceback' not in ''.join(out)
    assert not (corpus / 'sig.npz.lock').exists()      # the run removed its lock
    with numpy.load(corpus / 'sig.npz.resume.npz') as f:
        assert int(f['uidx']) == uidx
    assert temporaries(str(corpus)) == []
    train(corpus, 'ref.npz', '--finish_after', str(uidx + 2), *flags)
    train(corpus, 'sig.npz', '--reload', '--finish_after', str(uidx + 2), *flags)
    assert_same_parameters(corpus / 'ref.npz', corpus / 'sig.npz')


def kill_while(proc, under_way, seconds=60):
    """kill -9 while under_way() is true: stopped (SIGSTOP, every thread)
    when it is seen, killed if it still is, else let go on; a loaded
    machine's save may end between the look and the stop."""
    deadline = time.time() + seconds
    while time.time() < deadline:
        if under_way():
            freeze(proc)
            if under_way():
                break
            proc.send_signal(signal.SIGCONT)
    proc.kill()
    proc.wait()


def test_kill_during_a_save_then_sigint(corpus):
    """kill -9 while a checkpoint is being written leaves every file whole
    (and its lock blocks nothing): the next run removes the half-written
    temporary file and goes on; SIGINT then ends it with 130 and a checkpoint."""
    folder = str(corpus)
    proc = start_training(corpus, 'k.npz', '--saveFreq', '1')
    wait_for_event(proc, str(corpus / 'k.npz.log.jsonl'), 'checkpoint', min_uidx=5)
    kill_while(proc, lambda: temporaries(folder))   # a save under way
    assert temporaries(folder), 'the kill did not land during a save'
    assert (corpus / 'k.npz.lock').exists()             # the killed run's
    for suffix in ('', '.resume.npz'):
        with numpy.load(corpus / ('k.npz' + suffix)) as f:
            assert all(f[k] is not None for k in f.files)   # every entry reads
    log = str(corpus / 'k.npz.log.jsonl')
    before = len(log_events(log))
    proc = start_training(corpus, 'k.npz', '--reload', '--saveFreq', '1000')
    events = wait_for_event(proc, log, 'update', skip=before)
    assert [e for e in events[before:] if e['event'] == 'start'][0]['reloaded']
    assert temporaries(folder) == []
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=300) == 130
    last = (corpus / 'k.npz.out').read_text().strip().split('\n')[-1]
    assert last.startswith('interrupted: SIGINT at update ')
    assert log_events(log)[-1]['reason'] == 'signal'


def test_kill_during_a_snapshot(corpus):
    """kill -9 while a snapshot (MODEL.iterN.npz, a model-sized file) is
    written: the next run removes its temporary file."""
    folder = str(corpus)
    flags = [f for f in TRAIN_FLAGS if f != '--overwrite']
    with open(os.path.join(folder, 'snap.out'), 'w') as out:
        proc = subprocess.Popen([PY, NMT, '--model', 'snap.npz', '--finish_after', '1000000',
                                 '--saveFreq', '1'] + flags, cwd=folder, stdout=out,
                                stderr=subprocess.STDOUT, env=QUICK_ENV,
                                preexec_fn=default_signals)
    wait_for_event(proc, str(corpus / 'snap.npz.log.jsonl'), 'checkpoint', min_uidx=2)
    kill_while(proc, lambda: snapshot_temporaries(folder))
    assert snapshot_temporaries(folder), 'the kill did not land during a snapshot'
    train(corpus, 'snap.npz', '--reload', '--finish_after', '1')   # trained already
    assert snapshot_temporaries(folder) == [] and temporaries(folder) == []


def snapshot_temporaries(folder):
    return [n for n in temporaries(folder) if n.startswith('.snap.iter')]


# ---------------------------------------------------------------- models, logs
def test_model_of_the_wrong_kind_or_with_other_parameters(trained):
    """A language model given to translate.py, score.py and nmt.py --reload,
    and a translation model whose options name another decoder: one line
    naming the file, before any work, no output."""
    run([LM, 'train', '--model', 'lm.npz', '--data', 'train.trg', '--finish_after', '1',
         '--dim_word', '4', '--dim', '5', '--batch_size', '2'], cwd=trained)
    copy_model(trained, 'base.npz', 'other.npz')
    options = model_io.load_options(str(trained / 'other.npz'))
    options.update(decoder='gru_cond_residual', residual='attentive')
    model_io.save_options(options, str(trained / 'other.npz'))
    expected = {
        'lm.npz': 'error: lm.npz: a language model of language_model/lm.py, not a '
                  'translation model (nmt.py)',
        'other.npz': 'error: other.npz: the model file does not match its options: 3 of '
                     'its 44 parameters are not in the file (cond_att_W_prev, '
                     'cond_att_b_prev, cond_att_V_prev)'}
    for model, message in expected.items():
        for command in ([TRANSLATE, '-p', '2', model, 'train.src.pkl', 'train.trg.json',
                         'valid.src', 'wrong.out'],
                        [SCORE, '-m', model, '-s', 'valid.src', '-t', 'valid.trg', '-o',
                         'wrong.out', '-d', 'train.src.pkl', 'train.trg.json'],
                        [NMT, '--model', model, '--reload'] + TRAIN_FLAGS):
            proc = run(command, cwd=trained, check=False)
            assert proc.returncode == 1 and 'Building optimizer' not in proc.stdout
            assert error_line(proc) == message
            assert proc.stderr.strip() == message    # no warning before it
            assert not (trained / 'wrong.out').exists()


def test_reload_with_a_resume_file_but_no_model(trained):
    """--reload finds a resume file whose model file is gone: one line, and
    the resume file is not written over by a new run."""
    shutil.copy(str(trained / 'base.npz.resume.npz'), str(trained / 'orphan.npz.resume.npz'))
    before = (trained / 'orphan.npz.resume.npz').read_bytes()
    proc = train(trained, 'orphan.npz', '--reload', check=False)
    assert proc.returncode == 1 and 'Building model' not in proc.stdout
    assert error_line(proc) == (
        'error: orphan.npz: no such model file, but orphan.npz.resume.npz of its run is '
        'there: --reload needs the model file (put it back; --restart moves the run\'s '
        'files aside and starts a new model)')
    assert (trained / 'orphan.npz.resume.npz').read_bytes() == before


def test_diverging_run(corpus):
    """A run that diverges before its first checkpoint says that nothing
    was saved (and --reload without a model file, that a new model starts)."""
    flags = [{'adadelta': 'sgd'}.get(f, f) for f in TRAIN_FLAGS]
    proc = run([NMT, '--model', 'diverge.npz', '--reload', '--lrate', '1e30',
                '--saveFreq', '1000'] + flags, cwd=corpus, check=False)
    assert proc.returncode == 1
    assert '--reload: no model file diverge.npz yet: a new model starts' in proc.stdout
    line = error_line(proc)
    assert line.startswith('error: NaN or Inf cost at update ')
    assert line.endswith(', before the first checkpoint (--saveFreq 1000): no model was saved')
    assert not (corpus / 'diverge.npz').exists()


def test_log_line_cut_by_a_full_disk(trained, small_fs, capsys):
    """The disk fills in the middle of a line of the training log: the run
    stops with one line; the next run starts on a new line, and the log
    reads, the cut line skipped with one warning."""
    fs = small_fs.path
    copy_model(trained, 'base.npz', os.path.join(fs, 'm.npz'))
    log = os.path.join(fs, 'm.npz.log.jsonl')
    shutil.copy(str(trained / 'base.npz.log.jsonl'), log)
    with open(log, 'a') as f:    # an event that leaves 40 bytes in the log's last block
        pad = (4096 - os.path.getsize(log) % 4096 - 40
               - len('{"event": "note", "uidx": 4, "text": ""}\n'))
        f.write(json.dumps({'event': 'note', 'uidx': 4, 'text': 'x' * pad}) + '\n')
    with open(os.path.join(fs, 'm.npz.lock'), 'w') as f:
        f.write('4242\n')
    small_fs.fill()
    whole = len(log_events(log))
    proc = train(trained, os.path.join(fs, 'm.npz'), '--reload', '--finish_after', '6',
                 check=False)
    assert proc.returncode == 1
    assert error_line(proc) == 'error: %s: cannot write: the disk is full' % log
    assert not open(log, 'rb').read().endswith(b'\n')       # the start event, cut
    os.remove(os.path.join(fs, 'filler'))
    train(trained, os.path.join(fs, 'm.npz'), '--reload', '--finish_after', '6')
    events = training_log.read_training_log(log)
    assert [e['event'] for e in events[whole:]][:1] == ['start']
    assert events[-1]['event'] == 'end' and len(events) > whole
    assert capsys.readouterr().err == (
        'warning: %s: line %d cut short (an append interrupted by a full disk or a kill): '
        'skipped\n' % (log, whole + 1))


# ---------------------------------------------------------------- a new run on a run
def test_a_new_run_on_a_trained_model_is_refused_and_restart_keeps_it(trained):
    """The command of a finished run again, without --reload: one line, at
    once, every file as it was.  --restart moves the run's files (model,
    options, resume file, log) into one folder beside it, unchanged, and
    trains a new model; a model the run did not train is never written
    (--finish_after 0)."""
    before = snapshot(str(trained))
    start = time.time()
    proc = train(trained, 'base.npz', '--finish_after', '4', '--saveFreq', '2', check=False)
    assert time.time() - start < 60 and 'Building model' not in proc.stdout
    assert error_line(proc) == (
        'error: base.npz: holds a training run (base.npz at update 4, base.npz.resume.npz, '
        'base.npz.log.jsonl to update 4): --reload continues it; --restart moves its files '
        'aside and starts a new one')
    assert snapshot(str(trained)) == before
    proc = train(trained, 'base.npz', '--finish_after', '2', '--restart')
    [moved] = [n for n in os.listdir(str(trained)) if n.startswith('base.npz.before-')]
    assert ('--restart: the 5 files of the run on base.npz moved into %s' % moved) in proc.stdout
    assert snapshot(str(trained / moved)) == {name: data for name, data in before.items()
                                              if name.startswith('base.npz')}
    with numpy.load(trained / 'base.npz') as f:
        assert int(f['uidx']) == 2
    events = log_events(str(trained / 'base.npz.log.jsonl'))
    assert [e['event'] for e in events].count('start') == 1
    proc = train(trained, 'zero.npz', '--finish_after', '0', check=False)
    assert error_line(proc) == ('error: the run stopped before its first update (update 0 of '
                                '--finish_after 0): no model was written')
    assert not (trained / 'zero.npz').exists()


def test_reload_with_the_dictionaries_moved(trained):
    """--reload with the run's dictionaries under other names (and the
    other format): the contents are the model's, the run goes on without a
    word about them."""
    shutil.copy(str(trained / 'train.trg.pkl'), str(trained / 'moved.pkl'))
    flags = [f if f != 'train.trg.json' else 'moved.pkl' for f in TRAIN_FLAGS]
    proc = run([NMT, '--model', 'base.npz', '--reload', '--finish_after', '5'] + flags,
               cwd=trained)
    assert proc.stderr.strip() == '', proc.stderr
    with numpy.load(trained / 'base.npz') as f:
        assert int(f['uidx']) == 5
