"""Child process of test_theano_repairs.py: small graphs that need the repairs.

    THEANO_FLAGS=device=cpu|opencl0:0 python tests/repair_probes.py PROBE [PROBE ...]

Each probe builds one kind of graph the project (or Theano's GPU back-end
around it) relies on, compiles it in the default mode with
``on_opt_error=raise`` (an optimiser that fails raises instead of being
logged), runs it and checks its numbers against NumPy; on a GPU device it
also checks that the operation runs on the GPU.  Exit status 0 when every
probe passes; a probe that fails raises (status 1), a crash ends the process
with a signal.  Which repair each probe needs: test_theano_repairs.NEEDS.
"""
import importlib
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path[:0] = [os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                os.path.dirname(os.path.abspath(__file__))]


def _numpy_as_newer_releases():
    """What numpy 1.24 and later lack, taken away before Theano is imported
    (probes numpy_aliases, no_numpy_distutils, numpy2_names): the aliases
    numpy.bool, numpy.complex and numpy.int, which numpy 1.24 removed,
    numpy.distutils, which numpy 1.26 does not ship for Python 3.12, and
    numpy.product, numpy.cast and numpy.sctype2char, which numpy 2 removed.
    On the numpy that lacks them already, nothing changes."""
    import numpy
    if 'numpy_aliases' in sys.argv:
        former = getattr(numpy, '__getattr__', None)
        removed = {'bool', 'complex', 'int'} - set(vars(numpy))  # numpy 2 has numpy.bool

        def getattr_without_aliases(name):
            if name in removed or former is None:
                raise AttributeError("module 'numpy' has no attribute %r" % name)
            return former(name)
        numpy.__getattr__ = getattr_without_aliases
    if 'no_numpy_distutils' in sys.argv:
        sys.modules['numpy.distutils'] = None
    if 'numpy2_names' in sys.argv:   # what NumPy 2 removed, with its message
        import scipy.linalg  # noqa: F401  (scipy 1.10, numpy 1's, imports numpy.cast)
        import scipy.sparse.linalg  # noqa: F401
        former_getattr = getattr(numpy, '__getattr__', None)
        removed = [name for name in ('product', 'cast', 'sctype2char')
                   if vars(numpy).pop(name, None) is not None]
        numpy.__all__ = [name for name in numpy.__all__ if name not in removed]

        def getattr_as_numpy2(name):
            if name in removed or former_getattr is None:
                raise AttributeError('`np.%s` was removed in the NumPy 2.0 release' % name)
            return former_getattr(name)
        numpy.__getattr__ = getattr_as_numpy2


_numpy_as_newer_releases()
from theano_platform import theano_env  # noqa: E402,F401  (must come before theano)

import numpy as np  # noqa: E402
import theano  # noqa: E402
import theano.tensor as tensor  # noqa: E402
from theano.sandbox.rng_mrg import MRG_RandomStream  # noqa: E402
from theano.tensor.sort import topk  # noqa: E402

import layers  # noqa: E402

ON_GPU = theano.config.device != 'cpu'
RNG = np.random.RandomState(1234)


def gpu_op_names(fn):
    """Class names of the function's nodes that run on the GPU (a scan on the
    GPU, whose steps run there, as 'GpuScan')."""
    names = []
    for node in fn.maker.fgraph.toposort():
        name = type(node.op).__name__
        if name == 'Scan' and getattr(node.op, 'info', {}).get('gpua'):
            names.append('GpuScan')
        elif name.startswith(('Gpu', 'GPUA')):
            names.append(name)
    return names


def expect_on_gpu(fn, *op_names):
    """On a GPU device: each named op (a class-name prefix) runs there."""
    if not ON_GPU:
        return
    names = gpu_op_names(fn)
    for name in op_names:
        assert any(n.startswith(name) for n in names), (name, names)


def expect_close(got, want, rtol=1e-5):
    got, want = np.asarray(got, dtype='float64'), np.asarray(want, dtype='float64')
    assert got.shape == want.shape and np.allclose(got, want, rtol=rtol, atol=1e-6), \
        (got, want)


