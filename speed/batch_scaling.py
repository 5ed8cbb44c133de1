"""How the cost of an update grows with the batch, and what that leaves to N
data-parallel workers.

    .venv/bin/python speed/batch_scaling.py [--config multi30k] [--decoder baseline]
        [--batch-sizes 1,2,4,8,16,32,64] [--updates 20] [--workers 2] [--threads 1]

One process compiles the training functions once (as speed/benchmark.py
train: nmt_training.CompiledModel, the function cache off) and times, for
each batch size n, ``--updates`` updates on synthetic batches of the
config's lengths (after 2 of warm-up): the gradient function (cost,
gradients, their norm and clipping: ``f_grad_shared``) and the optimizer's
step (``f_update``) apart, in CPU seconds of this process (on one thread the
wall clock of a busy machine moves more).  A straight line through the
sizes from 4 on gives the part of an update that does not depend on the
batch (the recurrences' per-step work on the weights, the weight-sized
products and arrays, the optimizer) and the cost of one more sentence.

Each of N workers computes the gradients of B/N sentences and the
optimizer's step of 1/N of the parameters (data_parallel.py), so with free
communication N workers would do an update of B sentences in G(B/N) +
A/N, where G(n) is the gradient function's time and A the step's:
``workers_bound`` = (G(B) + A) / (G(B/N) + A/N), the speed-up that N
workers on N cores cannot exceed here (it counts the norm and the clipping
of the whole gradient on each worker, a few ms more than a worker does, and
no time for the exchange, which costs more).  The last stdout line is one
JSON object with the figures and the machine.
"""
import os
import sys

if __name__ == '__main__':  # run as a file: import from the project root, not this folder
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from theano_platform import theano_env  # noqa: F401  (must come before theano)
from machinery import cli
from speed import benchmark

import argparse
import json
import time
from collections import OrderedDict

import numpy

DEFAULT_SIZES = (1, 2, 4, 8, 16, 32, 64)
FIT_FROM = 4        # the smallest batch of the straight line


def timed_batch_size(model, options, config, n, n_updates, seed):
    """(gradient CPU s, step CPU s, wall s) an update at batch size n."""
    batches = benchmark.synthetic_batches(
        dict(options, batch_size=n), benchmark.WARMUP_UPDATES + n_updates, seed,
        benchmark.TRAIN_LENGTHS.get(config))
    lrate = options['lrate']
    for batch in batches[:benchmark.WARMUP_UPDATES]:
        model.f_grad_shared(*batch)
        model.f_update(lrate)
    grad = step = wall = 0.
    for batch in batches[benchmark.WARMUP_UPDATES:]:
        t, c = time.time(), time.process_time()
        cost = model.f_grad_shared(*batch)
        c2 = time.process_time()
        model.f_update(lrate)
        grad, step = grad + c2 - c, step + time.process_time() - c2
        wall += time.time() - t
        if not numpy.isfinite(cost):
            raise cli.CommandError('non-finite cost at batch size %d' % n)
    return grad / n_updates, step / n_updates, wall / n_updates


def straight_line(sizes, seconds):
    """(fixed, per sentence) of the least-squares line seconds = fixed +
    per_sentence * size over the sizes from FIT_FROM on (all, if fewer than
    two are that large)."""
    points = [(n, s) for n, s in zip(sizes, seconds) if n >= FIT_FROM]
    if len(points) < 2:
        points = list(zip(sizes, seconds))
    slope, intercept = numpy.polyfit(*zip(*points), 1)
    return float(intercept), float(slope)


def workers_bound(rows, batch, workers):
    """The speed-up of ``workers`` workers over one process at ``batch``
    sentences with free communication (module docstring), or None when the
    sizes measured lack batch or batch / workers."""
    by_size = {r['batch_size']: r for r in rows}
    share = batch // workers
    if batch % workers or batch not in by_size or share not in by_size:
        return None
    whole, part = by_size[batch], by_size[share]
    return ((whole['gradient_cpu_sec'] + whole['step_cpu_sec']) /
            (part['gradient_cpu_sec'] + part['step_cpu_sec'] / workers))


