"""Attention NMT as in dl4mt-tutorial, plus the residual decoder family.

Model building (``init_params``, ``build_model``, ``build_sampler``),
scoring (``pred_probs``) and the training loop (``train``), with dl4mt's
names and signatures; ``gen_sample`` (beam_search.py) is re-exported.  The
equations are those of ``docs/equations.md``; the layers and the
decoder registry live in ``layers.py``, the optimisers in ``optimizers.py``,
the data in ``data_iterator.py``, the checkpoints in ``machinery/training_state.py``,
the training loop (shared with language_model/lm.py) in ``training_loop.py``.

    python nmt.py --model model.npz --datasets SRC TRG --dictionaries DSRC DTRG \\
        [--valid_datasets SRC TRG] [--OPTION VALUE ...]
"""
import sys

from machinery import theano_env  # noqa: F401  (must come before theano)
if __name__ == '__main__':
    # Training keeps intermediate results between calls: 4-9% faster steps at
    # the papers' size, about twice the memory (THEANO_FLAGS=allow_gc=True
    # overrides).  Theano's linker reads this once, at import.
    theano_env.configure(allow_gc=False)

import argparse
import os
import shlex
import shutil
import subprocess
from collections import OrderedDict, namedtuple

import numpy
import theano
import theano.tensor as tensor
from theano.sandbox.rng_mrg import MRG_RandomStream as RandomStreams

from machinery import cli
from machinery import distributed
from machinery import fast_ops
import layers
from machinery import model_io
from layers import get_layer, dropout_layer
from beam_search import gen_sample  # noqa: F401 (dl4mt API)
from beam_search import ranked, search_batch, sorted_batches
from data_iterator import TextIterator, count_words, prepare_data  # noqa: F401 (dl4mt API)
from machinery.model_io import load_params, load_options, load_dictionary
from optimizers import OPTIMIZERS, adadelta, adam, rmsprop, sgd  # noqa: F401 (dl4mt names)
from optimizers import clip_gradients  # noqa: F401 (dl4mt API)
from machinery.text_io import InputError, count_lines, read_lines
from training_loop import TrainingLoop, TrainingError, Compiled, Prepared, with_suffix
from machinery.training_options import OptionTable, noise_seed, record_dictionaries
from layers import init_tparams, zipp, unzip  # noqa: F401 (dl4mt API)
from training_loop import Progress  # noqa: F401 (dl4mt API)
from machinery import vocab

# --------------------------------------------------------------------------
# options

# train()'s options with the original defaults, then this project's additions
DEFAULT_OPTIONS = OrderedDict([
    ('dim_word', 100), ('dim', 1000), ('encoder', 'gru'), ('decoder', 'gru_cond'),
    ('patience', 10), ('max_epochs', 5000), ('finish_after', 10000000),
    ('dispFreq', 100), ('decay_c', 0.), ('alpha_c', 0.),
    ('clip_c', -1.), ('lrate', 0.01), ('n_words_src', 100000),
    ('n_words', 100000), ('maxlen', 100), ('optimizer', 'rmsprop'),
    ('batch_size', 16), ('valid_batch_size', 16), ('saveto', 'model.npz'),
    ('validFreq', 1000), ('saveFreq', 1000), ('sampleFreq', 100),
    ('datasets', None), ('valid_datasets', None), ('dictionaries', None),
    ('use_dropout', False), ('reload_', False), ('overwrite', False),
    # additions
    ('residual', 'attentive'), ('att_scoring', 'content'),
    ('inference', layers.TRAINING_INFERENCE),
    ('shuffle_each_epoch', True), ('seed', 1234), ('noise_seed', 0),
    ('bleu_valid_freq', 0), ('bleu_valid_ref', None), ('bleu_valid_beam', 5),
    ('bleu_patience', 0), ('bleu_valid_postprocess', None),
    ('external_validation_script', None), ('reload_model_only', False), ('restart', False),
    ('init', 'glorot+unigram'),
    ('dropout_embedding', 0.), ('dropout_context', 0.), ('dropout_readout', 0.),
])

# what a reloaded model keeps from its saved options (the graph's shape)
ARCHITECTURE_OPTIONS = ('dim_word', 'dim', 'n_words_src', 'n_words', 'encoder',
                        'decoder', 'residual', 'att_scoring', 'use_dropout')
# the values of the options that have a fixed set of them (the decoder
# options' from the registry)
# --init: the weight scale (layers.WEIGHT_SCALES), and with '+unigram' the
# output bias from the training targets' word frequencies instead of zeros
# (docs/training.md#initialisation); 'dl4mt' is the original's
INITS = ('glorot+unigram', 'glorot', 'dl4mt+unigram', 'dl4mt')
# encoder: one value, so no flag (OptionTable.add_flags); kept in the model's
# options because the original code reads options['encoder']
OPTION_CHOICES = {'decoder': layers.DECODER_NAMES, 'residual': layers.RESIDUALS,
                  'att_scoring': layers.SCORINGS, 'inference': layers.INFERENCES,
                  'encoder': ('gru',), 'optimizer': tuple(sorted(OPTIMIZERS)),
                  'init': INITS}