def probe_whole_key_files():
    """While the compile cache saves a module's key, a process that starts
    and reads the cache (without the lock) finds no key file or the whole one,
    never a part (which it would take as broken and delete the module)."""
    import pickle
    from theano.link.c import cmodule
    folder = tempfile.mkdtemp()
    key_pkl = os.path.join(folder, 'key.pkl')
    seen_while_saving = []

    class Reader(object):
        """Pickled within the key: looks at key.pkl mid-write."""
        def __reduce__(self):
            seen_while_saving.append(os.path.exists(key_pkl))
            return (str, ('reader',))
    try:
        data = cmodule.KeyData({((1,), Reader())}, 'hash', key_pkl,
                               os.path.join(folder, 'mod.so'))
        data.save_pkl()
        assert seen_while_saving == [False], \
            'a process starting now would read a half-written key.pkl'
        with open(key_pkl, 'rb') as f:
            assert pickle.load(f).keys == {((1,), 'reader')}
        assert os.listdir(folder) == ['key.pkl']
    finally:
        shutil.rmtree(folder)


def theano_own_dot22_mode():
    """The default mode without threaded_ops' optimizer: Theano's own Dot22,
    whose C code the probes need, stays in the graph."""
    return theano.compile.mode.get_default_mode().excluding('nmt_threaded_ops')


def probe_props_less_ops_kept():
    """A module of an op without properties (Dot22) has a versioned key: the
    compile cache keeps it for the next process instead of compiling it again."""
    from theano.graph.fg import FunctionGraph
    from theano.link.c.basic import CLinker
    x, y = tensor.matrix('x'), tensor.matrix('y')
    # Theano's own Dot22 (threaded_ops' optimizer would replace it)
    mode = theano_own_dot22_mode()
    fn = theano.function([x, y], tensor.dot(x, y), mode=mode)
    dot = [n for n in fn.maker.fgraph.toposort() if type(n.op).__name__ == 'Dot22']
    assert dot, 'no Dot22 in %s' % fn.maker.fgraph.toposort()
    inputs = [i.type() for i in dot[0].inputs]
    graph = FunctionGraph(inputs, [dot[0].op(*inputs)])
    version, _ = CLinker().accept(graph).cmodule_key()
    assert version, 'the module of Dot22 is unversioned: compiled again by every process'


def probe_external_op_version():
    """The version of an op whose C code comes from files (DimShuffle) is the
    same in another process (Python salts str hashes per process)."""
    import subprocess
    code = ('from theano_platform import theano_env\n'
            'from theano.tensor.elemwise import DimShuffle\n'
            'print(DimShuffle((False,), ["x", 0]).c_code_cache_version())')
    versions = set()
    for seed in ('1', '2'):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        versions.add(subprocess.check_output([sys.executable, '-c', code], env=env,
                                             cwd=sys.path[0], text=True).strip())
    assert len(versions) == 1, 'DimShuffle\'s version differs between processes: %s' % versions


def probe_stable_gpu_sources():
    """The C struct of a GPU op's parameters (GpuAlloc's: the context and a
    flag) has the same name in another process, so that two processes
    compiling its module write the same source."""
    import subprocess
    code = ('from theano_platform import theano_env\n'
            'from theano.gpuarray.basic_ops import GpuAlloc\n'
            'print(GpuAlloc(None).params_type.name)')
    env = theano_env.device_env('cpu')     # the classes alone: no device needed
    names = set()
    for _ in range(2):
        child = subprocess.run([sys.executable, '-c', code], cwd=sys.path[0], env=env,
                               capture_output=True, text=True)
        assert child.returncode == 0, child.stderr[-2000:]
        names.add(child.stdout.strip())
    assert len(names) == 1, 'GpuAlloc\'s parameters struct differs between processes: %s' % names


