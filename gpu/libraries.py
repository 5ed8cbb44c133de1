"""Find the libraries that libgpuarray loads, and link them where it looks.

    python gpu/libraries.py link [--dest DIR] [--search DIR ...]   # CUDA
    python gpu/libraries.py link-opencl [--dest DIR]               # OpenCL
    python gpu/libraries.py pins          # pip pins of NVRTC and cuBLAS for this driver

libgpuarray 0.7.6 (Debian's, under pygpu) dlopens the bare names
``libcuda.so``, ``libnvrtc.so`` and ``libcublas.so``; CUDA 12/13 installs
only have versioned names (``libcuda.so.1``, ``libnvrtc.so.13``, ...).  `link`
makes links with the bare names (and the libraries those load by soname:
``libnvrtc-builtins``, ``libcublasLt``) in DIR (default: the environment's
``lib`` folder, ``sys.prefix/lib``, which theano_env puts on LD_LIBRARY_PATH).

NVRTC compiles Theano's kernels to PTX that the driver JIT-compiles: an NVRTC
newer than the driver's CUDA version writes PTX the driver rejects, so we
take the newest NVRTC that is not newer than the driver.  Searched: the
folders given with --search (recursively, e.g. a venv holding pip's
``nvidia-*`` wheels), $CUDA_HOME, /usr/local/cuda*, the loader's cache
(``ldconfig -p``) and the ``nvidia`` wheels on this Python's path.

OpenCL: libgpuarray dlopens ``libOpenCL.so`` (the ICD loader, which finds
the installed OpenCL platforms, such as pocl's CPU device) and
``libclblast.so`` (CLBlast, its BLAS on OpenCL); Debian installs only
``libOpenCL.so.1`` and ``libclblast.so.1``.  `link-opencl` links those.

Only the standard library is used (no Theano, no pygpu).
"""
import ctypes
import glob
import os
import re
import subprocess
import sys

if __name__ == '__main__':  # run as a file: import from the project root, not this folder
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from machinery import cli  # noqa: E402

DRIVER_DIRS = ['/usr/lib/x86_64-linux-gnu', '/usr/lib64', '/usr/local/nvidia/lib64',
               '/usr/local/nvidia/lib', '/usr/lib/wsl/lib', '/usr/lib']
TOOLKIT_DIRS = ['/usr/local/cuda/lib64', '/usr/local/cuda/targets/x86_64-linux/lib',
                '/usr/lib/x86_64-linux-gnu']
# pip pins per driver CUDA version (major, minor); others: same major.minor, any patch
PINNED_WHEELS = {(13, 0): ['nvidia-cuda-nvrtc==13.0.88', 'nvidia-cublas==13.0.2.14']}


class NotFound(cli.CommandError):
    """A library or driver that the links need is not on this machine."""


def _ldconfig_paths(name):
    try:
        out = subprocess.run(['ldconfig', '-p'], stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, universal_newlines=True).stdout
    except OSError:
        return []
    return [line.rsplit('=>', 1)[1].strip() for line in out.splitlines()
            if line.strip().startswith(name + ' ') and '=>' in line]


