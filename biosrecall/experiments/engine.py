"""One engine for a study declared as data: its options, grid, per-run evaluation, tables and claims.

    from biosrecall.experiments.depth_study import DEPTH, DepthOptions
    result = run_study(DEPTH, "runs/depth", DepthOptions(data="data/lm-kjv", seeds=(0, 1, 2)))
    print("\\n".join(plan_study(DEPTH, "runs/depth", DepthOptions(data="data/lm-kjv"))))
    # CLI: biosrecall study depth --data data/lm-kjv --out runs/depth --seeds 0,1,2 [--plan] [--archive DEST]

A `Study` says what is particular to it; the engine does the rest, the same way for every study:

- options: one frozen dataclass whose field docstrings are its CLI options and `--config` keys
  (`biosrecall.cli.study`) and whose values are its record, OUT/<name>.json, written before the
  first run (`write_study_record`: no interrupt takes it back). A later call with other
  settings is refused in one line naming the first setting that differs; `seeds` may grow, and a
  call with more seeds trains only the new ones (a copy of an archive included).
- grid and evaluation: `SweepRun`s and `Evaluation`s of the sweep engine (`biosrecall.sweep`), which
  trains, resumes and evaluates them `workers` at a time; a run the study's `done` accepts (finished,
  its evaluation cached in its folder) is not handed to it at all, so an archive trains nothing.
- tables: pure functions of the per-run table (one row per run and whatever `read` gives, with the
  run's labels), each written as OUT/<table>.csv, .parquet and .md (`outputs.markdown_table`; a
  study's `markdown` gives pages of its own layout instead).
- claims: `biosrecall.experiments.claims.Claim`s judged over seeds by the one judge into
  OUT/claims.csv/.md (another stem: `claims_stem`), earlier looks at other seed counts kept beside
  them; figures, drawn from the per-run table, as OUT/<stem>.png and .pdf.
- the lock of OUT for the whole call, progress and OUT/timings.md (`StudyTimer`), `--plan` (what
  each run would do, its size from the trainer's own planner and its estimated training time, nothing
  written) and `--archive` (`study_archive`: the results without weights, the runs' files packed in
  one OUT/runs.tar.xz that a rerun on a copy unpacks before it asks which runs are done).
- where runs go: processes here (`--workers`, `--threads`) or a Slurm job array (`--executor slurm`
  and `sweep run`'s Slurm options; `study_executor`), on the study's `device`.

A study that needs more declares it, each hook optional: `inputs` (`capacity`'s, `figure1`'s), what
its runs read (a dataset) made under OUT under the lock, its `runs` then given OUT too and planned
there; `free`, options a later call may change (where runs are scored, a corpus's folder), and
`pins`, what options resolve to that may not change (`lm study`'s corpus, pinned by its tokenizer
and tokens); `upgrade`, a record an earlier release wrote in its own format; `replaces`, the entries of
OUT a command with --overwrite replaces when the output is refused for its settings (`run_study`); `command_line`,
the reproducing command of options that are not flat; a failure or interrupt while preparing leaves
a new output as it found it (a replaced one put back); `then`, runs chosen from the first runs'
results (a learning-rate grid's winners); `evaluate`, one scoring pass in this process instead
of per-run `evaluations`; `judge`, claims judged over a table of their own or shown in columns of
their own (`lm study`'s, `capacity`'s); `write`, every file written by the study itself (`figure1`'s
serving and budget results write their own). Branches (a run whose task names its
trunk's run as `from`) train after every other run, from the state their trunk kept
(`train_study_runs`).

How runs train (`train_study_runs`, `sweep_study_runs`): each run, described once as a `SweepRun`
(its name, `TrainConfig`, task and labels), goes to `biosrecall.sweep.run_sweep`, which writes it as
a run spec and starts it as `biosrecall train --config runs/.sweep/.specs/<run>.json`, as in any
sweep; so a study gets what every sweep gets: worker slots (2 workers x 1 thread trained 1.75x the
updates per second of 1 x 2 on 2 cores), finished runs skipped, interrupted ones resumed, a record and
a log per run under runs/.sweep/. A branch (a run whose task names its trunk's run as `from`, and
`at_update`) starts only once its trunk has finished, from the state the trunk kept at the branch
point, or from scratch when the trunk kept none there (a budget added after the trunk finished),
which trains the same run. A study whose runs fail says so in one line of bounded length: the first
failed run, its error and log, and how many others failed with the folder of their logs.

torch is imported only by what needs it (`study_executor`, `seconds_per_flop_of`), so `--help`,
`--plan` and `--archive` of a study command load none.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import signal
import tempfile
import time
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from biosrecall.atomic import atomic_write_bytes, atomic_write_text, keep_outputs, refuse_file
from biosrecall.errors import MAX_MESSAGE, BiosrecallError, bounded
from biosrecall.files import parse_json_text, read_json_object
from biosrecall.interrupts import held
from biosrecall.locking import ASIDE_SUFFIX, TEMPORARY_SUFFIX, output_lock, put_back, temporary_prefix
from biosrecall.records import Amount, parse_record
from biosrecall.sizing import format_seconds
from biosrecall.sweep.commands import EVALUATIONS
from biosrecall.sweep.engine import Executor, planned_actions, prepare, run_sweep
from biosrecall.sweep.executors import LocalExecutor, make_executor, usable_cores
from biosrecall.sweep.jobs import BOOKKEEPING, Evaluation, SweepRun
from biosrecall.sweep.records import lock_holder
from biosrecall.train.config import resolve_seq_len
from biosrecall.train.run_folder import RunFolder, machine, versions
from biosrecall.train.stops import Interrupted

RUNS = "runs"


@dataclass(frozen=True)
class Study:
    """A study as data: the engine runs any one (module docstring)."""

    name: str
    """The command (`biosrecall study <name>`) and the record's stem (OUT/<name>.json)."""
    summary: str
    """One sentence: what the study asks."""
    options: type
    """A frozen dataclass with a docstring under every field and a `seeds` tuple."""
    runs: Callable[..., list]
    """options -> the `SweepRun`s of the grid (labels carry what the tables group by, and `seed`); for a
    study with `inputs`, (options, OUT) -> them, as they read what it makes under OUT."""
    evaluations: Callable[[Any], list] = lambda options: []
    """options -> the `Evaluation`s every run gets from the sweep engine."""
    done: Callable[[Path], bool] = lambda run_dir: RunFolder(run_dir).finished()
    """A run folder that is finished and holds its evaluation: it is not trained or evaluated again."""
    read: Callable[[Path], Any] | None = None
    """A finished run folder -> its evaluation table (the engine adds the run's labels); needed
    unless the study has an `evaluate` of its own."""
    tables: Callable[[Any, Any], dict] = lambda per_run, options: {}
    """(per-run table, options) -> {name: table}: pure functions of the per-run table, each written as
    OUT/<name>.csv and .parquet."""
    markdown: Callable[[dict], dict] = lambda tables: {name: table_markdown(t) for name, t in tables.items()}
    """{name: table} of `tables` -> {stem: Markdown text}, written as OUT/<stem>.md; by default every
    table as it is (`table_markdown`), a study's own for pages of its own layout (cells as "mean [low,
    high]", several tables on one page)."""
    claims: Callable[[Any, Any], list] = lambda per_run, options: []
    """(per-run table, options) -> the claims, judged over its `seed` column."""
    judge: Callable[[Any, Any], Any] | None = None
    """(per-run table, options) -> the judged claims (`claims.judge_claims`), for claims judged over a
    table of their own or shown in columns of their own; None: `claims` judged over the per-run table."""
    claims_stem: str = "claims"
    """The claims files' stem: OUT/<stem>.csv, .parquet and .md (`claims.write_claims`)."""
    claims_paper: bool = False
    """Its claims' .md shows the paper's number beside each statement (the claims' `paper` column)."""
    figures: Callable[[Any, Any], dict] = lambda per_run, options: {}
    """(per-run table, options) -> {stem: matplotlib Figure}, saved as OUT/<stem>.png and .pdf."""
    sizes: Callable[[Any, Any], dict] = lambda run, options: {}
    """(run, options) -> what `--plan` prints of it (updates, tokens, FLOPs); reads no data."""
    growing: tuple[str, ...] = field(default=("seeds",))
    """Options a later call may extend on the same output (the record keeps their union)."""
    free: tuple[str, ...] = ()
    """Options a later call may change on the same output (the record keeps the latest): where runs
    train and are scored, not what they are, or what `pins` pins by what it is."""
    pins: Callable[[Any], dict] | None = None
    """options -> what they resolve to that must not change on the same output (a corpus by its
    tokenizer and tokens, not its folder): the record's `pins`, a later call whose pins differ refused
    in one line naming the first that does."""
    shown: tuple[str, ...] = ()
    """Options the reproducing command (`study_command`) names even at their default."""
    upgrade: Callable[[dict, str], dict] | None = None
    """(record as read, what a problem with it says) -> the engine's record, for an output whose record an earlier release wrote
    in a format of its own (the record then stays as it is until a call rewrites it)."""
    command: str = ""
    """The command words that run it ("" for `biosrecall study <name>`; "leaderboard" for a study with
    a command of its own)."""
    command_line: Callable[[Any], str] | None = None
    """options -> the command that makes the output again, for options `study_command` cannot spell
    (figure1's nested `StudyOptions` and flags); None: `study_command`'s."""
    replaces: Callable[[Path], list[str]] | None = None
    """OUT -> the names of the entries the study made there, for a command with --overwrite: an
    output refused for its settings (or a corrupt record) has them replaced when `run_study` is given
    `overwrite`, and the refusal says so; anything else in OUT stays. None: no --overwrite."""
    inputs: Callable[[Path, Any, Any], None] | None = None
    """(out, options, report): what its runs read (a dataset), made under the lock once the record of
    a new output is written, every run's plan checked there (the record of a continued output is
    rewritten only once they pass); its `runs` are given OUT."""
    then: Callable[[Any, Any], list] | None = None
    """(per-run table of the `runs`, options) -> the runs their results choose (each schedule at the
    learning rate its grid picked), trained after them; the tables see both."""
    evaluate: Callable[[Path, list, Any, Any], Any] | None = None
    """(runs folder, runs, options, executor) -> the per-run table, scored in this process with the
    executor's workers; None: each run's `read` of what its `evaluations` wrote."""
    write: Callable[[Path, Any, Any], tuple] | None = None
    """(out, per-run table, options) -> (tables, judged claims, figure paths): a study that writes its
    files itself (figure1, whose serving and budget results each write their own tables, figures and
    claims rows); None: `tables`, `markdown`, `claims` (or `judge`) and `figures` as above."""


