"""train_es-en.sh, train_en-de.sh, train_en-zh.sh (through pipeline/train_pair.py)."""
import json
import os
import shlex
import subprocess
import sys

import pytest

import layers

from helpers import ROOT, run_command

SCRIPTS = {  # script: (source, target, vocabulary)
    'train_es-en.sh': ('es', 'en', 50000),
    'train_en-de.sh': ('en', 'de', 50000),
    'train_en-zh.sh': ('en', 'zh', 25000),
}
NO_VALUE = {'--use_dropout', '--reload', '--restart', '--no_shuffle', '--overwrite'}
MULTI = {'--datasets': 2, '--dictionaries': 2, '--valid_datasets': 2}


def run_script(script, *args, cwd=None):
    return run_command(script, args, cwd=cwd, python=False)


def nmt_command(stdout):
    """The nmt.py command line printed by --dry-run, parsed into a dict."""
    lines = stdout.splitlines()
    cmd = shlex.split(lines[lines.index('# train') + 1])
    assert cmd[1].endswith('nmt.py')
    flags, i = {}, 2
    while i < len(cmd):
        key = cmd[i]
        assert key.startswith('--'), cmd[i:]
        if key in NO_VALUE:
            flags[key[2:]] = True
            i += 1
        else:
            n = MULTI.get(key, 1)
            value = cmd[i + 1:i + 1 + n]
            assert key[2:] not in flags, 'flag given twice: %s' % key
            flags[key[2:]] = value[0] if n == 1 else value
            i += 1 + n
    return flags


@pytest.mark.parametrize('script', sorted(SCRIPTS))
def test_dry_run_papers_settings(script, tmp_path):
    src, trg, vocab = SCRIPTS[script]
    data = str(tmp_path / 'data')
    proc = run_script(script, '--dry-run', 'baseline', data, str(tmp_path / 'model'))
    assert proc.returncode == 0, proc.stderr
    f = nmt_command(proc.stdout)
    assert f['dim'] == '1024' and f['dim_word'] == '500'
    assert f['n_words'] == f['n_words_src'] == str(vocab)
    assert f['maxlen'] == '50'
    assert f['batch_size'] == '80' and f['valid_batch_size'] == '80'
    assert f['optimizer'] == 'adadelta'
    assert f['use_dropout'] is True
    assert float(f['clip_c']) == 1.0
    assert f['patience'] == '10'
    assert f['validFreq'] == '5000' and f['saveFreq'] == '10000'
    assert f['model'] == str(tmp_path / 'model' / 'model.npz')
    assert f['datasets'] == [os.path.join(data, 'train.bpe.' + src),
                             os.path.join(data, 'train.bpe.' + trg)]
    assert f['dictionaries'] == [os.path.join(data, 'train.bpe.%s.pkl' % src),
                                 os.path.join(data, 'train.bpe.%s.pkl' % trg)]
    assert f['valid_datasets'] == [os.path.join(data, 'dev.bpe.' + src),
                                   os.path.join(data, 'dev.bpe.' + trg)]
    # BLEU validation on the dev set, against the tokenised pre-BPE reference
    assert int(f['bleu_valid_freq']) > 0
    assert f['bleu_valid_ref'] == os.path.join(data, 'dev.tok.' + trg)
    assert f['bleu_valid_postprocess'] == "sed -r 's/(@@ )|(@@ ?$)//g'"
    assert 'finish_after' not in f
    # the BPE-undo command really undoes BPE
    undo = subprocess.run(f['bleu_valid_postprocess'], shell=True, text=True,
                          input='the Fuß@@ gän@@ ger @-@ Ampel\nend@@\n',
                          capture_output=True).stdout
    assert undo == 'the Fußgänger @-@ Ampel\nend\n'


