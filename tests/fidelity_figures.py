"""The fidelity figures of one Python (numpy, BLAS, CPU), and two sets compared.

    .venv/bin/python tests/fidelity_figures.py --out py311.npz
    .venv/bin/python tests/fidelity_figures.py --compare py311.npz py313.npz

The fixture-exactness tests compare the project with the float64 NumPy
reference on the Python that runs them.  This records what they compare, so
that two Pythons (or machines) can be set side by side directly: for each of
the registry's five decoders, on the tests' tiny model (conftest.Model) with
parameters drawn from a seeded normal distribution (the initialisation's
orthogonal matrices come from LAPACK's SVD, whose signs differ between the
numpy releases of two Pythons) and one seeded batch of three sentence pairs,

* ``costs``: the per-sentence costs and the regularised cost;
* ``grads``: the gradient of the regularised cost, every parameter;
* ``update``: the parameters after one Adadelta update (clipped to norm 1);
* ``beam``: beam search, k 3, of three sources: every hypothesis and score.

``--compare A B`` prints the largest differences per decoder and kind and
exits 1 where two figures differ beyond the tests' tolerances (below) or two
searches give other hypotheses.  Run through ``setup.sh``'s environment of
each Python (``VENV=.venv313 PYTHON=python3.13 bash setup.sh``).
"""
import argparse
import json
import os
import sys

import numpy as np

sys.path[:0] = [os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                os.path.dirname(os.path.abspath(__file__))]

# (rtol, atol) of the fixture-exactness tests: the forward pass against the
# NumPy reference (test_forward_vs_numpy), the gradients and the Adadelta
# step against the original graph (test_fast_ops), beam scores
# (test_beam_search)
TOLERANCES = {'costs': (1e-4, 1e-5), 'grads': (1e-4, 1e-7),
              'update': (1e-4, 1e-7), 'beam': (1e-4, 1e-5)}

BEAM_SOURCES = ([3, 7, 1, 12, 0], [9, 0], [2, 2, 5, 11, 4, 8, 0])


def decoder_figures(model, batch):
    """{kind/name: array} of one decoder (see the module's docstring)."""
    figures = {}
    forward = model.forward(*batch)
    figures['costs/sentences'] = forward['cost']
    figures['costs/regularised'] = np.float32(forward['reg_cost'])
    outs = model.f_grad()(*batch)
    grads = outs[1:]
    for name, g in zip(model.tparams, grads):
        figures['grads/' + name] = g
    for name, value in one_adadelta_update(model, outs[0], grads).items():
        figures['update/' + name] = value
    figures.update(beam_figures(model))
    return figures


def one_adadelta_update(model, cost, grads):
    """The parameters after one fused Adadelta update from these gradients
    (the training path's update_from_gradients), clip_c 1."""
    import optimizers
    options = dict(model.options, optimizer='adadelta', clip_c=1.)
    f_grad_shared, f_update = optimizers.update_from_gradients(options, model.tparams)
    f_grad_shared(*(list(grads) + [np.float32(cost)]))
    f_update(np.float32(1.))
    updated = {k: p.get_value() for k, p in model.tparams.items()}
    model.reset()
    return updated


def beam_figures(model):
    """nmt.gen_sample's beam search (k 3, maxlen 12) of BEAM_SOURCES."""
    f_init, f_next = model.sampler()
    figures = {}
    for i, source in enumerate(BEAM_SOURCES):
        x = np.array(source, dtype='int64')[:, None]
        samples, scores = model.nmt.gen_sample(
            model.tparams, f_init, f_next, x, model.options, trng=model.graph['trng'],
            k=3, maxlen=12, stochastic=False)[:2]
        figures['beam/%d/scores' % i] = np.asarray(scores, dtype='float32')
        figures['beam/%d/hypotheses' % i] = np.array(
            json.dumps([list(map(int, s)) for s in samples]))
    return figures


def record(path):
    import conftest
    import layers
    import theano
    batch = conftest.make_batch(7)
    arrays = {'about': np.array(json.dumps({
        'python': sys.version.split()[0], 'numpy': np.__version__,
        'theano': theano.__version__}))}
    # the registry's decoders, each as its own variant
    for name in (v.name for d in layers.DECODERS.values() for v in d.variants):
        model = conftest.Model(name, conftest.CONFIGS[name])
        # drawn, not initialised: the initialisation's orthogonal matrices
        # come from LAPACK's SVD, whose signs differ between numpy releases
        model.params = conftest.drawn_parameters(model.params, 2718, around=False)
        model.reset()
        for key, value in decoder_figures(model, batch).items():
            arrays['%s/%s' % (name, key)] = np.asarray(value)
        print('%s: cost %.7g' % (name, float(arrays[name + '/costs/regularised'])),
              flush=True)
    tmp = path + '.part.npz'
    np.savez(tmp, **arrays)
    os.replace(tmp, path)


def differences(a, b):
    """{(decoder, kind): (largest |a-b|, largest |a-b| / |b|, within tolerance)};
    hypotheses that differ count as outside.  Raises KeyError naming a
    figure one of the files lacks."""
    keys_a, keys_b = set(a.files) - {'about'}, set(b.files) - {'about'}
    if keys_a != keys_b:
        raise KeyError('figures in one file only: %s'
                       % ', '.join(sorted(keys_a ^ keys_b)[:5]))
    out = {}
    for key in sorted(keys_a):
        decoder, kind = key.split('/')[:2]
        worst = out.setdefault((decoder, kind), [0., 0., True])
        if key.endswith('/hypotheses'):
            worst[2] &= str(a[key]) == str(b[key])
            continue
        x, y = a[key].astype('float64'), b[key].astype('float64')
        if x.shape != y.shape:
            worst[2] = False
            continue
        diff = np.abs(x - y)
        rtol, atol = TOLERANCES[kind]
        worst[0] = max(worst[0], float(diff.max(initial=0.)))
        worst[1] = max(worst[1], float((diff / np.maximum(np.abs(y), 1e-30)).max(initial=0.)))
        worst[2] &= bool(np.all(diff <= atol + rtol * np.abs(y)))
    return out


def compare(path_a, path_b):
    with np.load(path_a) as a, np.load(path_b) as b:
        print('A: %s  %s\nB: %s  %s' % (path_a, a['about'], path_b, b['about']))
        found = differences(a, b)
    print('%-10s %-7s %12s %12s  %s' % ('decoder', 'figures', 'max |A-B|', 'max rel', 'within'))
    for (decoder, kind), (adiff, rdiff, ok) in sorted(found.items()):
        print('%-10s %-7s %12.3g %12.3g  %s' % (decoder, kind, adiff, rdiff,
                                                'yes' if ok else 'NO'))
    return all(ok for _, _, ok in found.values())


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    group = p.add_mutually_exclusive_group(required=True)
    group.add_argument('--out', metavar='FILE.npz', help='record this Python\'s figures')
    group.add_argument('--compare', nargs=2, metavar=('A.npz', 'B.npz'),
                       help='compare two records')
    args = p.parse_args(argv)
    if args.out:
        if not args.out.endswith('.npz'):
            p.error('--out takes a file name ending in .npz, not %s' % args.out)
        record(args.out)
        return 0
    for path in args.compare:
        if not os.path.isfile(path):
            p.error('--compare: no file %s' % path)
    try:
        return 0 if compare(*args.compare) else 1
    except (KeyError, ValueError, OSError) as e:
        sys.exit('fidelity_figures.py: %s' % e)


if __name__ == '__main__':
    sys.exit(main())