@dataclass
class StudyResult:
    out_dir: Path
    per_run: Any  # the per-run table, every run's `read` with its labels (or the study's `evaluate`)
    tables: dict
    claims: Any  # claims.csv
    figures: list = field(default_factory=list)  # the figures' files


def record_of(study: Study, options) -> dict[str, Any]:
    """What OUT/<name>.json holds, as JSON reads it back: the study, its options, the command that
    makes the output again (`study_command`, add `--out`), versions and machine."""
    values = {
        "study": study.name,
        "options": dataclasses.asdict(options),
        "command": study_command(study, options),
        **({"pins": study.pins(options)} if study.pins is not None else {}),
    }
    return json.loads(json.dumps({**values, "versions": versions(), "machine": machine()}, default=str))


@dataclass(kw_only=True)
class StudyRecord:
    """The fields of OUT/<name>.json that continuing an output reads (its other keys are kept as written)."""

    study: str
    """The study's name."""
    options: dict[str, Any]
    """The options the output was made with (`dataclasses.asdict` of the study's options)."""
    pins: dict[str, Any] = field(default_factory=dict)
    """What the options resolved to (`Study.pins`; none for most studies)."""


class OtherSettings(BiosrecallError):
    """OUT holds this study made with other settings, or a record of its name that cannot be read:
    refused, or replaced when the study `replaces` and `run_study` is given `overwrite`."""


