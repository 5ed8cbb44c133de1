"""A recurrent language model with the decoder's residual connections.

AAAI 2018 eq. 15-18 (NAACL 2018 sec. 7.3): p(y_t | y_<t) = g(s_t, d_t) with
s_t = f(s_{t-1}, y_{t-1}), f a GRU or an LSTM (``--encoder``, dl4mt's lm.py
name).  g is the readout of the translation decoder without the source
context (nmt_model.build_readout):

    t_t = tanh(W_s s_t + W_y prev_t),   p(y_t | y_<t) = softmax(W_o t_t + b_o)

where prev_t is y_{t-1}'s embedding (``--residual none``, the baseline) or
d_t, the summary of the previous words' embeddings that the residual decoder
uses (``--residual mean``: eq. 9/11; ``attentive``: eq. 10-12 with the
scorings that need no source context, ``--att_scoring content`` or
``content_scope``), computed by the same code (layers.residual_summary).
``--tie_embeddings`` makes W_o the transposed input embeddings (Press and
Wolf 2017).  Sentences are modelled one at a time, from a zero state and a
zero "previous word" before the first word, up to and including the
end-of-sentence token (id 0), as the translation decoder does.

    python language_model/lm.py train --model MODEL --data FILE [--valid FILE] [--dictionary DICT]
        [--config aaai-ptb|naacl-wiki] [--OPTION VALUE ...]
    python language_model/lm.py eval --model MODEL FILE        # last line: perplexity X
    python language_model/lm.py sample --model MODEL [-n N] [--maxlen L] [--seed S]
    python language_model/lm.py configs                        # the papers' sizes, parameter counts

Without ``--dictionary`` the dictionary of the training file is built as
build_dictionary.py builds it and written beside the model
(MODEL.dict.pkl/.json).  Training uses nmt.py's loop (training_loop.py):
the same option names, checkpoints, exact ``--reload``, progress lines,
validation (per-word cost and perplexity of the whole --valid file) and
early stopping.
"""
import os
import sys

if __name__ == '__main__':  # run as a file: import from the project root, not this folder
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from theano_platform import theano_env  # noqa: F401  (must come before theano)
if __name__ == '__main__':
    theano_env.configure(allow_gc=False)   # as nmt.py: faster training steps

import math
from collections import OrderedDict

import numpy
import theano
import theano.tensor as tensor

from machinery import cli
from machinery import distributed
import layers
from machinery import model_io
import nmt_model
from machinery import vocab
from build_dictionary import build_dictionary
from data_iterator import MonolingualIterator, prepare_monolingual
from machinery.model_io import file_as_named_or_beside, load_options, load_params
from machinery.vocab import load_dictionary, save_dictionary
from machinery.option_schema import (ARCHITECTURE, DICTIONARIES, INPUTS, RUN, Option,
                                     OptionSchema)
from optimizers import OPTIMIZER_OPTIONS
from machinery.progress import ProgressLine
from machinery.text_io import InputError
from sampler import StepFunction
from training_loop import LOOP_OPTIONS, Compiled, Prepared, TrainingLoop
from machinery.training_options import record_dictionaries, reloaded
import validators

MODEL_KIND = model_io.LANGUAGE_MODEL   # options['model_kind'] of every language_model/lm.py model
RESIDUALS = ('none',) + layers.RESIDUALS
# the decoder's scorings whose query is not the source context
SCORINGS = tuple(s for s in layers.SCORINGS if layers.QUERY_OF_SCORING[s] != 'ctx')

