"""nmt.py and translate.py on a GPU device against the CPU, end to end.

    python gpu/compare_devices.py [--device opencl0:0] [--updates 50] [--out DIR]

Trains the demo's configuration (demo/demo.py's toy corpus, sizes and
options; the baseline decoder unless --model names another variant) for
--updates updates twice, once with THEANO_FLAGS=device=cpu and once on the
device, the same seed and batches, logging the training cost of every update
(machinery/training_log.py); then each model translates the first --sentences test
sentences on its own device with translate.py (beam 5, normalised scores).
Prints the largest relative difference of the training costs, of the final
parameters and of the translation scores, and how many translations differ;
exit status 1 when a difference passes --tolerance (1e-4) or a translation
differs.  Both runs compile in Theano's default mode (FAST_RUN), as users run
them.  docs/gpu.md, "Training and translating on OpenCL", has a run.
"""
import os
import subprocess
import sys
import time

if __name__ == '__main__':
    # run as a file: import from the project root, not this folder
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from machinery import cli  # noqa: E402  (first: without .venv, one line, machinery/__init__.py)

import numpy as np  # noqa: E402

from theano_platform import theano_env  # noqa: E402
from demo import demo  # noqa: E402
from machinery.text_io import read_lines  # noqa: E402
from machinery.training_log import LogReader, log_path  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def parse_args(argv):
    p = cli.ArgumentParser(description=cli.summary(__doc__))
    p.add_argument('--device', default='opencl0:0', help='the GPU device (default %(default)s)')
    p.add_argument('--model', default='baseline',
                   help='decoder variant of layers.VARIANTS (default %(default)s)')
    p.add_argument('--updates', type=int, default=50, help='training updates (default 50)')
    p.add_argument('--sentences', type=int, default=50,
                   help='test sentences translated (default 50)')
    p.add_argument('--train', type=int, default=20000, help="training pairs (the demo's)")
    p.add_argument('--tolerance', type=float, default=1e-4,
                   help='largest relative difference accepted (default %(default)g)')
    p.add_argument('--out', default='gpu_compare', help='output folder (default gpu_compare/)')
    return p.parse_args(argv)


def demo_settings(args):
    """demo.py's options, with this run's budget, logging every update."""
    settings = demo.parse_args(['--out', args.out, '--models', args.model,
                                '--train', str(args.train),
                                '--max-updates', str(args.updates), '--disp-every', '1',
                                '--valid-every', str(args.updates)])
    settings.data_dir = os.path.join(args.out, 'data')
    return settings


def run_logged(cmd, env, what, out_path):
    """Run cmd with its output in out_path: seconds taken, or a CommandError."""
    t0 = time.time()
    with open(out_path, 'w') as out:
        rc = subprocess.call(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    if rc != 0:
        lines = read_lines(out_path, allow_empty=True)
        raise cli.CommandError('%s failed (exit %d): %s (all of it in %s)'
                               % (what, rc, lines[-1] if lines else '', out_path))
    return time.time() - t0


def train_and_translate(settings, args, data, device):
    """One device's run: {'costs', 'params', 'hypotheses', 'scores', 'seconds'}."""
    base = os.path.join(args.out, '%s-%s' % (args.model, device.replace(':', '_')))
    # an earlier comparison's run moves aside (nmt.py --restart)
    run = {'model': base + '.npz', 'flags': demo.variant_flags(args.model)[1] + ['--restart']}
    env = theano_env.device_env(device)
    train_sec = run_logged(demo.train_command(settings, run, data), env,
                           'training on %s' % device, base + '.train.out')
    costs = [e['cost'] for e in LogReader(log_path(run['model'])).new_events()
             if e['event'] == 'update']
    d = lambda f: os.path.join(settings.data_dir, f)  # noqa: E731
    source = base + '.test.src'
    with open(source, 'w') as f:
        f.write(''.join(line + '\n' for line in read_lines(d('test.src'))[:args.sentences]))
    hyp = base + '.test.trg'
    cmd = [sys.executable, os.path.join(ROOT, 'translate.py'), '-k', '5', '-n', '-p', '1',
           '--maxlen', '60', '--print-scores', run['model'], d('train.src.pkl'),
           d('train.trg.pkl'), source, hyp]
    translate_sec = run_logged(cmd, env, 'translating on %s' % device, base + '.translate.out')
    lines = [line.rsplit(' ||| ', 1) for line in read_lines(hyp, allow_empty=True)]
    with np.load(run['model']) as params:
        weights = {k: params[k] for k in params.files if params[k].dtype.kind == 'f'}
    return {'costs': np.array(costs), 'params': weights,
            'hypotheses': [h for h, _ in lines], 'scores': np.array([float(s) for _, s in lines]),
            'seconds': (train_sec, translate_sec)}


def rel_diff(got, want):
    got, want = np.asarray(got, 'float64'), np.asarray(want, 'float64')
    if got.shape != want.shape:
        return float('inf')
    return float(np.abs(got - want).max() / max(np.abs(want).max(), 1e-30)) if want.size else 0.


def compare(gpu, cpu, tolerance):
    """Rows (what, figure, ok) of the comparison."""
    params = max(rel_diff(gpu['params'][k], cpu['params'][k]) if k in gpu['params']
                 else float('inf') for k in cpu['params'])
    differing = sum(g != c for g, c in zip(gpu['hypotheses'], cpu['hypotheses']))
    differing += abs(len(gpu['hypotheses']) - len(cpu['hypotheses']))
    return [('training cost, every update (%d)' % len(cpu['costs']),
             rel_diff(gpu['costs'], cpu['costs']), None),
            ('parameters after the last update', params, None),
            ('translation scores (%d sentences)' % len(cpu['scores']),
             rel_diff(gpu['scores'], cpu['scores']), None),
            ('translations that differ', differing, differing == 0)]


def report(rows, tolerance, gpu, cpu, device):
    failed = []
    print('%-36s %-14s %s' % ('', 'max rel diff', 'ok'))
    for what, figure, ok in rows:
        ok = figure <= tolerance if ok is None else ok
        print('%-36s %-14.3g %s' % (what, figure, 'yes' if ok else 'NO'))
        failed += [] if ok else [what]
    print('seconds (training, translating): cpu %.0f, %.0f; %s %.0f, %.0f'
          % (cpu['seconds'] + (device,) + gpu['seconds']))
    return failed


def main(args):
    os.makedirs(args.out, exist_ok=True)
    settings = demo_settings(args)
    data = demo.make_data(settings, settings.data_dir)
    cpu = train_and_translate(settings, args, data, 'cpu')
    gpu = train_and_translate(settings, args, data, args.device)
    failed = report(compare(gpu, cpu, args.tolerance), args.tolerance, gpu, cpu, args.device)
    if failed:
        raise cli.CommandError('%s differs from the CPU: %s' % (args.device, ', '.join(failed)))


if __name__ == '__main__':
    ARGS = parse_args(cli.arguments(None))
    sys.exit(cli.run(lambda: main(ARGS)))