def check_record(out_dir: Path, study: Study, record: dict[str, Any]) -> dict[str, Any] | None:
    """The record already in OUT (None for a new or empty folder), refusing one made with other
    settings in one line naming the first setting that differs (`OtherSettings`), or a folder that
    holds other files but no record (a study writes its record before its first run)."""
    path, what = out_dir / f"{study.name}.json", f"{study.name} record"
    way = "use another --out" + (", or --overwrite to replace it" if study.replaces else "")
    if not path.is_file():
        if out_dir.is_dir() and any(out_dir.iterdir()):
            raise BiosrecallError(
                f"{out_dir} is not empty and holds no {path.name}: give a new or empty --out"
            )
        return None
    try:
        old = read_json_object(path, what)
        where = f"{what} {path} is corrupt"
        old = old if study.upgrade is None else study.upgrade(old, where)
        parse_record(old, StudyRecord, where)
    except BiosrecallError as exc:
        raise OtherSettings(f"{exc}; {way}") from None
    for key, value in record["options"].items():
        if key not in (*study.growing, *study.free) and old["options"].get(key) != value:
            flag = "--" + key.replace("_", "-")
            raise OtherSettings(
                f"{out_dir} holds a study made with {flag} {_shown(old['options'].get(key))}, "
                f"not {_shown(value)}: {way}"
            )
    for key, value in record.get("pins", {}).items():
        was = old.get("pins", {}).get(key)
        if was != value:
            # A corpus's pins are a tokenizer's hash and counts: named, not shown.
            values = "" if isinstance(value, dict) else f"; {key} was {_shown(was)}, now {_shown(value)}"
            raise OtherSettings(
                f"{out_dir} holds a study made with other settings ({key} differ): {way}{values}"
            )
    return old


def _shown(value) -> str:
    return ",".join(map(str, value)) if isinstance(value, list) else str(value)


def plan_study(study: Study, out_dir, options, workers=None, threads=None, executor=None) -> list[str]:
    """What each run would do now (train, resume, evaluate, skip), its size and an estimate of its
    training time, every setting checked as `run_study` checks it; nothing is written.

    The estimate is the run's modeled FLOPs (its `sizes`' "FLOPs") times the seconds per FLOP its model
    takes on this machine's CPU at the executor's threads, timed as `biosrecall train` times its plan
    line's "est. time" (`seconds_per_flop_of`; no data is read beyond manifests).
    Evaluation is not included."""

    out_dir = Path(out_dir)
    options, _ = checked_options(study, out_dir, options)
    executor = study_executor(workers, threads, options.device, **(executor or {}))
    groups = by_trainer(study_runs(study, out_dir, options), study.evaluations(options))
    runs = [run for group, _ in groups for run in group]
    jobs = [
        job for group, evaluations in groups for job in prepare(out_dir / RUNS, group, evaluations, executor)
    ]
    lines = [f"{study.name}: {len(runs)} runs, {describe_executor(executor)}"]
    measured: dict = {}
    total, timed = 0.0, 0
    for (name, action, _), run, job in zip(planned_actions(jobs), runs, jobs, strict=True):
        action = "skip" if study.done(job.run_dir) else action
        sizes = study.sizes(run, options)
        shown = [f"{key} {value:,}" for key, value in sizes.items()]
        flops = sizes.get("FLOPs")
        rate = None if flops is None else seconds_per_flop_of(run, executor.threads, measured)
        if rate is not None:
            shown.append(f"est. {format_seconds(flops * rate)}")
            if action in ("train", "resume"):
                total, timed = total + flops * rate, timed + 1
        lines.append(f"  {name:<32} {action:<8} {', '.join(shown)}")
    if timed:
        slots = min(executor_slots(executor), timed)
        lines.append(
            f"estimate: {format_seconds(total)} of training for {timed} run(s) (resumed ones counted whole), "
            f"about {format_seconds(total / slots)} with {slots} at a time; from each run's modeled FLOPs "
            f"and its model's throughput measured on this machine's CPU at {executor.threads} thread(s); "
            "evaluation not included"
        )
    return lines


