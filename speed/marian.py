"""Marian as the benchmark's yardstick: its training speed on the batches that
speed/benchmark.py times this project on, with the same model and optimiser.

Marian comes from the ``pymarian`` wheel (Marian 1.12's command line as
``pymarian``), installed into an environment of its own (``.venv-marian``
at the project root, never the project's ``.venv``).  Its ``--type amun`` is
dl4mt's architecture (bi-GRU encoder, conditional GRU decoder, the same
readout).  The batches are written out as a corpus in which every line of a
batch follows the other, and Marian reads it in order (``--shuffle none``,
``--maxi-batch 1``), so that its updates see the sentences ours see.

On several threads Marian trains asynchronously by default: each thread
takes a mini-batch of its own and applies its gradient to the shared
parameters when it is done, so two threads work on two batches at once,
each gradient taken on parameters that the other thread may since have
moved (another training algorithm than one thread's).  With ``--sync-sgd``
its threads split every mini-batch and sum their gradients into one update,
which is what one thread computes, and what this project's MPI workers do
(data_parallel.py).  ``MODES`` names both; the benchmark times each.

``MarianUnavailable`` says in one line why Marian cannot run here; the
benchmark prints it and goes on without the comparison.
"""
import os
import re
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV_DIR = os.path.join(ROOT, '.venv-marian')
WHEEL = 'pymarian'
EOS, UNK = '</s>', '<unk>'     # Marian's names of ids 0 and 1
# "... : Time 12.34s : 2345.67 words/s ..." in Marian's progress lines
RATE = re.compile(r'Up\. ([\d,]+) .*Time ([\d.]+)s : ([\d.]+) words/s')


# Marian's ways of training on several threads: the extra flags of each
MODES = (('asynchronous', []), ('synchronous', ['--sync-sgd']))


class MarianUnavailable(Exception):
    """Marian cannot be installed or run here (the reason in one line)."""


def marian_command(env_dir=ENV_DIR, install=True):
    """The path of ``pymarian`` in env_dir, created (venv + pip install
    pymarian) when missing and ``install``."""
    exe = os.path.join(env_dir, 'bin', 'pymarian')
    if os.path.exists(exe):
        return exe
    if not install:
        raise MarianUnavailable('no Marian in %s (the benchmark installs it with '
                                '--marian)' % env_dir)
    python = os.path.join(env_dir, 'bin', 'python')
    steps = [[sys.executable, '-m', 'venv', '--clear', env_dir],
             [python, '-m', 'pip', 'install', '-q', WHEEL]]
    for step in steps:
        done = subprocess.run(step, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              universal_newlines=True)
        if done.returncode != 0:
            last = (done.stdout.strip().splitlines() or ['no output'])[-1]
            raise MarianUnavailable('cannot install Marian (%s): %s'
                                    % (' '.join(step[-3:]), last))
    if not os.path.exists(exe):
        raise MarianUnavailable('the %s wheel installed no pymarian command' % WHEEL)
    return exe


def marian_blas(exe):
    """The BLAS Marian computes with: the pymarian wheel links Intel's MKL
    into its extension module (no library of its own to name), which this
    finds by MKL's service symbols in that file; 'unknown' otherwise.  MKL
    picks slower code paths on AMD's CPUs, so Marian's figures, and the
    ratios to them, depend on the CPU's maker (docs/speed.md)."""
    import glob
    env = os.path.dirname(os.path.dirname(exe))
    modules = glob.glob(os.path.join(env, 'lib', 'python*', 'site-packages', '_pymarian*.so'))
    for module in modules:
        with open(module, 'rb') as f:
            tail = b''
            for block in iter(lambda: f.read(1 << 24), b''):
                if b'mkl_serv_' in tail + block:
                    return 'Intel MKL (linked into the pymarian wheel)'
                tail = block[-16:]
    return 'unknown'


def write_vocabulary(path, n_words):
    """Marian's YAML vocabulary for ids 0..n_words-1: our dictionaries' eos
    and UNK (0, 1) under Marian's names, then one made-up word an id."""
    with open(path, 'w') as f:
        f.write('"%s": 0\n"%s": 1\n' % (EOS, UNK))
        for i in range(2, n_words):
            f.write('w%d: %d\n' % (i, i))


