"""Decoding with a compiled sampler (REFERENCE.md section 5).

Sampling, beam search and forced decoding over the ``f_init``/``f_next``
pair that ``nmt.build_sampler`` compiles.  Both are ``nmt.StepFunction``
objects: their inputs and outputs have names (``f_next.named(values)``), and
``f_next`` knows what the decoder carries from one step to the next
(``initial_carry``, ``reorder_carry``).  Nothing here imports Theano.
"""
import numpy


class Hypothesis(object):
    """A partial translation: its words, score (float32, -log p), and the
    attention rows over the source and over previous words of each step."""
    __slots__ = ('words', 'score', 'align', 'prev_align')

    def __init__(self, words, score, align, prev_align):
        self.words, self.score = words, score
        self.align, self.prev_align = align, prev_align

    def extend(self, word, score, out, row):
        prev = out.get('prev_alpha')
        return Hypothesis(self.words + [int(word)], score,
                          self.align + [out['alpha'][row]],
                          self.prev_align + ([] if prev is None else [prev[row]]))


def _best_candidates(cand_flat, n_best):
    """Indices of the n_best lowest scores, lowest first (ties: lower index)."""
    if n_best >= cand_flat.shape[0]:
        return numpy.argsort(cand_flat, kind='stable')[:n_best]
    part = numpy.argpartition(cand_flat, n_best - 1)[:n_best]
    return part[numpy.lexsort((part, cand_flat[part]))]


def _first_step(f_init, f_next, x):
    """Inputs of the first f_next call for one source sentence x (T x 1)."""
    init = f_init.named({'x': x})
    return init['ctx'], dict(f_next.initial_carry(1), state=init['state'],
                             y_prev=numpy.array([-1], dtype='int64'))


def _step(f_next, ctx0, inputs):
    """One f_next call for every live hypothesis (rows of inputs)."""
    n_live = inputs['state'].shape[0]
    return f_next.named(dict(inputs, ctx=numpy.tile(ctx0, [n_live, 1])))


def _next_inputs(f_next, out, hyps, survivors):
    """f_next's inputs for the surviving hypotheses (rows ``survivors``)."""
    inputs = f_next.reorder_carry(out, survivors)
    inputs['state'] = out['state'][survivors]
    inputs['y_prev'] = numpy.array([h.words[-1] for h in hyps], dtype='int64')
    return inputs


def beam_search(f_init, f_next, x, k, maxlen):
    """Hypotheses of the beam search for one sentence x (T x 1), finished
    ones first, in the order they finished, then unfinished ones."""
    ctx0, inputs = _first_step(f_init, f_next, x)
    live = [Hypothesis([], numpy.float32(0.), [], [])]
    finished = []
    for _ in range(maxlen):
        out = _step(f_next, ctx0, inputs)
        scores = numpy.array([h.score for h in live], dtype='float32')
        cand_flat = (scores[:, None] - numpy.log(out['probs'])).flatten()
        voc_size = out['probs'].shape[1]
        new_live, survivors = [], []
        for idx in _best_candidates(cand_flat, k - len(finished)):
            row, word = divmod(int(idx), voc_size)
            hyp = live[row].extend(word, cand_flat[idx], out, row)
            if word == 0:
                finished.append(hyp)
            else:
                new_live.append(hyp)
                survivors.append(row)
        live = new_live
        if not live or len(finished) >= k:
            break
        inputs = _next_inputs(f_next, out, live, numpy.array(survivors))
    return finished + live


def sample(f_init, f_next, x, maxlen, argmax=False):
    """One translation drawn from the model (or greedy with argmax):
    (word ids, -log p)."""
    ctx0, inputs = _first_step(f_init, f_next, x)
    words, score = [], 0
    for _ in range(maxlen):
        out = _step(f_next, ctx0, inputs)
        word = int(out['probs'][0].argmax() if argmax else out['sample'][0])
        words.append(word)
        score -= numpy.log(out['probs'][0, word])
        if word == 0:
            break
        inputs = _next_inputs(f_next, out, [Hypothesis(words, 0, [], [])],
                              numpy.array([0]))
    return words, score


def gen_sample(tparams, f_init, f_next, x, options, trng=None, k=1, maxlen=30,
               stochastic=True, argmax=False, return_alignment=False):
    """dl4mt's gen_sample: (samples, scores), plus with return_alignment the
    source attention and the attention over previous words (or states) of
    every sample, one row per output token."""
    if stochastic:
        if k > 1:
            raise ValueError('beam search does not support stochastic sampling')
        words, score = sample(f_init, f_next, x, maxlen, argmax)
        return (words, score, [], []) if return_alignment else (words, score)
    hyps = beam_search(f_init, f_next, x, k, maxlen)
    samples, scores = [h.words for h in hyps], [h.score for h in hyps]
    if return_alignment:
        return samples, scores, [h.align for h in hyps], [h.prev_align for h in hyps]
    return samples, scores


def best_hypothesis(samples, scores, normalize):
    """Index of the translation: lowest score, or score/length with -n."""
    scores = numpy.array(scores)
    if normalize:
        scores = scores / numpy.array([len(s) for s in samples])
    return int(numpy.argmin(scores))


def force_decode(f_init, f_next, x, y, return_attention=False):
    """-log p of each reference token (y ends with 0) from the one-step
    sampler; with return_attention also each step's attention over previous
    words or states (None for decoders without it)."""
    ctx0, inputs = _first_step(f_init, f_next, x)
    costs, attention = [], []
    for word in y:
        out = _step(f_next, ctx0, inputs)
        costs.append(-numpy.log(out['probs'][0, word]))
        attention.append(out['prev_alpha'][0] if 'prev_alpha' in out else None)
        inputs = _next_inputs(f_next, out, [Hypothesis([int(word)], 0, [], [])],
                              numpy.array([0]))
    costs = numpy.array(costs)
    return (costs, attention) if return_attention else costs


def translate_best(f_init, f_next, source_ids, k, normalize, maxlen):
    """For one source sentence (ids ending with eos): the chosen hypothesis."""
    x = numpy.array(source_ids, dtype='int64').reshape([len(source_ids), 1])
    hyps = beam_search(f_init, f_next, x, k, maxlen)
    best = best_hypothesis([h.words for h in hyps], [h.score for h in hyps], normalize)
    return hyps[best]
