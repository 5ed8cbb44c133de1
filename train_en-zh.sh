#!/usr/bin/env bash
# en->zh with the papers' settings (vocabulary 25000 on both sides).
# usage: train_en-zh.sh [--dry-run] [--tiny] DECODER DATA_DIR [MODEL_DIR] [-- extra nmt.py flags]
#   DECODER: baseline | mean | attentive | memory | selfattn
#   DATA_DIR: output of 'pipeline/preprocess.py prepare --src-lang en --trg-lang zh' (see pipeline/train_pair.py)
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
python=${PYTHON:-$here/.venv/bin/python}
[ -x "$python" ] || python=python3
exec "$python" "$here/pipeline/train_pair.py" --prog "$(basename "$0")" \
    --src-lang en --trg-lang zh --vocab 25000 "$@"