def checked_options(study: Study, out_dir: Path, options, overwrite: bool = False) -> tuple[Any, bool]:
    """(`options` checked against the record in OUT and grown by it (`check_record`), whether OUT is
    to be replaced): with `overwrite`, an output refused for its settings is, and nothing grows."""
    try:
        old = check_record(out_dir, study, record_of(study, options))
    except OtherSettings:
        if not overwrite:
            raise
        return options, True
    return grown_options(study, options, old), False


def study_runs(study: Study, out_dir: Path, options) -> list:
    """The study's runs; those of a study with `inputs` read what it makes under OUT, so they are given OUT."""
    return study.runs(options) if study.inputs is None else study.runs(options, out_dir)


def grown_options(study: Study, options, old: dict[str, Any] | None):
    """`options` with each `growing` option the union of the record's values and the call's: a call
    that adds seeds or grid items (a leaderboard's `--recipes`) tabulates the whole study."""
    if old is None:
        return options
    grown = {}
    for key in study.growing:
        values = list(old["options"][key]) + [
            v for v in getattr(options, key) if v not in old["options"][key]
        ]
        grown[key] = tuple(sorted(values) if key == "seeds" else values)
    return dataclasses.replace(options, **grown)


def by_trainer(runs: list, evaluations: list) -> list[tuple[list, list]]:
    """The runs grouped by their training command, each group with the evaluations that read its runs
    (`recall-curve` for `train`, `lm eval` for `lm train`): one sweep per group, as a sweep trains with
    one command. Groups keep the runs' order."""
    commands = list(dict.fromkeys(run.command for run in runs))
    return [
        (
            [run for run in runs if run.command == command],
            [e for e in evaluations if EVALUATIONS[e.command] == command],
        )
        for command in commands
    ]


def run_study(
    study: Study, out_dir, options, workers=None, threads=None, report=None, executor=None, overwrite=False
) -> StudyResult:
    """Train (or continue) every run, evaluate, and write the study's tables and claims (module doc).
    Runs go `workers` at a time on `threads` threads here, or where `executor` says: `sweep run`'s
    options by name, {"kind": "slurm", "partition": "gpu", "time_min": 600} (`study_executor`).
    With `overwrite`, an output refused for its settings (`OtherSettings`) is replaced: what OUT holds
    is put back should preparing the new one fail (`_prepare_output`). Raises `Interrupted` on Ctrl-C
    (rerun to continue) and `StudyRunFailed` when a run fails."""
    from biosrecall.experiments.claims import judge_claims, write_claims
    from biosrecall.experiments.study_archive import unpack_runs
    from biosrecall.outputs import save_figure, write_table

    out_dir = refuse_file(out_dir)
    options, _ = checked_options(study, out_dir, options, overwrite)
    executor = study_executor(workers, threads, options.device, **(executor or {}))
    if study.inputs is None:
        # Every run's options checked, nothing written; a study that makes its runs' inputs checks
        # them there, once they exist.
        for group, evaluations in by_trainer(study_runs(study, out_dir, options), study.evaluations(options)):
            prepare(out_dir / RUNS, group, evaluations, executor)
    timer = StudyTimer(
        report, seeds=list(options.seeds), workers=executor_slots(executor), threads=executor.threads
    )
    with output_lock(out_dir):
        unpack_runs(out_dir)  # a copied archive's runs, packed by `--archive`: done, nothing to train
        # Under the lock: another call may have grown the record since the check above.
        options, replacing = checked_options(study, out_dir, options, overwrite)
        runs = study_runs(study, out_dir, options)
        _prepare_output(study, out_dir, options, replacing, report)
        _train(study, out_dir, runs, options, executor, report, timer)
        if study.then is not None:
            more = study.then(_evaluated(study, out_dir, runs, options, executor, timer), options)
            _train(study, out_dir, more, options, executor, report, timer)
            runs = runs + more
        per_run = _evaluated(study, out_dir, runs, options, executor, timer)
        with timer.phase("tables", "writing the tables and claims"):
            if study.write is not None:
                tables, claims, figures = study.write(out_dir, per_run, options)
            else:
                tables, figures = study.tables(per_run, options), []
                for name, table in tables.items():
                    write_table(table, out_dir / name)
                for stem, text in study.markdown(tables).items():
                    atomic_write_text(out_dir / f"{stem}.md", text)
                if study.judge is None:
                    claims = judge_claims(per_run, study.claims(per_run, options))
                else:
                    claims = study.judge(per_run, options)
                for stem, figure in study.figures(per_run, options).items():
                    figures += save_figure(figure, out_dir / stem)
                write_claims(claims, out_dir, study.claims_stem, study.claims_paper)
        timer.save(out_dir)
    return StudyResult(out_dir, per_run, tables, claims, figures)


