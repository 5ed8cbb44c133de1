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


def test_synchronous_mode_splits_each_batch():
    """Marian's asynchronous mode is its default; --sync-sgd the synchronous."""
    files = {k: k for k in ('train.src', 'train.trg', 'vocab.src.yml', 'vocab.trg.yml')}
    options = dict(n_words_src=20, n_words=30, dim_word=8, dim=12, batch_size=4,
                   maxlen=50, lrate=0.0004, clip_c=1.0)
    modes = dict(marian.MODES)
    assert set(modes) == {'asynchronous', 'synchronous'}
    commands = {mode: marian.training_command('pymarian', files, options, 2, 7, '/tmp/m', flags)
                for mode, flags in modes.items()}
    assert '--sync-sgd' not in commands['asynchronous']
    assert commands['synchronous'] == commands['asynchronous'] + ['--sync-sgd']


def test_each_timing_trains_a_new_model(tmp_path):
    """A model left in the folder by the run before is removed (Marian would
    resume it and train nothing), and the progress lines are read."""
    exe = tmp_path / 'fake-marian'
    lines = [PROGRESS % (i, up, 4 * up, 1.0, 100.) for i, up in enumerate((10, 20, 30))]
    exe.write_text('#!/bin/sh\n[ -e "%s" ] && echo "resumed" >&2\n%s\n' % (
        tmp_path / 'model.npz', '\n'.join("echo '%s' >&2" % line for line in lines)))
    exe.chmod(0o755)
    for name in ('model.npz', 'model.npz.optimizer.npz', 'model.npz.progress.yml'):
        (tmp_path / name).write_text('old')
    files = {k: k for k in ('train.src', 'train.trg', 'vocab.src.yml', 'vocab.trg.yml')}
    options = dict(n_words_src=20, n_words=30, dim_word=8, dim=12, batch_size=4,
                   maxlen=50, lrate=0.0004, clip_c=1.0)
    figures = marian.train_speed(str(exe), files, options, 1, 30, str(tmp_path), warmup=10,
                                 flags=['--sync-sgd'])
    assert not any(p.name.startswith('model.npz') for p in tmp_path.iterdir())
    assert figures['words_per_sec'] == 100.0 and figures['updates_timed'] == 20


def test_benchmark_compares_each_of_ours_with_each_of_marians_ways(monkeypatch):
    """On two threads both of Marian's modes are timed, and every rate of
    ours gets a ratio to each; on one thread Marian's only way."""
    from speed import benchmark
    speeds = {(): 400., ('--sync-sgd',): 500.}
    calls = []

    def fake_train_speed(exe, files, options, threads, updates, work, flags=()):
        calls.append((threads, tuple(flags)))
        return {'words_per_sec': speeds[tuple(flags)]}
    monkeypatch.setattr(marian, 'marian_command', lambda: 'pymarian')
    monkeypatch.setattr(marian, 'train_speed', fake_train_speed)
    options = dict(n_words_src=20, n_words=20)
    r = benchmark.compare_with_marian(options, _batches(), {'one': 800., 'two': 1000.}, 2)
    assert calls == [(2, ()), (2, ('--sync-sgd',))] and r['marian_threads'] == 2
    assert r['ratio_to_marian_words_per_sec'] == {
        'one': {'asynchronous': 2.0, 'synchronous': 1.6},
        'two': {'asynchronous': 2.5, 'synchronous': 2.0}}
    calls.clear()
    r = benchmark.compare_with_marian(options, _batches(), {'one': 800.}, 1)
    assert calls == [(1, ())] and list(r['marian']) == ['one_thread']


def test_marian_gets_this_process_threads(monkeypatch):
    """--threads (OMP_NUM_THREADS) when given, else every core, as BLAS."""
    from speed import benchmark
    from theano_platform import theano_env
    monkeypatch.setenv('OMP_NUM_THREADS', '3')
    assert benchmark.process_threads() == 3
    monkeypatch.delenv('OMP_NUM_THREADS')
    assert benchmark.process_threads() == theano_env.usable_cores()


def test_argument_lists_lose_an_option_and_its_value():
    from speed.benchmark import argv_without
    argv = ['train', '--workers', '2', '--marian', '--decoder=mean', '--updates', '3']
    assert argv_without(argv, '--workers', takes_value=True) == [
        'train', '--marian', '--decoder=mean', '--updates', '3']
    assert argv_without(argv, '--decoder', takes_value=True) == [
        'train', '--workers', '2', '--marian', '--updates', '3']
    assert argv_without(argv, '--marian') == [
        'train', '--workers', '2', '--decoder=mean', '--updates', '3']


def test_peak_memory_is_read_from_the_process_itself():
    """VmHWM of a running process (here this one, against its own rusage);
    None for a process that is gone."""
    import resource
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.
    assert marian.high_water_mb(os.getpid()) == pytest.approx(own, rel=0.05, abs=2)
    child = subprocess.Popen([sys.executable, '-c', ''])
    child.wait()
    assert marian.high_water_mb(child.pid) is None


# --------------------------------------------------------------------------
# decoding: our model as Marian's amun model

