"""The sampler: dl4mt's f_init and f_next, and the batched pair, compiled
with named inputs and outputs (``StepFunction``), over which beam_search.py
decodes.

``build_sampler`` compiles dl4mt's pair (one sentence, a sample drawn at
each step) or the batched one (a padded batch, log p, no sample);
``decoding_sampler`` is the pair that decodes a trained model (no noise).
The graphs are nmt_model.py's encoder and readout with one step of the
decoder (layers.py).
"""
from collections import OrderedDict

from theano_platform import theano_env  # noqa: F401  (must come before theano)
import numpy
import theano
import theano.tensor as tensor

from theano_platform import fast_ops
import layers
from nmt_model import build_encoder, build_readout, noise_stream

SAMPLER_INIT_INPUTS = ('x',)
SAMPLER_INIT_OUTPUTS = ('state', 'ctx')
# f_next: y_prev = -1 stands for the zero embedding of the first step.  The
# decoder's carried tensors (layers.Decoder.carried) follow the fixed inputs
# and outputs under their own names; 'prev_alpha' (hyps x steps, the
# attention over previous words or states) closes the outputs of the decoders
# that have it.
SAMPLER_STEP_INPUTS = ('y_prev', 'ctx', 'state')
SAMPLER_STEP_OUTPUTS = ('probs', 'sample', 'state', 'alpha')
# f_next's last output, 'log_probs', is log p of the next word (the log
# softmax of the readout, fast_ops.log_softmax): the search reads it, as the
# batched sampler's f_next outputs it.
# The batched sampler (build_sampler(..., batched=True)): f_init encodes a
# padded batch (x, x_mask: T x n) and also returns pctx, the attention's
# projection of the source (layers.source_projection), computed once per
# sentence instead of at every step; f_next takes, per hypothesis, its
# sentence's ctx, pctx and source mask (padding gets no attention, as in the
# training graph), and returns log p (one C op on the CPU: 5x faster than
# Theano's softmax and log here), not the probabilities, and draws no sample.
BATCH_INIT_INPUTS = ('x', 'x_mask')
BATCH_INIT_OUTPUTS = ('state', 'ctx', 'pctx')
BATCH_STEP_INPUTS = ('y_prev', 'ctx', 'pctx', 'x_mask', 'state')
BATCH_STEP_OUTPUTS = ('log_probs', 'state', 'alpha')


class StepFunction(object):
    """A compiled sampler function whose inputs and outputs have names.

    Called with positional arguments it is the Theano function (dl4mt's
    f_init / f_next, outputs as a list); ``named(values)`` takes and returns
    dicts (values may hold more than the inputs).  ``carried`` lists the
    decoder's layers.Carried tensors.
    """

    def __init__(self, function, inputs, outputs, options=None, carried=()):
        self.function, self.inputs, self.outputs = function, inputs, outputs
        self.options, self.carried = options, list(carried)

    def __call__(self, *args):
        return self.function(*args)

    def named(self, values):
        return OrderedDict(zip(self.outputs,
                               self.function(*[values[n] for n in self.inputs])))

    def initial_carry(self, n_hyps):
        """The carried tensors before the first step (Carried.rows rows,
        filled with Carried.fill)."""
        carry = {}
        for c in self.carried:
            sizes = {'steps': c.rows, 'hyps': n_hyps}
            shape = [sizes[a] if a in sizes else self.options[a] for a in c.axes]
            carry[c.name] = numpy.full(shape, c.fill, dtype='float32')
        return carry

    def hyps_axis(self, name):
        """The axis along which the named input or output has one entry per
        hypothesis (None: shared by all of them)."""
        for c in self.carried:
            if c.name == name:
                return c.axes.index('hyps') if 'hyps' in c.axes else None
        return 1 if name in ('ctx', 'pctx', 'x_mask') else 0

    def take_hyps(self, values, rows):
        """Named inputs or outputs of the hypotheses ``rows``."""
        out = OrderedDict()
        for name, value in values.items():
            axis = self.hyps_axis(name)
            out[name] = value if axis is None else value.take(rows, axis=axis)
        return out

    def reorder_carry(self, outputs, rows):
        """The carried outputs of the hypotheses ``rows``, as next inputs
        (a carried tensor without a 'hyps' axis is shared: passed on)."""
        return dict(self.take_hyps(OrderedDict((c.name, outputs[c.name])
                                               for c in self.carried), rows))


