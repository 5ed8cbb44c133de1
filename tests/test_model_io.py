"""Tests for model_io: Python-2 pickles, dictionaries, options, parameters."""
import collections
import glob
import json
import os
import pickle
import pickletools
import shutil
import struct
import subprocess
import warnings

import numpy
import pytest

from machinery import model_io, output_files, pickle_and_json, vocab
from machinery.text_io import InputError


# --------------------------------------------------------------------------
# Python-2 pickles, byte for byte
# --------------------------------------------------------------------------

def sbs(data):
    """SHORT_BINSTRING: how Python 2 pickles a str (bytes) of < 256 bytes."""
    return b'U' + bytes([len(data)]) + data


def binint(value):
    """BININT1 / BININT (the smallest form, as Python 2 chooses)."""
    if 0 <= value < 256:
        return b'K' + bytes([value])
    return b'J' + struct.pack('<i', value)


def py2_numpy_float64(value):
    """A numpy.float64 scalar as Python-2 numpy pickles it (protocol 2):
    scalar(dtype('f8', 0, 1) with state (3, '<', ...), raw 8 bytes)."""
    dtype = (b'cnumpy\ndtype\n' + sbs(b'f8') + binint(0) + binint(1)
             + b'\x87R'                                   # TUPLE3 REDUCE
             + b'(' + binint(3) + sbs(b'<') + b'NNN' + binint(-1)
             + binint(-1) + binint(0) + b'tb')            # state, BUILD
    return (b'cnumpy.core.multiarray\nscalar\n' + dtype
            + sbs(struct.pack('<d', value)) + b'\x86R')   # TUPLE2 REDUCE


def py2_ordered_dict(items):
    """OrderedDict as Python 2.7 pickles it with protocol 2:
    OrderedDict([[k, v], ...]) through GLOBAL / REDUCE."""
    body = b''
    for key, value in items:
        body += b']' + b'(' + sbs(key) + binint(value) + b'e'  # [k, v]
    return (b'\x80\x02ccollections\nOrderedDict\n' + b']' + b'(' + body
            + b'e' + b'\x85R.')                       # TUPLE1 REDUCE STOP


# Written by Python 2.7.18 cPickle.dumps(d, 2) for
# OrderedDict([('eos', 0), ('UNK', 1), ('caf\xc3\xa9', 2), ('x', 300)]).
PY2_DICT_P2 = (b'\x80\x02ccollections\nOrderedDict\nq\x01]q\x02(]q\x03(U\x03eos'
               b'q\x04K\x00e]q\x05(U\x03UNKq\x06K\x01e]q\x07(U\x05caf\xc3\xa9q'
               b'\x08K\x02e]q\t(U\x01xM,\x01ee\x85Rq\n.')
# The same with cPickle.dumps(d) (protocol 0, the original script's default).
PY2_DICT_P0 = (b"ccollections\nOrderedDict\np1\n((lp2\n(lp3\nS'eos'\np4\naI0\naa"
               b"(lp5\nS'UNK'\np6\naI1\naa(lp7\nS'caf\\xc3\\xa9'\np8\naI2\naa"
               b"(lp9\nS'x'\naI300\naatRp10\n.")
# cPickle.dumps(options) (protocol 0) for a small options dict.
PY2_OPTIONS_P0 = (b"(dp1\nS'dim'\np2\nI1024\nsS'use_dropout'\np3\nI00\nsS'lrate'"
                  b"\np4\nF0.0001\nsS'datasets'\np5\n(lp6\nS'a.en'\np7\naS'b.fr'"
                  b"\np8\nasS'encoder'\np9\nS'gru'\np10\ns.")

EXPECTED_DICT = [('eos', 0), ('UNK', 1), ('caf\u00e9', 2), ('x', 300)]


def write(path, data):
    with open(path, 'wb') as f:
        f.write(data)
    return str(path)


def test_hand_assembled_py2_dictionary_matches_python2_bytes():
    hand = py2_ordered_dict([(b'eos', 0), (b'UNK', 1),
                             ('caf\u00e9'.encode('utf-8'), 2), (b'x', 300)])
    # Same objects as the real Python-2 bytes (which also carry memo puts).
    assert pickle.loads(hand, encoding='bytes') == \
        pickle.loads(PY2_DICT_P2, encoding='bytes')


