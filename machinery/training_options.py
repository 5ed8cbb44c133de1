"""The options of the training commands (nmt.py, language_model/lm.py): their
defaults, their checks, their ``--flags``, and what ``--reload`` keeps.

Each command describes its options once, as an ``OptionTable``: the defaults
(dl4mt's ``train()`` keyword arguments and this project's additions), the
values some of them take, and the architecture options that a reloaded model
keeps from its file.  The table makes the command line (one ``--KEY`` per
option: a switch for an option that is off by default, else a value of the
default's type) and checks what ``train(**options)`` is given.
"""
import argparse
import copy
import os
import sys
from collections import OrderedDict

from machinery import vocab
from machinery.model_io import check_distinct, check_model_kind, load_options
from machinery.text_io import InputError
from machinery.training_state import (SNAPSHOT, check_no_run, resume_path, run_files,
                                      run_outputs, some_of)

# flags whose name is not the option's
FLAG_NAMES = {'saveto': 'model', 'reload_': 'reload', 'shuffle_each_epoch': 'no_shuffle'}
# --help: the groups in their order, and each option's group and line (a
# switch's line says what giving it does; a value option's gets its default)
GROUPS = ('model', 'data', 'optimisation', 'validation and early stopping',
          'saving, resuming and display')
OPTION_HELP = {
    # model
    'dim_word': ('model', 'size of the word embeddings'),
    'dim': ('model', 'size of the recurrent states'),
    'encoder': ('model', 'recurrent unit of the encoder'),
    'decoder': ('model', 'the decoder: gru_cond (dl4mt\'s conditional GRU) or a residual '
                         'one (docs/decoders.md)'),
    'residual': ('model', 'what a residual decoder adds from the previous words '
                          '(docs/decoders.md)'),
    'att_scoring': ('model', 'scoring of the attention over the previous words (attentive '
                             'residual)'),
    'inference': ('model', 'how the attentive residual decoder summarises the previous '
                           'words when decoding: training (the training graph\'s) or '
                           'authors (their sampler\'s; docs/equations.md)'),
    'n_words_src': ('model', 'source vocabulary: words of a higher id read as UNK'),
    'n_words': ('model', 'target vocabulary: words of a higher id read as UNK'),
    'use_dropout': ('model', 'dropout on the readout (0.5, as dl4mt: part of the model, '
                             'halved when translating)'),
    'dropout_embedding': ('model', 'training only: drop each unit of the source and target '
                                   'word embeddings with this probability (inverted '
                                   'dropout; 0: none; docs/training.md#dropout)'),
    'dropout_context': ('model', 'training only: dropout of the encoder\'s annotations '
                                 'that the decoder attends to'),
    'dropout_readout': ('model', 'training only: inverted dropout of the readout layer '
                                 '(instead of --use_dropout)'),
    'tie_embeddings': ('model', 'the output layer is the transposed input embeddings'),
    'init': ('model', 'initial parameters: glorot (rectangular matrices Glorot-uniform, '
                      'the embeddings and output weights uniform in +-sqrt(3/dim_word) as '
                      'Marian\'s) or dl4mt (0.01 * N(0,1), the original\'s), square ones '
                      'orthogonal in both; +unigram: the output bias starts at the log '
                      'word frequencies of the training targets (docs/training.md)'),
    'seed': ('model', 'random seed of the initial parameters, the data order and (unless '
                      '--noise_seed is given) the dropout noise'),
    'noise_seed': ('model', 'seed of the noise stream (dropout masks, sampled translations); '
                            '0: derived from --seed (the default --seed 1234 gives 1234, '
                            'dl4mt\'s fixed stream); --noise_seed 1234 keeps dl4mt\'s '
                            'stream whatever --seed is; worker r of an MPI run adds r'),
    # data
    'maxlen': ('data', 'longest training sentence in tokens: longer pairs are skipped'),
    'batch_size': ('data', 'sentences per update'),
    'valid_batch_size': ('data', 'sentences per batch of the validation cost'),
    'shuffle_each_epoch': ('data', 'read the training data in file order every epoch '
                                   '(no shuffling)'),
    # optimisation
    'optimizer': ('optimisation', 'adam (with --lrate 0.0004), adadelta and rmsprop (no '
                                  'learning rate), sgd (with --lrate 1)'),
    'lrate': ('optimisation', 'learning rate of adam and sgd (adadelta and rmsprop '
                              'ignore it)'),
    'clip_c': ('optimisation', 'gradients whose norm is above this are scaled down to it '
                               '(-1: no clipping)'),
    'decay_c': ('optimisation', 'L2 weight decay: this times the sum of squared weights '
                                'is added to the cost (0: none)'),
    'alpha_c': ('optimisation', 'attention regulariser: pushes each source word\'s total '
                                'attention towards 1 (0: none)'),
    'max_epochs': ('optimisation', 'passes over the training data at most'),
    'finish_after': ('optimisation', 'stop after this many updates'),
    # validation
    'validFreq': ('validation and early stopping',
                  'updates between validations (the cost of the validation data)'),
    'patience': ('validation and early stopping',
                 'stop after this many validations without a better cost'),
    'bleu_valid_freq': ('validation and early stopping',
                        'updates between validation BLEU scores (beam search of the '
                        'validation source; 0: none)'),
    'bleu_valid_ref': ('validation and early stopping',
                       'the validation source\'s reference translation, tokenised, for '
                       'BLEU'),
    'bleu_valid_beam': ('validation and early stopping', 'beam size of the validation '
                                                         'BLEU'),
    'bleu_patience': ('validation and early stopping',
                      'stop after this many BLEU validations without a better BLEU (0: '
                      'never)'),
    'bleu_valid_postprocess': ('validation and early stopping',
                               'shell command that the translations go through before '
                               'BLEU (undoing BPE, say)'),
    'external_validation_script': ('validation and early stopping',
                                   'program run on the current model in place of the '
                                   'built-in BLEU; prints the score as its last line'),
    # saving
    'saveFreq': ('saving, resuming and display',
                 'updates between checkpoints (the model, its resume file, MODEL.iterN.npz)'),
    'overwrite': ('saving, resuming and display', 'no MODEL.iterN.npz copy at each save'),
    'reload_': ('saving, resuming and display',
                'resume from MODEL (parameters, optimizer, counters, data position)'),
    'restart': ('saving, resuming and display',
                'start a new model where MODEL holds a run: its files are moved into a '
                'folder beside it (MODEL.before-DATE-TIME), not deleted'),
    'reload_model_only': ('saving, resuming and display',
                          'with --reload: the parameters, update count and validation '
                          'history of MODEL alone, the optimizer and the data position '
                          'fresh (as the original code reloads; for a resume file that '
                          'cannot be used)'),
    'dispFreq': ('saving, resuming and display', 'updates between progress lines'),
    'sampleFreq': ('saving, resuming and display',
                   'updates between sample translations printed'),
}
# settings that a resumed run may change without a warning: how long it runs
# and what it prints (the others change what it computes)
# (and the model's path: a model moves with its files)
RUN_LENGTH_AND_DISPLAY = ('saveto', 'reload_', 'finish_after', 'max_epochs', 'dispFreq',
                          'sampleFreq', 'saveFreq', 'overwrite', 'reload_model_only',
                          'restart')


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