def _unique_modules(count):
    """A function of count C modules that no cache holds, made: the libraries
    it compiled and module_compiles' counts.  Other probes may compile into
    the same folder at the same time (the test runner's workers), so the
    libraries are told apart by their source, which names each copy's k."""
    import glob
    from theano_platform import module_compiles
    from unversioned_op import UnversionedCopy
    x = tensor.matrix('x')
    # a new k, a new module: in this process too, and in no other process
    first = os.getpid() * 1000 + _unique_modules.made
    _unique_modules.made += count
    ks = [first + k for k in range(count)]
    fn = theano.function([x], [UnversionedCopy(ks[k])(x * (k + 2)) for k in range(count)])
    a = RNG.rand(3, 3).astype('float32')
    expect_close(fn(a)[-1], a * (count + 1))
    made = [so for so in glob.glob(os.path.join(theano.config.compiledir, 'tmp*', '*.so'))
            if _names_a_copy(os.path.join(os.path.dirname(so), 'mod.cpp'), ks)]
    assert len(made) >= count, 'compiled %d modules, expected %d or more' % (len(made), count)
    return sorted(made), module_compiles.stats


def _names_a_copy(source, ks):
    """Whether the C source file names one of the copies ks."""
    try:
        with open(source) as f:
            text = f.read()
    except OSError:
        return False
    return any('/* copy number %d */' % k in text for k in ks)


_unique_modules.made = 0


def probe_no_debug_info():
    """A module is compiled without debug information."""
    (library, *_), _ = _unique_modules(1)
    with open(library, 'rb') as f:
        assert b'.debug_info' not in f.read(), '%s has debug information (-g)' % library


def probe_precompiled_prefix():
    """A module is compiled through module_compiles, its common headers
    precompiled."""
    _, stats = _unique_modules(1)
    assert stats['precompiled_prefix'] >= 1, \
        'no module was compiled with the precompiled prefix: %s' % stats


def probe_compile_ahead():
    """The modules a function lacks are compiled several at a time, ahead of
    the nodes that link them (NMT_COMPILE_JOBS=2)."""
    os.environ['NMT_COMPILE_JOBS'] = '2'
    _, stats = _unique_modules(4)
    assert stats['compiled_ahead'] >= 4 and stats['taken'] >= 4, \
        'the modules were compiled one after the other, as linked: %s' % stats


def probe_elemwise():
    """Element-wise operations fused into one kernel, constants inside."""
    x, y = tensor.matrix('x'), tensor.matrix('y')
    fn = theano.function([x, y], tensor.tanh(x + 1) * y + 2)
    a, b = RNG.rand(3, 4).astype('float32'), RNG.rand(3, 4).astype('float32')
    expect_close(fn(a, b), np.tanh(a + 1) * b + 2)
    expect_on_gpu(fn, 'GpuElemwise')


def probe_elemwise_openmp():
    """An element-wise loop long enough for OpenMP's threads (theano_env sets
    openmp=True and openmp_elemwise_minsize) compiles, runs on the CPU's
    threads and gives NumPy's numbers."""
    assert theano.config.openmp and theano.config.openmp_elemwise_minsize <= 65536, \
        (theano.config.openmp, theano.config.openmp_elemwise_minsize)
    x, y = tensor.matrix('x'), tensor.matrix('y')
    fn = theano.function([x, y], tensor.tanh(x + 1) * y + 2)
    a, b = RNG.rand(300, 300).astype('float32'), RNG.rand(300, 300).astype('float32')
    expect_close(fn(a, b), np.tanh(a + 1) * b + 2)
    loops = [n.op for n in fn.maker.fgraph.apply_nodes
             if isinstance(n.op, tensor.elemwise.Elemwise)]
    assert loops and all(op.openmp for op in loops), loops


def probe_scan():
    """A scan (the recurrent layers' loop): a running sum."""
    x = tensor.matrix('x')
    sums, _ = theano.scan(lambda row, acc: acc + row, sequences=x,
                          outputs_info=tensor.zeros_like(x[0]))
    fn = theano.function([x], sums)
    a = RNG.rand(5, 3).astype('float32')
    expect_close(fn(a), np.cumsum(a, axis=0))
    expect_on_gpu(fn, 'GpuScan')


