"""End-to-end demo: the dl4mt baseline and the attentive residual decoder on a toy task.

    .venv/bin/python demo/demo.py [--out DIR]                  # one run
    .venv/bin/python demo/demo.py --seeds 1,2,3 --out DIR      # three runs: mean and spread

1. generates the synthetic corpus of ``demo/toy_corpus.py`` (reordering, and a
   target verb that agrees with its subject noun 3-10 tokens earlier) into
   DIR/data and builds its dictionaries;
2. trains the two models at the same time (one nmt.py process each, same
   settings and seed, ``--threads`` BLAS and OpenMP threads each), validating
   every ``--valid-every`` updates.  The demo follows each run through its
   training log (MODEL.log.jsonl, machinery/training_log.py).  Each one stops as soon
   as it has converged by the rule of ``demo/convergence.py`` (its validation
   cost per target token is below ``--target-cost``, or has stopped
   improving): the demo then asks it to stop (MODEL.stop, machinery/stop_requests.py);
   or when its budget of ``--max-updates`` updates is spent: "out of budget".
   The budget is in updates, so the verdict does not depend on the machine's
   speed.  The model evaluated holds the parameters of the run's best
   validation;
3. translates the test set with each model (beam 5, length-normalised, with
   the attention weights), and scores it: BLEU (``bleu.corpus_bleu_tokenized``,
   multi-bleu.perl on the toy tokens), subject-verb agreement overall and by
   distance (``toy_language.agreement_by_distance``), exact matches;
4. prints the table and a few translations next to their reference, and writes
   DIR/results.json, the chart DIR/results.png (validation curves, BLEU,
   agreement by distance) and DIR/attention.png (``analysis/analyze.py matrix``: the
   attention over the source and over the previous words for one test
   sentence, the models side by side).

Theano runs with ``optimizer=fast_compile`` (DEMO_THEANO_FLAGS); flags in
THEANO_FLAGS win.  Any failing step stops the demo with one ``error: ...``
line on stderr and exit status 1.
"""
import concurrent.futures
import copy
import os
import re
import resource
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))   # the project's root
if __name__ == '__main__':  # run as a file: import from the project root, not this folder
    sys.path[0] = ROOT

from demo import report  # noqa: E402  (no Theano import in this process)
from demo import toy_language  # noqa: E402
from machinery.bleu import corpus_bleu_tokenized  # noqa: E402
from machinery import cli  # noqa: E402
from theano_platform import theano_flags  # noqa: E402
from demo.convergence import ConvergenceRule  # noqa: E402
from machinery.model_io import count_archive_params  # noqa: E402
from machinery.output_files import remove_if_there, write_json  # noqa: E402
from machinery.pickle_and_json import load_json  # noqa: E402
from machinery.stop_requests import stop_path  # noqa: E402
from machinery.text_io import read_lines  # noqa: E402
from machinery.training_log import LogReader, log_path  # noqa: E402
from machinery.training_state import resume_path  # noqa: E402

DEFAULT_MODELS = ('baseline', 'attentive')
# Graph optimisations of Theano's fast_compile level, C code for every op:
# less to compile on an empty cache than the default fast_run (the speed-up and
# the training speed were not measured side by side on a quiet machine).
DEMO_THEANO_FLAGS = [('optimizer', 'fast_compile')]
# BLAS and OpenMP threads of each process (--threads): two processes side by
# side on the project's 2-core machine ran faster with 1 each than with 2
# (docs/demo.md, "Threads per process")
DEFAULT_THREADS = 1

_print_lock = threading.Lock()


class DemoError(cli.CommandError):
    pass


def log(msg=''):
    with _print_lock:
        print(msg, flush=True)


