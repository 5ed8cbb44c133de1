"""Shared fixtures for the NumPy-vs-Theano tests.

* puts the repository root (and this folder) on sys.path;
* imports ``theano_env`` before anything imports theano;
* a session-scoped cache so that every Theano function of a given set of
  decoder options is compiled once per test session.

Sizes are tiny (dim_word=6, dim=5, n_words_src=13, n_words=11, batches of 3
sentences) so that the whole suite stays quick on a 2-core CPU.
"""
import os
import sys
from collections import OrderedDict

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
for _p in (ROOT, HERE):
    if _p not in sys.path:
        sys.path.insert(0, _p)

# one BLAS / OpenMP thread in the tests and the programs they start (tiny
# models; theano_env's default, every core, is for real runs)
for _var in ('OPENBLAS_NUM_THREADS', 'OMP_NUM_THREADS', 'MKL_NUM_THREADS'):
    os.environ.setdefault(_var, '1')

from theano_platform import theano_env  # noqa: E402,F401  (must precede the first ``import theano``)

# Test files whose every test trains a model, starts MPI workers or runs every
# decoder on OpenCL: minutes each on 2 cores.  They are marked slow, so that
# ``pytest -m "not slow" tests`` is the quick run (docs/code.md#tests); the
# fixture-exactness tests (NumPy reference, original graph) stay in it.
SLOW_FILES = {'test_gpu.py', 'test_distributed.py', 'test_learning.py',
              'test_multi30k_run.py', 'test_lm_experiment.py', 'test_benchmark.py',
              'test_demo.py', 'test_train_scripts.py', 'test_faults.py'}


import numpy_reference as ref  # noqa: E402

# init: the original's initialisation, whose small weights the tolerances of
# the comparisons with NumPy, the original graph and the GPU were set for
TINY = dict(dim_word=6, dim=5, n_words_src=13, n_words=11,
            decay_c=0.01, alpha_c=0.5, use_dropout=False, init='dl4mt')

import layers  # noqa: E402  (an import error here fails the whole suite)

# parameters that only the decoder variants have
VARIANT_PREFIXES = layers.VARIANT_PREFIXES

# every decoder configuration the project defines: the registry's variants,
# each alias of a decoder (the authors' 'gru_cond_att'), and dropout on
CONFIGS = OrderedDict((name, layers.variant_options(name)) for name in layers.VARIANTS)
CONFIGS.update((alias, dict(decoder=alias)) for alias in layers.DECODER_ALIASES)
CONFIGS['baseline_dropout'] = dict(decoder='gru_cond', use_dropout=True)

# Forward functions of these configurations are compiled in the production
# mode (FAST_RUN); the other ones, which differ from one of these by a scoring
# function or an option only, in FAST_COMPILE (the same graph, ~4x quicker to
# compile on a 2-core machine).  NMT_TESTS_FULL=1 compiles all in FAST_RUN.
FAST_RUN_FORWARD = tuple(v.name for d in layers.DECODERS.values() for v in d.variants)
FULL = bool(os.environ.get('NMT_TESTS_FULL'))


def tiny_options(nmt, overrides):
    opts = dict(TINY)
    opts.update(overrides)
    return nmt.fill_options(opts)


def make_batch(seed, n_src=13, n_trg=11, src_lens=(4, 1, 6), trg_lens=(2, 5, 3)):
    """A padded batch (time-major) of len(src_lens) sentences; words are ids
    1..V-1 (0 is eos only).  Source and target lengths differ, both padded."""
    rng = np.random.RandomState(seed)
    sx = [list(rng.randint(1, n_src, size=L)) for L in src_lens]
    sy = [list(rng.randint(1, n_trg, size=L)) for L in trg_lens]
    return ref.prepare_data(sx, sy)


def drawn_parameters(params, seed, around=True):
    """float32 values of ``params``' shapes: N(0, 0.4^2) noise, N(0, 1) for
    the variant-specific parameters, from numpy's legacy RandomState(seed)
    (the same on every numpy); added to ``params``' values when ``around``."""
    rng = np.random.RandomState(seed)
    drawn = OrderedDict()
    for k, v in params.items():
        scale = 1.0 if k.startswith(VARIANT_PREFIXES) else 0.4
        noise = scale * rng.standard_normal(v.shape)
        drawn[k] = ((v + noise) if around else noise).astype('float32')
    return drawn


