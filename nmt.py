"""Attention NMT as in dl4mt-tutorial, plus the residual decoder family.

Model building (``init_params``, ``build_model``, ``build_sampler``),
decoding (``gen_sample``), scoring (``pred_probs``) and the training loop
(``train``), with dl4mt's names and signatures.  The equations are those of
``../shared/spec/REFERENCE.md``; the layers live in ``layers.py``, the
optimisers in ``optimizers.py``, the data in ``data_iterator.py`` and the
file formats in ``model_io.py``.

    python nmt.py --model model.npz --datasets SRC TRG --dictionaries DSRC DTRG \
        [--valid_datasets SRC TRG] [--OPTION VALUE ...]
"""
import sys

import theano_env  # noqa: F401  (must come before theano)
if __name__ == '__main__':
    # Training keeps intermediate results between calls: 4-9% faster steps at
    # the papers' size, about twice the memory (THEANO_FLAGS=allow_gc=True
    # overrides).  Theano's linker reads this once, at import.
    theano_env.configure(allow_gc=False)

import argparse
import copy
import os
import shlex
import subprocess
import time
from collections import OrderedDict

import numpy
import theano
import theano.tensor as tensor
from theano.sandbox.rng_mrg import MRG_RandomStream as RandomStreams

import fast_ops
import layers
from layers import get_layer, dropout_layer, HISTORY_DECODERS
from data_iterator import TextIterator, prepare_data  # noqa: F401 (dl4mt API)
from model_io import (InputError, load_params, load_archive_extras,  # noqa: F401
                      load_options, save_options, atomic_savez, load_dictionary,
                      invert_dictionary)
from optimizers import OPTIMIZERS, adadelta, adam, rmsprop, sgd  # noqa: F401

# --------------------------------------------------------------------------
# options

# train()'s options with the original defaults, then this project's additions
DEFAULT_OPTIONS = OrderedDict([
    ('dim_word', 100), ('dim', 1000), ('encoder', 'gru'), ('decoder', 'gru_cond'),
    ('patience', 10), ('max_epochs', 5000), ('finish_after', 10000000),
    ('dispFreq', 100), ('decay_c', 0.), ('alpha_c', 0.), ('diag_c', 0.),
    ('clip_c', -1.), ('lrate', 0.01), ('n_words_src', 100000),
    ('n_words', 100000), ('maxlen', 100), ('optimizer', 'rmsprop'),
    ('batch_size', 16), ('valid_batch_size', 16), ('saveto', 'model.npz'),
    ('validFreq', 1000), ('saveFreq', 1000), ('sampleFreq', 100),
    ('datasets', None), ('valid_datasets', None), ('dictionaries', None),
    ('use_dropout', False), ('reload_', False), ('overwrite', False),
    # additions
    ('residual', 'attentive'), ('att_scoring', 'content'),
    ('shuffle_each_epoch', True), ('seed', 1234),
    ('bleu_valid_freq', 0), ('bleu_valid_ref', None), ('bleu_valid_beam', 5),
    ('bleu_patience', 0), ('bleu_valid_postprocess', None),
    ('external_validation_script', None),
])

# what a reloaded model keeps from its saved options (the graph's shape)
ARCHITECTURE_OPTIONS = ('dim_word', 'dim', 'n_words_src', 'n_words', 'encoder',
                        'decoder', 'residual', 'att_scoring', 'use_dropout')

# the authors' name for the attentive residual decoder
DECODER_ALIASES = {'gru_cond_att': ('gru_cond_residual',
                                    {'residual': 'attentive', 'att_scoring': 'content'})}


def fill_options(options):
    """A copy of options with every missing option at its default.

    The authors' decoder name 'gru_cond_att' is kept (so that a file saved
    again still loads in their code) and implies the attentive residual with
    the content scoring.
    """
    full = OrderedDict(DEFAULT_OPTIONS)
    full.update(options)
    alias = DECODER_ALIASES.get(full['decoder'])
    if alias is not None:
        for key, value in alias[1].items():
            if key not in options:
                full[key] = value
    return full


def decoder_layer_name(options):
    name = options['decoder']
    return DECODER_ALIASES[name][0] if name in DECODER_ALIASES else name


def history_dims(options):
    """(item dim, key dim) of what a decoder carries between decoding steps."""
    decoder = decoder_layer_name(options)
    if decoder == 'gru_cond_residual':
        if options['residual'] == 'mean':
            return options['dim_word'], 0
        return options['dim_word'], options['dim_word']
    if decoder in ('gru_cond_memory', 'gru_cond_selfattn'):
        return options['dim'], options['dim']
    return None


# --------------------------------------------------------------------------
# parameters