MARIAN_PYTHON = os.path.join(marian.ENV_DIR, 'bin', 'python')
SOURCES = ['a b c', 'd', 'e f g h a b', 'c c', 'b a d e', 'h g', 'f e d c b a', 'g']


def _tiny_model(directory, decoder=None, eos_bias=0.5, noise=0.3):
    """A random model with its dictionaries, written as nmt.py writes one
    (its weights and eos bias chosen so that most translations end, at
    different lengths)."""
    from machinery import vocab
    from machinery.training_state import save_model
    for name, words in (('src', 'a b c d e f g h'), ('trg', 'p q r s t u v w x y z')):
        mapping = {w: i for i, w in enumerate(['<eos>', 'UNK'] + words.split())}
        vocab.save_dictionary(mapping, str(directory / (name + '.pkl')),
                                 str(directory / (name + '.json')))
    options = nmt.fill_options(dict(dim_word=8, dim=8, n_words_src=10, n_words=13,
                                    dictionaries=['src.pkl', 'trg.pkl'],
                                    **(decoder or dict(decoder='gru_cond'))))
    numpy.random.seed(1)
    params = nmt.init_params(options)
    rng = numpy.random.RandomState(1)
    for k in params:
        params[k] = (params[k] + noise * rng.standard_normal(params[k].shape)).astype('float32')
    params['ff_logit_b'][0] += eos_bias
    save_model(str(directory / 'model.npz'), params, [], 0, options)
    return params, options


def test_amun_model_holds_dl4mts_parameters_under_marians_names(tmp_path):
    params, options = _tiny_model(tmp_path)
    amun = marian.amun_parameters(params, options)
    assert numpy.array_equal(amun['decoder_ff_logit_l2_Wt'], params['ff_logit_W'].T)
    assert 'ff_logit_W' not in amun and amun['decoder_c_tt'].shape == (1, 0)
    assert amun['ff_logit_b'].shape == (1, 13) and numpy.array_equal(amun['ff_logit_b'][0],
                                                                    params['ff_logit_b'])
    assert numpy.array_equal(amun['decoder_U_nl'], params['decoder_U_nl'])
    assert set(amun) == (set(params) | {'decoder_ff_logit_l2_Wt', 'special:model.yml'}) - {
        'ff_logit_W'}
    config = amun['special:model.yml'].tobytes().rstrip(b'\0').decode()
    assert 'type: amun' in config and 'dim-emb: 8' in config and 'dim-rnn: 8' in config
    assert 'dim-vocabs:\n  - 10\n  - 13\n' in config


def test_a_residual_decoder_has_no_amun_model(tmp_path):
    params, options = _tiny_model(tmp_path, dict(decoder='gru_cond_residual', residual='mean'))
    with pytest.raises(marian.MarianUnavailable, match='gru_cond_residual'):
        marian.amun_parameters(params, options)


def test_json_vocabulary_gives_eos_and_unk_marians_names(tmp_path):
    path = tmp_path / 'v.json'
    marian.write_json_vocabulary(str(path), {'eos': 0, 'UNK': 1, 'a"b': 2, 'c': 3}, 3)
    import json
    assert json.loads(path.read_text()) == {'</s>': 0, '<unk>': 1, 'a"b': 2}


@pytest.mark.skipif(not os.path.exists(MARIAN_PYTHON),
                    reason='Marian is not installed (speed/benchmark.py --marian installs it)')
def test_marians_decoder_translates_our_model_as_we_do(tmp_path):
    """Marian's own implementation of this model, given our parameters, finds
    the translations our batched search finds (beam 3, length-normalised), at
    two mini-batch sizes; sentences that reach a search's length limit (ours
    200 words, Marian's 3 x the source) are left out."""
    from speed import file_decoding
    from translation import decoding
    _tiny_model(tmp_path)
    dictionaries = [str(tmp_path / 'src.pkl'), str(tmp_path / 'trg.pkl')]
    models = decoding.load_models([str(tmp_path / 'model.npz')])
    ours, _, _ = file_decoding.ours(models, SOURCES, dictionaries[0], dictionaries[1], 3, 2)
    ended = [i for i, (s, t) in enumerate(zip(SOURCES, ours))
             if len(t.split()) < 3 * len(s.split())]
    assert len(ended) >= 6 and max(len(ours[i].split()) for i in ended) >= 2, ours
    _, options, params = models[0]
    runs = file_decoding.marians(options, params, SOURCES, dictionaries[0], dictionaries[1],
                                 3, [1, 4], 1)
    for mini_batch, run in runs.items():
        assert [run['outputs'][i] for i in ended] == [ours[i] for i in ended], mini_batch


@pytest.mark.parametrize('argv, message', [
    (['translate', '--model', 'm.npz'], '--source and --dictionaries'),
    (['train', '--model', 'm.npz', '--source', 's', '--dictionaries', 'a', 'b'],
     'translate mode'),
    (['translate', '--model', 'm.npz', '--source', 's', '--dictionaries', 'a', 'b',
      '--marian-mini-batches', '1,x'], 'numbers separated by commas'),
])
def test_file_decoding_options_are_checked(argv, message, capsys):
    from speed import benchmark
    with pytest.raises(SystemExit):
        benchmark.parse_args(argv)
    assert message in capsys.readouterr().err
