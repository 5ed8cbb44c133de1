"""GPU check: every kind of graph the models use, on the GPU against the CPU.

    python gpu/check.py [--seed S] [--seeds N] [--factor F]
    THEANO_FLAGS=device=opencl0:0 python gpu/check.py     # on an OpenCL device

Runs with ``device=cuda`` (added to THEANO_FLAGS when it names no device) or
the OpenCL device THEANO_FLAGS names; see theano_platform/theano_env.py for what
happens when the GPU does not come up.  Each case is built and run here on
the GPU and, at the same time, in two child processes with ``device=cpu``:
the same graph in float32 (as the CPU runs it) and in float64 (Theano's own
ops), the reference (one process per device and type: Theano's scan compiles
its inner graph in the default mode, so a CPU function compiled in a GPU
process would still run its scan steps on the GPU).  Inputs are random
values drawn from the seed (default 1; ``--seeds N``: seeds S..S+N-1, each
case compiled once).  The measure (docs/gpu.md#the-checks-measure): each
output's largest error against float64, on the GPU, within FACTOR times
the CPU's own float32 error or one float32 ulp of the case's largest value,
whichever is larger.  Prints per case the worst ratio, the two devices'
largest errors in ulps of that value, the seed and output where the ratio
was worst, and how many of the compiled function's nodes run on the GPU;
exit status 1 if a case fails (named with its output and seeds: ``--seed``
reproduces it) or has no GPU node.  MRG random streams must agree exactly:
the same generator runs on both devices.
"""
import argparse
import contextlib
import os
import sys

if __name__ == '__main__':  # run as a file: import from the project root, not this folder
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from machinery import cli  # noqa: E402  (neither imports Theano)
from theano_platform import theano_flags  # noqa: E402


# the measure's factor (see UNIT below and docs/gpu.md#the-checks-measure)
FACTOR = 8.0


