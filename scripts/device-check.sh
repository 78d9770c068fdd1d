#!/usr/bin/env bash
# The GPU check of a checkout, one command, no network: bf16 matmul peak; lm-200m tokens/s and MFU at
# K = 1, 4, 16 (compiled and eager); peak memory at K = 16 (full backprop, backprop 8, activation
# checkpointing) and the largest micro-batch that fits; wall-clock vs modeled saving of fixed-first;
# the all-depth eval against per-K eval; a 2-rank NCCL all-reduce when there are 2 GPUs. Prints a table
# and writes benchmarks/results/<date>-<gpu>.json (see benchmarks/device_check.py).
#
#   scripts/device-check.sh                  # exits 2 with one line on a machine without a CUDA GPU
#   PYTHON=.venv/bin/python scripts/device-check.sh --out /tmp/results
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${PYTHON:-}" ]; then
    if [ -x .venv/bin/python ]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
exec "$PYTHON" benchmarks/device_check.py "$@"
