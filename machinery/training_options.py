"""The rules of a training run's options: what ``--reload`` keeps from the
saved model and warns about, the dictionaries' digests it compares, the
refusal of a new run on a model that holds one, and the seed of the noise
stream.  The options themselves are declared by the commands
(machinery/option_schema.py): nmt.py's in nmt_model.py, training_loop.py,
optimizers.py, validators.py and nmt_training.py, language_model/lm.py's in
lm.py.
"""
import copy
import os
import sys

from machinery import vocab
from machinery.model_io import check_model_kind, load_options
from machinery.output_files import check_distinct
from machinery.option_schema import ARCHITECTURE, DICTIONARIES, SCHEDULE
from machinery.text_io import InputError
from machinery.training_state import (SNAPSHOT, check_no_run, resume_path, run_files,
                                      run_outputs, some_of)


# dl4mt's noise stream: MRG_RandomStream(1234), whatever the run's seed
ORIGINAL_NOISE_SEED = 1234
# MRG_RandomStream takes seeds 1 .. 2**30 (and below 2**31 - 21,069 with a
# worker's rank added)
NOISE_SEEDS = 2 ** 30


def noise_seed(options, rank=0):
    """The seed of worker ``rank``'s noise stream: ``--noise_seed``, or when
    it is 0 (the default) ``--seed`` brought into 1 .. NOISE_SEEDS (--seed
    1234 gives dl4mt's 1234); plus the rank.  InputError for a --noise_seed
    out of that range."""
    given = int(options.get('noise_seed', 0))
    if not 0 <= given <= NOISE_SEEDS:
        raise InputError('--noise_seed must be 0 (derived from --seed) or 1 to %d, not %d'
                         % (NOISE_SEEDS, given))
    seed = given or 1 + (int(options.get('seed', ORIGINAL_NOISE_SEED)) - 1) % NOISE_SEEDS
    return seed + rank


def reloaded(schema, options, given, kind):
    """(model options, reloading): a copy of the run's ``options``, in
    which, when ``--reload`` finds the model file, the ARCHITECTURE options
    are the saved model's (kept_architecture); ``given``: the options given
    on the command line; ``kind``: the command's kind of model (model_io.KIND_NAMES),
    which the saved one must be.  Without ``--reload`` (or ``--restart``) a
    model that holds a run is refused (training_state.check_no_run), and so
    is a model whose files would be one of the run's inputs."""
    model_options = copy.copy(options)
    saveto = options['saveto']
    check_distinct(run_outputs(saveto), schema.input_files(options))
    if options['reload_'] and options['restart']:
        raise InputError('--reload and --restart exclude each other: --reload continues '
                         'the run on %s, --restart starts a new one' % saveto)
    if not options['reload_']:
        if not options['restart']:
            check_no_run(saveto)
        return model_options, False
    if not os.path.exists(saveto):
        check_nothing_to_resume(saveto)
        print('--reload: no model file %s yet: a new model starts' % saveto)
        return model_options, False
    saved = load_options(saveto)
    check_model_kind(saveto, saved, kind)
    kept_architecture(schema, model_options, given, schema.fill(saved))
    return model_options, True


def kept_architecture(schema, model_options, given, saved):
    """The ARCHITECTURE options of the ``saved`` model (completed) into
    ``model_options`` (a different value ``given`` is ignored with a
    warning), and a warning naming every other setting that differs from
    the saved run's, but the SCHEDULE ones (and the dictionaries' paths
    where the model recorded their contents' digests: record_dictionaries
    compares those)."""
    architecture = schema.names(ARCHITECTURE)
    for key in architecture:
        if key in given and given[key] != saved[key]:
            warn('--%s %s ignored: the reloaded model has %s'
                 % (key, given[key], saved[key]))
        model_options[key] = saved[key]
    model_options[DIGESTS] = saved.get(DIGESTS)
    unwarned = architecture + schema.names(SCHEDULE) + (
        schema.names_of_files(DICTIONARIES) if saved.get(DIGESTS) else ())
    changed = ['%s %s -> %s' % (key, _text(saved[key]), _text(model_options[key]))
               for key in schema.order if key not in unwarned
               and key in saved and _plain(saved[key]) != _plain(model_options[key])]
    if changed:
        warn('--reload with training settings other than those of %s: %s'
             % (model_options['saveto'], '; '.join(changed)))


# the model options' digests of the dictionaries' contents
DIGESTS = 'dictionary_digests'


def record_dictionaries(model_options, dictionaries, paths, reloading):
    """Keep a digest of each dictionary's contents (vocab.dictionary_digest)
    in ``model_options``; when ``reloading``, InputError naming the first of
    ``paths`` whose words or ids are not those the model recorded (a
    dictionary may move, not change).  A model saved before the digests
    were recorded reloads without the check, with one line that says so."""
    digests = [vocab.dictionary_digest(d) for d in dictionaries]
    recorded = model_options.get(DIGESTS)
    if reloading and recorded is None:
        print('--reload: %s records no digest of its dictionaries (an older file): their '
              'contents are not compared; this run records them' % model_options['saveto'])
    elif reloading:
        for path, digest, trained in zip(paths, digests, recorded):
            if digest != trained:
                raise InputError('%s: not the dictionary that %s was trained with (its words '
                                 'or ids differ): --reload needs the run\'s dictionaries'
                                 % (path, model_options['saveto']))
    model_options[DIGESTS] = digests


def check_nothing_to_resume(saveto):
    """InputError when ``saveto`` is missing but its resume file or a
    snapshot is there: --reload cannot resume them (the architecture is in
    the model's files), and a new run would write over them."""
    there = [p for p in run_files(saveto) if p == resume_path(saveto) or SNAPSHOT.search(p)]
    if there:
        raise InputError('%s: no such model file, but %s of its run %s there: --reload '
                         'needs the model file (put it back; --restart moves the run\'s '
                         'files aside and starts a new model)'
                         % (saveto, some_of(there), 'are' if len(there) > 1 else 'is'))


def warn(message):
    print('warning: %s' % message, file=sys.stderr)


def _plain(value):
    """A value as it compares across a save: lists and tuples alike."""
    return list(value) if isinstance(value, (list, tuple)) else value


def _text(value):
    return ' '.join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)