def measure(args):
    options = benchmark.model_options(args.config, args.decoder)
    numpy.random.seed(args.seed)
    benchmark.log('%s/%s: compiling' % (args.config, args.decoder))
    model = benchmark.trainers_model(options)
    model.use_noise.set_value(numpy.float32(1.))
    rows = []
    for n in args.batch_sizes:
        grad, step, wall = timed_batch_size(model, options, args.config, n, args.updates,
                                            args.seed)
        # to 0.1 microsecond: a tiny model's step takes a few microseconds
        rows.append(OrderedDict([('batch_size', n), ('gradient_cpu_sec', round(grad, 7)),
                                 ('step_cpu_sec', round(step, 7)),
                                 ('wall_sec', round(wall, 7))]))
        benchmark.log('batch %d: gradients %.1f ms, step %.1f ms CPU an update (wall %.1f)'
                      % (n, 1000 * grad, 1000 * step, 1000 * wall))
    return options, rows


def report(args, options, rows):
    sizes = [r['batch_size'] for r in rows]
    fixed, per_sentence = straight_line(sizes, [r['gradient_cpu_sec'] for r in rows])
    batch = options['batch_size']
    bound = workers_bound(rows, batch, args.workers)
    result = OrderedDict([
        ('mode', 'batch_scaling'), ('config', args.config), ('decoder', args.decoder),
        ('threads', args.threads), ('updates_per_size', args.updates), ('rows', rows),
        ('gradient_fixed_cpu_sec', round(fixed, 7)),
        ('gradient_cpu_sec_per_sentence', round(per_sentence, 8)),
        ('fit_from_batch_size', FIT_FROM), ('batch_size', batch),
        ('fixed_share_at_batch', round(fixed / (fixed + per_sentence * batch), 3)),
        ('workers', args.workers),
        ('workers_bound', None if bound is None else round(bound, 3)),
        ('loadavg_1min_at_end', round(os.getloadavg()[0], 2)),
        ('seed', args.seed), ('machine', benchmark.machine_info())])
    benchmark.log('gradients: %.1f ms fixed + %.2f ms a sentence (%.0f%% fixed at %d); '
                  '%d workers at most %s x one process' % (
                      1000 * fixed, 1000 * per_sentence,
                      100 * result['fixed_share_at_batch'], batch, args.workers,
                      '?' if bound is None else '%.2f' % bound))
    return result


def sizes_list(text):
    try:
        sizes = sorted({int(n) for n in text.split(',')})
    except ValueError:
        raise argparse.ArgumentTypeError('batch sizes separated by commas, not %r' % text)
    if not sizes or sizes[0] < 1:
        raise argparse.ArgumentTypeError('batch sizes must be at least 1: %r' % text)
    return sizes


def parse_args(argv):
    p = cli.ArgumentParser(description=__doc__.split('\n\n')[0].replace('\n', ' '))
    p.add_argument('--config', choices=list(benchmark.CONFIGS), default='multi30k',
                   help='model size (speed/benchmark.py\'s configs; default multi30k)')
    p.add_argument('--decoder', default='baseline', help='a decoder (default baseline)')
    p.add_argument('--batch-sizes', type=sizes_list, default=list(DEFAULT_SIZES),
                   metavar='N,N', help='batch sizes timed (default %s)'
                   % ','.join(map(str, DEFAULT_SIZES)))
    p.add_argument('--updates', type=cli.positive_int, default=20,
                   help='timed updates at each size (default 20)')
    p.add_argument('--workers', type=cli.positive_int, default=2,
                   help='the workers whose bound is computed (default 2)')
    p.add_argument('--threads', type=cli.positive_int, default=1,
                   help='BLAS/OpenMP threads of this process (default 1: a worker\'s)')
    p.add_argument('--seed', type=int, default=1234, help='parameters and batches (default 1234)')
    args = p.parse_args(argv)
    try:
        benchmark.decoder_options(args.decoder)
    except ValueError as e:
        p.error(str(e))
    return args


def main(argv=None):
    args = parse_args(cli.arguments(argv))
    theano_env.limit_threads(args.threads)

    def run():
        options, rows = measure(args)
        print(json.dumps(report(args, options, rows)))
    return cli.run(run)


if __name__ == '__main__':
    sys.exit(main())
