"""Speed of training and translation, on synthetic data, for every decoder.

    python speed/benchmark.py train|translate --config tiny|mid|paper|multi30k
        [--decoder NAME] [--updates N] [--sentences N]
        [--original-style | --side-by-side | --marian] [--threads N]
        [--profile [FILE]] [--batch-size B] [--processes P] [--seed S]
        [--workers N]
    python speed/benchmark.py translate --model MODEL.npz --source FILE
        --dictionaries S.pkl T.pkl [--marian [--marian-mini-batches 1,16,64]]
    mpirun -np N python speed/benchmark.py allreduce [--floats F] [--repeats R]

train      compiles the model that ``nmt.train`` trains, with its class
           (nmt_training.CompiledModel: the C ops of theano_platform/fast_ops.py,
           adadelta fused into one Theano function, ``allow_gc=False``; the
           function cache off) and times N updates on random batches (ids
           uniform over the vocabulary, source and target lengths uniform in
           [maxlen//3, maxlen-1], a new batch each update), after a warm-up
           of 2 updates.  ``--original-style`` builds it as the original
           dl4mt-tutorial did (Theano's own ops, ``f_grad_shared`` then
           ``f_update``, ``allow_gc=True``): a stand-in for the original code
           on the same machine.  ``--side-by-side`` compiles both in one
           process and gives each batch to both, in alternating order, so
           that the machine's load hits both alike; it reports both and their
           ratios (wall clock and CPU time).  ``--profile`` runs Theano's
           profiler and prints the ten most expensive ops, scans included
           (speed/theano_profile.py), with FILE also Theano's full summaries.
translate  compiles both samplers of ``sampler.build_sampler`` for a randomly
           initialised model (dl4mt's and the batched one) and translates the
           same N random source sentences twice in one run: with the
           one-sentence search (docs/equations.md#decoding-beam-search;
           ``beam_search.beam_search``, dl4mt's sampler) and with the batched search
           (translation/decoding.py's ``Translator``, as translate.py, over
           length-sorted batches of
           ``--batch-size`` sentences, the batched sampler), beam 12, maxlen
           = 2 x source length, picking the best hypothesis with the
           length-normalised score.  ``identical`` says whether both gave the
           same translations.  ``--processes P`` also times the batched search
           in P worker processes (forked after compiling).  A random model
           almost never emits eos early, so nearly every sentence runs to
           maxlen: the figures are a worst case for the lengths used.
           ``--profile`` profiles f_next in both searches (its top ops and
           the share of each search's wall time spent in it).
train --marian  then Marian 1.12 (``--type amun``: dl4mt's architecture) on
           the same batches with the same dimensions, optimiser and threads,
           and the ratio of the words/s; on several threads both of Marian's
           ways, asynchronous (its default: a batch a thread) and
           ``--sync-sgd`` (each batch split, as our workers split it); with
           ``--workers N``, both of ours against both of Marian's on the
           machine's cores (speed/marian.py; Marian is installed
           from the ``pymarian`` wheel into ``.venv-marian``, or its absence
           said in one line).  ``--config multi30k`` is the model of
           docs/multi30k.md (Adam, batch 32) on batches of Multi30k's lengths.
translate --model MODEL.npz --source FILE --dictionaries S.pkl T.pkl [--marian]
           a trained model instead: translate.py's batched search over the
           file (beam 12, batches of ``--batch-size``, ``--processes`` forked
           workers), then with ``--marian`` Marian's decoder on the same model
           (written as its amun file) at each of ``--marian-mini-batches``,
           on threads x processes threads: sentences/s of each, the ratio to
           Marian's best, and the share of translations that are the same
           word for word (speed/file_decoding.py).
train --workers N  one process on every core, then N MPI workers (mpirun,
           data_parallel.py) sharing the cores (each its share of the
           threads), on the same batches, one after the other in one
           command: both figures and their ratio (docs/distributed.md).
           Under mpirun, ``train`` times the data-parallel update itself
           and its parts (``part_sec_per_update``: the worker's gradients,
           their sum over the workers, the gradient's norm, the clipping and
           the optimizer's step of its group of parameters, the exchange of
           the new parameters), with each part's system CPU time
           (``part_system_sec_per_update``).
allreduce  under mpirun: the time of a sum over the workers
           (``distributed.MPIWorld.sum_arrays``, MPI Allreduce) of F float32
           (default: the papers' baseline, 108,725,885 parameters), R times.

Decoders: baseline | mean | attentive | attentive-SCORING (content,
content_scope, sum, product, dot) | memory[-content_scope] |
selfattn[-content_scope] | all (each in turn, in a fresh process: one JSON line
each, then a summary line).

Progress goes to stderr; the last stdout line is one JSON object with the
figures, the options that shape the model and a description of the machine.
Besides wall-clock rates it reports the process's CPU time (``cpu_*``,
``cpu_share``), steadier than the wall clock on a machine shared with other
work.  ``allow_gc`` is set before Theano is imported (a later
``theano.config.allow_gc = ...`` does not reach the default linker);
``allow_gc_effective`` is what the compiled training function does.
"""
import os
import sys

if __name__ == '__main__':  # run as a file: import from the project root, not this folder
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

if any(a == '--profile' or a.startswith('--profile=') for a in sys.argv[1:]):
    # Theano's profiler times GPU ops only when CUDA launches them
    # synchronously, which the driver reads as the device starts
    os.environ.setdefault('CUDA_LAUNCH_BLOCKING', '1')
from theano_platform import theano_env  # noqa: F401  (must come before theano)
from machinery import cli
from theano_platform import machine
from theano_platform import module_compiles
from machinery.progress import seconds_left

import json
import multiprocessing
import resource
import subprocess
import time
from collections import OrderedDict

import numpy

