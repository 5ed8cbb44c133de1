"""Validation during training: what is measured, when, and when it stops a run.

The training loop (training_loop.py) runs, after each update, the
validators that its trainer gives it, in their order; each one that is due
(``due``) first does on every worker what the workers share (``share``:
nothing but BLEU's translations), then on rank 0 alone (``run``) measures the model, records the figure in the run's state and its
training log, keeps what is best and says whether the run should stop
early.  Three kinds:

* ``CostValidation``: the cost of the validation data every ``validFreq``
  updates, dl4mt's early stopping (``patience`` validations without a lower
  cost), the best parameters for the model file, and the warnings of a
  model that does not learn (docs/training.md#is-it-learning);
* ``BleuValidation``: every ``bleu_valid_freq`` updates, the beam search of
  the validation source (a function of the trainer's: nmt_training.py) and
  its BLEU against ``bleu_valid_ref``; the best parameters by BLEU go to
  MODEL.best_bleu.npz, and ``bleu_patience`` BLEU validations without a
  better score stop the run.  Under MPI every worker translates its share
  of the source (``share``) and rank 0 scores them all;
* ``ExternalValidation``: as BleuValidation, with the score that
  ``external_validation_script`` prints for the latest parameters
  (MODEL.current.npz).

Their options are declared here (machinery/option_schema.py).
"""
import os
import shlex
import shutil
import subprocess
import sys

import numpy

from machinery.option_schema import RUN, INPUTS, Option
from machinery.text_io import InputError, count_lines, read_lines
from machinery.training_state import with_suffix
from training_loop import TrainingError

_GROUP = 'validation and early stopping'


def _positive(value):
    return value >= 1


# CostValidation's options (dl4mt's)
COST_OPTIONS = (
    Option('patience', 10, 'stop after this many validations without a better cost', _GROUP,
           RUN),
    Option('validFreq', 1000, 'updates between validations (the cost of the validation data)',
           _GROUP, RUN),
)
# BleuValidation's and ExternalValidation's (this project's additions)
SCORE_OPTIONS = (
    Option('bleu_valid_freq', 0, 'updates between validation BLEU scores (beam search of the '
           'validation source; 0: none)', _GROUP, RUN),
    Option('bleu_valid_ref', None, 'the validation source\'s reference translation, '
           'tokenised, for BLEU', _GROUP, RUN, files=INPUTS),
    Option('bleu_valid_beam', 5, 'beam size of the validation BLEU', _GROUP, RUN,
           valid=_positive, requirement='at least 1'),
    Option('bleu_valid_maxlen', 200, 'longest translation of the validation BLEU, in tokens',
           _GROUP, RUN, valid=_positive, requirement='at least 1'),
    Option('bleu_patience', 0, 'stop after this many BLEU validations without a better BLEU '
           '(0: never)', _GROUP, RUN),
    Option('bleu_valid_postprocess', None, 'shell command that the translations go through '
           'before BLEU (undoing BPE, say)', _GROUP, RUN),
    Option('external_validation_script', None, 'program run on the current model in place of '
           'the built-in BLEU; prints the score as its last line', _GROUP, RUN),
)


class Validator(object):
    """What the loop asks of a validator: ``due(loop)``, ``share(loop)`` (on
    every worker, before ``run``: nothing unless a validator shares work) and
    ``run(loop)`` (on rank 0: True to stop early)."""

    def share(self, loop):
        """Every worker's part, before ``run`` on rank 0: none."""


# --------------------------------------------------------------------------
# the validation cost

class CostValidation(Validator):
    """The validation cost (the loop's ``valid_cost``) and dl4mt's early
    stopping on it."""
    stop_reason = 'early_stop'

    def due(self, loop):
        return loop.valid_it is not None and loop.state.uidx % loop.options['validFreq'] == 0

    def run(self, loop):
        """One validation; True to stop early."""
        state = loop.state
        cost = loop.measured_valid_cost()
        best, stop = state.record_valid_cost(cost, loop.options['patience'])
        if best:
            state.best_params = loop.model.params()
        loop.log.write('validation', state, cost=float(cost), best=bool(best),
                       bad_counter=state.bad_counter, **loop.valid_fields(cost))
        if stop:
            print('Early Stop!')
        if numpy.isnan(cost):
            raise TrainingError('NaN validation cost at update %d' % state.uidx)
        loop.print_valid(cost)
        for kind, message in learning_warnings(loop, cost):
            print('warning: %s' % message, file=sys.stderr)
            loop.log.write('warning', state, kind=kind, message=message)
        return stop


# learning_warnings' thresholds: a validation cost above 95% of the
# word-frequency cost (Multi30k: a model that learns is at 88-91% after 300
# updates; the saturated models of docs/training.md stay at 100%), and a
# readout with more than half its units saturated at almost every position
# (the saturated models: all of them)
NOT_LEARNING_MARGIN = 0.05
SATURATED_READOUT = 0.5
# ... not before this update: a short run (a test's) has not had time to learn
NOT_LEARNING_AFTER = 500


