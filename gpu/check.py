"""GPU check: every kind of graph the models use, on the GPU against the CPU.

    python gpu/check.py [--seed S] [--tolerance T]
    THEANO_FLAGS=device=opencl0:0 python gpu/check.py     # on an OpenCL device

Runs with ``device=cuda`` (added to THEANO_FLAGS when it names no device) or
the OpenCL device THEANO_FLAGS names; see machinery/theano_env.py for what happens when
the GPU does not come up.  Each case is
built and run here on the GPU and, at the same time, in a child process with
``device=cpu`` (one process per device: Theano's scan compiles its inner graph
in the default mode, so a CPU function compiled in a GPU process would still
run its scan steps on the GPU).  Inputs are fresh random values (printed
seed; the same in both processes).  Prints a table of the largest relative
difference per case, max|gpu - cpu| / max|cpu| over all outputs, and how many
of the compiled function's nodes run on the GPU; exit status 1 if any case
differs by more than the tolerance or has no GPU node.  MRG random streams
must agree exactly: the same generator runs on both devices.
"""
import argparse
import os
import sys

if __name__ == '__main__':  # run as a file: import from the project root, not this folder
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from machinery import cli  # noqa: E402  (neither imports Theano)
from machinery import theano_flags  # noqa: E402


def parse_args(argv=None):
    """The options (before Theano: --help needs no GPU)."""
    p = cli.ArgumentParser(description='GPU check: GPU against CPU, graph by graph.')
    p.add_argument('--seed', type=int, default=None, help='default: from the clock')
    p.add_argument('--tolerance', type=float, default=1e-4,
                   help='largest relative difference accepted (default %(default)g)')
    p.add_argument('--cpu-reference', metavar='NPZ', help=argparse.SUPPRESS)
    return p.parse_args(argv)


def _ask_for_gpu():
    """device=cuda unless THEANO_FLAGS already names a device (before theano_env)."""
    os.environ['THEANO_FLAGS'] = theano_flags.with_defaults(
        os.environ.get('THEANO_FLAGS', ''), [('device', 'cuda')])


if __name__ == '__main__':
    ARGS = parse_args()
    _ask_for_gpu()

from machinery import theano_env  # noqa: E402,F401  (must come before theano)

import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections import OrderedDict  # noqa: E402

import numpy  # noqa: E402
import theano  # noqa: E402
import theano.tensor as tensor  # noqa: E402
from theano.sandbox.rng_mrg import MRG_RandomStream  # noqa: E402

import layers  # noqa: E402

DIM_WORD, DIM, T_SRC, T_TRG, N, VOCAB = 12, 16, 7, 6, 5, 40


def _symbolic(params):
    """A symbolic variable per parameter (parameters are inputs, not shared)."""
    return OrderedDict((k, tensor.TensorType('float32', (False,) * v.ndim)(k))
                       for k, v in params.items())


def _init(layer, prefix, **dims):
    opts = dict(dim_word=DIM_WORD, dim=DIM)
    return layers.get_layer(layer)[0](opts, OrderedDict(), prefix=prefix, **dims)


def _mask(rng, steps):
    """Time-major mask: sample i has a random length in 1..steps (one full)."""
    lengths = rng.randint(1, steps + 1, size=N)
    lengths[0] = steps
    return (numpy.arange(steps)[:, None] < lengths[None, :]).astype('float32')


def _randn(rng, *shape):
    return rng.standard_normal(shape).astype('float32')


def _params_values(rng, params):
    # the initialisers' 0.01-scale values, perturbed so that every term counts
    return [(v + 0.3 * rng.standard_normal(v.shape)).astype('float32')
            for v in params.values()]


def case_softmax_cost(rng):
    """softmax of logits and the cost -log p[y] through flattened indexing."""
    logit = tensor.matrix('logit')
    y = tensor.vector('y', dtype='int64')
    probs = tensor.nnet.softmax(logit)
    cost = -tensor.log(probs.flatten()[tensor.arange(y.shape[0]) * VOCAB + y] + 1e-8)
    return [logit, y], [probs, cost], [_randn(rng, N * T_TRG, VOCAB) * 3,
                                       rng.randint(0, VOCAB, N * T_TRG).astype('int64')]


