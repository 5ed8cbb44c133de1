"""Optimisers with dl4mt's interface (docs/equations.md#adadelta).

``OPT(lr, tparams, grads, inputs, cost)`` returns ``(f_grad_shared,
f_update)``: the first computes the cost and stores what the update needs,
the second applies the update.  Each optimiser keeps its accumulators in
shared variables, listed in ``state`` (a dict the caller may pass) so that a
checkpoint can save them and a resumed run can restore them.

``clip_gradients`` rescales the gradients to a maximum global norm (the
original's ``clip_c``).

Adadelta also has a fused form (``fused=True``): one Theano function computes
the cost, the gradients and the whole update, with the same equations; it
saves a pass over every parameter and the stored gradients, and each
parameter's update is one in-place C op (``fast_ops.adadelta_step``; inside
``fast_ops.original_graph()`` Theano's element-wise ops).  Its ``f_update``
then does nothing.  ``mode`` (a Theano Mode, default: Theano's)
compiles Adadelta's functions with, e.g., a linker with or without garbage
collection, so that both styles can run in one process.
"""
import numpy

from theano_platform import theano_env  # noqa: F401  (configures Theano before its import)
import theano
import theano.tensor as tensor

from theano_platform import fast_ops
from machinery.option_schema import GRAPH, Option


def clip_gradients(grads, clip_c, norm2=None):
    """Rescale to global norm clip_c when the norm is larger; ``norm2``: the
    squared global norm when ``grads`` are only part of the gradient (one
    worker's group of parameters, data_parallel.py), else their own."""
    if clip_c <= 0.:
        return grads
    g2 = norm2
    if g2 is None:
        g2 = fast_ops.squared_norm(grads)
    return [tensor.switch(g2 > (clip_c ** 2), g / tensor.sqrt(g2) * clip_c, g)
            for g in grads]


def _shared_like(p, name):
    return theano.shared(p.get_value() * numpy.float32(0.), name=name)


def _accumulators(tparams, suffix, state):
    acc = [_shared_like(p, '%s_%s' % (k, suffix)) for k, p in tparams.items()]
    if state is not None:
        for a in acc:
            state[a.name] = a
    return acc


def _no_update(lr):
    return []


def adadelta(lr, tparams, grads, inp, cost, state=None, fused=False,
             rho=0.95, eps=1e-6, mode=None):
    """Adadelta (Zeiler 2012), docs/equations.md#adadelta; lr is unused."""
    params = list(tparams.values())
    running_up2 = _accumulators(tparams, 'rup2', state)
    running_grads2 = _accumulators(tparams, 'rgrad2', state)
    rho, eps = numpy.float32(rho), numpy.float32(eps)
    one_minus_rho = numpy.float32(1.) - rho

    def step(g, ru2, rg2_new):
        # dx = -sqrt(Edx2 + eps) / sqrt(Eg2 + eps) * g, with the new Eg2
        return -tensor.sqrt(ru2 + eps) / tensor.sqrt(rg2_new + eps) * g

    rg2_new = [rho * rg2 + one_minus_rho * (g ** 2)
               for rg2, g in zip(running_grads2, grads)]
    if fused and fast_ops.enabled():
        # one in-place C op per parameter (fast_ops.adadelta_step)
        updates = []
        for p, rg2, ru2, g in zip(params, running_grads2, running_up2, grads):
            new_p, new_rg2, new_ru2 = fast_ops.adadelta_step(p, rg2, ru2, g, rho, eps)
            updates += [(p, new_p), (rg2, new_rg2), (ru2, new_ru2)]
        f = theano.function(inp, cost, updates=updates, name='adadelta_fused',
                            mode=mode)
        return f, _no_update
    if fused:
        updir = [step(g, ru2, r) for g, ru2, r in zip(grads, running_up2, rg2_new)]
        updates = (list(zip(running_grads2, rg2_new)) +
                   [(ru2, rho * ru2 + one_minus_rho * (ud ** 2))
                    for ru2, ud in zip(running_up2, updir)] +
                   [(p, p + ud) for p, ud in zip(params, updir)])
        f = theano.function(inp, cost, updates=updates, name='adadelta_fused',
                            mode=mode)
        return f, _no_update

    zipped_grads = _accumulators(tparams, 'grad', None)
    f_grad_shared = theano.function(
        inp, cost, updates=list(zip(zipped_grads, grads)) +
        list(zip(running_grads2, rg2_new)), name='adadelta_grad_shared', mode=mode)
    updir = [step(zg, ru2, rg2)
             for zg, ru2, rg2 in zip(zipped_grads, running_up2, running_grads2)]
    f_update = theano.function(
        [lr], [], on_unused_input='ignore', name='adadelta_update', mode=mode,
        updates=[(ru2, rho * ru2 + one_minus_rho * (ud ** 2))
                 for ru2, ud in zip(running_up2, updir)] +
        [(p, p + ud) for p, ud in zip(params, updir)])
    return f_grad_shared, f_update