@pytest.mark.parametrize('data', [PY2_DICT_P2, PY2_DICT_P0],
                         ids=['protocol2', 'protocol0'])
def test_load_python2_dictionary(tmp_path, data):
    d = vocab.load_dictionary(write(tmp_path / 'vocab.pkl', data))
    assert isinstance(d, collections.OrderedDict)
    assert list(d.items()) == EXPECTED_DICT
    assert all(type(k) is str for k in d)
    assert d['caf\u00e9'] == 2


def test_load_python2_options_with_numpy_scalar(tmp_path):
    data = (b'\x80\x02}(' + sbs(b'dim') + binint(1024)
            + sbs(b'encoder') + sbs(b'gru')
            + sbs(b'decoder') + sbs(b'gru_cond')
            + sbs(b'lrate') + py2_numpy_float64(0.0001)
            + sbs(b'use_dropout') + b'\x89'
            + sbs(b'datasets') + b']' + b'(' + sbs(b'a.en') + sbs(b'b.fr')
            + b'e' + sbs(b'word') + sbs('caf\u00e9'.encode('utf-8'))
            + b'u.')
    write(tmp_path / 'model.npz.pkl', data)
    opts = model_io.load_options(str(tmp_path / 'model.npz'))
    assert opts['dim'] == 1024
    assert opts['encoder'] == 'gru' and type(opts['encoder']) is str
    assert opts['decoder'] == 'gru_cond'
    assert isinstance(opts['lrate'], numpy.float64)
    assert opts['lrate'] == 0.0001
    assert opts['use_dropout'] is False
    assert opts['datasets'] == ['a.en', 'b.fr']
    assert opts['word'] == 'caf\u00e9'
    assert all(type(k) is str for k in opts)


def test_load_python2_options_protocol0(tmp_path):
    write(tmp_path / 'm.npz.pkl', PY2_OPTIONS_P0)
    opts = model_io.load_options(str(tmp_path / 'm.npz'))
    assert opts == {'dim': 1024, 'use_dropout': False, 'lrate': 0.0001,
                    'datasets': ['a.en', 'b.fr'], 'encoder': 'gru'}


def test_load_pickle_latin1_fallback_and_nesting(tmp_path):
    obj = {b'k': (b'\xff\xfe', [b'caf\xc3\xa9', 3]),
           b'od': collections.OrderedDict([(b'b', 1), (b'a', 2)])}
    p = write(tmp_path / 'x.pkl', pickle.dumps(obj, protocol=2))
    out = pickle_and_json.load_pickle(p)
    assert out['k'] == ('\u00ff\u00fe', ['caf\u00e9', 3])
    assert isinstance(out['od'], collections.OrderedDict)
    assert list(out['od'].items()) == [('b', 1), ('a', 2)]


def test_load_python3_pickle(tmp_path):
    d = collections.OrderedDict([('eos', 0), ('UNK', 1), ('\u4e2d', 2)])
    p = write(tmp_path / 'v.pkl', pickle.dumps(d, protocol=4))
    assert list(vocab.load_dictionary(p).items()) == list(d.items())


# --------------------------------------------------------------------------
# Dictionaries
# --------------------------------------------------------------------------

def test_save_dictionary_pickle_is_python2_compatible(tmp_path):
    d = collections.OrderedDict([('eos', 0), ('UNK', 1), ('caf\u00e9', 2),
                                 ('', 3), ('x', 4)])
    pkl, js = str(tmp_path / 'v.pkl'), str(tmp_path / 'v.json')
    vocab.save_dictionary(d, pkl, js)
    with open(pkl, 'rb') as f:
        data = f.read()
    ops = list(pickletools.genops(data))
    assert ops[0][0].name == 'PROTO' and ops[0][1] == 2
    assert max(op.proto for op, _, _ in ops) <= 2
    globals_ = [arg for op, arg, _ in ops if op.name == 'GLOBAL']
    assert 'collections OrderedDict' in globals_
    assert '_codecs encode' in globals_        # bytes keys, protocol-2 style
    unicode_args = [arg for op, arg, _ in ops if 'UNICODE' in op.name]
    # The UTF-8 bytes travel as a latin-1 string, to be re-encoded.
    assert 'caf\u00c3\u00a9' in unicode_args
    raw = pickle.loads(data, encoding='bytes')
    assert list(raw.items()) == [(b'eos', 0), (b'UNK', 1),
                                 (b'caf\xc3\xa9', 2), (b'', 3), (b'x', 4)]
    assert all(type(v) is int for v in raw.values())
    assert list(vocab.load_dictionary(pkl).items()) == list(d.items())


