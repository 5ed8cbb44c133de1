"""Decoding with compiled samplers (docs/equations.md#decoding-beam-search).

Sampling, beam search and forced decoding over the ``f_init``/``f_next``
pairs that ``sampler.build_sampler`` compiles.  Both are ``sampler.StepFunction``
objects: their inputs and outputs have names (``f_next.named(values)``), and
``f_next`` knows what the decoder carries from one step to the next
(``initial_carry``, ``reorder_carry``).  Nothing here imports Theano.

One beam search serves every case: ``batch_beam_search`` decodes the columns
of a padded batch at once, each sentence with its own beam (one ``f_next``
call per model for all live hypotheses of all sentences; a sentence leaves
the batch when its search ends), and gives for each sentence what the
one-sentence search of docs/equations.md#decoding-beam-search gives;
``beam_search`` is its one-column case.  Several samplers form an
ensemble: at each step the candidates are scored with the mean of the
models' log-probabilities (as Nematus), each model carrying its own state.
Either sampler kind works (dl4mt's, or the batched one with the source mask
and the precomputed ``pctx``): a step function takes from the values it is
given the ones it names.
"""
import numpy

from machinery.vocab import EOS, UNK

# f_next always gets at least this many rows (the last one repeated): BLAS
# (OpenBLAS) computes the product of a matrix of a few rows with other
# kernels, which round differently, than one of many rows; padded, every
# hypothesis gets the same numbers however many share the call (one sentence
# or a batch; layers.dot_vector does the same for matrix-vector products).
MIN_ROWS = 16


class Hypothesis(object):
    """A partial translation: its words, score (float32, -log p), the -log p
    of each word, and the attention rows over the source and over previous
    words of each step (empty when the search keeps no attention)."""
    __slots__ = ('words', 'score', 'costs', 'align', 'prev_align')

    def __init__(self, words, score, costs=(), align=(), prev_align=()):
        self.words, self.score, self.costs = list(words), score, list(costs)
        self.align, self.prev_align = list(align), list(prev_align)

    def extend(self, word, score, cost, attention, row):
        """This hypothesis followed by ``word``; ``attention`` (None: keep
        none) holds this step's rows: 'alpha' and, maybe, 'prev_alpha'."""
        hyp = Hypothesis.__new__(Hypothesis)
        hyp.words, hyp.score = self.words + [int(word)], score
        hyp.costs = self.costs + [cost]
        hyp.align, hyp.prev_align = self.align, self.prev_align
        if attention is not None:
            hyp.align = self.align + [attention['alpha'][row]]
            prev = attention.get('prev_alpha')
            if prev is not None:
                hyp.prev_align = self.prev_align + [prev[row]]
        return hyp


def _best_candidates(cand, n_best):
    """Flat indices of the n_best lowest entries of cand (live x V), lowest
    first (ties: lower index)."""
    flat = cand.ravel()
    if n_best >= flat.shape[0]:
        return numpy.argsort(flat, kind='stable')[:n_best]
    if cand.shape[0] >= n_best:
        # each row's minimum is a candidate: the n_best-th lowest of them
        # bounds the n_best lowest entries (cheaper than partitioning all)
        bound = numpy.partition(cand.min(axis=1), n_best - 1)[n_best - 1]
    else:
        bound = numpy.partition(flat, n_best - 1)[n_best - 1]
    part = numpy.flatnonzero(flat <= bound)
    return part[numpy.lexsort((part, flat[part]))][:n_best]


class _Beam(object):
    """The beam of one sentence (docs/equations.md#decoding-beam-search):
    live hypotheses, finished ones, and the steps left before maxlen."""

    def __init__(self, k, maxlen):
        self.k, self.steps_left = k, maxlen
        self.live, self.finished = [Hypothesis([], numpy.float32(0.))], []

    @property
    def done(self):
        return not self.live or len(self.finished) >= self.k or self.steps_left <= 0

    def advance(self, log_probs, attention):
        """One step from the live hypotheses' next-word log-probabilities
        (live x V); returns the rows of the hypotheses that stay live."""
        scores = numpy.array([h.score for h in self.live], dtype='float32')
        cand = scores[:, None] - log_probs
        cand_flat = cand.ravel()
        voc_size = log_probs.shape[1]
        new_live, survivors = [], []
        for idx in _best_candidates(cand, self.k - len(self.finished)):
            if not numpy.isfinite(cand_flat[idx]):
                break  # only a suppressed word (--suppress-unk) is left
            row, word = divmod(int(idx), voc_size)
            hyp = self.live[row].extend(word, cand_flat[idx], -log_probs[row, word],
                                        attention, row)
            if word == EOS:
                self.finished.append(hyp)
            else:
                new_live.append(hyp)
                survivors.append(row)
        self.live, self.steps_left = new_live, self.steps_left - 1
        return survivors

    def hypotheses(self):
        """Finished hypotheses in the order they finished, then unfinished."""
        return self.finished + self.live