def find_driver():
    """(path of libcuda.so.1, (major, minor) CUDA version of the driver)."""
    paths = _ldconfig_paths('libcuda.so.1') + [
        os.path.join(d, 'libcuda.so.1') for d in DRIVER_DIRS]
    for path in paths:
        if not os.path.exists(path):
            continue
        lib = ctypes.CDLL(path)
        version = ctypes.c_int(0)
        if lib.cuDriverGetVersion(ctypes.byref(version)) == 0 and version.value:
            return os.path.realpath(path), (version.value // 1000, version.value % 1000 // 10)
    raise NotFound('no NVIDIA driver: libcuda.so.1 not found (searched ldconfig and %s)'
                   % ', '.join(DRIVER_DIRS))


def device_count():
    """Number of CUDA devices the driver sees (0 without a driver or device)."""
    try:
        lib = ctypes.CDLL(find_driver()[0])
    except (NotFound, OSError):
        return 0
    count = ctypes.c_int(0)
    if lib.cuInit(0) != 0 or lib.cuDeviceGetCount(ctypes.byref(count)) != 0:
        return 0
    return count.value


def opencl_device_count():
    """Number of OpenCL devices the ICD loader finds (0 without one)."""
    try:
        lib = ctypes.CDLL(find_opencl()['libOpenCL.so'])
    except (NotFound, OSError):
        return 0
    platforms, count = (ctypes.c_void_p * 16)(), ctypes.c_uint(0)
    if lib.clGetPlatformIDs(16, platforms, ctypes.byref(count)) != 0:
        return 0
    devices = 0
    for i in range(min(count.value, 16)):
        n = ctypes.c_uint(0)
        # CL_DEVICE_TYPE_ALL = 0xFFFFFFFF
        if lib.clGetDeviceIDs(ctypes.c_void_p(platforms[i]), ctypes.c_uint64(0xFFFFFFFF),
                              0, None, ctypes.byref(n)) == 0:
            devices += n.value
    return devices


OPENCL_LIBRARIES = {'libOpenCL.so': 'libOpenCL.so.1', 'libclblast.so': 'libclblast.so.1'}


def find_opencl():
    """{bare name: path} of the OpenCL ICD loader and CLBlast."""
    plan = {}
    for bare, soname in OPENCL_LIBRARIES.items():
        paths = [p for p in _ldconfig_paths(soname) +
                 [os.path.join(d, soname) for d in DRIVER_DIRS] if os.path.exists(p)]
        if not paths:
            raise NotFound('%s not found (Debian: apt-get install ocl-icd-libopencl1 '
                           'libclblast1 pocl-opencl-icd, or bash setup.sh --opencl)' % soname)
        plan[bare] = os.path.realpath(paths[0])
    return plan


def _search_dirs(extra):
    dirs = list(extra)
    for var in ('CUDA_HOME', 'CUDA_PATH'):
        if os.environ.get(var):
            dirs += [os.path.join(os.environ[var], 'lib64'), os.path.join(os.environ[var], 'lib')]
    dirs += TOOLKIT_DIRS + sorted(glob.glob('/usr/local/cuda-*/lib64'), reverse=True)
    dirs += [os.path.join(p, 'nvidia') for p in sys.path
             if os.path.isdir(os.path.join(p, 'nvidia'))]
    return dirs


def _candidates(name, dirs):
    """Real files named name.so.MAJOR[...] under dirs (4 levels deep) and in ldconfig."""
    found = []
    for d in dirs:
        for depth in range(5):
            found += glob.glob(os.path.join(d, *(['*'] * depth), name + '.so.[0-9]*'))
    found += _ldconfig_paths(name + '.so')
    real = []
    for path in found:
        if os.path.exists(path) and os.path.realpath(path) not in real:
            real.append(os.path.realpath(path))
    return real


def nvrtc_version(path):
    """(major, minor) that libnvrtc at path reports, or None if it does not load."""
    try:
        lib = ctypes.CDLL(path)
    except OSError:
        return None
    major, minor = ctypes.c_int(0), ctypes.c_int(0)
    if lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor)) != 0:
        return None
    return major.value, minor.value


def _soname_major(path):
    m = re.search(r'\.so\.(\d+)', os.path.basename(path))
    return int(m.group(1)) if m else None


def choose_nvrtc(driver_version, dirs):
    """(path, version) of the newest NVRTC not newer than the driver's CUDA."""
    seen = []
    for path in _candidates('libnvrtc', dirs):
        if 'builtins' in os.path.basename(path):
            continue
        version = nvrtc_version(path)
        if version is not None:
            seen.append((version, path))
    usable = sorted(v for v in seen if v[0] <= driver_version)
    if not usable:
        raise NotFound(
            'no NVRTC usable with the driver (CUDA %d.%d): found %s. Install the CUDA '
            'toolkit of that version, or pip install %s' % (
                driver_version + (', '.join('%s (%d.%d)' % (p, v[0], v[1]) for v, p in seen)
                                  or 'none', ' '.join(pins(driver_version)))))
    version, path = usable[-1]
    return path, version


