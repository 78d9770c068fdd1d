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
from click.core import ParameterSource

from biosrecall.bios.dataset import FORMAT, MANIFEST
from biosrecall.bios.validation import read_manifest
from biosrecall.cli.config_file import config_option
from biosrecall.cli.options import CHECKPOINT_LIST, Integer, ParsedBy, checkpoint_option
from biosrecall.diagnose.options import parse_depth_list
from biosrecall.errors import BiosrecallError
from biosrecall.hub import check_model_folder
from biosrecall.interrupts import work_done
from biosrecall.numbers import DEPTH, counts
from biosrecall.sizing import Cost, check_fits, scoring_cost
from biosrecall.train.run_folder import RunFolder

DEFAULT_OUT = Path("recall-curve")
RUN_BATCH_SIZE = 256
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
@config_option(lists=("depths",))
@click.argument("run_dirs", nargs=-1, type=click.Path(path_type=Path))
@checkpoint_option("Checkpoints to evaluate (repeatable)", None, multiple=True, note=" [default: fractions]")
@click.option(
    "--max-depth",
    default=64,
    type=Integer(
        DEPTH, below="--max-depth must be at least 1 (got {value}), the max depth any query reaches"
    ),
    help="Evaluate serving depths 1..max-depth (runs, and a looped --hf-model).",
)
@click.option(
    "--threshold",
    default=4,
    type=Integer(counts(), below="--threshold must be at least 1 (got {value})"),
    help="A fact is recalled when this many of its templates are exact.",
)
@click.option(
    "--batch-size",
    default=None,
    type=Integer(counts()),
    help="Evaluation rows per forward pass [default: 256 for runs, 64 with --hf-model].",
)
@click.option("--device", default="auto", help='"auto" (CUDA when present), "cpu" or "cuda".')
@click.option(
    "--data",
    "data_dir",
    type=click.Path(path_type=Path),
    default=None,
    help="Dataset folder to use instead of the one recorded in the checkpoints (hash still checked); "
    "with --hf-model, the bioS dataset to score on (required).",
)
@click.option(
    "--out",
    "out_dir",
    type=click.Path(path_type=Path),
    default=DEFAULT_OUT,
    help="Folder for the tables and the figure.",
)
@click.option(
    "--metric",
    type=click.Choice(["bits", "attribute"]),
    default="bits",
    help="bits: recalled bits per person; attribute: share of facts recalled per attribute.",
)
@click.option("--refresh", is_flag=True, help="Re-evaluate even when a cached result is current.")
@click.option(
    "--overwrite",
    is_flag=True,
    help="Replace an earlier recall-curve folder --out (swapped in whole once complete; a folder "
    "recall-curve did not write is refused).",
)
@click.option(
    "--people",
    type=Integer(counts()),
    default=None,
    help="Score only the first N people (faster) [default: everyone].",
)
@click.option(
    "--exit",
    "exits",
    multiple=True,
    help="Exit criteria to score (repeatable or a comma list): fixed:K, kl:EPS, stable:M, entropy:H, "
    "latent:EPS, accel:EPS (no readout: the recurrent state's change), gate:DELTA (the learned gate of "
    "`biosrecall gate train`, recall lost <= DELTA), cdf:Q (the exit gate an ouro-gate run trained: stop "
    "where the exit CDF reaches Q), oracle; a bare name sweeps its thresholds. Capped at --max-depth.",
)
@click.option(
    "--per-token",
    is_flag=True,
    help="With --exit: also decide each criterion per answer token in the KV-cached decoder and "
    "compare its recall with whole-query exit at the same mean depth (exit_token_gap.*; slower).",
)
@click.option(
    "--applicable-exits",
    is_flag=True,
    help="With --exit: score each checkpoint on the criteria its recipe can serve (cdf:Q needs a trained "
    "exit gate; latent, accel and gate:DELTA one trajectory over depths, not loopformer's pass per depth) "
    "and name each one left out, instead of refusing the call.",
)
@click.option(
    "--state-norms",
    is_flag=True,
    help="Also measure the recurrent state's RMS after each depth 1..--max-depth on 64 evaluation rows "
    "of each checkpoint, cached as checkpoints/<label>/state_norm.parquet (`biosrecall.eval.state_norms`).",
)
@click.option(
    "--aggregate-seeds",
    is_flag=True,
    help="Runs sharing a folder name are seeds of one configuration (figure1's runs/seed*/NAME): "
    "report each group's mean, 95% t interval and seed count (recall_curve_seeds.*, summary.csv). "
    "Refused when a group's runs differ in more than the seed.",
)
@click.option(
    "--hf-model",
    type=click.Path(path_type=Path),
    default=None,
    help="Score this Hugging Face causal LM folder on the --data dataset instead of runs.",
)
@click.option(
    "--depth-arg",
    default=None,
    help="With --hf-model: the forward argument that sets a looped model's depth, e.g. num_steps "
    "[default: num_steps for a biosrecall export, none (one depth) otherwise].",
)
@click.option(
    "--depths",
    type=ParsedBy(partial(parse_depth_list, option="--depths"), DEPTH),
    default=None,
    help="With --hf-model and a depth argument: depths to score, a comma list [default: 1..--max-depth, "
    "as for runs].",
)
@click.option(
    "--trust-remote-code",
    is_flag=True,
    default=None,
    help="With --hf-model: run modeling code the folder ships (needed for most looped models; a "
    "biosrecall export's own code is trusted without it).",
)
def recall_curve(
    run_dirs,
    checkpoints,
    max_depth,
    threshold,
    batch_size,
    device,
    data_dir,
    out_dir,
    metric,
    refresh,
    overwrite,
    people,
    exits,
    per_token,
    applicable_exits,
    state_norms,
    aggregate_seeds,
    hf_model,
    depth_arg,
    depths,
    trust_remote_code,
):
    """Score factual recall of trained runs (or of one Hugging Face causal LM) over serving depths and
    plot Figure-1 style curves."""

    _check_mode(run_dirs, hf_model, data_dir)
    from biosrecall.eval.recall_curve import check_output, write_output

    check_output(out_dir, overwrite)  # before hours of scoring: a file or a stranger folder is refused
    _check_size(run_dirs, data_dir, people, max_depth)
    if hf_model is not None:
        options = {"threshold": threshold, "batch_size": batch_size, "device": device, "people": people}
        # Unset (None) lets a biosrecall export's own modeling code be trusted without the flag.
        options.update(depth_arg=depth_arg, trust_remote_code=True if trust_remote_code else None)
        # Only an explicit --max-depth: a model without a depth argument is refused one.
        options["max_depth"] = max_depth if _given("max_depth") else None
        options["depths"] = None if depths is None else parse_depth_list(depths, "--depths")
        check_model_folder(hf_model)  # before torch and transformers load: a Hub name is refused at once
        from biosrecall.hf.scoring import hf_recall_curve

        score = partial(hf_recall_curve, hf_model, data_dir, metric=metric, **options)
        _print(write_output(out_dir, overwrite, score))  # as for runs, a new folder swapped in whole
        return
    from biosrecall.eval.recall_curve import score_and_write

    batch_size = RUN_BATCH_SIZE if batch_size is None else batch_size
    result = score_and_write(run_dirs, out_dir, checkpoints, exits=exits, per_token=per_token,
                             applicable=applicable_exits, aggregate_seeds=aggregate_seeds, metric=metric,
                             max_depth=max_depth, threshold=threshold, batch_size=batch_size, device=device,
                             data_dir=data_dir, refresh=refresh, people=people, overwrite=overwrite)  # fmt: skip
    if state_norms:
        _state_norms(run_dirs, checkpoints, max_depth, people, data_dir, device)
    _print(result)


