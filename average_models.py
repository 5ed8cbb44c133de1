"""Checkpoint averaging: one model file whose parameters are the element-wise
mean of several model files' (the snapshots of one run near its best, as a
single model that decodes as fast as one).

    python average_models.py MODEL.npz MODEL.npz [...] -o AVERAGED.npz

Every input is loaded as translate.py loads it (its options completed and
checked, its parameters against them); the inputs must have the same
architecture (the options that shape the parameters: dimensions, encoder,
decoder, vocabularies, residual connections, attention) and the same
dictionaries, or the command stops with one line naming the file and the
option.  Each parameter is averaged in float64 and stored as float32.

AVERAGED.npz gets the first input's options (.pkl and .json) and no training
state (no history_errs or uidx): it is a model for translate.py and score.py.
The files are written atomically, the options first: an interrupted command
leaves no model file that looks complete.
"""
import sys

from machinery import cli   # first: without .venv, one line (machinery/__init__.py)

import numpy
from machinery import model_io, output_files
from machinery.option_schema import ARCHITECTURE
from machinery.text_io import InputError


def check_same_architecture(models):
    """InputError naming the first option, among those that shape the
    parameters, on which a model differs from the first."""
    from nmt_model import MODEL
    first_path, first, _ = models[0]
    for path, options, _ in models[1:]:
        for name in MODEL.names(ARCHITECTURE):
            if options.get(name) != first.get(name):
                raise InputError('%s: option %s is %r, but %r in %s: only models of one '
                                 'architecture can be averaged'
                                 % (path, name, options.get(name), first.get(name), first_path))


def average_parameters(models):
    """{name: float32 array}: each parameter's element-wise mean over the models."""
    names = models[0][2].keys()
    return {name: (sum(numpy.asarray(params[name], dtype=numpy.float64)
                       for _, _, params in models) / len(models)).astype(numpy.float32)
            for name in names}


def average_models(paths, output):
    from translation.decoding import load_models
    output_files.check_outputs(output_files.model_files([output]),
                               output_files.model_files(paths))
    models = load_models(paths)
    check_same_architecture(models)
    averaged = average_parameters(models)
    options = model_io.load_options(paths[0])     # as saved (not completed)
    model_io.save_options(options, output)
    model_io.atomic_savez(output, **averaged)
    print('%s: the mean of %d models\' %d parameters (%s)'
          % (output, len(paths), sum(a.size for a in averaged.values()), ', '.join(paths)))


def parse_args(argv):
    p = cli.ArgumentParser(description='Average the parameters of several model files of one '
                           'architecture into one model file (checkpoint averaging).')
    p.add_argument('models', nargs='+', metavar='MODEL.npz', help='the model files')
    p.add_argument('-o', '--output', required=True, metavar='AVERAGED.npz',
                   help='the averaged model file (its options beside it, .pkl and .json)')
    args = p.parse_args(argv)
    if len(args.models) < 2:
        p.error('give at least two model files to average')
    return args


def main(argv=None):
    args = parse_args(cli.arguments(argv))
    return cli.run(lambda: average_models(args.models, args.output))


if __name__ == '__main__':
    sys.exit(main())
