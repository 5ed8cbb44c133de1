"""translate.py, evaluation/rescore.py and score.py --inference end to end on tiny
random models (written once per module, no training): the output formats,
batching and workers, the authors' inference, ensembles, unknown words, and
the one-line errors on bad input (no output file left behind)."""
import json
import sys

import numpy as np
import pytest

from helpers import ROOT, error_line, run_command, save_random_model
PY = sys.executable
SRC_WORDS = 'a b c d e f g h'.split()
TRG_WORDS = 'x y z w v u'.split()
SOURCES = ['a b c', 'd', 'e f g h a b', 'q r b', 'c c']
K, MAXLEN = 3, 7


def run(script, args, cwd, check=True):
    return run_command(script, args, cwd=cwd, check=check)


@pytest.fixture(scope='module')
def workdir(tmp_path_factory):
    sys.path.insert(0, ROOT)
    from machinery import vocab
    d = tmp_path_factory.mktemp('translate')
    for name, words in (('src', SRC_WORDS), ('trg', TRG_WORDS)):
        mapping = {w: i for i, w in enumerate(['<eos>', 'UNK'] + words)}
        vocab.save_dictionary(mapping, str(d / (name + '.pkl')), str(d / (name + '.json')))
    other = {w: i for i, w in enumerate(['<eos>', 'UNK'] + TRG_WORDS[::-1])}
    vocab.save_dictionary(other, str(d / 'other.pkl'), str(d / 'other.json'))
    save_random_model(d / 'base.npz', dict(decoder='gru_cond'), 1)
    save_random_model(d / 'att.npz', dict(decoder='gru_cond_att'), 2)
    save_random_model(d / 'res.npz', dict(decoder='gru_cond_residual'), 3)
    save_random_model(d / 'unk.npz', dict(decoder='gru_cond'), 4, unk_bias=3.)
    save_random_model(d / 'big.npz', dict(decoder='gru_cond'), 5, n_words=9)
    save_random_model(d / 'otherdict.npz', dict(decoder='gru_cond'), 6,
                      dictionaries=['src.pkl', 'other.pkl'])
    (d / 'in.txt').write_text(''.join(s + '\n' for s in SOURCES))
    return d


def translate(workdir, model, out, *extra, check=True):
    return run('translate.py', ['-k', str(K), '--maxlen', str(MAXLEN)] + list(extra) +
               [model, 'src.pkl', 'trg.pkl', 'in.txt', out], workdir, check)


@pytest.fixture(scope='module')
def nbest_run(workdir):
    """The authors' model: an n-best list with word probabilities, and the
    alignments of the translations."""
    translate(workdir, 'att.npz', 'nbest.txt', '-p', '1', '--n-best',
              '--print-word-probabilities', '--alignments', 'al.jsonl')
    lines = (workdir / 'nbest.txt').read_text().split('\n')[:-1]
    entries = [(lines[i], lines[i + 1]) for i in range(0, len(lines), 2)]
    records = [json.loads(r) for r in (workdir / 'al.jsonl').read_text().split('\n') if r]
    return entries, records


def test_nbest_list_and_word_probabilities(nbest_run):
    entries, _ = nbest_run
    assert len(entries) == K * len(SOURCES)
    for i in range(len(SOURCES)):
        scores = []
        for line, probs in entries[K * i:K * (i + 1)]:
            index, hyp, score = line.split(' ||| ')
            assert int(index) == i
            assert set(hyp.split()) <= set(TRG_WORDS + ['UNK'])
            scores.append(float(score))
            probs = [float(p) for p in probs.split()]
            # one probability per token, eos included unless cut at maxlen
            assert len(probs) in (len(hyp.split()) + 1, MAXLEN)
            assert all(0 < p <= 1 for p in probs)
            assert -np.log(probs).sum() == pytest.approx(float(score), abs=2e-5 * len(probs))
        assert scores == sorted(scores)


def test_alignments_of_the_authors_inference(nbest_run):
    entries, records = nbest_run
    assert [r['id'] for r in records] == list(range(len(SOURCES)))
    for r, src in zip(records, SOURCES):
        assert r['inference'] == 'authors'
        assert r['source'] == src.split() + ['<eos>']
        best = entries[K * r['id']][0].split(' ||| ')
        assert r['score'] == pytest.approx(float(best[2]), abs=1e-5)
        n = len(r['target'])
        assert [len(row) for row in r['source_attention']] == [len(r['source'])] * n
        # the authors' sampler attends to `time` memory rows at step `time`
        assert [len(row) for row in r['previous_attention']] == list(range(1, n + 1))
        assert r['previous_attention'][0] == [1.0]
        if n > 1:
            np.testing.assert_allclose(r['previous_attention'][1], [.5, .5], rtol=1e-6)