class _Decoder(object):
    """The samplers of an ensemble run over one padded batch: each model's
    encoding of the sentences and its f_next inputs for the live rows."""

    def __init__(self, samplers, x, x_mask):
        self.samplers, self.x_mask = samplers, x_mask
        n = x.shape[1]
        self.encoded, self.inputs = [], []
        for f_init, f_next in samplers:
            init = f_init.named({'x': x, 'x_mask': x_mask})
            self.encoded.append(init)
            self.inputs.append(dict(f_next.initial_carry(n), state=init['state'],
                                    y_prev=numpy.full(n, -1, dtype='int64')))
        self._source, self._gathered = None, None

    def _per_row(self, source):
        """Each model's ctx, pctx and source mask for rows of sentences
        ``source`` (gathered again only when ``source`` changes)."""
        if self._source is None or not numpy.array_equal(source, self._source):
            self._gathered = []
            for init, (_, f_next) in zip(self.encoded, self.samplers):
                values = {'x_mask': self.x_mask}
                values.update((name, init[name]) for name in ('ctx', 'pctx') if name in init)
                self._gathered.append({name: v.take(source, axis=1)
                                       for name, v in values.items()
                                       if name in f_next.inputs})
            self._source = source
        return self._gathered

    def step(self, source):
        """Every model's f_next outputs for the live rows (sentences ``source``)."""
        n = len(source)
        pad = None
        if n < MIN_ROWS:
            pad = numpy.concatenate([numpy.arange(n), numpy.full(MIN_ROWS - n, n - 1)])
            source = source[pad]
        outs = []
        for (_, f_next), inputs, gathered in zip(self.samplers, self.inputs,
                                                 self._per_row(source)):
            if pad is not None:
                inputs = f_next.take_hyps(inputs, pad)
            out = f_next.named(dict(inputs, **gathered))
            outs.append(out if pad is None else f_next.take_hyps(out, numpy.arange(n)))
        return outs

    def advance(self, outs, rows, words):
        """Next inputs: the hypotheses of ``rows`` extended by ``words``."""
        for m, ((_, f_next), out) in enumerate(zip(self.samplers, outs)):
            inputs = f_next.reorder_carry(out, rows)
            inputs['state'] = out['state'][rows]
            inputs['y_prev'] = numpy.asarray(words, dtype='int64')
            self.inputs[m] = inputs


def log_probabilities(out):
    """log p of the next word (rows x V) from one model's f_next outputs:
    its 'log_probs' (the log softmax of its logits), or log of its
    probabilities if it has none."""
    if 'log_probs' in out:
        return out['log_probs']
    return numpy.log(out['probs'])


def ensemble_log_probs(outs, suppress_unk=False):
    """log p of the next word (rows x V): the mean over the models of their
    log-probabilities; with suppress_unk UNK gets -inf."""
    log_probs = log_probabilities(outs[0])
    if len(outs) > 1:
        log_probs = sum(log_probabilities(out) for out in outs) / numpy.float32(len(outs))
    if suppress_unk:
        log_probs[:, UNK] = -numpy.inf
    return log_probs


def ensemble_attention(outs):
    """This step's attention rows: the source attention averaged over the
    models, the attention over previous words of the first model with one."""
    alpha = outs[0]['alpha']
    if len(outs) > 1:
        alpha = sum(out['alpha'] for out in outs) / numpy.float32(len(outs))
    prev = next((out['prev_alpha'] for out in outs if 'prev_alpha' in out), None)
    return {'alpha': alpha, 'prev_alpha': prev}


def batch_beam_search(samplers, x, x_mask, k, maxlen, suppress_unk=False,
                      keep_attention=True):
    """The beam search (docs/equations.md#decoding-beam-search) for every
    column of the padded batch x (T x n; x_mask marks each sentence's ids,
    eos included).

    samplers: [(f_init, f_next)] (several: an ensemble); maxlen: an int or one
    per sentence.  Returns, per sentence, what ``beam_search`` returns.
    """
    n = x.shape[1]
    lengths = x_mask.sum(0).astype('int64')
    maxlens = numpy.broadcast_to(numpy.asarray(maxlen, dtype='int64'), (n,))
    beams = [_Beam(k, int(m)) for m in maxlens]
    decoder = _Decoder(samplers, x, x_mask)
    active = [s for s in range(n) if not beams[s].done]
    while active:
        source = numpy.repeat(active, [len(beams[s].live) for s in active])
        outs = decoder.step(source)
        log_probs = ensemble_log_probs(outs, suppress_unk)
        attention = ensemble_attention(outs) if keep_attention else None
        rows, start = [], 0
        for s in active:
            n_live = len(beams[s].live)
            view = None if attention is None else {
                'alpha': attention['alpha'][start:start + n_live, :lengths[s]],
                'prev_alpha': None if attention['prev_alpha'] is None
                else attention['prev_alpha'][start:start + n_live]}
            survivors = beams[s].advance(log_probs[start:start + n_live], view)
            if not beams[s].done:
                rows.extend(start + r for r in survivors)
            start += n_live
        active = [s for s in active if not beams[s].done]
        if active:
            decoder.advance(outs, numpy.array(rows, dtype='int64'),
                            [h.words[-1] for s in active for h in beams[s].live])
    return [beam.hypotheses() for beam in beams]


