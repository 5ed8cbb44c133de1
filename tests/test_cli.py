"""The command lines end to end on tiny data: train, resume, translate, score,
and their errors on bad input.  One tiny model is trained once per module.
The programs compile with Theano's quick optimiser (tiny_runs.QUICK_ENV)."""
import os
import subprocess
import sys

import numpy
import pytest

from helpers import error_line
from tiny_runs import ROOT, PY, QUICK_ENV, SRC, TRAIN_FLAGS, make_corpus, run


@pytest.fixture(scope='module')
def workdir(tmp_path_factory):
    d = tmp_path_factory.mktemp('cli')
    make_corpus(d)
    # the reference run: 6 updates with validation every 3, saved every 2
    run([os.path.join(ROOT, 'nmt.py'), '--model', 'full.npz', '--finish_after', '6',
         '--saveFreq', '2', '--validFreq', '3', '--valid_datasets', 'valid.src',
         'valid.trg'] + TRAIN_FLAGS, cwd=d)
    return d


def test_training_writes_model_options_and_history(workdir):
    with numpy.load(workdir / 'full.npz') as f:
        assert int(f['uidx']) == 6
        assert len(f['history_errs']) == 2
        assert f['Wemb'].shape == (7, 4)
    sys.path.insert(0, ROOT)
    from machinery.model_io import load_options
    opts = load_options(str(workdir / 'full.npz'))
    assert opts['dim'] == 5 and opts['decoder'] == 'gru_cond' and opts['use_dropout']
    assert os.path.exists(workdir / 'full.npz.json')


def test_training_log_holds_every_step(workdir):
    """The training log of the reference run: its events in order."""
    from machinery.training_log import read_training_log
    events = read_training_log(str(workdir / 'full.npz.log.jsonl'))
    assert [(e['event'], e['uidx']) for e in events] == [
        ('start', 0), ('update', 1), ('update', 2), ('checkpoint', 2), ('update', 3),
        ('validation', 3), ('update', 4), ('checkpoint', 4), ('update', 5), ('update', 6),
        ('validation', 6), ('checkpoint', 6), ('stop', 6), ('end', 6)]
    with numpy.load(workdir / 'full.npz') as f:
        assert [e['cost'] for e in events if e['event'] == 'validation'] == \
            pytest.approx(list(f['history_errs']))
    assert events[-2]['reason'] == 'finish_after' and events[-1]['valid_cost'] > 0
    assert all(e['updates_per_second'] > 0 for e in events if e['event'] == 'update')
    # what the run's arithmetic depends on (theano_platform/machine.py)
    assert events[0]['workers'] == 1
    assert events[0]['machine']['vector_unit'] in ('avx512', 'avx2', 'avx', 'sse')
    assert events[0]['machine']['device'] == 'cpu' and events[0]['machine']['cores'] >= 1


def test_the_same_command_again_computes_the_same_numbers(workdir):
    """A second run of the reference command: analysis/compare_logs.py finds
    every cost identical to the last digit (training is deterministic for a
    seed on one machine, dropout included)."""
    run([os.path.join(ROOT, 'nmt.py'), '--model', 'again.npz', '--finish_after', '6',
         '--saveFreq', '2', '--validFreq', '3', '--valid_datasets', 'valid.src',
         'valid.trg'] + TRAIN_FLAGS, cwd=workdir)
    proc = subprocess.run([PY, os.path.join(ROOT, 'analysis', 'compare_logs.py'),
                           'full.npz.log.jsonl', 'again.npz.log.jsonl'], cwd=workdir,
                          stdout=subprocess.PIPE, universal_newlines=True)
    assert proc.returncode == 0, proc.stdout
    assert 'batch cost:' in proc.stdout and '6 in both,     6 the same' in proc.stdout
    assert 'machine: the same' in proc.stdout
    assert proc.stdout.splitlines()[-1].startswith('verdict: identical')