def _prepare_output(study: Study, out_dir: Path, options, replacing: bool, report) -> None:
    """Under the lock, before anything trains, once no run of OUT is busy (`refuse_busy_runs`): the
    engine's record and the study's `inputs`. `replacing` an output refused for its settings, the
    entries the study made there (`replaces`) first go into one hidden sibling folder, deleted once
    this succeeded. A failure or interrupt here leaves OUT as it found it: a new one empty, a replaced
    one put back."""
    refuse_busy_runs(out_dir / RUNS)
    existed = out_dir.exists()
    new, aside = not existed or not any(out_dir.iterdir()), None
    path = out_dir / f"{study.name}.json"
    try:
        with held():  # a signal waits until `aside` names what the clean-up below puts back
            aside = _moved_aside(out_dir, study.replaces(out_dir), path.name) if replacing else None
        text = json.dumps(record_of(study, options), indent=2, sort_keys=True) + "\n"
        if new or aside:  # the record first: a folder holding inputs and no record is refused next time
            write_study_record(path, text)
        if study.inputs is not None:
            study.inputs(out_dir, options, report)
        write_study_record(path, text)  # a continued output's, once its new inputs pass
    except BaseException:
        if new:
            shutil.rmtree(out_dir, ignore_errors=True)
            if existed:
                out_dir.mkdir()
        if aside is not None:
            put_back(aside, out_dir)
        raise
    if aside is not None:  # renamed first: an aside still there when the next lock is taken is put back
        doomed = aside.with_name(aside.name.removesuffix(ASIDE_SUFFIX) + TEMPORARY_SUFFIX)
        os.replace(aside, doomed)
        shutil.rmtree(doomed, ignore_errors=True)


def _moved_aside(out_dir: Path, names: list[str], record: str) -> Path:
    """The entries of OUT named in `names` moved into one hidden sibling folder, which is returned; the
    record moves last, so until everything else has gone a plain rerun still refuses the output rather
    than reusing part of it. Should this process die before the folder is deleted or put back, the
    next `output_lock(out_dir)` puts it back (`locking.put_back`)."""
    target = out_dir.resolve()
    aside = Path(tempfile.mkdtemp(prefix=temporary_prefix(target), suffix=ASIDE_SUFFIX, dir=target.parent))
    present = [name for name in dict.fromkeys(names) if os.path.lexists(out_dir / name)]
    for name in sorted(present, key=lambda name: name == record):
        os.replace(out_dir / name, aside / name)
    return aside


def _train(study: Study, out_dir: Path, runs: list, options, executor, report, timer: StudyTimer) -> None:
    """Bring the runs the study's `done` does not accept to done, with their evaluations, trunks
    before their branches (`train_study_runs`)."""
    every = study.evaluations(options)
    if runs:
        with timer.phase("training", f"{len(runs)} run(s) and their evaluation" if every else None):
            for group, evaluations in by_trainer(runs, every):
                train_study_runs(out_dir / RUNS, group, executor, report, evaluations, study.done)


def _evaluated(study: Study, out_dir: Path, runs: list, options, executor, timer: StudyTimer):
    """The per-run table of `runs`: the study's `evaluate` (timed as evaluation), or each run's `read`
    with its labels."""
    import pandas as pd

    if study.evaluate is None:
        return pd.concat(
            [study.read(out_dir / RUNS / run.name).assign(**run.labels) for run in runs], ignore_index=True
        )
    doing = f"scoring {len(runs)} run(s), {executor_slots(executor)} at a time" if runs else None
    with timer.phase("evaluation", doing):
        return study.evaluate(out_dir / RUNS, runs, options, executor)


def table_markdown(table) -> str:
    """A table as Markdown: numbers to 4 significant digits (`outputs.markdown_table`)."""
    from biosrecall.outputs import markdown_table

    def cell(value) -> str:
        return f"{value:.4g}" if isinstance(value, float) else str(value)

    return markdown_table(
        list(map(str, table.columns)), [list(map(cell, row)) for row in table.itertuples(False)]
    )


def study_command(study: Study, options) -> str:
    """The command that makes (or continues) the output: options other than their defaults (or the
    study's `command_line`)."""
    if study.command_line is not None:
        return study.command_line(options)
    defaults = study.options()
    flags = []
    for item in dataclasses.fields(options):
        value = getattr(options, item.name)
        if value != getattr(defaults, item.name) or item.name in study.shown:
            flags.append(
                f"--{item.name.replace('_', '-')} {_shown(list(value) if isinstance(value, tuple) else value)}"
            )
    return " ".join(["biosrecall", study.command or f"study {study.name}", *flags])


# ---- a study's runs through the sweep engine, each a `biosrecall train` process (module docstring) ----


class StudyRunFailed(RuntimeError):
    """A run of the study exited with an error (its log says why); the others were brought to done."""


class RunKilled(BiosrecallError):
    """A run's process was killed by a signal from outside the study (the out-of-memory killer, a
    `kill -9`): not the run's error, so one line naming the run and the signal, and a rerun resumes it."""