def fmt_time(seconds):
    seconds = int(round(max(seconds, 0)))
    return '%d:%02d' % (seconds // 60, seconds % 60)


def child_env(threads):
    """The environment of the demo's processes: its Theano flags (the user's
    win) and ``threads`` BLAS and OpenMP threads (unless the user set them)."""
    env = dict(os.environ, PYTHONUNBUFFERED='1')
    env['THEANO_FLAGS'] = theano_flags.with_defaults(env.get('THEANO_FLAGS', ''),
                                                     DEMO_THEANO_FLAGS)
    for name in ('OPENBLAS_NUM_THREADS', 'OMP_NUM_THREADS', 'MKL_NUM_THREADS'):
        env.setdefault(name, str(threads))
    return env


class Children(object):
    """The running subprocesses, so that a failure or Ctrl-C ends them all."""

    def __init__(self, threads):
        self.lock, self.procs, self.closed = threading.Lock(), [], False
        self.threads = threads

    def start(self, cmd, **kwargs):
        with self.lock:
            if self.closed:
                raise DemoError('stopped')
            proc = subprocess.Popen(cmd, cwd=ROOT, env=child_env(self.threads), **kwargs)
            self.procs.append(proc)
            return proc

    def kill_all(self):
        with self.lock:
            self.closed = True
            for proc in self.procs:
                if proc.poll() is None:
                    proc.kill()


def run_quiet(cmd, what, threads):
    """Run a short command; its output is shown only when it fails."""
    return cli.run_command(cmd, what, quiet=True, error=DemoError, cwd=ROOT,
                           env=child_env(threads))


# ---------------------------------------------------------------- step 1
def make_data(args, data_dir):
    log('== 1. toy corpus and dictionaries -> %s' % data_dir)
    proc = run_quiet([sys.executable, os.path.join(ROOT, 'demo', 'toy_corpus.py'), 'generate',
                      '--out', data_dir, '--train', str(args.train), '--dev', str(args.dev),
                      '--test', str(args.test), '--seed', str(args.data_seed)],
                     'generating the toy corpus', args.threads)
    log(proc.stdout.strip())
    run_quiet([sys.executable, os.path.join(ROOT, 'build_dictionary.py'),
               os.path.join(data_dir, 'train.src'), os.path.join(data_dir, 'train.trg')],
              'building the dictionaries', args.threads)
    sizes = [len(load_json(os.path.join(data_dir, 'train.%s.json' % side)))
             for side in ('src', 'trg')]
    dev = read_lines(os.path.join(data_dir, 'dev.trg'))
    tokens = sum(len(line.split()) + 1 for line in dev) / len(dev)  # words and <eos>
    log('dictionaries: %d source words, %d target words (with eos and UNK); '
        '%.2f target tokens per validation sentence' % (sizes[0], sizes[1], tokens))
    return {'n_words_src': sizes[0], 'n_words': sizes[1], 'dev_tokens_per_sentence': tokens}


# ---------------------------------------------------------------- step 2
def variant_flags(name):
    """(table label, nmt.py flags) of a decoder variant of the registry."""
    import layers
    from pipeline.train_pair import decoder_flags
    return layers.VARIANTS[name].label, decoder_flags(name)


def train_command(args, run, data):
    d = lambda f: os.path.join(args.data_dir, f)  # noqa: E731
    return ([sys.executable, '-u', os.path.join(ROOT, 'nmt.py'),
             '--model', run['model'],
             '--datasets', d('train.src'), d('train.trg'),
             '--dictionaries', d('train.src.pkl'), d('train.trg.pkl'),
             '--valid_datasets', d('dev.src'), d('dev.trg'),
             '--dim_word', str(args.dim_word), '--dim', str(args.dim),
             '--n_words_src', str(data['n_words_src']), '--n_words', str(data['n_words']),
             '--maxlen', '30', '--batch_size', str(args.batch_size),
             '--valid_batch_size', '100',
             '--optimizer', args.optimizer, '--lrate', str(args.lrate), '--init', args.init,
             '--clip_c', str(args.clip_c),
             '--validFreq', str(args.valid_every), '--saveFreq', str(args.valid_every),
             '--sampleFreq', '100000000', '--dispFreq', str(args.disp_every),
             '--patience', '1000000',  # the demo's own rule decides
             '--finish_after', str(args.max_updates), '--seed', str(args.seed),
             '--overwrite'] + run['flags'])


class Training(object):
    """Follows one nmt.py run through its training log (MODEL.log.jsonl,
    machinery/training_log.py): progress, validations, the stopping rule.  Once the
    run has converged it asks it to stop (the stop file, machinery/stop_requests.py);
    nmt.py ends it after the update in progress, at --finish_after (the
    update budget) otherwise."""

    def __init__(self, args, run, data, proc):
        self.args, self.run, self.proc = args, run, proc
        self.tokens = data['dev_tokens_per_sentence']
        self.rule = ConvergenceRule(args.target_cost, args.plateau_window,
                                    args.plateau_gain)
        self.prefix = '[%s] ' % run['name']
        self.reader = LogReader(log_path(run['model']))
        self.t_launch = time.time()
        self.t_start = self.t_end = None
        self.updates = self.decided_at = 0
        self.rate = None
        self.history = []          # (update, validation cost per token)
        self.status = self.reason = None

    def follow(self, poll_seconds=0.5):
        """Read the log until the process ends; its exit status."""
        while True:
            rc = self.proc.poll()
            for event in self.reader.new_events():
                self.on_event(event)
            if rc is not None:
                return rc
            time.sleep(poll_seconds)

    def on_event(self, event):
        kind = event['event']
        if kind == 'start':
            self.t_start = event['time']
            log(self.prefix + 'compiled and set up in %s; training'
                % fmt_time(self.t_start - self.t_launch))
        elif kind == 'update':
            self.updates, self.rate = event['uidx'], event['updates_per_second']
            log(self.prefix + 'update %5d  cost %7.3f  %.2f upd/s  %d of %d updates'
                % (self.updates, event['cost'], self.rate, self.updates,
                   self.args.max_updates))
        elif kind == 'validation':
            self.on_validation(event['uidx'], event['cost'])
        elif kind in ('stop', 'end'):
            self.t_end = event['time']

    def on_validation(self, update, cost):
        if self.status is not None:
            return
        per_token = cost / self.tokens
        self.history.append((update, round(per_token, 6)))
        reason = self.rule.add(per_token)
        log(self.prefix + 'validation at update %d: %.4f nats/token (converged below %g)'
            % (update, per_token, self.args.target_cost))
        if reason:
            self.status, self.reason, self.decided_at = 'converged', reason, update
            log(self.prefix + 'converged: ' + reason)
            with open(stop_path(self.run['model']), 'w'):
                pass

    def result(self, rc):
        if rc != 0:
            raise DemoError('training %s failed: %s' % (
                self.run['name'], cli.child_error(read_lines(self.run['output'], allow_empty=True),
                                             rc)))
        if not os.path.exists(self.run['model']):
            raise DemoError('training %s wrote no model file' % self.run['name'])
        if self.status is None:   # nmt.py ended by itself: --finish_after
            self.status = 'out of budget'
            self.reason = 'not converged after %d updates' % self.updates
            self.decided_at = self.updates
        best = min(c for _, c in self.history) if self.history else None
        t_start = self.t_start or time.time()
        return {'status': self.status, 'status_reason': self.reason,
                'updates': self.decided_at,
                'train_seconds': round((self.t_end or time.time()) - t_start, 1),
                'setup_seconds': round(t_start - self.t_launch, 1),
                'updates_per_second': self.rate, 'valid_history': self.history,
                'best_valid_cost': best}


def train(args, run, data, children):
    # always start afresh
    for path in (run['model'], run['model'] + '.json', run['model'] + '.pkl',
                 resume_path(run['model']), log_path(run['model']), stop_path(run['model'])):
        remove_if_there(path)
    with open(run['output'], 'w') as output:   # what nmt.py prints, for its errors
        proc = children.start(train_command(args, run, data), stdout=output,
                              stderr=subprocess.STDOUT)
    training = Training(args, run, data, proc)
    info = training.result(training.follow())
    log('[%s] %s (%s): the model of its best validation, %d updates, %s of training'
        % (run['name'], info['status'], info['status_reason'], info['updates'],
           fmt_time(info['train_seconds'])))
    return info


# ---------------------------------------------------------------- step 3
def translate(args, run, children):
    d = lambda f: os.path.join(args.data_dir, f)  # noqa: E731
    cmd = [sys.executable, os.path.join(ROOT, 'translate.py'), '-k', str(args.beam), '-n',
           '-p', '1', '--maxlen', '60', '--alignments', run['alignments'], run['model'],
           d('train.src.pkl'), d('train.trg.pkl'), d('test.src'), run['hypotheses']]
    t0 = time.time()
    proc = children.start(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    errors = [l.strip() for l in re.split(r'[\r\n]', proc.stderr.read().decode(
        'utf-8', 'replace')) if l.strip()]
    rc = proc.wait()
    if rc != 0 or not os.path.exists(run['hypotheses']):
        raise DemoError('translating with %s failed: %s'
                        % (run['name'], cli.child_error(errors, rc)))
    seconds = time.time() - t0
    log('[%s] translated the test set in %s' % (run['name'], fmt_time(seconds)))
    return round(seconds, 1)


def score(data_dir, hyp_path):
    src = read_lines(os.path.join(data_dir, 'test.src'))
    ref = read_lines(os.path.join(data_dir, 'test.trg'))
    hyp = read_lines(hyp_path, allow_empty=True)
    if len(hyp) != len(ref):
        raise DemoError('%s has %d lines, the reference %d' % (hyp_path, len(hyp), len(ref)))
    bleu = corpus_bleu_tokenized(hyp, ref)
    exact = sum(h.split() == r.split() for h, r in zip(hyp, ref)) / len(ref)
    return {'bleu': round(bleu['bleu'], 2), 'bleu_details': bleu,
            'agreement': toy_language.agreement_stats(src, hyp),
            'agreement_by_distance': toy_language.agreement_by_distance(src, hyp, ref),
            'exact_match': round(exact, 4)}


def model_pipeline(args, run, data, children):
    """Train, translate and score one model (runs in its own thread)."""
    run.update(train(args, run, data, children))
    run['params'] = count_archive_params(run['model'])
    run['translate_seconds'] = translate(args, run, children)
    run.update(score(args.data_dir, run['hypotheses']))
    log('[%s] BLEU %.2f, agreement %.1f%%, exact match %.1f%%'
        % (run['name'], run['bleu'], 100 * run['agreement']['accuracy'],
           100 * run['exact_match']))
    return run


def run_models(args, data):
    """All models at once, one thread (and one process at a time) each."""
    runs = []
    for name in args.models:
        label, flags = variant_flags(name)
        base = os.path.join(args.out, name)
        runs.append({'name': name, 'label': label, 'flags': flags, 'model': base + '.npz',
                     'output': base + '.train.out', 'hypotheses': base + '.test.trg',
                     'alignments': base + '.test.jsonl'})
        log('[%s] %s: nmt.py %s' % (name, label, ' '.join(flags)))
    children = Children(args.threads)
    with concurrent.futures.ThreadPoolExecutor(len(runs)) as pool:
        futures = [pool.submit(model_pipeline, args, r, data, children) for r in runs]
        try:
            pending = futures
            while pending:  # short waits: Ctrl-C reaches this thread
                done, pending = concurrent.futures.wait(
                    pending, timeout=0.5, return_when=concurrent.futures.FIRST_EXCEPTION)
                for f in done:
                    f.result()
        except BaseException:
            children.kill_all()
            raise
    return runs


# ---------------------------------------------------------------- step 4
def attention_figure(args, runs, index, png):
    labels = ','.join(r['label'].replace(',', ' ') for r in runs)
    run_quiet([sys.executable, os.path.join(ROOT, 'analysis', 'analyze.py'), 'matrix']
              + [r['alignments'] for r in runs]
              + ['--labels', labels, '--source', os.path.join(args.data_dir, 'test.src'),
                 '-i', str(index), '--png', png], 'drawing the attention figure', args.threads)


def load_average():
    """The 1-minute load average (timings on a shared machine mean little
    without it)."""
    return round(os.getloadavg()[0], 2)


def settings(args):
    keys = ('train', 'dev', 'test', 'data_seed', 'seed', 'dim_word', 'dim', 'batch_size',
            'optimizer', 'init', 'lrate', 'clip_c', 'valid_every', 'target_cost', 'plateau_window',
            'plateau_gain', 'max_updates', 'threads', 'beam')
    return {k: getattr(args, k) for k in keys}


def run(args):
    """One demo run into args.out; returns the results dict."""
    t0, cpu0 = time.time(), resource.getrusage(resource.RUSAGE_CHILDREN)
    load0 = load_average()
    args.out = os.path.abspath(args.out)
    args.data_dir = os.path.join(args.out, 'data')
    os.makedirs(args.data_dir, exist_ok=True)
    data = make_data(args, args.data_dir)
    log('')
    log('== 2-3. training the models side by side (converged: validation cost below %g '
        'nats/token, or no %g%% gain in %d validations; budget: %d updates; %d '
        'BLAS/OpenMP thread(s) per process), then translating the test set'
        % (args.target_cost, 100 * args.plateau_gain, args.plateau_window,
           args.max_updates, args.threads))
    runs = run_models(args, data)

    d = lambda f: os.path.join(args.data_dir, f)  # noqa: E731
    src, ref = read_lines(d('test.src')), read_lines(d('test.trg'))
    hyps = {r['name']: read_lines(r['hypotheses'], allow_empty=True) for r in runs}
    index = (args.figure_sentence if args.figure_sentence is not None
             else report.figure_sentence(ref))
    files = {'results': os.path.join(args.out, 'results.json'),
             'chart': os.path.join(args.out, 'results.png'),
             'attention': os.path.join(args.out, 'attention.png')}
    attention_figure(args, runs, index, files['attention'])
    report.plot_results(runs, args.target_cost, files['chart'])
    cpu = resource.getrusage(resource.RUSAGE_CHILDREN)
    results = {
        'settings': settings(args), 'theano_flags': child_env(args.threads)['THEANO_FLAGS'],
        'data': data,
        'reference_agreement': toy_language.agreement_stats(src, ref),
        'reference_agreement_by_distance': toy_language.agreement_by_distance(src, ref, ref),
        'models': runs,
        'examples': report.pick_examples(src, ref, hyps, args.examples),
        'figure_sentence': index,
        'total_seconds': round(time.time() - t0, 1),
        'load_average': {'start': load0, 'end': load_average()},
        'children_cpu_seconds': round(cpu.ru_utime + cpu.ru_stime
                                      - cpu0.ru_utime - cpu0.ru_stime, 1),
        'files': files,
    }
    write_json(files['results'], results, indent=2)
    log('')
    report.print_report(results, log)
    log('')
    log('total time %s (%s CPU in the subprocesses; 1-minute load average %.1f at the '
        'start, %.1f at the end); wrote %s, %s and %s'
        % (fmt_time(results['total_seconds']), fmt_time(results['children_cpu_seconds']),
           load0, results['load_average']['end'], files['results'], files['chart'],
           files['attention']))
    return results


def run_seeds(args):
    """The demo once per seed (data and training), then mean and spread."""
    out, all_results = os.path.abspath(args.out), []
    for seed in args.seeds:
        a = copy.copy(args)
        a.seed = a.data_seed = seed
        a.out = os.path.join(out, 'seed-%d' % seed)
        log('######## seed %d -> %s' % (seed, a.out))
        all_results.append(run(a))
        log('')
    summary = report.seed_summary(all_results)
    table = report.seed_table(summary)
    write_json(os.path.join(out, 'seeds.json'), summary, indent=2)
    log('== %d runs (seeds %s): mean and standard deviation'
        % (len(args.seeds), ', '.join(map(str, args.seeds))))
    log(table)
    return summary


# ---------------------------------------------------------------- main
def parse_args(argv):
    p = cli.ArgumentParser(description=cli.summary(__doc__))
    p.add_argument('--out', default='demo_output', help='output folder (default demo_output/)')
    p.add_argument('--seeds', help='comma-separated seeds: one run each (data and '
                   'training seed), into OUT/seed-N, then mean and spread of each figure')
    p.add_argument('--models', default=','.join(DEFAULT_MODELS),
                   help='comma-separated decoder variants (layers.VARIANTS), trained '
                        'side by side (default %(default)s)')
    g = p.add_argument_group('stopping rule and budget')
    g.add_argument('--target-cost', type=float, default=0.02,
                   help='converged once the validation cost is at most this many nats '
                        'per target token (default %(default)s)')
    g.add_argument('--plateau-window', type=cli.positive_int, default=10,
                   help='... or once the best validation cost has improved by less than '
                        '--plateau-gain in this many validations (default %(default)s)')
    g.add_argument('--plateau-gain', type=float, default=0.02,
                   help='relative gain (default %(default)s)')
    g.add_argument('--max-updates', type=cli.positive_int, default=4000,
                   help='out of budget after this many updates, whatever the machine\'s '
                        'speed (default %(default)s)')
    g.add_argument('--threads', type=cli.positive_int, default=DEFAULT_THREADS,
                   help='BLAS and OpenMP threads of each process (default %(default)s; '
                        'OPENBLAS_NUM_THREADS and OMP_NUM_THREADS win)')
    g.add_argument('--valid-every', type=cli.positive_int, default=100,
                   help='validation and checkpoint frequency, updates (default %(default)s)')
    g = p.add_argument_group('corpus and model (defaults are what the demo was tuned with)')
    g.add_argument('--train', type=cli.positive_int, default=20000, help='training pairs')
    g.add_argument('--dev', type=cli.positive_int, default=300, help='validation pairs')
    g.add_argument('--test', type=cli.positive_int, default=300, help='test pairs')
    g.add_argument('--data-seed', type=int, default=1,
                   help='seed of the toy corpus (default %(default)s)')
    g.add_argument('--seed', type=int, default=1234, help='training seed (every model)')
    g.add_argument('--dim_word', type=cli.positive_int, default=64,
                   help='word embedding size (default %(default)s)')
    g.add_argument('--dim', type=cli.positive_int, default=64,
                   help='recurrent state size (default %(default)s)')
    g.add_argument('--batch_size', type=cli.positive_int, default=128,
                   help='sentences per update (default %(default)s)')
    g.add_argument('--optimizer', default='adadelta',
                   help="nmt.py's --optimizer (default %(default)s, the papers')")
    g.add_argument('--init', default='dl4mt', choices=('glorot+unigram', 'glorot',
                                                      'dl4mt+unigram', 'dl4mt'),
                   help="nmt.py's --init (default: the original's, as the papers' "
                        "train_*.sh scripts)")
    g.add_argument('--lrate', type=float, default=0.01,
                   help='learning rate (unused by adadelta)')
    g.add_argument('--clip_c', type=float, default=-1.0,
                   help='gradient norm clipping (<= 0: none)')
    g.add_argument('--disp-every', type=cli.positive_int, default=100,
                   help='updates between progress lines (default %(default)s)')
    g.add_argument('--beam', type=cli.positive_int, default=5,
                   help='beam size of the test translations (default %(default)s)')
    g.add_argument('--examples', type=int, default=4, help='translations shown')
    g.add_argument('--figure-sentence', type=int,
                   help='test sentence of the attention figure (default: chosen)')
    args = p.parse_args(argv)
    check_args(p, args)
    return args


def check_args(p, args):
    import layers
    args.models = [m.strip() for m in args.models.split(',') if m.strip()]
    bad = [m for m in args.models if m not in layers.VARIANTS]
    if bad or not args.models or len(set(args.models)) != len(args.models):
        p.error('--models: distinct names from %s' % ', '.join(layers.VARIANTS))
    if args.seeds is not None:
        try:
            args.seeds = [int(s) for s in args.seeds.split(',')]
        except ValueError:
            p.error('--seeds: comma-separated integers')
        if not args.seeds or len(set(args.seeds)) != len(args.seeds):
            p.error('--seeds: distinct integers')
    if not args.target_cost > 0:
        p.error('--target-cost must be positive')
    if not 0 <= args.plateau_gain < 1:
        p.error('--plateau-gain must be in [0, 1)')
    if args.examples < 0:
        p.error('--examples must be at least 0')
    if args.figure_sentence is not None and not 0 <= args.figure_sentence < args.test:
        p.error('--figure-sentence must be a test sentence index (0 to %d)' % (args.test - 1))


def main(argv=None):
    args = parse_args(cli.arguments(argv))
    return cli.run(lambda: run_seeds(args) if args.seeds else run(args))


if __name__ == '__main__':
    sys.exit(main())
