"""The papers' Moses-style preprocessing: tokenise, truecase, BPE, dictionaries.

prepare::

    python pipeline/preprocess.py prepare --src-lang es --trg-lang en \\
        --train PREFIX --dev PREFIX --test PREFIX --out DIR \\
        [--bpe-merges 49500] [--joint-bpe | --separate-bpe] [--vocab 50000] \\
        [--zh-split whitespace|chars] [--jobs N] [--lowercase] \\
        [--normalize-punctuation] [--no-aggressive-dash-splits] \\
        [--bpe-vocabulary-threshold N]

``PREFIX.es`` / ``PREFIX.en`` are raw UTF-8 text (or gzip'd text, when
PREFIX.LANG ends in ``.gz``), one sentence a line.  Steps:

1. tokenisation with sacremoses' Moses tokeniser for each language,
   ``escape=True`` (``&apos;``, ``&quot;``, ``&amp;``, ...) and aggressive dash
   splitting (``-a``: ``Fußgänger-Ampel`` -> ``Fußgänger @-@ Ampel``; off with
   ``--no-aggressive-dash-splits``, as ``tokenizer.perl`` without ``-a``).
   Before it, with ``--lowercase``, the text is lowercased (``lowercase.perl``)
   and, with ``--normalize-punctuation``, normalised by sacremoses' version of
   Moses' ``normalize-punctuation.perl -l LANG`` (``perl_parity``), in that
   order, as the Multi30k benchmark does (``pipeline/multi30k.py``);
2. truecasing: a Moses truecaser trained on the tokenised training data of
   each side (model saved as ``DIR/truecase-model.LANG``), applied like
   ``truecase.perl`` (known words keep their case); none with ``--lowercase``;
3. BPE (subword-nmt): merges learnt on the truecased training data, joint
   (both sides together, the default; ``DIR/bpe.codes``) or separate
   (``DIR/bpe.codes.LANG``), applied to train, dev and test.  With
   ``--bpe-vocabulary-threshold N`` it is applied as subword-nmt's
   ``apply_bpe.py --vocabulary bpe.vocab.LANG --vocabulary-threshold N``:
   ``DIR/bpe.vocab.LANG`` counts the units of each side's BPE'd training data
   (what ``learn_joint_bpe_and_vocab.py --write-vocabulary`` writes), and a
   unit seen fewer than N times on that side is split back into smaller ones;
4. dictionaries of the BPE'd training data built by ``build_dictionary.py``
   and cut to the vocabulary size: ``eos`` = 0, ``UNK`` = 1 and the most
   frequent words, every id < ``--vocab`` (``DIR/train.bpe.LANG.pkl/.json``).

Chinese (``zh``): no truecasing.  ``--zh-split whitespace`` (the default)
keeps the segmentation of the input as it is: tokens are the input's
whitespace-separated words, with no Moses escaping (this is how the UN
corpus used by the papers is distributed, already word-segmented and
unescaped).  ``--zh-split chars`` is for unsegmented Chinese: Moses
tokenisation (escaped) and then every CJK character becomes a token of its own.

Outputs in DIR: ``{train,dev,test}.bpe.{SRC,TRG}`` (model input),
``{dev,test}.tok.{SRC,TRG}`` (tokenised, truecased, before BPE: the
references for tokenised BLEU), the dictionaries, the truecase models, the
BPE codes (and vocabularies), and ``preprocess.json`` (the settings, read by ``postprocess``).
Every output is written under a temporary name and renamed only when all
steps have succeeded.  Ctrl-C, SIGTERM or a ``--jobs`` worker that dies end
the command within a second with one line (machinery/worker_processes.py), its
staging folder removed.

postprocess::

    python pipeline/preprocess.py postprocess --lang en [--model-dir DIR] \\
        [--zh-split whitespace|chars] < in > out

undoes BPE (``@@ ``), detruecases (upper-cases the first letter of each
sentence, like Moses' ``detruecase.perl``) and detokenises (sacremoses,
language-aware).  For ``zh`` there is no detruecasing; in ``chars`` mode the
text is Moses-detokenised and every space next to a CJK character is removed
(Chinese puts none there; spaces between two Latin words stay), in
``whitespace`` mode the output keeps the word segmentation of the input.
The mode is read from ``DIR/preprocess.json`` unless ``--zh-split`` is given.

Bad input (a missing file, sides of a set with different line counts, text
that is not UTF-8) prints one ``error: ...`` line naming the file (and line)
and exits with status 1.
"""
import contextlib
import functools
import io
import os
import re
import shutil
import sys
import tempfile
import time
from collections import Counter