def test_batches_and_workers_give_the_same_output(workdir, nbest_run):
    entries, _ = nbest_run
    translate(workdir, 'att.npz', 'scores.txt', '-p', '2', '--batch-size', '2',
              '--print-scores')
    translate(workdir, 'att.npz', 'single.txt', '-p', '1', '--batch-size', '1')
    scored = (workdir / 'scores.txt').read_text().split('\n')[:-1]
    plain = (workdir / 'single.txt').read_text().split('\n')[:-1]
    assert len(scored) == len(plain) == len(SOURCES)
    for i, (s, p) in enumerate(zip(scored, plain)):
        text, score = s.split(' ||| ')
        best = entries[K * i][0].split(' ||| ')
        assert text == p == best[1]
        assert float(score) == pytest.approx(float(best[2]), abs=1e-5)


def test_inference_option(workdir):
    translate(workdir, 'res.npz', 'res_authors.txt', '-p', '1', '--inference', 'authors',
              '--alignments', 'res_al.jsonl')
    records = [json.loads(r) for r in (workdir / 'res_al.jsonl').read_text().split('\n')
               if r]
    assert all(r['inference'] == 'authors' for r in records)
    proc = translate(workdir, 'base.npz', 'never.txt', '--inference', 'authors', check=False)
    error_line(proc, 'base.npz', 'inference')
    assert not (workdir / 'never.txt').exists()


def test_unknown_words(workdir):
    """unk.npz prefers UNK: --suppress-unk avoids it; --replace-unk puts the
    most attended source word in its place, or its dictionary translation."""
    translate(workdir, 'unk.npz', 'replaced.txt', '-p', '1', '--replace-unk',
              '--alignments', 'unk_al.jsonl')
    translate(workdir, 'unk.npz', 'no_unk.txt', '-p', '1', '--n-best', '--suppress-unk')
    text = (workdir / 'no_unk.txt').read_text()
    assert 'UNK' not in text and len(text.split('\n')) == K * len(SOURCES) + 1
    (workdir / 'lex.txt').write_text('a A 0.2\na AA 0.7\n\nb B\nc C\n')
    translate(workdir, 'unk.npz', 'translated.txt', '-p', '1', '--unk-dictionary', 'lex.txt')
    # the alignment records keep the model's tokens (UNK included)
    records = [json.loads(r) for r in (workdir / 'unk_al.jsonl').read_text().split('\n') if r]
    lex = {'a': 'AA', 'b': 'B', 'c': 'C'}
    replaced = (workdir / 'replaced.txt').read_text().split('\n')
    translated = (workdir / 'translated.txt').read_text().split('\n')
    n_unk = 0
    for r, rep, tra in zip(records, replaced, translated):
        words = [w for w in r['target'] if w != '<eos>']
        src = r['source'][:-1]
        assert len(rep.split()) == len(tra.split()) == len(words)
        for t, w in enumerate(words):
            if w == 'UNK':
                n_unk += 1
                w = src[int(np.argmax(r['source_attention'][t][:len(src)]))]
                assert rep.split()[t] == w and tra.split()[t] == lex.get(w, w)
            else:
                assert rep.split()[t] == tra.split()[t] == w
    assert n_unk > 0


@pytest.mark.parametrize('case', ['fields', 'score'])
def test_bad_unk_dictionary(workdir, case):
    bad = workdir / ('bad_lex_%s.txt' % case)
    bad.write_text('a A\nb\n' if case == 'fields' else 'a A\nb B high\n')
    proc = translate(workdir, 'base.npz', 'never.txt', '--unk-dictionary', bad.name,
                     check=False)
    error_line(proc, bad.name, 'line 2')
    assert not (workdir / 'never.txt').exists()