def parse_args(argv=None):
    """The options (before Theano: --help needs no GPU)."""
    p = cli.ArgumentParser(description='GPU check: GPU against CPU, graph by graph.')
    p.add_argument('--seed', type=int, default=1,
                   help='the seed of the inputs (default %(default)s)')
    p.add_argument('--seeds', type=int, default=1, metavar='N',
                   help='check seeds SEED..SEED+N-1, each case compiled once; the table '
                        'gives the worst of them (default %(default)s)')
    p.add_argument('--factor', type=float, default=FACTOR,
                   help="each output's error against float64, on the GPU, at most this "
                        "times the CPU's float32 error or one float32 ulp of the case's "
                        "largest value (default %(default)g)")
    p.add_argument('--cpu-reference', metavar='NPZ', help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.seeds < 1 or not args.factor > 0:
        p.error('--seeds takes 1 or more, --factor a positive number')
    return args


def _ask_for_gpu():
    """device=cuda unless THEANO_FLAGS already names a device (before theano_env)."""
    os.environ['THEANO_FLAGS'] = theano_flags.with_defaults(
        os.environ.get('THEANO_FLAGS', ''), [('device', 'cuda')])


if __name__ == '__main__':
    ARGS = parse_args()
    _ask_for_gpu()

from theano_platform import theano_env  # noqa: E402,F401  (must come before theano)

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
    return OrderedDict((k, tensor.TensorType(theano.config.floatX, (False,) * v.ndim)(k))
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


def _named(outputs, names):
    """The outputs, each named (the table names the worst output of a case)."""
    for output, name in zip(outputs, names.split()):
        output.name = name
    return outputs


def _grads(target, wrt):
    """d target / d each of wrt, named d<name>."""
    return _named(tensor.grad(target, wrt), ' '.join('d' + w.name for w in wrt))


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
    return [logit, y], _named([probs, cost], 'probs cost'), [_randn(rng, N * T_TRG, VOCAB) * 3,
                                       rng.randint(0, VOCAB, N * T_TRG).astype('int64')]


def case_embedding(rng):
    """Wemb[ids] (advanced indexing) and its gradient (advanced inc-subtensor)."""
    W = tensor.matrix('Wemb')
    ids = tensor.matrix('ids', dtype='int64')
    R = tensor.tensor3('R')
    emb = W[ids.flatten()].reshape([ids.shape[0], ids.shape[1], DIM_WORD])
    # repeated ids: the gradient accumulates several rows into one
    outs = _named([emb], 'emb') + _grads((emb * R).sum(), [W])
    return [W, ids, R], outs, [_randn(rng, VOCAB, DIM_WORD),
                                      rng.randint(0, 8, (T_SRC, N)).astype('int64'),
                                      _randn(rng, T_SRC, N, DIM_WORD)]


def _gru_graph(rng, with_grad):
    params = _init('gru', 'encoder', nin=DIM_WORD, dim=DIM)
    tp = _symbolic(params)
    x = tensor.tensor3('x')
    mask = tensor.matrix('mask')
    h = layers.get_layer('gru')[1](tp, x, {}, prefix='encoder', mask=mask)[0]
    outs = _named([h], 'h')
    if with_grad:
        R = tensor.tensor3('R')
        outs += _grads((h * R).sum(), [x] + list(tp.values()))
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
    outs = _named([dec['states'], dec['ctxs'], dec['alphas']], 'states ctxs alphas')
    ins = [emb, ctx, s0, y_mask, x_mask]
    vals = [_randn(rng, T_TRG, N, DIM_WORD), _randn(rng, T_SRC, N, 2 * DIM),
            _randn(rng, N, DIM), _mask(rng, T_TRG), _mask(rng, T_SRC)]
    if with_grad:
        R = tensor.tensor3('R')
        target = (dec['states'] * R).sum() + dec['ctxs'].sum() + (dec['alphas'] ** 2).sum()
        outs += _grads(target, [emb, ctx, s0] + list(tp.values()))
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
    grads = _grads((d ** 2).sum(), [items, state] + list(tp.values()))
    vals = [_randn(rng, T_TRG, N, DIM_WORD), _randn(rng, T_TRG, N, DIM), _mask(rng, T_TRG)]
    return ([items, state, y_mask] + list(tp.values()), _named([d, w], 'd weights') + grads,
            vals + _params_values(rng, params))


def case_batched_dot(rng):
    """tensor.batched_dot and the prefix mean (mean residual) built on it."""
    A, B, items, y_mask = (tensor.tensor3('A'), tensor.tensor3('B'),
                           tensor.tensor3('items'), tensor.matrix('m'))
    mean = layers.prefix_mean(items, layers.window_mask(y_mask))
    outs = _named([tensor.batched_dot(A, B), mean], 'batched_dot prefix_mean')
    return [A, B, items, y_mask], outs, [
        _randn(rng, N, T_TRG, T_TRG), _randn(rng, N, T_TRG, DIM_WORD),
        _randn(rng, T_TRG, N, DIM_WORD), _mask(rng, T_TRG)]


def case_mrg_dropout(rng):
    """MRG dropout mask (binomial) and multinomial sampling: must agree exactly."""
    x, p = tensor.matrix('x'), tensor.matrix('p')
    trng = MRG_RandomStream(1234)
    dropped = layers.dropout_layer(x, theano.shared(numpy.float32(1.)), trng)
    sample = trng.multinomial(pvals=tensor.nnet.softmax(p)).argmax(1)
    return [x, p], _named([dropped, sample], 'dropped sample'), [_randn(rng, 64, 96), _randn(rng, N, VOCAB)]


CASES = OrderedDict((name[5:], fn) for name, fn in sorted(globals().items())
                    if name.startswith('case_'))


def gpu_nodes(fn):
    """(nodes on the GPU, all nodes) of a compiled function."""
    nodes = fn.maker.fgraph.toposort()
    on_gpu = [n for n in nodes if type(n.op).__name__.startswith(('Gpu', 'GPUA')) or
              getattr(n.op, 'info', {}).get('gpua', False)]
    return len(on_gpu), len(nodes)


# --------------------------------------------------------------------------
# The measure (docs/gpu.md#the-checks-measure).  Each output o of a case, on
# the device (g) and on the CPU in float32 (c), is compared with the same
# graph in float64 on the CPU (r); its error is e(x) = max|x - r|.  The two
# float32 errors are samples of one rounding process (other orders of the
# sums, another tanh): the device passes where e(g) <= FACTOR * max(e(c),
# UNIT * L), UNIT float32's spacing at 1 (2^-23) and L the case's largest
# |r|: UNIT * L is about the least rounding an output computed from values
# of size L carries.  A gradient that is zero in exact arithmetic (the
# attention bias c_tt's: softmax ignores a constant added to every energy)
# holds that noise alone, on either device.
UNIT = float(numpy.finfo(numpy.float32).eps)
EXACT_CASES = ('mrg_dropout',)   # the same generator: equal bits


def output_errors(gpu, cpu, reference):
    """[(output index, e(gpu), e(cpu))] and the case's scale L (max |r|)."""
    refs = [numpy.asarray(r, dtype='float64') for r in reference]
    scale = max([numpy.abs(r).max() for r in refs if r.size] + [0.])
    errors = []
    for i, (g, c, r) in enumerate(zip(gpu, cpu, refs)):
        g = numpy.asarray(g, dtype='float64')
        if g.shape != r.shape or not numpy.all(numpy.isfinite(g)):
            errors.append((i, float('inf'), 0.))
        elif r.size:
            errors.append((i, numpy.abs(g - r).max(), numpy.abs(c - r).max()))
    return errors, scale


def case_verdict(gpu, cpu, reference):
    """{'ratio': max over outputs of e(g) / max(e(c), UNIT L), 'worst': its
    output's index, 'gpu_ulps', 'cpu_ulps': the largest errors in units of
    UNIT L}; the case passes where ratio <= FACTOR."""
    errors, scale = output_errors(gpu, cpu, reference)
    floor = max(UNIT * scale, numpy.finfo(numpy.float64).tiny)
    ratios = [(e_gpu / max(e_cpu, floor), i) for i, e_gpu, e_cpu in errors]
    ratio, worst = max(ratios)
    return dict(ratio=ratio, worst=worst,
                gpu_ulps=max(e for _, e, _ in errors) / floor,
                cpu_ulps=max(e for _, _, e in errors) / floor)


def exact_verdict(gpu, cpu):
    """The exact cases: ratio 0 where every output is equal, else inf."""
    equal = [numpy.array_equal(numpy.asarray(g), numpy.asarray(c)) for g, c in zip(gpu, cpu)]
    worst = equal.index(False) if False in equal else 0
    return dict(ratio=0. if all(equal) else float('inf'), worst=worst,
                gpu_ulps=0., cpu_ulps=0.)


# --------------------------------------------------------------------------
# Running the cases

def case_inputs(name, build, seed):
    """The case's graph (inputs, outputs) and input values for seed."""
    # the case name in the seed: each case draws different inputs
    rng = numpy.random.RandomState([seed, sum(map(ord, name))])
    # the layers' initialisers draw from NumPy's global generator
    numpy.random.seed([seed, sum(map(ord, name)), 1])
    return build(rng)


def run_case(name, build, seeds):
    """Compile one case in the default mode and run it on every seed's
    values: ({seed: outputs}, output names, fn, compile seconds)."""
    inputs, outputs, values = case_inputs(name, build, seeds[0])
    t0 = time.time()
    fn = theano.function(inputs, outputs, on_unused_input='ignore')
    compile_sec = time.time() - t0
    results = {}
    for seed in seeds:
        if seed != seeds[0]:
            values = case_inputs(name, build, seed)[2]
        results[seed] = [numpy.asarray(o) for o in fn(*values)]
    return results, [o.name for o in outputs], fn, compile_sec


def reference_cases():
    """The cases this process computes a reference of: float64 (Theano's
    own graph: fast_ops are float32 C code) leaves out the exact ones."""
    if theano.config.floatX == 'float64':
        return [n for n in CASES if n not in EXACT_CASES]
    return list(CASES)


def cpu_reference(path, seeds):
    """Every case's outputs on the CPU (this process), saved to path (.npz)."""
    from theano_platform import fast_ops
    arrays = {}
    for name in reference_cases():
        graphs = (fast_ops.original_graph() if theano.config.floatX == 'float64'
                  else contextlib.nullcontext())
        with graphs:
            results = run_case(name, CASES[name], seeds)[0]
        for seed, outs in results.items():
            arrays.update(('%d/%s/%d' % (seed, name, i), o) for i, o in enumerate(outs))
    numpy.savez(path, **arrays)


def start_cpu_reference(path, seeds, float_type):
    """The CPU half in a child process (device=cpu, floatX float_type),
    running while we compile."""
    cmd = [sys.executable, os.path.abspath(__file__), '--cpu-reference', path,
           '--seed', str(seeds[0]), '--seeds', str(len(seeds))]
    env = theano_env.device_env('cpu')
    # the same graphs, compiled sooner
    env['THEANO_FLAGS'] = theano_flags.with_values(
        env['THEANO_FLAGS'], [('mode', 'FAST_COMPILE'), ('floatX', float_type)])
    return subprocess.Popen(cmd, env=env)


def device_line():
    from theano.gpuarray.type import get_context
    import pygpu
    ctx = get_context(None)
    return ('device %s: %s, pygpu %s, libgpuarray API %s, %d MiB free, Theano %s'
            % (theano.config.device, ctx.devname, pygpu.__version__,
               pygpu.gpuarray.api_version(), ctx.free_gmem // 2 ** 20, theano.__version__))


def compare(rows, cpu32, cpu64, factor):
    """One result row per case: its worst seed's verdict on the device
    against the CPU's float32 and float64 numbers."""
    table = []
    for name, build, results, names, fn, compile_sec in rows:
        verdicts = []
        for seed, gpu in sorted(results.items()):
            cpu = [cpu32['%d/%s/%d' % (seed, name, i)] for i in range(len(gpu))]
            if name in EXACT_CASES:
                verdict = exact_verdict(gpu, cpu)
            else:
                ref = [cpu64['%d/%s/%d' % (seed, name, i)] for i in range(len(gpu))]
                verdict = case_verdict(gpu, cpu, ref)
            verdicts.append(dict(verdict, seed=seed,
                                 failed=not verdict['ratio'] <= factor))
        worst = max(verdicts, key=lambda v: v['ratio'])
        n_gpu, n_all = gpu_nodes(fn)
        table.append(OrderedDict([
            ('case', name), ('ratio', worst['ratio']), ('seed', worst['seed']),
            ('output', names[worst['worst']] if worst['ratio'] else '-'), ('gpu_ulps', max(v['gpu_ulps'] for v in verdicts)),
            ('cpu_ulps', max(v['cpu_ulps'] for v in verdicts)),
            ('failed_seeds', [v['seed'] for v in verdicts if v['failed']]),
            ('gpu_nodes', '%d/%d' % (n_gpu, n_all)), ('compile_sec', compile_sec),
            ('ok', not any(v['failed'] for v in verdicts) and n_gpu > 0),
            ('what', (build.__doc__ or '').strip())]))
    return table


def print_table(rows):
    print('%-20s %-7s %-7s %-7s %-6s %-17s %-10s %-8s %-3s %s' % (
        'case', 'ratio', 'gpu_ulp', 'cpu_ulp', 'seed', 'worst output', 'gpu nodes',
        'compile', 'ok', 'what'))
    for r in rows:
        print('%-20s %-7.3g %-7.3g %-7.3g %-6d %-17s %-10s %-8s %-3s %s' % (
            r['case'], r['ratio'], r['gpu_ulps'], r['cpu_ulps'], r['seed'], r['output'],
            r['gpu_nodes'], '%.1fs' % r['compile_sec'], 'yes' if r['ok'] else 'NO',
            r['what']))


def main(args):
    seeds = list(range(args.seed, args.seed + args.seeds))
    if args.cpu_reference:
        return cli.run(lambda: cpu_reference(args.cpu_reference, seeds))
    return cli.run(lambda: check(args, seeds))


def reference_numbers(seeds):
    """Starts both CPU references; a function that waits for them and gives
    their numbers (float32, float64)."""
    tmp = tempfile.TemporaryDirectory()
    paths = [os.path.join(tmp.name, 'cpu-%s.npz' % t) for t in ('float32', 'float64')]
    children = [start_cpu_reference(path, seeds, float_type)
                for path, float_type in zip(paths, ('float32', 'float64'))]

    def numbers():
        with tmp:
            for child in children:
                if child.wait() != 0:
                    raise cli.CommandError('a CPU reference process failed (exit %d)'
                                           % child.returncode)
            return [dict(numpy.load(path)) for path in paths]
    return numbers


def check(args, seeds):
    """Every case on the GPU against the CPU reference processes' numbers."""
    if not theano_env.gpu_requested():
        raise cli.CommandError('the GPU check needs a GPU device (device=cuda or '
                               'device=opencl0:0), THEANO_FLAGS has device=%s'
                               % theano.config.device)
    print(device_line())
    print('seeds %s, factor %g: each output within %g x max(the CPU float32 error, '
          'one ulp of the largest value) of the float64 graph (MRG random streams: exact)'
          % (seeds[0] if len(seeds) == 1 else '%d-%d' % (seeds[0], seeds[-1]),
             args.factor, args.factor))
    sys.stdout.flush()
    numbers = reference_numbers(seeds)
    rows = [(name, build) + run_case(name, build, seeds) for name, build in CASES.items()]
    table = compare(rows, *numbers(), factor=args.factor)
    print_table(table)
    failed = [r for r in table if not r['ok']]
    if not failed:
        print('GPU check: passed (%d cases, %d seed%s)'
              % (len(table), len(seeds), 's' if len(seeds) > 1 else ''))
        return
    for r in failed:
        print('GPU check: FAILED %s, output %s, seeds %s (reproduce: --seed %d)'
              % (r['case'], r['output'], ' '.join(map(str, r['failed_seeds'])) or '-',
                 r['failed_seeds'][0] if r['failed_seeds'] else seeds[0]))
    raise cli.CommandError('the GPU differs from the CPU beyond the tolerance in %s'
                           % ', '.join(r['case'] for r in failed))


if __name__ == '__main__':
    sys.exit(main(ARGS))