if __name__ == '__main__':  # run as a file: import from the project root, not this folder
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from machinery import cli
from machinery import output_files, pickle_and_json, vocab
from machinery.text_io import InputError, iter_lines
from machinery.worker_processes import WorkerPool

PROGRESS_EVERY = 100000
SETS = ('train', 'dev', 'test')
CONFIG_NAME = 'preprocess.json'

# Chinese/Japanese/Korean characters that --zh-split chars separates:
# radicals, CJK symbols and punctuation, enclosed letters (e.g. U+3221),
# compatibility forms, unified ideographs (base and extensions), fullwidth forms.
CJK_CHARS = ('\u2e80-\u2fdf\u3000-\u303f\u3200-\u33ff\u3400-\u4dbf'
             '\u4e00-\u9fff\uf900-\ufaff\ufe30-\ufe4f\uff00-\uffef'
             '\U00020000-\U0002fa1f')
_CJK_RE = re.compile('([%s])' % CJK_CHARS)
# a space next to a CJK character (Chinese text puts none there)
_CJK_SPACE_RE = re.compile('(?<=[%s]) +| +(?=[%s])' % (CJK_CHARS, CJK_CHARS))
# BPE's continuation marks, as a regular expression that Python and sed -r
# read alike (train_pair.BPE_UNDO)
BPE_MARKS = r'(@@ )|(@@ ?$)'
_BPE_RE = re.compile(BPE_MARKS)


def is_zh(lang):
    return lang.lower().split('-')[0].split('_')[0] == 'zh'