def test_resume_continues_exactly(workdir):
    """4 updates, then --reload to 6 == 6 updates without a stop (dropout on)."""
    run([os.path.join(ROOT, 'nmt.py'), '--model', 'part.npz', '--finish_after', '4',
         '--saveFreq', '2', '--validFreq', '3', '--valid_datasets', 'valid.src',
         'valid.trg'] + TRAIN_FLAGS, cwd=workdir)
    proc = run([os.path.join(ROOT, 'nmt.py'), '--model', 'part.npz', '--finish_after', '6',
                '--saveFreq', '2', '--validFreq', '3', '--valid_datasets', 'valid.src',
                'valid.trg', '--reload'] + TRAIN_FLAGS, cwd=workdir)
    assert 'Resuming at update 4' in proc.stdout
    with numpy.load(workdir / 'full.npz') as a, numpy.load(workdir / 'part.npz') as b:
        assert int(b['uidx']) == 6
        for k in a.files:
            numpy.testing.assert_array_equal(a[k], b[k], err_msg=k)
    # the resumed run appended to the log of the first one
    from machinery.training_log import read_training_log
    starts = [e for e in read_training_log(str(workdir / 'part.npz.log.jsonl'))
              if e['event'] == 'start']
    assert [(e['uidx'], e['reloaded']) for e in starts] == [(0, False), (4, True)]


def test_resume_with_shuffling_across_an_epoch_end(workdir):
    """Shuffled data, 9 batches an epoch: 11 updates, --reload to 13 == 13
    updates without a stop (the data position is restored, not replayed)."""
    flags = [f for f in TRAIN_FLAGS if f != '--no_shuffle'] + ['--saveFreq', '5']
    run([os.path.join(ROOT, 'nmt.py'), '--model', 'shuf_full.npz', '--finish_after', '13']
        + flags, cwd=workdir)
    run([os.path.join(ROOT, 'nmt.py'), '--model', 'shuf_part.npz', '--finish_after', '11']
        + flags, cwd=workdir)
    proc = run([os.path.join(ROOT, 'nmt.py'), '--model', 'shuf_part.npz', '--finish_after',
                '13', '--reload'] + flags, cwd=workdir)
    assert 'Resuming at update 11' in proc.stdout
    with numpy.load(workdir / 'shuf_full.npz') as a, \
            numpy.load(workdir / 'shuf_part.npz') as b:
        assert int(b['uidx']) == 13
        for k in a.files:
            numpy.testing.assert_array_equal(a[k], b[k], err_msg=k)


def test_translate_processes_agree_and_score_matches(workdir):
    run([os.path.join(ROOT, 'translate.py'), '-k', '3', '-n', '-p', '1', 'full.npz',
         'train.src.pkl', 'train.trg.pkl', 'valid.src', 'out1.txt',
         '--alignments', 'al.jsonl'], cwd=workdir)
    run([os.path.join(ROOT, 'translate.py'), '-k', '3', '-n', '-p', '2', 'full.npz',
         'train.src.pkl', 'train.trg.pkl', 'valid.src', 'out2.txt'], cwd=workdir)
    out1 = (workdir / 'out1.txt').read_text().split('\n')
    assert out1 == (workdir / 'out2.txt').read_text().split('\n')
    assert len(out1) == 4 and out1[-1] == ''
    vocab = set('x y z w v UNK'.split())
    assert all(set(line.split()) <= vocab for line in out1)

    # one attention row per output token (eos included) over source words + eos
    import json
    records = [json.loads(line) for line in (workdir / 'al.jsonl').read_text().split('\n')
               if line]
    assert [r['id'] for r in records] == [0, 1, 2]
    for r, src, out in zip(records, SRC[:3], out1):
        att = numpy.array(r['source_attention'])
        n_out = len(out.split())
        # one row per output token: + 1 for eos, or maxlen (200) rows when the
        # hypothesis was cut there unfinished
        finished = r['target'][-1:] == ['<eos>']
        assert att.shape == (n_out + 1 if finished else 200, len(src.split()) + 1)
        numpy.testing.assert_allclose(att.sum(1), 1, rtol=1e-5)
        assert r['source'] == src.split() + ['<eos>']
        assert r['target'][:n_out] == out.split() and len(r['target']) == len(att)
    run([os.path.join(ROOT, 'analysis', 'analyze.py'), 'matrix', 'al.jsonl', '--source', 'valid.src',
         '-i', '1', '--png', 'att.png'], cwd=workdir)
    assert (workdir / 'att.png').read_bytes()[:4] == b'\x89PNG'

    run([os.path.join(ROOT, 'score.py'), '-m', 'full.npz', '-s', 'valid.src', '-t',
         'valid.trg', '-o', 'costs.txt', '-b', '2'], cwd=workdir)
    costs = [float(c) for c in (workdir / 'costs.txt').read_text().split()]
    assert len(costs) == 3 and all(c > 0 for c in costs)
    # the mean of these is the final validation cost that training printed
    with numpy.load(workdir / 'full.npz') as f:
        assert numpy.isclose(numpy.mean(costs), min(f['history_errs']), rtol=1e-5)


