#!/usr/bin/env bash
# One-time set-up on a fresh machine: g++, OpenBLAS, Open MPI and a CJK font (Debian), the
# virtual environment .venv with the pinned packages, and a check that Theano imports.
# Safe to run again: it installs only what is missing, and makes .venv anew when an
# earlier run left it unusable (a venv without pip) or PYTHON names another version.
#
#   bash setup.sh                  the CPU set-up, with python3 (3.10, 3.11, 3.12 or 3.13)
#   PYTHON=python3.12 bash setup.sh    the same with another Python
#   bash setup.sh --opencl         and the GPU back-end on OpenCL: a CPU OpenCL
#                                  device (pocl), on which the GPU tests run
#   bash setup.sh --gpu            and the GPU back-end on CUDA (and on OpenCL where
#                                  it can be installed), then the GPU check (NVIDIA
#                                  driver needed; docs/gpu.md)
#   bash setup.sh --gpu-packages   and only the GPU packages (no driver needed;
#                                  what gpu/bundle.sh pack takes)
# The GPU back-end needs Python 3.11 (Debian 12's pygpu; docs/gpu.md#other-pythons).
# VENV=DIR makes the environment in DIR instead of .venv (another Python beside it).
set -euo pipefail
cd "$(dirname "$0")"

GPU_MODE=
case "${1:-}" in
    "") ;;
    --gpu | --opencl | --gpu-packages) GPU_MODE=${1#--} ;;
    *) echo "usage: bash setup.sh [--opencl | --gpu | --gpu-packages]" >&2; exit 2 ;;
esac

die() { echo "setup: $*" >&2; exit 1; }

VENV=${VENV:-.venv}
SUPPORTED="3.10, 3.11, 3.12 or 3.13"
# Without PYTHON, a usable environment keeps its Python; a new one takes python3.
if [ -z "${PYTHON:-}" ] && "$VENV/bin/python" -m pip --version >/dev/null 2>&1; then
    PYTHON=$VENV/bin/python
fi
PYTHON=${PYTHON:-python3}
command -v "$PYTHON" >/dev/null 2>&1 \
    || die "no Python '$PYTHON': install Python $SUPPORTED, or name one: PYTHON=/path/to/python3.12 bash setup.sh"
PY_VERSION=$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])') \
    || die "'$PYTHON' does not run"
case "$PY_VERSION" in
    3.10 | 3.11 | 3.12 | 3.13) ;;
    *) die "Python $PY_VERSION ($PYTHON) is not supported: use $SUPPORTED, e.g. PYTHON=python3.12 bash setup.sh" ;;
esac
if [ -n "$GPU_MODE" ] && [ "$PY_VERSION" != 3.11 ]; then
    die "--$GPU_MODE needs Python 3.11, not $PY_VERSION: Debian 12's pygpu is built for 3.11, and pygpu's source, which builds for $PY_VERSION, is on no package registry that setup.sh reaches (docs/gpu.md#other-pythons): PYTHON=python3.11 bash setup.sh --$GPU_MODE"
fi
# Debian's own Python (under /usr) gets its missing parts from apt; another one
# (pyenv, conda, a cluster's module) comes with them or not at all.
PY_PREFIX=$("$PYTHON" -c 'import sys; print(sys.base_prefix)')

# Debian packages, each installed with apt-get (as root) only when missing;
# without apt-get or root, a one-line note of what is lost instead.
APT_UPDATED=
can_apt() { command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; }
apt_get_install() {  # apt_get_install PACKAGE
    echo "setup: installing $1 with apt-get" >&2
    [ -n "$APT_UPDATED" ] || { apt-get update -qq >/dev/null; APT_UPDATED=1; }
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$1" >/dev/null
}
apt_install() {  # apt_install PACKAGE WHY_NEEDED
    if can_apt; then
        apt_get_install "$1"
    else
        echo "setup: $1 missing and apt-get not usable: $2. Install $1 to fix." >&2
    fi
}
# require CHECK PACKAGE WHAT: what the set-up cannot go on without.  CHECK (a
# command) fails: install PACKAGE with apt where it can, else stop in one line.
require() {
    eval "$1" >/dev/null 2>&1 && return 0
    if [ -n "$2" ] && can_apt; then
        apt_get_install "$2"
        eval "$1" >/dev/null 2>&1 && return 0
    fi
    die "$3${2:+ (Debian/Ubuntu: apt-get install $2)}, then run bash setup.sh again"
}

any_file() {  # any_file PATH...: true when one of the (globbed) paths exists
    local f
    for f in "$@"; do [ -e "$f" ] && return 0; done
    return 1
}

