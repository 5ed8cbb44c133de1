#!/usr/bin/env bash
# Multi30k en->de on a CPU: one decoder, one seed, then the three test sets scored.
# usage: train_multi30k.sh [--dry-run] [--tiny] [--threads N] DECODER SEED DATA_DIR [MODEL_DIR] [-- extra nmt.py flags]
#   DECODER: baseline | mean | attentive | ...
#   DATA_DIR: output of 'pipeline/multi30k.py prepare' (docs/multi30k.md)
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
python=${PYTHON:-$here/.venv/bin/python}
[ -x "$python" ] || python=python3
exec "$python" "$here/pipeline/train_multi30k.py" "$@"
