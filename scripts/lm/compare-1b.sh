#!/usr/bin/env bash
# The paper's 1B comparison on one node of 8 GPUs (FSDP2): uniform vs fixed-first K0=4 switching at
# 67% and 80%, 20,000 updates and 10.49B tokens each. Then evaluation and the comparison.
#
#   DATA=data/ultra-fineweb scripts/lm/compare-1b.sh          # prepare it with prepare-1b.sh
#   DRY_RUN=1 scripts/lm/compare-1b.sh                         # print every run's tokens and FLOPs
#
# Re-running continues interrupted runs (--resume). See common.sh for the other variables.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/common.sh"
config=$here/1b.toml
updates=20000

launch 1b/uniform "$config" --schedule uniform:1-16 --updates "$updates"
for switch in 0.67 0.8; do
    launch "1b/ff-k4-s$switch-uniform" "$config" \
        --schedule "fixed_first:k0=4,switch=$switch,finish=uniform" --updates "$updates"
done
evaluate_group 1b