OPTIONS = OptionTable(DEFAULT_OPTIONS, OPTION_CHOICES, ARCHITECTURE_OPTIONS,
                      model_io.TRANSLATION_MODEL)


def fill_options(options):
    """A copy of options with every missing option at its default.

    A decoder alias (the authors' 'gru_cond_att') is kept as the decoder's
    name, so that a file saved again still loads in their code, and sets the
    options it implies unless they are given.
    """
    full = OPTIONS.fill(options)
    implied = layers.DECODER_ALIASES.get(full['decoder'], (None, {}))[1]
    for key, value in implied.items():
        if key not in options:
            full[key] = value
    return full


def check_options(options):
    """InputError naming the option when the decoder options do not fit the
    registry (an unknown decoder, residual or scoring)."""
    try:
        layers.variant_of(options)
    except ValueError as e:
        raise InputError(str(e))
    if options['encoder'] not in OPTION_CHOICES['encoder']:
        raise InputError('encoder must be gru, not %r' % options['encoder'])
    for name in DROPOUT_RATES:
        if not 0. <= options.get(name, 0.) < 1.:
            raise InputError('--%s must be at least 0 and below 1, not %r'
                             % (name, options[name]))
    if options.get('use_dropout') and options.get('dropout_readout', 0.) > 0.:
        raise InputError('--use_dropout (dl4mt\'s readout dropout) and --dropout_readout '
                         'are two dropouts of the same layer: give one')


# --------------------------------------------------------------------------
# parameters

def init_params(options):
    """All parameters, in the original order (docs/equations.md#parameters),
    their rectangular matrices drawn at the scale of ``options['init']``
    (the output bias is zero: unigram_output_bias sets it)."""
    with layers.weight_scale(options.get('init', 'dl4mt').split('+')[0]):
        return _init_params(options)


def _init_params(options):
    params = OrderedDict()
    dw, dim, ctxdim = options['dim_word'], options['dim'], 2 * options['dim']
    params['Wemb'] = layers.word_matrix(options['n_words_src'], dw, dw)
    params['Wemb_dec'] = layers.word_matrix(options['n_words'], dw, dw)
    enc_init = get_layer(options['encoder'])[0]
    params = enc_init(options, params, prefix='encoder', nin=dw, dim=dim)
    params = enc_init(options, params, prefix='encoder_r', nin=dw, dim=dim)
    ff_init = get_layer('ff')[0]
    params = ff_init(options, params, prefix='ff_state', nin=ctxdim, nout=dim)
    params = layers.decoder_of(options).init(
        options, params, prefix='decoder', nin=dw, dim=dim, dimctx=ctxdim)
    params = ff_init(options, params, prefix='ff_logit_lstm', nin=dim, nout=dw, ortho=False)
    params = ff_init(options, params, prefix='ff_logit_prev', nin=dw, nout=dw, ortho=False)
    params = ff_init(options, params, prefix='ff_logit_ctx', nin=ctxdim, nout=dw, ortho=False)
    params['ff_logit_W'] = layers.word_matrix(dw, options['n_words'], dw)
    params['ff_logit_b'] = layers.zeros(options['n_words'])
    return params


# the lines of the training targets counted for the '+unigram' output bias
UNIGRAM_LINES = 1000000


def unigram_log_probs(path, target_dict, n_words):
    """log p of each target id under the add-one unigram model of the first
    UNIGRAM_LINES lines of ``path`` (eos once a line)."""
    counts, _ = count_words(path, target_dict, n_words, max_lines=UNIGRAM_LINES)
    return vocab.unigram_log_probs(counts)


def unigram_output_bias(log_probs):
    """The output bias of --init ...+unigram: the unigram log probabilities,
    centred.  The softmax then starts at the word frequencies, which the
    network need not learn through its readout (docs/training.md#initialisation)."""
    return (log_probs - log_probs.mean()).astype('float32')


def count_params(options):
    """Number of trainable parameters of a model with these options (from
    the shapes alone: nothing is allocated, no random number is drawn)."""
    with layers.shapes_only():
        return int(sum(p.size for p in init_params(fill_options(options)).values()))


def load_model(path, inference=None):
    """Options (completed and checked) and parameters of a model file; with
    ``inference`` (layers.INFERENCES) the model decodes that way instead of
    its file's way."""
    if not os.path.exists(path):
        raise InputError('%s: no such model file' % path)
    saved = load_options(path)
    model_io.check_model_kind(path, saved, model_io.TRANSLATION_MODEL)
    options = fill_options(saved)
    if inference is not None:
        options['inference'] = inference
    try:
        check_options(options)
    except InputError as e:
        raise InputError('%s: %s' % (path, e))
    return options, load_params(path, init_params(options), strict=True)


# --------------------------------------------------------------------------
# graphs