class Model(object):
    """One decoder configuration: options, parameters, lazily compiled functions."""

    def __init__(self, name, overrides):
        import nmt
        self.nmt = nmt
        self.name = name
        self.options = tiny_options(nmt, overrides)
        np.random.seed(1234)
        self.init = nmt.init_params(self.options)
        # Perturb the project's initial values so that every term of the
        # model matters (the 0.01*randn readout and U_att would otherwise make
        # the attentions almost uniform and the variants almost invisible).
        # The variant-specific parameters get a larger perturbation so that
        # the target-side attentions are far from uniform.
        self.params = drawn_parameters(self.init, 4321)
        self.tparams = nmt.init_tparams(self.params)
        self._graph = None
        self._fns = {}

    # -- state -------------------------------------------------------------
    def reset(self):
        """Put the (perturbed) parameter values back into the shared variables."""
        for k, v in self.params.items():
            self.tparams[k].set_value(v.copy())

    def params64(self):
        return ref.as_dtype(self.params, 'float64')

    # -- graphs ------------------------------------------------------------
    @property
    def graph(self):
        if self._graph is None:
            out = self.nmt.build_model(self.tparams, self.options)
            trng, use_noise, x, x_mask, y, y_mask, opt_ret, cost = out
            use_noise.set_value(np.float32(0.))
            self._graph = dict(trng=trng, use_noise=use_noise, x=x, x_mask=x_mask,
                               y=y, y_mask=y_mask, opt_ret=opt_ret, cost=cost)
        return self._graph

    @property
    def inps(self):
        g = self.graph
        return [g['x'], g['x_mask'], g['y'], g['y_mask']]

    def has_prev_alphas(self):
        return 'prev_alphas' in self.graph['opt_ret']

    def f_forward(self):
        """(x, x_mask, y, y_mask) ->
        [cost vector, dec_alphas, regularised cost(, prev_alphas)]."""
        if 'forward' not in self._fns:
            import theano
            g = self.graph
            outs = [g['cost'], g['opt_ret']['dec_alphas'], self.reg_cost_expr()]
            if self.has_prev_alphas():
                outs.append(g['opt_ret']['prev_alphas'])
            mode = 'FAST_RUN' if (FULL or self.name in FAST_RUN_FORWARD) else 'FAST_COMPILE'
            self._fns['forward'] = theano.function(self.inps, outs, mode=mode,
                                                   on_unused_input='ignore')
        return self._fns['forward']

    def forward(self, x, x_mask, y, y_mask):
        outs = self.f_forward()(x, x_mask, y, y_mask)
        return dict(cost=outs[0], dec_alphas=outs[1], reg_cost=float(outs[2]),
                    prev_alphas=outs[3] if len(outs) > 3 else None)

    def reg_cost_expr(self):
        if 'reg_cost' not in self._fns:
            g = self.graph
            import nmt_model
            self._fns['reg_cost'] = nmt_model.regularised_cost(
                self.tparams, self.options, g['cost'], g['opt_ret'],
                g['x_mask'], g['y_mask'])
        return self._fns['reg_cost']

    def grads_expr(self):
        if 'grads' not in self._fns:
            import theano.tensor as tensor
            self._fns['grads'] = tensor.grad(self.reg_cost_expr(),
                                             wrt=list(self.tparams.values()))
        return self._fns['grads']

    def f_grad(self):
        """(x, x_mask, y, y_mask) -> [regularised cost] + gradients (tparams order).

        Compiled in FAST_COMPILE mode: the symbolic gradient is the same, and
        FAST_RUN's graph optimisation of a scan gradient takes minutes on a
        2-core machine (about 6x longer)."""
        if 'grad' not in self._fns:
            import theano
            self._fns['grad'] = theano.function(
                self.inps, [self.reg_cost_expr()] + list(self.grads_expr()),
                on_unused_input='ignore', mode='FAST_COMPILE')
        return self._fns['grad']

    def sampler(self):
        if 'sampler' not in self._fns:
            g = self.graph
            self._fns['sampler'] = self.nmt.build_sampler(
                self.tparams, self.options, g['trng'], g['use_noise'])
        return self._fns['sampler']

    def batched_sampler(self):
        """nmt.build_sampler(..., batched=True), compiled like f_forward."""
        if 'batched_sampler' not in self._fns:
            g = self.graph
            mode = 'FAST_RUN' if (FULL or self.name in FAST_RUN_FORWARD) else 'FAST_COMPILE'
            self._fns['batched_sampler'] = self.nmt.build_sampler(
                self.tparams, self.options, g['trng'], g['use_noise'], batched=True,
                mode=mode)
        return self._fns['batched_sampler']


@pytest.fixture(scope='session')
def nmt_module():
    import nmt
    return nmt


@pytest.fixture(scope='session')
def get_model(nmt_module):
    cache = {}

    def get(name):
        if name not in cache:
            cache[name] = Model(name, CONFIGS[name])
        model = cache[name]
        model.reset()
        return model
    return get


# The files whose tests take longest (minutes on one core: OpenCL kernels,
# end-to-end runs, several MPI workers), run first: each file runs whole on
# one xdist worker, so a long file taken last keeps one worker busy while
# the others are done.
LONGEST_FILES = ('test_gpu.py', 'test_train_scripts.py', 'test_distributed.py',
                 'test_faults.py', 'test_theano_repairs.py')


def pytest_collection_modifyitems(items):
    """Marks the SLOW_FILES' tests slow; puts the LONGEST_FILES first."""
    def rank(item):
        name = os.path.basename(str(item.fspath))
        return LONGEST_FILES.index(name) if name in LONGEST_FILES else len(LONGEST_FILES)
    for item in items:
        if os.path.basename(str(item.fspath)) in SLOW_FILES:
            item.add_marker(pytest.mark.slow)
    items.sort(key=rank)   # stable: the order within a file is kept
