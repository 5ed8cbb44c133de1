"""The attention model of dl4mt-tutorial and the residual decoders: its
options, parameters and graphs (docs/equations.md).

``init_params`` (the parameters in the original order), ``build_encoder``,
``build_model`` (the training graph's per-sentence cost), ``training_graph``
(with the regularised cost that training minimises), the readout and the
output layer, the training graph's dropouts, ``load_model`` (a model file's
options and parameters).  The layers and the decoder registry live in
layers.py, the samplers in sampler.py; nmt.py is dl4mt's API over them.

The model's options are declared here (MODEL_OPTIONS), each once: nmt.py's
command line, its checks and what ``--reload`` keeps are derived from them
(machinery/option_schema.py).
"""
import os
from collections import OrderedDict, namedtuple

from theano_platform import theano_env  # noqa: F401  (must come before theano)
import numpy
import theano
import theano.tensor as tensor
from theano.sandbox.rng_mrg import MRG_RandomStream as RandomStreams

from theano_platform import fast_ops
import layers
from machinery import model_io
from layers import get_layer, dropout_layer
from data_iterator import count_words
from machinery.model_io import load_params, load_options
from machinery.option_schema import ARCHITECTURE, DECODING, GRAPH, Option, OptionSchema
from machinery.text_io import InputError
from machinery.training_options import noise_seed
from machinery import vocab

# --------------------------------------------------------------------------
# options

# --init: the weight scale (layers.WEIGHT_SCALES), and with '+unigram' the
# output bias from the training targets' word frequencies instead of zeros
# (docs/training.md#initialisation); 'dl4mt' is the original's
INITS = ('glorot+unigram', 'glorot', 'dl4mt+unigram', 'dl4mt')


def _fraction(value):
    return 0. <= value < 1.


def _implied_by_decoder(name):
    """A decoder alias (the authors' 'gru_cond_att') is kept as the
    decoder's name, so that a file saved again still loads in their code,
    and sets the options it implies (layers.DECODER_ALIASES)."""
    return layers.DECODER_ALIASES.get(name, (None, {}))[1]


def _dropout(name, what):
    return Option(name, 0., what, 'model', GRAPH, valid=_fraction,
                  requirement='at least 0 and below 1')


# the model's options: dl4mt's, then this project's additions
MODEL_OPTIONS = (
    Option('dim_word', 100, 'size of the word embeddings', 'model', ARCHITECTURE),
    Option('dim', 1000, 'size of the recurrent states', 'model', ARCHITECTURE),
    # one value, so no flag; kept in the model's options because the
    # original code reads options['encoder']
    Option('encoder', 'gru', 'recurrent unit of the encoder', 'model', ARCHITECTURE,
           choices=('gru',)),
    Option('decoder', 'gru_cond', 'the decoder: gru_cond (dl4mt\'s conditional GRU) or a '
           'residual one (docs/decoders.md)', 'model', ARCHITECTURE,
           choices=layers.DECODER_NAMES, implies=_implied_by_decoder),
    Option('decay_c', 0., 'L2 weight decay: this times the sum of squared weights is added '
           'to the cost (0: none)', 'optimisation', GRAPH),
    Option('alpha_c', 0., 'attention regulariser: pushes each source word\'s total attention '
           'towards 1 (0: none)', 'optimisation', GRAPH),
    Option('n_words_src', 100000, 'source vocabulary: words of a higher id read as UNK',
           'model', ARCHITECTURE),
    Option('n_words', 100000, 'target vocabulary: words of a higher id read as UNK',
           'model', ARCHITECTURE),
    Option('use_dropout', False, 'dropout on the readout (0.5, as dl4mt: part of the model, '
           'halved when translating)', 'model', ARCHITECTURE),
    Option('residual', 'attentive', 'what a residual decoder adds from the previous words '
           '(docs/decoders.md)', 'model', ARCHITECTURE, choices=layers.RESIDUALS),
    Option('att_scoring', 'content', 'scoring of the attention over the previous words '
           '(attentive residual)', 'model', ARCHITECTURE, choices=layers.SCORINGS),
    Option('inference', layers.TRAINING_INFERENCE, 'how the attentive residual decoder '
           'summarises the previous words when decoding: training (the training graph\'s) '
           'or authors (their sampler\'s; docs/equations.md)', 'model', DECODING,
           choices=layers.INFERENCES),
    Option('init', 'glorot+unigram', 'initial parameters: glorot (rectangular matrices '
           'Glorot-uniform, the embeddings and output weights uniform in +-sqrt(3/dim_word) '
           'as Marian\'s) or dl4mt (0.01 * N(0,1), the original\'s), square ones orthogonal '
           'in both; +unigram: the output bias starts at the log word frequencies of the '
           'training targets (docs/training.md)', 'model', GRAPH, choices=INITS),
)
# the training graph's inverted dropouts (docs/training.md#dropout; Dropout)
DROPOUTS = (
    _dropout('dropout_embedding', 'training only: drop each unit of the source and target '
             'word embeddings with this probability (inverted dropout; 0: none; '
             'docs/training.md#dropout)'),
    _dropout('dropout_context', 'training only: dropout of the encoder\'s annotations that '
             'the decoder attends to'),
    _dropout('dropout_readout', 'training only: inverted dropout of the readout layer '
             '(instead of --use_dropout)'),
)
DROPOUT_RATES = tuple(o.name for o in DROPOUTS)
MODEL_OPTIONS += DROPOUTS
MODEL = OptionSchema(MODEL_OPTIONS)
# the output layer as the transposed target embeddings (Press and Wolf 2017;
# language_model/lm.py's option: output_layer reads it)
TIE_EMBEDDINGS = Option('tie_embeddings', False, 'the output layer is the transposed input '
                        'embeddings', 'model', ARCHITECTURE)


def check_options(options):
    """InputError naming the option when the model's options do not fit:
    a value that the option does not take, decoder options that the
    registry has not (layers.variant_of, whose message names the values a
    decoder takes), two dropouts of the readout."""
    try:
        layers.variant_of(options)
    except ValueError as e:
        raise InputError(str(e))
    MODEL.check_values(options)
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
        return int(sum(p.size for p in init_params(MODEL.fill(options)).values()))


def load_model(path, inference=None):
    """Options (completed and checked) and parameters of a model file; with
    ``inference`` (layers.INFERENCES) the model decodes that way instead of
    its file's way."""
    if not os.path.exists(path):
        raise InputError('%s: no such model file' % path)
    saved = load_options(path)
    model_io.check_model_kind(path, saved, model_io.TRANSLATION_MODEL)
    options = MODEL.fill(saved)
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


