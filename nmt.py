"""Attention NMT as in dl4mt-tutorial, plus the residual decoder family:
dl4mt's ``nmt.py`` names and entry points, and the training command.

This file is the facade that dl4mt's users and scripts know: the names are
defined where they belong, each once (docs/code.md):

* the model (nmt_model.py): ``init_params``, ``build_model``,
  ``load_model``, ``count_params``, ``check_options``; the layers
  (layers.py): ``init_tparams``, ``zipp``, ``unzip``, ``get_layer``,
  ``norm_weight``, ``ortho_weight``; ``load_params`` (machinery/model_io.py);
* decoding: ``build_sampler`` (sampler.py), ``gen_sample`` (beam_search.py);
* training (nmt_training.py): ``train``, ``pred_probs``, ``OPTIONS`` (every
  option of train() and of this command, declared once) and
  ``fill_options`` (train()'s keyword arguments completed); the optimisers
  (optimizers.py) and ``prepare_data``, ``TextIterator`` (data_iterator.py).

    python nmt.py --model model.npz --datasets SRC TRG --dictionaries DSRC DTRG \\
        [--valid_datasets SRC TRG] [--OPTION VALUE ...]
"""
import sys

from theano_platform import theano_env  # noqa: F401  (must come before theano)
if __name__ == '__main__':
    # Training keeps intermediate results between calls: 4-9% faster steps at
    # the papers' size, about twice the memory (THEANO_FLAGS=allow_gc=True
    # overrides).  Theano's linker reads this once, at import.
    theano_env.configure(allow_gc=False)

from machinery import cli
from machinery import distributed
from beam_search import gen_sample
from data_iterator import TextIterator, prepare_data
from layers import get_layer, init_tparams, norm_weight, ortho_weight, unzip, zipp
from machinery.model_io import load_params
from nmt_model import build_model, check_options, count_params, init_params, load_model
from nmt_training import OPTIONS, pred_probs, train
from optimizers import adadelta, adam, rmsprop, sgd
from sampler import build_sampler

fill_options = OPTIONS.fill
__all__ = ['init_params', 'build_model', 'load_model', 'count_params', 'check_options',
           'init_tparams', 'zipp', 'unzip', 'get_layer', 'norm_weight', 'ortho_weight',
           'load_params', 'build_sampler', 'gen_sample', 'train', 'pred_probs', 'OPTIONS',
           'fill_options', 'adadelta', 'adam', 'rmsprop', 'sgd', 'prepare_data',
           'TextIterator', 'parse_args', 'argument_parser', 'main']


def parse_args(argv):
    """train()'s keyword arguments: the options given on the command line."""
    return vars(argument_parser().parse_args(argv))


def argument_parser():
    """nmt.py's command line: a flag for every option of train()
    (nmt_training.OPTIONS), in --help's groups."""
    parser = cli.ArgumentParser(
        description='Train an attention NMT model (dl4mt-tutorial options). The bare '
                    'defaults are dl4mt\'s train() (rmsprop, dim 1000, batch 16, ...), '
                    'not settings that train well: the papers\' settings are what '
                    'train_es-en.sh and its siblings pass (--dry-run prints them), '
                    'Multi30k\'s what train_multi30k.sh passes, and docs/training.md '
                    'gives the optimisers\' learning rates.')
    OPTIONS.add_flags(parser)
    return parser


def main(argv=None):
    args = parse_args(cli.arguments(argv))
    return distributed.run(lambda: train(**args))


if __name__ == '__main__':
    sys.exit(main())