def build_encoder(tparams, options, x, x_mask=None, dropout=None):
    """Bidirectional GRU annotations ctx (T x n x 2d) and s0 (n x d);
    dropout: the training graph's Dropout (its embedding dropout)."""
    n_timesteps, n_samples = x.shape[0], x.shape[1]
    enc = get_layer(options['encoder'])[1]
    emb = tparams['Wemb'][x.flatten()]
    emb = emb.reshape([n_timesteps, n_samples, options['dim_word']])
    if dropout is not None:
        emb = dropout.embedding(emb)

    proj = enc(tparams, emb, options, prefix='encoder', mask=x_mask)
    projr = enc(tparams, emb[::-1], options, prefix='encoder_r',
                mask=None if x_mask is None else x_mask[::-1])
    ctx = tensor.concatenate([proj[0], projr[0][::-1]], axis=2)
    if x_mask is None:
        ctx_mean = ctx.mean(0)
    else:
        ctx_mean = (ctx * x_mask[:, :, None]).sum(0) / x_mask.sum(0)[:, None]
    init_state = get_layer('ff')[1](tparams, ctx_mean, options, prefix='ff_state',
                                    activ='tanh')
    return ctx, init_state


def build_readout(tparams, options, dec, use_noise, trng, project=True):
    """Logits from the decoder's outputs (docs/equations.md#readout);
    project=False: the layer below them (what output_layer projects).

    Without 'ctxs' in ``dec`` (language_model/lm.py's language model) the context term is
    left out.
    """
    logit = readout_dropout(readout_layer(tparams, options, dec), options, use_noise, trng)
    if not project:
        return logit
    W, b = output_layer(tparams, options)
    return tensor.dot(logit, W) + b


def readout_layer(tparams, options, dec):
    """The readout's tanh layer t (docs/equations.md#readout), before dropout."""
    ff = get_layer('ff')[1]
    logit = (ff(tparams, dec['states'], options, prefix='ff_logit_lstm', activ='linear') +
             ff(tparams, dec['readout_prev'], options, prefix='ff_logit_prev', activ='linear'))
    if 'ctxs' in dec:
        logit = logit + ff(tparams, dec['ctxs'], options, prefix='ff_logit_ctx',
                           activ='linear')
    for prefix, value in dec.get('extra_readout', []):
        logit = logit + ff(tparams, value, options, prefix=prefix, activ='linear')
    return tensor.tanh(logit)


def readout_dropout(readout, options, use_noise, trng):
    """dl4mt's dropout of the readout (--use_dropout: part of the model,
    halved at test time); the inverted --dropout_readout is Dropout's."""
    if options['use_dropout']:
        return dropout_layer(readout, use_noise, trng)
    return readout


# the training graph's inverted dropouts (docs/training.md#dropout)
DROPOUT_RATES = ('dropout_embedding', 'dropout_context', 'dropout_readout')


class Dropout(object):
    """The inverted dropouts of the training graph: while use_noise is 1,
    each unit is zeroed with probability ``rate`` and the others are scaled
    by 1 / (1 - rate); otherwise (validation, translation) nothing changes,
    so a model trained with them translates with the plain graph."""

    def __init__(self, options, use_noise, trng):
        self.rates = {name: options.get(name, 0.) for name in DROPOUT_RATES}
        self.use_noise, self.trng = use_noise, trng

    def apply(self, name, value):
        rate = self.rates[name]
        if not rate:
            return value
        keep = 1. - rate
        mask = self.trng.binomial(value.shape, p=keep, n=1, dtype=value.dtype)
        return tensor.switch(self.use_noise, value * mask * numpy.float32(1. / keep), value)

    def embedding(self, emb):
        """The source or target word embeddings, each unit of each word."""
        return self.apply('dropout_embedding', emb)

    def context(self, ctx):
        """The encoder's annotations, as the decoder attends to and reads them."""
        return self.apply('dropout_context', ctx)

    def readout(self, readout):
        """The readout layer t, before the output layer (or dl4mt's dropout)."""
        return self.apply('dropout_readout', readout)


# a readout unit is saturated at a position where |t| > SATURATED (tanh'
# below 0.02: almost no gradient passes it)
SATURATED = 0.99


def saturated_positions(readout, y_mask):
    """For each unit of the readout, at how many of the positions where
    y_mask is 1 it is saturated (docs/training.md#is-it-learning)."""
    saturated = tensor.cast(abs(readout) > SATURATED, 'float32')
    return (saturated * y_mask[:, :, None]).sum(axis=(0, 1))


def output_layer(tparams, options):
    """(W, b) of the output layer; with ``options['tie_embeddings']`` W is
    ``Wemb_dec`` transposed (Press and Wolf 2017)."""
    if options.get('tie_embeddings'):
        return tparams['Wemb_dec'].T, tparams['ff_logit_b']
    return tparams['ff_logit_W'], tparams['ff_logit_b']


def sentence_costs(tparams, options, hidden, y, y_mask):
    """-log p of each sentence's words: the output layer over the readout's
    ``hidden`` layer (build_readout(..., project=False)), -log of the softmax
    probability of the reference word at every row (fast_ops.output_nll: the
    original's formula, or the C op that computes it), summed over the rows
    where y_mask is 1."""
    W, b = output_layer(tparams, options)
    return (fast_ops.output_nll(hidden, W, b, y, y_mask) * y_mask).sum(0)


def noise_stream(options):
    """The random stream of the dropout masks and of sampling: dl4mt's
    RandomStreams(1234) under the default seeds (training_options.noise_seed)."""
    return RandomStreams(noise_seed(options))


