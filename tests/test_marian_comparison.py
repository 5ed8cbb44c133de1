"""speed/marian.py: the corpus Marian reads is the benchmark's batches, its
progress lines are read as its speed, and its absence is said in one line."""
import os
import subprocess
import sys

import numpy
import pytest

import nmt
from speed import marian

PROGRESS = ('[2026-11-26 12:00:0%d] Ep. 1 : Up. %d : Sen. %d : Cost 5.12345678 : '
            'Time %.2fs : %.2f words/s : gNorm 1.2345')


def _batches():
    xs = [[5, 6, 7], [8, 9]]
    ys = [[3, 4], [10, 11, 12, 13]]
    return [nmt.prepare_data(xs, ys, maxlen=100, n_words_src=20, n_words=20)[:4],
            nmt.prepare_data(xs[::-1], ys[::-1], maxlen=100, n_words_src=20, n_words=20)[:4]]


def test_corpus_holds_the_batches_in_order(tmp_path):
    files = marian.write_corpus(_batches(), str(tmp_path), 20, 30)
    with open(files['train.src']) as f:
        assert f.read().splitlines() == ['w5 w6 w7', 'w8 w9', 'w8 w9', 'w5 w6 w7']
    with open(files['train.trg']) as f:
        assert f.read().splitlines() == ['w3 w4', 'w10 w11 w12 w13', 'w10 w11 w12 w13', 'w3 w4']
    with open(files['vocab.trg.yml']) as f:
        lines = f.read().splitlines()
    assert lines[:3] == ['"</s>": 0', '"<unk>": 1', 'w2: 2'] and len(lines) == 30


def test_speed_is_words_over_time_after_the_warmup():
    lines = [PROGRESS % (1, 10, 320, 5.0, 100.0),    # warm-up: left out
             PROGRESS % (2, 20, 640, 2.0, 300.0),
             PROGRESS % (3, 30, 960, 6.0, 100.0)]
    figures = marian._figures(lines, warmup=10, first_line=1.5, wall=20.)
    # (2 s x 300 + 6 s x 100) / 8 s
    assert figures['words_per_sec'] == 150.0
    assert figures['updates_timed'] == 20 and figures['startup_sec'] == 1.5


def test_no_progress_line_is_an_error():
    with pytest.raises(marian.MarianUnavailable, match='no progress line'):
        marian._figures(['[x] Training started'], warmup=10, first_line=None, wall=1.)


def test_missing_marian_is_said_in_one_line(tmp_path):
    with pytest.raises(marian.MarianUnavailable) as e:
        marian.marian_command(str(tmp_path / 'none'), install=False)
    assert '\n' not in str(e.value) and str(tmp_path / 'none') in str(e.value)
    assert not os.path.exists(str(tmp_path / 'none'))


def test_command_carries_the_model_and_optimiser():
    options = dict(n_words_src=20, n_words=30, dim_word=8, dim=12, batch_size=4,
                   maxlen=50, lrate=0.0004, clip_c=1.0)
    files = {k: k for k in ('train.src', 'train.trg', 'vocab.src.yml', 'vocab.trg.yml')}
    cmd = marian.training_command('pymarian', files, options, 2, 7, '/tmp/m')
    pairs = dict(zip(cmd, cmd[1:]))
    assert pairs['--type'] == 'amun' and pairs['--dim-emb'] == '8' and pairs['--dim-rnn'] == '12'
    assert pairs['--mini-batch'] == '4' and pairs['--learn-rate'] == '0.0004'
    assert pairs['--cpu-threads'] == '2' and pairs['--after'] == '7u'
    assert pairs['--shuffle'] == 'none' and numpy.isclose(float(pairs['--clip-norm']), 1.0)


def test_peak_memory_is_read_from_the_process_itself():
    """VmHWM of a running process (here this one, against its own rusage);
    None for a process that is gone."""
    import resource
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.
    assert marian.high_water_mb(os.getpid()) == pytest.approx(own, rel=0.05, abs=2)
    child = subprocess.Popen([sys.executable, '-c', ''])
    child.wait()
    assert marian.high_water_mb(child.pid) is None