def case_embedding(rng):
    """Wemb[ids] (advanced indexing) and its gradient (advanced inc-subtensor)."""
    W = tensor.matrix('Wemb')
    ids = tensor.matrix('ids', dtype='int64')
    R = tensor.tensor3('R')
    emb = W[ids.flatten()].reshape([ids.shape[0], ids.shape[1], DIM_WORD])
    # repeated ids: the gradient accumulates several rows into one
    grad = tensor.grad((emb * R).sum(), W)
    return [W, ids, R], [emb, grad], [_randn(rng, VOCAB, DIM_WORD),
                                      rng.randint(0, 8, (T_SRC, N)).astype('int64'),
                                      _randn(rng, T_SRC, N, DIM_WORD)]


def _gru_graph(rng, with_grad):
    params = _init('gru', 'encoder', nin=DIM_WORD, dim=DIM)
    tp = _symbolic(params)
    x = tensor.tensor3('x')
    mask = tensor.matrix('mask')
    h = layers.get_layer('gru')[1](tp, x, {}, prefix='encoder', mask=mask)[0]
    outs = [h]
    if with_grad:
        R = tensor.tensor3('R')
        outs = [h] + tensor.grad((h * R).sum(), [x] + list(tp.values()))
        ins, vals = [x, mask, R], [_randn(rng, T_SRC, N, DIM_WORD), _mask(rng, T_SRC),
                                   _randn(rng, T_SRC, N, DIM)]
    else:
        ins, vals = [x, mask], [_randn(rng, T_SRC, N, DIM_WORD), _mask(rng, T_SRC)]
    return ins + list(tp.values()), outs, vals + _params_values(rng, params)


def case_gru_scan(rng):
    """the encoder's GRU: a masked scan."""
    return _gru_graph(rng, with_grad=False)


def case_gru_scan_grad(rng):
    """gradients through the GRU scan (inputs and every parameter)."""
    return _gru_graph(rng, with_grad=True)


def _attention_graph(rng, with_grad):
    params = _init('gru_cond', 'decoder', nin=DIM_WORD, dim=DIM, dimctx=2 * DIM)
    tp = _symbolic(params)
    emb, ctx, s0 = tensor.tensor3('emb'), tensor.tensor3('ctx'), tensor.matrix('s0')
    y_mask, x_mask = tensor.matrix('y_mask'), tensor.matrix('x_mask')
    dec = layers.get_layer('gru_cond')[1](tp, emb, {}, prefix='decoder', mask=y_mask,
                                          context=ctx, init_state=s0,
                                          context_mask=x_mask)
    outs = [dec['states'], dec['ctxs'], dec['alphas']]
    ins = [emb, ctx, s0, y_mask, x_mask]
    vals = [_randn(rng, T_TRG, N, DIM_WORD), _randn(rng, T_SRC, N, 2 * DIM),
            _randn(rng, N, DIM), _mask(rng, T_TRG), _mask(rng, T_SRC)]
    if with_grad:
        R = tensor.tensor3('R')
        target = (dec['states'] * R).sum() + dec['ctxs'].sum() + (dec['alphas'] ** 2).sum()
        outs = outs + tensor.grad(target, [emb, ctx, s0] + list(tp.values()))
        ins.append(R)
        vals.append(_randn(rng, T_TRG, N, DIM))
    return ins + list(tp.values()), outs, vals + _params_values(rng, params)


def case_attention_scan(rng):
    """conditional GRU with source attention (scan, masked softmax over the source)."""
    return _attention_graph(rng, with_grad=False)


def case_attention_scan_grad(rng):
    """gradients through the attention scan."""
    return _attention_graph(rng, with_grad=True)


