"""Synchronous data-parallel updates: each worker's share of a batch, the
weighted sum of the workers' gradients, and the one update all apply.

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
(and its cost) by n_k/n into one float32 buffer; MPI sums the buffers
(``distributed.MPIWorld.sum_arrays``); every worker then clips the sum
(clip_c, on the whole batch's gradient as one process does) and applies the
same optimizer step (``optimizers.update_from_gradients``), so that the
parameters stay identical on every worker.  A worker whose share is empty
(a batch of fewer sentences than workers) adds zeros.
"""
import numpy

from optimizers import gradient_function, update_from_gradients


def share_bounds(n, size, rank):
    """(first, end) of worker ``rank``'s sentences among ``n``: contiguous
    shares whose sizes differ by at most one, the larger ones first."""
    base, extra = divmod(n, size)
    first = rank * base + min(rank, extra)
    return first, first + base + (1 if rank < extra else 0)


def compile_data_parallel(options, tparams, inputs, cost, state):
    """(f_worker_gradients, f_grad_shared, f_update) of a worker: its
    gradients, and the optimizer over the summed ones."""
    f_gradients = gradient_function(tparams, inputs, cost)
    f_grad_shared, f_update = update_from_gradients(options, tparams, state=state)
    return f_gradients, f_grad_shared, f_update


class GradientExchange(object):
    """One worker's part of each update: ``gradient_step(inputs)`` returns
    the whole batch's cost after f_grad_shared has taken the whole batch's
    gradients (f_update then applies them, as in one process)."""

    def __init__(self, world, model):
        self.world, self.model = world, model
        shapes = [p.get_value(borrow=True).shape for p in model.tparams.values()] + [()]
        sizes = [int(numpy.prod(s)) for s in shapes]
        ends = numpy.cumsum(sizes)
        self.buffer = numpy.zeros(int(ends[-1]), dtype='float32')
        # f_grad_shared's inputs: views of the buffer (no copies)
        self.views = [self.buffer[end - size:end].reshape(shape)
                      for end, size, shape in zip(ends, sizes, shapes)]

    def gradient_step(self, inputs):
        """inputs: the whole batch's arrays, sentences along axis 1."""
        n = inputs[0].shape[1]
        first, end = share_bounds(n, self.world.size, self.world.rank)
        if end > first:
            share = [numpy.ascontiguousarray(a[:, first:end]) for a in inputs]
            outputs = self.model.f_worker_gradients(*share)
            weight = numpy.float32((end - first) / float(n))
            # outputs: [cost] + gradients; the buffer: gradients, then cost
            for view, value in zip(self.views, outputs[1:] + outputs[:1]):
                numpy.multiply(value, weight, out=view)
        else:
            self.buffer[:] = 0.
        self.world.sum_arrays(self.buffer)
        return self.model.f_grad_shared(*self.views)