CONFIGS = OrderedDict([
    ('tiny', dict(dim_word=16, dim=24, n_words_src=100, n_words=100,
                  batch_size=16, maxlen=20, use_dropout=False,
                  optimizer='adadelta', clip_c=1.0)),
    # for quick comparisons: the papers' shape at a quarter of the work
    ('mid', dict(dim_word=256, dim=512, n_words_src=20000, n_words=20000,
                 batch_size=80, maxlen=50, use_dropout=True,
                 optimizer='adadelta', clip_c=1.0)),
    ('paper', dict(dim_word=500, dim=1024, n_words_src=50000, n_words=50000,
                   batch_size=80, maxlen=50, use_dropout=True,
                   optimizer='adadelta', clip_c=1.0)),
    # the Multi30k model of docs/multi30k.md (train_multi30k.sh's settings)
    ('multi30k', dict(dim_word=128, dim=256, n_words_src=5201, n_words=7064,
                      batch_size=32, maxlen=100, use_dropout=False,
                      optimizer='adam', lrate=0.0004, clip_c=1.0)),
])
DEFAULT_UPDATES = {'tiny': 50, 'mid': 5, 'paper': 5, 'multi30k': 100}
DEFAULT_SENTENCES = {'tiny': 50, 'mid': 16, 'paper': 32, 'multi30k': 100}
# source lengths (words, before eos) of the translate benchmark
SOURCE_LENGTHS = {'tiny': (5, 15), 'mid': (20, 30), 'paper': (20, 30), 'multi30k': (8, 20)}
# sentence lengths (words, before eos) of the synthetic training batches:
# uniform in [maxlen // 3, maxlen - 1], or, for a corpus's model, uniform
# over the corpus's middle 90% (Multi30k's BPE train: 8-23 words, mean 13.8)
TRAIN_LENGTHS = {'multi30k': (8, 22)}
WARMUP_UPDATES = 2
PAPER_PARAMETERS = 108725885   # nmt.count_params of the paper config's baseline
PROFILE_TOP = 10
BEAM = 12

def decoder_options(name):
    """Model options of a --decoder name, from the decoder registry
    (ValueError if unknown)."""
    import layers
    return layers.variant_options(name)


def all_decoders():
    """What `--decoder all` runs: every variant of the registry, in order."""
    import layers
    return list(layers.VARIANTS)


def model_options(config, decoder):
    import nmt
    opts = dict(CONFIGS[config])
    opts.update(decoder_options(decoder))
    return nmt.fill_options(opts)


def reported_options(options):
    """The options that shape the model and its cost."""
    import layers
    keys = ['dim_word', 'dim', 'n_words_src', 'n_words', 'encoder', 'decoder',
            'batch_size', 'maxlen', 'use_dropout', 'optimizer', 'clip_c',
            'decay_c', 'alpha_c']
    variant, scoring = layers.variant_of(options)
    keys += [k for k in variant.options if k not in keys]
    if scoring is not None:
        keys.append('att_scoring')
    return OrderedDict((k, options[k]) for k in keys)


def machine_info():
    """The machine as machine.description() records it (CPU, its maker and
    vector unit, the BLAS and its kernels; docs/speed.md reports Intel and
    AMD apart), with the GPU and the load."""
    import theano
    try:
        load = [round(v, 2) for v in os.getloadavg()]
    except OSError:
        load = None
    info = machine.description()
    info.update([
        # OpenBLAS's kernels where theano_env (or the user) named them
        ('openblas_coretype', os.environ.get('OPENBLAS_CORETYPE')),
        ('gpu', gpu_name()),
        # the caching allocator keeps what was allocated: about the peak
        ('gpu_mem_used_mib', gpu_mem_used_mib()),
        ('floatX', theano.config.floatX),
        ('allow_gc_flag', bool(theano.config.allow_gc)),
        ('loadavg_at_end', load),
    ])
    return info


def gpu_name():
    """The GPU's name when Theano runs on one (THEANO_FLAGS=device=cuda), else None."""
    import theano
    if not theano.config.device.startswith('cuda'):
        return None
    from theano.gpuarray.type import get_context
    return get_context(None).devname


def gpu_mem_used_mib():
    import theano
    if not theano.config.device.startswith('cuda'):
        return None
    from theano.gpuarray.type import get_context
    ctx = get_context(None)
    return (ctx.total_gmem - ctx.free_gmem) // 2 ** 20


def peak_rss_mb():
    # ru_maxrss is in kB on Linux
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024., 1)


def log(msg):
    print('[benchmark] %s' % msg, file=sys.stderr)
    sys.stderr.flush()


# --------------------------------------------------------------------------
# train