def test_save_dictionary_json_in_id_order(tmp_path):
    d = {'b': 3, 'eos': 0, 'caf\u00e9': 2, 'UNK': 1}
    pkl, js = str(tmp_path / 'v.pkl'), str(tmp_path / 'v.json')
    vocab.save_dictionary(d, pkl, js)
    with open(js, encoding='utf-8') as f:
        text = f.read()
    assert 'caf\u00e9' in text                      # ensure_ascii=False
    loaded = json.loads(text, object_pairs_hook=collections.OrderedDict)
    assert list(loaded.items()) == [('eos', 0), ('UNK', 1), ('caf\u00e9', 2),
                                    ('b', 3)]
    assert vocab.load_dictionary(js) == d


@pytest.mark.parametrize('name,content,fragment', [
    ('missing.pkl', None, 'no such file'),
    ('empty.pkl', b'', 'empty'),
    ('bad.pkl', b'this is not a pickle', 'not a readable pickle'),
    ('missing.json', None, 'no such file'),
    ('empty.json', b'', 'empty'),
    ('bad.json', b'{"a": 1,', 'not valid JSON'),
    ('list.json', b'[1, 2]', 'expected a dictionary'),
])
def test_load_dictionary_errors(tmp_path, name, content, fragment):
    path = tmp_path / name
    if content is not None:
        write(path, content)
    with pytest.raises(InputError) as e:
        vocab.load_dictionary(str(path))
    msg = str(e.value)
    assert str(path) in msg and fragment in msg and '\n' not in msg


# --------------------------------------------------------------------------
# Options
# --------------------------------------------------------------------------

def test_options_round_trip(tmp_path):
    opts = {'dim': 1024, 'dim_word': 500, 'encoder': 'gru',
            'decoder': 'gru_cond', 'lrate': numpy.float64(0.0001),
            'use_dropout': False, 'datasets': ('a.en', 'b.fr'),
            'n_words': numpy.int64(30000), 'reload_': True}
    model = str(tmp_path / 'model.npz')
    model_io.save_options(opts, model)
    with open(model + '.pkl', 'rb') as f:
        data = f.read()
    assert data[:2] == b'\x80\x02'
    assert type(pickle.loads(data)) is dict
    assert model_io.load_options(model) == opts
    with open(model + '.json', encoding='utf-8') as f:
        js = json.load(f)
    assert js['datasets'] == ['a.en', 'b.fr']
    assert js['lrate'] == 0.0001 and js['n_words'] == 30000
    assert list(js) == sorted(js)
    # Without the pickle the JSON is used.
    os.unlink(model + '.pkl')
    got = model_io.load_options(model)
    assert got['n_words'] == 30000 and got['encoder'] == 'gru'


# dl4mt-tutorial's train() keyword arguments in their order (diag_c aside:
# dl4mt never reads it, and this project does not keep it)
DL4MT_TRAIN_ARGUMENTS = [
    'dim_word', 'dim', 'encoder', 'decoder', 'patience', 'max_epochs', 'finish_after',
    'dispFreq', 'decay_c', 'alpha_c', 'clip_c', 'lrate', 'n_words_src', 'n_words', 'maxlen',
    'optimizer', 'batch_size', 'valid_batch_size', 'saveto', 'validFreq', 'saveFreq',
    'sampleFreq', 'datasets', 'valid_datasets', 'dictionaries', 'use_dropout', 'reload_',
    'overwrite']