def train_study_runs(
    runs_dir: Path,
    runs: Sequence[SweepRun],
    executor: Executor,
    report: Callable[[Any], None] | None = None,
    evaluations: Sequence[Evaluation] = (),
    done: Callable[[Path], bool] | None = None,
) -> None:
    """Bring every run (folder runs_dir/<run.name>) and its `evaluations` to done: first the runs that
    start from nothing, then the branches, each from its trunk's kept state (module docstring). A run
    `done` accepts (default: a finished one) is left alone; a run listed twice trains once.

    `report` gets a line (str) before each wave with runs left to train, then each run's `Outcome`.
    Raises `Interrupted` naming the runs that were stopped (Ctrl-C), and `StudyRunFailed` naming each
    failed run, its error line and its log, after every other run of its wave has finished, or
    `RunKilled` (a `BiosrecallError`) when a signal from outside ended every failed run; a dead fork
    server is `biosrecall.warm.ForkServerDied`. Error lines are in the study's words
    (`study_words`)."""
    done = done or (lambda run_dir: RunFolder(run_dir).finished())
    runs = list({run.name: run for run in runs}.values())
    for branches in (False, True):
        left = [run for run in runs if ("from" in run.task) == branches and not done(runs_dir / run.name)]
        if not left:
            continue
        if report is not None:
            report(
                f"training {len(left)} run(s), {describe_executor(executor)}; progress in "
                f"{runs_dir / BOOKKEEPING}/<run>.log"
            )
        sweep_study_runs(runs_dir, [from_trunk(runs_dir, run) for run in left], evaluations, executor, report)


def sweep_study_runs(
    runs_dir: Path,
    runs: Sequence[SweepRun],
    evaluations: Sequence[Evaluation],
    executor: Executor,
    report: Callable[[Any], None] | None = None,
) -> None:
    """Bring `runs` (and their `evaluations`) to done through the sweep engine, with a study's errors
    (`train_study_runs`): the LM study's runs come here directly, as `lm train` and `lm eval`."""
    try:
        in_study_words = None if report is None else lambda outcome: report(study_words(outcome))
        result = run_sweep(runs_dir, runs, evaluations, executor, in_study_words)
    except KeyboardInterrupt:
        raise Interrupted(_stopped(runs_dir, [run.name for run in runs])) from None
    if result.failed:
        failed = [study_words(outcome) for outcome in result.failed]
        if all(_killed(outcome) for outcome in failed):
            killed = _kill(failed[0]) + _others(failed, "were killed", runs_dir) + f"; {RERUN}"
            raise RunKilled(bounded(killed, STUDY_MESSAGE))
        others = _others(failed, "failed", runs_dir)
        room = STUDY_MESSAGE - len(_failure(failed[0], "") + others)  # what the error's excerpt may take
        failure = _failure(failed[0], _cut(failed[0].error or "", room)) + others
        raise StudyRunFailed(bounded(failure, STUDY_MESSAGE))
    busy = [outcome.name for outcome in result.outcomes if outcome.state == "busy"]
    if busy:
        raise _busy(busy[0])


def _busy(name) -> BiosrecallError:
    return BiosrecallError(
        f"run {name} is being trained by another process; let it finish (or stop it), then rerun the "
        "same command"
    )


def write_study_record(path: Path, text: str) -> None:
    """Write a study's record (`path`: OUT/<record>.json) before its first run, unless it holds these
    very bytes already (a rerun refused later then leaves the output as it found it). From here on
    OUT is the study's output: no later failure or interrupt of this call takes back the record or
    what else it wrote into OUT (`atomic.keep_outputs`), so a first call stopped at any moment, the
    last step included, is continued by rerunning it."""
    data = text.encode("utf-8")
    try:
        unchanged = path.is_file() and not path.is_symlink() and path.read_bytes() == data
    except OSError:  # unreadable: the write below says why, or replaces it
        unchanged = False
    if not unchanged:
        atomic_write_bytes(path, data)
    keep_outputs(path.parent)


def refuse_busy_runs(runs_dir: Path) -> None:
    """Refuse, before a study writes anything, an output one of whose runs another live process holds
    (a `train --resume` started by hand, say): the refusal `train_study_runs` would give once the
    study had written its record and datasets, given first."""

    if not runs_dir.is_dir():
        return
    for lock in sorted(runs_dir.rglob(".*.lock")):
        run_dir = lock.with_name(lock.name[1 : -len(".lock")])
        if run_dir.name != BOOKKEEPING and lock_holder(run_dir) is not None:
            raise _busy(run_dir.relative_to(runs_dir))


def study_words(outcome):
    """A run's outcome as a study reports it: without the trainer's advice to pass --resume, which is
    wrong for a study (the study resumes its runs itself; its own line says to rerun its command)."""
    from biosrecall.train.trainer import RESUME_ADVICE  # torch: a study's runs have loaded it already

    if not outcome.error or RESUME_ADVICE not in outcome.error:
        return outcome
    # The advice and what follows it up to the end of its clause ("once the problem is fixed").
    advice = r"[;:,]?\s*" + re.escape(RESUME_ADVICE) + r"(?: once the problem is fixed)?"
    return dataclasses.replace(outcome, error=re.sub(advice, "", outcome.error))


def from_trunk(runs_dir: Path, run: SweepRun) -> SweepRun:
    """A branch as its process starts it: from its trunk's folder when the trunk kept the state at
    `at_update`, else (or once the branch has finished) from scratch, which trains the same run."""
    if "from" not in run.task:
        return run
    task = {key: value for key, value in run.task.items() if key not in ("from", "at_update")}
    trunk = runs_dir / run.task["from"]
    if (
        not RunFolder(runs_dir / run.name).finished()
        and run.task["at_update"] in RunFolder(trunk).saved_states()
    ):
        task.update({"from": trunk, "at_update": run.task["at_update"]})
    return dataclasses.replace(run, task=task)


