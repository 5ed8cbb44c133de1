"""End-to-end demo: baseline vs. self-attentive residual decoder on a toy task.

    .venv/bin/python demo.py [--minutes M] [--out DIR]

On a CPU, in about ten minutes (plus Theano's one-off C compilation on a
fresh machine):

1. generates the synthetic corpus of ``toy_corpus.py`` (reordering and
   long-distance subject-verb agreement on the target side) into DIR/data and
   builds its dictionaries;
2. trains, one after the other with the same settings and seed, the
   dl4mt baseline (``--decoder gru_cond``) and the attentive residual decoder
   (``--decoder gru_cond_residual --residual attentive --att_scoring content``),
   each for M minutes of training (default 4; Theano's compilation is not
   counted); nmt.py's progress lines are shown live, prefixed with the model
   name, with the time left of the budget in place of nmt.py's own ETA.
   Once the budget is spent, training stops cleanly at the next checkpoint
   (nmt.py saves every ``--save_every`` updates the parameters with the best
   validation cost so far); that checkpoint is the model that is evaluated;
3. translates the test set with each model (beam 5, length-normalised
   scores), scores it with sacreBLEU (``tokenize='none'``: the toy text is
   already tokenised, so BLEU is computed on its own tokens) and with
   ``toy_corpus.agreement_stats`` (main-verb / subject-noun agreement);
4. prints a table (parameters, BLEU, agreement, updates, training time) and
   saves it as DIR/results.json and a bar chart DIR/results.png.

Any failing step stops the demo with one ``error: ...`` line on stderr and
exit status 1.
"""
import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, ROOT)

import toy_corpus  # noqa: E402  (no Theano import in this process)
from text_io import read_lines  # noqa: E402

# the decoder variants the demo compares (names of layers.VARIANTS)
MODELS = ('baseline', 'attentive')


def model_spec(name):
    """(label, nmt.py flags) of a decoder variant, from the registry."""
    import layers
    from train_pair import decoder_flags
    return layers.VARIANTS[name].label, decoder_flags(name)


NON_PARAMS = {'history_errs', 'uidx'}
PROGRESS_RE = re.compile(r'^Epoch (\d+) Update (\d+) Cost (\S+) UD \S+ \| (.*?)( ETA \S+)?$')
SAVE_RE = re.compile(r'^Saving the model at update (\d+)\.\.\. Done')


class DemoError(Exception):
    pass


def log(msg=''):
    print(msg, flush=True)