def write_corpus(batches, directory, n_words_src, n_words):
    """The batches' sentences (prepared arrays x, x_mask, y, y_mask, time
    major) as train.src / train.trg of made-up words, in batch order, and
    the two vocabularies; returns the file names."""
    names = {k: os.path.join(directory, k) for k in
             ('train.src', 'train.trg', 'vocab.src.yml', 'vocab.trg.yml')}
    with open(names['train.src'], 'w') as src, open(names['train.trg'], 'w') as trg:
        for x, x_mask, y, y_mask in batches:
            for j in range(x.shape[1]):
                src.write(_sentence(x[:, j], x_mask[:, j]))
                trg.write(_sentence(y[:, j], y_mask[:, j]))
    write_vocabulary(names['vocab.src.yml'], n_words_src)
    write_vocabulary(names['vocab.trg.yml'], n_words)
    return names


def _sentence(ids, mask):
    """One line: the words of the unmasked ids before eos."""
    words = ['w%d' % i for i, m in zip(ids, mask) if m > 0 and i != 0]
    return ' '.join(words) + '\n'


def training_command(exe, files, options, threads, updates, model_dir, flags=()):
    """Marian's command for ``updates`` updates of the model that
    ``options`` (nmt.py's) describes; ``flags``: a mode's (MODES)."""
    return [exe, '--type', 'amun', '--model', os.path.join(model_dir, 'model.npz'),
            '--train-sets', files['train.src'], files['train.trg'],
            '--vocabs', files['vocab.src.yml'], files['vocab.trg.yml'],
            '--dim-vocabs', str(options['n_words_src']), str(options['n_words']),
            '--dim-emb', str(options['dim_word']), '--dim-rnn', str(options['dim']),
            '--mini-batch', str(options['batch_size']), '--maxi-batch', '1',
            '--shuffle', 'none', '--max-length', str(options['maxlen']),
            '--optimizer', 'adam', '--learn-rate', str(options['lrate']),
            '--clip-norm', str(options['clip_c']), '--cpu-threads', str(threads),
            '--after', '%du' % updates, '--disp-freq', '10', '--save-freq', '1000000u',
            '--seed', '1234', '--quiet-translation', '--overwrite', '--no-restore-corpus'
            ] + list(flags)


def train_speed(exe, files, options, threads, updates, model_dir, warmup=10, flags=()):
    """Marian's training speed: target words/s over its progress lines
    after the first ``warmup`` updates, seconds from the command to its
    first progress line, and its peak memory (MB).  A new model each time:
    the files of an earlier run in model_dir are removed first (Marian
    would resume from them)."""
    for name in os.listdir(model_dir):
        if name.startswith('model.npz'):
            os.remove(os.path.join(model_dir, name))
    cmd = training_command(exe, files, options, threads, updates, model_dir, flags)
    start = time.time()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            universal_newlines=True)
    lines, first_line, peak = [], None, None
    for line in proc.stderr:
        lines.append(line)
        if first_line is None and RATE.search(line):
            first_line = time.time() - start
        peak = max(peak or 0, high_water_mb(proc.pid) or 0) or None
    if proc.wait() != 0:
        tail = ''.join(lines[-3:]).strip().replace('\n', ' | ')
        raise MarianUnavailable('Marian exited with status %d: %s' % (proc.returncode, tail))
    figures = _figures(lines, warmup, first_line, time.time() - start)
    figures['peak_rss_mb'] = peak
    return figures


def high_water_mb(pid):
    """A running process's peak resident memory (VmHWM), MB; None when it
    cannot be read.  (The rusage of children would count this process's own
    memory: Linux carries a parent's resident size across fork and exec.)"""
    try:
        with open('/proc/%d/status' % pid) as f:
            for line in f:
                if line.startswith('VmHWM:'):
                    return round(int(line.split()[1]) / 1024., 1)
    except (OSError, ValueError):
        return None
    return None


def progress_lines(lines):
    """(update, seconds, words/s) of each of Marian's progress lines."""
    return [(int(m.group(1).replace(',', '')), float(m.group(2)), float(m.group(3)))
            for m in map(RATE.search, lines) if m]


def time_weighted_rate(timed):
    """words/s over [(seconds, words/s)] of progress intervals: their words
    over their time (None without time)."""
    seconds = sum(sec for sec, _ in timed)
    return sum(sec * wps for sec, wps in timed) / seconds if seconds else None