def probe_scan_reorder():
    """A scan that keeps its last five steps (taps -4..-1) and returns only
    the final one: its circular buffer is put in order at the end."""
    x0, n = tensor.matrix('x0'), tensor.iscalar('n')
    h, _ = theano.scan(lambda a, b, c, d: (a + b + c + d) * np.float32(0.5),
                       outputs_info=[dict(initial=x0, taps=[-4, -3, -2, -1])], n_steps=n)
    fn = theano.function([x0, n], h[-1])
    start = RNG.rand(4, 3).astype('float32')
    for steps in range(1, 9):     # every position of the buffer's end
        rows = list(start)
        for _ in range(steps):
            rows.append((rows[-4] + rows[-3] + rows[-2] + rows[-1]) * np.float32(0.5))
        expect_close(fn(start, steps), rows[-1])
    expect_on_gpu(fn, 'GpuScan')


def probe_scan_output_address():
    """Scan's loop, after a step that wrote its output where it was told (a
    running state of 16 MB), decides in constant time that nothing is to be
    copied: its own time per step, beside the inner function's, stays far
    below that of comparing 16 MB (16 ms on the 2-core test machine; 0.1-0.2
    ms with scan_output_address)."""
    x0 = tensor.matrix('x0')
    h, _ = theano.scan(lambda prev: prev * np.float32(0.5) + np.float32(1.), outputs_info=x0,
                       n_steps=20)
    fn = theano.function([x0], h[-1])
    scan_op = next(node.op for node in fn.maker.fgraph.toposort()
                   if type(node.op).__name__ == 'Scan')
    start = np.ones((2000, 2000), dtype='float32')
    want = np.ones_like(start)
    for _ in range(20):
        want = want * np.float32(0.5) + np.float32(1.)
    overheads = []
    for _ in range(5):
        expect_close(fn(start), want)
        overheads.append((scan_op.t_call - scan_op.t_fn) / 20)
    # what one comparison of the state's contents costs here, now: the
    # measure is a ratio, so that a loaded machine slows both alike
    compares, same = [], start.copy()
    for _ in range(3):
        t0 = time.time()
        assert memoryview(start) == memoryview(same)
        compares.append(time.time() - t0)
    assert min(overheads) < min(compares) / 4, (
        'scan spends %.1f ms a step outside its inner function with a 16 MB state, '
        'where comparing its contents takes %.1f ms: it compares the outputs\' contents'
        % (1000 * min(overheads), 1000 * min(compares)))


def probe_integer_max_min():
    """maximum/minimum of int64 values that a double cannot hold exactly."""
    x, y = tensor.lvector('x'), tensor.lvector('y')
    fn = theano.function([x, y], [tensor.maximum(x, y), tensor.minimum(x, y)])
    a = np.array([2 ** 53 + 1, -(2 ** 62) - 1, 3], dtype='int64')
    b = np.array([2 ** 53 - 7, 5, -(2 ** 60) - 3], dtype='int64')
    high, low = fn(a, b)
    assert np.array_equal(high, np.maximum(a, b)), (high, np.maximum(a, b))
    assert np.array_equal(low, np.minimum(a, b)), (low, np.minimum(a, b))


