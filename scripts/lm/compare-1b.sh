#!/usr/bin/env bash
# The paper's 1B comparison on one node of 8 GPUs (FSDP2): uniform vs fixed-first K0=4 switching at
# 67% and 80%, 20,000 updates and 10.49B tokens each, once per seed. Then evaluation: validation NLL
# at depths 1..16, three lm-eval tasks (hellaswag, arc_easy, piqa) at depths 4, 8 and 16, and the
# comparison with each schedule's seeds aggregated (mean and 95% t interval, `lm compare
# --aggregate-seeds`), the seed variation the paper judges its 1B results against.
#
#   DATA=data/ultra-fineweb SEEDS="0 1 2" scripts/lm/compare-1b.sh   # prepare it with prepare-1b.sh
#   DRY_RUN=1 scripts/lm/compare-1b.sh                                 # print every run's tokens and FLOPs
#
# SEEDS [0]: one run per schedule and seed, in RUNS/1b/<schedule>/seed<S>; one seed gives no interval.
# Re-running continues interrupted runs (--resume). See common.sh for the other variables.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/common.sh"
config=$here/1b.toml
updates=20000
: "${SEEDS:=0}"

for seed in $SEEDS; do
    launch "1b/uniform/seed$seed" "$config" --schedule uniform:1-16 --updates "$updates" --seed "$seed"
    for switch in 0.67 0.8; do
        launch "1b/ff-k4-s$switch-uniform/seed$seed" "$config" --seed "$seed" \
            --schedule "fixed_first:k0=4,switch=$switch,finish=uniform" --updates "$updates"
    done
done
evaluate_seeds 1b