def _figures(lines, warmup, first_line, wall):
    """words/s weighted by the time of each progress interval after warmup."""
    rows = progress_lines(lines)
    timed = [(sec, wps) for up, sec, wps in rows if up > warmup]
    if not timed:
        raise MarianUnavailable('no progress line of Marian after update %d' % warmup)
    return {'words_per_sec': round(time_weighted_rate(timed), 2),
            'updates_timed': rows[-1][0] - warmup,
            'startup_sec': round(first_line, 2) if first_line is not None else None,
            'wall_sec': round(wall, 2)}


# --------------------------------------------------------------------------
# Decoding: this project's model translated by Marian's decoder

# dl4mt's names that Marian's amun model spells or shapes otherwise
AMUN_CONFIG = """type: amun
dim-emb: %(dim_word)d
dim-rnn: %(dim)d
dim-vocabs:
  - %(n_words_src)d
  - %(n_words)d
enc-type: bidirectional
enc-cell: gru
enc-cell-depth: 1
enc-depth: 1
dec-cell: gru
dec-cell-base-depth: 2
dec-cell-high-depth: 1
dec-depth: 1
layer-normalization: false
skip: false
tied-embeddings: false
tied-embeddings-all: false
tied-embeddings-src: false
"""


def amun_parameters(params, options):
    """A baseline model's parameters (dl4mt's names) as Marian's ``--type amun``
    model file holds them: biases as 1 x n rows, the output layer's matrix
    transposed (decoder_ff_logit_l2_Wt), decoder_c_tt empty as in Marian's
    own files (dl4mt adds it to every attention score of a sentence, which
    the softmax over the source cancels; Marian reads its files as amun's
    only with it), and the model's configuration."""
    if options.get('decoder', 'gru_cond') != 'gru_cond':
        raise MarianUnavailable("Marian's amun model is dl4mt's baseline; this model's "
                                'decoder is %s' % options['decoder'])
    import numpy
    amun = {}
    for name, value in params.items():
        if name == 'decoder_c_tt':
            continue
        if name == 'ff_logit_W':
            amun['decoder_ff_logit_l2_Wt'] = numpy.ascontiguousarray(value.T)
        else:
            amun[name] = value.reshape(1, -1) if value.ndim == 1 else value
    amun['decoder_c_tt'] = numpy.zeros((1, 0), dtype=numpy.float32)
    config = (AMUN_CONFIG % options).encode() + b'\0'
    amun['special:model.yml'] = numpy.frombuffer(config, dtype=numpy.int8)
    return amun


def write_json_vocabulary(path, word_dict, n_words):
    """Marian's JSON vocabulary of a dl4mt dictionary: its first n_words ids,
    eos and UNK under Marian's names."""
    import json
    names = {0: EOS, 1: UNK}
    vocab = {names.get(i, w): i for w, i in word_dict.items() if i < n_words}
    with open(path, 'w', encoding='utf-8') as f:
        json.dump(vocab, f, ensure_ascii=False)


# run by .venv-marian's Python: load the model, then translate and time
DECODE_SCRIPT = r'''
import json, sys, time
from pymarian import Translator
job = json.loads(sys.argv[1])
start = time.time()
translator = Translator(models=job["model"], vocabs=job["vocabs"], beam_size=job["beam"],
                        mini_batch=job["mini_batch"], maxi_batch=100, maxi_batch_sort="src",
                        cpu_threads=job["threads"], normalize=1.0, quiet=True,
                        max_length_factor=job["max_length_factor"])
loaded = time.time() - start
lines = open(job["source"], encoding="utf-8").read().splitlines()
start = time.time()
outputs = translator.translate(lines)
json.dump({"load_sec": loaded, "wall_sec": time.time() - start, "outputs": outputs},
          sys.stdout)
'''


def decode_speed(model, vocabs, source, beam, mini_batch, threads, max_length_factor=3):
    """Marian's decoder on a file: seconds to load the model, seconds to
    translate every line, and its translations."""
    import json
    marian_command()   # installs Marian where it is missing
    python = os.path.join(ENV_DIR, 'bin', 'python')
    job = dict(model=model, vocabs=list(vocabs), source=source, beam=beam,
               mini_batch=mini_batch, threads=threads, max_length_factor=max_length_factor)
    done = subprocess.run([python, '-c', DECODE_SCRIPT, json.dumps(job)],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ['no output'])[-1]
        raise MarianUnavailable("Marian's decoder exited with status %d: %s"
                                % (done.returncode, last))
    return json.loads(done.stdout)