def _state_norms(run_dirs, checkpoints, max_depth, people, data_dir, device) -> None:
    """--state-norms: each checkpoint's state RMS by depth, cached in its folder; one line per checkpoint."""
    from biosrecall.eval.curves import DEFAULT_CHECKPOINTS
    from biosrecall.eval.state_norms import bios_state_norms, summary_line

    for run_dir in run_dirs:
        found = bios_state_norms(run_dir, checkpoints or DEFAULT_CHECKPOINTS, max_depth, people=people,
                                 data_dir=data_dir, device=device)  # fmt: skip
        for label, table in found.items():
            click.echo(f"{run_dir} [{label}] {summary_line(table)}")


def _given(name: str) -> bool:
    """The option was set on the command line or in a --config file (not left at its default)."""

    return click.get_current_context().get_parameter_source(name) not in (ParameterSource.DEFAULT, None)


def _flag(name: str) -> str:
    return "--" + {CHECKPOINT_LIST: "checkpoint", "exits": "exit"}.get(name, name).replace("_", "-")


def _check_mode(run_dirs, hf_model, data_dir) -> None:
    """Runs or one Hugging Face model, each with only the options that apply to it."""

    if hf_model is not None and run_dirs:
        raise BiosrecallError("--hf-model and RUN_DIRS are mutually exclusive: score runs or one model")
    if hf_model is None and not run_dirs:
        raise BiosrecallError("give run folders (RUN_DIRS) or a Hugging Face model folder (--hf-model DIR)")
    wrong = [name for name in (RUN_ONLY if hf_model is not None else HF_ONLY) if _given(name)]
    if wrong:
        applies = "runs, not to --hf-model" if hf_model is not None else "--hf-model only"
        raise BiosrecallError(f"{_flag(wrong[0])} applies to {applies}")
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
