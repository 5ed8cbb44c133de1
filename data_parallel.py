"""Synchronous data-parallel updates: each worker's share of a batch, the
weighted sum of the workers' gradients, and the one update, each worker
applying it to its own share of the parameters.

Every worker reads the same batches (same data, same seed) and prepares the
whole batch as one process would (``prepare_data``: the maxlen rule, the
padding), then takes its columns (sentences) ``share_bounds``: worker k of N
gets n_k of the batch's n sentences, padded as the whole batch is.  The
cost of an update is the mean over the batch's sentences plus terms of the
parameters alone (docs/equations.md#regularisers-and-clipping):

    C = (1/n) sum_s c_s + R(theta) = sum_k (n_k/n) C_k,
    C_k = (1/n_k) sum_{s in share k} c_s + R(theta),

so the gradient of the whole batch is sum_k (n_k/n) dC_k/dtheta (the
weights sum to 1, so R counts once).  Each worker multiplies its gradients
(and its cost) by n_k/n into one float32 buffer.

The optimizer's step is split over the workers too (its cost is the same on
every worker, so that one worker doing all of it would not get faster with
more workers): the parameters, in their order, fall into N contiguous groups
of about equal size (``parameter_groups``), and worker k keeps the
optimizer's accumulators of group k alone.  An update is then

1. the sum of the buffers over the workers, each worker receiving only the
   sum over its own group (a reduce-scatter: each worker sends every other
   the piece of its buffer that the other sums);
2. the squared norm of the whole batch's gradient, |g|^2 = sum_k |g_k|^2,
   and the batch's cost: two numbers summed over the workers;
3. worker k's clipping (clip_c, on the whole gradient's norm, as one process
   clips) and optimizer step on group k (``optimizers.update_from_gradients``
   with ``sharded=True``);
4. the new parameters of every group sent to every worker (MPI all-gather).

A checkpoint gathers every worker's accumulators (training_loop.py), so that
its file is the one a single process writes.  A worker whose share of the
batch is empty (a batch of fewer sentences than workers) adds zeros.
"""
from collections import OrderedDict

import numpy

from optimizers import gradient_function, update_from_gradients


def share_bounds(n, size, rank):
    """(first, end) of worker ``rank``'s sentences among ``n``: contiguous
    shares whose sizes differ by at most one, the larger ones first."""
    base, extra = divmod(n, size)
    first = rank * base + min(rank, extra)
    return first, first + base + (1 if rank < extra else 0)


def parameter_groups(sizes, size):
    """[(first, end)] of each worker's parameters (indices into ``sizes``,
    the parameters' numbers of values, in order): contiguous groups, each
    ending at the parameter where the running total comes nearest to its
    share k/size of all values.  A group may be empty (fewer parameters than
    workers, or one parameter larger than a share)."""
    ends = numpy.cumsum(sizes)
    total = float(ends[-1]) if len(ends) else 0.
    bounds, first = [], 0
    for k in range(1, size):
        target = total * k / size
        end = first
        while end < len(sizes) and abs(ends[end] - target) < abs((ends[end - 1] if end else 0)
                                                                - target):
            end += 1
        bounds.append((first, end))
        first = end
    bounds.append((first, len(sizes)))
    return bounds


def groups_of(params, size):
    """``parameter_groups`` of the shared variables ``params``."""
    return parameter_groups([p.get_value(borrow=True).size for p in params], size)


def own_parameters(tparams, world):
    """The OrderedDict of ``tparams`` whose optimizer step this worker takes."""
    first, end = groups_of(tparams.values(), world.size)[world.rank]
    return OrderedDict(list(tparams.items())[first:end])


def compile_data_parallel(options, tparams, inputs, cost, state, world):
    """(f_worker_gradients, f_grad_shared, f_update) of a worker: its
    gradients, and the optimizer over the summed gradients of its own group
    of parameters (``state`` receives that group's accumulators)."""
    f_gradients = gradient_function(tparams, inputs, cost)
    own = own_parameters(tparams, world)
    if not own:
        return f_gradients, None, None
    f_grad_shared, f_update = update_from_gradients(options, own, state=state, sharded=True)
    return f_gradients, f_grad_shared, f_update


