#!/usr/bin/env bash
# Offline bundle for a GPU node without network (docs/gpu.md).
#
#   bash gpu/bundle.sh pack OUT.tar.xz [--nvrtc DIR]   here, with network
#   bash gpu/bundle.sh unpack BUNDLE [--no-check]       there, in the project
#
# pack: `setup.sh --gpu-packages` (the pinned packages and Debian's libgpuarray
# and pygpu in .venv), then one xz archive of what .venv runs on: the base
# Python of .venv (a self-contained prefix such as pyenv's, trimmed of its
# tests, Tk, IDLE and other packages), the site-packages the GPU path and its
# tests import, libgpuarray and its headers; with --nvrtc DIR also the NVRTC
# of DIR (for a node whose own CUDA libraries are newer than its driver).
#
# unpack: puts that Python back at the same absolute path (unless a Python of
# the same version is there), makes .venv from it, links the node's CUDA
# libraries (gpu/libraries.py) and runs the GPU check.  Needs write access to the
# Python's path (root for /root/...); no network.
set -euo pipefail
cd "$(dirname "$0")/.."   # the project root

# what the GPU path, the GPU check and tests/test_gpu.py import (the repairs
# of theano-pymc, theano_platform/theano_repairs.py, travel with the project's files)
SITE_PACKAGES="numpy numpy.libs scipy scipy.libs theano filelock pygpu mako markupsafe
six.py setuptools pkg_resources _distutils_hack distutils-precedence.pth
pytest _pytest py.py pluggy iniconfig packaging xdist execnet"
# parts of the standard library nothing here uses
STDLIB_OUT="test idlelib tkinter turtledemo ensurepip lib2to3 site-packages
config-3.11-x86_64-linux-gnu/libpython3.11.a lib-dynload/_tkinter*"

die() { echo "bundle.sh: $*" >&2; exit 1; }

copy_python() {  # PREFIX DEST: the interpreter, libpython, stdlib, headers
    local prefix=$1 dest=$2 excl=() p
    for p in $STDLIB_OUT; do excl+=(--exclude="lib/python3.11/$p"); done
    mkdir -p "$dest"
    (cd "$prefix" && tar -cf - "${excl[@]}" --exclude=__pycache__ \
        bin/python3.11 lib/libpython3.11.so* lib/python3.11 include/python3.11) |
        tar -xf - -C "$dest"
    mkdir -p "$dest/lib/python3.11/site-packages"
    ln -s python3.11 "$dest/bin/python3"
}

copy_site_packages() {  # SITE DEST
    local site=$1 dest=$2 names=() n
    for n in $SITE_PACKAGES; do
        names+=("$n")
        # (pytest's plugins register through their dist-info: pytest_xdist-*)
        for d in "$site/${n%.py}"-*.dist-info "$site/${n%.py}"-*.egg-info \
                 "$site/pytest_${n%.py}"-*.dist-info; do
            [ -e "$d" ] && names+=("$(basename "$d")")
        done
    done
    mkdir -p "$dest"
    (cd "$site" && tar -cf - --exclude=__pycache__ --exclude='*/tests' \
        --exclude='*.pyx' --exclude='*.pxd' "${names[@]}") | tar -xf - -C "$dest"
}

pack() {
    local out=$1 nvrtc=${2:-} stage prefix site
    mkdir -p "$(dirname "$out")"
    bash setup.sh --gpu-packages
    prefix=$(.venv/bin/python -c 'import sys; print(sys.base_prefix)')
    site=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    case "$prefix" in
        /usr | /usr/local) die "the base Python of .venv is the system's ($prefix); use a \
self-contained one (pyenv, python-build-standalone): PYTHON=/path/python3.11 bash setup.sh" ;;
    esac
    stage=$(mktemp -d)
    GPU_BUNDLE_TMP=$stage
    trap 'rm -rf "$GPU_BUNDLE_TMP"' EXIT
    copy_python "$prefix" "$stage/python"
    copy_site_packages "$site" "$stage/site-packages"
    mkdir -p "$stage/venv/lib" "$stage/venv/include"
    cp -a .venv/lib/libgpuarray.so* "$stage/venv/lib/"
    cp -a .venv/include/gpuarray "$stage/venv/include/"
    if [ -n "$nvrtc" ]; then
        mkdir -p "$stage/venv/cuda"
        cp -aL "$nvrtc"/libnvrtc.so.* "$nvrtc"/libnvrtc-builtins.so.* "$stage/venv/cuda/"
    fi
    {
        echo "PYTHON_PREFIX=$prefix"
        echo "PYTHON_VERSION=$("$prefix/bin/python3.11" -c 'import platform; print(platform.python_version())')"
        echo "CREATED=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
        (cd "$site" && ls -d ./*.dist-info ./*.egg-info) | sed 's|^\./|PACKAGE=|'
    } > "$stage/MANIFEST"
    # GPU_BUNDLE_XZ=-9: 3.5% smaller, 40% more CPU time, much more memory
    tar -C "$stage" -cf - . | xz ${GPU_BUNDLE_XZ:--6} -T0 > "$out"
    echo "bundle.sh: $out, $(du -m "$out" | cut -f1) MiB ($(stat -c %s "$out") bytes)"
}

manifest() { sed -n "s/^$1=//p" "$2/MANIFEST"; }

unpack() {
    local bundle=$1 check=${2:-} tmp prefix version site
    [ -f "$bundle" ] || die "no bundle $bundle"
    tmp=$(mktemp -d)
    GPU_BUNDLE_TMP=$tmp
    trap 'rm -rf "$GPU_BUNDLE_TMP"' EXIT
    xz -dc "$bundle" | tar -xf - -C "$tmp"
    prefix=$(manifest PYTHON_PREFIX "$tmp")
    version=$(manifest PYTHON_VERSION "$tmp")
    if [ "$("$prefix/bin/python3.11" -c 'import platform; print(platform.python_version())' \
            2>/dev/null)" != "$version" ]; then
        mkdir -p "$prefix" || die "cannot write $prefix (the bundle's Python goes there)"
        cp -a "$tmp/python/." "$prefix/"
        echo "bundle.sh: Python $version in $prefix"
    fi
    if ! .venv/bin/python -c '' 2>/dev/null; then
        rm -rf .venv
        "$prefix/bin/python3.11" -m venv --without-pip .venv
    fi
    site=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    cp -a "$tmp/site-packages/." "$site/"
    cp -a "$tmp/venv/." .venv/
    if [ -d .venv/cuda ]; then
        .venv/bin/python gpu/libraries.py link --search .venv/cuda
    else
        .venv/bin/python gpu/libraries.py link
    fi
    [ "$check" = --no-check ] ||
        THEANO_FLAGS="${THEANO_FLAGS:+$THEANO_FLAGS,}device=cuda" .venv/bin/python gpu/check.py
}

case "${1:-}" in
    pack) [ $# -ge 2 ] || die "usage: gpu/bundle.sh pack OUT.tar.xz [--nvrtc DIR]"
          if [ "${3:-}" = --nvrtc ]; then pack "$2" "${4:?--nvrtc DIR}"; else pack "$2"; fi ;;
    unpack) [ $# -eq 2 ] || [ "${3:-}" = --no-check ] ||
                die "usage: gpu/bundle.sh unpack BUNDLE [--no-check]"
            unpack "$2" "${3:-}" ;;
    *) echo "usage: bash gpu/bundle.sh pack OUT.tar.xz [--nvrtc DIR] | unpack BUNDLE [--no-check]" >&2
       exit 2 ;;
esac