def synthetic_batches(options, n_batches, seed, lengths=None):
    """n_batches prepared batches of random ids (1..V-1; 0 is eos only),
    sentence lengths uniform in ``lengths`` (lo, hi)."""
    import nmt
    rng = numpy.random.RandomState(seed)
    maxlen = options['maxlen']
    lo, hi = lengths or (maxlen // 3, maxlen - 1)
    batches = []
    for _ in range(n_batches):
        xs, ys = [], []
        for _ in range(options['batch_size']):
            xs.append(list(rng.randint(1, options['n_words_src'],
                                       size=rng.randint(lo, hi + 1))))
            ys.append(list(rng.randint(1, options['n_words'],
                                       size=rng.randint(lo, hi + 1))))
        batch = nmt.prepare_data(xs, ys, maxlen=maxlen,
                                 n_words_src=options['n_words_src'],
                                 n_words=options['n_words'])
        assert batch[0] is not None and batch[0].shape[1] == options['batch_size']
        batches.append(batch)
    return batches


STYLES = ('project', 'original')
STYLE_TEXT = {'project': 'fast ops, fused adadelta, allow_gc=False',
              'original': "original style: Theano's ops, f_grad_shared + f_update, "
                          'allow_gc=True'}


def style_mode(style):
    """Theano's default mode with the style's garbage collection (for the
    side-by-side run; a single-style run uses the flag set at import)."""
    from theano.compile.mode import get_default_mode
    return get_default_mode().clone(link_kwargs={'allow_gc': style == 'original'})


def compile_training(options, style, tparams=None, mode=None):
    """The training function(s) of one style: the trainer's model that
    nmt.py compiles ('project': nmt_training.CompiledModel, the function
    cache off), or a stand-in for the original code ('original': Theano's
    ops, f_grad_shared then f_update, over ``tparams``: the project's
    parameters side by side, else fresh ones)."""
    import theano

    log('compiling the training function (%s)' % STYLE_TEXT[style])
    if mode is not None:
        # side by side: scan reads the flag when it compiles its loop
        theano.config.allow_gc = style == 'original'
    t1, c1, g1 = time.time(), time.process_time(), children_cpu()
    modules = dict(module_compiles.stats)
    model = (trainers_model(options) if style == 'project'
             else original_style_model(options, tparams, mode))
    model.use_noise.set_value(numpy.float32(1.))
    compiled = dict(style=style, model=model, f_grad_shared=model.f_grad_shared,
                    f_update=model.f_update, lrate=options['lrate'],
                    compile_sec=time.time() - t1, compile_cpu=time.process_time() - c1,
                    compile_gxx_cpu=children_cpu() - g1,
                    compiled_modules=sum(module_compiles.stats[k] - modules[k]
                                         for k in ('compiled', 'compiled_ahead')),
                    functions=[f for f in (model.f_grad_shared, model.f_update)
                               if isinstance(f, theano.compile.function.types.Function)])
    log('compiled in %.1f s: %.1f CPU s in this process (graphs optimised, linked), '
        '%.1f in g++ (%d C modules)' % (compiled['compile_sec'], compiled['compile_cpu'],
                                        compiled['compile_gxx_cpu'],
                                        compiled['compiled_modules']))
    return compiled


def trainers_model(options):
    """nmt_training.CompiledModel of a fresh model with ``options``, as
    nmt.py builds it (compiled: the function cache is off)."""
    from theano_platform import function_cache
    import nmt_training
    os.environ[function_cache.VARIABLE] = 'off'
    return nmt_training.CompiledModel(options, options, reloading=False)


def original_style_model(options, tparams, mode):
    """The training functions as the original code built them (Theano's
    own ops, Adadelta's two functions) over ``tparams`` (None: fresh ones)."""
    import types
    from theano_platform import fast_ops
    import nmt_model
    import optimizers
    from layers import init_tparams
    if tparams is None:
        tparams = init_tparams(nmt_model.init_params(options))
    with fast_ops.original_graph():
        graph = nmt_model.training_graph(tparams, options)
    f_grad_shared, f_update = optimizers.training_functions(
        options, tparams, graph.inputs, graph.train_cost, fused=False, mode=mode)
    return types.SimpleNamespace(tparams=tparams, use_noise=graph.use_noise,
                                 f_grad_shared=f_grad_shared, f_update=f_update)


def timed_exchange(world, model, clip_c):
    """The training loop's data_parallel.GradientExchange, each part of its
    update timed (its ``part_time``: part -> [wall seconds, system CPU
    seconds])."""
    import data_parallel

    class TimedExchange(data_parallel.GradientExchange):
        def part(self, name, function, *args):
            t, system = time.time(), resource.getrusage(resource.RUSAGE_SELF).ru_stime
            result = function(*args)
            self.part_time[name][0] += time.time() - t
            self.part_time[name][1] += resource.getrusage(resource.RUSAGE_SELF).ru_stime - system
            return result
    exchange = TimedExchange(world, model, clip_c)
    exchange.part_time = OrderedDict((part, [0., 0.]) for part in DATA_PARALLEL_PARTS)
    return exchange


def compile_data_parallel_training(options):
    """This worker's part of a data-parallel update: the trainer's model as
    nmt.py compiles it under mpirun (trainers_model) and the training loop's
    exchange (data_parallel.GradientExchange), the seconds of each part of
    an update counted (timed_exchange)."""
    from machinery import distributed

    world = distributed.world()
    log('compiling the data-parallel functions (worker %d of %d)' % (world.rank, world.size))
    t1, c1 = time.time(), time.process_time()
    model = trainers_model(options)
    model.use_noise.set_value(numpy.float32(1.))
    exchange = timed_exchange(world, model, options['clip_c'])
    compiled = dict(style='data_parallel', world=world, part_time=exchange.part_time,
                    model=model,
                    f_grad_shared=lambda *batch: exchange.update(list(batch), options['lrate']),
                    f_update=lambda lrate: None, lrate=options['lrate'],
                    compile_sec=time.time() - t1, compile_cpu=time.process_time() - c1,
                    functions=[f for f in (model.f_worker_gradients, model.f_grad_shared)
                               if f is not None])
    log('compiled in %.1f s' % compiled['compile_sec'])
    return compiled


# the parts of a worker's update that the benchmark times
# (compile_data_parallel_training)
DATA_PARALLEL_PARTS = ('gradients', 'sum', 'norm', 'clip', 'optimizer', 'share')


def run_update(compiled, batch):
    """One update; returns the cost."""
    c = compiled['f_grad_shared'](*batch)
    compiled['f_update'](compiled['lrate'])
    return float(c)


def children_cpu():
    """CPU seconds of this process's ended children (Theano's g++ runs)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def seconds_since_start():
    """Seconds since this process started (/proc: a re-execution by
    theano_env keeps the process and its start), or None."""
    try:
        with open('/proc/self/stat') as f:
            ticks = int(f.read().rsplit(')', 1)[1].split()[19])   # field 22, starttime
        with open('/proc/uptime') as f:
            return float(f.read().split()[0]) - ticks / os.sysconf('SC_CLK_TCK')
    except (OSError, ValueError, IndexError):
        return None


class StyleTimer(object):
    """Wall and CPU time, target words and costs of one style's updates."""

    def __init__(self, compiled):
        self.compiled = compiled
        self.wall, self.cpu, self.words, self.costs, self.per_update = 0., 0., 0, [], []
        self.system = self.ticked = self.main_thread = 0.
        self.first_update_after = None

    def update(self, batch, timed=True):
        t, c, m = time.time(), time.process_time(), time.thread_time()
        ticks = os.times()
        self.costs.append(run_update(self.compiled, batch))
        # the Python thread's own CPU time: Theano's loop, the launches (on
        # pocl the kernels run on its other threads)
        main = time.thread_time() - m
        wall, cpu = time.time() - t, time.process_time() - c
        after = os.times()
        if self.first_update_after is None:
            self.first_update_after = seconds_since_start()
        if timed:
            self.wall += wall
            self.cpu += cpu
            self.main_thread += main
            # user and system time both from os.times: the same clock ticks, so
            # the share stays within [0, 1] however short the update
            self.system += after.system - ticks.system
            self.ticked += (after.user - ticks.user) + (after.system - ticks.system)
            self.words += int(batch[3].sum())
            self.per_update.append(wall)
        return wall, cpu

    def figures(self):
        n = len(self.per_update)
        if not all(numpy.isfinite(self.costs)):
            raise cli.CommandError('non-finite cost during the benchmark: %r' % self.costs)
        return OrderedDict([
            ('words_per_sec', round(self.words / self.wall, 2)),
            ('updates_per_sec', round(n / self.wall, 4)),
            ('sec_per_update', round(self.wall / n, 4)),
            ('sec_per_update_min', round(min(self.per_update), 4)),
            ('sec_per_update_max', round(max(self.per_update), 4)),
            # CPU time of this process (all its threads): less sensitive than
            # the wall clock to other work on a shared machine
            ('cpu_sec_per_update', round(self.cpu / n, 4)),
            ('cpu_words_per_sec', round(self.words / self.cpu, 2)),
            ('cpu_share', round(self.cpu / self.wall, 3)),
            ('main_thread_cpu_sec_per_update', round(self.main_thread / n, 4)),
            # of that CPU time, the kernel's (threads that wait by spinning
            # and yielding show here; clock ticks, so over many updates)
            ('system_share', round(self.system / self.ticked, 3) if self.ticked else 0.),
            ('compile_sec', round(self.compiled['compile_sec'], 2)),
            # from the process's start to the end of its first update
            ('first_update_after_sec', self.first_update_after and
             round(self.first_update_after, 1)),
            ('compile_cpu_sec', round(self.compiled['compile_cpu'], 2)),
            ('compile_gxx_cpu_sec', round(self.compiled.get('compile_gxx_cpu', 0.), 2)),
            ('compiled_modules', self.compiled.get('compiled_modules', 0)),
            ('target_words', self.words),
            # what the compiled training function really does
            ('allow_gc_effective',
             bool(getattr(self.compiled['functions'][0].fn, 'allow_gc', True))),
        ])


def warm_up(timers, batches):
    """The untimed first updates (the first calls allocate the buffers)."""
    for i in range(WARMUP_UPDATES):
        for timer in timers:
            wall, _ = timer.update(batches[i], timed=False)
            log('warm-up update %d (%s): %.2f s (cost %.3f), %.1f s after the start'
                % (i + 1, timer.compiled['style'], wall, timer.costs[-1],
                   seconds_since_start() or float('nan')))


def timed_updates(timers, batches, n_updates):
    """n_updates timed updates on the batches after the warm-up ones; with
    several styles, each batch goes to every style in turn, the order
    alternating from one batch to the next, so that the machine's load hits
    all of them alike."""
    t_start = time.time()
    for i in range(n_updates):
        batch = batches[WARMUP_UPDATES + i]
        for timer in (timers if i % 2 == 0 else timers[::-1]):
            wall, cpu = timer.update(batch)
            if n_updates <= 10 or (i + 1) % 10 == 0:
                eta = seconds_left(n_updates - i - 1, (i + 1) / (time.time() - t_start))
                log('update %d/%d (%s): %.3f s, %.3f s CPU (cost %.3f), ETA %.0f s'
                    % (i + 1, n_updates, timer.compiled['style'], wall, cpu,
                       timer.costs[-1], eta))


def training_batches(config, decoder, n_updates, seed):
    """(options, batches) of a training benchmark: warm-up and timed."""
    options = model_options(config, decoder)
    numpy.random.seed(seed)
    return options, synthetic_batches(options, WARMUP_UPDATES + n_updates, seed,
                                      TRAIN_LENGTHS.get(config))


def bench_train(config, decoder, n_updates, styles, seed, profile=None, marian=False):
    """Train on synthetic batches in the given styles (one, or several side
    by side in this process, sharing the parameters); with ``marian``, Marian
    too, on the same batches (compare_with_marian)."""
    import theano

    options, batches = training_batches(config, decoder, n_updates, seed)
    log('%s/%s: %s' % (config, decoder, ' vs '.join(styles)))
    load_start = os.getloadavg()[0]
    if profile:
        theano.config.profile = True
    # nmt.py compiles with allow_gc = False, which the default linker read at
    # import (main() sets the flag before it, see configure_gc); side by
    # side, the original style gets a mode with its own garbage collection,
    # over the project's parameters (its initial values are those of the
    # seed: each style's are alike).
    timers, tparams = [], None
    for s in styles:
        compiled = (compile_data_parallel_training(options) if s == 'data_parallel' else
                    compile_training(options, s, tparams,
                                     style_mode(s) if len(styles) > 1 else None))
        tparams = compiled['model'].tparams
        timers.append(StyleTimer(compiled))
    warm_up(timers, batches)
    for timer in timers:     # the parts of the timed updates only
        part_time = timer.compiled.get('part_time')
        for times in (part_time or {}).values():
            times[:] = [0., 0.]
    if profile:
        from speed import theano_profile
        theano_profile.reset(sum((t.compiled['functions'] for t in timers), []))
    timed_updates(timers, batches, n_updates)

    result = OrderedDict([('mode', 'train'), ('config', config), ('decoder', decoder)])
    if len(timers) == 1:
        result.update(timers[0].figures())
        result['original_style'] = styles[0] == 'original'
    else:
        figs = OrderedDict((t.compiled['style'], t.figures()) for t in timers)
        result['side_by_side'] = figs
        first, second = styles
        result['speedup_words_per_sec'] = round(
            figs[first]['words_per_sec'] / figs[second]['words_per_sec'], 3)
        result['speedup_cpu_words_per_sec'] = round(
            figs[first]['cpu_words_per_sec'] / figs[second]['cpu_words_per_sec'], 3)
    if styles == ('data_parallel',):
        result['workers'] = timers[0].compiled['world'].size
        parts = timers[0].compiled['part_time'].items()
        result['part_sec_per_update'] = OrderedDict(
            (part, round(wall / n_updates, 6)) for part, (wall, _) in parts)
        result['part_system_sec_per_update'] = OrderedDict(
            (part, round(system / n_updates, 6)) for part, (_, system) in parts)
        log('an update of worker %d: %s' % (timers[0].compiled['world'].rank, ', '.join(
            '%s %.1f ms (system %.1f)' % (part, 1000 * sec,
                                          1000 * result['part_system_sec_per_update'][part])
            for part, sec in result['part_sec_per_update'].items())))
    result.update([
        ('updates', n_updates), ('warmup_updates', WARMUP_UPDATES),
        ('sentences_per_update', options['batch_size']),
        ('loadavg_1min_at_start', round(load_start, 2)),
        ('peak_rss_mb', peak_rss_mb()),
        ('options', reported_options(options)),
    ])
    if profile:
        result['profile'] = profile_report(
            [(t.compiled['style'], 'the %s style' % t.compiled['style'],
              t.compiled['functions']) for t in timers], profile)
        for report in result['profile'].values():
            calls = report['gpu_op_calls']
            report['gpu_op_calls_per_update'] = OrderedDict(
                (k, round(v / n_updates, 1)) for k, v in calls.items() if k != 'by_op')
    if marian:
        result.update(compare_with_marian(
            options, batches, {'this_process': result.get('words_per_sec')},
            process_threads()))
    return result


def process_threads():
    """The BLAS/OpenMP threads of this process, which Marian gets too:
    ``--threads`` or OMP_NUM_THREADS, else every core (BLAS's default)."""
    value = os.environ.get('OMP_NUM_THREADS')
    return int(value) if value else theano_env.usable_cores()


def compare_with_marian(options, batches, rates, threads):
    """Marian's training figures on the same batches with ``threads``
    threads, in each of its ways of using several (speed/marian.py MODES;
    one thread: its only one), and the ratio of each of ``rates`` (ours,
    {label: words/s}) to each; where Marian cannot run, the reason instead."""
    import tempfile
    from speed import marian
    modes = marian.MODES if threads > 1 else (('one_thread', []),)
    figures = OrderedDict()
    try:
        exe = marian.marian_command()
        with tempfile.TemporaryDirectory(prefix='marian-bench-') as work:
            files = marian.write_corpus(batches, work, options['n_words_src'], options['n_words'])
            for mode, flags in modes:
                log('Marian: %d updates on the same batches, %d thread(s), %s'
                    % (len(batches), threads, mode))
                figures[mode] = marian.train_speed(exe, files, options, threads,
                                                   len(batches), work, flags=flags)
    except marian.MarianUnavailable as e:
        log('no comparison with Marian: %s' % e)
        return OrderedDict([('marian', None), ('marian_unavailable', str(e))])
    ratios = OrderedDict((label, OrderedDict(
        (mode, round(ours / f['words_per_sec'], 3)) for mode, f in figures.items()))
        for label, ours in rates.items() if ours)
    for label, by_mode in ratios.items():
        log('%s: %s' % (label, ', '.join('%.2fx Marian %s' % (r, m) for m, r in by_mode.items())))
    return OrderedDict([('marian', figures), ('marian_threads', threads),
                        ('marian_blas', marian.marian_blas(exe)),
                        ('ratio_to_marian_words_per_sec', ratios)])


def profile_report(groups, full_path):
    """The top ops of each group of profiled functions on stderr, and as a
    dict keyed like the groups; Theano's full summaries into full_path (one
    group) or full_path.KEY unless full_path is True.

    groups: [(key, what the log calls it, functions)]."""
    from speed import theano_profile
    report = OrderedDict()
    for key, title, functions in groups:
        log('profile of %s:' % title)
        report[key] = theano_profile.report(functions, top=PROFILE_TOP)
        if full_path is not True:
            path = full_path if len(groups) == 1 else '%s.%s' % (full_path, key)
            theano_profile.full_summary(functions, path)
            log("Theano's full profile: %s" % path)
    theano_profile.silence_exit_summaries()
    return report


# --------------------------------------------------------------------------
# translate

def _compile_samplers(tparams, options):
    """dl4mt's sampler (the one-sentence search) and the batched one, and
    the seconds each took to compile."""
    from sampler import decoding_sampler
    samplers, seconds = {}, {}
    for kind in ('single', 'batched'):
        log('compiling the %s sampler (f_init, f_next)' % kind)
        t0 = time.time()
        samplers[kind] = decoding_sampler(tparams, options, batched=kind == 'batched')
        seconds[kind] = round(time.time() - t0, 2)
        log('compiled in %.1f s' % seconds[kind])
    return samplers, seconds


def _timed(label, run, n_sentences):
    """(result, wall seconds, CPU seconds, 1-minute load at start) of run()."""
    load = os.getloadavg()[0]
    t, c = time.time(), time.process_time()
    result = run()
    wall, cpu = time.time() - t, time.process_time() - c
    log('%s: %d sentences in %.1f s (%.3f sentences/s, CPU %.1f s)'
        % (label, n_sentences, wall, n_sentences / wall, cpu))
    return result, wall, cpu, load


def _search_single(sampler, sources):
    """The one-sentence search (docs/equations.md#decoding-beam-search) of
    every source."""
    import beam_search
    best = []
    for i, words in enumerate(sources):
        ids = words + [0]
        x = numpy.array(ids, dtype='int64').reshape([len(ids), 1])
        hyps = beam_search.beam_search(sampler[0], sampler[1], x, BEAM, 2 * len(words))
        best.append(beam_search.ranked(hyps, True)[0][0])
        log('one-sentence search %d/%d: %d words -> %d tokens'
            % (i + 1, len(sources), len(words), len(best[-1].words)))
    return best


def _one_batch(translator, batch):
    """[(index, best hypothesis)] of one batch [(index, source ids ending
    with eos)], each sentence's longest output twice its length."""
    import beam_search
    found = translator.translate(batch, [2 * (len(ids) - 1) for _, ids in batch])
    return [(i, beam_search.ranked(hyps, True)[0][0]) for i, hyps in found]


_FORKED = {}   # the translator that the forked workers of _search_batched decode with


def _forked_batch(batch):
    return _one_batch(_FORKED['translator'], batch)


def _search_batched(sampler, sources, batch_size, processes=1):
    """The batched search of every source through translation/decoding.py's
    Translator (what translate.py decodes with), by length-sorted batches
    (with several processes: forked after compiling, a batch at a time each)."""
    from translation import decoding
    translator = decoding.Translator([sampler], decoding.Search(
        BEAM, None, batch_size, suppress_unk=False, keep_attention=False))
    batches = translator.batches([s + [0] for s in sources])
    if processes > 1:
        _FORKED.update(translator=translator)
        with multiprocessing.get_context('fork').Pool(
                processes, theano_env.limit_threads, (1,)) as pool:
            results = pool.map(_forked_batch, batches, chunksize=1)
    else:
        results = []
        for batch in batches:
            results.append(_one_batch(translator, batch))
            log('batched search: a batch of %d sentences done' % len(batch))
    best = [None] * len(sources)
    for batch in results:
        for i, hyp in batch:
            best[i] = hyp
    return best


def bench_translate(config, decoder, n_sentences, seed, batch_size, processes=1,
                    profile=None):
    import nmt
    import theano

    options = model_options(config, decoder)
    numpy.random.seed(seed)
    tparams = nmt.init_tparams(nmt.init_params(options))
    if profile:
        theano.config.profile = True
    samplers, compile_sec = _compile_samplers(tparams, options)

    rng = numpy.random.RandomState(seed)
    lo, hi = SOURCE_LENGTHS[config]
    sources = [list(rng.randint(1, options['n_words_src'], size=rng.randint(lo, hi + 1)))
               for _ in range(n_sentences)]

    # warm-up: one short sentence each (first calls allocate the buffers)
    _search_single(samplers['single'], [sources[0][:lo]])
    _search_batched(samplers['batched'], [sources[0][:lo]], 1)
    if profile:
        from speed import theano_profile
        theano_profile.reset([f.function for kind in samplers for f in samplers[kind]])

    single, wall_1, cpu_1, load_1 = _timed(
        'one-sentence search', lambda: _search_single(samplers['single'], sources),
        n_sentences)
    batched, wall_b, cpu_b, load_b = _timed(
        'batched search (batch size %d)' % batch_size,
        lambda: _search_batched(samplers['batched'], sources, batch_size), n_sentences)

    parallel = None
    if processes > 1:
        parallel, wall_p, _, _ = _timed(
            'batched search, %d processes' % processes,
            lambda: _search_batched(samplers['batched'], sources, batch_size, processes),
            n_sentences)
    profiles = (search_profiles(samplers, {'single': wall_1, 'batched': wall_b}, profile)
                if profile else None)
    tokens_1 = sum(len(h.words) for h in single)
    tokens_b = sum(len(h.words) for h in batched)
    others = [batched] + ([parallel] if parallel else [])
    identical = all(a.words == b.words for run in others for a, b in zip(single, run))
    score_diff = max(abs(float(a.score) - float(b.score))
                     for run in others for a, b in zip(single, run))
    reached_maxlen = sum(int(h.words[-1:] != [0]) for h in batched)
    return OrderedDict([
        ('mode', 'translate'), ('config', config), ('decoder', decoder),
        ('sentences_per_sec', round(n_sentences / wall_b, 4)),
        ('sentences_per_sec_single', round(n_sentences / wall_1, 4)),
        ('identical', identical),
        ('speedup', round(wall_1 / wall_b, 2)),
        ('tokens_per_sec', round(tokens_b / wall_b, 2)),
        ('tokens_per_sec_single', round(tokens_1 / wall_1, 2)),
        ('cpu_sec_per_sentence', round(cpu_b / n_sentences, 4)),
        ('cpu_sec_per_sentence_single', round(cpu_1 / n_sentences, 4)),
        ('cpu_share', round(cpu_b / wall_b, 3)),
        ('cpu_share_single', round(cpu_1 / wall_1, 3)),
        ('max_score_difference', score_diff),
        ('batch_size', batch_size),
        ('processes', processes),
        ('sentences_per_sec_processes',
         round(n_sentences / wall_p, 4) if parallel else None),
        ('loadavg_1min_at_start', round(load_1, 2)),
        ('loadavg_1min_at_start_batched', round(load_b, 2)),
        ('compile_sec', compile_sec['batched']),
        ('compile_sec_single', compile_sec['single']),
        ('sentences', n_sentences), ('beam', BEAM),
        ('source_words', sum(len(s) for s in sources)),
        ('output_tokens', tokens_b),
        ('sentences_reaching_maxlen', reached_maxlen),
        ('note', 'random untrained model: it almost never emits eos, so most '
                 'hypotheses run to maxlen = 2 x source length; normalised-score '
                 'pick; the one-sentence search (docs/equations.md#decoding-beam-search) '
                 "uses dl4mt's sampler, the batched one the batched sampler"),
        ('peak_rss_mb', peak_rss_mb()),
        ('original_style', False),
        ('options', reported_options(options)),
    ] + ([('profile', profiles)] if profiles else []))


def search_profiles(samplers, walls, full_path):
    """profile_report of f_next in each search, with the share of the
    search's wall time spent inside f_next."""
    from speed import theano_profile
    kinds = ('single', 'batched')
    report = profile_report([(kind, 'f_next, %s search' % kind, [samplers[kind][1].function])
                             for kind in kinds], full_path)
    for kind in kinds:
        share = theano_profile.total_call_time([samplers[kind][1].function]) / walls[kind]
        report[kind]['share_of_search_wall'] = round(share, 4)
        log("f_next took %.1f%% of the %s search's wall time" % (100 * share, kind))
    return report


# --------------------------------------------------------------------------
# command line

def parse_args(argv):
    p = cli.ArgumentParser(
        description='Training and translation speed on synthetic data, for every decoder '
                    '(docs/speed.md). The usual case: benchmark.py train --config '
                    'multi30k --updates 40 (one thread: --threads 1).')
    p.add_argument('mode', choices=['train', 'translate', 'allreduce'],
                   help='train: words/s of training updates; translate: sentences/s of '
                        'the one-sentence and the batched beam search; allreduce: the '
                        'MPI sum of the gradients alone (under mpirun)')
    what = p.add_argument_group('the model and the data')
    what.add_argument('--config', choices=list(CONFIGS), default='tiny',
                      help='model size and batch: tiny (seconds, for checks), mid (the '
                           'papers\' shape at a quarter of the work), paper (the papers\' '
                           'settings), multi30k (train_multi30k.sh\'s model) (default tiny)')
    what.add_argument('--decoder', default='baseline',
                      help='baseline | mean | attentive | attentive-SCORING | memory | '
                           'selfattn | all (default: baseline)')
    what.add_argument('--seed', type=int, default=1234,
                      help='seed of the random parameters and batches (default 1234; '
                           'the same seed gives the same batches to compare runs)')
    what.add_argument('--updates', type=int, default=None,
                      help='train: timed updates (default: tiny %d, paper %d)'
                           % (DEFAULT_UPDATES['tiny'], DEFAULT_UPDATES['paper']))
    what.add_argument('--sentences', type=int, default=None,
                      help='translate: timed sentences (default: tiny %d, paper %d)'
                           % (DEFAULT_SENTENCES['tiny'], DEFAULT_SENTENCES['paper']))
    how = p.add_argument_group('how it runs')
    how.add_argument('--threads', type=int, default=None,
                     help='BLAS and OpenMP threads of this process (and of Marian with '
                          '--marian; default: every core)')
    how.add_argument('--profile', nargs='?', const=True, default=None, metavar='FILE',
                     help="Theano's profiler; prints the %d most expensive ops and "
                          'their share (train: of the training function(s), scans '
                          'included; translate: of f_next in each search); with FILE, '
                          "also Theano's full summaries" % PROFILE_TOP)
    train = p.add_argument_group('train')
    train.add_argument('--original-style', action='store_true',
                       help='f_grad_shared + f_update and allow_gc=True, as the original '
                            'dl4mt-tutorial')
    train.add_argument('--side-by-side', action='store_true',
                       help='both styles in this process, the same batches, alternating, '
                            'sharing the parameters (figures and their ratio; peak RSS '
                            'is of both together)')
    train.add_argument('--workers', type=int, default=1,
                       help='also N MPI workers (mpirun) sharing the cores, and the ratio '
                            'of their words/s to one process\'s (default 1: none)')
    train.add_argument('--marian', action='store_true',
                       help='also Marian (--type amun, the same batches, model, optimiser '
                            'and threads; installed from the pymarian wheel into '
                            '.venv-marian) and the ratio of words/s; translate --model: '
                            'also Marian\'s decoder on the same model')
    translate = p.add_argument_group('translate')
    translate.add_argument('--batch-size', type=int, default=None,
                           help='sentences per batch of the batched search (default: '
                                'translate.py\'s)')
    translate.add_argument('--processes', type=int, default=1,
                           help='also time the batched search in this many worker '
                                'processes (sentences_per_sec_processes); with --model, '
                                'the search runs in them (and Marian on threads x '
                                'processes threads) (default 1)')
    translate.add_argument('--model', metavar='MODEL.npz',
                           help='a trained model instead of a random one: its batched '
                                'search over --source (every line unless --sentences), '
                                'beside Marian\'s decoder with --marian (baseline decoder '
                                'only)')
    translate.add_argument('--source', metavar='FILE',
                           help='with --model: the sentences, tokenised as its training '
                                'data')
    translate.add_argument('--dictionaries', nargs=2, metavar=('SOURCE.pkl', 'TARGET.pkl'),
                           help='with --model: the model\'s dictionaries')
    translate.add_argument('--marian-mini-batches', default='1,16,64', metavar='N,N',
                           help='with --model --marian: Marian\'s mini-batch sizes tried '
                                '(default 1,16,64)')
    allreduce = p.add_argument_group('allreduce')
    allreduce.add_argument('--floats', type=int, default=PAPER_PARAMETERS,
                           help='float32 values summed (default %d, the papers\' '
                                'baseline)' % PAPER_PARAMETERS)
    allreduce.add_argument('--repeats', type=int, default=5,
                           help='timed sums (default 5)')
    args = p.parse_args(argv)
    if args.decoder != 'all':
        try:
            decoder_options(args.decoder)
        except ValueError as e:
            p.error(str(e))
    if args.updates is None:
        args.updates = DEFAULT_UPDATES[args.config]
    if args.model is not None:
        _check_file_decoding(p, args)
    elif args.sentences is None:
        args.sentences = DEFAULT_SENTENCES[args.config]
    if args.batch_size is None:
        import translate
        args.batch_size = translate.DEFAULT_BATCH_SIZE
    if min(args.updates, args.sentences or 1, args.batch_size, args.processes) < 1:
        p.error('--updates, --sentences, --batch-size and --processes must be at least 1')
    if args.threads is not None and args.threads < 1:
        p.error('--threads must be at least 1')
    if args.marian and args.model is None and (args.mode != 'train' or args.side_by_side):
        p.error('--marian compares training with Marian (train, without '
                '--side-by-side) or a trained model\'s translations (translate --model)')
    for flag in ('original_style', 'side_by_side'):
        if getattr(args, flag) and args.mode != 'train':
            p.error('--%s applies to train only' % flag.replace('_', '-'))
    if args.original_style and args.side_by_side:
        p.error('--side-by-side runs both styles; leave out --original-style')
    return args


def _check_file_decoding(p, args):
    """translate --model: its companions given, the mini-batches read."""
    if args.mode != 'translate' or not args.source or not args.dictionaries:
        p.error('--model needs translate mode, --source and --dictionaries')
    if args.decoder != 'baseline' or args.profile:
        p.error('--model translates with the model\'s own decoder, without --decoder '
                'and --profile')
    try:
        args.marian_mini_batches = [int(n) for n in args.marian_mini_batches.split(',')]
    except ValueError:
        p.error('--marian-mini-batches: numbers separated by commas, not %r'
                % args.marian_mini_batches)
    if min(args.marian_mini_batches) < 1:
        p.error('--marian-mini-batches must be at least 1')


def configure_gc(args):
    """Set allow_gc before Theano is imported: the default linker reads the
    flag once, at import, so ``theano.config.allow_gc = ...`` later (as
    nmt.train does) changes nothing.  A value in THEANO_FLAGS wins."""
    if args.mode == 'train' and 'theano' not in sys.modules:
        theano_env.configure(allow_gc=bool(args.original_style))


def run_one(args):
    configure_gc(args)
    if args.threads:
        theano_env.limit_threads(args.threads)
    from machinery import distributed
    if args.mode == 'allreduce':
        result = bench_allreduce(args.floats, args.repeats)
    elif args.mode == 'train':
        styles = (('data_parallel',) if distributed.world().size > 1 else
                  STYLES if args.side_by_side else
                  ('original',) if args.original_style else ('project',))
        result = bench_train(args.config, args.decoder, args.updates, styles,
                             args.seed, profile=args.profile, marian=args.marian)
    elif args.model is not None:
        from speed import file_decoding
        result = file_decoding.bench_file(
            args.model, args.source, args.dictionaries, BEAM, args.batch_size,
            args.marian_mini_batches if args.marian else [], process_threads(), args.sentences,
            args.processes, log)
    else:
        result = bench_translate(args.config, args.decoder, args.sentences, args.seed,
                                 args.batch_size, args.processes, profile=args.profile)
    result['seed'] = args.seed
    result['machine'] = machine_info()
    log('machine: %s' % machine.summary(result['machine']))
    return result


def argv_without(argv, option, takes_value=False):
    """argv less ``option`` (and its value: the next word, or ``=VALUE``)."""
    rest, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a == option:
            skip = takes_value
        elif not (takes_value and a.startswith(option + '=')):
            rest.append(a)
    return rest


def run_all(args, argv):
    """Each decoder in a fresh process (own compile, own peak RSS)."""
    rate_key = 'words_per_sec' if args.mode == 'train' else 'sentences_per_sec'
    rest = argv_without(argv, '--decoder', takes_value=True)
    results = []
    for name in all_decoders():
        cmd = [sys.executable, os.path.abspath(__file__)] + rest + ['--decoder', name]
        log('running: %s' % ' '.join(cmd[1:]))
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, universal_newlines=True)
        lines = proc.stdout.strip().splitlines()
        try:
            result = json.loads(lines[-1])
        except (IndexError, ValueError):
            result = OrderedDict([('mode', args.mode), ('config', args.config),
                                  ('decoder', name), ('error', 'exit %d' % proc.returncode)])
        print(json.dumps(result))
        sys.stdout.flush()
        results.append(result)
    base = next((r.get(rate_key) for r in results if r['decoder'] == 'baseline'), None)
    summary = OrderedDict([
        ('mode', args.mode), ('config', args.config), ('decoder', 'all'),
        ('original_style', bool(args.original_style)),
        ('summary', [OrderedDict([
            ('decoder', r['decoder']), (rate_key, r.get(rate_key)),
            ('relative_to_baseline', round(r[rate_key] / base, 4)
             if base and r.get(rate_key) else None),
            ('compile_sec', r.get('compile_sec')),
            ('peak_rss_mb', r.get('peak_rss_mb')),
            ('error', r.get('error'))]) for r in results]),
        ('machine', machine_info()),
    ])
    print(json.dumps(summary))
    failed = [r['decoder'] for r in results if 'error' in r]
    if failed:
        raise cli.CommandError('the benchmark of %s failed (its messages are above)'
                               % ', '.join(failed))