def _fmt_time(seconds):
    seconds = int(round(max(seconds, 0)))
    return '%d:%02d' % (seconds // 60, seconds % 60)


def run_quiet(cmd, what):
    """Run a short command; its output is shown only when it fails."""
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if proc.returncode != 0:
        lines = (proc.stderr.strip() or proc.stdout.strip() or '').splitlines()
        detail = lines[-1] if lines else 'exit status %d' % proc.returncode
        raise DemoError('%s failed: %s' % (what, detail))
    return proc


def child_env():
    env = dict(os.environ)
    env['PYTHONUNBUFFERED'] = '1'
    return env


# ---------------------------------------------------------------- step 1
def make_data(args, data_dir):
    log('== 1. toy corpus and dictionaries -> %s' % data_dir)
    proc = run_quiet([sys.executable, os.path.join(ROOT, 'toy_corpus.py'), 'generate',
                      '--out', data_dir, '--train', str(args.train), '--dev', str(args.dev),
                      '--test', str(args.test), '--seed', str(args.data_seed)],
                     'generating the toy corpus')
    log(proc.stdout.strip())
    run_quiet([sys.executable, os.path.join(ROOT, 'build_dictionary.py'),
               os.path.join(data_dir, 'train.src'), os.path.join(data_dir, 'train.trg')],
              'building the dictionaries')
    sizes = []
    for side in ('src', 'trg'):
        with open(os.path.join(data_dir, 'train.%s.json' % side), encoding='utf-8') as f:
            sizes.append(len(json.load(f)))
    log('dictionaries: %d source words, %d target words (with eos and UNK)' % tuple(sizes))
    return sizes


# ---------------------------------------------------------------- step 2
def train_command(args, name, extra, data_dir, model_path, n_src, n_trg):
    d = lambda f: os.path.join(data_dir, f)  # noqa: E731
    return ([sys.executable, '-u', os.path.join(ROOT, 'nmt.py'),
             '--model', model_path,
             '--datasets', d('train.src'), d('train.trg'),
             '--dictionaries', d('train.src.pkl'), d('train.trg.pkl'),
             '--valid_datasets', d('dev.src'), d('dev.trg'),
             '--dim_word', str(args.dim_word), '--dim', str(args.dim),
             '--n_words_src', str(n_src), '--n_words', str(n_trg),
             '--maxlen', '30', '--batch_size', str(args.batch_size),
             '--valid_batch_size', '64',
             '--optimizer', args.optimizer, '--lrate', str(args.lrate),
             '--clip_c', str(args.clip_c),
             '--validFreq', str(args.save_every), '--saveFreq', str(args.save_every),
             '--sampleFreq', '100000000', '--dispFreq', str(args.disp_every),
             '--finish_after', str(args.max_updates), '--seed', str(args.seed),
             '--overwrite'] + extra)


def train(args, name, extra, data_dir, model_path, n_src, n_trg):
    """Train until the budget is spent, then stop at the next checkpoint."""
    for suffix in ('', '.json', '.pkl', '.resume.npz'):  # always start afresh
        if os.path.exists(model_path + suffix):
            os.remove(model_path + suffix)
    cmd = train_command(args, name, extra, data_dir, model_path, n_src, n_trg)
    budget = args.minutes * 60.0
    prefix = '[%s] ' % name
    t_launch = time.time()
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, bufsize=1,
                            env=child_env())
    t_start = None          # start of the optimisation (after compilation)
    stopped = False
    ckpt_update, ckpt_time, last_update = None, None, 0
    tail = []
    try:
        for raw in proc.stdout:
            line = raw.rstrip('\n')
            if not line.strip():
                continue
            tail = (tail + [line])[-20:]
            now = time.time()
            if line.startswith('Optimization') and t_start is None:
                t_start = now
                log(prefix + 'compilation and setup took %s; training for %s'
                    % (_fmt_time(now - t_launch), _fmt_time(budget)))
                continue
            m = PROGRESS_RE.match(line)
            if m and t_start is not None:
                last_update = int(m.group(2))
                left = budget - (now - t_start)
                log(prefix + 'epoch %s update %5d cost %7.3f | %s | %s'
                    % (m.group(1), last_update, float(m.group(3)), m.group(4),
                       ('%s left' % _fmt_time(left)) if left > 0
                       else 'budget spent, stopping at the next checkpoint'))
                continue
            log(prefix + line)
            m = SAVE_RE.match(line)
            if m:
                ckpt_update, ckpt_time = int(m.group(1)), now - t_start
                if not stopped and now - t_start >= budget:
                    proc.send_signal(signal.SIGINT)
                    stopped = True
        rc = proc.wait()
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    if rc != 0 and not (stopped and rc == 130):
        err = [l for l in tail if l.startswith('error:')]
        raise DemoError('training %s failed: %s'
                        % (name, err[-1][len('error:'):].strip() if err
                           else (tail[-1] if tail else 'exit status %d' % rc)))
    if not os.path.exists(model_path):
        raise DemoError('training %s wrote no model file %s' % (name, model_path))
    if not stopped:  # finished by itself (finish_after or early stopping)
        ckpt_update = max(last_update, ckpt_update or 0)
        ckpt_time = time.time() - (t_start or t_launch)
    return {'updates': ckpt_update, 'train_seconds': round(ckpt_time, 1),
            'setup_seconds': round((t_start or t_launch) - t_launch, 1),
            'stopped_by_budget': stopped}


def count_params(model_path):
    import numpy
    with numpy.load(model_path) as f:
        return int(sum(f[k].size for k in f.files if k not in NON_PARAMS))


# ---------------------------------------------------------------- step 3
def translate(args, name, data_dir, model_path, out_path):
    cmd = [sys.executable, os.path.join(ROOT, 'translate.py'), '-k', str(args.beam), '-n',
           '-p', str(args.jobs), '--maxlen', '60', model_path,
           os.path.join(data_dir, 'train.src.pkl'), os.path.join(data_dir, 'train.trg.pkl'),
           os.path.join(data_dir, 'test.src'), out_path]
    t0 = time.time()
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, env=child_env())
    prefix = '[%s] ' % name
    buf, last, errors = b'', '', []
    tty = sys.stdout.isatty()
    try:
        while True:
            chunk = proc.stderr.read1(4096) if hasattr(proc.stderr, 'read1') \
                else proc.stderr.read(1)
            if not chunk:
                break
            buf += chunk
            parts = re.split(rb'[\r\n]', buf)
            buf = parts.pop()
            for part in parts:
                text = part.decode('utf-8', 'replace').strip()
                if not text:
                    continue
                if text.startswith('translated'):
                    last = text
                    if tty:
                        sys.stdout.write('\r' + prefix + text)
                        sys.stdout.flush()
                else:
                    errors.append(text)
        rc = proc.wait()
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    if tty and last:
        sys.stdout.write('\r')
    if last:
        log(prefix + last + ' (%s)' % _fmt_time(time.time() - t0))
    if rc != 0 or not os.path.exists(out_path):
        err = [e for e in errors if e.startswith('error:')]
        raise DemoError('translating with %s failed: %s'
                        % (name, err[-1][len('error:'):].strip() if err
                           else (errors[-1] if errors else 'exit status %d' % rc)))
    return round(time.time() - t0, 1)


