"""`biosrecall recall-curve`: recalled bits per person against serving depth for trained runs.

    biosrecall recall-curve runs/fixed4 runs/fixed-first runs/uniform --checkpoint 0.45 --checkpoint final

Evaluates the chosen checkpoints (the selector syntax of `biosrecall.train.run_folder`, the same in every command;
default: every budget fraction) of each run at serving depths 1..--max-depth with one
all-depth sweep per checkpoint, and writes into --out (default `./recall-curve`; the figure compares
runs, so it belongs to none of them), a folder of its own, built whole and swapped in at the end (an
existing one is replaced only with --overwrite, and only when its record `recall_curve.json` marks it
as recall-curve's output, never a folder of other files):

    recall_curve.csv, recall_curve.parquet   long format: run, schedule, fraction, update, flops, budget,
                                             depth, attribute ("all" = whole person), recall, bits, ...
    recall_curve.png, recall_curve.pdf       one panel per budget fraction (or per attribute)

With --exit (exit criteria of `biosrecall.eval.exits`, e.g. `--exit kl:1e-3,stable:2,oracle`; a bare
name is a threshold sweep) each query also stops at the first depth where the criterion holds at all
its answer positions, and --out gets:

    exit_frontier.csv, .parquet, .png, .pdf  recalled bits, mean and p95 exit depth and modeled FLOPs per
                                             query for each criterion, next to the fixed-depth curve
    exit_headline.csv, .parquet              per run: mean depth to reach 95% of its best recall,
                                             adaptive vs fixed
    exit_token_gap.csv, .parquet             with --per-token: each criterion decided per answer token
                                             in the KV-cached decoder, against whole-query exit
                                             (`biosrecall.eval.token_exit`)

Each checkpoint's result is cached as `checkpoints/<label>/recall.parquet`, so re-plotting (another
--metric, fewer runs, a smaller --max-depth) does not re-evaluate; --refresh forces it.

With --state-norms each checkpoint also gets the recurrent state's RMS after every depth 1..--max-depth
on 64 evaluation rows (`biosrecall.eval.state_norms`: does the state stay bounded past the trained
depths?), cached as `checkpoints/<label>/state_norm.parquet` and printed at K = 1, 4, 16, 64.

Any Hugging Face causal LM instead of runs (`biosrecall.hf.scoring`, needs the `hf` extra):

    biosrecall recall-curve --hf-model exported/ff --data data/bios-1k                # K = 1..64, as runs
    biosrecall recall-curve --hf-model exported/ff --data data/bios-1k --depths 1,4,16,64
    biosrecall recall-curve --hf-model models/gpt2-bios --data data/bios-1k         # one depth
    biosrecall recall-curve --hf-model models/huginn-bios --data data/bios-1k --trust-remote-code \
        --depth-arg num_steps --depths 1,4,16,32

scores the same 4-of-5 exact match with the model's own tokenizer (greedy answer compared as text)
and writes the same recall_curve table, figure and summary. A biosrecall export's depth argument is
num_steps unless --depth-arg says otherwise; another model is scored at one depth without one. A
looped model is scored at depths 1..--max-depth, as runs are, so an export and its run print the
same "mean K<=16" (--depths picks fewer: one forward pass per depth).
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

import click

from biosrecall.bios.dataset import FORMAT, MANIFEST
from biosrecall.bios.validation import read_manifest
from biosrecall.cli.config_file import config_option
from biosrecall.cli.options import (
    CHECKPOINT_LIST,
    Integer,
    ParsedBy,
    checkpoint_option,
    field_options,
    given_flags,
    refuse_given,
)
from biosrecall.diagnose.options import parse_depth_list
from biosrecall.errors import BiosrecallError
from biosrecall.hub import check_model_folder
from biosrecall.interrupts import work_done
from biosrecall.numbers import DEPTH, counts
from biosrecall.recall_options import METRICS, RecallCurveOptions
from biosrecall.sizing import Cost, check_fits, scoring_cost
from biosrecall.train.run_folder import RunFolder

FOLDER = click.Path(path_type=Path)
CHECKED = {
    "max_depth": {"type": Integer(DEPTH)},
    "threshold": {"type": Integer(counts())},
    "metric": {"type": click.Choice(METRICS)},
    "people": {"type": Integer(counts())},
    "batch_size": {"type": Integer(counts())},
    "exits": {"flag": "--exit", "type": str, "multiple": True},
    "depths": {"type": ParsedBy(partial(parse_depth_list, option="--depths"), DEPTH)},
}
"""What the options of `RecallCurveOptions` take beyond their fields' types (`field_options`; their help
is the docstring under each field). --depths is read as text by its parser, which takes ranges."""
RUN_ONLY = (
    CHECKPOINT_LIST,
    "refresh",
    "exits",
    "per_token",
    "aggregate_seeds",
    "state_norms",
    "applicable_exits",
)
HF_ONLY = ("depth_arg", "depths", "trust_remote_code")


@click.command("recall-curve")
@config_option()
@click.argument("run_dirs", nargs=-1, type=FOLDER)
@checkpoint_option("Checkpoints to evaluate (repeatable)", None, multiple=True, note=" [default: fractions]")
@field_options(RecallCurveOptions, CHECKED)
def recall_curve(run_dirs, checkpoints, **fields):
    """Score factual recall of trained runs (or of one Hugging Face causal LM) over serving depths and
    plot Figure-1 style curves."""
    if fields["depths"] is not None:  # the text the command line holds, read by the parser that checked it
        fields["depths"] = tuple(CHECKED["depths"]["type"].parser(fields["depths"]))
    options = RecallCurveOptions(**fields)
    _check_mode(run_dirs, options.hf_model, options.data_dir)
    from biosrecall.eval.recall_curve import check_output, score_and_write

    check_output(options.out_dir, options.overwrite)  # before hours of scoring: a stranger folder is refused
    _check_size(run_dirs, options.data_dir, options.people, options.max_depth)
    if options.hf_model is not None:
        # Before torch and transformers load: a Hub name is refused at once.
        check_model_folder(options.hf_model)
        from biosrecall.hf.scoring import hf_recall_curve

        # Only an explicit --max-depth is passed on, as a model without a depth argument is refused one.
        explicit = bool(given_flags(click.get_current_context(), ["max_depth"]))
        _print(hf_recall_curve(options, max_depth_given=explicit))  # written as for runs, swapped in whole
        return
    result = score_and_write(run_dirs, checkpoints, options)
    if options.state_norms:
        _state_norms(run_dirs, checkpoints, options)
    _print(result)


def _state_norms(run_dirs, checkpoints, options: RecallCurveOptions) -> None:
    """--state-norms: each checkpoint's state RMS by depth, cached in its folder; one line per checkpoint."""
    from biosrecall.eval.curves import DEFAULT_CHECKPOINTS
    from biosrecall.eval.state_norms import bios_state_norms, summary_line

    for run_dir in run_dirs:
        found = bios_state_norms(
            run_dir,
            checkpoints or DEFAULT_CHECKPOINTS,
            options.max_depth,
            people=options.people,
            data_dir=options.data_dir,
            device=options.device,
        )
        for label, table in found.items():
            click.echo(f"{run_dir} [{label}] {summary_line(table)}")


