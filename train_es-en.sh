#!/usr/bin/env bash
# es->en with the papers' settings (vocabulary 50000 on both sides).
# usage: train_es-en.sh [--dry-run] [--tiny] DECODER DATA_DIR [MODEL_DIR] [-- extra nmt.py flags]
#   DECODER: baseline | mean | attentive | memory | selfattn
#   DATA_DIR: output of 'pipeline/preprocess.py prepare --src-lang es --trg-lang en' (see pipeline/train_pair.py)
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
python=${PYTHON:-$here/.venv/bin/python}
[ -x "$python" ] || python=python3
exec "$python" "$here/pipeline/train_pair.py" --prog "$(basename "$0")" \
    --src-lang es --trg-lang en --vocab 50000 "$@"