def init_params(options):
    """All parameters, in the original order (REFERENCE.md section 2)."""
    params = OrderedDict()
    dw, dim, ctxdim = options['dim_word'], options['dim'], 2 * options['dim']
    params['Wemb'] = layers.norm_weight(options['n_words_src'], dw)
    params['Wemb_dec'] = layers.norm_weight(options['n_words'], dw)
    enc_init = get_layer(options['encoder'])[0]
    params = enc_init(options, params, prefix='encoder', nin=dw, dim=dim)
    params = enc_init(options, params, prefix='encoder_r', nin=dw, dim=dim)
    ff_init = get_layer('ff')[0]
    params = ff_init(options, params, prefix='ff_state', nin=ctxdim, nout=dim)
    params = get_layer(decoder_layer_name(options))[0](
        options, params, prefix='decoder', nin=dw, dim=dim, dimctx=ctxdim)
    params = ff_init(options, params, prefix='ff_logit_lstm', nin=dim, nout=dw, ortho=False)
    params = ff_init(options, params, prefix='ff_logit_prev', nin=dw, nout=dw, ortho=False)
    params = ff_init(options, params, prefix='ff_logit_ctx', nin=ctxdim, nout=dw, ortho=False)
    params = ff_init(options, params, prefix='ff_logit', nin=dw, nout=options['n_words'])
    return params


def count_params(options):
    """Number of trainable parameters of a model with these options."""
    return int(sum(p.size for p in init_params(fill_options(options)).values()))


def init_tparams(params):
    return OrderedDict((k, theano.shared(v, name=k)) for k, v in params.items())


def zipp(params, tparams):
    for k, v in params.items():
        tparams[k].set_value(v)


def unzip(tparams):
    return OrderedDict((k, v.get_value()) for k, v in tparams.items())


def itemlist(tparams):
    return list(tparams.values())


# --------------------------------------------------------------------------
# graphs