def probe_float_division():
    """Floor division and maximum of floats (C99 names, NaN) in a GPU kernel."""
    x, y = tensor.vector('x'), tensor.vector('y')
    fn = theano.function([x, y], [x // y, tensor.maximum(x, y)])
    a = np.array([7.5, -7.5, 3., np.nan], dtype='float32')
    b = np.array([2., 2., -0.5, 1.], dtype='float32')
    div, high = fn(a, b)
    expect_close(div[:3], a[:3] // b[:3])
    assert np.isnan(high[3]) and np.array_equal(high[:3], np.maximum(a, b)[:3]), high
    expect_on_gpu(fn, 'GpuElemwise')


def _pocl_builds(make):
    """(make(), the number of program builds pocl logs while it runs); needs
    POCL_DEBUG=llvm in the environment of this process."""
    with tempfile.TemporaryFile() as log:
        sys.stderr.flush()
        saved = os.dup(2)
        os.dup2(log.fileno(), 2)
        try:
            made = make()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        log.seek(0)
        return made, log.read().count(b'BUILDING for device')


def probe_shared_kernels():
    """The nodes of one element-wise op build its kernels once: a second
    function with eight such nodes builds none (pocl's build log, OpenCL)."""
    assert os.environ.get('POCL_DEBUG') == 'llvm', 'run with POCL_DEBUG=llvm'

    def function_of(n):
        xs = [tensor.vector('x%d' % i) for i in range(n)]
        return theano.function(xs, [tensor.tanh(x) * 3 for x in xs])
    first, builds_first = _pocl_builds(lambda: function_of(1))
    eight, builds_eight = _pocl_builds(lambda: function_of(8))
    a = RNG.rand(4).astype('float32')
    for out in eight(*[a] * 8) + first(a):
        expect_close(out, np.tanh(a) * 3)
    assert builds_first > 0 and builds_eight == 0, \
        'program builds: %d for one node, %d more for eight' % (builds_first, builds_eight)


def probe_lazy_reductions():
    """A sum over an axis builds only its C code's kernels (two logged builds
    a node), not also those of its Python code (pocl's build log, OpenCL)."""
    assert os.environ.get('POCL_DEBUG') == 'llvm', 'run with POCL_DEBUG=llvm'
    xs = [tensor.matrix('x%d' % i) for i in range(4)]
    # one node first: compiling the op's C module into a cold cache builds
    # two programs more, once; the four nodes are counted on a warm cache
    theano.function(xs[:1], xs[0].sum(axis=0))
    fn, builds = _pocl_builds(lambda: theano.function(xs, [x.sum(axis=0) for x in xs]))
    a = RNG.rand(5, 3).astype('float32')
    for out in fn(*[a] * 4):
        expect_close(out, a.sum(axis=0))
    assert builds <= 2 * 4, 'reduction builds when made: %d for four nodes' % builds


def _builds_when_made(outputs_of, what):
    """Make a function of two 3-d inputs; check that pocl built at most one
    program for it (twice logged), and that it computes the right numbers on
    contiguous and strided inputs (kernels built when first needed)."""
    assert os.environ.get('POCL_DEBUG') == 'llvm', 'run with POCL_DEBUG=llvm'
    x, y = tensor.tensor3('x'), tensor.tensor3('y')
    out, numpy_of = outputs_of(x, y)
    fn, builds = _pocl_builds(lambda: theano.function([x, y], out, on_unused_input='ignore'))
    a, b = RNG.rand(3, 4, 6).astype('float32'), RNG.rand(2, 4, 6).astype('float32')
    for args in ((a, b), (a[:, :, ::2], b[:, :, ::2])):
        expect_close(fn(*args), numpy_of(*args))
    assert builds <= 2, 'program builds when made: %d for a 3-d %s' % (builds, what)


def probe_lazy_elemwise():
    """A 3-d element-wise op builds its kernels when a call needs them."""
    _builds_when_made(lambda x, y: (tensor.tanh(x) * 3, lambda a, b: np.tanh(a) * 3),
                      'GpuElemwise')


def probe_lazy_inc_subtensor():
    """A 3-d increment of a slice builds its 'a += b' kernels when a call
    needs them."""
    def increment(a, b):
        a = a.copy()
        a[1:] += b
        return a
    _builds_when_made(lambda x, y: (tensor.inc_subtensor(x[1:], y), increment),
                      'GpuIncSubtensor')


def probe_unbuildable_kernel():
    """A GpuElemwise whose kernel the device's compiler rejects (float floor
    division in C99 names, run with the repair opencl_kernel_c off): a Python
    error naming the op, not a crash."""
    x, y = tensor.vector('x'), tensor.vector('y')
    try:
        theano.function([x, y], x // y)
    except Exception as error:   # Theano wraps the op's error with the node
        assert 'GpuElemwise{IntDiv}' in str(error), error
    else:
        raise AssertionError('the kernel was built: run this probe with opencl_kernel_c off')


def probe_shape_assert():
    """SpecifyShape, Assert and Shape of GPU values, lifted node by node
    (op_lifter) rather than by the whole-graph GraphToGPU, which is left out:
    the lifting of nodes that later optimisations create."""
    x = tensor.matrix('x')
    shaped = tensor.specify_shape(tensor.exp(x), (2, 3))
    checked = tensor.opt.Assert()(shaped, tensor.gt(shaped.sum(), 0))
    mode = theano.compile.mode.get_default_mode().excluding('gpuarray_graph_optimization')
    fn = theano.function([x], [checked * 2, tensor.exp(x).shape], mode=mode)
    a = RNG.rand(2, 3).astype('float32')
    out, shape = fn(a)
    expect_close(out, np.exp(a) * 2)
    assert tuple(shape) == (2, 3)
    expect_on_gpu(fn, 'GpuElemwise')


def probe_softmax_grad():
    """Softmax, log-softmax, argmax and their gradients (the output layer)."""
    x = tensor.matrix('x')
    probs = tensor.nnet.softmax(x)
    cost = -tensor.log(probs[:, 0]).sum() - tensor.nnet.logsoftmax(x)[:, 1].sum()
    fn = theano.function([x], [tensor.grad(cost, x), tensor.argmax(x, axis=1)])
    a = RNG.rand(3, 5).astype('float32')
    grad, best = fn(a)
    p = np.exp(a - a.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    onehot = np.zeros_like(p)
    onehot[:, 0] += 1
    onehot[:, 1] += 1
    expect_close(grad, 2 * p - onehot, rtol=1e-4)
    assert np.array_equal(best, a.argmax(1))
    expect_on_gpu(fn, 'GpuSoftmax')


def probe_max_and_argmax():
    """The maximum and its position along an axis, both used."""
    x = tensor.matrix('x')
    high, where = tensor.max_and_argmax(tensor.exp(x), axis=1)
    fn = theano.function([x], [high, where])
    a = RNG.rand(3, 5).astype('float32')
    got_high, got_where = fn(a)
    expect_close(got_high, np.exp(a).max(1))
    assert np.array_equal(got_where, a.argmax(1))
    expect_on_gpu(fn, 'GpuMaxAndArgmax')


def probe_cumsum():
    """Cumulative sum (theano.tensor.extra_ops)."""
    x = tensor.matrix('x')
    fn = theano.function([x], tensor.extra_ops.cumsum(tensor.exp(x), axis=0))
    a = RNG.rand(4, 3).astype('float32')
    expect_close(fn(a), np.cumsum(np.exp(a), axis=0))


def probe_topk():
    """The k largest values (theano.tensor.sort): compiled only; theano-pymc
    1.1.2's TopKOp fails on the CPU in its own Python code (an IndexError),
    and the project does not use it."""
    x = tensor.vector('x')
    theano.function([x], topk(tensor.exp(x), 2, sorted=False))


def _mrg_on_both(outputs_of):
    """Outputs of the same MRG graph compiled for the device and for the CPU."""
    x = tensor.matrix('x')
    gpu = theano.function([x], outputs_of(MRG_RandomStream(42), x))
    cpu = theano.function([x], outputs_of(MRG_RandomStream(42), x),
                          mode=theano.compile.mode.get_default_mode().excluding('gpuarray'))
    a = RNG.rand(4, 6).astype('float32')
    return gpu, gpu(a), cpu(a)


def probe_dropout():
    """The models' dropout (layers.dropout_layer: MRG uniform numbers, and a
    switch on use_noise, a float): the same on every device."""
    use_noise = theano.shared(np.float32(1.))
    fn, got, want = _mrg_on_both(
        lambda trng, x: layers.dropout_layer(x, use_noise, trng))
    expect_close(got, want)
    expect_on_gpu(fn, 'GPUA_mrg_uniform')


def probe_multinomial():
    """MRG multinomial sampling (stochastic search, samples during training)."""
    fn, got, want = _mrg_on_both(
        lambda trng, x: trng.multinomial(pvals=tensor.nnet.softmax(x)).argmax(1))
    assert np.array_equal(got, want), (got, want)
    expect_on_gpu(fn, 'GPUAMultinomialFromUniform')


def probe_no_mpi_at_import():
    """Importing Theano does not start MPI, so that this process can start
    mpirun (no_mpi_at_import).  With mpi4py installed and without the
    repair, both fail: mpi4py.MPI is loaded, and mpirun exits with 1."""
    assert 'mpi4py.MPI' not in sys.modules, 'import theano initialised MPI'
    mpirun = shutil.which('mpirun')
    if mpirun is None:
        return
    # os.environ's changes reach the C environment that the child inherits
    os.environ.update(OMPI_ALLOW_RUN_AS_ROOT='1', OMPI_ALLOW_RUN_AS_ROOT_CONFIRM='1')
    proc = subprocess.run([mpirun, '-np', '1', sys.executable, '-c', 'print("started")'],
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and 'started' in proc.stdout, \
        'mpirun from a process that imported Theano: %d %r' % (proc.returncode, proc.stderr)

def probe_numpy_aliases():
    """On a numpy without numpy.bool, numpy.complex and numpy.int: a cast to
    bool (the model's masks), the Python code of a complex number from two
    reals, a constant 1 that broadcasts and is folded
    (get_scalar_constant_value), and theano.tensor.random."""
    from theano.compile.mode import Mode
    x = tensor.vector('x')
    fn = theano.function([x], tensor.cast(x > 0.5, 'bool'))
    a = np.array([0.2, 0.7, 0.5, 0.9], dtype=theano.config.floatX)
    got = fn(a)
    assert got.dtype == np.bool_ and list(got) == [False, True, False, True], got
    python_code = Mode(linker='py', optimizer=None)
    got = theano.function([x], tensor.complex(x, 2 * x), mode=python_code)(a)
    assert np.array_equal(got, a + 2j * a), got
    one = tensor.constant(1, dtype='int8')
    assert tensor.alloc(np.float32(0), one, 3).broadcastable == (True, False), \
        'an Alloc of the constant 1 does not broadcast: constants are not numbers'
    importlib.import_module('theano.tensor.random.basic')


def probe_no_numpy_distutils():
    """A C module compiled against NumPy's headers, without numpy.distutils."""
    x = tensor.matrix('x')
    fn = theano.function([x], tensor.tanh(x) * 2 + 1)
    a = RNG.rand(3, 4).astype(theano.config.floatX)
    expect_close(fn(a), np.tanh(a) * 2 + 1)
    assert fn.maker.linker.__class__.__name__ != 'PerformLinker'


def probe_numpy2_names():
    """On a numpy without numpy.product, numpy.cast and numpy.sctype2char
    (NumPy 2): the gradient of arcsin, and the Python code of a product of
    three terms and of a division of integers (constant folding's path)."""
    from theano.compile.mode import Mode
    x = tensor.vector('x')
    grad = theano.grad(tensor.arcsin(x).sum(), x)
    a = np.array([0.1, -0.5, 0.3], dtype=theano.config.floatX)
    expect_close(theano.function([x], grad)(a), 1 / np.sqrt(1 - a.astype('float64') ** 2))
    i, j = tensor.ivector('i'), tensor.ivector('j')
    python_code = Mode(linker='py', optimizer=None)
    fn = theano.function([x, i, j], [x * x * x, i / j], mode=python_code)
    cube, quotient = fn(a, np.array([3, 7], 'int32'), np.array([2, 4], 'int32'))
    expect_close(cube, a ** 3)
    expect_close(quotient, [1.5, 1.75])


def probe_numpy2_promotion():
    """The Python code of MRG's uniform numbers (a function without C code)
    gives those of its C code (which rounds to float32 once more: 1 ulp), on
    a NumPy that types int32 & a Python int as int32 (NumPy 2, NEP 50:
    numpy2_mrg_mask)."""
    from theano.compile.mode import Mode
    python_code = theano.function([], MRG_RandomStream(1234).uniform((7, 3), dtype='float32'),
                                  mode=Mode(linker='py', optimizer=None))
    c_code = theano.function([], MRG_RandomStream(1234).uniform((7, 3), dtype='float32'))
    expect_close(python_code(), c_code(), rtol=1e-6)


def probe_numpy2_c_api():
    """C code that reads an array's item size, compiled against NumPy's
    headers (NumPy 2 has no PyArray_Descr.elsize: numpy2_itemsize_*): a
    DimShuffle that adds a broadcast dimension, Dot22 (BLAS), MRG's DotModulo
    (the random streams' states); an increment of rows by a list of indices
    with repeats (AdvancedIncSubtensor1, numpy2_inplace_increment); run by
    the C virtual machine (numpy2_lazylinker)."""
    from theano.link.c.cvm import CVM
    from theano.sandbox import rng_mrg
    x, y = tensor.matrix('x'), tensor.matrix('y')
    # Theano's own Dot22, whose C code reads the item size (threaded_ops'
    # optimizer would replace it by the project's op)
    mode = theano_own_dot22_mode()
    fn = theano.function([x, y], [tensor.dot(x, y), x.dimshuffle(0, 'x', 1) * 2], mode=mode)
    assert isinstance(fn.fn, CVM), 'not run by the C virtual machine: %r' % fn.fn
    assert 'Dot22' in [type(n.op).__name__ for n in fn.maker.fgraph.toposort()]
    a, b = RNG.rand(3, 4).astype('float32'), RNG.rand(4, 2).astype('float32')
    product, expanded = fn(a, b)
    expect_close(product, a.dot(b))
    expect_close(expanded, a[:, None, :] * 2)
    state = np.array([12345, 12345, 12345, 12345, 12345, 12345], dtype='int32')
    got = rng_mrg.multMatVect(state, rng_mrg.A1p72, rng_mrg.M1, rng_mrg.A2p72, rng_mrg.M2)
    want = np.concatenate([rng_mrg.matVecModM(rng_mrg.A1p72, state[:3], rng_mrg.M1),
                           rng_mrg.matVecModM(rng_mrg.A2p72, state[3:], rng_mrg.M2)])
    assert np.array_equal(got, want), (got, want)
    rows = tensor.lvector('rows')
    fn = theano.function([x, y, rows], [tensor.inc_subtensor(x[rows], y),
                                        tensor.set_subtensor(x[rows], y)])
    b, index = RNG.rand(3, 4).astype('float32'), np.array([2, 0, 2])
    added, replaced = a.copy(), a.copy()
    np.add.at(added, index, b)
    replaced[index] = b
    got_added, got_replaced = fn(a, b, index)
    assert np.array_equal(got_added, added) and np.array_equal(got_replaced, replaced)


PROBES = {name[6:]: fn for name, fn in sorted(globals().items())
          if name.startswith('probe_')}


def main(argv):
    """Run the named probes; with --keep-going, all of them, reporting each."""
    keep_going = '--keep-going' in argv
    names = [a for a in argv if a != '--keep-going']
    unknown = [n for n in names if n not in PROBES]
    if unknown:
        raise SystemExit('unknown probe(s): %s (known: %s)' % (unknown, sorted(PROBES)))
    failed = []
    for name in names:
        try:
            PROBES[name]()
        except Exception as error:
            if not keep_going:
                raise
            failed.append(name)
            print('probe %s: FAILED: %s: %s' % (name, type(error).__name__,
                                                 ' '.join(str(error).split())[:300]))
        else:
            print('probe %s: passed on %s' % (name, theano.config.device))
        sys.stdout.flush()
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