def beam_search(f_init, f_next, x, k, maxlen):
    """Hypotheses of the beam search for one sentence x (T x 1), finished
    ones first, in the order they finished, then unfinished ones."""
    return batch_beam_search([(f_init, f_next)], x, numpy.ones(x.shape, dtype='float32'),
                             k, maxlen)[0]


def padded_batch(sources):
    """x and x_mask (T x n) of id lists that end with eos (as the sampler
    takes them: every id is a real row)."""
    x = numpy.zeros((max(len(s) for s in sources), len(sources)), dtype='int64')
    x_mask = numpy.zeros(x.shape, dtype='float32')
    for i, ids in enumerate(sources):
        x[:len(ids), i] = ids
        x_mask[:len(ids), i] = 1.
    return x, x_mask


def length_sorted_batches(sources, batch_size):
    """Lists of indices into sources: sentences of similar lengths together
    (longest first)."""
    order = sorted(range(len(sources)), key=lambda i: -len(sources[i]))
    return [order[b:b + batch_size] for b in range(0, len(order), batch_size)]


def sorted_batches(sources, batch_size):
    """The batches [(index, source ids)] of length_sorted_batches."""
    return [[(i, sources[i]) for i in indices]
            for indices in length_sorted_batches(sources, batch_size)]


def search_batch(samplers, batch, k, maxlen, **options):
    """[(index, hypotheses)] of a batch [(index, source ids ending with eos)]:
    the batched search over the samplers (batch_beam_search and its options)."""
    x, x_mask = padded_batch([ids for _, ids in batch])
    beams = batch_beam_search(samplers, x, x_mask, k, maxlen, **options)
    return [(index, hyps) for (index, _), hyps in zip(batch, beams)]


def sample(f_init, f_next, x, maxlen, argmax=False):
    """One translation drawn from the model (or greedy with argmax):
    (word ids, -log p).  Needs dl4mt's sampler (its 'sample' output)."""
    decoder = _Decoder([(f_init, f_next)], x, numpy.ones(x.shape, dtype='float32'))
    source = numpy.zeros(1, dtype='int64')
    words, score = [], 0
    for _ in range(maxlen):
        out = decoder.step(source)[0]
        word = int(out['probs'][0].argmax() if argmax else out['sample'][0])
        words.append(word)
        score -= log_probabilities(out)[0, word]
        if word == EOS:
            break
        decoder.advance([out], source, [word])
    return words, score


def gen_sample(tparams, f_init, f_next, x, options, trng=None, k=1, maxlen=30,
               stochastic=True, argmax=False, return_alignment=False):
    """dl4mt's gen_sample: (samples, scores), plus with return_alignment the
    source attention and the attention over previous words (or states) of
    every sample, one row per output token.

    tparams, options and trng are unused, as in dl4mt: the compiled f_init
    and f_next hold the parameters, the options and the sampling stream.
    They stay in dl4mt's signature, which its callers pass positionally."""
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


def normalized_scores(hyps, normalize):
    """Each hypothesis' score, divided by its length (eos counted) with -n."""
    scores = numpy.array([h.score for h in hyps], dtype='float64')
    if normalize:
        scores = scores / numpy.array([len(h.words) for h in hyps])
    return scores


def ranked(hyps, normalize):
    """(hypothesis, score) pairs, best first (ties: search order): the
    n-best list; its first entry is the translation."""
    scores = normalized_scores(hyps, normalize)
    order = numpy.argsort(scores, kind='stable')
    return [(hyps[i], float(scores[i])) for i in order]


def batch_force_decode(f_init, f_next, x, x_mask, y, y_mask, return_attention=False):
    """-log p (T_y x n) of each reference token (y, y_mask: padded, each
    sentence ending with eos) from the one-step sampler, all sentences at
    once; masked rows are 0.  With return_attention also each step's
    attention over previous words or states (None for decoders without it)."""
    decoder = _Decoder([(f_init, f_next)], x, x_mask)
    n = x.shape[1]
    rows = numpy.arange(n)
    costs = numpy.zeros(y.shape, dtype='float32')
    attention = []
    for t in range(y.shape[0]):
        out = decoder.step(rows)[0]
        costs[t] = -log_probabilities(out)[rows, y[t]] * y_mask[t]
        attention.append(out.get('prev_alpha'))
        decoder.advance([out], rows, y[t])
    return (costs, attention) if return_attention else costs


def force_decode(f_init, f_next, x, y, return_attention=False):
    """-log p of each reference token (y ends with 0) from the one-step
    sampler; with return_attention also each step's attention over previous
    words or states (None for decoders without it)."""
    y = numpy.asarray(y, dtype='int64')[:, None]
    costs, attention = batch_force_decode(
        f_init, f_next, x, numpy.ones(x.shape, dtype='float32'), y,
        numpy.ones(y.shape, dtype='float32'), return_attention=True)
    costs = costs[:, 0]
    attention = [None if a is None else a[0] for a in attention]
    return (costs, attention) if return_attention else costs