def build_encoder(tparams, options, x, x_mask=None):
    """Bidirectional GRU annotations ctx (T x n x 2d) and s0 (n x d)."""
    n_timesteps, n_samples = x.shape[0], x.shape[1]
    enc = get_layer(options['encoder'])[1]

    def embed(ids):
        emb = tparams['Wemb'][ids.flatten()]
        return emb.reshape([n_timesteps, n_samples, options['dim_word']])

    proj = enc(tparams, embed(x), options, prefix='encoder', mask=x_mask)
    projr = enc(tparams, embed(x[::-1]), options, prefix='encoder_r',
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
    """Logits from the decoder's outputs (REFERENCE.md section 3, readout);
    project=False: the layer below them (what ff_logit projects)."""
    ff = get_layer('ff')[1]
    logit = (ff(tparams, dec['states'], options, prefix='ff_logit_lstm', activ='linear') +
             ff(tparams, dec['readout_prev'], options, prefix='ff_logit_prev', activ='linear') +
             ff(tparams, dec['ctxs'], options, prefix='ff_logit_ctx', activ='linear'))
    for prefix, value in dec.get('extra_readout', []):
        logit = logit + ff(tparams, value, options, prefix=prefix, activ='linear')
    logit = tensor.tanh(logit)
    if options['use_dropout']:
        logit = dropout_layer(logit, use_noise, trng)
    if not project:
        return logit
    return ff(tparams, logit, options, prefix='ff_logit', activ='linear')


def build_model(tparams, options):
    """The training graph: per-sentence cost (no regularisers)."""
    opt_ret = dict()
    trng = RandomStreams(1234)
    use_noise = theano.shared(numpy.float32(0.))
    x = tensor.matrix('x', dtype='int64')
    x_mask = tensor.matrix('x_mask', dtype='float32')
    y = tensor.matrix('y', dtype='int64')
    y_mask = tensor.matrix('y_mask', dtype='float32')

    ctx, init_state = build_encoder(tparams, options, x, x_mask)

    n_timesteps_trg, n_samples = y.shape[0], y.shape[1]
    emb = tparams['Wemb_dec'][y.flatten()]
    emb = emb.reshape([n_timesteps_trg, n_samples, options['dim_word']])
    # shifted: row 0 is zeros, row t is y[t-1]'s embedding
    emb = tensor.set_subtensor(tensor.zeros_like(emb)[1:], emb[:-1])

    dec = get_layer(decoder_layer_name(options))[1](
        tparams, emb, options, prefix='decoder', mask=y_mask, context=ctx,
        context_mask=x_mask, one_step=False, init_state=init_state)
    opt_ret['dec_alphas'] = dec['alphas']
    if 'prev_alphas' in dec:
        opt_ret['prev_alphas'] = dec['prev_alphas']
    opt_ret['readout_prev'] = dec['readout_prev']

    hidden = build_readout(tparams, options, dec, use_noise, trng, project=False)
    # -log p of the reference words, as the original: log of the probability
    cost = fast_ops.output_nll(hidden, tparams['ff_logit_W'], tparams['ff_logit_b'],
                               y, y_mask)
    cost = (cost * y_mask).sum(0)
    return trng, use_noise, x, x_mask, y, y_mask, opt_ret, cost


def regularised_cost(tparams, options, cost, opt_ret, x_mask, y_mask):
    """mean(cost) + L2 + alignment regulariser (REFERENCE.md section 6)."""
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


def clip_gradients(grads, clip_c):
    """Rescale to global norm clip_c when the norm is larger."""
    if clip_c <= 0.:
        return grads
    g2 = 0.
    for g in grads:
        g2 += (g ** 2).sum()
    return [tensor.switch(g2 > (clip_c ** 2), g / tensor.sqrt(g2) * clip_c, g)
            for g in grads]


def _empty_history(options, n):
    item_dim, key_dim = history_dims(options)
    return [numpy.zeros((0, n, item_dim), dtype='float32'),
            numpy.zeros((0, n, key_dim), dtype='float32')]


def build_sampler(tparams, options, trng, use_noise):
    """f_init(x) -> [s0, ctx]; f_next(y_prev, ctx, s_prev[, items, keys]).

    f_next returns [probs, sample, next_state, alpha] and, for the decoders
    that attend to previous words or states, [items, keys, prev_alpha]: the
    history to pass to the next step and the attention over it.
    """
    x = tensor.matrix('x', dtype='int64')
    ctx, init_state = build_encoder(tparams, options, x)
    f_init = theano.function([x], [init_state, ctx], name='f_init')

    y = tensor.vector('y_sampler', dtype='int64')
    ctx = tensor.tensor3('ctx', dtype='float32')
    init_state = tensor.matrix('init_state', dtype='float32')
    # y = -1: the zero embedding of the first step
    emb = tensor.switch(y[:, None] < 0,
                        tensor.alloc(numpy.float32(0.), 1, tparams['Wemb_dec'].shape[1]),
                        tparams['Wemb_dec'][y])
    inps = [y, ctx, init_state]
    history = None
    if decoder_layer_name(options) in HISTORY_DECODERS:
        history = (tensor.tensor3('hist_items', dtype='float32'),
                   tensor.tensor3('hist_keys', dtype='float32'))
        inps += list(history)
    dec = get_layer(decoder_layer_name(options))[1](
        tparams, emb, options, prefix='decoder', mask=None, context=ctx,
        one_step=True, init_state=init_state, history=history)
    logit = build_readout(tparams, options, dec, use_noise, trng)
    next_probs = tensor.nnet.softmax(logit)
    next_sample = trng.multinomial(pvals=next_probs).argmax(1)
    outs = [next_probs, next_sample, dec['states'], dec['alphas']]
    if history is not None:
        new_items = tensor.concatenate([history[0], tensor.shape_padleft(dec['history_new'][0])], axis=0)
        new_keys = tensor.concatenate([history[1], tensor.shape_padleft(dec['history_new'][1])], axis=0)
        prev_alpha = dec.get('prev_alphas', tensor.zeros_like(new_items[:, :, 0]).T)
        outs += [new_items, new_keys, prev_alpha]
    f_next = theano.function(inps, outs, name='f_next', on_unused_input='ignore')
    return f_init, f_next


# --------------------------------------------------------------------------
# decoding

def _best_candidates(cand_flat, n_best):
    """Indices of the n_best lowest scores, lowest first (ties: lower index)."""
    if n_best >= cand_flat.shape[0]:
        return numpy.argsort(cand_flat, kind='stable')[:n_best]
    part = numpy.argpartition(cand_flat, n_best - 1)[:n_best]
    return part[numpy.lexsort((part, cand_flat[part]))]


def gen_sample(tparams, f_init, f_next, x, options, trng=None, k=1, maxlen=30,
               stochastic=True, argmax=False, return_alignment=False):
    """Sampling (stochastic) or beam search (REFERENCE.md section 5).

    Returns (samples, scores) like the original; with return_alignment also
    the source attention and the attention over previous words (or states)
    of every returned hypothesis, one row per output token.
    """
    if k > 1 and stochastic:
        raise ValueError('beam search does not support stochastic sampling')
    sample, sample_score, alignments, prev_alignments = [], [], [], []
    if stochastic:
        sample_score = 0
    live_k, dead_k = 1, 0
    hyp_samples = [[]]
    hyp_align = [[]]
    hyp_prev_align = [[]]
    hyp_scores = numpy.zeros(live_k).astype('float32')
    next_state, ctx0 = f_init(x)[:2]
    next_w = -1 * numpy.ones((1,)).astype('int64')
    history = (_empty_history(options, 1)
               if decoder_layer_name(options) in HISTORY_DECODERS else None)

    for ii in range(maxlen):
        ctx = numpy.tile(ctx0, [live_k, 1])
        inps = [next_w, ctx, next_state] + (history or [])
        ret = f_next(*inps)
        next_p, next_w_sampled, next_state = ret[0], ret[1], ret[2]
        step_align = ret[3] if len(ret) > 3 else None
        if history is not None:
            history = [ret[4], ret[5]]
            step_prev_align = ret[6]
        else:
            step_prev_align = None

        if stochastic:
            nw = next_p[0].argmax() if argmax else next_w_sampled[0]
            sample.append(int(nw))
            sample_score -= numpy.log(next_p[0, nw])
            next_w = numpy.array([nw], dtype='int64')
            if nw == 0:
                break
            continue

        cand_scores = hyp_scores[:, None] - numpy.log(next_p)
        cand_flat = cand_scores.flatten()
        ranks_flat = _best_candidates(cand_flat, k - dead_k)
        voc_size = next_p.shape[1]
        trans_indices = ranks_flat // voc_size
        word_indices = ranks_flat % voc_size
        costs = cand_flat[ranks_flat]

        new_live = []
        for idx, (ti, wi) in enumerate(zip(trans_indices, word_indices)):
            hyp = hyp_samples[ti] + [int(wi)]
            align = hyp_align[ti] + ([step_align[ti]] if step_align is not None else [])
            prev_align = hyp_prev_align[ti] + (
                [step_prev_align[ti]] if step_prev_align is not None else [])
            if wi == 0:
                sample.append(hyp)
                sample_score.append(costs[idx])
                alignments.append(align)
                prev_alignments.append(prev_align)
                dead_k += 1
            else:
                new_live.append((hyp, costs[idx], ti, align, prev_align))
        live_k = len(new_live)
        if live_k < 1 or dead_k >= k:
            break
        hyp_samples = [h[0] for h in new_live]
        hyp_scores = numpy.array([h[1] for h in new_live], dtype='float32')
        survivors = numpy.array([h[2] for h in new_live])
        hyp_align = [h[3] for h in new_live]
        hyp_prev_align = [h[4] for h in new_live]
        next_w = numpy.array([h[-1] for h in hyp_samples], dtype='int64')
        next_state = next_state[survivors]
        if history is not None:
            history = [history[0][:, survivors], history[1][:, survivors]]

    if not stochastic:
        # unfinished hypotheses join the finished ones
        if live_k > 0:
            for idx in range(live_k):
                sample.append(hyp_samples[idx])
                sample_score.append(hyp_scores[idx])
                alignments.append(hyp_align[idx])
                prev_alignments.append(hyp_prev_align[idx])
    if return_alignment:
        return sample, sample_score, alignments, prev_alignments
    return sample, sample_score


def best_hypothesis(samples, scores, normalize):
    """Index of the translation: lowest score, or score/length with -n."""
    scores = numpy.array(scores)
    if normalize:
        scores = scores / numpy.array([len(s) for s in samples])
    return int(numpy.argmin(scores))


def force_decode(f_init, f_next, x, y, options):
    """-log p of each reference token (y ends with 0) from the one-step sampler."""
    state, ctx = f_init(x)[:2]
    history = (_empty_history(options, 1)
               if decoder_layer_name(options) in HISTORY_DECODERS else None)
    prev = numpy.array([-1], dtype='int64')
    costs = []
    for word in y:
        ret = f_next(*([prev, ctx, state] + (history or [])))
        costs.append(-numpy.log(ret[0][0, word]))
        state = ret[2]
        if history is not None:
            history = [ret[4], ret[5]]
        prev = numpy.array([word], dtype='int64')
    return numpy.array(costs)


def pred_probs(f_log_probs, prepare_data, options, iterator, verbose=True):
    """Per-sentence costs of every pair the iterator yields."""
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

class TrainingError(Exception):
    """Training cannot go on (a NaN cost, say); the last checkpoint is kept."""


def _resume_path(saveto):
    return saveto + '.resume.npz'


def _save_model(saveto, params, history_errs, uidx, options):
    atomic_savez(saveto, history_errs=numpy.array(history_errs), uidx=uidx, **params)
    save_options(options, saveto)


def _rng_states(trng):
    """The shared states of the dropout/sampling random streams."""
    return [u[0] for u in trng.state_updates]


def _save_resume(saveto, tparams, opt_state, trng, counters, best_p):
    """Everything a killed run needs to continue exactly: parameters,
    optimizer state, random-stream states, counters and the data position."""
    arrays = OrderedDict(('param__' + k, v.get_value()) for k, v in tparams.items())
    arrays.update(('optim__' + k, v.get_value()) for k, v in opt_state.items())
    arrays.update(('rng__%d' % i, r.get_value()) for i, r in enumerate(_rng_states(trng)))
    if best_p is not None:
        arrays.update(('best__' + k, v) for k, v in best_p.items())
    atomic_savez(_resume_path(saveto),
                 history_errs=numpy.array(counters['history_errs'], dtype='float64'),
                 bleu_history=numpy.array(counters['bleu_history'], dtype='float64'),
                 uidx=counters['uidx'], bad_counter=counters['bad_counter'],
                 epoch=counters['epoch'], epoch_batches=counters['epoch_batches'],
                 **arrays)


def _load_resume(saveto, tparams, opt_state, trng):
    """Restore a resume checkpoint into the shared variables; returns its
    counters (and best parameters), or None when there is none."""
    path = _resume_path(saveto)
    if not os.path.exists(path):
        return None
    with numpy.load(path, allow_pickle=False) as f:
        for k, v in tparams.items():
            if 'param__' + k not in f or f['param__' + k].shape != v.get_value().shape:
                raise InputError('%s: does not match the model (parameter %s)' % (path, k))
        for k, v in tparams.items():
            v.set_value(f['param__' + k])
        for k, v in opt_state.items():
            if 'optim__' + k in f:
                v.set_value(f['optim__' + k])
            else:
                print('warning: %s has no optimizer state %s: it starts fresh'
                      % (path, k), file=sys.stderr)
        for i, r in enumerate(_rng_states(trng)):
            if 'rng__%d' % i in f and f['rng__%d' % i].shape == r.get_value().shape:
                r.set_value(f['rng__%d' % i])
        best_keys = [k for k in f.files if k.startswith('best__')]
        best_p = (OrderedDict((k[len('best__'):], f[k]) for k in best_keys)
                  if best_keys else None)
        return dict(uidx=int(f['uidx']), history_errs=list(f['history_errs']),
                    bad_counter=int(f['bad_counter']), epoch=int(f['epoch']),
                    epoch_batches=int(f['epoch_batches']),
                    bleu_history=list(f['bleu_history']), best_p=best_p)


class Progress:
    """Rates (updates/s, target words/s) and an ETA for the display lines."""

    def __init__(self, finish_after, max_epochs, pairs_per_epoch):
        self.start = time.time()
        self.updates = 0
        self.words = 0
        self.sentences = 0
        self.finish_after = finish_after
        self.total_pairs = (max_epochs * pairs_per_epoch) if pairs_per_epoch else None

    def add(self, n_sentences, n_words):
        self.updates += 1
        self.sentences += n_sentences
        self.words += n_words

    def line(self, uidx, pairs_done):
        elapsed = max(time.time() - self.start, 1e-9)
        ups, wps = self.updates / elapsed, self.words / elapsed
        etas = []
        if self.finish_after < 10000000:
            etas.append((self.finish_after - uidx) / max(ups, 1e-9))
        if self.total_pairs:
            etas.append((self.total_pairs - pairs_done) /
                        max(self.sentences / elapsed, 1e-9))
        eta = min(etas) if etas else None
        text = '%.2f upd/s %.0f words/s' % (ups, wps)
        if eta is not None:
            text += ' ETA %s' % _hms(max(eta, 0))
        return text


def _hms(seconds):
    seconds = int(seconds)
    return '%d:%02d:%02d' % (seconds // 3600, seconds // 60 % 60, seconds % 60)


def _print_samples(x, y, tparams, f_init, f_next, options, trng, worddicts_r):
    for jj in range(min(5, x.shape[1])):
        sample, _ = gen_sample(tparams, f_init, f_next, x[:, jj][:, None], options,
                               trng=trng, k=1, maxlen=30, stochastic=True)
        for label, seq, d in (('Source', x[:, jj], worddicts_r[0]),
                              ('Truth', y[:, jj], worddicts_r[1]),
                              ('Sample', sample, worddicts_r[1])):
            words = []
            for w in seq:
                if w == 0:
                    break
                words.append(d.get(int(w), 'UNK'))
            print('%s %d: %s' % (label, jj, ' '.join(words)))


def translate_corpus(tparams, f_init, f_next, options, source_path, source_dict,
                     target_idict, k=5, normalize=True, maxlen=200):
    """Beam-search translations of a tokenised file, one string per line."""
    from translate import read_source_ids, ids_to_words  # avoids an import cycle
    out = []
    for ids in read_source_ids(source_path, source_dict, options['n_words_src']):
        x = numpy.array(ids, dtype='int64').reshape([len(ids), 1])
        samples, scores = gen_sample(tparams, f_init, f_next, x, options, k=k,
                                     maxlen=maxlen, stochastic=False)
        out.append(ids_to_words(samples[best_hypothesis(samples, scores, normalize)],
                                target_idict))
    return out


def _bleu_validation(options, tparams, f_init, f_next, worddicts, worddicts_r):
    """BLEU of the validation source's translations against bleu_valid_ref."""
    import bleu
    hyps = translate_corpus(tparams, f_init, f_next, options,
                            options['valid_datasets'][0], worddicts[0],
                            worddicts_r[1], k=options['bleu_valid_beam'])
    if options['bleu_valid_postprocess']:
        proc = subprocess.run(options['bleu_valid_postprocess'], shell=True,
                              input='\n'.join(hyps) + '\n', capture_output=True,
                              text=True, encoding='utf-8')
        if proc.returncode != 0:
            raise TrainingError('bleu_valid_postprocess failed: %s' % proc.stderr.strip())
        hyps = proc.stdout.split('\n')[:len(hyps)]
    with open(options['bleu_valid_ref'], encoding='utf-8') as f:
        refs = [line.rstrip('\n') for line in f]
    return bleu.corpus_bleu_tokenized(hyps, refs)['bleu']


def _external_validation(script, model_path):
    proc = subprocess.run(shlex.split(script) + [model_path], capture_output=True,
                          text=True)
    lines = proc.stdout.strip().split('\n')
    try:
        return float(lines[-1])
    except ValueError:
        raise TrainingError('external validation script %r printed no score '
                            '(last line %r)' % (script, lines[-1]))


def _with_suffix(saveto, suffix):
    return '%s.%s.npz' % (os.path.splitext(saveto)[0], suffix)


def train(**kwargs):
    """Train a model; options as the original train() (see DEFAULT_OPTIONS).

    Returns the final validation cost (or None without validation data).
    """
    unknown = set(kwargs) - set(DEFAULT_OPTIONS)
    if unknown:
        raise InputError('unknown option(s): %s' % ', '.join(sorted(unknown)))
    options = fill_options(kwargs)
    saveto = options['saveto']
    if options['optimizer'] not in OPTIMIZERS:
        raise InputError('--optimizer must be one of %s' % ', '.join(sorted(OPTIMIZERS)))
    if not options['datasets'] or not options['dictionaries']:
        raise InputError('--datasets and --dictionaries are required')
    numpy.random.seed(options['seed'])

    worddicts = [load_dictionary(d) for d in options['dictionaries']]
    worddicts_r = [invert_dictionary(d) for d in worddicts]

    model_options = copy.copy(options)
    reloading = options['reload_'] and os.path.exists(saveto)
    if reloading:
        saved = fill_options(load_options(saveto))
        for key in ARCHITECTURE_OPTIONS:
            if key in kwargs and kwargs[key] != saved[key]:
                print('warning: --%s %s ignored: the reloaded model has %s'
                      % (key, kwargs[key], saved[key]), file=sys.stderr)
            model_options[key] = saved[key]
        if saved['decoder'] in DECODER_ALIASES:
            model_options['decoder'] = saved['decoder']
    _check_dictionaries(model_options, worddicts, options['dictionaries'])

    print('Loading data')
    train_it = TextIterator(options['datasets'][0], options['datasets'][1],
                            worddicts[0], worddicts[1],
                            n_words_source=model_options['n_words_src'],
                            n_words_target=model_options['n_words'],
                            batch_size=options['batch_size'], maxlen=options['maxlen'],
                            shuffle_each_epoch=options['shuffle_each_epoch'],
                            seed=options['seed'])
    valid_it = None
    if options['valid_datasets']:
        valid_it = TextIterator(options['valid_datasets'][0], options['valid_datasets'][1],
                                worddicts[0], worddicts[1],
                                n_words_source=model_options['n_words_src'],
                                n_words_target=model_options['n_words'],
                                batch_size=options['valid_batch_size'],
                                maxlen=options['maxlen'])

    print('Building model')
    params = init_params(model_options)
    if reloading:
        print('Reloading model parameters')
        params = load_params(saveto, params)
    tparams = init_tparams(params)
    trng, use_noise, x, x_mask, y, y_mask, opt_ret, cost = build_model(tparams, model_options)
    inps = [x, x_mask, y, y_mask]
    f_init, f_next = build_sampler(tparams, model_options, trng, use_noise)
    f_log_probs = theano.function(inps, cost, name='f_log_probs')
    cost = regularised_cost(tparams, options, cost, opt_ret, x_mask, y_mask)
    grads = clip_gradients(tensor.grad(cost, wrt=itemlist(tparams)), options['clip_c'])
    lr = tensor.scalar(name='lr')
    opt_state = OrderedDict()
    print('Building optimizer (compiling; minutes at the papers\' size)')
    t0 = time.time()
    optimizer = OPTIMIZERS[options['optimizer']]
    extra = {'fused': True} if options['optimizer'] == 'adadelta' else {}
    f_grad_shared, f_update = optimizer(lr, tparams, grads, inps, cost,
                                        state=opt_state, **extra)
    print('Compiled in %.1f s' % (time.time() - t0))

    best_p = None
    c = dict(uidx=0, history_errs=[], bad_counter=0, bleu_history=[], epoch=0,
             epoch_batches=0)
    if reloading:
        c.update(load_archive_extras(saveto))
        resume = _load_resume(saveto, tparams, opt_state, trng)
        if resume is not None and resume['uidx'] >= c['uidx']:
            print('Resuming at update %d from %s' % (resume['uidx'], _resume_path(saveto)))
            best_p = resume.pop('best_p')
            c.update(resume)
        else:
            if resume is not None:  # older than the model file: ignore it
                zipp(params, tparams)
            print('No optimizer state: the optimizer starts fresh')
        # the data position: the epoch's permutation, then the batches done
        for _ in range(c['epoch']):
            train_it.reset()
        for _ in range(c['epoch_batches']):
            next(train_it)
    history_errs, bleu_history = c['history_errs'], c['bleu_history']

    def save_checkpoint():
        _save_model(saveto, best_p if best_p is not None else unzip(tparams),
                    history_errs, c['uidx'], model_options)
        _save_resume(saveto, tparams, opt_state, trng, c, best_p)

    progress = Progress(options['finish_after'], options['max_epochs'] - c['epoch'],
                        getattr(train_it, 'lines_total', None))
    print('Optimization')
    estop = c['uidx'] >= options['finish_after']
    if estop:
        print('Already trained for %d updates (finish_after %d)'
              % (c['uidx'], options['finish_after']))
    pairs_done = 0
    while not estop and c['epoch'] < options['max_epochs']:
        eidx = c['epoch']
        n_samples = 0
        for x, y in train_it:
            c['epoch_batches'] += 1
            n_samples += len(x)
            pairs_done += len(x)
            use_noise.set_value(1.)
            x, x_mask, y, y_mask = prepare_data(x, y, maxlen=options['maxlen'],
                                                n_words_src=model_options['n_words_src'],
                                                n_words=model_options['n_words'])
            if x is None:
                print('Minibatch with zero sample under length', options['maxlen'])
                continue
            c['uidx'] += 1
            uidx = c['uidx']
            ud_start = time.time()
            cost = f_grad_shared(x, x_mask, y, y_mask)
            f_update(options['lrate'])
            ud = time.time() - ud_start
            progress.add(x.shape[1], int(y_mask.sum()))
            if not numpy.isfinite(cost):
                raise TrainingError('NaN or Inf cost at update %d (epoch %d); the '
                                    'last checkpoint in %s is kept' % (uidx, eidx, saveto))
            if uidx % options['dispFreq'] == 0:
                print('Epoch %d Update %d Cost %f UD %f | %s'
                      % (eidx, uidx, cost, ud, progress.line(uidx, pairs_done)))
                sys.stdout.flush()

            if valid_it is not None and uidx % options['validFreq'] == 0:
                use_noise.set_value(0.)
                valid_err = pred_probs(f_log_probs, prepare_data, model_options,
                                       valid_it, verbose=False).mean()
                history_errs.append(valid_err)
                if valid_err <= numpy.array(history_errs).min():
                    best_p = unzip(tparams)
                    c['bad_counter'] = 0
                if (len(history_errs) > options['patience'] and
                        valid_err >= numpy.array(history_errs)[:-options['patience']].min()):
                    c['bad_counter'] += 1
                    if c['bad_counter'] > options['patience']:
                        print('Early Stop!')
                        estop = True
                if numpy.isnan(valid_err):
                    raise TrainingError('NaN validation cost at update %d' % uidx)
                print('Valid %f' % valid_err)

            if _bleu_due(options, uidx):
                use_noise.set_value(0.)
                score = _run_bleu_validation(options, model_options, tparams, f_init,
                                             f_next, worddicts, worddicts_r, saveto,
                                             uidx, history_errs)
                bleu_history.append(score)
                print('BLEU %.2f (best %.2f)' % (score, max(bleu_history)))
                if score >= max(bleu_history):
                    _save_model(_with_suffix(saveto, 'best_bleu'), unzip(tparams),
                                history_errs, uidx, model_options)
                patience_b = options['bleu_patience']
                if patience_b > 0 and len(bleu_history) > patience_b and \
                        max(bleu_history[-patience_b:]) < max(bleu_history[:-patience_b]):
                    print('Early stop on BLEU: no improvement in %d validations'
                          % patience_b)
                    estop = True

            if uidx % options['sampleFreq'] == 0:
                use_noise.set_value(0.)
                _print_samples(x, y, tparams, f_init, f_next, model_options, trng,
                               worddicts_r)

            if uidx >= options['finish_after']:
                print('Finishing after %d iterations!' % uidx)
                estop = True
            if uidx % options['saveFreq'] == 0 or estop:
                print('Saving the model at update %d...' % uidx, end=' ')
                save_checkpoint()
                if not options['overwrite'] and uidx % options['saveFreq'] == 0:
                    _save_model(_with_suffix(saveto, 'iter%d' % uidx), unzip(tparams),
                                history_errs, uidx, model_options)
                print('Done')
                sys.stdout.flush()
            if estop:
                break
        else:  # the epoch ended
            c['epoch'] += 1
            c['epoch_batches'] = 0
            print('Seen %d samples' % n_samples)

    if best_p is not None:
        zipp(best_p, tparams)
    use_noise.set_value(0.)
    valid_err = None
    if valid_it is not None:
        valid_err = pred_probs(f_log_probs, prepare_data, model_options, valid_it,
                               verbose=False).mean()
        print('Valid %f' % valid_err)
    _save_model(saveto, unzip(tparams), history_errs, c['uidx'], model_options)
    return valid_err


def _bleu_due(options, uidx):
    """BLEU validation every bleu_valid_freq updates (an external script
    without that frequency runs every validFreq updates)."""
    freq = options['bleu_valid_freq']
    if freq <= 0 and options['external_validation_script']:
        freq = options['validFreq']
    return freq > 0 and bool(options['valid_datasets']) and uidx % freq == 0


def _run_bleu_validation(options, model_options, tparams, f_init, f_next, worddicts,
                         worddicts_r, saveto, uidx, history_errs):
    if options['external_validation_script']:
        current = _with_suffix(saveto, 'current')
        _save_model(current, unzip(tparams), history_errs, uidx, model_options)
        return _external_validation(options['external_validation_script'], current)
    if not options['bleu_valid_ref']:
        raise InputError('--bleu_valid_freq needs --bleu_valid_ref')
    opts = dict(model_options, **{k: options[k] for k in (
        'valid_datasets', 'bleu_valid_beam', 'bleu_valid_postprocess', 'bleu_valid_ref')})
    return _bleu_validation(opts, tparams, f_init, f_next, worddicts, worddicts_r)


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

def _parse_bool(text):
    return str(text).lower() in ('1', 'true', 'yes', 'on')


def parse_args(argv):
    parser = argparse.ArgumentParser(
        description='Train an attention NMT model (dl4mt-tutorial options).')
    parser.add_argument('--model', dest='saveto', required=True, metavar='MODEL.npz',
                        help='model file (options in MODEL.npz.pkl and .json)')
    parser.add_argument('--datasets', nargs=2, required=True, metavar=('SRC', 'TRG'))
    parser.add_argument('--dictionaries', nargs=2, required=True,
                        metavar=('DICT_SRC', 'DICT_TRG'))
    parser.add_argument('--valid_datasets', nargs=2, metavar=('SRC', 'TRG'))
    parser.add_argument('--reload', dest='reload_', action='store_true',
                        help='resume training from MODEL (parameters, optimizer, counters)')
    parser.add_argument('--use_dropout', action='store_true')
    parser.add_argument('--overwrite', action='store_true',
                        help='do not keep MODEL.iterN.npz copies at each save')
    parser.add_argument('--no_shuffle', dest='shuffle_each_epoch', action='store_false',
                        help='read the training data in file order every epoch')
    handled = {'saveto', 'datasets', 'dictionaries', 'valid_datasets', 'reload_',
               'use_dropout', 'overwrite', 'shuffle_each_epoch'}
    for key, default in DEFAULT_OPTIONS.items():
        if key in handled:
            continue
        kind = type(default) if default is not None else str
        if kind is bool:
            kind = _parse_bool
        parser.add_argument('--' + key, type=kind, default=argparse.SUPPRESS,
                            help='default: %r' % (default,))
    args = vars(parser.parse_args(argv))
    if not args.get('use_dropout'):
        args.pop('use_dropout', None)
    for key in ('reload_', 'overwrite'):
        if not args.get(key):
            args.pop(key, None)
    if args.get('shuffle_each_epoch', True):
        args.pop('shuffle_each_epoch', None)
    if args.get('valid_datasets') is None:
        args.pop('valid_datasets', None)
    return args


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        train(**args)
    except (InputError, TrainingError) as e:
        print('error: %s' % e, file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print('interrupted: the last checkpoint is kept', file=sys.stderr)
        return 130
    return 0


if __name__ == '__main__':
    sys.exit(main())