class OptionTable(object):
    """defaults: OrderedDict option -> default; choices: option -> the
    values it takes; architecture: the options a reloaded model keeps;
    kind: the command's kind of model (model_io), that --reload checks;
    help: option -> (group, line) where the command's option differs from
    OPTION_HELP's."""

    def __init__(self, defaults, choices, architecture, kind, help=None):
        self.defaults, self.choices = defaults, choices
        self.architecture, self.kind = architecture, kind
        self.help = help or {}

    def fill(self, given):
        """The defaults, updated with the options ``given``."""
        full = OrderedDict(self.defaults)
        full.update(given)
        return full

    def check_known(self, given):
        unknown = set(given) - set(self.defaults)
        if unknown:
            raise InputError('unknown option(s): %s' % ', '.join(sorted(unknown)))

    def check_choices(self, options):
        """InputError naming the first option whose value does not exist."""
        for key, choices in self.choices.items():
            if options[key] not in choices:
                raise InputError('--%s must be one of %s, not %r'
                                 % (key, ', '.join(choices), options[key]))

    def flag_groups(self, parser):
        """{group name: argparse group} of --help's groups, in their order."""
        return OrderedDict((name, parser.add_argument_group(name)) for name in GROUPS)

    def add_flags(self, groups, declared):
        """A ``--KEY`` for every option not in ``declared`` (declared by hand)
        and with more than one value, in its group of ``groups``
        (flag_groups), explained by OPTION_HELP (updated by the table's own
        ``help``).  No flag has a default: what ``parse_args`` returns is
        what was given."""
        for key, default in self.defaults.items():
            if key in declared or len(self.choices.get(key, 'many')) == 1:
                continue
            group, text = self.help.get(key, OPTION_HELP[key])
            flag = '--' + FLAG_NAMES.get(key, key)
            if isinstance(default, bool):   # a switch that turns the default over
                groups[group].add_argument(flag, dest=key, default=argparse.SUPPRESS,
                                           action='store_false' if default else 'store_true',
                                           help=text)
            else:
                groups[group].add_argument(flag, dest=key, default=argparse.SUPPRESS,
                                           type=str if default is None else type(default),
                                           choices=self.choices.get(key),
                                           help='%s (default: %s)' % (text, default))

    def reloaded(self, options, given, fill):
        """(model options, reloading): a copy of the run's ``options`` in
        which, when ``--reload`` finds the model file, the architecture
        options come from the saved model (a different value ``given`` on the
        command line is ignored with a warning), and a warning names every
        other setting that differs from the saved run's (the dictionaries'
        contents are compared instead of their paths where the model
        recorded them: record_dictionaries).  ``fill`` completes saved
        options.  Without ``--reload`` (or ``--restart``) a model that holds
        a run is refused (training_state.check_no_run), and so is a model
        whose files would be one of the run's inputs."""
        model_options = copy.copy(options)
        saveto = options['saveto']
        check_distinct(run_outputs(saveto), input_files(options))
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
        check_model_kind(saveto, saved, self.kind)
        saved = fill(saved)
        for key in self.architecture:
            if key in given and given[key] != saved[key]:
                warn('--%s %s ignored: the reloaded model has %s'
                     % (key, given[key], saved[key]))
            model_options[key] = saved[key]
        model_options[DIGESTS] = saved.get(DIGESTS)
        compared = RUN_LENGTH_AND_DISPLAY + (DICTIONARY_PATHS if saved.get(DIGESTS) else ())
        changed = ['%s %s -> %s' % (key, _text(saved[key]), _text(options[key]))
                   for key in self.defaults
                   if key not in self.architecture and key not in compared
                   and key in saved and _plain(saved[key]) != _plain(options[key])]
        if changed:
            warn('--reload with training settings other than those of %s: %s'
                 % (saveto, '; '.join(changed)))
        return model_options, True


# the model options' digests of the dictionaries' contents, and the options
# that name the dictionaries (nmt.py's, language_model/lm.py's)
DIGESTS = 'dictionary_digests'
DICTIONARY_PATHS = ('dictionaries', 'dictionary')


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


# the options that name input files (nmt.py's, language_model/lm.py's)
FILE_OPTIONS = ('datasets', 'valid_datasets', 'dictionaries', 'bleu_valid_ref', 'dataset',
                'valid_dataset', 'dictionary')


def input_files(options):
    """The paths of the files that a run's ``options`` name as its inputs."""
    paths = []
    for key in FILE_OPTIONS:
        value = options.get(key)
        paths.extend([value] if isinstance(value, str) else value or [])
    return paths


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