def score(data_dir, hyp_path):
    import sacrebleu
    src = read_lines(os.path.join(data_dir, 'test.src'))
    ref = read_lines(os.path.join(data_dir, 'test.trg'))
    hyp = read_lines(hyp_path)
    if len(hyp) != len(ref):
        raise DemoError('%s has %d lines, the reference %d' % (hyp_path, len(hyp), len(ref)))
    bleu = sacrebleu.corpus_bleu(hyp, [ref], tokenize='none', force=True)
    agr = toy_corpus.agreement_stats(src, hyp)
    exact = sum(h.split() == r.split() for h, r in zip(hyp, ref)) / len(ref)
    return {'bleu': round(bleu.score, 2), 'bleu_signature': str(bleu.format(signature=True)),
            'agreement': agr, 'exact_match': round(exact, 4)}


# ---------------------------------------------------------------- step 4
def print_table(rows):
    head = ['model', 'params', 'BLEU', 'agreement', 'correct/sites', 'missing',
            'exact', 'updates', 'train time']
    body = []
    for r in rows:
        a = r['agreement']
        body.append([r['label'], '{:,}'.format(r['params']), '%.2f' % r['bleu'],
                     '%.1f%%' % (100 * a['accuracy']),
                     '%d/%d' % (a['correct'], a['sites']), str(a['missing']),
                     '%.1f%%' % (100 * r['exact_match']), str(r['updates']),
                     _fmt_time(r['train_seconds'])])
    widths = [max(len(x[i]) for x in [head] + body) for i in range(len(head))]
    sep = '+'.join('-' * (w + 2) for w in widths)
    fmt = lambda cells: ' | '.join(  # noqa: E731
        c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))
    log(' ' + fmt(head))
    log('-' + sep + '-')
    for b in body:
        log(' ' + fmt(b))


def plot(rows, path):
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    labels = [r['label'] for r in rows]
    colors = ['#7f7f7f', '#1f77b4', '#ff7f0e', '#2ca02c'][:len(rows)]
    panels = [('BLEU (test)', [r['bleu'] for r in rows], '%.1f'),
              ('agreement accuracy (%)', [100 * r['agreement']['accuracy'] for r in rows],
               '%.1f'),
              ('exact match (%)', [100 * r['exact_match'] for r in rows], '%.1f')]
    fig, axes = plt.subplots(1, len(panels), figsize=(4 * len(panels), 3.6))
    for ax, (title, values, fmt) in zip(axes, panels):
        bars = ax.bar(range(len(values)), values, color=colors)
        ax.set_xticks(range(len(values)))
        ax.set_xticklabels(labels, fontsize=8)
        ax.set_title(title, fontsize=10)
        ax.set_ylim(0, max(100.0, max(values) * 1.1) if 'agreement' in title or
                    'exact' in title else max(values + [1.0]) * 1.2)
        for b, v in zip(bars, values):
            ax.text(b.get_x() + b.get_width() / 2, b.get_height(), fmt % v,
                    ha='center', va='bottom', fontsize=9)
    fig.suptitle('toy corpus, %s of training per model'
                 % _fmt_time(max(r['train_seconds'] for r in rows)), fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


# ---------------------------------------------------------------- main
def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--minutes', type=float, default=4.0,
                   help='training time budget per model, in minutes (default 4; '
                        'compilation not counted)')
    p.add_argument('--out', default='demo_output',
                   help='output folder (default demo_output/)')
    g = p.add_argument_group('tuning (defaults are what the demo was tuned with)')
    g.add_argument('--train', type=int, default=20000, help='training pairs')
    g.add_argument('--dev', type=int, default=300, help='validation pairs')
    g.add_argument('--test', type=int, default=300, help='test pairs')
    g.add_argument('--data_seed', type=int, default=1)
    g.add_argument('--seed', type=int, default=1234, help='training seed (both models)')
    g.add_argument('--dim_word', type=int, default=64)
    g.add_argument('--dim', type=int, default=64)
    g.add_argument('--batch_size', type=int, default=64)
    g.add_argument('--clip_c', type=float, default=-1.0,
                   help='gradient norm clipping (<= 0: none)')
    g.add_argument('--optimizer', default='adadelta')
    g.add_argument('--lrate', type=float, default=0.01,
                   help='learning rate (unused by adadelta)')
    g.add_argument('--save_every', type=int, default=100,
                   help='validation and checkpoint frequency, in updates')
    g.add_argument('--disp_every', type=int, default=50)
    g.add_argument('--max_updates', type=int, default=9999999,
                   help='also stop after this many updates')
    g.add_argument('--beam', type=int, default=5)
    g.add_argument('--jobs', type=int, default=min(4, os.cpu_count() or 1),
                   help='translation processes (default: CPUs, at most 4)')
    g.add_argument('--models', default='baseline,attentive',
                   help='comma-separated subset of baseline,attentive')
    args = p.parse_args(argv)
    if args.minutes <= 0:
        p.error('--minutes must be positive')
    names = list(MODELS)
    args.models = [m.strip() for m in args.models.split(',') if m.strip()]
    bad = [m for m in args.models if m not in names]
    if bad or not args.models:
        p.error('--models: choose from %s' % ', '.join(names))
    for key in ('train', 'dev', 'test', 'dim_word', 'dim', 'batch_size', 'save_every',
                'disp_every', 'max_updates', 'beam', 'jobs'):
        if getattr(args, key) < 1:
            p.error('--%s must be at least 1' % key)
    return args