def test_a_models_options_begin_with_dl4mts_in_their_order(tmp_path):
    """nmt.py's options are declared beside the code that reads them
    (machinery/option_schema.py), yet a model file's pickle lists them as the
    original code's does: dl4mt's train() arguments first, in their order."""
    import nmt
    model = str(tmp_path / 'model.npz')
    model_io.save_options(nmt.fill_options({'decoder': 'gru_cond_residual'}), model)
    with open(model + '.pkl', 'rb') as f:
        keys = list(pickle.load(f))
    assert keys[:len(DL4MT_TRAIN_ARGUMENTS)] == DL4MT_TRAIN_ARGUMENTS
    assert len(keys) == len(set(keys))


def test_load_options_missing(tmp_path):
    model = str(tmp_path / 'model.npz')
    with pytest.raises(InputError) as e:
        model_io.load_options(model)
    assert model + '.pkl' in str(e.value)


# --------------------------------------------------------------------------
# Atomic writes
# --------------------------------------------------------------------------

def test_atomic_write_failure_leaves_nothing(tmp_path):
    target = tmp_path / 'out.bin'

    def fail(f):
        f.write(b'partial')
        raise RuntimeError('boom')

    with pytest.raises(RuntimeError):
        output_files.atomic_write(str(target), fail)
    assert not target.exists()
    assert os.listdir(str(tmp_path)) == []


def test_atomic_write_failure_keeps_old_file(tmp_path):
    target = tmp_path / 'out.txt'
    target.write_text('old')

    def fail(f):
        f.write('new')
        raise ValueError('boom')

    with pytest.raises(ValueError):
        output_files.atomic_write(str(target), fail, mode='w')
    assert target.read_text() == 'old'
    assert os.listdir(str(tmp_path)) == ['out.txt']


def test_atomic_write_text_and_mode(tmp_path):
    target = tmp_path / 'out.txt'
    output_files.atomic_write(str(target), lambda f: f.write('caf\u00e9\n'), 'w')
    assert target.read_bytes() == b'caf\xc3\xa9\n'
    umask = os.umask(0)
    os.umask(umask)
    assert os.stat(str(target)).st_mode & 0o777 == 0o666 & ~umask


def test_atomic_write_to_a_pipe_writes_into_it(tmp_path):
    """A path that is not a regular file (a pipe here, /dev/null in use) stays what
    it is: renaming a temporary file onto it would replace it."""
    import stat
    import threading
    fifo = str(tmp_path / 'pipe')
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(open(fifo, 'rb').read()),
                              daemon=True)
    reader.start()
    output_files.atomic_write(fifo, lambda f: f.write('caf\u00e9\n'), 'w')
    reader.join(timeout=10)
    assert got == [b'caf\xc3\xa9\n']
    assert stat.S_ISFIFO(os.stat(fifo).st_mode) and os.listdir(str(tmp_path)) == ['pipe']


def test_atomic_savez_keeps_name(tmp_path):
    path = str(tmp_path / 'model.iter10')
    model_io.atomic_savez(path, a=numpy.arange(3))
    assert os.listdir(str(tmp_path)) == ['model.iter10']
    with numpy.load(path) as z:
        assert z['a'].tolist() == [0, 1, 2]


# --------------------------------------------------------------------------
# Parameters
# --------------------------------------------------------------------------

def make_params():
    return collections.OrderedDict([
        ('Wemb', numpy.zeros((40, 8), dtype='float32')),
        ('encoder_b', numpy.zeros(16, dtype='float32')),
        ('decoder_c_tt', numpy.ones(1, dtype='float32')),
    ])


def test_load_params(tmp_path):
    path = str(tmp_path / 'model.npz')
    wemb = numpy.arange(320, dtype='float64').reshape(40, 8)
    numpy.savez(path, Wemb=wemb, encoder_b=numpy.ones(16),
                extra=numpy.zeros(2), history_errs=numpy.array([0.5, 0.25]),
                uidx=numpy.array(42),
                zipped_params=numpy.array([{'a': 1}], dtype=object))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        params = model_io.load_params(path, make_params())
    assert [str(w.message) for w in caught] == \
        ['decoder_c_tt is not in the archive']
    assert list(params) == ['Wemb', 'encoder_b', 'decoder_c_tt']
    assert params['Wemb'].dtype == numpy.float32
    assert numpy.array_equal(params['Wemb'], wemb.astype('float32'))
    assert params['encoder_b'].tolist() == [1.0] * 16
    assert params['decoder_c_tt'].tolist() == [1.0]       # init value kept
    assert model_io.load_archive_extras(path) == \
        {'history_errs': [0.5, 0.25], 'uidx': 42}