# the model's options: the translation model's (nmt_model.py) with the
# values a language model takes
_MODEL = nmt_model.MODEL
MODEL_OPTIONS = (
    _MODEL['dim_word'], _MODEL['dim'],
    _MODEL['encoder'].but(choices=tuple(layers.RECURRENT), help='the recurrent unit'),
    _MODEL['decay_c'],
    _MODEL['n_words'].but(default=-1, help='vocabulary: words of a higher id read as UNK '
                          '(-1: the dictionary\'s size)'),
    _MODEL['use_dropout'],
    _MODEL['residual'].but(default='none', choices=RESIDUALS, help='what the model adds from '
                           'the previous words: none (a plain RNN language model), mean or '
                           'attentive (the papers\' language-model experiment; '
                           'docs/language_model.md)'),
    _MODEL['att_scoring'].but(choices=SCORINGS),
    nmt_model.TIE_EMBEDDINGS,
)
# the text files of a run (dl4mt's lm.py names)
DATA_OPTIONS = (
    Option('dataset', None, 'the training text, one tokenised sentence a line', 'data', RUN,
           flag='data', metavar='FILE', required=True, files=INPUTS),
    Option('valid_dataset', None, 'the validation text (none: no validation)', 'data', RUN,
           flag='valid', metavar='FILE', files=INPUTS),
    # the model's: a reloaded model keeps its dictionary
    Option('dictionary', None, 'word -> id (.pkl or .json); default: built from --data',
           'data', ARCHITECTURE, metavar='DICT', files=DICTIONARIES),
)
# the order of the options in a model file (dl4mt's lm.py, then this
# project's additions)
SAVED_ORDER = (
    'dim_word', 'dim', 'encoder', 'patience', 'max_epochs', 'finish_after', 'dispFreq',
    'decay_c', 'clip_c', 'lrate', 'n_words', 'maxlen', 'optimizer', 'batch_size',
    'valid_batch_size', 'saveto', 'validFreq', 'saveFreq', 'sampleFreq', 'dataset',
    'valid_dataset', 'dictionary', 'use_dropout', 'reload_', 'overwrite',
    # additions
    'residual', 'att_scoring', 'tie_embeddings', 'shuffle_each_epoch', 'seed', 'noise_seed',
    'reload_model_only', 'restart')
OPTIONS = OptionSchema(MODEL_OPTIONS + DATA_OPTIONS + LOOP_OPTIONS + OPTIMIZER_OPTIONS
                       + validators.COST_OPTIONS, fixed={'model_kind': MODEL_KIND},
                       saved_order=SAVED_ORDER)
RNN_PREFIX, ATT_PREFIX = 'lm', 'res_att'


# --------------------------------------------------------------------------
# the papers' settings

def _aaai_ptb(residual):
    return dict(encoder='lstm', dim_word=150, dim=300, n_words=10000)


def _naacl_wiki(residual):
    # Daniluk et al. (2016): one LSTM layer, embeddings as wide as the state,
    # d = 300 for the baseline and 296 for the attention models (NAACL Table 6)
    d = 300 if residual == 'none' else 296
    return dict(encoder='lstm', dim_word=d, dim=d, n_words=77000)


# name -> (options for a residual, what the paper says, its parameter count)
CONFIGS = OrderedDict([
    ('aaai-ptb', (_aaai_ptb, 'AAAI 2018 Table 4: LSTM, 150-dim embeddings, 300-dim '
                  'states, Penn Treebank (10k words)', None)),
    ('naacl-wiki', (_naacl_wiki, 'NAACL 2018 Table 6: the setting of Daniluk et al. '
                    '(2016), Wikipedia (77k words), d = 300 / 296', 47000000)),
])


def config_options(name, residual):
    """The options that the configuration ``name`` sets for a residual."""
    if name not in CONFIGS:
        raise InputError('unknown config %r (choose from %s)' % (name, ', '.join(CONFIGS)))
    return CONFIGS[name][0](residual)


def config_line(name, options):
    """'<config> <residual>: N parameters (paper: ...)' for a complete model."""
    _, what, paper = CONFIGS[name]
    paper_text = ('%.0fM' % (paper / 1e6)) if paper else 'not stated'
    return ('%s, residual %s: %s parameters (paper: %s) -- %s'
            % (name, fill_options(options)['residual'], format(count_params(options), ','),
               paper_text, what))


# --------------------------------------------------------------------------
# options

def fill_options(options):
    """train()'s options completed (OPTIONS), its kind of model set."""
    return OPTIONS.fill(options)


# --------------------------------------------------------------------------
# parameters and graphs

def init_params(options):
    """Embeddings, the recurrent layer, the residual's scoring, the readout."""
    params = OrderedDict()
    dw, dim, n_words = options['dim_word'], options['dim'], options['n_words']
    params['Wemb_dec'] = layers.norm_weight(n_words, dw)
    params = layers.RECURRENT[options['encoder']].init(options, params, prefix=RNN_PREFIX,
                                                       nin=dw, dim=dim)
    if options['residual'] != 'none':
        params = layers.param_init_residual(options, params, ATT_PREFIX,
                                            dim_word=dw, dim_state=dim)
    ff_init = layers.param_init_fflayer
    params = ff_init(options, params, prefix='ff_logit_lstm', nin=dim, nout=dw, ortho=False)
    params = ff_init(options, params, prefix='ff_logit_prev', nin=dw, nout=dw, ortho=False)
    params = ff_init(options, params, prefix='ff_logit', nin=dw, nout=n_words)
    if options['tie_embeddings']:
        del params['ff_logit_W']   # the output layer reads Wemb_dec (build_readout)
    return params


