"""Seconds from the command to the first update of a Multi30k training run:
train_multi30k.sh's nmt.py command, as one process or as N MPI workers, as
its training log records them (docs/speed.md#start-up).

    .venv/bin/python speed/startup.py DATA_DIR [--workers 2] [--runs 2]
        [--decoder baseline] [--tiny]

Each run trains 3 updates (``--finish_after 3 --dispFreq 1``) into a fresh
temporary folder, then ends (its closing validation included in
``end_sec``).  A run whose graphs the function cache has not seen yet
compiles and saves them; the runs after it load them (the warm start).  The
last stdout line is one JSON object: each run's seconds to its log's start
and first update events and to its end, and the machine.
"""
import os
import sys

if __name__ == '__main__':  # run as a file: import from the project root, not this folder
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

import json
import shutil
import subprocess
import tempfile
import time
import types
from collections import OrderedDict

from machinery import cli, distributed
from machinery.training_log import read_training_log
from pipeline import train_multi30k as m30k

UPDATES = 3


def run_command(data, args, model_dir):
    """(command, environment) of one short run into model_dir."""
    run = types.SimpleNamespace(tiny=args.tiny, model_dir=model_dir, seed=1,
                                decoder=args.decoder,
                                extra=['--finish_after', str(UPDATES), '--dispFreq', '1'])
    cmd = m30k.nmt_command(run, data, data.dictionary_sizes())
    if args.workers > 1:
        return distributed.mpirun_command(args.workers, cmd)
    return cmd, dict(os.environ)


def timed_run(data, args, index):
    """Seconds from the command to the log's start and first update events,
    and to the end of the process."""
    model_dir = tempfile.mkdtemp(prefix='nmt_startup_')
    try:
        cmd, env = run_command(data, args, model_dir)
        started = time.time()
        with open(os.path.join(model_dir, 'output.txt'), 'w') as output:
            done = subprocess.run(cmd, env=env, stdout=output, stderr=subprocess.STDOUT)
        ended = time.time()
        if done.returncode != 0:
            with open(os.path.join(model_dir, 'output.txt')) as f:
                sys.stderr.write(f.read()[-2000:])
            raise cli.CommandError('run %d failed (exit %d): the end of its output is above'
                                   % (index, done.returncode))
        events = read_training_log(os.path.join(model_dir, 'model.npz.log.jsonl'))
    finally:
        shutil.rmtree(model_dir, ignore_errors=True)
    first = lambda kind: next(e['time'] for e in events if e['event'] == kind)  # noqa: E731
    row = OrderedDict([('run', index), ('start_event_sec', round(first('start') - started, 1)),
                       ('first_update_sec', round(first('update') - started, 1)),
                       ('end_sec', round(ended - started, 1)),
                       ('updates', sum(e['event'] == 'update' for e in events))])
    print('[startup] run %d: first update after %.1f s, ended after %.1f s'
          % (index, row['first_update_sec'], row['end_sec']), file=sys.stderr, flush=True)
    return row


def measure(args):
    from speed.benchmark import machine_info
    data = m30k.Data(args.data_dir)
    data.check()
    load = os.getloadavg()[0]
    rows = [timed_run(data, args, i + 1) for i in range(args.runs)]
    return OrderedDict([('mode', 'startup'), ('decoder', args.decoder), ('tiny', args.tiny),
                        ('workers', args.workers), ('updates', UPDATES), ('runs', rows),
                        ('loadavg_1min_at_start', round(load, 2)),
                        ('machine', machine_info())])


def parse_args(argv):
    p = cli.ArgumentParser(description=__doc__.split('\n\n')[0].replace('\n', ' '))
    p.add_argument('data_dir', metavar='DATA_DIR',
                   help='the output of pipeline/multi30k.py prepare')
    p.add_argument('--workers', type=cli.positive_int, default=1,
                   help='MPI workers of each run (default 1: one process)')
    p.add_argument('--runs', type=cli.positive_int, default=2,
                   help='runs one after the other (default 2)')
    p.add_argument('--decoder', default='baseline', help='a decoder (default baseline)')
    p.add_argument('--tiny', action='store_true', help='train_multi30k.sh --tiny\'s model')
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(cli.arguments(argv))
    return cli.run(lambda: print(json.dumps(measure(args))))


if __name__ == '__main__':
    sys.exit(main())