def _check_mode(run_dirs, hf_model, data_dir) -> None:
    """Runs or one Hugging Face model, each with only the options that apply to it."""

    if hf_model is not None and run_dirs:
        raise BiosrecallError("--hf-model and RUN_DIRS are mutually exclusive: score runs or one model")
    if hf_model is None and not run_dirs:
        raise BiosrecallError("give run folders (RUN_DIRS) or a Hugging Face model folder (--hf-model DIR)")
    applies = "runs, not to --hf-model" if hf_model is not None else "--hf-model only"
    refuse_given(
        click.get_current_context(), RUN_ONLY if hf_model is not None else HF_ONLY, f"applies to {applies}"
    )
    if hf_model is not None and data_dir is None:
        raise BiosrecallError("--hf-model needs --data DATASET, the bioS dataset folder to score it on")


def _check_size(run_dirs, data_dir, people, max_depth: int) -> None:
    """Refuse, before any dataset is read, scoring larger than the machine (`biosrecall.sizing`): every
    dataset the runs use (or --data) is read whole and holds the evaluation set of the people scored.
    A run folder that cannot be read is left to the scoring, which names its problem."""

    folders = set()
    try:
        if data_dir is not None:
            folders.add(Path(data_dir).resolve())
        else:
            for run_dir in run_dirs:
                folders.add(RunFolder(run_dir).training_data(RunFolder(run_dir).read_config()).resolve())
        counts = [read_manifest(folder / MANIFEST, FORMAT)[1]["num_people"] for folder in folders]
    except BiosrecallError:
        return
    cost, largest = Cost(), 0
    for count in counts:
        scored = count if people is None else min(people, count)
        cost = cost.alongside(scoring_cost(scored, max_depth, dataset_people=count))
        largest = max(largest, scored)
    if counts:
        check_fits(f"scoring {largest:,} people", cost, None, "score fewer with --people N")


def _print(result) -> None:
    """The summary of recalled bits, then with --exit the per-token gap, the frontier and the headline,
    then the files written."""
    work_done()  # every file is written: a signal while the results print changes nothing
    if result.over_seeds:
        shown = [c for c in result.summary.columns if not c.endswith(("_low", "_high"))]
        named = result.summary[shown].rename(columns={"group": "run"})  # a group is the run its seeds repeat
        _table("recalled bits per person, mean over seeds (intervals in summary.csv):", named, ".2f")
    else:
        _table("recalled bits per person:", result.summary, ".2f")
    for line in result.skipped:
        click.echo(f"left out (--applicable-exits): {line}")
    if result.gap is not None:
        columns = ["run", "checkpoint", "criterion", "per_token_bits", "per_token_mean_depth"]
        columns += ["whole_query_bits", "gap_vs_whole_query", "gap_vs_fixed_depth"]
        _table("per-token against whole-query exit:", result.gap[columns], ".3g")
    if result.frontier is not None:
        shown = result.frontier[result.frontier["kind"] != "fixed-depth"]
        columns = ["run", "schedule", "checkpoint", "criterion", "bits", "mean_depth", "p95_depth"]
        _table("adaptive exit:", shown[[*columns, "flops_per_query"]], ".3g")
        _table("mean depth to reach 95% of each run's best recall:", result.headline, ".3g")
    for path in result.written:
        click.echo(f"wrote {path}")


def _table(title: str, frame, digits: str) -> None:
    click.echo(title)
    click.echo(frame.to_string(index=False, float_format=lambda x: format(x, digits)))