def count_params(options):
    """Trainable parameters of a model with these options (shapes only)."""
    with layers.shapes_only():
        return int(sum(p.size for p in init_params(fill_options(options)).values()))


def _readout_input(tparams, options, emb, states, mask=None, carry=None):
    """The decoder-style dict build_readout reads: prev is y_{t-1} or d_t.
    With ``carry`` (one step) the new carry is in 'carry'."""
    dec = {'states': states, 'readout_prev': emb}
    if options['residual'] == 'none':
        dec['carry'] = {}
        return dec
    if carry is None:
        d, w = layers.residual_summary(tparams, options, ATT_PREFIX, emb, mask,
                                       state=states)
    else:
        d, w, dec['carry'] = layers.residual_summary_step(
            tparams, options, ATT_PREFIX, carry, emb, state=states)
    dec['readout_prev'] = d
    if w is not None:
        dec['prev_alphas'] = w
    return dec


def build_model(tparams, options):
    """The training graph: (trng, use_noise, y, y_mask, dec, logit, cost)
    with cost the per-sentence -log p (eos included)."""
    trng = nmt_model.noise_stream(options)
    use_noise = theano.shared(numpy.float32(0.))
    y = tensor.matrix('y', dtype='int64')
    y_mask = tensor.matrix('y_mask', dtype='float32')
    n_steps, n_samples = y.shape[0], y.shape[1]
    emb = tparams['Wemb_dec'][y.flatten()].reshape([n_steps, n_samples, options['dim_word']])
    # shifted: row 0 is zeros, row t is y[t-1]'s embedding
    emb = tensor.set_subtensor(tensor.zeros_like(emb)[1:], emb[:-1])
    rnn = layers.RECURRENT[options['encoder']]
    states = rnn.apply(tparams, emb, options, prefix=RNN_PREFIX, mask=y_mask)[0]
    dec = _readout_input(tparams, options, emb, states, mask=y_mask)
    hidden = nmt_model.build_readout(tparams, options, dec, use_noise, trng, project=False)
    W, b = nmt_model.output_layer(tparams, options)
    logit = tensor.dot(hidden, W) + b      # for the callers that want p (lm_experiment)
    cost = nmt_model.sentence_costs(tparams, options, hidden, y, y_mask)
    return trng, use_noise, y, y_mask, dec, logit, cost


def build_sampler(tparams, options, trng, use_noise):
    """f_next as a sampler.StepFunction: inputs 'y_prev' (-1: the zero
    embedding of the first step), the recurrent states ('state', and 'cell'
    for the LSTM) and the residual's carried tensors; outputs 'probs', the
    new states and carried tensors, and 'prev_alpha' (attentive residual)."""
    y = tensor.vector('y_prev', dtype='int64')
    emb = tensor.switch(y[:, None] < 0,
                        tensor.alloc(numpy.float32(0.), 1, options['dim_word']),
                        tparams['Wemb_dec'][y])
    rnn = layers.RECURRENT[options['encoder']]
    states_in = [tensor.matrix(name, dtype='float32') for name in rnn.states]
    mask = tensor.ones_like(y, dtype='float32')
    states = rnn.one_step(tparams, emb, RNN_PREFIX, mask, states_in)
    carried = carried_tensors(options)
    carry = OrderedDict((c.name, tensor.tensor3(c.name, dtype='float32')) for c in carried)
    dec = _readout_input(tparams, options, emb, states[0], carry=carry)
    probs = tensor.nnet.softmax(nmt_model.build_readout(tparams, options, dec, use_noise, trng))
    outs = OrderedDict([('probs', probs)])
    outs.update(zip(rnn.states, states))
    outs.update((name, dec['carry'][name]) for name in carry)
    if 'prev_alphas' in dec:
        outs['prev_alpha'] = dec['prev_alphas']
    inputs = [y] + states_in + list(carry.values())
    f_next = theano.function(inputs, list(outs.values()), name='f_next',
                             on_unused_input='ignore')
    return StepFunction(f_next, ('y_prev',) + rnn.states + tuple(carry),
                            tuple(outs), options, carried)