def test_load_archive_extras_defaults(tmp_path):
    path = str(tmp_path / 'model.npz')
    numpy.savez(path, Wemb=numpy.zeros((2, 2)))
    assert model_io.load_archive_extras(path) == {'history_errs': [],
                                                  'uidx': 0}


def test_load_params_shape_mismatch(tmp_path):
    path = str(tmp_path / 'model.npz')
    numpy.savez(path, Wemb=numpy.zeros((30, 8)))
    with pytest.raises(InputError) as e:
        model_io.load_params(path, make_params())
    assert str(e.value) == (
        '%s: parameter Wemb has shape (30, 8) but the options say (40, 8): '
        'model and options/dictionaries do not match' % path)


@pytest.mark.parametrize('content,fragment', [
    (None, 'no such file'), (b'', 'empty'), (b'garbage', 'not a readable')])
def test_load_params_bad_archive(tmp_path, content, fragment):
    path = tmp_path / 'model.npz'
    if content is not None:
        write(path, content)
    with pytest.raises(InputError) as e:
        model_io.load_params(str(path), make_params())
    assert str(path) in str(e.value) and fragment in str(e.value)


# --------------------------------------------------------------------------
# With a real Python 2 (only where one is installed)
# --------------------------------------------------------------------------

def find_python2():
    for name in ('python2.7', 'python2'):
        path = shutil.which(name)
        if path and subprocess.run([path, '-c', 'pass'],
                                   capture_output=True).returncode == 0:
            return path
    found = sorted(glob.glob(os.path.expanduser(
        '~/.pyenv/versions/2.7*/bin/python2.7')))
    return found[-1] if found else None


PYTHON2 = find_python2()


@pytest.mark.skipif(PYTHON2 is None, reason='no Python 2 installed')
def test_python2_reads_what_we_write(tmp_path):
    d = collections.OrderedDict([('eos', 0), ('UNK', 1), ('caf\u00e9', 2),
                                 ('', 3), ('x', 4)])
    pkl = str(tmp_path / 'v.pkl')
    vocab.save_dictionary(d, pkl, str(tmp_path / 'v.json'))
    model = str(tmp_path / 'model.npz')
    model_io.save_options({'dim': 16, 'encoder': 'gru', 'lrate': 0.5,
                           'datasets': ['a', 'b'], 'use_dropout': False},
                          model)
    script = (
        "import cPickle as pkl\n"
        "d = pkl.load(open(%r, 'rb'))\n"
        "print type(d).__name__, d.keys() == ['eos', 'UNK', 'caf\\xc3\\xa9',"
        " '', 'x'], d['caf\\xc3\\xa9'], d[''], type(d.keys()[2]).__name__\n"
        "o = pkl.load(open(%r, 'rb'))\n"
        "print o['dim'], o['encoder'] == 'gru', o['lrate'], o['datasets'] =="
        " ['a', 'b'], o['use_dropout']\n" % (pkl, model + '.pkl'))
    out = subprocess.run([PYTHON2, '-c', script], capture_output=True,
                         text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split('\n')[:2] == ['OrderedDict True 2 3 str',
                                          '16 True 0.5 True False']


def test_a_file_the_options_name_as_named_or_beside_the_model(tmp_path):
    """The dictionaries of a model moved with them: found beside it."""
    from machinery.model_io import file_as_named_or_beside
    moved = tmp_path / 'moved'
    moved.mkdir()
    (moved / 'model.npz').write_bytes(b'')
    (moved / 'train.src.json').write_text('{}')
    (tmp_path / 'here.json').write_text('{}')
    model = str(moved / 'model.npz')
    assert file_as_named_or_beside(str(tmp_path / 'here.json'), model) == str(tmp_path / 'here.json')
    assert file_as_named_or_beside('/gone/data/train.src.json', model) == str(moved / 'train.src.json')
    assert file_as_named_or_beside('/gone/data/other.json', model) is None
