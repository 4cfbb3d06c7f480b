#!/bin/sh
# python_train.sh SCRIPT LIBATTN [ARGS]: runs tests/SCRIPT ARGS (python_grad.py, python_llama.py) on the source tree's
# package (python/ on PYTHONPATH) with LIBATTN as its libattn, by $ATTN_PYTHON, else python3. Exit 77 (skipped,
# saying why) when that interpreter or its NumPy is missing; the script itself exits 77 where torch or transformers
# is.
set -u
T=$(cd "$(dirname "$0")" && pwd)
PY=${ATTN_PYTHON:-python3}
command -v "$PY" >/dev/null 2>&1 || { echo "SKIP: no $PY here (set ATTN_PYTHON)"; exit 77; }
"$PY" -c "import numpy" >/dev/null 2>&1 || { echo "SKIP: $PY has no NumPy (apt-get install python3-numpy)"; exit 77; }
S=$1 L=$2
shift 2
PYTHONPATH=$T/../python${PYTHONPATH:+:$PYTHONPATH} ATTNTUNE_LIB=$L PYTHONDONTWRITEBYTECODE=1 exec "$PY" "$T/$S" "$@"