def test_analyze_translates_a_model_and_refuses_the_baseline(workdir):
    """analyze.py given a model runs translate.py itself; the baseline decoder has
    source attention (matrix) but no attention over previous words (positions)."""
    model_args = ['full.npz', '--source', 'valid.src', '--dictionaries', 'train.src.pkl',
                  'train.trg.pkl', '-k', '2']
    run([os.path.join(ROOT, 'analysis', 'analyze.py'), 'matrix', '-i', '2', '--png', 'm.png']
        + model_args, cwd=workdir)
    assert (workdir / 'm.png').read_bytes()[:4] == b'\x89PNG'
    proc = run([os.path.join(ROOT, 'analysis', 'analyze.py'), 'positions', '--json', 'p.json']
               + model_args, cwd=workdir, check=False)
    error_line(proc, 'no target-side attention')
    assert not (workdir / 'p.json').exists()


def test_translate_stdin_stdout(workdir):
    proc = subprocess.run([PY, os.path.join(ROOT, 'translate.py'), '-k', '2', '-p', '1',
                           'full.npz', 'train.src.pkl', 'train.trg.pkl', '-', '-'],
                          cwd=workdir, input='a b\nc\n', capture_output=True, text=True,
                          env=QUICK_ENV)
    assert proc.returncode == 0, proc.stderr
    assert len(proc.stdout.split('\n')) == 3


@pytest.mark.parametrize('case', ['missing', 'empty', 'not_utf8'])
def test_translate_bad_source(workdir, case):
    src = workdir / ('bad_%s.src' % case)
    if case == 'empty':
        src.write_text('')
    elif case == 'not_utf8':
        src.write_bytes(b'a b\n\xff\xfe c\n')
    out = workdir / ('bad_%s.out' % case)
    proc = run([os.path.join(ROOT, 'translate.py'), '-p', '1', 'full.npz',
                'train.src.pkl', 'train.trg.pkl', str(src), str(out)],
               cwd=workdir, check=False)
    error_line(proc, src.name, *(['line 2'] if case == 'not_utf8' else []))
    assert not out.exists()


def test_score_line_count_mismatch(workdir):
    proc = run([os.path.join(ROOT, 'score.py'), '-m', 'full.npz', '-s', 'valid.src',
                '-t', 'train.trg', '-o', 'never.txt'], cwd=workdir, check=False)
    assert proc.returncode == 1
    assert 'valid.src' in proc.stderr and 'train.trg' in proc.stderr
    assert not (workdir / 'never.txt').exists()


def test_train_line_count_mismatch_and_unknown_option(workdir):
    proc = run([os.path.join(ROOT, 'nmt.py'), '--model', 'x.npz', '--datasets',
                'valid.src', 'train.trg', '--dictionaries', 'train.src.pkl',
                'train.trg.pkl'], cwd=workdir, check=False)
    assert proc.returncode == 1 and 'error:' in proc.stderr and 'valid.src' in proc.stderr
    proc = run([os.path.join(ROOT, 'nmt.py'), '--model', 'x.npz', '--datasets',
                'train.src', 'train.trg', '--dictionaries', 'train.src.pkl',
                'train.trg.pkl', '--no_such_option', '3'], cwd=workdir, check=False)
    assert proc.returncode == 2 and 'no_such_option' in proc.stderr
    assert not (workdir / 'x.npz').exists()


def test_model_that_does_not_match_its_options(workdir):
    """A model file whose options say another size is refused by name."""
    import shutil
    shutil.copy(workdir / 'full.npz', workdir / 'wrong.npz')
    sys.path.insert(0, ROOT)
    from machinery.model_io import load_options, save_options
    opts = load_options(str(workdir / 'full.npz'))
    opts['dim_word'] = 6
    save_options(opts, str(workdir / 'wrong.npz'))
    proc = run([os.path.join(ROOT, 'translate.py'), '-p', '1', 'wrong.npz',
                'train.src.pkl', 'train.trg.pkl', 'valid.src', 'w.out'],
               cwd=workdir, check=False)
    assert proc.returncode == 1
    assert 'wrong.npz' in proc.stderr and 'Wemb' in proc.stderr
    assert not (workdir / 'w.out').exists()