def carried_tensors(options):
    """The residual's layers.Carried tensors (the residual decoder's)."""
    if options['residual'] == 'none':
        return []
    return layers.DECODERS['gru_cond_residual'].carried(options)


def initial_step_values(f_next, options, n):
    """f_next's inputs before the first word of n sentences."""
    values = {'y_prev': -numpy.ones((n,), dtype='int64')}
    for name in layers.RECURRENT[options['encoder']].states:
        values[name] = numpy.zeros((n, options['dim']), dtype='float32')
    values.update(f_next.initial_carry(n))
    return values


def next_step_values(f_next, options, outputs, words):
    """f_next's inputs after ``words`` (n,) were read."""
    values = {'y_prev': numpy.asarray(words, dtype='int64')}
    for name in layers.RECURRENT[options['encoder']].states:
        values[name] = outputs[name]
    values.update((c.name, outputs[c.name]) for c in f_next.carried)
    return values


def sample_sentences(f_next, options, n, maxlen, rng):
    """n sentences (lists of ids, eos not included) drawn word by word."""
    values = initial_step_values(f_next, options, n)
    sentences = [[] for _ in range(n)]
    alive = numpy.ones(n, dtype=bool)
    for _ in range(maxlen):
        out = f_next.named(values)
        p = out['probs'].astype('float64')
        p /= p.sum(1, keepdims=True)
        words = (p.cumsum(1) < rng.uniform(size=(n, 1))).sum(1).clip(0, p.shape[1] - 1)
        for i in numpy.flatnonzero(alive):
            if words[i] == vocab.EOS:
                alive[i] = False
            else:
                sentences[i].append(int(words[i]))
        if not alive.any():
            break
        values = next_step_values(f_next, options, out, words)
    return sentences


# --------------------------------------------------------------------------
# scoring

def corpus_cost(f_log_probs, iterator, progress=None):
    """(per-sentence costs, number of words with eos) of every sentence the
    iterator yields, in its order."""
    costs, n_words, done = [], 0, 0
    for (sentences,) in iterator:
        y, y_mask = prepare_monolingual(sentences)
        costs.extend(f_log_probs(y, y_mask))
        n_words += int(y_mask.sum())
        done += len(sentences)
        if progress is not None:
            progress.update(done)
    return numpy.array(costs, dtype='float64'), n_words


def perplexity(total_cost, n_words):
    """exp(-log p / words): per word, the end-of-sentence tokens counted."""
    return math.exp(total_cost / n_words)


def scoring_iterator(path, word_dict, options, batch_size):
    """Every sentence of a file, none skipped for length, batch after batch
    in file order (sorted by length within a batch)."""
    return MonolingualIterator(path, word_dict, batch_size=batch_size, maxlen=float('inf'),
                               n_words=options['n_words'], sort_k_batches=1)


# --------------------------------------------------------------------------
# model files

def load_model(path):
    """(options, parameters) of an language_model/lm.py model; InputError for another kind."""
    if not os.path.exists(path):
        raise InputError('%s: no such model file' % path)
    saved = load_options(path)
    model_io.check_model_kind(path, saved, MODEL_KIND)
    options = fill_options(saved)
    OPTIONS.check_values(options)
    return options, load_params(path, init_params(options), strict=True)


def dictionary_path(options, model_path):
    """The model's dictionary: as saved, else the file of that name beside
    the model (a model moved with its dictionary)."""
    path = options['dictionary']
    if not path:
        raise InputError('%s: the model options name no dictionary' % model_path)
    return file_as_named_or_beside(path, model_path) or path


class LoadedModel(object):
    """A model file's options, dictionary and compiled scoring functions."""

    def __init__(self, path, sampler=False):
        self.options, params = load_model(path)
        self.word_dict = load_dictionary(dictionary_path(self.options, path))
        self.tparams = layers.init_tparams(params)
        trng, use_noise, y, y_mask, _, _, cost = build_model(self.tparams, self.options)
        self.f_log_probs = theano.function([y, y_mask], cost, name='f_log_probs')
        self.f_next = (build_sampler(self.tparams, self.options, trng, use_noise)
                       if sampler else None)