def build_model(tparams, options):
    """The training graph: per-sentence cost (no regularisers)."""
    opt_ret = dict()
    trng = noise_stream(options)
    use_noise = theano.shared(numpy.float32(0.))
    dropout = Dropout(options, use_noise, trng)
    x = tensor.matrix('x', dtype='int64')
    x_mask = tensor.matrix('x_mask', dtype='float32')
    y = tensor.matrix('y', dtype='int64')
    y_mask = tensor.matrix('y_mask', dtype='float32')

    ctx, init_state = build_encoder(tparams, options, x, x_mask, dropout)
    ctx = dropout.context(ctx)

    n_timesteps_trg, n_samples = y.shape[0], y.shape[1]
    emb = tparams['Wemb_dec'][y.flatten()]
    emb = dropout.embedding(emb.reshape([n_timesteps_trg, n_samples, options['dim_word']]))
    # shifted: row 0 is zeros, row t is y[t-1]'s embedding
    emb = tensor.set_subtensor(tensor.zeros_like(emb)[1:], emb[:-1])

    dec = layers.decoder_of(options).apply(
        tparams, emb, options, prefix='decoder', mask=y_mask, context=ctx,
        context_mask=x_mask, one_step=False, init_state=init_state)
    opt_ret['dec_alphas'] = dec['alphas']
    if 'prev_alphas' in dec:
        opt_ret['prev_alphas'] = dec['prev_alphas']
    opt_ret['readout_prev'] = dec['readout_prev']

    readout = readout_layer(tparams, options, dec)
    opt_ret['readout_saturation'] = saturated_positions(readout, y_mask)
    hidden = dropout.readout(readout_dropout(readout, options, use_noise, trng))
    cost = sentence_costs(tparams, options, hidden, y, y_mask)
    return trng, use_noise, x, x_mask, y, y_mask, opt_ret, cost


# build_model's graph with the cost that training minimises: inputs (x,
# x_mask, y, y_mask), cost (per sentence), train_cost (regularised_cost's)
# saturation: saturated_positions of the readout
TrainingGraph = namedtuple('TrainingGraph',
                           'trng use_noise inputs cost train_cost saturation')


def training_graph(tparams, options):
    """The graph of a training update (optimizers.training_functions
    compiles it)."""
    trng, use_noise, x, x_mask, y, y_mask, opt_ret, cost = build_model(tparams, options)
    train_cost = regularised_cost(tparams, options, cost, opt_ret, x_mask, y_mask)
    return TrainingGraph(trng, use_noise, [x, x_mask, y, y_mask], cost, train_cost,
                         opt_ret['readout_saturation'])


