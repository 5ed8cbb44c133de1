#!/usr/bin/env bash
# Runs preprocess.py with the project's virtual environment.
#   preprocess.sh prepare --src-lang es --trg-lang en --train P --dev P --test P --out DIR [...]
#   preprocess.sh postprocess --lang en [--model-dir DIR] < in > out
# PYTHON overrides the interpreter (default: .venv/bin/python beside this script).
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
python=${PYTHON:-$here/.venv/bin/python}
[ -x "$python" ] || python=python3
exec "$python" "$here/preprocess.py" "$@"
