"""The training loop shared by nmt.py (translation) and language_model/lm.py (language model).

``TrainingLoop`` runs updates epoch after epoch until a stopping rule holds:
``finish_after`` updates, ``max_epochs`` epochs, or early stopping on the
validation cost by the original's rule (``TrainingState.record_valid_cost``).
Every ``dispFreq`` updates it prints the cost, rates and an ETA
(``Progress``); every ``validFreq`` it validates, every ``sampleFreq`` it
prints samples, every ``saveFreq`` it writes a checkpoint from which
``--reload`` continues bit-identically (``training_state.save_checkpoint``:
parameters, optimizer accumulators, random streams, counters and the position
in the data).  At the end the best parameters by validation cost go to the
model file.

A subclass builds, in its ``__init__``, ``self.options`` (the run's options),
``self.model_options`` (what is saved with the model), ``self.train_it`` and
``self.valid_it`` (a data iterator with ``position``/``restore``, and None
or anything the subclass validates on), ``self.model`` (a ``Compiled``),
then calls ``self.start(reloading)``; and it defines ``prepare_batch``,
``valid_cost`` and ``print_samples`` (and optionally ``extra_validation``).
"""
import copy
import os
import sys
import time
from collections import OrderedDict, namedtuple

import numpy

import theano_env  # noqa: F401  (configures Theano before its import)
import theano.tensor as tensor

from model_io import load_archive_extras, load_options
from optimizers import OPTIMIZERS, clip_gradients
from progress import format_duration
from text_io import InputError
from training_state import (TrainingState, save_model, save_checkpoint, load_checkpoint,
                            resume_path)


class TrainingError(Exception):
    """Training cannot go on (a NaN cost, say); the last checkpoint is kept."""


