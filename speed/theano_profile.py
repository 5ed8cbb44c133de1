"""Where a profiled Theano function spends its time, scans included.

Theano's own summary (``fn.profile.summary()``) lists the outer function and
every scan's inner function separately, and counts a scan's whole loop as one
op of the outer function.  ``op_table`` merges them into one table of
exclusive times: an op inside a scan counts its own time, and the scan node
keeps only its overhead (the loop around the inner function).  Shares are of
the total time spent in the profiled functions' calls.

Compile with ``theano.config.profile = True`` (set before the functions and
their scans are compiled), run, then call ``report(functions)``.
"""
import sys
from collections import OrderedDict

from theano.scan.op import Scan

from machinery.output_files import atomic_write


def profiled_functions(fn, label=None):
    """[(label, ProfileStats)] of fn and, recursively, of its scans' inner
    functions (label: the function's name, then the scans' names)."""
    label = label or getattr(fn, 'name', None) or 'function'
    prof = fn.profile
    if not prof:
        return []
    found = [(label, prof)]
    for (_, node) in list(prof.apply_time):
        if isinstance(node.op, Scan) and getattr(node.op, 'fn', None) is not None:
            found += profiled_functions(node.op.fn, '%s/%s' % (label, node.op.name))
    return found


def reset(functions):
    """Forget the calls so far (warm-up) of these functions and their scans."""
    for fn in functions:
        for _, prof in profiled_functions(fn):
            prof.reset()
            for attr in ('callcount', 'nbsteps', 'call_time'):
                if hasattr(prof, attr):
                    setattr(prof, attr, 0.)


def _op_label(node):
    """A readable name for an op: its class, with the scalar formula of an
    Elemwise (truncated) and the output dtype."""
    text = str(node.op)
    if len(text) > 60:
        text = text[:57] + '...'
    dtypes = sorted({getattr(o, 'dtype', '?') for o in node.outputs})
    return '%s [%s]' % (text, ','.join(dtypes))


def _exclusive_times(prof, label):
    """{(where, op label, node key): seconds} with scan nodes reduced to their
    overhead (their time minus their inner function's op times)."""
    times = OrderedDict()
    for (_, node), t in prof.apply_time.items():
        if isinstance(node.op, Scan) and getattr(node.op, 'fn', None) is not None \
                and node.op.fn.profile:
            t = t - sum(node.op.fn.profile.apply_time.values())
            key = (label, 'Scan overhead (%s)' % node.op.name, id(node))
        else:
            key = (label, _op_label(node), id(node))
        times[key] = times.get(key, 0.) + t
    return times


def node_times(functions):
    """Exclusive time of every apply node of the functions (scans included)."""
    times = OrderedDict()
    for fn in functions:
        for label, prof in profiled_functions(fn):
            times.update(_exclusive_times(prof, label))
    return times


def total_call_time(functions):
    """Wall time spent inside the outer functions' calls."""
    return sum(fn.profile.fct_call_time for fn in functions if fn.profile)


def op_table(functions, top=10):
    """The top ops, nodes of equal label merged: [(label, calls-merged nodes,
    seconds, share)], plus the share of all ops together."""
    total = total_call_time(functions)
    merged = OrderedDict()
    for (_, op, _), t in node_times(functions).items():
        n, s = merged.get(op, (0, 0.))
        merged[op] = (n + 1, s + t)
    rows = sorted(merged.items(), key=lambda kv: -kv[1][1])[:top]
    return [(op, n, s, s / total if total else 0.) for op, (n, s) in rows], total


def float64_nodes(functions):
    """Labels of apply nodes with a float64 output (accidental upcasts)."""
    found = []
    for fn in functions:
        for label, prof in profiled_functions(fn):
            for (_, node) in prof.apply_time:
                if any(getattr(o, 'dtype', None) == 'float64' for o in node.outputs):
                    found.append('%s: %s' % (label, _op_label(node)))
    return found