def test_ensemble(workdir):
    """Three decoders together; the previous-word attention in the
    alignments is res.npz's (the first with one), decoded as in training."""
    translate(workdir, 'base.npz', 'ens.txt', '-p', '1', '--ensemble', 'res.npz',
              '--ensemble', 'att.npz', '--n-best', '--alignments', 'ens_al.jsonl')
    lines = (workdir / 'ens.txt').read_text().split('\n')[:-1]
    assert len(lines) == K * len(SOURCES)
    records = [json.loads(r) for r in (workdir / 'ens_al.jsonl').read_text().split('\n')
               if r]
    assert all('inference' not in r for r in records)
    assert all(len(r['previous_attention']) == len(r['target']) for r in records)
    for name, what in (('big.npz', 'n_words'), ('otherdict.npz', 'target dictionaries')):
        proc = translate(workdir, 'base.npz', 'never.txt', '--ensemble', name, check=False)
        error_line(proc, 'base.npz', name, what)
        assert not (workdir / 'never.txt').exists()


def test_rescore(workdir, nbest_run):
    """The authors' model rescoring its own n-best list with its own sampler
    gives back the search's scores; base.npz's costs are score.py's."""
    entries, _ = nbest_run
    (workdir / 'nb.txt').write_text(''.join(line + '\n' for line, _ in entries))
    proc = run('evaluation/rescore.py', ['-m', 'att.npz', 'base.npz', '-s', 'in.txt', '-i', 'nb.txt',
                              '-o', 'rescored.txt', '--inference', 'authors', '-b', '2'],
               workdir, check=False)   # base.npz has no authors' inference
    error_line(proc, 'base.npz', 'inference')
    assert not (workdir / 'rescored.txt').exists()
    run('evaluation/rescore.py', ['-m', 'att.npz', '-s', 'in.txt', '-i', 'nb.txt',
                       '-o', 'rescored.txt', '--inference', 'authors', '-b', '2'], workdir)
    run('evaluation/rescore.py', ['-m', 'base.npz', 'att.npz', '-s', 'in.txt', '-i', 'nb.txt',
                       '-o', 'rescored2.txt', '-n', '-d', 'src.pkl', 'trg.pkl'], workdir)
    rescored = (workdir / 'rescored.txt').read_text().split('\n')[:-1]
    rescored2 = (workdir / 'rescored2.txt').read_text().split('\n')[:-1]
    hyps = []
    for (line, probs), r, r2 in zip(entries, rescored, rescored2):
        index, hyp, score = line.split(' ||| ')
        assert r.startswith(line + ' ') and r2.startswith(line + ' ')
        if len(probs.split()) == len(hyp.split()) + 1:
            assert float(r.split()[-1]) == pytest.approx(float(score), abs=1e-5)
        else:   # cut at maxlen: the search never scored its eos, rescoring does
            assert float(r.split()[-1]) > float(score) + 1e-5
        assert len(r2.split(' ||| ')[2].split()) == 3
        hyps.append((SOURCES[int(index)], hyp))
    (workdir / 'pairs.src').write_text(''.join(s + '\n' for s, _ in hyps))
    (workdir / 'pairs.trg').write_text(''.join(t + '\n' for _, t in hyps))
    run('score.py', ['-m', 'base.npz', '-s', 'pairs.src', '-t', 'pairs.trg',
                     '-o', 'costs.txt'], workdir)
    costs = [float(c) for c in (workdir / 'costs.txt').read_text().split()]
    lengths = [len(t.split()) + 1 for _, t in hyps]    # -n: per token, eos included
    np.testing.assert_allclose([float(r.split()[-2]) for r in rescored2],
                               np.divide(costs, lengths), atol=1e-5)


@pytest.mark.parametrize('content', ['0 ||| x y\n', '0 ||| x ||| 1.0\nzero ||| y ||| 2\n',
                                     '0 ||| x ||| one\n', '9 ||| x ||| 1.0\n'])
def test_rescore_bad_nbest(workdir, content):
    (workdir / 'bad.nbest').write_text(content)
    proc = run('evaluation/rescore.py', ['-m', 'base.npz', '-s', 'in.txt', '-i', 'bad.nbest',
                              '-o', 'never.txt'], workdir, check=False)
    error_line(proc, 'bad.nbest', 'line')
    assert not (workdir / 'never.txt').exists()


def test_score_authors_inference_needs_an_attentive_residual_model(workdir):
    proc = run('score.py', ['-m', 'base.npz', '-s', 'in.txt', '-t', 'in.txt', '-o',
                            'never.txt', '-d', 'src.pkl', 'trg.pkl', '--inference',
                            'authors'], workdir, check=False)
    error_line(proc, 'base.npz', 'inference')
    assert not (workdir / 'never.txt').exists()
