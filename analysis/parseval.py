"""Unlabeled ParsEval (Black et al. 1991) of trees over a translation against
reference parses in Penn Treebank brackets, one per line (NAACL section 8.2).

* Constituents are (start, end) word spans; single words are excluded (the
  whole-sentence span is counted, as the paper excludes single words only);
  labels and unary chains are ignored (a span is counted once).
* Precision = matched / constituents of the trees, recall = matched /
  constituents of the reference parses, both summed over the corpus.
* The parse's leaves must be the translation's tokens: PTB escapes (-LRB-,
  ``...) and Moses' XML escapes (&quot; ...) are undone on both sides, anything
  else that differs is an error.  With ``bpe`` ('@@' continuation marks), the
  tree is built over the model's subword units and compared with a parse of
  the merged words: a span counts if it begins and ends at word boundaries
  (then it is mapped to words); spans that cut a word are dropped.
* An empty parse line means "no parse": that sentence is skipped and counted.
"""
import re

from machinery.text_io import InputError

UNESCAPE = {'-LRB-': '(', '-RRB-': ')', '-LSB-': '[', '-RSB-': ']', '-LCB-': '{',
            '-RCB-': '}', '``': '"', "''": '"', '&quot;': '"', '&apos;': "'",
            '&amp;': '&', '&lt;': '<', '&gt;': '>', '&#91;': '[', '&#93;': ']',
            '&#124;': '|'}
BPE_MARK = '@@'
_PTB_TOKEN = re.compile(r'\(|\)|[^\s()]+')


def normalise(token):
    return UNESCAPE.get(token, token)


def _parse_node(tokens, pos, leaves, where):
    """Node starting at tokens[pos] == '('; returns (tree or None, next pos)."""
    pos, first_leaf = pos + 1, len(leaves)
    label = None
    if pos < len(tokens) and tokens[pos] not in '()':
        label, pos = tokens[pos], pos + 1
    children, had_items = [], False
    while pos < len(tokens) and tokens[pos] != ')':
        had_items = True
        if tokens[pos] == '(':
            child, pos = _parse_node(tokens, pos, leaves, where)
        else:
            child, pos = len(leaves), pos + 1
            leaves.append(tokens[pos - 1])
        if child is not None:
            children.append(child)
    if pos >= len(tokens):
        raise InputError('%s: unbalanced brackets (a "(" is not closed)' % where)
    if label == '-NONE-':          # an empty element (trace): not a word
        del leaves[first_leaf:]
        return None, pos + 1
    if not children:
        if label is None or had_items:      # '()' or only empty elements inside
            return None, pos + 1
        leaves.append(label)     # '(word)': a leaf without a tag
        return len(leaves) - 1, pos + 1
    return (children[0] if len(children) == 1 else children), pos + 1


def read_ptb(text, where):
    """(leaf tokens, tree with int leaves) of one bracketed parse."""
    tokens = _PTB_TOKEN.findall(text)
    if not tokens or tokens[0] != '(':
        raise InputError('%s: not a bracketed parse (it must start with "(")' % where)
    leaves = []
    tree, pos = _parse_node(tokens, 0, leaves, where)
    if pos != len(tokens):
        raise InputError('%s: text after the end of the parse (unbalanced brackets?)'
                         % where)
    if not leaves:
        raise InputError('%s: the parse has no words' % where)
    return leaves, tree


def word_index(tokens, bpe):
    """(words, word_of) where word_of[i] is the word of token i ('@@' merged)."""
    if not bpe:
        return list(tokens), list(range(len(tokens)))
    words, word_of, current = [], [], ''
    for tok in tokens:
        word_of.append(len(words))
        if tok.endswith(BPE_MARK):
            current += tok[:-len(BPE_MARK)]
        else:
            words.append(current + tok)
            current = ''
    if current:
        words.append(current)
    return words, word_of


def project(spans, word_of):
    """Token spans -> word spans of two words or more; spans cutting a word drop."""
    n = len(word_of)
    starts = {i for i in range(n) if i == 0 or word_of[i] != word_of[i - 1]}
    out = set()
    for a, b in spans:
        if a in starts and (b == n or b in starts):
            span = (word_of[a], word_of[b - 1] + 1)
            if span[1] - span[0] >= 2:
                out.add(span)
    return out


def check_tokens(words, leaves, where):
    a, b = [normalise(w) for w in words], [normalise(w) for w in leaves]
    if a == b:
        return
    i = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    got = leaves[i] if i < len(leaves) else 'the end'
    want = words[i] if i < len(words) else 'the end'
    hint = ''
    if any(w.endswith(BPE_MARK) for w in words):
        hint = ' (the translation has BPE units: merge them with --bpe)'
    raise InputError('%s: the parse does not match the translation: word %d is %r in '
                     'the parse, %r in the translation (%d vs %d words)%s'
                     % (where, i + 1, got, want, len(leaves), len(words), hint))


class Counts:
    """Matched, predicted and reference constituents summed over sentences."""

    def __init__(self):
        self.matched = self.predicted = self.reference = 0

    def add(self, predicted, reference):
        self.matched += len(predicted & reference)
        self.predicted += len(predicted)
        self.reference += len(reference)

    def scores(self):
        p = self.matched / self.predicted if self.predicted else 0.0
        r = self.matched / self.reference if self.reference else 0.0
        f = 2 * p * r / (p + r) if p + r else 0.0
        return {'precision': p, 'recall': r, 'f1': f, 'matched': self.matched,
                'constituents': self.predicted, 'reference_constituents': self.reference}
