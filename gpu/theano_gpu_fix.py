"""Repair theano-pymc 1.1.2's GPU back-end in the installed package.

    python gpu/theano_gpu_fix.py [--check]

theano-pymc 1.1.2 changed its local optimisers to take the function graph
first, ``(fgraph, op, context_name, inputs, outputs)``, but the two places that
call the GPU lifters -- ``op_lifter`` in ``theano/gpuarray/opt_util.py`` and
``GraphToGPU.apply`` in ``theano/gpuarray/opt.py`` -- still call them without
it, and seven lifters kept the old signature.  Every lift then fails with a
TypeError that Theano only logs ("missing 1 required positional argument:
'outputs'"), and the whole graph stays on the CPU while the GPU is active.
This passes the graph at both calls and adds it to the seven signatures.
Likewise the C linker now passes ``c_compiler=`` to every ``c_*`` hook, but
``HideC``, which the GPU ops use to hide the C code of their CPU parents,
accepts no keyword: every GPU op then fails to compile.  Its hook takes them.
Two more places assume what changed: ``GraphToGPU`` takes ``len`` of what
is now a generator, and the element-wise fusion flattens a test value that
is a GPU array.

Run by ``setup.sh --gpu`` and ``gpu/bundle.sh unpack``; safe to run again
(it changes nothing the second time).  ``--check`` only reports, with exit
status 1 when the package still needs the repair.
"""
import argparse
import importlib.util
import os
import re
import sys

if __name__ == '__main__':  # run as a file: import from the project root, not this folder
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from model_io import write_text  # noqa: E402

# (file under the theano package, old text, new text)
CALL_SITES = [
    ('link/c/interface.py', '    def __hide(*args):', '    def __hide(*args, **kwargs):'),
    ('gpuarray/opt_util.py',
     'new_op = maker(node.op, context_name, node.inputs, node.outputs)',
     'new_op = maker(fgraph, node.op, context_name, node.inputs, node.outputs)'),
    ('gpuarray/opt.py',
     'node_created[lopt] += len(\n                    applys_between(',
     'node_created[lopt] += len(list(\n                    applys_between('),
    ('gpuarray/opt.py',
     '[mapping[i] for i in node.inputs], outputs)\n                )',
     '[mapping[i] for i in node.inputs], outputs))\n                )'),
    ('tensor/opt.py',
     'tmp.tag.test_value = tv.flatten()[0]',
     'tmp.tag.test_value = np.asarray(tv).flatten()[0]'),
    ('gpuarray/opt.py',
     'new_ops = lopt.transform(\n                        node.op,',
     'new_ops = lopt.transform(\n                        fgraph,\n                        node.op,'),
]
# lifters that still have the old signature
OLD_SIGNATURE = re.compile(r'^def (local_\w+)\(op, (ctx_name|context_name), inputs, outputs\):',
                           re.M)
LIFTER_FILES = tuple('gpuarray/%s.py' % n for n in ('dnn_opt', 'extra_ops', 'multinomial',
                                                     'sort'))


def theano_dir():
    spec = importlib.util.find_spec('theano')
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit('error: theano is not installed in this Python')
    return list(spec.submodule_search_locations)[0]


def repaired_text(name, text):
    """The file's text with the repair applied (unchanged when done before)."""
    for fname, old, new in CALL_SITES:
        if fname == name and old in text:
            text = text.replace(old, new)
    if name in LIFTER_FILES:
        text = OLD_SIGNATURE.sub(r'def \1(fgraph, op, \2, inputs, outputs):', text)
    return text


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--check', action='store_true', help='report only')
    args = p.parse_args(argv)
    folder = theano_dir()
    pending = []
    for name in sorted({c[0] for c in CALL_SITES} | set(LIFTER_FILES)):
        path = os.path.join(folder, name)
        with open(path, encoding='utf-8') as f:
            text = f.read()
        fixed = repaired_text(name, text)
        if fixed != text:
            pending.append(name)
            if not args.check:
                write_text(path, fixed)
    verb = 'needs repair' if args.check else 'repaired'
    print('theano_gpu_fix: %s: %s' % (verb, ', '.join(pending)) if pending
          else 'theano_gpu_fix: %s is already repaired' % folder)
    return 1 if args.check and pending else 0


if __name__ == '__main__':
    sys.exit(main())
