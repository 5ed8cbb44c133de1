"""Synthetic parallel corpus with reordering and target-side long-distance agreement.

Grammar (source "English-like" -> target "toy Slavic-like"), one clause::

    source:  DET N [ADJ] [that V DET N [ADJ]]  V  DET N [ADJ]  [ADV [ADV]]
    target:  DET [ADJ] N [ki DET [ADJ] N V-en] [ADV [ADV]]  DET [ADJ] N  V-<class>

* Reordering: the source is SVO with adjectives after nouns and sentence-final
  adverbs; the target is SOV with adjectives before nouns, the adverbs before the
  object, and the verb of a relative clause moved after its object.
* Agreement: every target noun has a lexical class ("a", "o" or "i") that is not
  visible in its form (cat -> "miso" is class i, tree -> "drevo" is class a).
  The clause-final main verb carries the class suffix of the SUBJECT noun
  (ate -> "yeda" / "yedo" / "yedi"), 3-10 tokens after it, across an optional
  relative clause, adverbs and the object, whose nouns act as attractors.
  Relative-clause verbs take the invariant participle "-en".  Nothing on the
  source side marks the class: the model must remember which target noun it
  produced as subject.
* A sentence is one clause, or two joined by "and" -> "da" (one agreement site
  per clause), followed by " ."; 6-25 tokens, identical lengths on both sides.

Example::

    the dog big that saw the cat ate the apple yesterday .
    la veli burek ki la miso viden vchera la yablu yeda .

Its command line is demo/toy_corpus.py.
"""
import random

from machinery.text_io import InputError

# source noun -> (target noun, class); 8 nouns per class, class not visible in form
NOUNS = {
    "dog": ("burek", "a"), "horse": ("konal", "a"), "king": ("tsaro", "a"),
    "teacher": ("uchit", "a"), "apple": ("yablu", "a"), "tree": ("drevo", "a"),
    "book": ("kniga", "a"), "song": ("pesna", "a"),
    "cat": ("miso", "i"), "fish": ("rybel", "i"), "farmer": ("selmun", "i"),
    "doctor": ("lekar", "i"), "bread": ("khleb", "i"), "river": ("reka", "i"),
    "letter": ("pismo", "i"), "garden": ("sadok", "i"),
    "bird": ("pitak", "o"), "queen": ("rani", "o"), "child": ("detka", "o"),
    "soldier": ("voyin", "o"), "house": ("domik", "o"), "stone": ("kamen", "o"),
    "ship": ("korab", "o"), "window": ("okno", "o"),
}
ADJS = {"big": "veli", "small": "mali", "old": "stari", "young": "mladi",
        "red": "krasni", "green": "zeleni", "happy": "radi", "tired": "ustali",
        "strange": "chudni", "quiet": "tihi"}
VERBS = {"saw": "vid", "liked": "lyub", "ate": "yed", "found": "nashl",
         "carried": "nos", "helped": "pomog", "followed": "sled",
         "painted": "risov", "called": "zval", "watched": "gledal",
         "pushed": "tolk", "visited": "posetil"}
ADVS = {"yesterday": "vchera", "today": "dnes", "often": "chasto",
        "quickly": "brzo", "slowly": "polako", "again": "opet",
        "never": "nikad", "always": "vsegda"}
DETS = {"the": "la", "a": "un"}
CLASSES = ("a", "o", "i")
PARTICIPLE = "en"
SRC_REL, TRG_REL, SRC_AND, TRG_AND, EOS = "that", "ki", "and", "da", "."
MAX_LEN, MIN_DIST, MAX_DIST = 25, 3, 10
# bins of the subject-verb distance (target tokens) the demo reports
DISTANCE_BINS = ((3, 4), (5, 7), (8, 10))

# target-side lexicon used to parse hypotheses
TRG_NOUN_CLASS = {t: c for t, c in NOUNS.values()}
TRG_FINITE = {stem + c: (stem, c) for stem in VERBS.values() for c in CLASSES}
TRG_PARTICIPLES = {stem + PARTICIPLE for stem in VERBS.values()}


def _check_lexicon():
    words = (list(TRG_NOUN_CLASS) + list(ADJS.values()) + list(TRG_FINITE)
             + list(TRG_PARTICIPLES) + list(ADVS.values()) + list(DETS.values())
             + [TRG_REL, TRG_AND, EOS])
    assert len(words) == len(set(words)), "target word forms must be unique"
    src = (list(NOUNS) + list(ADJS) + list(VERBS) + list(ADVS) + list(DETS)
           + [SRC_REL, SRC_AND, EOS])
    assert len(src) == len(set(src)), "source word forms must be unique"


_check_lexicon()


