"""Guarding a Figure-1 output folder: continue one made with these settings, refuse or replace another.

    data_dirs = prepare_output(out_dir, record, settings, datasets, overwrite, check_plans)

`figure1.json` records what an output's results depend on (the preset and its settings, the trainer
settings but the training seed, the dataset seeding). Seeds, controls, the learning-rate grid and the
Figure-5 sweep are not part of it: each run has its own folder, so a rerun that adds seeds or controls
continues the output, which is how a study is run in parts. Anything else that differs is refused with
one `BiosrecallError` line naming the difference (first the seeds it already holds that the new seed
list repeats), before anything is touched; `overwrite` replaces the output instead, once the new
settings have been checked, and puts it back if they fail.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from biosrecall.bios import generate_dataset, load_dataset
from biosrecall.errors import BiosrecallError
from biosrecall.eval.serving import serving_names
from biosrecall.experiments.budget_results import BUDGET_NAMES
from biosrecall.experiments.claims import earlier_look_file
from biosrecall.experiments.claims_plan import Figure1Record
from biosrecall.experiments.engine import refuse_busy_runs
from biosrecall.experiments.study_serving import SUMMARY_NAME
from biosrecall.interrupts import held
from biosrecall.locking import ASIDE_SUFFIX, temporary_prefix
from biosrecall.records import read_checked_json
from biosrecall.sizing import Cost, check_fits, dataset_cost, scoring_cost
from biosrecall.train.config import RESUMABLE_DIFFERENCES

RECORD, DATA, RUNS = "figure1.json", "data", "runs"
# Every entry figure1 makes in its output folder besides the above: what `overwrite` replaces.
RESULT_STEMS = (
    "figure1", "figure5", "recall_curve", "recall_curve_seeds", "fixed_sweep", "fixed_sweep_seeds",
    "summary", "summary_runs", "fixed_sweep_summary", "fixed_sweep_summary_runs", "claims", "lr_grid",
    SUMMARY_NAME, "timings", *BUDGET_NAMES,
)  # fmt: skip
RESULT_SUFFIXES = (".png", ".pdf", ".csv", ".parquet", ".md", ".jsonl")
_SHOWN_DIFFERENCES = 4  # a refusal names this many differing settings, then counts the rest


@dataclass(kw_only=True)
class StoredRecord(Figure1Record):
    """The fields of figure1.json that continuing an output compares (its other keys are kept as written)."""

    settings: dict[str, Any]
    """The preset's settings (a `Figure1Preset`), model overrides applied."""


def identity(record: dict[str, Any]) -> dict[str, Any]:
    """The settings a figure1 record's results depend on, under the names a refusal shows them by."""
    skip = {*RESUMABLE_DIFFERENCES, "seed"}
    train = {k: v for k, v in record["train_config"].items() if k not in skip}
    budget, budget_of = train.pop("budget", None), train.pop("budget_of", None)
    return {
        "preset": record["preset"],
        **record["settings"],
        **train,
        "budget": budget_of if budget is None else budget,
        "dataset_seed": record.get("dataset_seed", record["train_config"].get("seed")),
        "schedules": record.get("schedules"),
        "fractions": record.get("fractions"),
    }


def differences(out_dir: Path, record: dict[str, Any], datasets: dict[int, Path], people: int) -> list[str]:
    """How what `out_dir` already holds differs from what these settings make; [] when it can be reused.

    `datasets` maps each dataset seed this call uses to its folder."""
    path = out_dir / RECORD
    if os.path.lexists(path):
        try:
            stored = read_checked_json(path, StoredRecord, "figure1 record")
        except BiosrecallError as exc:
            return [str(exc)]
        old, new = identity(stored), identity(record)
        keys = dict.fromkeys([*new, *old])  # this call's order: the stored record's keys are sorted
        changed = [
            f"{key} was {old.get(key)}, now {new.get(key)}" for key in keys if old.get(key) != new.get(key)
        ]
        if changed:
            return _repeated_seeds(stored, record) + changed
    elif os.path.lexists(out_dir / RUNS):
        return [f"it holds {RUNS}/ but no {RECORD} saying how they were trained"]
    return [d for seed, data_dir in datasets.items() for d in _dataset_differences(data_dir, people, seed)]


def _repeated_seeds(stored: dict[str, Any], record: dict[str, Any]) -> list[str]:
    """The seeds this call lists that the output already holds runs of, as the first difference: their
    runs were trained under the stored settings, so they are the collision a reader needs named."""
    held = stored.get("study", {"seeds": [stored["train_config"].get("seed")]})["seeds"]
    repeated = [seed for seed in record["study"]["seeds"] if seed in held]
    if not repeated:
        return []
    named = f"seed {repeated[0]} is" if len(repeated) == 1 else f"seeds {', '.join(map(str, repeated))} are"
    return [f"{named} already in it under those settings"]


