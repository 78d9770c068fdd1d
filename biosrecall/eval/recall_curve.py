"""`biosrecall recall-curve` of training runs as one call: score their checkpoints over serving depths
(and exit criteria), then write the tables and the figure into one folder.

    result = score_and_write(["runs/fixed4", "runs/uniform"], "0.45,final")     # into ./recall-curve
    result = score_and_write(runs, options=RecallCurveOptions(exits=("kl:1e-3,oracle",), per_token=True))
    result = score_and_write(runs, options=RecallCurveOptions(aggregate_seeds=True))   # runs/seed*/NAME
    result.summary          # recalled bits per person at the shown depths (per run, or per group)
    written, summary = write_curves(table, "recall-curve", "bits", [1, 4, 16, 64])   # any recall table

The options are the command's (`biosrecall.recall_options`). Files, into their `out_dir`:

    recall_curve.csv, .parquet, .png, .pdf   the long table (`biosrecall.eval.curves`) and its figure
    recall_curve_seeds.csv, .parquet,        with `aggregate_seeds` (`biosrecall.eval.seeds`): the
    summary.*, summary_runs.*                curves over seeds, drawn instead, and the summaries
    exit_frontier.*, exit_headline.*         with `exits`: the serving frontier (`biosrecall.eval.serving`)
    exit_token_gap.csv, .parquet             with `per_token`: per-token against whole-query exit
                                             (`biosrecall.eval.token_exit`)
    recall_curve.json                        the record: what wrote the folder, and its files

The folder is recall-curve's own: it is built under a temporary name and swapped in whole once every
file is written (`write_output`), so a full disk or a kill leaves the previous result as it was, and
`overwrite` replaces only a folder whose record marks it as recall-curve's (`RECORD`), never a folder
of the user's own files.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from biosrecall.atomic import OutputRecord, atomic_directory, atomic_write_json, check_output_dir
from biosrecall.errors import BiosrecallError
from biosrecall.eval.curves import DEFAULT_CHECKPOINTS, TABLE_NAME, summary_table
from biosrecall.eval.exits import parse_exits
from biosrecall.eval.plots import plot_recall_curves
from biosrecall.eval.seeds import aggregate_recall, seed_groups
from biosrecall.eval.serving import score_runs, write_frontier
from biosrecall.eval.sweep import DEFAULT_BATCH_SIZE
from biosrecall.eval.token_exit import TABLE_NAME as TOKEN_GAP_NAME
from biosrecall.locking import output_lock
from biosrecall.outputs import save_figure, write_table
from biosrecall.recall_options import RecallCurveOptions

SHOWN_DEPTHS = (1, 4, 16, 64)
# Every file recall-curve writes into its folder, by name (the record's list is exact; these bound it).
OWN_OUTPUTS = (
    "recall_curve*",
    "summary.*",
    "summary_runs.*",
    "exit_frontier.*",
    "exit_headline.*",
    "exit_token_gap.*",
)
RECORD_FILE = "recall_curve.json"
RECORD = OutputRecord("recall-curve", RECORD_FILE, "files", only=OWN_OUTPUTS)
"""What marks a folder as recall-curve's output: the only kind its `overwrite` replaces."""


@dataclass
class RecallCurve:
    """What `score_and_write` wrote, and the tables a reader is shown."""

    written: list[Path]
    summary: pd.DataFrame
    """Recalled bits per person at the shown depths: one row per run, or with `over_seeds` one per group
    of seeds with its 95% interval (`<column>_low`, `<column>_high`)."""
    over_seeds: bool = False
    frontier: pd.DataFrame | None = None
    """With exit criteria: the serving frontier (`biosrecall.eval.serving`)."""
    headline: pd.DataFrame | None = None
    """With exit criteria: per run, the mean depth to reach 95% of its best recall, fixed and adaptive."""
    gap: pd.DataFrame | None = None
    """With `per_token`: each criterion decided per answer token against whole-query exit."""
    skipped: tuple[str, ...] = ()
    """With `applicable` (`--applicable-exits`): each criterion left out of a checkpoint its recipe cannot
    serve, and why."""