def build_sampler(tparams, options, trng, use_noise, batched=False, mode=None):
    """(f_init, f_next) as StepFunctions: dl4mt's (SAMPLER_* names), or with
    batched=True the batched sampler (BATCH_* names); mode: Theano's."""
    x = tensor.matrix('x', dtype='int64')
    if batched:
        x_mask = tensor.matrix('x_mask', dtype='float32')
        ctx, init_state = build_encoder(tparams, options, x, x_mask)
        pctx = layers.source_projection(tparams, ctx)
        f_init = StepFunction(theano.function([x, x_mask], [init_state, ctx, pctx],
                                              name='f_init', mode=mode),
                              BATCH_INIT_INPUTS, BATCH_INIT_OUTPUTS, options)
    else:
        ctx, init_state = build_encoder(tparams, options, x)
        f_init = StepFunction(theano.function([x], [init_state, ctx], name='f_init',
                                              mode=mode),
                              SAMPLER_INIT_INPUTS, SAMPLER_INIT_OUTPUTS, options)
    return f_init, _build_f_next(tparams, options, trng, use_noise, batched, mode)


def decoding_sampler(tparams, options, batched=True, mode=None):
    """build_sampler's pair for decoding a trained model: without noise
    (use_noise 0), the sampling stream noise_stream's."""
    return build_sampler(tparams, options, noise_stream(options),
                         theano.shared(numpy.float32(0.)), batched=batched, mode=mode)


def _step_mode(mode):
    """The mode of f_next: ``mode``, or Theano's default without garbage
    collection: the step's intermediate results keep their arrays between
    calls (the logits alone are 38 MB for 192 hypotheses at the papers'
    size; fresh arrays cost page faults): a step of 192 hypotheses 10-13%
    faster, a whole batched search ~2% (fewer hypotheses in its last steps)."""
    if mode is not None:
        return mode
    from theano.compile.mode import get_default_mode
    return get_default_mode().clone(link_kwargs={'allow_gc': False})


def _build_f_next(tparams, options, trng, use_noise, batched, mode):
    y = tensor.vector('y_prev', dtype='int64')
    inputs = OrderedDict([('y_prev', y), ('ctx', tensor.tensor3('ctx', dtype='float32'))])
    if batched:
        inputs['pctx'] = tensor.tensor3('pctx', dtype='float32')
        inputs['x_mask'] = tensor.matrix('x_mask', dtype='float32')
    inputs['state'] = tensor.matrix('state', dtype='float32')
    emb = tensor.switch(y[:, None] < 0,
                        tensor.alloc(numpy.float32(0.), 1, tparams['Wemb_dec'].shape[1]),
                        tparams['Wemb_dec'][y])
    decoder = layers.decoder_of(options)
    carried = decoder.carried(options)
    carry = OrderedDict((c.name, tensor.TensorType('float32', (False,) * len(c.axes))(c.name))
                        for c in carried)
    dec = decoder.apply(tparams, emb, options, prefix='decoder', mask=None,
                        context=inputs['ctx'], one_step=True, init_state=inputs['state'],
                        carry=carry, context_mask=inputs.get('x_mask'),
                        pctx=inputs.get('pctx'))
    logits = build_readout(tparams, options, dec, use_noise, trng)
    if batched:
        outs = OrderedDict([('log_probs', fast_ops.log_softmax(logits))])
    else:
        probs = tensor.nnet.softmax(logits)
        outs = OrderedDict([('probs', probs),
                            ('sample', trng.multinomial(pvals=probs).argmax(1))])
    outs.update([('state', dec['states']), ('alpha', dec['alphas'])])
    outs.update((name, dec['carry'][name]) for name in carry)
    if 'prev_alphas' in dec:
        outs['prev_alpha'] = dec['prev_alphas']
    if not batched:
        outs['log_probs'] = fast_ops.log_softmax(logits)
    inputs.update(carry)
    f_next = theano.function(list(inputs.values()), list(outs.values()), name='f_next',
                             on_unused_input='ignore', mode=_step_mode(mode))
    return StepFunction(f_next, tuple(inputs), tuple(outs), options, carried)