def _stopped(runs_dir: Path, names: Sequence[str]) -> str:
    """Which runs the interrupt caught mid-way: unfinished, with saved progress."""
    caught = [
        name
        for name in names
        if not RunFolder(runs_dir / name).finished()
        and RunFolder(runs_dir / name).latest_checkpoint() is not None
    ]
    if not caught:
        return "interrupted"
    return f"interrupted while training {', '.join(caught)}; " + (
        "its progress is saved" if len(caught) == 1 else "their progress is saved"
    )


RERUN = "the other runs and what the killed ones saved are kept: rerun the same command to continue"


def _killed(outcome) -> bool:
    """A run whose process a signal ended (exit status -N), not one that reported an error."""
    return isinstance(outcome.exit_code, int) and outcome.exit_code < 0


def _kill(outcome) -> str:

    try:
        name = signal.Signals(-outcome.exit_code).name
    except ValueError:
        name = f"signal {-outcome.exit_code}"
    return f"run {outcome.name} was killed by {name} [log {outcome.log}]"


def _failure(outcome, error: str) -> str:
    return f"run {outcome.name} failed (exit {outcome.exit_code}): {error} [log {outcome.log}]"


STUDY_MESSAGE = MAX_MESSAGE - 100
"""The longest message of a failed study: room for the command's "error: " and its advice to rerun."""


def _others(failed: Sequence, what: str, runs_dir: Path) -> str:
    """How many runs beside the first `what`, and the folder of their logs ("" for none): the message
    names one run, however many failed (a leaderboard may fail all of them at once)."""
    if len(failed) < 2:
        return ""
    return f"; {len(failed) - 1} other run(s) {what} too, their logs in {Path(runs_dir) / BOOKKEEPING}/"


def _cut(text: str, room: int) -> str:
    """`text`, or its first characters and a marker when longer than `room` (its log holds it all)."""
    return text if len(text) <= room else text[: max(room - 6, 40)] + " [...]"


