"""Child process of test_gpu.py: one device's numbers for decoder configurations.

    THEANO_FLAGS=device=cuda|opencl0:0|cpu python tests/gpu_worker.py OUT.npz CONFIG [CONFIG ...]

For each configuration of conftest.CONFIGS (tiny sizes, the perturbed
parameters of conftest.Model): the per-sentence costs of a batch, beam search
over a few source sentences, and one training update built as nmt.train
builds it (regularised cost, gradients clipped to norm 1, fused Adadelta,
dropout on).  Saved to OUT.npz under '<config>/...' keys; hypotheses as
strings of ids.  Progress goes to stderr.  Compilation modes: see modes().
"""
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from conftest import CONFIGS, FULL, Model, make_batch  # noqa: E402  (imports theano_env)

BATCH_SEED = 7
BEAM, MAXLEN = 5, 12
CLIP_C = 1.0  # the papers' --clip_c
SOURCE_LENGTHS = (3, 5, 6, 9)


def sources(n_words_src):
    """Source sentences (ids 1..V-1, then eos), column vectors as gen_sample takes."""
    rng = np.random.RandomState(11)
    return [np.array(list(rng.randint(1, n_words_src, size=n)) + [0],
                     dtype='int64').reshape(-1, 1) for n in SOURCE_LENGTHS]


def costs(model, batch):
    import theano
    f_cost = theano.function(model.inps, model.graph['cost'], name='f_log_probs')
    return f_cost(*batch)


def beam_search(model):
    """{'beam/i/samples': hypotheses as strings, 'beam/i/scores': scores}."""
    nmt = model.nmt
    f_init, f_next = model.sampler()
    out = {}
    for i, x in enumerate(sources(model.options['n_words_src'])):
        samples, scores = nmt.gen_sample(model.tparams, f_init, f_next, x, model.options,
                                         trng=model.graph['trng'], k=BEAM, maxlen=MAXLEN,
                                         stochastic=False)
        out['beam/%d/samples' % i] = np.array([' '.join(map(str, s)) for s in samples])
        out['beam/%d/scores' % i] = np.array(scores, dtype='float64')
    return out


def training_update(model, batch):
    """One update as nmt.train makes it: (training cost, {param: new - old})."""
    import optimizers
    import nmt_model
    graph = nmt_model.training_graph(model.tparams, model.options)
    f_grad_shared, f_update = optimizers.training_functions(
        dict(model.options, optimizer='adadelta', clip_c=CLIP_C), model.tparams,
        graph.inputs, graph.train_cost)
    model.reset()
    graph.use_noise.set_value(np.float32(1.))
    train_cost = f_grad_shared(*batch)
    f_update(np.float32(0.01))
    deltas = {'delta/%s' % k: np.asarray(p.get_value()) - model.params[k]
              for k, p in model.tparams.items()}
    # the parameters' size: a float32 parameter holds its update only to its ulp
    deltas.update(('param_max/%s' % k, np.abs(v).max()) for k, v in model.params.items())
    return float(train_cost), deltas


# The configurations that compile in the production mode (FAST_RUN, as
# nmt.py and translate.py run) on a GPU device; the others (all with
# NMT_TESTS_FULL=1) compile with Theano's fast_compile optimiser and C code
# (the GPU ops have no Python code): the same GPU lifting and the same scalar
# C code in the kernels, without fusion.  FAST_RUN takes minutes per
# configuration on a 2-core machine with pocl (fused kernels are new code to
# compile for every graph; its optimisation of a scan gradient); without
# fusion, the kernels of one configuration serve the next.
PRODUCTION_CONFIGS = ('baseline_dropout',)


def modes(name):
    """{'forward': flags, 'update': flags} with which a configuration compiles
    its costs and beam search (forward) and its training update: on a GPU
    device see PRODUCTION_CONFIGS; on the CPU the mode THEANO_FLAGS names
    (the CPU reference: FAST_COMPILE)."""
    import theano
    if theano.config.device == 'cpu':
        return {'forward': {}, 'update': {}}
    if FULL or name in PRODUCTION_CONFIGS:
        flags = {'mode': 'FAST_RUN'}
    else:
        flags = {'mode': 'Mode', 'linker': 'cvm', 'optimizer': 'fast_compile'}
    return {'forward': flags, 'update': flags}


def run(name):
    import theano
    t0 = time.time()
    flags = modes(name)
    model = Model(name, CONFIGS[name])
    batch = make_batch(BATCH_SEED)
    # every function (and scan's inner ones) is compiled inside these blocks
    with theano.config.change_flags(**flags['forward']):
        out = {'costs': costs(model, batch)}
        out.update(beam_search(model))
    with theano.config.change_flags(**flags['update']):
        out['train_cost'], deltas = training_update(model, batch)
    out.update(deltas)
    out['seconds'] = time.time() - t0
    out['update_flags'] = repr(sorted(flags['update'].items()))
    return out


def main(argv):
    import theano
    path, names = argv[0], argv[1:]
    arrays = {'device': np.array(theano.config.device)}
    for name in names:
        print('[gpu_worker %s] %s ...' % (theano.config.device, name), file=sys.stderr)
        sys.stderr.flush()
        for key, value in run(name).items():
            arrays['%s/%s' % (name, key)] = np.asarray(value)
        print('[gpu_worker %s] %s done in %.0f s' % (
            theano.config.device, name, arrays['%s/seconds' % name]), file=sys.stderr)
    np.savez(path, **arrays)
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
