"""The C allocator keeps the memory a training update frees, for the next.

An update allocates and frees the same arrays every time (a function's
outputs, the gradients: megabytes each).  glibc's malloc returns freed
memory at the top of its heap to the kernel once more than its trim
threshold is free, and serves large blocks by mmap; its thresholds move with
what was freed last.  When they fall below an update's arrays, every update
maps fresh pages, and the kernel zeroes each on its first touch (a minor
page fault).  Measured on the Multi30k model as two MPI workers on the
2-core AMD EPYC of docs/speed.md: 5-9 ms of system time an update in the
gradients' function, 5.5-6% of all CPU time, against 0.7 ms and 1.7% with
fixed thresholds (docs/speed.md#two-cores-like-for-like).

``keep_freed_memory()`` fixes them (mallopt): blocks below MMAP_THRESHOLD
come from the heap, and up to TRIM_THRESHOLD of free memory stays with the
process.  Elsewhere than glibc it does nothing.  A process's peak memory is
unchanged: it keeps at most what it had in use.
"""
import ctypes

# mallopt's parameters (glibc's malloc.h)
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
# glibc's own ceiling for its moving mmap threshold on 64-bit systems
MMAP_THRESHOLD = 32 << 20
TRIM_THRESHOLD = 256 << 20


def keep_freed_memory():
    """Fix glibc's thresholds; True where they were set."""
    try:       # the process's own symbols: libc's, without a search (no subprocess)
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError, TypeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and \
        bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