def case_target_attention(rng):
    """attention over previous words (window mask, masked softmax, batched_dot) + grad."""
    params = layers.param_init_target_attention(
        OrderedDict(), 'cond_att', 'content_scope', dim_item=DIM_WORD, dim_key=DIM_WORD,
        dim_state=DIM, dim_ctx=2 * DIM)
    tp = _symbolic(params)
    items, state, y_mask = tensor.tensor3('items'), tensor.tensor3('state'), tensor.matrix('m')
    d, w = layers.target_attention(tp, 'cond_att', 'content_scope', items,
                                   layers.window_mask(y_mask), state=state)
    grads = tensor.grad((d ** 2).sum(), [items, state] + list(tp.values()))
    vals = [_randn(rng, T_TRG, N, DIM_WORD), _randn(rng, T_TRG, N, DIM), _mask(rng, T_TRG)]
    return ([items, state, y_mask] + list(tp.values()), [d, w] + grads,
            vals + _params_values(rng, params))


def case_batched_dot(rng):
    """tensor.batched_dot and the prefix mean (mean residual) built on it."""
    A, B, items, y_mask = (tensor.tensor3('A'), tensor.tensor3('B'),
                           tensor.tensor3('items'), tensor.matrix('m'))
    mean = layers.prefix_mean(items, layers.window_mask(y_mask))
    return [A, B, items, y_mask], [tensor.batched_dot(A, B), mean], [
        _randn(rng, N, T_TRG, T_TRG), _randn(rng, N, T_TRG, DIM_WORD),
        _randn(rng, T_TRG, N, DIM_WORD), _mask(rng, T_TRG)]


def case_mrg_dropout(rng):
    """MRG dropout mask (binomial) and multinomial sampling: must agree exactly."""
    x, p = tensor.matrix('x'), tensor.matrix('p')
    trng = MRG_RandomStream(1234)
    dropped = layers.dropout_layer(x, theano.shared(numpy.float32(1.)), trng)
    sample = trng.multinomial(pvals=tensor.nnet.softmax(p)).argmax(1)
    return [x, p], [dropped, sample], [_randn(rng, 64, 96), _randn(rng, N, VOCAB)]


CASES = OrderedDict((name[5:], fn) for name, fn in sorted(globals().items())
                    if name.startswith('case_'))


def gpu_nodes(fn):
    """(nodes on the GPU, all nodes) of a compiled function."""
    nodes = fn.maker.fgraph.toposort()
    on_gpu = [n for n in nodes if type(n.op).__name__.startswith(('Gpu', 'GPUA')) or
              getattr(n.op, 'info', {}).get('gpua', False)]
    return len(on_gpu), len(nodes)


# An output below this fraction of the case's largest is compared on that
# scale: a gradient that is zero in exact arithmetic (that of the attention
# bias c_tt: the softmax ignores a constant added to every energy) holds
# only rounding noise, on either device.
NOISE_FLOOR = 1e-3


def max_rel_diff(gpu_outs, cpu_outs):
    gpu_outs = [numpy.asarray(g, dtype='float64') for g in gpu_outs]
    cpu_outs = [numpy.asarray(c, dtype='float64') for c in cpu_outs]
    largest = max([numpy.abs(c).max() for c in cpu_outs if c.size] + [1e-30])
    worst = 0.
    for g, c in zip(gpu_outs, cpu_outs):
        if g.shape != c.shape or not numpy.all(numpy.isfinite(g)):
            return float('inf')
        if c.size:
            scale = max(numpy.abs(c).max(), NOISE_FLOOR * largest)
            worst = max(worst, numpy.abs(g - c).max() / scale)
    return worst


def run_case(name, build, seed):
    """Compile one case in the default mode and run it: (outputs, fn, seconds)."""
    # the case name in the seed: each case draws different inputs
    rng = numpy.random.RandomState([seed, sum(map(ord, name))])
    # the layers' initialisers draw from NumPy's global generator
    numpy.random.seed([seed, sum(map(ord, name)), 1])
    inputs, outputs, values = build(rng)
    t0 = time.time()
    fn = theano.function(inputs, outputs, on_unused_input='ignore')
    compile_sec = time.time() - t0
    return [numpy.asarray(o) for o in fn(*values)], fn, compile_sec