def regularised_cost(tparams, options, cost, opt_ret, x_mask, y_mask):
    """mean(cost) + L2 + alignment regulariser
    (docs/equations.md#regularisers-and-clipping)."""
    total = cost.mean()
    if options.get('decay_c', 0.) > 0.:
        decay_c = theano.shared(numpy.float32(options['decay_c']), name='decay_c')
        weight_decay = 0.
        for vv in tparams.values():
            weight_decay += (vv ** 2).sum()
        total += decay_c * weight_decay
    if options.get('alpha_c', 0.) > 0.:
        alpha_c = theano.shared(numpy.float32(options['alpha_c']), name='alpha_c')
        # floor(|y| / |x|) - sum_t alpha[t, n, i], over every source row i
        target_ratio = tensor.cast(y_mask.sum(0) // x_mask.sum(0), 'float32')
        alpha_reg = alpha_c * ((target_ratio[:, None] -
                                opt_ret['dec_alphas'].sum(0)) ** 2).sum(1).mean()
        total += alpha_reg
    return total


# --------------------------------------------------------------------------
# the sampler: f_init and f_next, with named inputs and outputs

SAMPLER_INIT_INPUTS = ('x',)
SAMPLER_INIT_OUTPUTS = ('state', 'ctx')
# f_next: y_prev = -1 stands for the zero embedding of the first step.  The
# decoder's carried tensors (layers.Decoder.carried) follow the fixed inputs
# and outputs under their own names; 'prev_alpha' (hyps x steps, the
# attention over previous words or states) closes the outputs of the decoders
# that have it.
SAMPLER_STEP_INPUTS = ('y_prev', 'ctx', 'state')
SAMPLER_STEP_OUTPUTS = ('probs', 'sample', 'state', 'alpha')
# f_next's last output, 'log_probs', is log p of the next word (the log
# softmax of the readout, fast_ops.log_softmax): the search reads it, as the
# batched sampler's f_next outputs it.
# The batched sampler (build_sampler(..., batched=True)): f_init encodes a
# padded batch (x, x_mask: T x n) and also returns pctx, the attention's
# projection of the source (layers.source_projection), computed once per
# sentence instead of at every step; f_next takes, per hypothesis, its
# sentence's ctx, pctx and source mask (padding gets no attention, as in the
# training graph), and returns log p (one C op on the CPU: 5x faster than
# Theano's softmax and log here), not the probabilities, and draws no sample.
BATCH_INIT_INPUTS = ('x', 'x_mask')
BATCH_INIT_OUTPUTS = ('state', 'ctx', 'pctx')
BATCH_STEP_INPUTS = ('y_prev', 'ctx', 'pctx', 'x_mask', 'state')
BATCH_STEP_OUTPUTS = ('log_probs', 'state', 'alpha')


class StepFunction(object):
    """A compiled sampler function whose inputs and outputs have names.

    Called with positional arguments it is the Theano function (dl4mt's
    f_init / f_next, outputs as a list); ``named(values)`` takes and returns
    dicts (values may hold more than the inputs).  ``carried`` lists the
    decoder's layers.Carried tensors.
    """

    def __init__(self, function, inputs, outputs, options=None, carried=()):
        self.function, self.inputs, self.outputs = function, inputs, outputs
        self.options, self.carried = options, list(carried)

    def __call__(self, *args):
        return self.function(*args)

    def named(self, values):
        return OrderedDict(zip(self.outputs,
                               self.function(*[values[n] for n in self.inputs])))

    def initial_carry(self, n_hyps):
        """The carried tensors before the first step (Carried.rows rows,
        filled with Carried.fill)."""
        carry = {}
        for c in self.carried:
            sizes = {'steps': c.rows, 'hyps': n_hyps}
            shape = [sizes[a] if a in sizes else self.options[a] for a in c.axes]
            carry[c.name] = numpy.full(shape, c.fill, dtype='float32')
        return carry

    def hyps_axis(self, name):
        """The axis along which the named input or output has one entry per
        hypothesis (None: shared by all of them)."""
        for c in self.carried:
            if c.name == name:
                return c.axes.index('hyps') if 'hyps' in c.axes else None
        return 1 if name in ('ctx', 'pctx', 'x_mask') else 0

    def take_hyps(self, values, rows):
        """Named inputs or outputs of the hypotheses ``rows``."""
        out = OrderedDict()
        for name, value in values.items():
            axis = self.hyps_axis(name)
            out[name] = value if axis is None else value.take(rows, axis=axis)
        return out

    def reorder_carry(self, outputs, rows):
        """The carried outputs of the hypotheses ``rows``, as next inputs
        (a carried tensor without a 'hyps' axis is shared: passed on)."""
        return dict(self.take_hyps(OrderedDict((c.name, outputs[c.name])
                                               for c in self.carried), rows))


def build_sampler(tparams, options, trng, use_noise, batched=False, mode=None):
    """(f_init, f_next) as StepFunctions: dl4mt's (SAMPLER_* names), or with
    batched=True the batched sampler (BATCH_* names); mode: Theano's."""
    x = tensor.matrix('x', dtype='int64')
    if batched:
        x_mask = tensor.matrix('x_mask', dtype='float32')
        ctx, init_state = build_encoder(tparams, options, x, x_mask)
        pctx = layers.source_projection(tparams, ctx)
        f_init = StepFunction(theano.function([x, x_mask], [init_state, ctx, pctx],
                                              name='f_init', mode=mode),
                              BATCH_INIT_INPUTS, BATCH_INIT_OUTPUTS, options)
    else:
        ctx, init_state = build_encoder(tparams, options, x)
        f_init = StepFunction(theano.function([x], [init_state, ctx], name='f_init',
                                              mode=mode),
                              SAMPLER_INIT_INPUTS, SAMPLER_INIT_OUTPUTS, options)
    return f_init, _build_f_next(tparams, options, trng, use_noise, batched, mode)


def decoding_sampler(tparams, options, batched=True, mode=None):
    """build_sampler's pair for decoding a trained model: without noise
    (use_noise 0), the sampling stream noise_stream's."""
    return build_sampler(tparams, options, noise_stream(options),
                         theano.shared(numpy.float32(0.)), batched=batched, mode=mode)


def _step_mode(mode):
    """The mode of f_next: ``mode``, or Theano's default without garbage
    collection: the step's intermediate results keep their arrays between
    calls (the logits alone are 38 MB for 192 hypotheses at the papers'
    size; fresh arrays cost page faults): a step of 192 hypotheses 10-13%
    faster, a whole batched search ~2% (fewer hypotheses in its last steps)."""
    if mode is not None:
        return mode
    from theano.compile.mode import get_default_mode
    return get_default_mode().clone(link_kwargs={'allow_gc': False})


def _build_f_next(tparams, options, trng, use_noise, batched, mode):
    y = tensor.vector('y_prev', dtype='int64')
    inputs = OrderedDict([('y_prev', y), ('ctx', tensor.tensor3('ctx', dtype='float32'))])
    if batched:
        inputs['pctx'] = tensor.tensor3('pctx', dtype='float32')
        inputs['x_mask'] = tensor.matrix('x_mask', dtype='float32')
    inputs['state'] = tensor.matrix('state', dtype='float32')
    emb = tensor.switch(y[:, None] < 0,
                        tensor.alloc(numpy.float32(0.), 1, tparams['Wemb_dec'].shape[1]),
                        tparams['Wemb_dec'][y])
    decoder = layers.decoder_of(options)
    carried = decoder.carried(options)
    carry = OrderedDict((c.name, tensor.TensorType('float32', (False,) * len(c.axes))(c.name))
                        for c in carried)
    dec = decoder.apply(tparams, emb, options, prefix='decoder', mask=None,
                        context=inputs['ctx'], one_step=True, init_state=inputs['state'],
                        carry=carry, context_mask=inputs.get('x_mask'),
                        pctx=inputs.get('pctx'))
    logits = build_readout(tparams, options, dec, use_noise, trng)
    if batched:
        outs = OrderedDict([('log_probs', fast_ops.log_softmax(logits))])
    else:
        probs = tensor.nnet.softmax(logits)
        outs = OrderedDict([('probs', probs),
                            ('sample', trng.multinomial(pvals=probs).argmax(1))])
    outs.update([('state', dec['states']), ('alpha', dec['alphas'])])
    outs.update((name, dec['carry'][name]) for name in carry)
    if 'prev_alphas' in dec:
        outs['prev_alpha'] = dec['prev_alphas']
    if not batched:
        outs['log_probs'] = fast_ops.log_softmax(logits)
    inputs.update(carry)
    f_next = theano.function(list(inputs.values()), list(outs.values()), name='f_next',
                             on_unused_input='ignore', mode=_step_mode(mode))
    return StepFunction(f_next, tuple(inputs), tuple(outs), options, carried)


# --------------------------------------------------------------------------
# scoring

def pred_probs(f_log_probs, prepare_data, options, iterator, verbose=True):
    """Per-sentence costs of every pair the iterator yields.  dl4mt's
    scoring loop, kept with its signature for the scripts that call it
    (score.py is this project's command for it)."""
    probs = []
    n_done = 0
    for x, y in iterator:
        n_done += len(x)
        x, x_mask, y, y_mask = prepare_data(x, y, n_words_src=options['n_words_src'],
                                            n_words=options['n_words'])
        probs.extend(f_log_probs(x, x_mask, y, y_mask))
        if verbose:
            print('%d samples computed' % n_done, file=sys.stderr)
    return numpy.array(probs)


# --------------------------------------------------------------------------
# training

def train(**kwargs):
    """Train a model; options as the original train() (see DEFAULT_OPTIONS).

    Returns the final validation cost (or None without validation data).
    """
    return Trainer(kwargs).run()


def training_options(kwargs):
    """(options, model options, reloading): the run's options, and the
    model's, which keep a reloaded model's architecture."""
    OPTIONS.check_known(kwargs)
    options = fill_options(kwargs)
    OPTIONS.check_choices(options)
    if not options['datasets'] or not options['dictionaries']:
        raise InputError('--datasets and --dictionaries are required')
    check_validation_options(options)
    model_options, reloading = OPTIONS.reloaded(options, kwargs, fill_options)
    check_options(model_options)
    return options, model_options, reloading


def check_validation_options(options):
    """InputError, before anything is compiled, for validation options that
    would fail hours into a run: BLEU validation without a reference or
    without validation data, a reference whose lines are not the validation
    source's, an external validation script that cannot be run."""
    script = options['external_validation_script']
    if script:
        program = (shlex.split(script) or [''])[0]
        if not (shutil.which(program) or (os.path.isfile(program) and
                                          os.access(program, os.X_OK))):
            raise InputError('--external_validation_script: %r is not a program that '
                             'can be run' % program)
    elif options['bleu_valid_freq'] > 0:
        if not options['valid_datasets']:
            raise InputError('--bleu_valid_freq needs --valid_datasets')
        if not options['bleu_valid_ref']:
            raise InputError('--bleu_valid_freq needs --bleu_valid_ref')
        source, ref = options['valid_datasets'][0], options['bleu_valid_ref']
        n_source, n_ref = count_lines(source), count_lines(ref)
        if n_source != n_ref:
            raise InputError('--bleu_valid_ref %s has %d lines but the validation source '
                             '%s has %d' % (ref, n_ref, source, n_source))


def open_corpora(options, model_options, dicts):
    """The training iterator and the validation one (or None)."""
    def iterator(paths, batch_size, **extra):
        return TextIterator(paths[0], paths[1], dicts[0], dicts[1],
                            n_words_source=model_options['n_words_src'],
                            n_words_target=model_options['n_words'],
                            batch_size=batch_size, maxlen=options['maxlen'], **extra)
    train_it = iterator(options['datasets'], options['batch_size'],
                        shuffle_each_epoch=options['shuffle_each_epoch'],
                        seed=options['seed'])
    valid_it = (iterator(options['valid_datasets'], options['valid_batch_size'])
                if options['valid_datasets'] else None)
    return train_it, valid_it


class CompiledModel(Compiled):
    """The shared parameters and every compiled function of a training run."""

    def __init__(self, options, model_options, reloading, output_log_probs=None):
        """output_log_probs: the unigram log probabilities that a fresh
        model's output bias starts from (None: zeros)."""
        params = init_params(model_options)
        if output_log_probs is not None:
            params['ff_logit_b'] = unigram_output_bias(output_log_probs)
        self.make(params, options, model_options, reloading)

    def build(self, options, model_options):
        graph = training_graph(self.tparams, model_options)
        self.trng, self.use_noise = graph.trng, graph.use_noise
        self.f_init, self.f_next = build_sampler(self.tparams, model_options,
                                                 self.trng, self.use_noise)
        # one function for the validation: the costs, and the readout's
        # saturated fraction of the batch
        self.f_validate = theano.function(graph.inputs, [graph.cost, graph.saturation],
                                          name='f_validate')
        self.compile_optimizer(options, graph.inputs, graph.train_cost)

    def f_log_probs(self, x, x_mask, y, y_mask):
        """Per-sentence costs (dl4mt's f_log_probs)."""
        return self.f_validate(x, x_mask, y, y_mask)[0]


class Trainer(TrainingLoop):
    """One run of train(): set up, compile, then the shared training loop
    (training_loop.py) with BLEU validation and translated samples."""

    def __init__(self, kwargs):
        self.options, self.model_options, reloading = training_options(kwargs)
        self.prepare_run(reloading)
        numpy.random.seed(self.options['seed'])
        self.dicts = [load_dictionary(d) for d in self.options['dictionaries']]
        self.idicts = [vocab.invert_dictionary(d) for d in self.dicts]
        _check_dictionaries(self.model_options, self.dicts, self.options['dictionaries'])
        record_dictionaries(self.model_options, self.dicts, self.options['dictionaries'],
                            reloading)
        print('Loading data')
        self.train_it, self.valid_it = open_corpora(self.options, self.model_options,
                                                    self.dicts)
        self.check_length_filter('--datasets', '--valid_datasets', 'sentence pairs')
        # the training targets' word frequencies: for a fresh model's output
        # bias (--init ...+unigram) and the validation set's frequency cost
        unigram_bias = self.options['init'].endswith('+unigram') and not reloading
        log_probs = None
        if unigram_bias or self.options['valid_datasets']:
            log_probs = unigram_log_probs(self.options['datasets'][1], self.dicts[1],
                                          self.model_options['n_words'])
        self.frequency_cost = self._frequency_cost(log_probs)
        if self.frequency_cost is not None:
            print('Word-frequency cost of the validation set: %.2f (a model that has '
                  'learnt only word frequencies)' % self.frequency_cost)
        print('Building model')
        self.model = CompiledModel(self.options, self.model_options, reloading,
                                   log_probs if unigram_bias else None)
        self.batched_sampler = None
        self.start(reloading)

    def _frequency_cost(self, log_probs):
        """The validation set's cost under the training targets' unigram
        model (None without validation data)."""
        if not self.options['valid_datasets']:
            return None
        counts, n_lines = count_words(self.options['valid_datasets'][1], self.dicts[1],
                                      self.model_options['n_words'])
        return vocab.unigram_cost(log_probs, counts, n_lines)

    def prepare_batch(self, batch):
        x_ids, y_ids = batch
        x, x_mask, y, y_mask = prepare_data(x_ids, y_ids, maxlen=self.options['maxlen'],
                                            n_words_src=self.model_options['n_words_src'],
                                            n_words=self.model_options['n_words'])
        if x is None:
            return None
        return Prepared([x, x_mask, y, y_mask], x.shape[1], int(y_mask.sum()))

    def valid_cost(self):
        costs, saturated, positions = [], 0., 0.
        for x_ids, y_ids in self.valid_it:
            inputs = prepare_data(x_ids, y_ids, n_words_src=self.model_options['n_words_src'],
                                  n_words=self.model_options['n_words'])
            batch_costs, batch_saturated = self.model.f_validate(*inputs)
            costs.extend(batch_costs)
            saturated = saturated + batch_saturated
            positions += float(inputs[3].sum())
        self.readout_saturation = stuck_fraction(saturated / max(positions, 1.))
        return numpy.array(costs).mean()

    def valid_fields(self, cost):
        return {'readout_saturation': self.readout_saturation}

    def extra_validation(self):
        if _bleu_due(self.options, self.state.uidx):
            return self._validate_bleu()
        return False

    def _validate_bleu(self):
        self.model.use_noise.set_value(0.)
        score = self._bleu_score()
        best, stop = self.state.record_bleu(score, self.options['bleu_patience'])
        print('BLEU %.2f (best %.2f)' % (score, max(self.state.bleu_history)))
        self.log.write('bleu', self.state, bleu=score, best=bool(best))
        if best:
            self.save_params(with_suffix(self.options['saveto'], 'best_bleu'))
        if stop:
            print('Early stop on BLEU: no improvement in %d validations'
                  % self.options['bleu_patience'])
        return stop

    def _bleu_score(self):
        opt = self.options
        if opt['external_validation_script']:
            current = with_suffix(opt['saveto'], 'current')
            self.save_params(current)
            return _external_validation(opt['external_validation_script'], current)
        if self.batched_sampler is None:   # compiled at the first BLEU validation
            self.batched_sampler = build_sampler(self.model.tparams, self.model_options,
                                                 self.model.trng, self.model.use_noise,
                                                 batched=True)
        hyps = translate_file(self.batched_sampler, self.model_options,
                              opt['valid_datasets'][0], self.dicts[0], self.idicts[1],
                              k=opt['bleu_valid_beam'])
        return _bleu(hyps, opt['bleu_valid_ref'], opt['bleu_valid_postprocess'])

    def print_samples(self, prepared):
        x, y = prepared.inputs[0], prepared.inputs[2]
        for jj in range(min(5, x.shape[1])):
            words, _ = gen_sample(self.model.tparams, self.model.f_init, self.model.f_next,
                                  x[:, jj][:, None], self.model_options,
                                  trng=self.model.trng, k=1, maxlen=30, stochastic=True)
            for label, seq, d in (('Source', x[:, jj], self.idicts[0]),
                                  ('Truth', y[:, jj], self.idicts[1]),
                                  ('Sample', words, self.idicts[1])):
                print('%s %d: %s' % (label, jj, ' '.join(vocab.ids_to_words(seq, d))))


# a readout unit saturated at more than STUCK of the positions is stuck: a
# constant, with no gradient through it
STUCK = 0.99


def stuck_fraction(saturated_share):
    """The fraction of the readout's units that are stuck, from the share of
    positions at which each unit is saturated."""
    return float((numpy.asarray(saturated_share) > STUCK).mean())


# sentences a batch of the validation's beam search
VALID_BEAM_BATCH = 16


def translate_file(sampler, options, source_path, source_dict, target_idict,
                   k=5, normalize=True, maxlen=200):
    """Beam-search translations of a tokenised file, one string per line:
    the batched search (sampler: build_sampler(..., batched=True)'s pair),
    in batches of sentences of similar lengths, as translate.py."""
    sources = [vocab.sentence_ids(line, source_dict, options['n_words_src'])
               for line in read_lines(source_path, what='source sentences')]
    out = [None] * len(sources)
    for batch in sorted_batches(sources, VALID_BEAM_BATCH):
        for i, hyps in search_batch([sampler], batch, k, maxlen, keep_attention=False):
            out[i] = ' '.join(vocab.ids_to_words(ranked(hyps, normalize)[0][0].words,
                                                 target_idict))
    return out


def _bleu(hyps, ref_path, postprocess):
    """Corpus BLEU of hyps (after the postprocess command) against ref_path."""
    from machinery import bleu
    if postprocess:
        proc = subprocess.run(postprocess, shell=True, input='\n'.join(hyps) + '\n',
                              capture_output=True, text=True, encoding='utf-8')
        if proc.returncode != 0:
            raise TrainingError('bleu_valid_postprocess failed: %s' % proc.stderr.strip())
        hyps = proc.stdout.split('\n')[:len(hyps)]
    return bleu.corpus_bleu_tokenized(hyps, read_lines(ref_path))['bleu']


def _external_validation(script, model_path):
    proc = subprocess.run(shlex.split(script) + [model_path], capture_output=True,
                          text=True)
    lines = proc.stdout.strip().split('\n')
    try:
        return float(lines[-1])
    except ValueError:
        raise TrainingError('external validation script %r printed no score '
                            '(last line %r)' % (script, lines[-1]))


def _bleu_due(options, uidx):
    """BLEU validation every bleu_valid_freq updates (an external script
    without that frequency runs every validFreq updates)."""
    freq = options['bleu_valid_freq']
    if freq <= 0 and options['external_validation_script']:
        freq = options['validFreq']
    return freq > 0 and bool(options['valid_datasets']) and uidx % freq == 0


def _check_dictionaries(options, worddicts, paths):
    """Warn when a vocabulary size exceeds what its dictionary can produce."""
    for key, d, path in (('n_words_src', worddicts[0], paths[0]),
                         ('n_words', worddicts[1], paths[1])):
        if len(d) < options[key]:
            print('warning: %s has %d entries but %s is %d: ids from %d on never '
                  'occur in the data' % (path, len(d), key, options[key], len(d)),
                  file=sys.stderr)


# --------------------------------------------------------------------------
# command line

def parse_args(argv):
    """train()'s keyword arguments: the options given on the command line."""
    return vars(argument_parser().parse_args(argv))


def argument_parser():
    """nmt.py's command line: every option of train(), in --help's groups."""
    parser = cli.ArgumentParser(
        description='Train an attention NMT model (dl4mt-tutorial options). The bare '
                    'defaults are dl4mt\'s train() (rmsprop, dim 1000, batch 16, ...), '
                    'not settings that train well: the papers\' settings are what '
                    'train_es-en.sh and its siblings pass (--dry-run prints them), '
                    'Multi30k\'s what train_multi30k.sh passes, and docs/training.md '
                    'gives the optimisers\' learning rates.')
    groups = OPTIONS.flag_groups(parser)
    groups['data'].add_argument('--datasets', nargs=2, required=True, metavar=('SRC', 'TRG'),
                                help='the training corpus: source and target files, '
                                     'one tokenised sentence a line')
    groups['data'].add_argument('--dictionaries', nargs=2, required=True,
                                metavar=('DICT_SRC', 'DICT_TRG'),
                                help='word -> id of each side (build_dictionary.py)')
    groups['data'].add_argument('--valid_datasets', nargs=2, metavar=('SRC', 'TRG'),
                                default=argparse.SUPPRESS,
                                help='the validation corpus (none: no validation)')
    groups['saving, resuming and display'].add_argument(
        '--model', dest='saveto', required=True, metavar='MODEL.npz',
        help='model file (options in MODEL.npz.pkl and .json)')
    OPTIONS.add_flags(groups, declared=('saveto', 'datasets', 'dictionaries',
                                        'valid_datasets'))
    return parser


def main(argv=None):
    args = parse_args(cli.arguments(argv))
    return distributed.run(lambda: train(**args))


if __name__ == '__main__':
    # run as the module nmt, so that what the function cache pickles names
    # nmt's classes (as when another program imports nmt), not __main__'s
    import nmt
    sys.exit(nmt.main())