def evaluate(model, path, batch_size=32, progress=False):
    """{'sentences', 'words', 'cost', 'perplexity'} of a text file."""
    it = scoring_iterator(path, model.word_dict, model.options, batch_size)
    meter = ProgressLine(it.lines_total, 'scored', 'sentences') if progress else None
    costs, n_words = corpus_cost(model.f_log_probs, it, meter)
    if meter is not None:
        meter.finish()
    total = float(costs.sum())
    return {'sentences': len(costs), 'words': n_words, 'cost': total,
            'perplexity': perplexity(total, n_words)}


# --------------------------------------------------------------------------
# training

class LMModel(Compiled):
    """The parameters and compiled functions of a training run."""

    def __init__(self, options, model_options, reloading):
        self.make(init_params(model_options), options, model_options, reloading, OPTIONS)

    def build(self, options, model_options):
        (self.trng, self.use_noise, y, y_mask, _, _,
         cost) = build_model(self.tparams, model_options)
        self.f_log_probs = theano.function([y, y_mask], cost, name='f_log_probs')
        self.f_next = build_sampler(self.tparams, model_options, self.trng, self.use_noise)
        cost = nmt_model.regularised_cost(self.tparams, options, cost, {}, None, y_mask)
        self.compile_optimizer(options, [y, y_mask], cost)


def training_options(kwargs):
    """(options, model options, reloading), as nmt_training.training_options."""
    OPTIONS.check_known(kwargs)
    options = fill_options(kwargs)
    OPTIONS.check_required(options)
    OPTIONS.check_values(options)
    model_options, reloading = reloaded(OPTIONS, options, kwargs, MODEL_KIND)
    OPTIONS.check_values(model_options)
    return options, model_options, reloading


def complete_vocabulary(options, model_options, reloading):
    """The dictionary (built and saved beside the model when none is given)
    and n_words (-1: the dictionary's size) of a run's options."""
    if not reloading and not options['dictionary']:
        model_options['dictionary'] = _build_dictionary(options)
    options['dictionary'] = model_options['dictionary']
    word_dict = load_dictionary(model_options['dictionary'])
    if model_options['n_words'] <= 0:
        model_options['n_words'] = max(word_dict.values()) + 1
    elif len(word_dict) < model_options['n_words']:
        print('warning: %s has %d entries but n_words is %d: ids from %d on never '
              'occur in the data' % (model_options['dictionary'], len(word_dict),
                                     model_options['n_words'], len(word_dict)),
              file=sys.stderr)


def _build_dictionary(options):
    path = options['saveto'] + '.dict.pkl'
    print('Building the dictionary of %s -> %s' % (options['dataset'], path))
    save_dictionary(build_dictionary(options['dataset']), path,
                    options['saveto'] + '.dict.json')
    return path


class LMTrainer(TrainingLoop):
    """One training run: the shared loop with perplexity validation and
    sampled sentences."""
    options_schema = OPTIONS

    def __init__(self, kwargs):
        self.options, self.model_options, reloading = training_options(kwargs)
        self.prepare_run(reloading)
        complete_vocabulary(self.options, self.model_options, reloading)
        numpy.random.seed(self.options['seed'])
        opt, n_words = self.options, self.model_options['n_words']
        self.word_dict = load_dictionary(self.model_options['dictionary'])
        self.idict = vocab.invert_dictionary(self.word_dict)
        record_dictionaries(self.model_options, [self.word_dict],
                            [self.model_options['dictionary']], reloading)
        print('Loading data')
        self.train_it = MonolingualIterator(
            opt['dataset'], self.word_dict, batch_size=opt['batch_size'],
            maxlen=opt['maxlen'], n_words=n_words,
            shuffle_each_epoch=opt['shuffle_each_epoch'], seed=opt['seed'])
        self.valid_it = (scoring_iterator(opt['valid_dataset'], self.word_dict,
                                          self.model_options, opt['valid_batch_size'])
                         if opt['valid_dataset'] else None)
        self.check_length_filter(OPTIONS['dataset'].flag_name,
                                 OPTIONS['valid_dataset'].flag_name, 'sentences')
        self.validators = [validators.CostValidation()]
        print('Building model: %s parameters' % format(count_params(self.model_options), ','))
        self.model = LMModel(self.options, self.model_options, reloading)
        self.sample_rng = numpy.random.RandomState(self.options['seed'])
        self.start(reloading)

    def prepare_batch(self, batch):
        y, y_mask = prepare_monolingual(batch[0], maxlen=self.options['maxlen'])
        if y is None:
            return None
        return Prepared([y, y_mask], y.shape[1], int(y_mask.sum()))

    def valid_cost(self):
        """-log p per word of the validation file (log perplexity)."""
        costs, n_words = corpus_cost(self.model.f_log_probs, self.valid_it)
        return costs.sum() / n_words

    def valid_fields(self, cost):
        return {'perplexity': math.exp(min(cost, 700.))}

    def print_valid(self, cost):
        print('Valid cost %f perplexity %f' % (cost, math.exp(min(cost, 700.))))

    def print_samples(self, prepared):
        for jj, ids in enumerate(sample_sentences(self.model.f_next, self.model_options, 5,
                                                  50, self.sample_rng)):
            print('Sample %d: %s' % (jj, ' '.join(vocab.ids_to_words(ids, self.idict))))