def run(args):
    t0 = time.time()
    out = os.path.abspath(args.out)
    data_dir = os.path.join(out, 'data')
    try:
        os.makedirs(data_dir, exist_ok=True)
    except OSError as e:
        raise DemoError('cannot create %s: %s' % (data_dir, e.strerror or e))
    n_src, n_trg = make_data(args, data_dir)

    rows = []
    models = [m for m in MODELS if m in args.models]
    for i, name in enumerate(models):
        label, extra = model_spec(name)
        log('')
        log('== 2.%d training %s (%s) for %s'
            % (i + 1, name, ' '.join(extra), _fmt_time(args.minutes * 60)))
        model_path = os.path.join(out, '%s.npz' % name)
        info = train(args, name, extra, data_dir, model_path, n_src, n_trg)
        log('[%s] model of update %s after %s of training -> %s'
            % (name, info['updates'], _fmt_time(info['train_seconds']), model_path))
        rows.append(dict(name=name, label=label, options=extra, model=model_path,
                         params=count_params(model_path), **info))

    log('')
    log('== 3. translating %s (beam %d, normalised) and scoring'
        % (os.path.join(data_dir, 'test.src'), args.beam))
    for r in rows:
        hyp = os.path.join(out, '%s.test.trg' % r['name'])
        r['translate_seconds'] = translate(args, r['name'], data_dir, r['model'], hyp)
        r['hypotheses'] = hyp
        r.update(score(data_dir, hyp))
        log('[%s] BLEU %.2f, agreement %.1f%% (%d/%d produced sites correct, %d missing)'
            % (r['name'], r['bleu'], 100 * r['agreement']['accuracy'],
               r['agreement']['correct'], r['agreement']['sites'] - r['agreement']['missing'],
               r['agreement']['missing']))

    ref_agr = toy_corpus.agreement_stats(read_lines(os.path.join(data_dir, 'test.src')),
                                         read_lines(os.path.join(data_dir, 'test.trg')))
    total = time.time() - t0
    results = {
        'settings': {k: getattr(args, k) for k in (
            'minutes', 'train', 'dev', 'test', 'data_seed', 'seed', 'dim_word', 'dim',
            'batch_size', 'optimizer', 'clip_c', 'save_every', 'beam')},
        'bleu_tokenize': 'none',
        'reference_agreement': ref_agr,
        'models': rows,
        'total_seconds': round(total, 1),
    }
    results_path = os.path.join(out, 'results.json')
    png_path = os.path.join(out, 'results.png')
    try:
        with open(results_path, 'w', encoding='utf-8') as f:
            json.dump(results, f, indent=2)
            f.write('\n')
    except OSError as e:
        raise DemoError('cannot write %s: %s' % (results_path, e.strerror or e))
    plot(rows, png_path)

    log('')
    log('== 4. results on %d test sentences (%d agreement sites; sacreBLEU, '
        'tokenize=none; agreement = correct / produced sites)'
        % (args.test, ref_agr['sites']))
    print_table(rows)
    log('')
    log('total time %s; wrote %s and %s' % (_fmt_time(total), results_path, png_path))
    return results


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        run(args)
    except DemoError as e:
        print('error: %s' % e, file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print('error: interrupted', file=sys.stderr)
        return 130
    except Exception as e:  # anything unforeseen still ends with one line
        print('error: %s: %s' % (type(e).__name__, e), file=sys.stderr)
        return 1
    return 0


if __name__ == '__main__':
    sys.exit(main())