@pytest.mark.parametrize('decoder', list(layers.VARIANTS))
def test_decoder_mapping(decoder, tmp_path):
    """The flags the script gives nmt.py build the variant it was asked for."""
    import nmt
    proc = run_script('train_es-en.sh', '--dry-run', decoder, str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    f = nmt_command(proc.stdout)
    options = nmt.fill_options({k: f[k] for k in ('decoder', 'residual', 'att_scoring')
                                if k in f})
    variant, scoring = layers.variant_of(options)
    name, _, other_scoring = decoder.partition('-')
    assert variant.name == name
    default_scoring = variant.scorings[0] if variant.scorings else None
    assert scoring == (other_scoring or default_scoring)


def test_default_model_dir_and_extra_flags(tmp_path):
    proc = run_script('train_en-de.sh', '--dry-run', 'mean', str(tmp_path / 'd'), '--',
                      '--reload', '--max_epochs', '3', cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    f = nmt_command(proc.stdout)
    assert f['model'] == os.path.join('runs', 'en-de', 'mean', 'model.npz')
    assert f['reload'] is True and f['max_epochs'] == '3'
    # the test-set step translates with the trained model
    assert 'translate.py -k 5 -n' in proc.stdout


def test_tiny_dry_run(tmp_path):
    proc = run_script('train_es-en.sh', '--dry-run', '--tiny', 'attentive',
                      str(tmp_path / 'data'), str(tmp_path / 'model'))
    assert proc.returncode == 0, proc.stderr
    assert 'toy_corpus.py generate' in proc.stdout          # makes its data
    assert 'preprocess.py prepare --src-lang es --trg-lang en' in proc.stdout
    f = nmt_command(proc.stdout)
    assert f['dim_word'] == '16' and f['dim'] == '24' and f['batch_size'] == '16'
    assert f['finish_after'] == '60' and f['validFreq'] == '30'
    assert f['saveFreq'] == '30' and int(f['bleu_valid_freq']) > 0
    assert f['maxlen'] == '50'
    assert not os.path.exists(tmp_path / 'data')            # dry run writes nothing


@pytest.mark.parametrize('script', sorted(SCRIPTS))
def test_bad_decoder(script, tmp_path):
    proc = run_script(script, '--dry-run', 'transformer', str(tmp_path))
    assert proc.returncode == 2
    assert proc.stdout == ''
    assert proc.stderr.startswith("error: unknown decoder 'transformer' (choose from "
                                  "%s) (%s --help" % (', '.join(layers.VARIANTS), script))
    assert len(proc.stderr.strip().splitlines()) == 1
    assert 'attentive-dot' in proc.stderr and 'memory-content_scope' in proc.stderr


@pytest.mark.parametrize('script', sorted(SCRIPTS))
def test_help_names_the_script_and_its_own_options(script):
    proc = run_script(script, '--help')
    assert proc.returncode == 0
    assert proc.stdout.startswith('usage: %s [-h] [--dry-run] [--tiny] DECODER DATA_DIR'
                                  % script), proc.stdout
    assert '--src-lang' not in proc.stdout and 'train_pair' not in proc.stdout


def test_missing_data_is_an_error(tmp_path):
    proc = run_script('train_es-en.sh', 'baseline', str(tmp_path / 'none'),
                      str(tmp_path / 'model'))
    assert proc.returncode == 1
    assert proc.stderr.startswith('error: %s: no such file'
                                  % os.path.join(str(tmp_path / 'none'), 'train.bpe.es'))
    assert not os.path.exists(tmp_path / 'model')


TINY_RUNS = [('es-en', 'es', 'en', 'attentive', 'Self-attentive residual connections'),
             ('en-de', 'en', 'de', 'baseline', 'NMT baseline'),
             ('en-zh', 'en', 'zh', 'mean', 'Mean residual connections')]


@pytest.mark.slow
@pytest.mark.parametrize('pair,src,trg,decoder,label', TINY_RUNS)
def test_tiny_end_to_end(tmp_path, pair, src, trg, decoder, label):
    data, model = tmp_path / 'data', tmp_path / 'model'
    proc = subprocess.run([os.path.join(ROOT, 'train_%s.sh' % pair), '--tiny', decoder,
                           str(data), str(model)], capture_output=True, text=True,
                          timeout=1500)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    for name in ('train.bpe.%s' % src, 'train.bpe.%s' % trg, 'dev.tok.%s' % trg,
                 'test.tok.%s' % trg, 'train.bpe.%s.pkl' % src, 'train.bpe.%s.pkl' % trg):
        assert (data / name).exists(), name
    assert (model / 'model.npz').exists()
    assert 'BLEU' in proc.stdout  # BLEU validation ran during training
    result = json.load(open(model / 'bleu.json'))
    assert result['pair'] == pair and result['decoder'] == decoder
    assert 0.0 <= result['bleu'] <= 100.0
    assert len((model / 'test.hyp.tok').read_text().splitlines()) == 50
    # the finished run feeds evaluation/results_table.py
    table = subprocess.run([sys.executable, os.path.join(ROOT, 'evaluation', 'results_table.py'),
                            str(model)], capture_output=True, text=True)
    assert table.returncode == 0, table.stderr
    assert '| %s |' % label in table.stdout


@pytest.mark.parametrize('stage', ['unfinished', 'unfinished_restart', 'trained', 'scored'])
def test_a_model_dir_that_holds_a_run_is_taken_up_where_it_stands(tmp_path, stage):
    """MODEL_DIR with an unfinished run: nmt.py resumes it (--reload; not
    when the extra flags say --restart); with a trained one (its log ends
    the run): no training, the test set is translated; with its bleu.json:
    nothing to do, said in one line."""
    model = tmp_path / 'model'
    model.mkdir()
    (model / 'model.npz.resume.npz').write_bytes(b'')
    events = [{'event': 'start', 'uidx': 0}, {'event': 'update', 'uidx': 5}]
    if stage in ('trained', 'scored'):
        (model / 'model.npz').write_bytes(b'')
        events.append({'event': 'end', 'uidx': 5})
    (model / 'model.npz.log.jsonl').write_text(''.join(json.dumps(e) + '\n' for e in events))
    if stage == 'scored':
        (model / 'bleu.json').write_text('{}')
    extra = ['--', '--restart'] if stage == 'unfinished_restart' else []
    proc = run_script('train_es-en.sh', '--dry-run', 'baseline', str(tmp_path / 'data'),
                      str(model), *extra)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    path = os.path.join(str(model), 'model.npz')
    if stage == 'scored':
        assert lines == ['# %s: finished already (its bleu.json is written): nothing to do; to '
                         'train again, give another MODEL_DIR' % model]
    elif stage == 'trained':
        assert lines[0] == ('# %s: trained already (its training log ends the run): '
                            'translating and scoring the test set' % path)
        assert '# train' not in lines and 'translate.py' in proc.stdout
    elif extra:     # --restart: the run moves aside, no --reload
        assert lines[0] == '# train' and nmt_command(proc.stdout).get('reload') is None
    else:
        assert lines[0] == '# %s: an unfinished run: nmt.py --reload continues it' % path
        assert nmt_command(proc.stdout)['reload'] is True