def bench_allreduce(n_floats, repeats):
    """Seconds of the gradients' sum of n_floats float32 over the workers."""
    from machinery import distributed
    world = distributed.world()
    buffer = numpy.ones(n_floats, dtype='float32')
    load = os.getloadavg()[0]
    world.sum_arrays(buffer)          # warm-up: the first call sets up the links
    times = []
    for _ in range(repeats):
        t = time.time()
        world.sum_arrays(buffer)
        times.append(time.time() - t)
    median = float(numpy.median(times))
    return OrderedDict([
        ('mode', 'allreduce'), ('workers', world.size), ('floats', n_floats),
        ('megabytes', round(n_floats * 4 / 1e6, 1)),
        ('sec_median', round(median, 4)), ('sec_min', round(min(times), 4)),
        ('sec_max', round(max(times), 4)),
        # algorithm bandwidth: the buffer's bytes over the time of the sum
        ('gb_per_sec', round(n_floats * 4 / 1e9 / median, 2)),
        ('loadavg_1min_at_start', round(load, 2))])


def compare_workers(args, argv):
    """One process on every core, then --workers N under mpirun: the figures
    side by side and the ratio of words/s; with --marian, then Marian on as
    many threads, both of its ways (compare_with_marian)."""
    from machinery import distributed
    rest = argv_without(argv_without(argv, '--workers', takes_value=True), '--marian')
    cores = theano_env.usable_cores()
    script = os.path.abspath(__file__)
    runs = OrderedDict()
    one_process = [sys.executable, script] + rest
    for label, (cmd, env), threads in (
            ('one_process', (one_process, dict(os.environ)), cores),
            ('workers', distributed.mpirun_command(args.workers, one_process),
             max(1, cores // args.workers))):
        theano_env.threads_for_children(threads, env)
        log('running (%d threads a process): %s' % (threads, ' '.join(cmd)))
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, universal_newlines=True, env=env)
        lines = proc.stdout.strip().splitlines()
        if proc.returncode != 0 or not lines:
            raise cli.CommandError('%s failed (exit %d)' % (label, proc.returncode))
        runs[label] = json.loads(lines[-1])
        runs[label]['threads_per_process'] = threads
    result = OrderedDict([('mode', 'train'), ('config', args.config),
                          ('decoder', args.decoder), ('workers', args.workers),
                          ('side_by_side', runs),
                          ('speedup_words_per_sec', round(
                              runs['workers']['words_per_sec'] /
                              runs['one_process']['words_per_sec'], 3))])
    if args.marian:
        options, batches = training_batches(args.config, args.decoder, args.updates,
                                            args.seed)
        result.update(compare_with_marian(
            options, batches, OrderedDict((k, r['words_per_sec']) for k, r in runs.items()),
            cores))
    print(json.dumps(result))


def main(argv=None):
    argv = cli.arguments(argv)
    args = parse_args(argv)
    if args.decoder == 'all':
        return cli.run(lambda: run_all(args, argv))
    if args.workers > 1:
        return cli.run(lambda: compare_workers(args, argv))
    from machinery import distributed

    def run_and_print():
        result = run_one(args)
        if distributed.world().is_root:
            print(json.dumps(result))
    return distributed.run(run_and_print)


if __name__ == '__main__':
    sys.exit(main())