def train(**kwargs):
    """Train a language model; returns the final validation cost per word."""
    return LMTrainer(kwargs).run()


# --------------------------------------------------------------------------
# command line

def _train_parser(sub):
    p = sub.add_parser('train', help='train a language model')
    p.add_argument('--config', choices=tuple(CONFIGS),
                   help='the sizes of a paper setting (options given win)')
    OPTIONS.add_flags(p)


def parse_args(argv):
    parser = cli.ArgumentParser(prog='lm.py', description=cli.summary(__doc__))
    sub = parser.add_subparsers(dest='command', required=True,
                                parser_class=cli.ArgumentParser)
    _train_parser(sub)
    e = sub.add_parser('eval', help='perplexity of a text file')
    e.add_argument('--model', required=True, help='the model file of lm.py train')
    e.add_argument('--batch_size', type=int, default=32,
                   help='sentences scored at once (default %(default)s)')
    e.add_argument('file', metavar='FILE',
                   help='text, one tokenised sentence a line, as the training data')
    s = sub.add_parser('sample', help='sentences drawn from a model')
    s.add_argument('--model', required=True, help='the model file of lm.py train')
    s.add_argument('-n', type=cli.positive_int, default=5, help='number of sentences')
    s.add_argument('--maxlen', type=cli.positive_int, default=100,
                   help='longest sentence drawn, in tokens (default %(default)s)')
    s.add_argument('--seed', type=int, default=1234,
                   help='seed of the draws (default %(default)s)')
    sub.add_parser('configs', help="the papers' sizes and parameter counts")
    return vars(parser.parse_args(argv))


def _train_kwargs(args):
    kwargs = {k: v for k, v in args.items()
              if k not in ('command', 'config') and v is not None}
    name = args.get('config')
    if name:
        for key, value in config_options(name, kwargs.get('residual', 'none')).items():
            kwargs.setdefault(key, value)
        print(config_line(name, kwargs))
    return kwargs


def _cmd_eval(args):
    result = evaluate(LoadedModel(args['model']), args['file'], args['batch_size'],
                      progress=True)
    print('sentences %d' % result['sentences'])
    print('words %d (end-of-sentence tokens included)' % result['words'])
    print('cost %.6f (-log p, nats)' % result['cost'])
    print('perplexity %.4f' % result['perplexity'])


def _cmd_sample(args):
    model = LoadedModel(args['model'], sampler=True)
    idict = vocab.invert_dictionary(model.word_dict)
    rng = numpy.random.RandomState(args['seed'])
    for ids in sample_sentences(model.f_next, model.options, args['n'], args['maxlen'], rng):
        print(' '.join(vocab.ids_to_words(ids, idict)))


def _cmd_configs(args):
    for name in CONFIGS:
        for residual in RESIDUALS:
            options = dict(config_options(name, residual), residual=residual)
            print(config_line(name, options))


def main(argv=None):
    args = parse_args(cli.arguments(argv))
    commands = {'train': lambda args: train(**_train_kwargs(args)), 'eval': _cmd_eval,
                'sample': _cmd_sample, 'configs': _cmd_configs}
    return distributed.run(lambda: commands[args['command']](args))


if __name__ == '__main__':
    sys.exit(main())
