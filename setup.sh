#!/usr/bin/env bash
# One-time set-up on a fresh machine: OpenBLAS (Debian), the virtual
# environment .venv with the pinned packages, and a check that Theano imports.
# Safe to run again: it only installs what is missing.
set -euo pipefail
cd "$(dirname "$0")"

if ! ls /usr/lib/*/openblas-pthread/libopenblas.so* >/dev/null 2>&1; then
    if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
        echo "setup: installing OpenBLAS (libopenblas-dev) with apt-get" >&2
        apt-get update -qq >/dev/null
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libopenblas-dev >/dev/null
    else
        echo "setup: OpenBLAS not found and apt-get not usable; Theano will use" \
             "NumPy's BLAS (5-15% slower). Install libopenblas-dev for full speed." >&2
    fi
fi

# A font with Chinese/Japanese/Korean glyphs for analyze.py's figures (words on
# the axes); without one, analyze.py warns and such glyphs show as boxes.
if ! ls /usr/share/fonts/truetype/wqy/wqy-*.tt? /usr/share/fonts/opentype/noto/NotoSansCJK* \
        >/dev/null 2>&1; then
    if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
        echo "setup: installing a CJK font (fonts-wqy-microhei) with apt-get" >&2
        apt-get update -qq >/dev/null
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq fonts-wqy-microhei >/dev/null
    else
        echo "setup: no CJK font and apt-get not usable; analyze.py figures will show" \
             "Chinese words as boxes. Install fonts-wqy-microhei to fix." >&2
    fi
fi

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