def test_nan_cost_stops_with_error_and_keeps_checkpoint(workdir):
    import shutil
    for suffix in ('', '.pkl', '.json'):
        shutil.copy(str(workdir / 'full.npz') + suffix, str(workdir / 'nan.npz') + suffix)
    with numpy.load(workdir / 'nan.npz') as f:
        arrays = {k: f[k] for k in f.files}
    arrays['ff_logit_b'] = numpy.full_like(arrays['ff_logit_b'], numpy.nan)
    numpy.savez(workdir / 'nan.npz', **arrays)
    before = (workdir / 'nan.npz').read_bytes()
    proc = run([os.path.join(ROOT, 'nmt.py'), '--model', 'nan.npz', '--finish_after',
                '9', '--saveFreq', '100', '--reload'] + TRAIN_FLAGS,
               cwd=workdir, check=False)
    assert proc.returncode == 1
    assert proc.stderr.strip().split('\n')[-1].startswith('error: NaN')
    assert (workdir / 'nan.npz').read_bytes() == before


def test_a_reader_that_goes_away_ends_a_filter_quietly(tmp_path):
    """`... | head`: the command stops with status 141 (SIGPIPE's), no message."""
    source = tmp_path / 'in.txt'
    source.write_text('das ist ein satz .\n' * 200000)
    with open(source) as stdin:
        proc = subprocess.Popen([PY, os.path.join(ROOT, 'pipeline', 'preprocess.py'),
                                 'postprocess', '--lang', 'en'], stdin=stdin,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert proc.stdout.readline() == b'Das ist ein satz.\n'
        proc.stdout.close()
        err = proc.stderr.read()
        assert proc.wait(timeout=120) == 141
    assert err == b''


def _option_actions(parser):
    return [a for a in parser._actions if a.option_strings and a.dest != 'help']


def test_help_explains_every_option_in_its_group():
    """nmt.py --help and lm.py train --help: every option has a line that says
    what it does (not its default alone), under one of the groups."""
    import argparse
    import nmt
    from machinery import option_schema
    from language_model import lm
    sub = argparse.ArgumentParser().add_subparsers()
    lm._train_parser(sub)
    for parser in (nmt.argument_parser(), sub.choices['train']):
        actions = _option_actions(parser)
        assert len(actions) > 30
        for action in actions:
            assert action.help and not action.help.startswith('(default'), action.dest
        grouped = {a.dest for g in parser._action_groups if g.title in option_schema.GROUPS
                   for a in g._group_actions}
        assert {a.dest for a in actions if a.dest != 'config'} <= grouped
    text = nmt.argument_parser().format_help()
    assert 'validation and early stopping:\n' in text
    assert '--alpha_c ALPHA_C     attention regulariser' in text


def test_a_flag_is_taken_in_either_spelling():
    """--batch_size for translate.py's --batch-size, --dim-word for nmt.py's
    --dim_word; what follows '--' is left as it is."""
    import nmt
    import translate
    args = translate.parse_args(['--batch_size', '3', 'm.npz', 'a.pkl', 'b.pkl', 'in', 'out'])
    assert args.batch_size == 3
    parsed = nmt.parse_args(['--model', 'm.npz', '--datasets', 'a', 'b', '--dictionaries',
                             'c', 'd', '--dim-word=7', '--valid-datasets', 'e', 'f'])
    assert parsed['dim_word'] == 7 and parsed['valid_datasets'] == ['e', 'f']


@pytest.mark.parametrize('name', ['bleu_valid_beam', 'bleu_valid_maxlen'])
def test_the_validation_search_takes_positive_sizes(name):
    """The validation BLEU's beam and longest output: 1 is taken, 0 refused
    in one line naming the flag."""
    from machinery.text_io import InputError
    from nmt_training import OPTIONS
    OPTIONS.check_values(OPTIONS.fill({name: 1}), [name])
    with pytest.raises(InputError, match='--%s must be at least 1, not 0' % name):
        OPTIONS.check_values(OPTIONS.fill({name: 0}), [name])