# What the set-up needs, checked before anything is made: a C++ compiler (Theano
# compiles its ops, and theano_platform/fast_ops.py's, with g++), the Python headers those ops
# include, and venv with ensurepip (Debian and Ubuntu ship it apart).
PY_DEB=; [ "$PY_PREFIX" = /usr ] && PY_DEB=python$PY_VERSION
require "command -v g++" g++ "no C++ compiler (g++): Theano compiles its ops with it; install g++"
require "\"\$PYTHON\" -c 'import os, sysconfig; assert os.path.exists(os.path.join(sysconfig.get_paths()[\"include\"], \"Python.h\"))'" \
    "${PY_DEB:+$PY_DEB-dev}" "no Python.h for $PYTHON: Theano compiles against it; install the Python $PY_VERSION headers"
require "\"\$PYTHON\" -c 'import venv, ensurepip'" "${PY_DEB:+$PY_DEB-venv}" \
    "$PYTHON cannot make a virtual environment (no ensurepip); install its venv module"

any_file /usr/lib/*/openblas-pthread/libopenblas.so* \
    || apt_install libopenblas-dev "Theano will use NumPy's BLAS (5-15% slower)"
# A font with Chinese/Japanese/Korean glyphs for analysis/analyze.py's figures (words on
# the axes); without one, analysis/analyze.py warns and such glyphs show as boxes.
any_file /usr/share/fonts/truetype/wqy/wqy-*.tt? /usr/share/fonts/opentype/noto/NotoSansCJK* \
    || apt_install fonts-wqy-microhei "analysis/analyze.py figures will show Chinese words as boxes"

# Open MPI for the training and translation over several workers (docs/distributed.md):
# mpirun and the libmpi that mpi4py's wheel (requirements.txt) loads when a run starts.
command -v mpirun >/dev/null 2>&1 \
    || apt_install openmpi-bin "mpirun -np N (several workers) will not run"

# The environment: made anew when an earlier run left it without a working pip (a
# venv whose ensurepip failed) or when it has another Python version than PYTHON.
if [ -e "$VENV" ]; then
    venv_version=$("$VENV/bin/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null || true)
    if ! "$VENV/bin/python" -m pip --version >/dev/null 2>&1; then
        echo "setup: $VENV is incomplete (no working pip; an earlier set-up stopped): making it anew" >&2
        rm -rf "$VENV"
    elif [ "$venv_version" != "$PY_VERSION" ]; then
        echo "setup: $VENV has Python $venv_version, PYTHON is $PY_VERSION: making it anew" >&2
        rm -rf "$VENV"
    fi
fi
if [ ! -e "$VENV" ]; then
    "$PYTHON" -m venv "$VENV" || { rm -rf "$VENV"; die "$PYTHON -m venv $VENV failed"; }
fi
pip_install() {  # pip_install ARGS...: quiet, without pip's location warnings
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check "$@" \
        2> >(grep -v "^WARNING: Location" >&2)
}
# theano-pymc 1.1.2 comes as source only, and its setup.py (versioneer) uses two
# names that Python 3.12 removed from configparser: on 3.12 and 3.13 it is built,
# without build isolation, with the two names put back for the build (sitecustomize).
if [ "$PY_VERSION" != 3.10 ] && [ "$PY_VERSION" != 3.11 ] && ! "$VENV/bin/python" -m pip show -q theano-pymc >/dev/null 2>&1; then
    shim=$(mktemp -d)
    printf '%s\n' 'import configparser as c' 'c.SafeConfigParser = c.ConfigParser' \
        'c.ConfigParser.readfp = c.ConfigParser.read_file' > "$shim/sitecustomize.py"
    pip_install $(sed -n 's/^\(\(setuptools\|wheel\)==[^;]*\);.*/\1/p' requirements.txt) \
        || die "pip install setuptools wheel failed"
    PYTHONPATH=$shim pip_install --no-build-isolation --no-deps \
        "$(grep -o '^theano-pymc==[^ ;]*' requirements.txt)" \
        || { rm -rf "$shim"; die "building theano-pymc for Python 3.12 failed"; }
    rm -rf "$shim"
fi
pip_install -r requirements.txt || die "pip install -r requirements.txt failed"
"$VENV/bin/python" -c "from theano_platform import theano_env; import theano; print('setup: Python', '$PY_VERSION', 'Theano', theano.__version__, 'BLAS:', theano.config.blas__ldflags or 'NumPy C-API')"

# ---------------------------------------------------------------------------
# GPU back-end (--gpu, --gpu-packages): Theano's gpuarray over Debian 12's
# libgpuarray 0.7.6 and its pygpu (PyPI has no pygpu; Debian's is built for
# Python 3.11), unpacked into the environment: no root, no Debian numpy or
# Python pulled in.  Debian's files come through apt's configured sources
# (apt-get download: a site's mirror or proxy applies), pinned by version and
# checksum.

