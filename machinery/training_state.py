"""Where a training run stands, and the checkpoint files that keep it.

``TrainingState`` holds everything of a run that is not a Theano shared
variable: the update count, the epoch, the position in the training data,
the validation and BLEU histories, the bad counter and the best parameters.
A checkpoint writes two files, each atomically (temporary name, rename):

* ``MODEL.npz.resume.npz``: the state, the current parameters, the
  optimizer's accumulators and the random streams of dropout (of every
  worker of a run of several, docs/distributed.md); ``--reload``
  continues from it exactly (bit-identical to a run without the stop);
* ``MODEL.npz`` (+ ``.pkl``/``.json`` options): the parameters as the
  original code writes them (the best by validation cost, else the current
  ones) with ``history_errs`` and ``uidx``.

The resume file is written first, so a kill between the two leaves a resume
file at least as new as the model file, and a resume file older than the
model file (the model was trained further by other code) is ignored.
"""
import itertools
import os
import re
import sys
import time
from collections import OrderedDict

import numpy

from machinery.model_io import Archive, atomic_savez, load_archive_extras, save_options
from machinery.output_files import file_identity, write_error
from machinery.text_io import InputError
from machinery.training_log import last_update, log_path


class TrainingState(object):
    """The counters, histories and best parameters of a training run."""

    def __init__(self, uidx=0, epoch=0, history_errs=(), bleu_history=(),
                 bad_counter=0, best_params=None, data_position=None):
        self.uidx, self.epoch, self.bad_counter = uidx, epoch, bad_counter
        self.history_errs = [float(e) for e in history_errs]
        self.bleu_history = [float(b) for b in bleu_history]
        self.best_params = best_params
        self.data_position = data_position

    def record_valid_cost(self, cost, patience):
        """Add a validation cost; returns (is the best so far, stop early),
        by the original's rule: a bad validation is one no better than the
        best before the last ``patience`` ones; stop after more than
        ``patience`` of them."""
        self.history_errs.append(float(cost))
        errs = numpy.array(self.history_errs)
        best = cost <= errs.min()
        if best:
            self.bad_counter = 0
        stop = False
        if len(errs) > patience and cost >= errs[:-patience].min():
            self.bad_counter += 1
            stop = self.bad_counter > patience
        return best, stop

    def record_bleu(self, score, patience):
        """Add a validation BLEU; returns (is the best so far, stop early:
        none of the last ``patience`` is better than the best before them)."""
        self.bleu_history.append(float(score))
        hist = self.bleu_history
        stop = (patience > 0 and len(hist) > patience and
                max(hist[-patience:]) < max(hist[:-patience]))
        return score >= max(hist), stop

    # -- arrays of the resume file ------------------------------------------
    def to_arrays(self):
        arrays = OrderedDict([
            ('uidx', self.uidx), ('epoch', self.epoch), ('bad_counter', self.bad_counter),
            ('history_errs', numpy.array(self.history_errs, dtype='float64')),
            ('bleu_history', numpy.array(self.bleu_history, dtype='float64'))])
        for k, v in (self.data_position or {}).items():
            arrays['data__' + k] = v
        for k, v in (self.best_params or {}).items():
            arrays['best__' + k] = v
        return arrays

    @classmethod
    def from_arrays(cls, f):
        best = OrderedDict((k[len('best__'):], f[k]) for k in f.files
                           if k.startswith('best__'))
        position = {k[len('data__'):]: f[k] for k in f.files if k.startswith('data__')}
        return cls(uidx=int(f['uidx']), epoch=int(f['epoch']),
                   history_errs=list(f['history_errs']),
                   bleu_history=list(f['bleu_history']),
                   bad_counter=int(f['bad_counter']), best_params=best or None,
                   data_position=position or None)


def resume_path(saveto):
    return saveto + '.resume.npz'


def with_suffix(saveto, suffix):
    """model.npz -> model.SUFFIX.npz (the snapshots: iterN, best_bleu, current)"""
    return '%s.%s.npz' % (os.path.splitext(saveto)[0], suffix)


