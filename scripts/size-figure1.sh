#!/usr/bin/env bash
# One sizing trial of the Figure-1 default: train one schedule at a budget, score recall at K=1..16.
#   scripts/size-figure1.sh OUT PEOPLE BATCH UPDATES LR SCHEDULE
#   scripts/size-figure1.sh runs/sizing/C 250 8 800 1e-2 fixed:4     # the row the default was chosen by
# Writes OUT/data (the dataset, seed 0), OUT/run (the run) and OUT/recall (recall_curve.csv|parquet at
# the 45% and 100% checkpoints, the first 200 people, depths 1..16). The README's sizing table is
# docs/results/sizing-2026-11-30.csv, built from these recall tables.
set -euo pipefail
out=$1; people=$2; batch=$3; updates=$4; lr=$5; schedule=$6
biosrecall=${BIOSRECALL:-biosrecall}
[ -d "$out/data" ] || "$biosrecall" generate --out "$out/data" --people "$people" --seed 0
"$biosrecall" train --data "$out/data" --out "$out/run" --schedule "$schedule" --budget-of "fixed:4:$updates" \
    --batch-size "$batch" --seq-len 256 --lr "$lr" --threads 1 --checkpoint-fractions 0.45,1.0 --overwrite
"$biosrecall" recall-curve "$out/run" --max-depth 16 --people 200 --device cpu --out "$out/recall"