# GPU ops that launch no kernel: views of an array, an allocation without
# initialisation; and the copies between host and device (each a wait for
# the device when it reads from it)
GPU_VIEWS = ('GpuDimShuffle', 'GpuReshape', 'GpuSubtensor', 'GpuAllocEmpty')
GPU_TRANSFERS = ('GpuFromHost', 'HostFromGpu')


def device_calls(functions):
    """The calls of GPU ops in the profiled calls of the functions, their
    scans' steps included: {'kernel_ops': calls of the ops that launch a
    kernel or more (not GPU_VIEWS nor GPU_TRANSFERS), 'views': ...,
    'to_device', 'to_host': copies, 'by_op': {op class: calls} of the
    kernel ops}.  On a GPU a step's time has a floor of those launches."""
    counts = OrderedDict([('kernel_ops', 0), ('views', 0), ('to_device', 0),
                          ('to_host', 0)])
    by_op = {}
    for fn in functions:
        for _, prof in profiled_functions(fn):
            for (_, node), calls in prof.apply_callcount.items():
                name = type(node.op).__name__
                if name in GPU_TRANSFERS:
                    counts['to_device' if name == 'GpuFromHost' else 'to_host'] += calls
                elif name in GPU_VIEWS:
                    counts['views'] += calls
                elif name.startswith('Gpu'):
                    counts['kernel_ops'] += calls
                    by_op[name] = by_op.get(name, 0) + calls
    counts['by_op'] = OrderedDict(sorted(by_op.items(), key=lambda kv: -kv[1]))
    return counts


def full_summary(functions, path):
    """Theano's own summaries of the functions and their scans, into a file."""
    def write(f):
        for fn in functions:
            for _, prof in profiled_functions(fn):
                prof.summary(file=f)
    atomic_write(path, write, 'w')


def silence_exit_summaries():
    """Drop Theano's at-exit printing of every profile (long, and it fails in
    theano-pymc 1.1.2 when it sums several profiles)."""
    from theano.compile import profiling
    del profiling._atexit_print_list[:]


def report(functions, top=10, file=sys.stderr):
    """Print the top ops (with their share of the calls' time), the top
    single nodes, and any float64 op; return the figures as a dict."""
    rows, total = op_table(functions, top)
    print('profile: %.2f s in %d function(s); top %d ops (exclusive time, '
          'scans included):' % (total, len(functions), top), file=file)
    print('  %6s %8s %5s  %s' % ('share', 'seconds', 'nodes', 'op [output dtype]'),
          file=file)
    for op, n, s, share in rows:
        print('  %5.1f%% %8.2f %5d  %s' % (100 * share, s, n, op), file=file)
    nodes = sorted(node_times(functions).items(), key=lambda kv: -kv[1])[:top]
    print('top %d single nodes:' % top, file=file)
    for (where, op, _), s in nodes:
        print('  %5.1f%% %8.2f  %s  in %s' % (100 * s / total if total else 0., s,
                                             op, where), file=file)
    f64 = float64_nodes(functions)
    print('float64 ops: %s' % ('; '.join(f64) if f64 else 'none'), file=file)
    calls = device_calls(functions)
    if calls['kernel_ops'] or calls['to_host']:
        print('GPU op calls: %d launching kernels (%s), %d views, %d copies to the '
              'device, %d to the host' % (
                  calls['kernel_ops'], ', '.join('%s %d' % kv for kv in
                                                 list(calls['by_op'].items())[:6]),
                  calls['views'], calls['to_device'], calls['to_host']), file=file)
    return OrderedDict([
        ('profiled_sec', round(total, 3)),
        ('gpu_op_calls', calls),
        ('top_ops', [OrderedDict([('op', op), ('nodes', n), ('sec', round(s, 3)),
                                  ('share', round(share, 4))])
                     for op, n, s, share in rows]),
        ('float64_ops', f64),
    ])
