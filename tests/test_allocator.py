"""allocator.keep_freed_memory: arrays allocated and freed again and again
(as every training update does) reuse the process's memory instead of
mapping fresh pages, even where glibc was told to give back every freed
byte at once (MALLOC_TRIM_THRESHOLD_=0, MALLOC_MMAP_THRESHOLD_=64 KiB)."""
import os
import subprocess
import sys

import pytest

from helpers import ROOT

CYCLES = """import resource, sys, numpy
sys.path.insert(0, sys.argv[1])
if sys.argv[2] == 'keep':
    from theano_platform import allocator
    assert allocator.keep_freed_memory()
def update():
    # an update's arrays: 4 MB, 12 MB, 1 MB, 8 MB, written and freed
    a = numpy.ones(1 << 20, 'float32'); b = numpy.ones(3 << 20, 'float32')
    c = numpy.ones(1 << 18, 'float32'); del b
    d = numpy.ones(2 << 20, 'float32'); del a, c, d
update()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    update()
print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 20.)
"""
PAGES_AN_UPDATE = (25 << 20) // 4096


def faults_an_update(mode):
    env = dict(os.environ, MALLOC_TRIM_THRESHOLD_='0', MALLOC_MMAP_THRESHOLD_='65536')
    out = subprocess.run([sys.executable, '-c', CYCLES, ROOT, mode], env=env, check=True,
                         capture_output=True, text=True).stdout
    return float(out.split()[-1])


@pytest.mark.skipif(not sys.platform.startswith('linux'), reason='glibc\'s malloc: Linux')
def test_freed_memory_is_kept_for_the_next_update():
    given_back = faults_an_update('default')
    kept = faults_an_update('keep')
    print('page faults an update: %.0f given back, %.1f kept' % (given_back, kept))
    # the allocator gave it back (the kernel may map some as huge pages)...
    assert given_back > PAGES_AN_UPDATE / 10
    assert kept < PAGES_AN_UPDATE / 100          # ...unless told to keep it