def checkpoint_names(model):
    """Regular expressions of the names of the files that a run on the
    model file named ``model`` writes at a checkpoint: the model file, its
    resume file, its snapshots (MODEL.iterN.npz, .best_bleu, .current);
    each has its options beside it (.pkl, .json), but the resume file."""
    snapshots = [re.escape(with_suffix(model, suffix)).replace('@', '[0-9]+')
                 for suffix in ('iter@', 'best_bleu', 'current')]
    return [re.escape(model), re.escape(resume_path(model))] + snapshots


def run_files(saveto):
    """The paths of the files of the run on ``saveto`` that are there: the
    checkpoint's files and their options, the training log, and the
    dictionary that language_model/lm.py builds for a model
    (MODEL.dict.pkl/.json)."""
    folder = os.path.dirname(os.path.abspath(saveto))
    model = os.path.basename(saveto)
    written = checkpoint_names(model) + [re.escape(model + '.dict')]
    pattern = re.compile(r'(?:(?:%s)(?:\.pkl|\.json)?|%s)$'
                         % ('|'.join(written), re.escape(log_path(model))))
    there = sorted(os.listdir(folder)) if os.path.isdir(folder) else []
    return [os.path.join(os.path.dirname(saveto), name) for name in there
            if pattern.match(name) and os.path.isfile(os.path.join(folder, name))]


def run_outputs(saveto):
    """The paths that a run on ``saveto`` writes at every checkpoint, and
    its log."""
    return [saveto, saveto + '.pkl', saveto + '.json', resume_path(saveto), log_path(saveto)]


def held_run(saveto):
    """What of a training run ``saveto`` holds, in words ('' when nothing):
    its model file (and update), resume file, snapshots, a training log
    with updates in it."""
    held = []
    if os.path.isfile(saveto):
        held.append(_model_file_text(saveto))
    if os.path.isfile(resume_path(saveto)):
        held.append(resume_path(saveto))
    snapshots = [p for p in run_files(saveto) if SNAPSHOT.search(p)]
    if snapshots:
        held.append(some_of(snapshots))
    logged = last_update(log_path(saveto))
    if logged > 0:
        held.append('%s to update %d' % (log_path(saveto), logged))
    return ', '.join(held)


SNAPSHOT = re.compile(r'\.(iter[0-9]+|best_bleu|current)\.npz$')


def some_of(paths):
    """'A', or 'A and N more' of a list of paths."""
    return paths[0] + (' and %d more' % (len(paths) - 1) if len(paths) > 1 else '')


def _model_file_text(saveto):
    try:
        return '%s at update %d' % (saveto, load_archive_extras(saveto)['uidx'])
    except InputError:   # a damaged model file is a run's too
        return '%s (unreadable)' % saveto


def check_no_run(saveto):
    """InputError when ``saveto`` holds a training run: a run started
    without --reload would write over it."""
    held = held_run(saveto)
    if held:
        raise InputError('%s: holds a training run (%s): --reload continues it; --restart '
                         'moves its files aside and starts a new one' % (saveto, held))


def set_aside(saveto, keep=()):
    """Move the files of the run on ``saveto`` (run_files), but those of
    ``keep`` (the new run's inputs, by identity), into a new folder beside
    them named after the model and the time; returns (folder, files moved),
    or (None, 0) when there is nothing to move."""
    kept = set(file_identity(p) for p in keep)
    files = [p for p in run_files(saveto) if file_identity(p) not in kept]
    if not files:
        return None, 0
    stamp = time.strftime('%Y%m%d-%H%M%S')
    folder = '%s.before-%s' % (saveto, stamp)
    for n in itertools.count(2):
        try:
            os.mkdir(folder)
            break
        except FileExistsError:
            folder = '%s.before-%s-%d' % (saveto, stamp, n)
        except OSError as e:
            raise write_error(folder, e) from None
    for path in files:
        os.rename(path, os.path.join(folder, os.path.basename(path)))
    return folder, len(files)


def save_model(path, params, history_errs, uidx, options):
    """A model file in the original format, with its options beside it."""
    atomic_savez(path, history_errs=numpy.array(history_errs), uidx=uidx, **params)
    save_options(options, path)


def worker_streams_prefix(rank):
    """The resume file's names of worker ``rank``'s random streams (rank 0:
    those of a one-process run)."""
    return 'rng__' if rank == 0 else 'rng_worker%d__' % rank