def study_executor(
    workers: int | None = None, threads: int | None = None, device: str = "cpu", kind: str = "local", **given
) -> Executor:
    """The executor of a study. Local (`kind` "local"): `workers` runs at once [default: one per GPU on
    CUDA, else one per core], each on `threads` threads [default: the cores shared among the workers].
    "slurm": a job array through submitit, `given` holding `sweep run`'s Slurm options by name
    (`partition`, `cpus_per_run`, `time_min`, `array_parallelism`; None: its default), as
    `sweep.executors.make_executor` reads them. Either way each run gets `gpus_per_run` GPUs
    [default: 1 on CUDA, else 0]."""
    import torch

    if kind == "slurm" and threads is not None:
        raise BiosrecallError("--threads applies to --executor local only (slurm: --cpus-per-run)")
    # The device name itself is checked with the rest of the settings, before anything runs.
    cuda = device.startswith("cuda") or (device == "auto" and torch.cuda.is_available())
    defaults = {"gpus_per_run": 1 if cuda else 0}
    executor = make_executor(kind, defaults, {"workers": workers, "threads_per_run": threads, **given})
    executor.check()
    if isinstance(executor, LocalExecutor) and threads is None:
        executor = dataclasses.replace(executor, threads_per_run=max(1, usable_cores() // executor.slots()))
    return executor


def executor_slots(executor: Executor) -> int:
    """Runs at once: a local executor's workers, a Slurm array's parallelism."""
    return executor.slots() if isinstance(executor, LocalExecutor) else executor.array_parallelism


def describe_executor(executor: Executor) -> str:
    """Where and how many runs go at once, for a study's plan and progress."""
    gpus = f", {executor.gpus_per_run} GPU(s)" if executor.gpus_per_run else ""
    if isinstance(executor, LocalExecutor):
        return f"{executor.slots()} at a time on {executor.threads} thread(s){gpus} each"
    partition = executor.partition or "the default partition"
    return (
        f"as a Slurm job array on {partition}, up to {executor.array_parallelism} at a time, "
        f"{executor.cpus_per_run} CPU(s){gpus} and {executor.time_min} min each"
    )


def seconds_per_flop_of(run: SweepRun, threads: int, measured: dict) -> float | None:
    """Seconds per modeled FLOP of `run`'s model on this machine's CPU at `threads` threads, timed as
    the trainer times its "est. time" (`trainer.seconds_per_flop`), from the data's manifest and
    nothing else of it; None for a run without a preset. `measured` (the caller's, one plan's) caches
    a model's value."""
    import torch

    from biosrecall.lm.task import LM_VOCABULARY
    from biosrecall.model import LoopedTransformer
    from biosrecall.train.trainer import BIOS_VOCABULARY, build_model_config, run_recipe, seconds_per_flop

    preset = run.task.get("preset")
    if preset is None:
        return None
    manifest = read_json_object(Path(run.task["data"]) / "manifest.json", "dataset manifest")
    rule = LM_VOCABULARY if run.command == "lm train" else BIOS_VOCABULARY
    model_config = build_model_config(
        preset,
        int(manifest["tokenizer"]["vocab_size"]),
        run.task.get("model_overrides"),
        rule,
        run_recipe(run.config),
    )
    seq_len = resolve_seq_len(run.config, model_config, preset)
    key = (repr(model_config), run.config.batch_size, seq_len, threads)
    if key not in measured:
        before = torch.get_num_threads()
        torch.set_num_threads(threads)
        try:
            model = LoopedTransformer(model_config)
            measured[key] = seconds_per_flop(model, run.config.batch_size, seq_len)
        finally:
            torch.set_num_threads(before)
    return measured[key]


# ---- OUT/timings.jsonl and timings.md: where a study's wall time goes ----

PHASES = ("training", "evaluation", "serving", "tables", "other")
TIMINGS, TIMINGS_TABLE = "timings.jsonl", "timings.md"


class StudyTimer:
    """Wall seconds per phase of one call of a study, from the moment it is made to `save`:

        timer = StudyTimer(seeds=(0, 1), workers=2, threads=1, report=print)
        with timer.phase("evaluation", "scoring 12 checkpoints at depths 1..64"):  # printed, then its time
            ...
        timer.save(out_dir)    # appends to OUT/timings.jsonl, rewrites OUT/timings.md

    A long study runs in parts (each call trains what is missing and re-tabulates), so each part is
    one line of `timings.jsonl`: when it started, its seeds, workers and threads, and the wall seconds
    of each phase. Phases add up when entered more than once (the lr grid's training and evaluation
    come before the main runs'):

    - training: the sweep engine training runs, `workers` at a time (start-up, planning, saving
      included);
    - evaluation: the runs' scoring (figure1: recall of every checkpoint at every serving depth, and
      the exit criteria of the main runs' final checkpoints from the same pass; skipped when cached);
    - serving: figure1's serving tables, figure and claims rows, in parts recorded before figure1 ran
      on the engine (it now writes them with its other tables, under tables);
    - tables: result tables, figures and claims;
    - other: the rest of the call (checking the output, generating a dataset, planning every run).

    `timings.md` shows every part and the sum with each phase's share of it: the README's wall-time
    table."""

    def __init__(self, report=None, **settings) -> None:
        """`report` (a callable taking a line) is told what each announced phase does, then its time."""
        self.settings, self.report = settings, report
        self.started = datetime.now(UTC).isoformat(timespec="seconds")
        self.seconds = dict.fromkeys(PHASES, 0.0)
        self._start = time.monotonic()

    @contextmanager
    def phase(self, name: str, doing: str | None = None):
        """Time the block as `name`; with `doing`, announce it to `report` and say how long it took."""
        begin = time.monotonic()
        if doing and self.report is not None:
            self.report(f"{name}: {doing}")
        try:
            yield
        finally:
            self.seconds[name] += time.monotonic() - begin
            if doing and self.report is not None:
                self.report(f"{name} done in {format_seconds(time.monotonic() - begin)}")

    def record(self) -> dict:
        total = time.monotonic() - self._start
        measured = {name: round(value, 1) for name, value in self.seconds.items() if name != "other"}
        other = round(max(0.0, total - sum(self.seconds.values())), 1)
        return {
            "started": self.started,
            **self.settings,
            **measured,
            "other": other,
            "total": round(total, 1),
        }

    def save(self, out_dir: Path) -> None:
        """Append this call's record to OUT/timings.jsonl and rewrite OUT/timings.md from all of them."""
        records = [*read_timings(out_dir), self.record()]
        atomic_write_text(Path(out_dir) / TIMINGS, "".join(json.dumps(r) + "\n" for r in records))
        atomic_write_text(Path(out_dir) / TIMINGS_TABLE, timings_markdown(records))


@dataclass(kw_only=True)
class TimingsPart:
    """The fields of a timings.jsonl line that `timings_markdown` relies on (its other keys are kept)."""

    started: str
    """When the call started (ISO 8601, UTC)."""
    total: Amount
    """Its wall seconds."""


def read_timings(out_dir: Path) -> list[dict]:
    """Every part's record, oldest first ([] before the first)."""
    path = Path(out_dir) / TIMINGS
    if not path.is_file():
        return []
    records = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if line.strip():
            where = f"line {number} of {path}"
            record = parse_json_text(line, where)
            parse_record(record, TimingsPart, f"{where} is not a timings record (remove the file)")
            records.append(record)
    return records


def timings_markdown(records: list[dict]) -> str:
    """One row per part (minutes), then their sum with each phase's share of it."""
    head = "| part | started | seeds | workers x threads | " + " | ".join(PHASES) + " | total |"
    lines = [head, "|---" * (len(PHASES) + 5) + "|"]
    for number, r in enumerate(records, start=1):
        cells = " | ".join(f"{r.get(name, 0) / 60:.1f}" for name in PHASES)
        seeds = ",".join(map(str, r.get("seeds", [])))
        lines.append(
            f"| {number} | {r['started'][:16]} | {seeds} | {r.get('workers')} x {r.get('threads')} | "
            f"{cells} | {r['total'] / 60:.1f} |"
        )
    total = sum(r["total"] for r in records)
    shares = " | ".join(
        f"{sum(r.get(name, 0) for r in records) / 60:.1f} ({sum(r.get(name, 0) for r in records) / total:.0%})"
        for name in PHASES
    )
    lines.append(f"| all | | | | {shares} | {total / 60:.1f} |")
    return (
        "Wall minutes per phase of each call (`timings.jsonl`); the last row sums them.\n\n"
        + "\n".join(lines)
        + "\n"
    )