def adam(lr, tparams, grads, inp, cost, state=None, b1=0.9, b2=0.999, e=1e-8):
    """Adam with bias correction, as in dl4mt-tutorial (b1 is the decay 0.9);
    on the CPU each parameter's step is one in-place C op
    (``fast_ops.adam_step``, the same equations)."""
    gshared = _accumulators(tparams, 'grad', None)
    f_grad_shared = theano.function(inp, cost, updates=list(zip(gshared, grads)),
                                    name='adam_grad_shared')
    t_prev = theano.shared(numpy.float32(0.), name='adam_t')
    if state is not None:
        state[t_prev.name] = t_prev
    t = t_prev + numpy.float32(1.)
    lr_t = lr * tensor.sqrt(1. - b2 ** t) / (1. - b1 ** t)
    updates = []
    ms = _accumulators(tparams, 'adam_m', state)
    vs = _accumulators(tparams, 'adam_v', state)
    for p, g, m, v in zip(tparams.values(), gshared, ms, vs):
        if fast_ops.enabled():   # one in-place C op per parameter
            new_p, m_t, v_t = fast_ops.adam_step(p, m, v, g, lr_t, b1, b2, e)
            updates += [(m, m_t), (v, v_t), (p, new_p)]
            continue
        m_t = b1 * m + (1. - b1) * g
        v_t = b2 * v + (1. - b2) * g ** 2
        updates += [(m, m_t), (v, v_t),
                    (p, p - lr_t * m_t / (tensor.sqrt(v_t) + e))]
    updates.append((t_prev, t))
    f_update = theano.function([lr], [], updates=updates,
                               on_unused_input='ignore', name='adam_update')
    return f_grad_shared, f_update


def rmsprop(lr, tparams, grads, inp, cost, state=None):
    """RMSprop with momentum, as in dl4mt-tutorial (lr unused, step 1e-4)."""
    zipped_grads = _accumulators(tparams, 'grad', None)
    running_grads = _accumulators(tparams, 'rgrad', state)
    running_grads2 = _accumulators(tparams, 'rgrad2', state)
    updir = _accumulators(tparams, 'updir', state)
    f_grad_shared = theano.function(
        inp, cost, name='rmsprop_grad_shared',
        updates=list(zip(zipped_grads, grads)) +
        [(rg, 0.95 * rg + 0.05 * g) for rg, g in zip(running_grads, grads)] +
        [(rg2, 0.95 * rg2 + 0.05 * (g ** 2)) for rg2, g in zip(running_grads2, grads)])
    updir_new = [(ud, 0.9 * ud - 1e-4 * zg / tensor.sqrt(rg2 - rg ** 2 + 1e-4))
                 for ud, zg, rg, rg2 in zip(updir, zipped_grads, running_grads,
                                            running_grads2)]
    param_up = [(p, p + udn[1]) for p, udn in zip(tparams.values(), updir_new)]
    f_update = theano.function([lr], [], updates=updir_new + param_up,
                               on_unused_input='ignore', name='rmsprop_update')
    return f_grad_shared, f_update