def _dataset_differences(data_dir: Path, people: int, seed: int) -> list[str]:
    """Whether a dataset folder is the one these settings ask for ([] also when there is none yet)."""

    if not os.path.lexists(data_dir):
        return []
    try:
        dataset = load_dataset(data_dir)
    except BiosrecallError as exc:
        return [f"its dataset is unusable: {exc}"]
    found = (dataset.num_people, dataset.manifest.get("seed"))
    if found == (people, seed):
        return []
    return [f"its dataset has {found[0]} people (seed {found[1]}), now {people} (seed {seed})"]


def refusal(out_dir: Path, found: list[str]) -> BiosrecallError:
    shown = "; ".join(found[:_SHOWN_DIFFERENCES])
    if len(found) > _SHOWN_DIFFERENCES:
        shown += f"; and {len(found) - _SHOWN_DIFFERENCES} more"
    return BiosrecallError(
        f"{out_dir} was made with other settings ({shown}); rerun with the settings it was made with to "
        "continue it, pass --overwrite to replace it, or choose another --out"
    )


def prepare_output(
    out_dir: Path,
    record,
    datasets: dict[int, Path],
    people: int,
    overwrite: bool,
    check: Callable[[], None],
    report: Callable[[str], None] | None = None,
) -> None:
    """Check the settings against what the output holds, make the missing datasets (saying so to
    `report`) and run `check` (every run's plan) before anything trains.

    A mistake found here leaves the output as it was: what `overwrite` moved aside is put back (and
    the engine empties a new output again).
    """
    aside = None
    try:
        found = differences(out_dir, record, datasets, people)
        if found and not overwrite:
            raise refusal(out_dir, found)
        refuse_busy_runs(out_dir / RUNS)
        _check_size(out_dir, datasets, people, replacing=bool(found))
        out_dir.mkdir(parents=True, exist_ok=True)
        with held():  # a signal waits until `aside` names what the clean-up below puts back
            aside = _move_aside(out_dir) if found else None
        for seed, data_dir in datasets.items():  # one present is kept: `differences` has checked it
            if not os.path.lexists(data_dir):
                if report is not None:
                    report(f"generating the dataset {data_dir.name}/ ({people:,} people, seed {seed})")
                generate_dataset(data_dir, people=people, seed=seed)
        check()
    except BaseException:
        if aside is not None:
            _put_back(out_dir, aside)
        raise
    if aside is not None:
        shutil.rmtree(aside, ignore_errors=True)


def _check_size(out_dir: Path, datasets: dict[int, Path], people: int, replacing: bool) -> None:
    """Refuse, before anything is made, datasets to generate and an evaluation set to score larger
    than the machine (`biosrecall.sizing`)."""

    cost = Cost()
    for data_dir in datasets.values():
        if replacing or not os.path.lexists(data_dir):
            cost = cost.then(dataset_cost(people))
    cost = cost.then(scoring_cost(people))
    check_fits(f"a study of {people:,} people", cost, out_dir, "choose a smaller --preset")


def made_names(out_dir: Path) -> list[str]:
    """Every entry figure1 made in `out_dir`: what `overwrite` replaces."""
    names = [RECORD, RUNS, *serving_names()]
    names += [p.name for p in out_dir.glob(f"{DATA}*")]
    names += [p.name for p in out_dir.glob(earlier_look_file("*"))]  # the claims of earlier looks
    names += [stem + suffix for stem in RESULT_STEMS for suffix in RESULT_SUFFIXES]
    return names


def _move_aside(out_dir: Path) -> Path | None:
    """Move what figure1 made in `out_dir` into one hidden sibling folder; returns it (None: nothing).

    The folder is deleted once the new settings are checked; should this process die first, the next
    `output_lock(out_dir)` removes it. The record moves last, so until everything else has gone a
    plain rerun still refuses the output rather than reusing part of it.
    """
    present = [name for name in made_names(out_dir) if os.path.lexists(out_dir / name)]
    if not present:
        return None
    target = out_dir.resolve()
    aside = Path(tempfile.mkdtemp(prefix=temporary_prefix(target), suffix=ASIDE_SUFFIX, dir=target.parent))
    for name in sorted(present, key=lambda name: name == RECORD):
        os.replace(out_dir / name, aside / name)
    return aside


def _put_back(out_dir: Path, aside: Path) -> None:
    """Undo `_move_aside`: what was made meanwhile (a new dataset) gives way to what was there."""
    for entry in aside.iterdir():
        made = out_dir / entry.name
        if made.is_dir() and not made.is_symlink():
            shutil.rmtree(made)
        elif os.path.lexists(made):
            made.unlink()
        os.replace(entry, made)
    aside.rmdir()
