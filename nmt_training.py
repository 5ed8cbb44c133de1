"""Training the attention model: dl4mt's ``train()``, its options, and one
run of it.

``OPTIONS`` is nmt.py's option schema (machinery/option_schema.py): the
model's options (nmt_model.py), the training loop's (training_loop.py), the
optimizer's (optimizers.py), the validators' (validators.py) and the data
files' (here), each declared once.  ``train(**options)`` checks them, loads
the dictionaries and the corpora, compiles the model (``CompiledModel``,
or the function cache's copy of it) and runs the shared training loop
(training_loop.py) with the validators the options ask for: the
validation cost, and BLEU of the validation source's translations
(translation/decoding.py) or an external script's score.
"""
import sys

from theano_platform import theano_env  # noqa: F401  (must come before theano)
import numpy
import theano

from machinery import model_io
from machinery import vocab
from machinery.vocab import load_dictionary
from machinery.option_schema import DICTIONARIES, INPUTS, RUN, Option, OptionSchema
from machinery.text_io import read_lines
from machinery.training_options import record_dictionaries, reloaded
from beam_search import gen_sample
from data_iterator import TextIterator, count_words, prepare_data
from data_parallel import share_bounds
from nmt_model import (MODEL_OPTIONS, check_options, init_params, training_graph,
                       unigram_log_probs, unigram_output_bias)
from optimizers import OPTIMIZER_OPTIONS
from sampler import build_sampler
from training_loop import LOOP_OPTIONS, Compiled, Prepared, TrainingLoop
from translation import decoding
import validators

# the data files of a run (dl4mt's)
DATA_OPTIONS = (
    Option('datasets', None, 'the training corpus: source and target files, one tokenised '
           'sentence a line', 'data', RUN, nargs=2, metavar=('SRC', 'TRG'), required=True,
           files=INPUTS),
    Option('valid_datasets', None, 'the validation corpus (none: no validation)', 'data', RUN,
           nargs=2, metavar=('SRC', 'TRG'), files=INPUTS),
    Option('dictionaries', None, 'word -> id of each side (build_dictionary.py)', 'data', RUN,
           nargs=2, metavar=('DICT_SRC', 'DICT_TRG'), required=True, files=DICTIONARIES),
)
# the order of the options in a model file (dl4mt's train() arguments, then
# this project's additions): the files read as the original code wrote them
SAVED_ORDER = (
    'dim_word', 'dim', 'encoder', 'decoder', 'patience', 'max_epochs', 'finish_after',
    'dispFreq', 'decay_c', 'alpha_c', 'clip_c', 'lrate', 'n_words_src', 'n_words', 'maxlen',
    'optimizer', 'batch_size', 'valid_batch_size', 'saveto', 'validFreq', 'saveFreq',
    'sampleFreq', 'datasets', 'valid_datasets', 'dictionaries', 'use_dropout', 'reload_',
    'overwrite',
    # additions
    'residual', 'att_scoring', 'inference', 'shuffle_each_epoch', 'seed', 'noise_seed',
    'bleu_valid_freq', 'bleu_valid_ref', 'bleu_valid_beam', 'bleu_patience',
    'bleu_valid_postprocess', 'external_validation_script', 'reload_model_only', 'restart',
    'init', 'dropout_embedding', 'dropout_context', 'dropout_readout')
OPTIONS = OptionSchema(MODEL_OPTIONS + DATA_OPTIONS + LOOP_OPTIONS + OPTIMIZER_OPTIONS
                       + validators.COST_OPTIONS + validators.SCORE_OPTIONS,
                       saved_order=SAVED_ORDER)


def train(**kwargs):
    """Train a model; options as the original train() (OPTIONS).

    Returns the final validation cost (or None without validation data).
    """
    return Trainer(kwargs).run()


def training_options(kwargs):
    """(options, model options, reloading): the run's options, and the
    model's, which keep a reloaded model's architecture."""
    OPTIONS.check_known(kwargs)
    options = OPTIONS.fill(kwargs)
    OPTIONS.check_values(options)
    OPTIONS.check_required(options)
    validators.check_options(options)
    model_options, reloading = reloaded(OPTIONS, options, kwargs,
                                        model_io.TRANSLATION_MODEL)
    check_options(model_options)
    return options, model_options, reloading


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
        self.make(params, options, model_options, reloading, OPTIONS)

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
    (training_loop.py) with its validators and translated samples."""
    options_schema = OPTIONS

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
        self.check_length_filter(OPTIONS['datasets'].flag_name,
                                 OPTIONS['valid_datasets'].flag_name, 'sentence pairs')
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
        self.validators = validators.validators(self.options, self.translate_validation_source)
        self.translator = None
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

    def translate_validation_source(self, rank=0, size=1):
        """The best translation (length-normalised) of each line of share
        ``rank`` of ``size`` of the validation source (data_parallel.share_bounds;
        0 of 1: every line), with the beam of --bleu_valid_beam: the batched
        search over the training's parameters (its sampler compiled at the
        first BLEU validation)."""
        if self.translator is None:
            sampler = build_sampler(self.model.tparams, self.model_options, self.model.trng,
                                    self.model.use_noise, batched=True)
            self.translator = decoding.Translator([sampler], decoding.Search(
                self.options['bleu_valid_beam'], self.options['bleu_valid_maxlen'],
                VALID_BEAM_BATCH, False, False))
        lines = read_lines(self.options['valid_datasets'][0], what='source sentences')
        first, end = share_bounds(len(lines), size, rank)
        sources = [vocab.sentence_ids(line, self.dicts[0], self.model_options['n_words_src'])
                   for line in lines[first:end]]
        return decoding.best_translations(self.translator, sources, self.idicts[1])

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


# sentences a batch of the validation's beam search
VALID_BEAM_BATCH = 16
# a readout unit saturated at more than STUCK of the positions is stuck: a
# constant, with no gradient through it
STUCK = 0.99


def stuck_fraction(saturated_share):
    """The fraction of the readout's units that are stuck, from the share of
    positions at which each unit is saturated."""
    return float((numpy.asarray(saturated_share) > STUCK).mean())


def _check_dictionaries(options, worddicts, paths):
    """Warn when a vocabulary size exceeds what its dictionary can produce."""
    for key, d, path in (('n_words_src', worddicts[0], paths[0]),
                         ('n_words', worddicts[1], paths[1])):
        if len(d) < options[key]:
            print('warning: %s has %d entries but %s is %d: ids from %d on never '
                  'occur in the data' % (path, len(d), key, options[key], len(d)),
                  file=sys.stderr)
