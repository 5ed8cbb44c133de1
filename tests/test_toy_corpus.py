import json
import os
import sys

import pytest

from helpers import ROOT, error_line, run_command
from demo import toy_language as tc  # noqa: E402

SCRIPT = os.path.join(ROOT, "demo", "toy_corpus.py")
SPLITS = ("train", "dev", "test")


def run_cli(*args):
    return run_command('demo/toy_corpus.py', args)


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read().splitlines()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("corpus"))
    r = run_cli("generate", "--out", out, "--train", "2000", "--dev", "100",
                "--test", "200", "--seed", "3")
    assert r.returncode == 0, r.stderr
    return out


def test_files_and_format(corpus):
    for split, n in (("train", 2000), ("dev", 100), ("test", 200)):
        src = read(os.path.join(corpus, split + ".src"))
        trg = read(os.path.join(corpus, split + ".trg"))
        assert len(src) == len(trg) == n
        for s, t in zip(src, trg):
            for line in (s, t):
                assert line == line.lower() and "  " not in line
                assert 4 <= len(line.split()) <= 25 and line.endswith(" .")
            assert len(s.split()) == len(t.split())


def test_deterministic_for_seed(corpus, tmp_path):
    r = run_cli("generate", "--out", str(tmp_path), "--train", "2000", "--dev",
                "100", "--test", "200", "--seed", "3")
    assert r.returncode == 0
    for split in SPLITS:
        for side in ("src", "trg"):
            name = "%s.%s" % (split, side)
            assert read(os.path.join(corpus, name)) == read(os.path.join(tmp_path, name))
    other = tc.generate_corpus([("test", 200)], seed=4)["test"]
    assert [p[0] for p in other] != read(os.path.join(corpus, "test.src"))


def test_translation_is_deterministic():
    # the same source sentence always gets the same target
    pairs = tc.generate_corpus([("a", 3000)], seed=7)["a"]
    pairs += tc.generate_corpus([("a", 3000)], seed=8)["a"]
    table = {}
    for s, t in pairs:
        assert table.setdefault(s, t) == t


def test_splits_disjoint(corpus):
    sets = {s: set(read(os.path.join(corpus, s + ".src"))) for s in SPLITS}
    assert len(sets["train"]) == 2000
    assert not sets["train"] & sets["test"]
    assert not sets["train"] & sets["dev"]
    assert not sets["dev"] & sets["test"]


def test_agreement_distance_and_vocab(corpus):
    trg = read(os.path.join(corpus, "train.trg"))
    for line in trg:
        for clause in tc._split_clauses(line.split()):
            n = next(i for i, w in enumerate(clause) if w in tc.TRG_NOUN_CLASS)
            v = max(i for i, w in enumerate(clause) if w in tc.TRG_FINITE)
            assert 3 <= v - n <= 10
    src_vocab = {w for line in read(os.path.join(corpus, "train.src")) for w in line.split()}
    trg_vocab = {w for line in trg for w in line.split()}
    assert 40 <= len(src_vocab) <= 120 and 40 <= len(trg_vocab) <= 120


def test_references_score_100(corpus):
    src = read(os.path.join(corpus, "test.src"))
    ref = read(os.path.join(corpus, "test.trg"))
    st = tc.agreement_stats(src, ref)
    assert st["sites"] >= len(src) and st["missing"] == 0
    assert st["correct"] == st["sites"] and st["accuracy"] == 1.0


def corrupt(line):
    """Change the suffix of the last finite verb to a wrong class."""
    toks = line.split()
    i = max(k for k, w in enumerate(toks) if w in tc.TRG_FINITE)
    stem, suf = tc.TRG_FINITE[toks[i]]
    toks[i] = stem + next(c for c in tc.CLASSES if c != suf)
    return " ".join(toks)


def test_corrupted_suffix_scores_lower(corpus):
    src = read(os.path.join(corpus, "test.src"))
    ref = read(os.path.join(corpus, "test.trg"))
    hyp = [corrupt(r) if i % 2 == 0 else r for i, r in enumerate(ref)]
    st = tc.agreement_stats(src, hyp)
    assert st["missing"] == 0
    assert st["correct"] == st["sites"] - (len(ref) + 1) // 2
    assert st["accuracy"] < 1.0


def test_missing_sites_counted():
    src = ["the dog ate the apple .",
           "the dog ate the apple and the cat saw a bird .",
           "the dog ate the apple ."]
    hyp = ["la burek la yablu .",          # no finite verb
           "la burek la yablu yeda .",     # second clause absent
           "la yablu yedi ."]              # noun is class a: present but wrong
    st = tc.agreement_stats(src, hyp)
    assert st == {"sites": 4, "correct": 1, "missing": 2, "accuracy": 0.5,
                  "strict_accuracy": 0.25}
    # agreement is judged against the noun found in the hypothesis itself
    assert tc.agreement_stats(["the dog ate the apple ."],
                              ["la miso la yablu yedi ."])["correct"] == 1


def test_cli_json_and_summary(corpus):
    src = os.path.join(corpus, "test.src")
    ref = os.path.join(corpus, "test.trg")
    r = run_cli("agreement", "--src", src, "--hyp", ref, "--json")
    assert r.returncode == 0
    st = json.loads(r.stdout)
    assert st["accuracy"] == 1.0 and st["missing"] == 0
    r = run_cli("agreement", "--src", src, "--hyp", ref, "--ref", ref)
    assert r.returncode == 0 and len(r.stdout.strip().splitlines()) == 1
    assert "100.0%" in r.stdout


def test_line_count_mismatch_and_missing_file(corpus, tmp_path):
    src = os.path.join(corpus, "test.src")
    short = tmp_path / "short.trg"
    short.write_text("la burek la yablu yeda .\n", encoding="utf-8")
    with pytest.raises(ValueError):
        tc.agreement_stats(read(src), ["x"])
    for hyp in (str(short), str(tmp_path / "nonexistent.trg")):
        r = run_cli("agreement", "--src", src, "--hyp", hyp)
        error_line(r, alone=True)
    r = run_cli("agreement", "--src", src, "--hyp", src, "--bogus")
    assert r.returncode == 2 and "unrecognized" in r.stderr


def test_parse_references_and_refuse_ungrammatical(corpus, tmp_path):
    """Every reference parses and its leaves are the sentence; the tree of a
    one-clause sentence with a relative clause has the expected spans."""
    sys.path.insert(0, ROOT)
    from analysis import attention_trees
    from analysis import parseval
    refs = read(os.path.join(corpus, "test.trg"))
    for line in refs:
        leaves, _ = parseval.read_ptb(tc.parse_target(line), "ref")
        assert leaves == line.split()
    line = "la veli burek ki la miso viden vchera la yablu yeda ."
    _, tree = parseval.read_ptb(tc.parse_target(line), "ref")
    # NP la veli burek (0,3); relative clause: (la miso) (4,6), S (4,7), SBAR (3,7),
    # subject NP (0,7); object NP (8,10); VP (7,11); S = sentence (0,12)
    assert attention_trees.constituents(tree) == {
        (0, 3), (4, 6), (4, 7), (3, 7), (0, 7), (8, 10), (7, 11), (0, 12)}
    for bad in ("la burek yeda .", "la burek la miso yeda", "la burek la miso yeda . ."):
        assert tc.parse_target(bad) is None
    hyp = tmp_path / "hyp.trg"
    hyp.write_text(refs[0] + "\nla burek .\n")
    r = run_cli("parse", "--trg", str(hyp))
    assert r.returncode == 0 and r.stdout.split("\n")[1:] == ["", ""]
    assert "parsed 1 of 2 sentences" in r.stderr
