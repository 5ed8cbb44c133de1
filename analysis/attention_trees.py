"""Binary trees from the attention over previous words (NAACL Algorithm 1, section 8.2).

A tree is a nested list whose leaves are token positions (ints): ``[0, [[1, 2],
[3, 4]]]`` is ``(w0 ((w1 w2) (w3 w4)))``.

Algorithm 1 as implemented here (the printed loop condition ``max(A[:,i]) = 0
or i < n`` is true for every i < n, so the printed loop never splits before n;
the text says the sentence is split "every time the focus of attention changes
to a new word, from left to right"):

* A[t, k] is the weight of the prediction of word t on word k < t; the start
  item(s) and the '<eos>' prediction are left out.
* The focus of prediction t within the span s[a:b] is the word a <= k < t with
  the highest weight (ties: the nearest); the weights outside the span are
  ignored, as the algorithm recurses on the sub-matrix A[i:n, i:n].  A
  prediction without a word of the span before it, or with weight 0 on all of
  them, has no focus (that is the ``max(A[:,i]) = 0`` case: it never splits).
* Scanning t = a+1, a+2, ... the span is split before word t at the first
  prediction whose focus differs from the focus of the last prediction that
  had one.  s[a:t] becomes the left child (one flat sub-phrase) and the
  algorithm recurses on s[t:b]; without a change the span stays one phrase.

So the first sub-phrase of a span of two words or more has at least two words
(prediction a+1 can only look at word a, which fixes the first focus), and a
decoder that always looks at the word just before (the memory RNN) gives pairs.
The right-branching baseline (footnote 4) splits off one word at a time.
"""


def focus(A, t, start):
    """Arg max of A[t, start:t] (ties: the nearest word), or None."""
    if t <= start:
        return None
    row = A[t, start:t]
    best = len(row) - 1 - int(row[::-1].argmax())
    return start + best if row[best] > 0 else None


def split_point(A, start, end):
    """The first t in (start, end) where the focus moves to a new word, else end."""
    last = None
    for t in range(start + 1, end):
        f = focus(A, t, start)
        if f is None:
            continue
        if last is not None and f != last:
            return t
        last = f
    return end


def phrase(start, end):
    """A flat sub-phrase: one leaf, or the list of its word positions."""
    return start if end - start == 1 else list(range(start, end))


def fold_right(chunks):
    """[c0, c1, c2] -> [c0, [c1, c2]]: each chunk splits off from the rest."""
    tree = chunks[-1]
    for chunk in reversed(chunks[:-1]):
        tree = [chunk, tree]
    return tree


def attention_tree(A):
    """Algorithm 1 on the n x n word-attention matrix A; None for n = 0."""
    n = len(A)
    chunks, start = [], 0
    while start < n:
        end = split_point(A, start, n)
        chunks.append(phrase(start, end))
        start = end
    return fold_right(chunks) if chunks else None


def right_branching_tree(n):
    """(w0 (w1 (... (w_{n-2} w_{n-1})))), None for n = 0."""
    return fold_right(list(range(n))) if n else None


def leaves(tree):
    if isinstance(tree, int):
        return [tree]
    return [leaf for child in tree for leaf in leaves(child)]


def constituents(tree):
    """The set of (start, end) spans of the nodes that cover two words or more."""
    spans = set()

    def visit(node):
        if isinstance(node, int):
            return node, node + 1
        bounds = [visit(child) for child in node]
        span = (bounds[0][0], bounds[-1][1])
        if span[1] - span[0] >= 2:
            spans.add(span)
        return span

    if tree is not None:
        visit(tree)
    return spans


PTB_ESCAPES = {'(': '-LRB-', ')': '-RRB-'}


def brackets(tree, words):
    """The tree as unlabeled brackets, e.g. '((the cat) sat)'; '()' when empty."""
    if tree is None:
        return '()'
    if isinstance(tree, int):
        return '(%s)' % _node_text(tree, words)
    return _node_text(tree, words)


def _node_text(node, words):
    if isinstance(node, int):
        return PTB_ESCAPES.get(words[node], words[node])
    return '(' + ' '.join(_node_text(child, words) for child in node) + ')'
