#!/usr/bin/env bash
# The paper's 200M sweep on one node of 8 GPUs: the 15 runs of sweep-200m.toml (fixed-first, uniform,
# curriculum, compute-matched uniform), each evaluated at serving depths 1..16 once it has finished.
#
#   DATA=data/ultradata-math-l3 scripts/lm/sweep-200m.sh     # prepare it with prepare-200m.sh
#   DRY_RUN=1 scripts/lm/sweep-200m.sh                        # what each run would do; nothing runs
#   EXECUTOR=slurm scripts/lm/sweep-200m.sh --partition gpu --cpus-per-run 64 --time-min 2880
#   biosrecall sweep collect scripts/lm/sweep-200m.toml        # then the Figure-2 comparison
#
# Re-running skips finished runs and resumes interrupted ones; `biosrecall sweep status` shows where
# each stands. Further arguments go to `biosrecall sweep run` (--only 'ff-*', --set KEY=VALUE, ...).
set -euo pipefail
exec "${BIOSRECALL:-biosrecall}" sweep run "$(dirname "$0")/sweep-200m.toml" --executor "${EXECUTOR:-local}" \
    ${DATA:+--set "data=$DATA"} ${DRY_RUN:+--dry-run} "$@"
