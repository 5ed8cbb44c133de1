#!/usr/bin/env bash
# Runs pipeline/preprocess.py with the project's virtual environment.
#   pipeline/preprocess.sh prepare --src-lang es --trg-lang en --train P --dev P --test P --out DIR [...]
#   pipeline/preprocess.sh postprocess --lang en [--model-dir DIR] < in > out
# PYTHON overrides the interpreter (default: the project's .venv/bin/python).
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
python=${PYTHON:-$root/.venv/bin/python}
[ -x "$python" ] || python=python3
exec "$python" "$root/pipeline/preprocess.py" "$@"