def sgd(lr, tparams, grads, inp, cost, state=None):
    """Plain SGD: p -= lr * g."""
    gshared = _accumulators(tparams, 'grad', None)
    f_grad_shared = theano.function(inp, cost, updates=list(zip(gshared, grads)),
                                    name='sgd_grad_shared')
    f_update = theano.function(
        [lr], [], name='sgd_update',
        updates=[(p, p - lr * g) for p, g in zip(tparams.values(), gshared)])
    return f_grad_shared, f_update


OPTIMIZERS = {'adadelta': adadelta, 'adam': adam, 'rmsprop': rmsprop, 'sgd': sgd}
# the options of training_functions (machinery/option_schema.py), dl4mt's defaults
OPTIMIZER_OPTIONS = (
    Option('clip_c', -1., 'gradients whose norm is above this are scaled down to it (-1: no '
           'clipping)', 'optimisation', GRAPH),
    Option('lrate', 0.01, 'learning rate of adam and sgd (adadelta and rmsprop ignore it)',
           'optimisation', GRAPH),
    Option('optimizer', 'rmsprop', 'adam (with --lrate 0.0004), adadelta and rmsprop (no '
           'learning rate), sgd (with --lrate 1)', 'optimisation', GRAPH,
           choices=tuple(sorted(OPTIMIZERS))),
)


def training_functions(options, tparams, inputs, cost, state=None, fused=True, mode=None):
    """(f_grad_shared, f_update) of ``options['optimizer']`` for ``cost``, the
    gradients clipped to norm ``options['clip_c']``: every training function
    of the project (nmt.py, language_model/lm.py, speed/benchmark.py, the
    tests) is built here.  Adadelta is fused unless ``fused`` is False and
    compiled with ``mode``; ``state`` receives the accumulators."""
    grads = tensor.grad(cost, wrt=list(tparams.values()))
    return _optimizer(options, tparams, grads, inputs, cost, state, fused, mode)


def _optimizer(options, tparams, grads, inputs, cost, state, fused, mode, norm2=None):
    extra = {'fused': fused, 'mode': mode} if options['optimizer'] == 'adadelta' else {}
    return OPTIMIZERS[options['optimizer']](
        tensor.scalar(name='lr'), tparams, clip_gradients(grads, options['clip_c'], norm2),
        inputs, cost, state=state, **extra)


def gradient_function(tparams, inputs, cost, mode=None):
    """f(*inputs) -> [cost] + the gradients of ``cost`` (not clipped): a
    worker's part of a data-parallel update (docs/distributed.md)."""
    grads = tensor.grad(cost, wrt=list(tparams.values()))
    return theano.function(inputs, [cost] + grads, name='worker_gradients', mode=mode)


def update_from_gradients(options, tparams, state=None, fused=True, mode=None,
                          sharded=False):
    """(f_grad_shared, f_update) as ``training_functions``', but
    f_grad_shared takes the whole batch's gradients and cost (one value per
    parameter, then the cost, which it returns) in place of the batch: the
    workers' summed gradients are clipped here, after the sum, as one
    process clips the gradient of the whole batch
    (docs/equations.md#regularisers-and-clipping).  ``sharded``: ``tparams``
    are one worker's group of the parameters, and (with clipping, clip_c > 0)
    f_grad_shared takes the squared norm of the whole gradient after the
    cost."""
    grads = [tensor.TensorType(p.dtype, p.broadcastable)(name=k + '_whole_batch_grad')
             for k, p in tparams.items()]
    cost = tensor.scalar(name='whole_batch_cost', dtype='float32')
    norm2 = None
    if sharded and options['clip_c'] > 0.:
        norm2 = tensor.scalar(name='whole_gradient_norm2', dtype='float32')
    inputs = grads + [cost] + ([norm2] if norm2 is not None else [])
    return _optimizer(options, tparams, grads, inputs, cost, state, fused, mode, norm2)
