#!/usr/bin/env bash
# The capacity study at the Physics of Language Models 3.3 paper's 1,000 exposures per person, on
# one GPU: the three Figure-1 schedules on bios-tiny and its two standard-transformer baselines, over
# a people sweep from well under to about twice the paper's 2 bits per parameter (bios-tiny-std-params
# has 99,360 parameters: 2 bits each is about 5,950 people of 33.39 bits), at three seeds. The CPU
# study in the README stops at 100 exposures; this is the part that needs a GPU.
#
#   scripts/capacity/e1000-gpu.sh                 # trains and scores; rerun to resume (Ctrl-C: exit 130)
#   DRY_RUN=1 scripts/capacity/e1000-gpu.sh       # every run's updates, tokens and FLOPs; writes nothing
#
# Environment (defaults in brackets):
#   OUT      output folder [runs/capacity-e1000]
#   PEOPLE   people counts [1000,2000,4000,8000,12000]
#   SEEDS    training seeds [0,1,2]
#   BATCH    sequences per update [64]; the CPU studies use 8, which leaves a GPU idle
#   LR       peak learning rate [1e-2], tuned at batch 8 on the CPU presets and not re-tuned at 64:
#            run one people count at two rates first if the curves look undertrained
#   WORKERS  runs trained at once [1]; a run of bios-tiny uses a small share of a large GPU, so
#            several at once (e.g. 4) may finish sooner: check the GPU's use with nvidia-smi
#   BIOSRECALL  how to call the CLI [biosrecall]
set -euo pipefail
: "${OUT:=runs/capacity-e1000}" "${PEOPLE:=1000,2000,4000,8000,12000}" "${SEEDS:=0,1,2}"
: "${BATCH:=64}" "${LR:=1e-2}" "${WORKERS:=1}" "${BIOSRECALL:=biosrecall}"

args=(capacity --out "$OUT" --preset bios-tiny --people "$PEOPLE" --seeds "$SEEDS" --exposures 1000
      --batch-size "$BATCH" --lr "$LR" --depths 1,4,16,64 --workers "$WORKERS")
if [ -n "${DRY_RUN:-}" ]; then
    $BIOSRECALL "${args[@]}" --plan
    exit 0
fi
$BIOSRECALL "${args[@]}" --device cuda