def save_checkpoint(saveto, state, tparams, optimizer_values, rng_states, options,
                    worker_streams=()):
    """The resume file, then the model file (see the module's docstring).
    ``optimizer_values``: name -> array of every accumulator of the optimizer
    (of every worker, in a run of several); ``worker_streams``: the random
    streams' values of workers 1, 2, ... of a run of several."""
    arrays = state.to_arrays()
    arrays.update(('param__' + k, v.get_value()) for k, v in tparams.items())
    arrays.update(('optim__' + k, v) for k, v in optimizer_values.items())
    arrays.update(('rng__%d' % i, r.get_value()) for i, r in enumerate(rng_states))
    arrays['workers'] = 1 + len(worker_streams)
    for rank, values in enumerate(worker_streams, 1):
        arrays.update(('%s%d' % (worker_streams_prefix(rank), i), v)
                      for i, v in enumerate(values))
    atomic_savez(resume_path(saveto), **arrays)
    current = OrderedDict((k, v.get_value()) for k, v in tparams.items())
    save_model(saveto, state.best_params or current, state.history_errs, state.uidx,
               options)


def usable_resume_file(saveto):
    """Whether ``--reload`` continues from the resume file: there is one, as
    new as the model file.  A resume file that cannot be read, or that
    belongs to another model (its parameters' names or shapes differ from
    the model file's), is an InputError that says so and how to go on from
    the model file alone.  Only the arrays' headers are read: this is
    checked before anything is compiled."""
    path = resume_path(saveto)
    if not os.path.exists(path):
        return False
    model_uidx = load_archive_extras(saveto)['uidx']
    with Archive(saveto) as model:
        shapes = OrderedDict((name, model.shape(name)) for name in model.files
                             if name not in ('history_errs', 'uidx'))
    try:
        with Archive(path) as resume:
            _check_parameters(resume, shapes)
            return int(resume['uidx']) >= model_uidx
    except (InputError, KeyError, ValueError) as e:
        raise resume_fault(saveto, str(e) if isinstance(e, InputError)
                           else '%s: no update count in it' % path)


def resume_fault(saveto, reason):
    """The InputError of a resume file that cannot be used (``reason``
    names it), with the way on from the model file alone."""
    return InputError('%s; the model file %s is sound: --reload_model_only starts from '
                      'its parameters (optimizer and data position fresh), as the '
                      'original code reloads' % (reason, saveto))


def load_checkpoint(saveto, tparams, opt_state, rng_states, rank=0, workers=1):
    """The state of the run that wrote ``saveto``, with the shared variables
    restored from its resume file (which usable_resume_file found usable);
    ``rank``: the worker of ``workers`` that loads it (its random streams)."""
    path = resume_path(saveto)
    with Archive(path) as f:
        for k, v in tparams.items():
            v.set_value(f['param__' + k])
        _restore_optional(path, f, 'optim__', opt_state)
        written_by = int(f['workers']) if 'workers' in f.files else 1
        if written_by != workers and rank == 0:
            print('warning: %s was written by %d workers, this run has %d: the updates '
                  'are the same sums, but the dropout noise of the workers differs'
                  % (path, written_by, workers), file=sys.stderr)
        if rank < written_by:
            _restore_optional(path, f, worker_streams_prefix(rank),
                              OrderedDict((str(i), r) for i, r in enumerate(rng_states)))
        return TrainingState.from_arrays(f)


def _check_parameters(resume, shapes):
    """InputError unless the resume file has every parameter of the model
    file, each with its shape (``shapes``: name -> the model file's)."""
    for name, want in shapes.items():
        if 'param__' + name not in resume.files:
            raise InputError('%s: belongs to another model (no parameter %s)'
                             % (resume.path, name))
        shape = resume.shape('param__' + name)
        if shape != want:
            raise InputError('%s: belongs to another model (parameter %s has shape %s, '
                             'the model file %s)' % (resume.path, name, shape, want))


def _restore_optional(path, f, prefix, shared):
    for k, v in shared.items():
        key = prefix + k
        if key in f.files and f[key].shape == v.get_value().shape:
            v.set_value(f[key])
        else:
            print('warning: %s has no %s: it starts fresh' % (path, key),
                  file=sys.stderr)
