# Sourced by the launch scripts in this folder: `launch NAME CONFIG [lm train options...]` prints the
# run's plan (updates, tokens, modeled FLOPs, per-GPU batch split) with `biosrecall lm plan`, then starts
# it on this node under torchrun, resuming it when its folder already holds a run.
#
# Environment (defaults in brackets):
#   DATA        prepared folder from the matching prepare-*.sh script (required unless DRY_RUN)
#   RUNS        where run folders go [runs]
#   NPROC       processes (GPUs) on this node [8]
#   DRY_RUN     when set, only print the plans; nothing is launched or written
#   HARNESS_TASKS, HARNESS_DEPTHS  lm-eval tasks and serving depths of `evaluate_seeds`
#               [hellaswag,arc_easy,piqa] [4,8,16]; HARNESS_TASKS= (empty) skips them
#   BIOSRECALL  how to call the CLI [biosrecall];  PYTHON  the interpreter for torchrun [python]

: "${RUNS:=runs}" "${NPROC:=8}" "${BIOSRECALL:=biosrecall}" "${PYTHON:=python}"

launch() {
    local name=$1 config=$2
    shift 2
    local data=()
    if [ -n "${DATA:-}" ] && [ -f "$DATA/manifest.json" ]; then
        data=(--data "$DATA")
    elif [ -z "${DRY_RUN:-}" ]; then
        echo "error: set DATA to a prepared folder (see prepare-*.sh)" >&2
        return 2
    fi
    echo "== $name"
    $BIOSRECALL lm plan --config "$config" --nproc-per-node "$NPROC" "${data[@]}" "$@"
    if [ -n "${DRY_RUN:-}" ]; then
        return 0
    fi
    local resume=()
    if [ -f "$RUNS/$name/config.json" ]; then
        resume=(--resume)
    fi
    "$PYTHON" -m torch.distributed.run --standalone --nproc_per_node "$NPROC" \
        -m biosrecall lm train --config "$config" "${data[@]}" --out "$RUNS/$name" "${resume[@]}" "$@"
}

# Evaluate every run under RUNS/GROUP at serving depths 1..16 (all kept checkpoints) and write the
# Figure-2 comparison against GROUP/uniform to RUNS/GROUP-figures.
evaluate_group() {
    local group=$1
    if [ -n "${DRY_RUN:-}" ]; then
        return 0
    fi
    local run
    for run in "$RUNS/$group"/*/; do
        $BIOSRECALL lm eval "$run" --checkpoint all
    done
    $BIOSRECALL lm compare "$RUNS/$group"/*/ --reference "$RUNS/$group/uniform/" --out "$RUNS/$group-figures"
}

# Like evaluate_group for runs laid out as RUNS/GROUP/NAME/seedS: NLL of every seed run, its lm-eval
# scores at the final checkpoint (`lm harness`, needs the `eval` extra and the tasks' data from the
# Hugging Face hub or its cache), then the comparison with each NAME's seeds aggregated (mean and 95%
# t interval) against GROUP/uniform.
: "${HARNESS_TASKS=hellaswag,arc_easy,piqa}" "${HARNESS_DEPTHS:=4,8,16}"

evaluate_seeds() {
    local group=$1
    if [ -n "${DRY_RUN:-}" ]; then
        return 0
    fi
    local run
    for run in "$RUNS/$group"/*/seed*/; do
        $BIOSRECALL lm eval "$run" --checkpoint all
        if [ -n "$HARNESS_TASKS" ]; then
            $BIOSRECALL lm harness "$run" --tasks "$HARNESS_TASKS" --depths "$HARNESS_DEPTHS"
        fi
    done
    $BIOSRECALL lm compare "$RUNS/$group"/*/ --aggregate-seeds --reference "$RUNS/$group/uniform/" \
        --out "$RUNS/$group-figures"
}