# ---------------------------------------------------------------- generation
def _np(rng, p_adj=0.4):
    """Random noun phrase -> (source tokens, target tokens, noun)."""
    det = rng.choice(sorted(DETS))
    noun = rng.choice(sorted(NOUNS))
    adj = rng.choice(sorted(ADJS)) if rng.random() < p_adj else None
    src = [det, noun] + ([adj] if adj else [])
    trg = [DETS[det]] + ([ADJS[adj]] if adj else []) + [NOUNS[noun][0]]
    return src, trg, noun


def _clause(rng):
    """Random clause -> (src tokens, trg tokens, subject-noun -> verb distance)."""
    s_src, s_trg, subj = _np(rng)
    src, trg = list(s_src), list(s_trg)
    if rng.random() < 0.4:  # subject relative clause: that V NP -> ki NP V-en
        verb = rng.choice(sorted(VERBS))
        r_src, r_trg, _ = _np(rng)
        src += [SRC_REL, verb] + r_src
        trg += [TRG_REL] + r_trg + [VERBS[verb] + PARTICIPLE]
    advs = rng.sample(sorted(ADVS), rng.choice([0, 0, 0, 1, 1, 2]))
    verb = rng.choice(sorted(VERBS))
    o_src, o_trg, _ = _np(rng)
    src += [verb] + o_src + advs
    trg += [ADVS[a] for a in advs] + o_trg + [VERBS[verb] + NOUNS[subj][1]]
    dist = len(trg) - len(s_trg)  # verb index minus subject-noun index
    return src, trg, dist


def generate_pair(rng):
    """One random sentence pair (source string, target string)."""
    while True:
        src, trg, dist = _clause(rng)
        dists = [dist]
        if rng.random() < 0.3:
            src2, trg2, dist2 = _clause(rng)
            src, trg = src + [SRC_AND] + src2, trg + [TRG_AND] + trg2
            dists.append(dist2)
        src.append(EOS)
        trg.append(EOS)
        if len(src) <= MAX_LEN and all(MIN_DIST <= d <= MAX_DIST for d in dists):
            return " ".join(src), " ".join(trg)


def generate_corpus(sizes, seed=1):
    """sizes: list of (name, count); returns {name: [(src, trg), ...]}.
    All source sentences are distinct, within and across splits."""
    rng = random.Random(seed)
    seen, out = set(), {}
    for name, count in sizes:
        pairs = []
        tries = 0
        while len(pairs) < count:
            tries += 1
            if tries > 50 * count + 1000:
                raise InputError("cannot draw %d distinct %s sentences: ask for fewer"
                                 % (count, name))
            src, trg = generate_pair(rng)
            if src not in seen:
                seen.add(src)
                pairs.append((src, trg))
        out[name] = pairs
    return out


# ---------------------------------------------------------------- agreement
def _split_clauses(tokens):
    tokens = [t for t in tokens if t != EOS]
    clauses, cur = [], []
    for t in tokens:
        if t == TRG_AND:
            clauses.append(cur)
            cur = []
        else:
            cur.append(t)
    clauses.append(cur)
    return clauses


def expected_sites(src_line):
    """Number of agreement sites (clauses) the source sentence asks for."""
    return src_line.split().count(SRC_AND) + 1


def clause_site(clause_tokens):
    """(noun, noun class, verb, verb suffix) for one target clause, with None
    for the parts that cannot be found.  The governing noun is the first noun
    of the clause (the subject); the agreeing word is its last finite verb."""
    noun = next((t for t in clause_tokens if t in TRG_NOUN_CLASS), None)
    verb = next((t for t in reversed(clause_tokens) if t in TRG_FINITE), None)
    return (noun, TRG_NOUN_CLASS.get(noun), verb,
            TRG_FINITE[verb][1] if verb else None)


def _site_outcomes(src_lines, hyp_lines):
    """For each sentence, the outcome of each agreement site the source asks
    for: "correct", "wrong" (verb suffix is not the class of the subject noun
    of the hypothesis clause) or "missing" (clause, noun or finite verb absent)."""
    src_lines, hyp_lines = list(src_lines), list(hyp_lines)
    if len(src_lines) != len(hyp_lines):
        raise ValueError("line count mismatch: %d source vs %d hypothesis lines"
                         % (len(src_lines), len(hyp_lines)))
    out = []
    for src, hyp in zip(src_lines, hyp_lines):
        clauses = _split_clauses(hyp.split())
        row = []
        for i in range(expected_sites(src)):
            noun, cls, verb, suffix = (clause_site(clauses[i]) if i < len(clauses)
                                       else (None,) * 4)
            row.append("missing" if noun is None or verb is None
                       else "correct" if suffix == cls else "wrong")
        out.append(row)
    return out


def _tally(outcomes):
    sites = len(outcomes)
    correct, missing = outcomes.count("correct"), outcomes.count("missing")
    produced = sites - missing
    return {"sites": sites, "correct": correct, "missing": missing,
            "accuracy": correct / produced if produced else 0.0,
            "strict_accuracy": correct / sites if sites else 0.0}


