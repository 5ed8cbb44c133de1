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
model file.  Each of these steps is also an event of the training log
(``training_log.py``, MODEL.log.jsonl).  After every update the loop asks
whether it should stop (``stop_requests.py``): the stop file ends the run as
``finish_after`` does; SIGTERM or SIGINT end it with a checkpoint of that
update and ``cli.Interrupted`` (exit status 143 or 130).

Under MPI (``mpirun -np N``, docs/distributed.md) every worker runs this
loop on the same batches: each computes the gradients of its share of the
batch, the workers sum them and apply the same update
(``data_parallel.py``); rank 0 alone validates (every worker translating
its share of BLEU's source: validators.py), prints samples, writes the
checkpoints and the training log and holds the model's lock; the workers
agree on the reason to stop once per update (any worker's stop request
stops all after the same update).

A subclass builds, in its ``__init__``, ``self.options`` (the run's options),
``self.model_options`` (what is saved with the model), ``self.train_it`` and
``self.valid_it`` (a data iterator with ``position``/``restore``, and None
or anything the subclass validates on), ``self.validators`` (validators.py:
the validation cost, BLEU, ...), ``self.model`` (a ``Compiled``), then calls
``self.start(reloading)``; it sets ``options_schema`` (its command's
OptionSchema) and defines ``prepare_batch``, ``valid_cost`` and
``print_samples``.
It calls ``prepare_run`` first (the lock; a new run where the model holds
one is refused before, in training_options, and ``--restart`` moves that
run's files aside here) and ``check_length_filter`` once its iterators are
there, before compiling: data that --maxlen empties never trains.
"""
import os
import sys
import time
from collections import OrderedDict, namedtuple

import numpy

from machinery import distributed
from theano_platform import function_cache
from theano_platform import machine
from machinery.cli import CommandError, Interrupted, error_message
from machinery.model_io import load_archive_extras, load_params
from machinery.progress import Progress
from machinery.run_lock import ModelLock
from machinery.stop_requests import StopRequests, signal_name
from machinery.text_io import InputError
from machinery.training_log import TrainingLog
from machinery.option_schema import RUN, SCHEDULE, Option
from machinery.training_options import DIGESTS, noise_seed
from machinery.training_state import (TrainingState, save_model, save_checkpoint,
                                      load_checkpoint, resume_path, set_aside,
                                      usable_resume_file, with_suffix)

from data_parallel import GradientExchange, compile_data_parallel
from layers import init_tparams, unzip, zipp
from optimizers import training_functions


class TrainingError(CommandError):
    """Training cannot go on (a NaN cost, say); the last checkpoint is kept."""


# inputs: the arrays f_grad_shared takes, sentences along axis 1 (the
# workers of a data-parallel run split them there); sentences and words: the
# batch's counts for the rates (words: the target rows the cost covers)
Prepared = namedtuple('Prepared', 'inputs sentences words')


# the options of the training loop, of its data and of its stopping rules
# (validation's: validators.py), shared by nmt.py and language_model/lm.py
# (machinery/option_schema.py; dl4mt's defaults)
LOOP_OPTIONS = (
    Option('max_epochs', 5000, 'passes over the training data at most', 'optimisation',
           SCHEDULE),
    Option('finish_after', 10000000, 'stop after this many updates', 'optimisation', SCHEDULE),
    Option('dispFreq', 100, 'updates between progress lines', 'saving, resuming and display',
           SCHEDULE),
    Option('maxlen', 100, 'longest training sentence in tokens: longer pairs are skipped',
           'data', RUN),
    Option('batch_size', 16, 'sentences per update', 'data', RUN),
    Option('valid_batch_size', 16, 'sentences per batch of the validation cost', 'data', RUN),
    Option('saveto', 'model.npz', 'model file (options in MODEL.npz.pkl and .json)',
           'saving, resuming and display', SCHEDULE, flag='model', metavar='MODEL.npz',
           required=True),
    Option('saveFreq', 1000, 'updates between checkpoints (the model, its resume file, '
           'MODEL.iterN.npz)', 'saving, resuming and display', SCHEDULE),
    Option('sampleFreq', 100, 'updates between sample translations printed',
           'saving, resuming and display', SCHEDULE),
    Option('reload_', False, 'resume from MODEL (parameters, optimizer, counters, data '
           'position)', 'saving, resuming and display', SCHEDULE, flag='reload'),
    Option('overwrite', False, 'no MODEL.iterN.npz copy at each save',
           'saving, resuming and display', SCHEDULE),
    # additions
    Option('shuffle_each_epoch', True, 'read the training data in file order every epoch '
           '(no shuffling)', 'data', RUN, flag='no_shuffle'),
    Option('seed', 1234, 'random seed of the initial parameters, the data order and (unless '
           '--noise_seed is given) the dropout noise', 'model', RUN),
    Option('noise_seed', 0, 'seed of the noise stream (dropout masks, sampled translations); '
           '0: derived from --seed (the default --seed 1234 gives 1234, dl4mt\'s fixed '
           'stream); --noise_seed 1234 keeps dl4mt\'s stream whatever --seed is; worker r of '
           'an MPI run adds r', 'model', RUN),
    Option('reload_model_only', False, 'with --reload: the parameters, update count and '
           'validation history of MODEL alone, the optimizer and the data position fresh (as '
           'the original code reloads; for a resume file that cannot be used)',
           'saving, resuming and display', SCHEDULE),
    Option('restart', False, 'start a new model where MODEL holds a run: its files are moved '
           'into a folder beside it (MODEL.before-DATE-TIME), not deleted',
           'saving, resuming and display', SCHEDULE),
)


class Compiled(object):
    """What the loop needs of a model: ``tparams``, ``trng``, ``use_noise``
    and ``compile_optimizer``'s ``f_grad_shared``, ``f_update``, ``opt_state``.
    A subclass defines ``build(options, model_options)``, which makes the
    graphs and compiles them over ``self.tparams``; ``make`` calls it, or
    loads what it made in an earlier run with the same graphs
    (theano_platform/function_cache.py)."""

    def make(self, params, options, model_options, reloading, schema):
        """``tparams`` with ``params`` (initial values; when reloading, the
        model file's values of them) and the compiled functions; ``schema``:
        the command's OptionSchema (which options shape the graphs)."""
        values = self.initial_values(params, options, reloading)
        cached = function_cache.enabled()
        if cached:
            t0 = time.time()
            key = self.cache_key(schema, options, model_options)
            given = OrderedDict(('param:' + k, v) for k, v in values.items())
            bundle = function_cache.load(key, given)
            if bundle is not None:
                self.__dict__.update(bundle)
                print('Compiled functions from the cache in %.1f s (%s=off compiles '
                      'them)' % (time.time() - t0, function_cache.VARIABLE))
                return
        self.tparams = init_tparams(values)
        self.build(options, model_options)
        if cached:
            function_cache.save(key, dict(self.__dict__),
                                OrderedDict(('param:' + k, v) for k, v in self.tparams.items()))

    def build(self, options, model_options):
        raise NotImplementedError

    def cache_key(self, schema, options, model_options):
        """The function cache's key: this class, the options that shape the
        graphs (``schema.shapes_graphs``: the run's and the model's), and this worker's place among MPI
        workers (data_parallel.py compiles other functions, and each worker
        its own group of the optimizer's step)."""
        shapes = schema.shapes_graphs
        shaping = dict((k, v) for k, v in options.items() if shapes(k))
        shaping.update(('model:' + k, v) for k, v in model_options.items()
                       if shapes(k) and k != DIGESTS)
        world = distributed.world()
        shaping['data_parallel'] = [world.rank, world.size] if world.size > 1 else False
        return function_cache.cache_key(type(self).__name__, shaping)

    @staticmethod
    def initial_values(params, options, reloading):
        """``params``, or when reloading the model file's values of them."""
        if reloading:
            print('Reloading model parameters')
            return load_params(options['saveto'], params, strict=True)
        return params

    def compile_optimizer(self, options, inputs, cost):
        """The optimizer's functions for ``cost`` with clipped gradients."""
        self.opt_state = OrderedDict()
        print('Building optimizer (compiling; minutes at the papers\' size)')
        t0 = time.time()
        if distributed.world().size > 1:
            (self.f_worker_gradients, self.f_grad_shared,
             self.f_update) = compile_data_parallel(options, self.tparams, inputs, cost,
                                                    self.opt_state, distributed.world())
        else:
            self.f_grad_shared, self.f_update = training_functions(
                options, self.tparams, inputs, cost, state=self.opt_state)
        print('Compiled in %.1f s' % (time.time() - t0))

    def seed_noise(self, options, rank):
        """Worker ``rank``'s own dropout noise: its random streams seeded
        with the run's noise seed + rank (training_options.noise_seed; also
        when the functions come from the cache, which keeps the streams'
        states of the run that saved them)."""
        self.trng.seed(noise_seed(options, rank))

    def rng_states(self):
        """The shared states of the dropout/sampling random streams."""
        return [u[0] for u in self.trng.state_updates]

    def params(self):
        return unzip(self.tparams)


class TrainingLoop(object):
    """Updates, validation, samples, stopping rules and checkpoints;
    ``options_schema``: the command's OptionSchema (a subclass's)."""
    options_schema = None

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

    # -- the loop ------------------------------------------------------------
    def prepare_run(self, reloading):
        """Before anything slow (loading the data, compiling): this process
        becomes the one run that writes the model (run_lock, which is also
        the check that the model's folder takes files), and a resume file
        that cannot be used stops the run now, not after compiling.  Several
        workers first check that they were started alike; rank 0 holds the
        lock."""
        noise_seed(self.options)   # a --noise_seed out of range stops it here
        self.world = distributed.world()
        self.world.check_same(distributed.fingerprint(self.options))
        saveto = self.options['saveto']
        self.lock = ModelLock(saveto) if self.world.is_root else None
        if self.options['restart'] and self.world.is_root:
            folder, moved = set_aside(saveto, keep=self.options_schema.input_files(self.options))
            if folder:
                print('--restart: the %d files of the run on %s moved into %s'
                      % (moved, saveto, folder))
        self.resuming = (reloading and not self.options['reload_model_only']
                         and usable_resume_file(saveto))

    def check_length_filter(self, train_flag, valid_flag, unit):
        """Before compiling: InputError when the --maxlen rule leaves none,
        or next to none (under NEARLY_EMPTY), of the ``unit`` (sentence
        pairs, sentences) of the training data (``train_flag``) or of the
        validation data (``valid_flag``); a warning when it drops more than
        A_LOT of them."""
        maxlen = self.options['maxlen']
        sides = ' on every side' if len(self.train_it.files) > 1 else ''
        check_kept(self.train_it.count_kept(maxlen), self.train_it, train_flag, unit, maxlen,
                    'train', 'kept: those shorter than %d words%s' % (maxlen, sides))
        if self.valid_it is not None:
            check_kept(self.valid_it.count_kept(), self.valid_it, valid_flag, unit, maxlen,
                        'validate', 'skipped: those longer than %d words%s' % (maxlen, sides))

    def start(self, reloading):
        """The state (restored when reloading), the progress meter, the
        training log and the stop requests; with several workers, every
        worker's parameters are rank 0's (its optimizer state, its group's
        accumulators, is the checkpoint's or fresh on every worker)."""
        self.model.seed_noise(self.options, self.world.rank)
        self.state = self._restore() if reloading else TrainingState()
        self.progress = Progress(self.options['finish_after'],
                                 self.options['max_epochs'] - self.state.epoch,
                                 self.train_it.lines_total)
        self.log = TrainingLog(self.options['saveto']) if self.world.is_root else NoLog()
        self.requests = StopRequests(self.options['saveto'], self.world.is_root)
        self.exchange = None
        if self.world.size > 1:
            self._same_values_everywhere()
            self.exchange = GradientExchange(self.world, self.model, self.options['clip_c'])

    def _same_values_everywhere(self):
        shared = list(self.model.tparams.values())
        values = self.world.broadcast_arrays([s.get_value() for s in shared])
        for s, v in zip(shared, values):
            s.set_value(v)

    def _restore(self):
        m = self.model
        if not self.resuming:
            print('No optimizer state: the optimizer starts fresh')
            return TrainingState(**load_archive_extras(self.options['saveto']))
        state = load_checkpoint(self.options['saveto'], m.tparams, m.opt_state,
                                m.rng_states(), self.world.rank, self.world.size)
        print('Resuming at update %d from %s' % (state.uidx, resume_path(self.options['saveto'])))
        if state.data_position is not None:
            self.train_it.restore(state.data_position)
        return state

    def run(self):
        """Updates until a stopping rule holds or a stop is requested; returns
        the final validation cost."""
        print('Optimization')
        self.requests.install()
        try:
            self.log.write('start', self.state, reloaded=self.state.uidx > 0,
                           pid=os.getpid(), finish_after=self.options['finish_after'],
                           validFreq=self.options['validFreq'],
                           saveFreq=self.options['saveFreq'],
                           frequency_cost=self.frequency_cost,
                           workers=self.world.size, machine=machine.description())
            reason = None
            if self.state.uidx >= self.options['finish_after']:
                print('Already trained for %d updates (finish_after %d)'
                      % (self.state.uidx, self.options['finish_after']))
                reason = 'finish_after'
            while reason is None:
                if self.state.epoch >= self.options['max_epochs']:
                    reason = 'max_epochs'
                else:
                    reason = self._epoch()
            return self._finish(reason)
        except Interrupted:
            raise
        except Exception as e:
            self._record_error(e)
            raise
        finally:
            self.requests.restore()
            self.log.close()
            if self.lock is not None:
                self.lock.release()

    def _record_error(self, error):
        """An ``error`` event with the command's error line (unless the
        error was recorded already: a NaN cost's ``stop``); a log that cannot
        take it (a full disk) is left as it is."""
        if getattr(error, 'recorded', False):
            return
        try:
            self.log.write('error', self.state, message=error_message(error))
        except (CommandError, OSError):
            pass

    def _epoch(self):
        """Updates until the data ends (None) or the run stops (the reason);
        TrainingError for a whole epoch without an update (check_length_filter
        refuses such data at start: files changed since)."""
        n_samples, uidx, whole = 0, self.state.uidx, self.train_it.at_epoch_start()
        for batch in self.train_it:
            n_samples += len(batch[0])
            reason = self._update(batch)
            if reason is not None:
                return reason
        if whole and self.state.uidx == uidx:
            raise TrainingError('epoch %d made no update: --maxlen %d leaves nothing of the '
                                'training data' % (self.state.epoch, self.options['maxlen']))
        self.state.epoch += 1
        print('Seen %d samples' % n_samples)
        return None

    def _update(self, batch):
        """One update on a batch, then what is due after it; the reason to
        stop, or None."""
        opt, m = self.options, self.model
        m.use_noise.set_value(1.)
        prepared = self.prepare_batch(batch)
        self.progress.pairs_done += len(batch[0])
        if prepared is None:
            print('Minibatch with zero sample under length', opt['maxlen'])
            return None
        self.state.uidx += 1
        ud_start = time.time()
        if self.exchange is None:
            cost = m.f_grad_shared(*prepared.inputs)
            m.f_update(opt['lrate'])
        else:
            cost = self.exchange.update(prepared.inputs, opt['lrate'])
        ud = time.time() - ud_start
        self.progress.add(prepared.sentences, prepared.words, cost)
        if not numpy.isfinite(cost):
            message = self._nan_message()
            self.log.write('stop', self.state, reason='nan_cost', message=message)
            error = TrainingError(message)
            error.recorded = True
            raise error
        if self.state.uidx % opt['dispFreq'] == 0:
            self._display(cost, ud)
        due = [v for v in self.validators if v.due(self)]
        for validator in due:
            validator.share(self)
        reason = self._agreed_reason(
            (self._after_update(prepared, due) if self.world.is_root else None)
            or self.requests.reason())
        if self.state.uidx % opt['saveFreq'] == 0 or reason is not None:
            self._save(snapshot=self.state.uidx % opt['saveFreq'] == 0 and not opt['overwrite'])
        return reason

    def _nan_message(self):
        """The NaN cost's error: what is kept on disk, if anything."""
        opt, state = self.options, self.state
        text = 'NaN or Inf cost at update %d (epoch %d)' % (state.uidx, state.epoch)
        if os.path.exists(opt['saveto']):
            return '%s; the last checkpoint in %s is kept' % (text, opt['saveto'])
        return ('%s, before the first checkpoint (--saveFreq %d): no model was saved'
                % (text, opt['saveFreq']))

    def _agreed_reason(self, reason):
        """The reason to stop of every worker: the first one in rank order
        (rank 0's, then the others' stop requests), the same on every worker
        (stop_requests.py)."""
        if self.world.size == 1:
            return reason
        decisions = self.world.gather((reason, self.requests.signum), 'the stop decision')
        reasons = [r for r, _ in decisions if r is not None]
        signals = [s for _, s in decisions if s is not None]
        if signals and self.requests.signum is None:
            self.requests.signum = signals[0]
        return reasons[0] if reasons else None

    def _display(self, cost, ud):
        """The batch's cost (per sentence, as the original prints it), and
        the cost per target word over every update since the last display:
        a batch's cost moves with its length (the iterator sorts its buffer
        by length), the mean per word shows the progress."""
        figures = self.progress.figures(self.state.uidx)
        per_word, n_updates = self.progress.take_recent_cost()
        print('Epoch %d Update %d Cost %f UD %f | %.4f per word (last %d updates) | %s'
              % (self.state.epoch, self.state.uidx, cost, ud, per_word, n_updates,
                 Progress.text(figures)))
        sys.stdout.flush()
        self.log.write('update', self.state, cost=float(cost), cost_per_word=per_word,
                       updates_averaged=n_updates, **figures)

    def _after_update(self, prepared, due):
        """The validators that are due (validators.py), their shared part
        done, samples and the stopping rules; the reason to stop, or None."""
        opt, uidx = self.options, self.state.uidx
        reason = None
        for validator in due:
            if validator.run(self):
                reason = validator.stop_reason
        if uidx % opt['sampleFreq'] == 0:
            self.model.use_noise.set_value(0.)
            self.print_samples(prepared)
        if uidx >= opt['finish_after']:
            print('Finishing after %d iterations!' % uidx)
            reason = 'finish_after'
        return reason

    def measured_valid_cost(self):
        """valid_cost without the training graph's noise."""
        self.model.use_noise.set_value(0.)
        return self.valid_cost()

    # -- is it learning? (docs/training.md#is-it-learning) ------------------
    # a subclass sets them: the validation set's cost under the training
    # targets' word frequencies, and the fraction of the readout's units
    # saturated almost everywhere at the last validation
    # (validators.learning_warnings)
    frequency_cost = None
    readout_saturation = None

    def valid_fields(self, cost):
        """What the log's validation events add to the cost."""
        return {}

    def print_valid(self, cost):
        print('Valid %f' % cost)

    def save_params(self, path):
        save_model(path, self.model.params(), self.state.history_errs, self.state.uidx,
                   self.model_options)

    def _save(self, snapshot):
        m = self.model
        # every worker's random streams (rank 0 writes them with its own),
        # and every worker's group of the optimizer's accumulators
        streams = self.world.gather([r.get_value() for r in m.rng_states()],
                                    'the checkpoint\'s random streams')
        optimizer = OrderedDict()
        for values in self.world.gather(OrderedDict((k, v.get_value())
                                                    for k, v in m.opt_state.items()),
                                        'the checkpoint\'s optimizer state'):
            optimizer.update(values)
        if not self.world.is_root:
            return
        print('Saving the model at update %d...' % self.state.uidx, end=' ')
        self.state.data_position = self.train_it.position()
        try:
            save_checkpoint(self.options['saveto'], self.state, m.tparams, optimizer,
                            m.rng_states(), self.model_options, worker_streams=streams[1:])
            if snapshot:
                self.save_params(with_suffix(self.options['saveto'],
                                             'iter%d' % self.state.uidx))
        except CommandError as e:   # a write failed: disk full, say
            print()
            raise TrainingError('%s; the files already on disk are whole: --reload '
                                'continues from the newest checkpoint among them' % e)
        print('Done')
        sys.stdout.flush()
        self.log.write('checkpoint', self.state)

    def _finish(self, reason):
        """The end of the run: after a signal, the command ends (its
        checkpoint is written); otherwise the best parameters go into the
        model file.  Returns the final validation cost."""
        message = self._stop_message(reason)
        if self.state.uidx == 0:   # (--finish_after 0, --max_epochs 0)
            raise TrainingError('the run stopped before its first update (%s): no model was '
                                'written' % message)
        self.log.write('stop', self.state, reason=reason, message=message)
        if reason == 'signal':
            raise Interrupted(self.requests.signum, message)
        if not self.world.is_root:
            return None
        if self.state.best_params is not None:
            zipp(self.state.best_params, self.model.tparams)
        valid_err = None
        if self.valid_it is not None:
            valid_err = self.measured_valid_cost()
            self.print_valid(valid_err)
        self.save_params(self.options['saveto'])
        self.log.write('end', self.state, valid_cost=valid_err)
        return valid_err

    def _stop_message(self, reason):
        opt, uidx = self.options, self.state.uidx
        if reason == 'signal':
            return ('%s at update %d: the checkpoint of update %d is in %s; --reload '
                    'continues from it' % (signal_name(self.requests.signum), uidx, uidx,
                                           opt['saveto']))
        if reason == 'finish_after':
            return 'update %d of --finish_after %d' % (uidx, opt['finish_after'])
        if reason == 'max_epochs':
            return 'epoch %d of --max_epochs %d' % (self.state.epoch, opt['max_epochs'])
        if reason == 'early_stop':
            return 'no better validation cost in %d validations (--patience)' % opt['patience']
        if reason == 'bleu_early_stop':
            return 'no better BLEU in %d validations (--bleu_patience)' % opt['bleu_patience']
        return 'asked to stop (%s)' % self.requests.stop_file


# the length filter's limits (check_length_filter): an error when it keeps
# less than NEARLY_EMPTY of a corpus, a warning when it drops more than A_LOT
NEARLY_EMPTY = 0.01
A_LOT = 0.1


def check_kept(counts, iterator, flag, unit, maxlen, purpose, rule):
    """InputError when the length filter's ``counts`` (lines kept, lines)
    leave less than NEARLY_EMPTY of the ``iterator``'s files to ``purpose``
    on; a warning when it drops more than A_LOT."""
    kept, total = counts
    where = '%s %s: --maxlen %d' % (flag, ' '.join(f.path for f in iterator.files), maxlen)
    if kept == 0:
        raise InputError('%s leaves none of its %s %s (%s): nothing to %s on; raise --maxlen'
                         % (where, format(total, ','), unit, rule, purpose))
    if kept < NEARLY_EMPTY * total:
        raise InputError('%s leaves %s of its %s %s (%.1f%%; %s): too few to %s on; raise '
                         '--maxlen' % (where, format(kept, ','), format(total, ','), unit,
                                       100. * kept / total, rule, purpose))
    if total - kept > A_LOT * total:
        print('warning: %s drops %s of its %s %s (%.1f%%; %s)'
              % (where, format(total - kept, ','), format(total, ','), unit,
                 100. * (total - kept) / total, rule), file=sys.stderr)


class NoLog(object):
    """The training log of the workers other than rank 0: nothing."""

    def write(self, event, state, **fields):
        pass

    def close(self):
        pass