def _progress(message):
    print('preprocess: %s' % message, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------
# Tokenisation, truecasing, BPE on single lines
# --------------------------------------------------------------------------

class Tokenizer(object):
    """Moses tokenisation for one language (see the module docstring)."""

    def __init__(self, lang, zh_split='whitespace', lowercase=False,
                 normalize_punctuation=False, aggressive_dash_splits=True):
        self.lang = lang
        self.zh = is_zh(lang)
        self.zh_split = zh_split
        self.lowercase = lowercase
        self.aggressive_dash_splits = aggressive_dash_splits
        self._normalizer = None
        if normalize_punctuation:
            from sacremoses import MosesPunctNormalizer
            # perl_parity: as normalize-punctuation.perl (' -> " among others)
            self._normalizer = MosesPunctNormalizer(lang=lang, perl_parity=True)
        self._moses = None
        if not (self.zh and zh_split == 'whitespace'):
            from sacremoses import MosesTokenizer
            self._moses = MosesTokenizer(lang='zh' if self.zh else lang)

    def __call__(self, line):
        if self.lowercase:
            line = line.lower()
        if self._normalizer is not None:
            line = self._normalizer.normalize(line)
        if self._moses is None:          # zh, already segmented
            return ' '.join(line.split())
        text = self._moses.tokenize(line, escape=True, return_str=True,
                                    aggressive_dash_splits=self.aggressive_dash_splits)
        if self.zh:                      # chars mode
            text = _CJK_RE.sub(r' \1 ', text)
        return ' '.join(text.split())


class Truecaser(object):
    """A Moses truecaser (train-truecaser.perl / truecase.perl)."""

    def __init__(self, model_path=None):
        from sacremoses import MosesTruecaser
        self._tc = MosesTruecaser(load_from=model_path)

    def train(self, token_lists, save_to):
        self._tc.train(token_lists, save_to=save_to)

    def __call__(self, line):
        if not line.strip():
            return ''
        # use_known: a word seen in another casing keeps its case, as in
        # truecase.perl (sacremoses' default would always use the best case)
        return self._tc.truecase(line, return_str=True, use_known=True)


class Bpe(object):
    """subword-nmt BPE from a codes file; identity when no merge was learnt.
    ``vocabulary`` (a set of units) is apply_bpe.py's ``--vocabulary``: a
    unit outside it is split back into smaller units."""

    def __init__(self, codes_path, vocabulary=None):
        from subword_nmt.apply_bpe import BPE
        with open(codes_path, encoding='utf-8') as f:
            lines = f.read().splitlines()
        merges = [l for l in lines if l.strip() and not l.startswith('#version')]
        self._bpe = None
        if merges:
            with open(codes_path, encoding='utf-8') as f:
                self._bpe = BPE(f, vocab=vocabulary)

    def __call__(self, line):
        if self._bpe is None or not line.strip():
            return line.strip()
        return self._bpe.segment(line).strip()


def learn_bpe(counts, merges, codes_path):
    """Learn ``merges`` BPE operations from a Counter word -> frequency."""
    from subword_nmt.learn_bpe import learn_bpe as _learn
    vocab = io.StringIO(''.join('%s %d\n' % (w, c) for w, c in counts.items()
                                if w))
    out = io.StringIO()
    _learn(vocab, out, merges, is_dict=True)
    output_files.write_text(codes_path, out.getvalue())


def bpe_vocabulary(codes_path, train_path, vocab_path, threshold):
    """The units of ``train_path`` segmented with ``codes_path`` and seen at
    least ``threshold`` times; their counts are written to ``vocab_path``
    ('unit count' lines, most frequent first, as subword-nmt writes them)."""
    segment = Bpe(codes_path)
    counts = Counter()
    for line in iter_lines(train_path):
        counts.update(segment(line).split())
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    output_files.write_text(vocab_path, ''.join('%s %d\n' % kv for kv in ranked))
    kept = set(unit for unit, count in counts.items() if count >= threshold)
    # subword-nmt takes an empty vocabulary for none at all (no unit would be
    # split); a unit that no text has keeps the set non-empty
    return kept or {''}


def undo_bpe(line):
    return _BPE_RE.sub('', line)


class Postprocessor(object):
    """BPE undo, detruecasing and detokenisation for one language."""

    def __init__(self, lang, zh_split='whitespace'):
        from sacremoses import MosesDetokenizer, MosesDetruecaser
        self.zh = is_zh(lang)
        self.zh_split = zh_split
        self._detruecase = None if self.zh else MosesDetruecaser()
        self._detok = None
        if not (self.zh and zh_split == 'whitespace'):
            self._detok = MosesDetokenizer(lang='zh' if self.zh else lang)

    def __call__(self, line):
        text = undo_bpe(line.rstrip('\r\n')).strip()
        tokens = text.split()
        if self._detruecase is not None:
            tokens = self._detruecase.detruecase(' '.join(tokens))
        if self._detok is None:
            return ' '.join(tokens)
        text = self._detok.detokenize(tokens, unescape=True)
        if self.zh:                      # chars mode
            text = _CJK_SPACE_RE.sub('', text)
        return text


# --------------------------------------------------------------------------
# Input checking and file handling
# --------------------------------------------------------------------------

def check_text_file(path):
    """Number of lines of a UTF-8 file; InputError otherwise."""
    return sum(1 for _ in iter_lines(path))


def tokenizer_options(args):
    """The Tokenizer's keyword arguments from prepare's settings."""
    return dict(zh_split=args.zh_split, lowercase=args.lowercase,
                normalize_punctuation=args.normalize_punctuation,
                aggressive_dash_splits=args.aggressive_dash_splits)


def map_file(fn, src, dst, label, pool=None, on_line=None):
    """Write ``fn(line)`` for each line of ``src`` to ``dst``; progress on
    stderr every PROGRESS_EVERY lines.  ``pool`` (a WorkerPool whose
    workers apply ``fn``) is used for tokenisation with several jobs."""
    start = time.time()
    n = 0
    lines = iter_lines(src)
    results = pool.imap(lines, chunksize=2000) if pool else map(fn, lines)
    with open(dst, 'w', encoding='utf-8', newline='\n') as out:
        for n, result in enumerate(results, 1):
            out.write(result + '\n')
            if on_line is not None:
                on_line(result)
            if n % PROGRESS_EVERY == 0:
                _progress('%s: %d lines (%.0f lines/s)'
                          % (label, n, n / max(time.time() - start, 1e-9)))
    return n


# --------------------------------------------------------------------------
# prepare
# --------------------------------------------------------------------------

def _input_paths(args):
    langs = (args.src_lang, args.trg_lang)
    return {s: {l: '%s.%s' % (getattr(args, s), l) for l in langs} for s in SETS}


def check_inputs(args, paths):
    """Check the settings and every input before anything is written;
    returns the line count of each set."""
    if args.src_lang == args.trg_lang:
        raise InputError('--src-lang and --trg-lang are both %r'
                              % args.src_lang)
    if args.bpe_merges < 0:
        raise InputError('--bpe-merges must be >= 0, not %d'
                              % args.bpe_merges)
    if args.vocab is not None and args.vocab < 3:
        raise InputError('--vocab must be at least 3 (eos, UNK and one '
                              'word), not %d' % args.vocab)
    threshold = args.bpe_vocabulary_threshold
    if threshold is not None and threshold < 1:
        raise InputError('--bpe-vocabulary-threshold must be >= 1, not %d' % threshold)
    counts = {}
    for name in paths:
        src, trg = (paths[name][args.src_lang], paths[name][args.trg_lang])
        n_src, n_trg = check_text_file(src), check_text_file(trg)
        if n_src != n_trg:
            raise InputError('%s has %d lines but %s has %d lines: the two '
                                  'sides of the %s set must be parallel'
                                  % (src, n_src, trg, n_trg, name))
        if n_src == 0:
            raise InputError('%s: file is empty' % src)
        counts[name] = n_src
    return counts


def vocabulary_dictionary(path, vocab):
    """The project's dictionary of ``path``, ids limited to ``< vocab``
    (every word when ``vocab`` is None)."""
    import build_dictionary
    full = build_dictionary.build_dictionary(path)
    if vocab is None:
        return full, len(full)
    return type(full)((w, i) for w, i in full.items() if i < vocab), len(full)


def prepare(args):
    prepare_sets(args, _input_paths(args), keep_tok=('dev', 'test'))


def prepare_sets(args, paths, keep_tok):
    """prepare's work on any sets: ``paths`` is {set: {lang: raw file}}, in
    order, with a 'train' set (the one that BPE, the truecaser and the
    dictionaries learn from); ``args`` holds prepare's settings (the options
    of the command line); the tokenised files of the sets in ``keep_tok``
    are outputs (SET.tok.LANG)."""
    counts = check_inputs(args, paths)
    langs = (args.src_lang, args.trg_lang)
    outputs = output_names(args, paths, langs, keep_tok)
    output_files.check_distinct([os.path.join(args.out, name) for name in outputs],
                            [path for files in paths.values() for path in files.values()])
    os.makedirs(args.out, exist_ok=True)
    stage = tempfile.mkdtemp(prefix='.preprocess-', dir=args.out)
    try:
        with cli.sigterm_interrupts():    # SIGTERM too removes the stage
            _prepare_in(stage, args, paths, counts, langs, keep_tok)
        # everything succeeded: give the outputs their final names
        for name in outputs:
            os.replace(os.path.join(stage, name), os.path.join(args.out, name))
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    _progress('done: %s' % ', '.join(sorted(outputs)))


def output_names(args, paths, langs, keep_tok):
    """The names of the files that prepare writes into --out (_prepare_in
    writes them into its stage)."""
    truecased = [lang for lang in langs if not (is_zh(lang) or args.lowercase)]
    names = ['truecase-model.%s' % lang for lang in truecased]
    names += ['%s.tok.%s' % (name, lang) for name in keep_tok for lang in langs]
    names += ['bpe.codes'] if args.joint_bpe else ['bpe.codes.%s' % l for l in langs]
    if args.bpe_vocabulary_threshold is not None:
        names += ['bpe.vocab.%s' % lang for lang in langs]
    names += ['%s.bpe.%s' % (name, lang) for lang in langs for name in paths]
    names += ['train.bpe.%s%s' % (lang, ext) for lang in langs for ext in ('.pkl', '.json')]
    return names + [CONFIG_NAME]


def _prepare_in(stage, args, paths, counts, langs, keep_tok):
    """Every output of output_names, written into the folder ``stage``."""
    def tmp(name):
        return os.path.join(stage, name)

    # 1. tokenise
    for lang in langs:
        start = functools.partial(Tokenizer, lang, **tokenizer_options(args))
        tokenizer = start()
        with (WorkerPool(start, args.jobs, 'tokenisation') if args.jobs > 1
              else contextlib.nullcontext()) as pool:
            for name in paths:
                _progress('tokenising %s (%d lines)' % (paths[name][lang],
                                                        counts[name]))
                map_file(tokenizer, paths[name][lang], tmp('%s.rawtok.%s' % (name, lang)),
                         'tokenise %s.%s' % (name, lang), pool)

    # 2. truecase (not Chinese, not lowercased text); count the training words for BPE
    word_counts = {}
    for lang in langs:
        if is_zh(lang) or args.lowercase:
            truecase = None
        else:
            model = 'truecase-model.%s' % lang
            _progress('training the truecaser on train.%s' % lang)
            tc = Truecaser()
            tc.train((l.split() for l in iter_lines(tmp('train.rawtok.%s' % lang))),
                     save_to=tmp(model))
            truecase = Truecaser(tmp(model))
        counter = Counter()
        for name in paths:
            src, dst = tmp('%s.rawtok.%s' % (name, lang)), tmp('%s.tok.%s' % (name, lang))
            on_line = (lambda l: counter.update(l.split())) if name == 'train' else None
            if truecase is None:
                map_file(lambda l: l, src, dst, 'copy %s.%s' % (name, lang),
                         on_line=on_line)
            else:
                _progress('truecasing %s.%s' % (name, lang))
                map_file(truecase, src, dst, 'truecase %s.%s' % (name, lang),
                         on_line=on_line)
            os.unlink(src)
        word_counts[lang] = counter

    # 3. BPE
    codes = {}
    if args.joint_bpe:
        joint = Counter()
        for lang in langs:
            joint.update(word_counts[lang])
        _progress('learning %d joint BPE merges' % args.bpe_merges)
        learn_bpe(joint, args.bpe_merges, tmp('bpe.codes'))
        codes = {lang: 'bpe.codes' for lang in langs}
    else:
        for lang in langs:
            _progress('learning %d BPE merges for %s' % (args.bpe_merges, lang))
            learn_bpe(word_counts[lang], args.bpe_merges, tmp('bpe.codes.%s' % lang))
            codes[lang] = 'bpe.codes.%s' % lang
    for lang in langs:
        vocabulary = None
        if args.bpe_vocabulary_threshold is not None:
            _progress('the BPE vocabulary of train.%s' % lang)
            vocabulary = bpe_vocabulary(tmp(codes[lang]), tmp('train.tok.%s' % lang),
                                        tmp('bpe.vocab.%s' % lang),
                                        args.bpe_vocabulary_threshold)
        bpe = Bpe(tmp(codes[lang]), vocabulary)
        for name in paths:
            _progress('applying BPE to %s.%s' % (name, lang))
            map_file(bpe, tmp('%s.tok.%s' % (name, lang)),
                     tmp('%s.bpe.%s' % (name, lang)), 'BPE %s.%s' % (name, lang))

    # 4. dictionaries
    dict_sizes = {}
    for lang in langs:
        base = 'train.bpe.%s' % lang
        word_to_id, full_size = vocabulary_dictionary(tmp(base), args.vocab)
        vocab.save_dictionary(word_to_id, tmp(base + '.pkl'), tmp(base + '.json'))
        dict_sizes[lang] = {'kept': len(word_to_id), 'types': full_size}
        _progress('dictionary %s: %d entries kept of %d (vocab %s)'
                  % (base, len(word_to_id), full_size, args.vocab or 'all'))

    config = {
        'src_lang': args.src_lang, 'trg_lang': args.trg_lang,
        'bpe_merges': args.bpe_merges, 'joint_bpe': args.joint_bpe,
        'bpe_codes': codes, 'vocab': args.vocab, 'zh_split': args.zh_split,
        'lowercase': args.lowercase, 'normalize_punctuation': args.normalize_punctuation,
        'aggressive_dash_splits': args.aggressive_dash_splits,
        'bpe_vocabulary_threshold': args.bpe_vocabulary_threshold,
        'dictionaries': dict_sizes, 'lines': counts,
        'truecase_models': {l: 'truecase-model.%s' % l for l in langs
                            if not (is_zh(l) or args.lowercase)},
        'inputs': paths,
    }
    output_files.write_json(tmp(CONFIG_NAME), config, indent=2, ensure_ascii=False)


# --------------------------------------------------------------------------
# postprocess
# --------------------------------------------------------------------------

def postprocess_mode(args):
    if args.zh_split:
        return args.zh_split
    if args.model_dir:
        path = os.path.join(args.model_dir, CONFIG_NAME)
        if not os.path.exists(path):
            raise InputError('%s: no such file (written by pipeline/preprocess.py '
                                  'prepare)' % path)
        return pickle_and_json.load_json(path).get('zh_split', 'whitespace')
    return 'whitespace'


def postprocess(args):
    post = Postprocessor(args.lang, postprocess_mode(args))
    out = sys.stdout.buffer
    try:
        for n, raw in enumerate(sys.stdin.buffer, 1):
            try:
                line = raw.decode('utf-8')
            except UnicodeDecodeError:
                raise InputError('<stdin>: line %d is not valid UTF-8' % n)
            out.write((post(line) + '\n').encode('utf-8'))
    finally:
        out.flush()


# --------------------------------------------------------------------------
# command line
# --------------------------------------------------------------------------

def parse_args(argv):
    parser = cli.ArgumentParser(
        description='Moses-style preprocessing (tokenise, truecase, BPE, '
        'dictionaries) and postprocessing for the NMT experiments.')
    sub = parser.add_subparsers(dest='command', required=True,
                                parser_class=cli.ArgumentParser)
    p = sub.add_parser('prepare', help='raw parallel text -> model input')
    p.add_argument('--src-lang', required=True,
                   help='the source language\'s code, the files\' suffix (es)')
    p.add_argument('--trg-lang', required=True, help='the target language\'s code (en)')
    for name in SETS:
        p.add_argument('--' + name, required=True, metavar='PREFIX',
                       help='raw %s text: PREFIX.SRC_LANG and PREFIX.TRG_LANG' % name)
    p.add_argument('--out', required=True, metavar='DIR',
                   help='the prepared data\'s folder (data/es-en, say; README.md#prepare-'
                        'the-data lists what goes there)')
    p.add_argument('--bpe-merges', type=int, default=49500,
                   help='BPE merges (default 49500; the papers do not give theirs)')
    g = p.add_mutually_exclusive_group()
    g.add_argument('--joint-bpe', dest='joint_bpe', action='store_true',
                   default=True, help='one BPE model for both sides (default)')
    g.add_argument('--separate-bpe', dest='joint_bpe', action='store_false',
                   help='one BPE model a side')
    p.add_argument('--vocab', type=int, default=50000,
                   help='dictionary size, eos and UNK included (default 50000)')
    p.add_argument('--zh-split', choices=('whitespace', 'chars'),
                   default='whitespace',
                   help='Chinese: keep the text\'s own segmentation (whitespace, the '
                        'default: the UN corpus comes segmented) or split CJK characters')
    p.add_argument('--jobs', type=int, default=1,
                   help='processes for tokenisation (default 1)')
    p.add_argument('--lowercase', action='store_true',
                   help='lowercase the text before tokenisation (no truecasing then)')
    p.add_argument('--normalize-punctuation', action='store_true',
                   help="Moses' normalize-punctuation.perl -l LANG before tokenisation")
    d = p.add_mutually_exclusive_group()
    d.add_argument('--aggressive-dash-splits', dest='aggressive_dash_splits',
                   action='store_true', default=True,
                   help='Fußgänger-Ampel -> Fußgänger @-@ Ampel (default)')
    d.add_argument('--no-aggressive-dash-splits', dest='aggressive_dash_splits',
                   action='store_false', help='as tokenizer.perl without -a')
    p.add_argument('--bpe-vocabulary-threshold', type=int, default=None, metavar='N',
                   help="apply BPE with each side's vocabulary of its BPE'd training "
                   'data, units seen at least N times (subword-nmt --vocabulary-threshold)')
    q = sub.add_parser('postprocess', help='model output -> detokenised text '
                       '(stdin -> stdout)')
    q.add_argument('--lang', required=True, help='the language of the text (its code)')
    q.add_argument('--model-dir', metavar='DIR',
                   help='prepared data directory (for its preprocess.json)')
    q.add_argument('--zh-split', choices=('whitespace', 'chars'), default=None,
                   help='Chinese: how prepare split it (default: what preprocess.json '
                        'of --model-dir says, else whitespace)')
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(cli.arguments(argv))
    return cli.run(lambda: (prepare if args.command == 'prepare' else postprocess)(args))


if __name__ == '__main__':
    sys.exit(main())