def squared_norm(values, chunk=1 << 16):
    """The sum of the squares of float32 ``values``, accumulated in float64
    (as Theano's sum of float32 accumulates) a chunk at a time."""
    total = 0.
    for i in range(0, len(values), chunk):
        piece = values[i:i + chunk].astype('float64')
        total += numpy.dot(piece, piece)
    return total


class FlatArrays(object):
    """One contiguous float32 buffer, and a view of it for each shape."""

    def __init__(self, shapes):
        sizes = [int(numpy.prod(s)) for s in shapes]
        self.ends = numpy.cumsum([0] + sizes)
        self.buffer = numpy.zeros(int(self.ends[-1]), dtype='float32')
        self.views = [self.buffer[a:b].reshape(shape)
                      for a, b, shape in zip(self.ends, self.ends[1:], shapes)]


class GradientExchange(object):
    """One worker's part of each update: ``update(inputs, lrate)`` returns
    the whole batch's cost, every worker's parameters updated alike."""

    def __init__(self, world, model, clip_c):
        self.world, self.model, self.clips = world, model, clip_c > 0.
        self.params = list(model.tparams.values())
        shapes = [p.get_value(borrow=True).shape for p in self.params]
        groups = groups_of(self.params, world.size)
        self.gradients, self.values = FlatArrays(shapes), FlatArrays(shapes)
        ends = self.gradients.ends
        # each group's first value and number of values in the flat buffers
        self.offsets = [int(ends[a]) for a, _ in groups]
        self.counts = [int(ends[b] - ends[a]) for a, b in groups]
        self.first, self.end = groups[world.rank]
        self.own_sum = FlatArrays(shapes[self.first:self.end])

    def update(self, inputs, lrate):
        """inputs: the whole batch's arrays, sentences along axis 1."""
        part, model = self.part, self.model
        totals = numpy.array([part('gradients', self._weighted_gradients, inputs), 0.])
        part('sum', self.world.reduce_scatter, self.gradients.buffer, self.own_sum.buffer,
             self.offsets, self.counts)
        cost, norm2 = part('norm', self._totals, totals)
        if model.f_grad_shared is not None:
            scalars = [numpy.float32(cost)] + ([numpy.float32(norm2)] if self.clips else [])
            part('clip', model.f_grad_shared, *(self.own_sum.views + scalars))
            part('optimizer', model.f_update, lrate)
        part('share', self._share_parameters)
        return numpy.float32(cost)

    def part(self, name, function, *args):
        """``function(*args)``: the part ``name`` of an update (a subclass
        may time it: speed/benchmark.py)."""
        return function(*args)

    def _totals(self, totals):
        """(the batch's cost, the squared norm of its whole gradient): this
        worker's weighted cost and its group's squared norm, summed over the
        workers."""
        if self.clips:
            totals[1] = squared_norm(self.own_sum.buffer)
        return self.world.sum_arrays(totals, 'the sum of the cost and the norm')

    def _weighted_gradients(self, inputs):
        """This worker's share's gradients times n_k/n into the gradient
        buffer; returns its weighted cost."""
        n = inputs[0].shape[1]
        first, end = share_bounds(n, self.world.size, self.world.rank)
        if end == first:
            self.gradients.buffer[:] = 0.
            return 0.
        share = [numpy.ascontiguousarray(a[:, first:end]) for a in inputs]
        outputs = self.model.f_worker_gradients(*share)
        weight = numpy.float32((end - first) / float(n))
        for view, value in zip(self.gradients.views, outputs[1:]):
            numpy.multiply(value, weight, out=view)
        return float(outputs[0]) * weight

    def _share_parameters(self):
        """Every group's new values to every worker (all-gather)."""
        views = self.values.views
        for i in range(self.first, self.end):
            views[i][...] = self.params[i].get_value(borrow=True)
        self.world.gather_arrays(self.values.buffer, self.offsets, self.counts)
        for i, p in enumerate(self.params):
            if not self.first <= i < self.end:
                p.set_value(views[i], borrow=True)