def agreement_stats(src_lines, hyp_lines):
    """Agreement of hypothesis main verbs with hypothesis subject nouns.

    sites: agreement sites required by the sources (one per clause);
    missing: sites whose clause, subject noun or finite verb is absent in the
    hypothesis; correct: produced sites whose verb suffix matches the class of
    the subject noun; accuracy = correct / (sites - missing) (0.0 if none);
    strict_accuracy = correct / sites."""
    return _tally([o for row in _site_outcomes(src_lines, hyp_lines) for o in row])


def clause_distance(clause_tokens):
    """Tokens from the subject noun (first noun) to the main verb (last finite
    verb) of a target clause, or None if either is absent."""
    nouns = [i for i, t in enumerate(clause_tokens) if t in TRG_NOUN_CLASS]
    verbs = [i for i, t in enumerate(clause_tokens) if t in TRG_FINITE]
    return verbs[-1] - nouns[0] if nouns and verbs else None


def distance_bin(distance, bins=DISTANCE_BINS):
    """Label 'lo-hi' of the bin holding distance, or None."""
    for lo, hi in bins:
        if distance is not None and lo <= distance <= hi:
            return "%d-%d" % (lo, hi)
    return None


def agreement_by_distance(src_lines, hyp_lines, ref_lines, bins=DISTANCE_BINS):
    """agreement_stats of the hypotheses per bin of the subject-verb distance
    in the reference: {'3-4': {...}, '5-7': {...}, '8-10': {...}} (every bin,
    in order; sites of the reference outside every bin are not counted)."""
    ref_lines = list(ref_lines)
    outcomes = _site_outcomes(src_lines, hyp_lines)
    if len(ref_lines) != len(outcomes):
        raise ValueError("line count mismatch: %d source vs %d reference lines"
                         % (len(outcomes), len(ref_lines)))
    per_bin = {"%d-%d" % b: [] for b in bins}
    for row, ref in zip(outcomes, ref_lines):
        clauses = _split_clauses(ref.split())
        for i, outcome in enumerate(row):
            label = distance_bin(clause_distance(clauses[i]) if i < len(clauses)
                                 else None, bins)
            if label:
                per_bin[label].append(outcome)
    return {label: _tally(o) for label, o in per_bin.items()}


# ---------------------------------------------------------------- parses
TRG_TAG = dict([(w, "DT") for w in DETS.values()] + [(w, "JJ") for w in ADJS.values()]
               + [(w, "NN") for w in TRG_NOUN_CLASS] + [(w, "VB") for w in TRG_FINITE]
               + [(w, "VBN") for w in TRG_PARTICIPLES] + [(w, "RB") for w in ADVS.values()]
               + [(TRG_REL, "WDT"), (TRG_AND, "CC"), (EOS, ".")])


class _Parser:
    """Recursive descent over the target grammar of the module docstring."""

    def __init__(self, tokens):
        self.tokens, self.pos = tokens, 0

    def take(self, *tags):
        """'(TAG word)' if the next word has one of the tags, else None."""
        if self.pos < len(self.tokens) and TRG_TAG.get(self.tokens[self.pos]) in tags:
            self.pos += 1
            word = self.tokens[self.pos - 1]
            return "(%s %s)" % (TRG_TAG[word], word)
        return None

    def np(self):
        det = self.take("DT")
        adj = det and self.take("JJ")
        noun = det and self.take("NN")
        return noun and "(NP %s)" % " ".join(p for p in (det, adj, noun) if p)

    def clause(self):
        """'(NP subject [(SBAR ki (S NP V-en))]) (VP [(ADVP ...)] NP V)', the
        children of the clause's S node."""
        subj = self.np()
        if subj and self.take("WDT"):
            rel = self.np()
            part = rel and self.take("VBN")
            subj = part and "(NP %s (SBAR (WDT ki) (S %s %s)))" % (subj, rel, part)
        advs = []
        while subj and self.pos < len(self.tokens) and TRG_TAG.get(self.tokens[self.pos]) == "RB":
            advs.append(self.take("RB"))
        obj = subj and self.np()
        verb = obj and self.take("VB")
        if not verb:
            return None
        advp = ["(ADVP %s)" % " ".join(advs)] if advs else []
        return "%s (VP %s)" % (subj, " ".join(advp + [obj, verb]))


def parse_target(line):
    """Penn Treebank brackets of one target sentence, or None if it is not in the
    grammar.  Two clauses: (S (S ...) (CC da) (S ...) (. .))."""
    p = _Parser(line.split())
    clauses = [p.clause()]
    while clauses[-1] and p.take("CC"):
        clauses.append(p.clause())
    end = clauses[-1] and p.take(".")
    if not end or p.pos != len(p.tokens):
        return None
    if len(clauses) == 1:
        return "(ROOT (S %s %s))" % (clauses[0], end)
    return "(ROOT (S %s %s))" % (" (CC da) ".join("(S %s)" % c for c in clauses), end)
