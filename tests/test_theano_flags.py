"""theano_flags: the one place where a THEANO_FLAGS string is read and edited."""
from theano_platform import theano_flags


def test_parse_takes_the_last_and_both_spellings():
    flags = 'device=cpu, floatX=float64,gpuarray.preallocate=0.5,floatX=float32'
    assert theano_flags.parse(flags) == {'device': 'cpu', 'floatX': 'float32',
                                         'gpuarray__preallocate': '0.5'}
    assert theano_flags.value(flags, 'gpuarray__preallocate') == '0.5'
    assert theano_flags.value(flags, 'mode') == ''
    assert theano_flags.given(flags, 'gpuarray.preallocate')
    assert theano_flags.parse('') == {}


def test_defaults_are_added_where_not_given():
    assert theano_flags.with_defaults('', [('device', 'cuda')]) == 'device=cuda'
    assert theano_flags.with_defaults('device=opencl0:0', [('device', 'cuda')]) == \
        'device=opencl0:0'
    assert theano_flags.with_defaults('floatX=float32', [('optimizer', 'fast_compile'),
                                                          ('floatX', 'float64')]) == \
        'floatX=float32,optimizer=fast_compile'


def test_values_replace_what_is_given():
    assert theano_flags.with_values('device=cuda,mode=FAST_RUN,floatX=float32',
                                    [('mode', 'FAST_COMPILE')]) == \
        'device=cuda,floatX=float32,mode=FAST_COMPILE'
    assert theano_flags.with_values('', [('device', 'cpu')]) == 'device=cpu'
    assert theano_flags.with_values('init_gpu_device=cuda, device = cuda0,',
                                    [('device', 'cpu')]) == 'init_gpu_device=cuda,device=cpu'


def test_missing_names_what_with_defaults_adds():
    assert theano_flags.missing('floatX=float32', [('floatX', 'float64'), ('openmp', 'False')]) \
        == ['openmp=False']