def run_command(action):
    """Run a training command line's ``action()``: exit status 0; 1 with one
    line ``error: ...`` for bad input or a failed run; 130 on Ctrl-C (the last
    checkpoint is kept, as on any kill)."""
    try:
        action()
    except (InputError, TrainingError) as e:
        print('error: %s' % e, file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print('interrupted: the last checkpoint is kept', file=sys.stderr)
        return 130
    return 0


def reloaded_architecture(options, given, fill_options, architecture):
    """(model options, reloading): a copy of the run's ``options`` in which,
    when ``--reload`` finds the model file, the ``architecture`` options come
    from the saved model (a different value ``given`` on the command line is
    ignored with a warning)."""
    model_options = copy.copy(options)
    reloading = bool(options['reload_']) and os.path.exists(options['saveto'])
    if reloading:
        saved = fill_options(load_options(options['saveto']))
        for key in architecture:
            if key in given and given[key] != saved[key]:
                print('warning: --%s %s ignored: the reloaded model has %s'
                      % (key, given[key], saved[key]), file=sys.stderr)
            model_options[key] = saved[key]
    return model_options, reloading


def zipp(params, tparams):
    for k, v in params.items():
        tparams[k].set_value(v)


def unzip(tparams):
    return OrderedDict((k, v.get_value()) for k, v in tparams.items())


# inputs: the arrays f_grad_shared takes; sentences and words: the batch's
# counts for the rates (words: the target rows the cost covers)
Prepared = namedtuple('Prepared', 'inputs sentences words')


class Compiled(object):
    """What the loop needs of a model: ``tparams``, ``trng``, ``use_noise``
    and ``compile_optimizer``'s ``f_grad_shared``, ``f_update``, ``opt_state``."""

    def compile_optimizer(self, options, inputs, cost):
        """The optimizer's functions for ``cost`` with clipped gradients."""
        grads = clip_gradients(tensor.grad(cost, wrt=list(self.tparams.values())),
                               options['clip_c'])
        self.opt_state = OrderedDict()
        print('Building optimizer (compiling; minutes at the papers\' size)')
        t0 = time.time()
        optimizer = OPTIMIZERS[options['optimizer']]
        extra = {'fused': True} if options['optimizer'] == 'adadelta' else {}
        self.f_grad_shared, self.f_update = optimizer(
            tensor.scalar(name='lr'), self.tparams, grads, inputs, cost,
            state=self.opt_state, **extra)
        print('Compiled in %.1f s' % (time.time() - t0))

    def rng_states(self):
        """The shared states of the dropout/sampling random streams."""
        return [u[0] for u in self.trng.state_updates]

    def params(self):
        return unzip(self.tparams)


class TrainingLoop(object):
    """Updates, validation, samples, stopping rules and checkpoints."""

    # -- what a subclass defines ---------------------------------------------
    def prepare_batch(self, batch):
        """A ``Prepared`` for a batch of the training iterator, or None when
        the maxlen rule leaves nothing of it."""
        raise NotImplementedError

    def valid_cost(self):
        """The validation cost that early stopping compares (lower is better)."""
        raise NotImplementedError

    def print_samples(self, prepared):
        raise NotImplementedError

    def extra_validation(self):
        """Another validation due after this update (BLEU); True to stop."""
        return False

    # -- the loop ------------------------------------------------------------
    def start(self, reloading):
        """The state (restored when reloading) and the progress meter."""
        self.state = self._restore() if reloading else TrainingState()
        self.progress = Progress(self.options['finish_after'],
                                 self.options['max_epochs'] - self.state.epoch,
                                 self.train_it.lines_total)

    def _restore(self):
        m = self.model
        state = load_checkpoint(self.options['saveto'], m.tparams, m.opt_state,
                                m.rng_states())
        if state is None:
            print('No optimizer state: the optimizer starts fresh')
            return TrainingState(**load_archive_extras(self.options['saveto']))
        print('Resuming at update %d from %s' % (state.uidx, resume_path(self.options['saveto'])))
        if state.data_position is not None:
            self.train_it.restore(state.data_position)
        return state

    def run(self):
        print('Optimization')
        stop = self.state.uidx >= self.options['finish_after']
        if stop:
            print('Already trained for %d updates (finish_after %d)'
                  % (self.state.uidx, self.options['finish_after']))
        while not stop and self.state.epoch < self.options['max_epochs']:
            stop = self._epoch()
        return self._finish()

    def _epoch(self):
        """Updates until the data ends (False) or a stopping rule holds (True)."""
        n_samples = 0
        for batch in self.train_it:
            n_samples += len(batch[0])
            if self._update(batch):
                return True
        self.state.epoch += 1
        print('Seen %d samples' % n_samples)
        return False

    def _update(self, batch):
        """One update on a batch, then what is due after it; True to stop."""
        opt, m = self.options, self.model
        m.use_noise.set_value(1.)
        prepared = self.prepare_batch(batch)
        self.progress.pairs_done += len(batch[0])
        if prepared is None:
            print('Minibatch with zero sample under length', opt['maxlen'])
            return False
        self.state.uidx += 1
        ud_start = time.time()
        cost = m.f_grad_shared(*prepared.inputs)
        m.f_update(opt['lrate'])
        ud = time.time() - ud_start
        self.progress.add(prepared.sentences, prepared.words)
        if not numpy.isfinite(cost):
            raise TrainingError('NaN or Inf cost at update %d (epoch %d); the last '
                                'checkpoint in %s is kept'
                                % (self.state.uidx, self.state.epoch, opt['saveto']))
        if self.state.uidx % opt['dispFreq'] == 0:
            print('Epoch %d Update %d Cost %f UD %f | %s'
                  % (self.state.epoch, self.state.uidx, cost, ud,
                     self.progress.line(self.state.uidx)))
            sys.stdout.flush()
        return self._after_update(prepared)

    def _after_update(self, prepared):
        """Validation, extra validation, samples, the stopping rules and
        checkpoints."""
        opt, uidx = self.options, self.state.uidx
        stop = False
        if self.valid_it is not None and uidx % opt['validFreq'] == 0:
            stop = self._validate()
        stop = self.extra_validation() or stop
        if uidx % opt['sampleFreq'] == 0:
            self.model.use_noise.set_value(0.)
            self.print_samples(prepared)
        if uidx >= opt['finish_after']:
            print('Finishing after %d iterations!' % uidx)
            stop = True
        if uidx % opt['saveFreq'] == 0 or stop:
            self._save(snapshot=uidx % opt['saveFreq'] == 0 and not opt['overwrite'])
        return stop

    def _valid_cost(self):
        self.model.use_noise.set_value(0.)
        return self.valid_cost()

    def _validate(self):
        cost = self._valid_cost()
        best, stop = self.state.record_valid_cost(cost, self.options['patience'])
        if best:
            self.state.best_params = self.model.params()
        if stop:
            print('Early Stop!')
        if numpy.isnan(cost):
            raise TrainingError('NaN validation cost at update %d' % self.state.uidx)
        self.print_valid(cost)
        return stop

    def print_valid(self, cost):
        print('Valid %f' % cost)

    def save_params(self, path):
        save_model(path, self.model.params(), self.state.history_errs, self.state.uidx,
                   self.model_options)

    def _save(self, snapshot):
        print('Saving the model at update %d...' % self.state.uidx, end=' ')
        self.state.data_position = self.train_it.position()
        m = self.model
        save_checkpoint(self.options['saveto'], self.state, m.tparams, m.opt_state,
                        m.rng_states(), self.model_options)
        if snapshot:
            self.save_params(with_suffix(self.options['saveto'],
                                         'iter%d' % self.state.uidx))
        print('Done')
        sys.stdout.flush()

    def _finish(self):
        """The best parameters into the model file; the final validation cost."""
        if self.state.best_params is not None:
            zipp(self.state.best_params, self.model.tparams)
        valid_err = None
        if self.valid_it is not None:
            valid_err = self._valid_cost()
            self.print_valid(valid_err)
        self.save_params(self.options['saveto'])
        return valid_err


def with_suffix(saveto, suffix):
    """model.npz -> model.SUFFIX.npz"""
    return '%s.%s.npz' % (os.path.splitext(saveto)[0], suffix)


class Progress(object):
    """Rates (updates/s, target words/s) and an ETA for the display lines."""

    def __init__(self, finish_after, max_epochs, pairs_per_epoch):
        self.start = time.time()
        self.updates = self.words = self.sentences = self.pairs_done = 0
        self.finish_after = finish_after
        self.total_pairs = (max_epochs * pairs_per_epoch) if pairs_per_epoch else None

    def add(self, n_sentences, n_words):
        self.updates += 1
        self.sentences += n_sentences
        self.words += n_words

    def line(self, uidx):
        elapsed = max(time.time() - self.start, 1e-9)
        ups, wps = self.updates / elapsed, self.words / elapsed
        etas = []
        if self.finish_after < 10000000:
            etas.append((self.finish_after - uidx) / max(ups, 1e-9))
        if self.total_pairs:
            etas.append((self.total_pairs - self.pairs_done) /
                        max(self.sentences / elapsed, 1e-9))
        text = '%.2f upd/s %.0f words/s' % (ups, wps)
        if etas:
            text += ' ETA %s' % format_duration(min(etas))
        return text