def learning_warnings(loop, cost):
    """(kind, message) for what a validation ``cost`` says of the learning
    (docs/training.md#is-it-learning): from the second validation and
    update NOT_LEARNING_AFTER on, a cost still within NOT_LEARNING_MARGIN of
    the loop's ``frequency_cost`` (the validation set's cost under the
    training targets' word frequencies); a readout more than
    SATURATED_READOUT of whose units are saturated almost everywhere (the
    loop's ``readout_saturation``)."""
    warnings, state = [], loop.state
    frequency_cost, saturation = loop.frequency_cost, loop.readout_saturation
    near = frequency_cost is not None and cost > (1. - NOT_LEARNING_MARGIN) * frequency_cost
    if near and len(state.history_errs) >= 2 and state.uidx >= NOT_LEARNING_AFTER:
        warnings.append(('not_learning', (
            'validation cost %.2f at update %d is still near the word-frequency cost %.2f: '
            'the model predicts little more than word frequencies'
            % (cost, state.uidx, frequency_cost))))
    if saturation is not None and saturation > SATURATED_READOUT:
        warnings.append(('readout_saturated', (
            '%.0f%% of the readout\'s units are saturated (|t| > 0.99) at almost every '
            'position of the validation set at update %d: constants, through which no '
            'gradient reaches the layers below them' % (100 * saturation, state.uidx))))
    return warnings


# --------------------------------------------------------------------------
# BLEU, or an external script's score

class ScoreValidation(Validator):
    """A score of the model's translations (higher is better): due every
    ``bleu_valid_freq`` updates where there is validation data; the best
    parameters by it in MODEL.best_bleu.npz; ``bleu_patience``."""
    stop_reason = 'bleu_early_stop'

    def due(self, loop):
        freq = self.frequency(loop.options)
        return freq > 0 and loop.valid_it is not None and loop.state.uidx % freq == 0

    def frequency(self, options):
        return options['bleu_valid_freq']

    def score(self, loop):
        raise NotImplementedError

    def run(self, loop):
        """One validation; True to stop early."""
        loop.model.use_noise.set_value(0.)
        score = self.score(loop)
        patience = loop.options['bleu_patience']
        best, stop = loop.state.record_bleu(score, patience)
        print('BLEU %.2f (best %.2f)' % (score, max(loop.state.bleu_history)))
        loop.log.write('bleu', loop.state, bleu=score, best=bool(best))
        if best:
            loop.save_params(with_suffix(loop.options['saveto'], 'best_bleu'))
        if stop:
            print('Early stop on BLEU: no improvement in %d validations' % patience)
        return stop


class BleuValidation(ScoreValidation):
    """Corpus BLEU of the validation source's translations (one a line)
    after ``bleu_valid_postprocess``, against ``bleu_valid_ref``.
    ``translate(rank, size)`` translates share ``rank`` of ``size`` of the
    source (data_parallel.share_bounds): every worker translates its own and
    rank 0 scores them in order.  The batched search gives a sentence the
    same translation whatever else is in its batch
    (docs/translation.md#the-batched-search), so the BLEU is that of one
    process translating them all."""

    def __init__(self, translate):
        self.translate = translate
        self.translations = None

    def share(self, loop):
        loop.model.use_noise.set_value(0.)
        world = loop.world
        parts = world.gather(self.translate(world.rank, world.size),
                             'the validation translations')
        self.translations = [line for part in parts for line in part]

    def score(self, loop):
        options = loop.options
        hyps, self.translations = self.translations, None
        return bleu_of(hyps, options['bleu_valid_ref'], options['bleu_valid_postprocess'])


class ExternalValidation(ScoreValidation):
    """The last line that ``external_validation_script MODEL.current.npz``
    prints (the latest parameters); every ``validFreq`` updates unless
    ``bleu_valid_freq`` is given."""

    def frequency(self, options):
        return options['bleu_valid_freq'] if options['bleu_valid_freq'] > 0 else \
            options['validFreq']

    def score(self, loop):
        script = loop.options['external_validation_script']
        current = with_suffix(loop.options['saveto'], 'current')
        loop.save_params(current)
        proc = subprocess.run(shlex.split(script) + [current], capture_output=True, text=True)
        lines = proc.stdout.strip().split('\n')
        try:
            return float(lines[-1])
        except ValueError:
            raise TrainingError('external validation script %r printed no score (last line '
                                '%r)' % (script, lines[-1]))


def bleu_of(hyps, ref_path, postprocess):
    """Corpus BLEU of hyps (after the postprocess command) against ref_path."""
    from machinery import bleu
    if postprocess:
        proc = subprocess.run(postprocess, shell=True, input='\n'.join(hyps) + '\n',
                              capture_output=True, text=True, encoding='utf-8')
        if proc.returncode != 0:
            raise TrainingError('bleu_valid_postprocess failed: %s' % proc.stderr.strip())
        hyps = proc.stdout.split('\n')[:len(hyps)]
    return bleu.corpus_bleu_tokenized(hyps, read_lines(ref_path))['bleu']


# --------------------------------------------------------------------------
# the validators of a run, and their checks

def validators(options, translate):
    """The validators of a run of nmt.py: the validation cost, then BLEU of
    ``translate()`` or the external script where the options ask for it."""
    found = [CostValidation()]
    if options['external_validation_script']:
        found.append(ExternalValidation())
    elif options['bleu_valid_freq'] > 0:
        found.append(BleuValidation(translate))
    return found


def check_options(options):
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