def choose_cublas(nvrtc_path, nvrtc_ver, dirs):
    """cuBLAS of NVRTC's major version, preferably from NVRTC's own folder."""
    same_major = [p for p in _candidates('libcublas', dirs)
                  if _soname_major(p) == nvrtc_ver[0] and 'Lt' not in os.path.basename(p)]
    if not same_major:
        raise NotFound('no cuBLAS %d found (pip install %s)'
                       % (nvrtc_ver[0], pins(nvrtc_ver)[1]))
    here = os.path.dirname(nvrtc_path)
    same_major.sort(key=lambda p: os.path.dirname(p) != here)
    return same_major[0]


def pins(driver_version):
    """pip requirements of NVRTC and cuBLAS wheels that match a driver."""
    if driver_version in PINNED_WHEELS:
        return PINNED_WHEELS[driver_version]
    major, minor = driver_version
    suffix = '-cu12' if major == 12 else ''
    return ['nvidia-cuda-nvrtc%s==%d.%d.*' % (suffix, major, minor),
            'nvidia-cublas%s==%d.%d.*' % (suffix, major, minor)]


def _siblings(path, pattern):
    return sorted(glob.glob(os.path.join(os.path.dirname(path), pattern)))


def link_plan(driver_path, nvrtc_path, cublas_path):
    """{link name: target}: the bare names and what those libraries load by soname."""
    plan = {'libcuda.so': driver_path, 'libnvrtc.so': nvrtc_path, 'libcublas.so': cublas_path}
    for extra in _siblings(nvrtc_path, 'libnvrtc-builtins.so.*') + \
            _siblings(cublas_path, 'libcublasLt.so.%d*' % _soname_major(cublas_path)):
        plan.setdefault(os.path.basename(extra), os.path.realpath(extra))
    return plan


def make_links(dest, plan):
    os.makedirs(dest, exist_ok=True)
    for name, target in sorted(plan.items()):
        link = os.path.join(dest, name)
        if os.path.lexists(link):
            os.remove(link)
        os.symlink(target, link)
        print('libraries: %s -> %s' % (link, target))


def main(argv=None):
    p = cli.ArgumentParser(description=cli.summary(__doc__))
    p.add_argument('command', choices=['link', 'link-opencl', 'pins'],
                   help='link: the CUDA libraries under the bare names libgpuarray '
                        'loads; link-opencl: the OpenCL loader and CLBlast; pins: the pip '
                        'pins of NVRTC and cuBLAS for this driver')
    p.add_argument('--dest', default=os.path.join(sys.prefix, 'lib'),
                   help='folder of the links (default: %(default)s)')
    p.add_argument('--search', action='append', default=[],
                   help='more folders to search for libnvrtc/libcublas (recursive)')
    args = p.parse_args(cli.arguments(argv))
    return cli.run(lambda: link(args))


def link(args):
    """What ``main`` was asked: the links, or the pins of the driver."""
    if args.command == 'link-opencl':
        make_links(args.dest, find_opencl())
        return
    driver_path, driver_version = find_driver()
    if args.command == 'pins':
        print(' '.join(pins(driver_version)))
        return
    dirs = _search_dirs(args.search)
    nvrtc_path, nvrtc_ver = choose_nvrtc(driver_version, dirs)
    cublas_path = choose_cublas(nvrtc_path, nvrtc_ver, dirs)
    print('libraries: driver CUDA %d.%d (%s), NVRTC %d.%d'
          % (driver_version + (driver_path,) + nvrtc_ver))
    make_links(args.dest, link_plan(driver_path, nvrtc_path, cublas_path))


if __name__ == '__main__':
    sys.exit(main())