def cpu_reference(path, seed):
    """Every case's outputs on the CPU (this process), saved to path (.npz)."""
    arrays = {}
    for name, build in CASES.items():
        outs = run_case(name, build, seed)[0]
        arrays.update(('%s/%d' % (name, i), o) for i, o in enumerate(outs))
    numpy.savez(path, **arrays)


def start_cpu_reference(path, seed):
    """The CPU half in a child process (device=cpu), running while we compile."""
    cmd = [sys.executable, os.path.abspath(__file__), '--cpu-reference', path,
           '--seed', str(seed)]
    env = theano_env.device_env('cpu')
    # the same graphs, compiled sooner
    env['THEANO_FLAGS'] = theano_flags.with_values(env['THEANO_FLAGS'], [('mode', 'FAST_COMPILE')])
    return subprocess.Popen(cmd, env=env)


def device_line():
    from theano.gpuarray.type import get_context
    import pygpu
    ctx = get_context(None)
    return ('device %s: %s, pygpu %s, libgpuarray API %s, %d MiB free, Theano %s'
            % (theano.config.device, ctx.devname, pygpu.__version__,
               pygpu.gpuarray.api_version(), ctx.free_gmem // 2 ** 20, theano.__version__))


def compare(rows, reference, tolerance):
    """One result row per case: GPU outputs against the CPU reference."""
    table = []
    for name, build, gpu_outs, fn, compile_sec in rows:
        cpu_outs = [reference['%s/%d' % (name, i)] for i in range(len(gpu_outs))]
        diff = max_rel_diff(gpu_outs, cpu_outs)
        n_gpu, n_all = gpu_nodes(fn)
        exact = name == 'mrg_dropout'
        ok = (diff == 0. if exact else diff <= tolerance) and n_gpu > 0
        table.append(OrderedDict([('case', name), ('max_rel_diff', diff),
                                  ('gpu_nodes', '%d/%d' % (n_gpu, n_all)),
                                  ('compile_sec', compile_sec), ('ok', ok),
                                  ('what', (build.__doc__ or '').strip())]))
    return table


def print_table(rows):
    print('%-20s %-13s %-10s %-8s %-3s %s' % ('case', 'max rel diff', 'gpu nodes',
                                              'compile', 'ok', 'what'))
    for r in rows:
        print('%-20s %-13.3g %-10s %-8s %-3s %s' % (
            r['case'], r['max_rel_diff'], r['gpu_nodes'], '%.1fs' % r['compile_sec'],
            'yes' if r['ok'] else 'NO', r['what']))


def main(args):
    seed = int(time.time()) % 100000 if args.seed is None else args.seed
    if args.cpu_reference:
        return cli.run(lambda: cpu_reference(args.cpu_reference, seed))
    return cli.run(lambda: check(args, seed))


def check(args, seed):
    """Every case on the GPU against the CPU reference process's numbers."""
    if not theano_env.gpu_requested():
        raise cli.CommandError('the GPU check needs a GPU device (device=cuda or '
                               'device=opencl0:0), THEANO_FLAGS has device=%s'
                               % theano.config.device)
    print(device_line())
    print('seed %d, tolerance %g (MRG random streams: exact)' % (seed, args.tolerance))
    sys.stdout.flush()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, 'cpu.npz')
        child = start_cpu_reference(path, seed)
        rows = []
        for name, build in CASES.items():
            gpu_outs, fn, compile_sec = run_case(name, build, seed)
            rows.append((name, build, gpu_outs, fn, compile_sec))
        if child.wait() != 0:
            raise cli.CommandError('the CPU reference process failed (exit %d)'
                                   % child.returncode)
        reference = dict(numpy.load(path))
    table = compare(rows, reference, args.tolerance)
    print_table(table)
    failed = [r['case'] for r in table if not r['ok']]
    print('GPU check: %s' % ('passed (%d cases)' % len(table) if not failed
                             else 'FAILED: %s' % ', '.join(failed)))
    if failed:
        raise cli.CommandError('the GPU differs from the CPU beyond the tolerance in %s'
                               % ', '.join(failed))


if __name__ == '__main__':
    sys.exit(main(ARGS))
