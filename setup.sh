#!/usr/bin/env bash
# One-time set-up on a fresh machine: g++, OpenBLAS, Open MPI and a CJK font (Debian), the
# virtual environment .venv with the pinned packages, and a check that Theano imports.
# Safe to run again: it only installs what is missing.
#
#   bash setup.sh                  the CPU set-up
#   bash setup.sh --opencl         and the GPU back-end on OpenCL: a CPU OpenCL
#                                  device (pocl), on which the GPU tests run
#   bash setup.sh --gpu            and the GPU back-end on CUDA and OpenCL, then
#                                  the GPU check (NVIDIA driver needed; docs/gpu.md)
#   bash setup.sh --gpu-packages   and only the GPU packages (no driver needed;
#                                  what gpu/bundle.sh pack takes)
set -euo pipefail
cd "$(dirname "$0")"

GPU_MODE=
case "${1:-}" in
    "") ;;
    --gpu | --opencl | --gpu-packages) GPU_MODE=${1#--} ;;
    *) echo "usage: bash setup.sh [--opencl | --gpu | --gpu-packages]" >&2; exit 2 ;;
esac

# Debian packages, each installed with apt-get (as root) only when missing;
# without apt-get or root, a one-line note of what is lost instead.
APT_UPDATED=
apt_install() {  # apt_install PACKAGE WHY_NEEDED
    if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
        echo "setup: installing $1 with apt-get" >&2
        [ -n "$APT_UPDATED" ] || { apt-get update -qq >/dev/null; APT_UPDATED=1; }
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$1" >/dev/null
    else
        echo "setup: $1 missing and apt-get not usable: $2. Install $1 to fix." >&2
    fi
}

any_file() {  # any_file PATH...: true when one of the (globbed) paths exists
    local f
    for f in "$@"; do [ -e "$f" ] && return 0; done
    return 1
}

# Theano compiles its ops (and fast_ops.py's, with OpenMP) with g++.
command -v g++ >/dev/null 2>&1 \
    || apt_install g++ "Theano cannot compile C code and runs far slower"
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

PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
if ! .venv/bin/python -m pip install -q --disable-pip-version-check -r requirements.txt \
        2> >(grep -v "^WARNING: Location" >&2); then
    echo "setup: pip install -r requirements.txt failed" >&2
    exit 1
fi
.venv/bin/python -c "import theano_env, theano; print('setup: Theano', theano.__version__, 'BLAS:', theano.config.blas__ldflags or 'NumPy C-API')"

# ---------------------------------------------------------------------------
# GPU back-end (--gpu, --gpu-packages): Theano's gpuarray over Debian 12's
# libgpuarray 0.7.6 and its pygpu (PyPI has no pygpu; Debian's is built for
# Python 3.11), unpacked into .venv: no root, no Debian numpy or Python
# pulled in.  Debian's files are pinned by version and checksum.

GPU_DEB_VERSION=0.7.6-13+b1
GPU_DEB_POOL=https://deb.debian.org/debian/pool/main/libg/libgpuarray
GPU_DEB_SHA256="\
1bfa4e635c8ab9139c910beb2d90c9e2614a70ec9edf5afbb0f263331220219b libgpuarray3
48c86c46a812e4d4734889f09d13275e2dfa19f5814fd4c845f951a8077cbf0a libgpuarray-dev
8657003207c37659cbb64104305b90ca91ef3b8828bb76ed5fd408f9630cefb0 python3-pygpu"
# pygpu's pure-Python needs
GPU_PIP_PACKAGES="Mako==1.3.10 MarkupSafe==3.0.3 six==1.17.0"

gpu_fetch_debs() {  # DIR: the three .deb files, by apt or from Debian's pool
    local dir=$1 sum pkg deb
    mkdir -p "$dir"
    while read -r sum pkg; do
        deb="$dir/${pkg}_${GPU_DEB_VERSION}_amd64.deb"
        if [ ! -s "$deb" ]; then
            (cd "$dir" && apt-get download -qq "$pkg=$GPU_DEB_VERSION" 2>/dev/null) ||
            .venv/bin/python -c 'import sys, urllib.request as u
u.urlretrieve(sys.argv[1], sys.argv[2])' \
                "$GPU_DEB_POOL/$(basename "$deb" | sed 's/+/%2B/')" "$deb"
        fi
        echo "$sum  $deb" | sha256sum -c --quiet - ||
            { echo "setup: checksum of $deb differs" >&2; rm -f "$deb"; return 1; }
    done <<< "$GPU_DEB_SHA256"
}

gpu_install_packages() {  # libgpuarray, its headers and pygpu into .venv
    local debs=.venv/gpu-debs tmp site
    site=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    if [ "$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')" \
            != .cpython-311-x86_64-linux-gnu.so ]; then
        echo "setup: the GPU packages are built for CPython 3.11 on x86-64 only" >&2
        return 1
    fi
    gpu_fetch_debs "$debs"
    tmp=$(mktemp -d)
    for deb in "$debs"/*.deb; do dpkg-deb -x "$deb" "$tmp"; done
    cp -a "$tmp"/usr/lib/libgpuarray.so* .venv/lib/
    mkdir -p .venv/include
    rm -rf .venv/include/gpuarray "$site/pygpu"
    cp -a "$tmp/usr/include/gpuarray" .venv/include/
    cp -a "$tmp"/usr/lib/python3/dist-packages/pygpu* "$site/"
    rm -rf "$site/pygpu/tests" "$site"/pygpu/*.c "$tmp"
    .venv/bin/python -m pip install -q --disable-pip-version-check $GPU_PIP_PACKAGES \
        2> >(grep -v "^WARNING: Location" >&2)
    echo "setup: libgpuarray and pygpu $GPU_DEB_VERSION in .venv"
}

# OpenCL: the ICD loader, pocl's CPU device and CLBlast (libgpuarray's BLAS on
# OpenCL), from Debian; then the bare-name links libgpuarray dlopens
gpu_opencl() {
    [ -e /etc/OpenCL/vendors/pocl.icd ] \
        || apt_install pocl-opencl-icd "no OpenCL device on this CPU"
    any_file /usr/lib/*/libOpenCL.so.1 \
        || apt_install ocl-icd-libopencl1 "no OpenCL loader"
    any_file /usr/lib/*/libclblast.so.1 \
        || apt_install libclblast1 "no BLAS on OpenCL"
    .venv/bin/python gpu/libraries.py link-opencl
}

gpu_link_cuda() {  # the bare-name CUDA links; NVRTC/cuBLAS wheels if none fits
    if ! .venv/bin/python gpu/libraries.py link; then
        local pins
        pins=$(.venv/bin/python gpu/libraries.py pins) || return 1
        echo "setup: installing $pins (matching the driver) with pip" >&2
        .venv/bin/python -m pip install -q --disable-pip-version-check $pins \
            2> >(grep -v "^WARNING: Location" >&2)
        .venv/bin/python gpu/libraries.py link
    fi
}

gpu_check() {
    THEANO_FLAGS="${THEANO_FLAGS:+$THEANO_FLAGS,}device=cuda" .venv/bin/python gpu/check.py
}

case "$GPU_MODE" in
    gpu-packages) gpu_install_packages ;;
    opencl) gpu_install_packages; gpu_opencl ;;
    gpu) gpu_install_packages; gpu_opencl; gpu_link_cuda; gpu_check ;;
esac