def score_and_write(run_dirs, checkpoints=None, options: RecallCurveOptions | None = None) -> RecallCurve:
    """Score the `checkpoints` of each run (default: every budget fraction) at depths 1..`max_depth` and
    write the files of the module doc into `options.out_dir` (`write_output`). Everything is checked
    before the first model runs; the options of --hf-model and --state-norms are not this call's."""
    options = options or RecallCurveOptions()
    out_dir, max_depth, overwrite = options.out_dir, options.max_depth, options.overwrite
    check_output(out_dir, overwrite)
    criteria = parse_exits(options.exits) if options.exits else []  # parsed before any model runs
    groups = seed_groups(run_dirs) if options.aggregate_seeds else None  # refused before any evaluation
    scores = score_runs(
        run_dirs,
        checkpoints or DEFAULT_CHECKPOINTS,
        criteria,
        max_depth=max_depth,
        per_token=options.per_token,
        applicable=options.applicable_exits,
        threshold=options.threshold,
        batch_size=DEFAULT_BATCH_SIZE if options.batch_size is None else options.batch_size,
        device=options.device,
        data_dir=options.data_dir,
        refresh=options.refresh,
        people=options.people,
    )

    def write(folder: Path) -> RecallCurve:
        if groups is None:
            written, summary = write_curves(scores.recall, folder, options.metric, shown_depths(max_depth))
        else:
            written, summary = write_seed_curves(scores.recall, groups, folder)
        result = RecallCurve(written, summary, over_seeds=groups is not None, skipped=scores.skipped)
        if scores.frontier is not None:  # none when no checkpoint could serve any criterion
            frontier_files, result.headline = write_frontier(folder, scores.frontier)
            result.written += frontier_files
            result.frontier = scores.frontier
        if scores.gap is not None:
            result.written += write_table(scores.gap, folder / TOKEN_GAP_NAME)
            result.gap = scores.gap
        return result

    return write_output(out_dir, overwrite, write)


def check_output(out_dir: str | Path, overwrite: bool) -> None:
    """Refuse, before any scoring, an `out_dir` that is a file, holds an earlier result (without
    `overwrite`), or holds anything recall-curve did not write (`RECORD`)."""
    out_dir = Path(out_dir)
    if not overwrite and out_dir.is_dir() and RECORD.marks(out_dir):
        raise BiosrecallError(
            f"{out_dir} already holds recall-curve results ({RECORD_FILE}); pass --overwrite to replace them"
        )
    check_output_dir(out_dir, overwrite, RECORD)


def write_output(out_dir: str | Path, overwrite: bool, write) -> RecallCurve:
    """Run `write(folder)` (it returns the `RecallCurve` of what it wrote into `folder`) in a new folder
    that replaces `out_dir` whole once it and the record are complete; the paths returned are under
    `out_dir`. The output is locked meanwhile (`biosrecall.locking`)."""
    out_dir = Path(out_dir)
    with output_lock(out_dir):
        check_output(out_dir, overwrite)
        with atomic_directory(out_dir, overwrite=overwrite, record=RECORD) as folder:
            result = write(folder)
            names = sorted(path.name for path in result.written)
            atomic_write_json(folder / RECORD_FILE, {"command": "recall-curve", "files": names})
    result.written = [out_dir / name for name in names]
    return result


def write_curves(
    table: pd.DataFrame, out_dir: Path, metric: str, shown_depths, figure=None
) -> tuple[list[Path], pd.DataFrame]:
    """The long table and its figure (`figure`, or `plot_recall_curves` of the table) into `out_dir`;
    returns the paths written and the summary at `shown_depths`."""
    written = write_table(table, out_dir / TABLE_NAME)
    figure = plot_recall_curves(table, metric=metric) if figure is None else figure
    written += save_figure(figure, out_dir / TABLE_NAME)
    return written, summary_table(table, shown_depths)


def shown_depths(max_depth: int) -> list[int]:
    """The depths a summary of curves scored to `max_depth` shows: those of `SHOWN_DEPTHS` it reached,
    and `max_depth` itself."""
    return sorted({d for d in SHOWN_DEPTHS if d <= max_depth} | {max_depth})


def write_seed_curves(table: pd.DataFrame, groups, out_dir: Path) -> tuple[list[Path], pd.DataFrame]:
    """Every run's table, the curves over seeds, the summary over seeds and that of every run, and the
    figure of the means with their intervals; returns the paths written and the summary over seeds."""
    curves, summary, per_run = aggregate_recall(table, groups)
    written = write_table(table, out_dir / TABLE_NAME) + write_table(curves, out_dir / f"{TABLE_NAME}_seeds")
    written += write_table(summary, out_dir / "summary") + write_table(per_run, out_dir / "summary_runs")
    return written + save_figure(plot_recall_curves(curves), out_dir / TABLE_NAME), summary