GPU_DEB_VERSION=0.7.6-13+b1
GPU_DEB_SHA256="\
1bfa4e635c8ab9139c910beb2d90c9e2614a70ec9edf5afbb0f263331220219b libgpuarray3
48c86c46a812e4d4734889f09d13275e2dfa19f5814fd4c845f951a8077cbf0a libgpuarray-dev
8657003207c37659cbb64104305b90ca91ef3b8828bb76ed5fd408f9630cefb0 python3-pygpu"
# pygpu's pure-Python needs
GPU_PIP_PACKAGES="Mako==1.3.10 MarkupSafe==3.0.3 six==1.17.0"

gpu_fetch_debs() {  # DIR: the three .deb files, with apt-get download
    local dir=$1 sum pkg deb
    mkdir -p "$dir"
    while read -r sum pkg; do
        deb="$dir/${pkg}_${GPU_DEB_VERSION}_amd64.deb"
        if [ ! -s "$deb" ]; then
            (cd "$dir" && apt-get download -qq "$pkg=$GPU_DEB_VERSION" >/dev/null 2>&1) ||
                die "apt-get download $pkg=$GPU_DEB_VERSION failed: apt's sources need Debian 12 (bookworm) main, then apt-get update"
        fi
        echo "$sum  $deb" | sha256sum -c --quiet - ||
            { rm -f "$deb"; die "checksum of $deb differs"; }
    done <<< "$GPU_DEB_SHA256"
}

gpu_install_packages() {  # libgpuarray, its headers and pygpu into .venv
    local debs=$VENV/gpu-debs tmp site
    site=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    if [ "$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')" \
            != .cpython-311-x86_64-linux-gnu.so ]; then
        die "the GPU packages are built for CPython 3.11 on x86-64 only"
    fi
    gpu_fetch_debs "$debs"
    tmp=$(mktemp -d)
    for deb in "$debs"/*.deb; do dpkg-deb -x "$deb" "$tmp"; done
    cp -a "$tmp"/usr/lib/libgpuarray.so* "$VENV/lib"/
    mkdir -p "$VENV/include"
    rm -rf "$VENV/include"/gpuarray "$site/pygpu"
    cp -a "$tmp/usr/include/gpuarray" "$VENV/include"/
    cp -a "$tmp"/usr/lib/python3/dist-packages/pygpu* "$site/"
    rm -rf "$site/pygpu/tests" "$site"/pygpu/*.c "$tmp"
    pip_install $GPU_PIP_PACKAGES
    echo "setup: libgpuarray and pygpu $GPU_DEB_VERSION in $VENV"
}

# OpenCL: the ICD loader, pocl's CPU device and CLBlast (libgpuarray's BLAS on
# OpenCL), from Debian (as root); then the bare-name links libgpuarray dlopens.
# Under --gpu it is optional: without root the CUDA part goes on without it.
gpu_opencl() {
    [ -e /etc/OpenCL/vendors/pocl.icd ] \
        || apt_install pocl-opencl-icd "no OpenCL device on this CPU"
    any_file /usr/lib/*/libOpenCL.so.1 \
        || apt_install ocl-icd-libopencl1 "no OpenCL loader"
    any_file /usr/lib/*/libclblast.so.1 \
        || apt_install libclblast1 "no BLAS on OpenCL"
    if [ "$GPU_MODE" = gpu ]; then
        "$VENV/bin/python" gpu/libraries.py link-opencl 2>/dev/null \
            || echo "setup: OpenCL left out (its Debian packages need root); going on with CUDA" >&2
    else
        "$VENV/bin/python" gpu/libraries.py link-opencl
    fi
}

gpu_link_cuda() {  # the bare-name CUDA links; NVRTC/cuBLAS wheels if none fits
    if ! "$VENV/bin/python" gpu/libraries.py link; then
        local pins
        pins=$("$VENV/bin/python" gpu/libraries.py pins) || return 1
        echo "setup: installing $pins (matching the driver) with pip" >&2
        pip_install $pins
        "$VENV/bin/python" gpu/libraries.py link
    fi
}

gpu_check() {
    THEANO_FLAGS="${THEANO_FLAGS:+$THEANO_FLAGS,}device=cuda" "$VENV/bin/python" gpu/check.py
}

case "$GPU_MODE" in
    gpu-packages) gpu_install_packages ;;
    opencl) gpu_install_packages; gpu_opencl ;;
    gpu) gpu_install_packages; gpu_opencl; gpu_link_cuda; gpu_check ;;
esac
