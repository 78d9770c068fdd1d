#!/usr/bin/env bash
# The paper's 200M sweep on one node of 8 GPUs: fixed-first K0 in {1, 2, 4} x switch {67%, 80%} x
# finish {uniform, Poisson-lognormal}, plus uniform, the McLeish curriculum and a uniform run matched to
# the compute of K0=4 / 67% (the paper's "compute-matched uniform"); 4,800 updates and 2.52B tokens
# each (the matched run: as many updates as that budget buys). Then evaluation and the comparison.
#
#   DATA=data/ultradata-math-l3 scripts/lm/sweep-200m.sh      # prepare it with prepare-200m.sh
#   DRY_RUN=1 scripts/lm/sweep-200m.sh                         # print every run's tokens and FLOPs
#
# Re-running continues interrupted runs (--resume). See common.sh for the other variables.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/common.sh"
config=$here/200m.toml
updates=4800
curriculum=curriculum:mean=8,warmup=0.75,shape=1-sqrt  # as in `biosrecall flops`

launch 200m/uniform "$config" --schedule uniform:1-16 --updates "$updates"
for finish in uniform poisson_lognormal; do
    for k0 in 1 2 4; do
        for switch in 0.67 0.8; do
            launch "200m/ff-k$k0-s$switch-$finish" "$config" \
                --schedule "fixed_first:k0=$k0,switch=$switch,finish=$finish" --updates "$updates"
        done
    done
done
launch 200m/curriculum "$config" --schedule "$curriculum" --updates "$updates"
launch 200m/uniform-matched-k4-s0.67 "$config" --schedule uniform:1-16 \
    --budget-of "fixed_first:k0=4,switch=0.67,finish=uniform:$updates"
evaluate_group 200m
