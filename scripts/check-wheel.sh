#!/usr/bin/env bash
# The install route users take, checked end to end: build the sdist and the wheel, install the wheel
# (not editable) into a fresh virtual environment, the CPU torch first as the Makefile does, then run
# the main job from a folder outside the checkout and compare its files with the checkout's.
#
#   scripts/check-wheel.sh                    # builds the wheel with the checkout's .venv (after `make test`)
#   WHEEL=dist/biosrecall-X-py3-none-any.whl scripts/check-wheel.sh   # check a wheel built elsewhere
#
# It fails when any command fails, when the wheel's dataset differs from the checkout's by one byte,
# when the wheel's Figure-1 claims differ from the checkout's, or when an exported model scored with
# `recall-curve --hf-model` differs from the run it came from. CI runs it after `make test`.
set -euo pipefail
cd "$(dirname "$0")/.."
CHECKOUT=$(pwd)
PY=${PYTHON:-$CHECKOUT/.venv/bin/python}
TORCH=${TORCH:-torch==2.13.0}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
step() { printf '\n== %s\n' "$*"; }

if [ -z "${WHEEL:-}" ]; then
    step "python -m build (sdist and wheel)"
    "$PY" -m build --outdir "$WORK/dist" . >"$WORK/build.log" 2>&1 || { cat "$WORK/build.log"; exit 1; }
    ls "$WORK/dist"
    WHEEL=$(ls "$WORK"/dist/*.whl)
fi
WHEEL=$(realpath "$WHEEL")

step "fresh virtual environment: $TORCH, then the wheel with the hf and lm-corpus extras"
python3 -m venv "$WORK/venv"
VPY=$WORK/venv/bin/python
"$VPY" -m pip install --quiet "$TORCH"
# uv resolves the extras in parallel, as the Makefile does; pip installs the same where uv cannot be had.
{ "$VPY" -m pip install --quiet uv && "$WORK/venv/bin/uv" pip install --quiet --python "$VPY" "$WHEEL[hf,lm-corpus]"; } \
    || "$VPY" -m pip install --quiet "$WHEEL[hf,lm-corpus]"
BIN=$WORK/venv/bin/biosrecall

mkdir "$WORK/use"
cd "$WORK/use"  # outside the checkout: nothing of it is on sys.path
"$VPY" - "$CHECKOUT" <<'EOF'
import sys
from pathlib import Path

import biosrecall

where = Path(biosrecall.__file__).resolve()
assert Path(sys.argv[1]).resolve() not in where.parents, f"imported from the checkout: {where}"
print(f"biosrecall {biosrecall.__version__} from {where.parent}")
EOF
"$BIN" --version

step "generate: the wheel's dataset is byte-identical to the checkout's"
"$BIN" generate --out data --people 20 --seed 0 >/dev/null
"$CHECKOUT/.venv/bin/biosrecall" generate --out "$WORK/checkout-data" --people 20 --seed 0 >/dev/null
diff -r data "$WORK/checkout-data"
echo "identical: $(cd data && find . -type f | sort | xargs sha256sum | sha256sum | cut -c1-16)"

step "figure1 --preset quick: the same claims.csv as the checkout's"
"$BIN" figure1 --preset quick --out runs/demo
"$CHECKOUT/.venv/bin/biosrecall" figure1 --preset quick --out "$WORK/checkout-demo" >/dev/null
cmp runs/demo/claims.csv "$WORK/checkout-demo/claims.csv"
echo "identical: claims.csv"

step "export, then recall-curve --hf-model: the export scores as its run does"
RUN=$(dirname "$(find runs/demo/runs -name config.json -path '*uniform*' | sort | head -1)")
"$BIN" export "$RUN" --out exported >/dev/null
"$BIN" recall-curve "$RUN" --checkpoint final --max-depth 4 --out scored-run >/dev/null
"$BIN" recall-curve --hf-model exported --data runs/demo/data --depths 1,2,4 --out scored-hf >/dev/null
"$VPY" - <<'EOF'
import pandas as pd

run = pd.read_parquet("scored-run/recall_curve.parquet").query("depth != 3").reset_index(drop=True)
hf = pd.read_parquet("scored-hf/recall_curve.parquet")
pd.testing.assert_frame_equal(hf, run, check_exact=True)
print(f"identical: recall at K=1,2,4 ({len(hf)} rows)")
EOF

step "lm prepare pkg:kjv (the lm-corpus extra)"
"$BIN" lm prepare pkg:kjv --out kjv
echo "the wheel runs the main job from outside the checkout"
