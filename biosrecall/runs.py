"""One way to read a run folder: choose its checkpoints, find the data it was trained on, load weights.

Every command that takes a checkpoint (`recall-curve`, `lm eval`, `diagnose-update`, `figure1`) reads
runs through this module, so they all accept the same selector syntax (a comma list, or the option
repeated):

    final      the largest kept budget fraction (normally 1.0)
    fractions  every kept budget-fraction checkpoint
    all        every kept checkpoint: the fractions and, where the run kept one, switch
    switch     the checkpoint at a schedule's switch update (fixed_first schedules keep one)
    0.45       one budget fraction in (0, 1]

    select_checkpoints("runs/ff", "0.45,final,switch")  # {"0.45": Path, "1.0": Path, "switch": Path}
    path = training_data_of("runs/ff", read_meta(path))  # the dataset or corpus it was trained on
    model, meta = load_checkpoint(path)

Labels are the checkpoint folder names, ordered fractions first (ascending), then "switch". A
malformed selector or a checkpoint the run does not have raises one `BiosrecallError` naming the run
and listing what it has. Where each file of a run folder lies is `biosrecall.train.layout`'s to say;
this module adds the selector, the training data and the checkpoint readers on top of it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from biosrecall.errors import BiosrecallError
from biosrecall.model import ModelConfig
from biosrecall.numbers import parse_float
from biosrecall.stats import check_seed_replicates
from biosrecall.train import layout
from biosrecall.train.config import TrainConfig, resolve_seq_len
from biosrecall.train.layout import SWITCH, load_checkpoint, load_training_state, read_meta
from biosrecall.train.run_dir import read_config

__all__ = [
    "Selector",
    "check_training_data",
    "fraction_of",
    "load_checkpoint",
    "load_training_state",
    "parse_selector",
    "read_meta",
    "select_checkpoint",
    "select_checkpoints",
    "seq_len_of",
    "training_data_of",
]

FINAL, FRACTIONS, ALL = "final", "fractions", "all"
KEYWORDS = (FINAL, FRACTIONS, ALL, SWITCH)
_DATA_KIND = {"bios": "dataset", "lm": "corpus"}


@dataclass(frozen=True)
class Selector:
    """A parsed selector: each part is a keyword of `KEYWORDS` or a budget fraction."""

    parts: tuple[str | float, ...]

    def __str__(self) -> str:
        return ",".join(part if isinstance(part, str) else f"{part:g}" for part in self.parts)


def parse_selector(text: str | float | Iterable[str | float] | Selector) -> Selector:
    """Read a selector: text such as "0.45,final", a number, or the values of a repeated option."""
    if isinstance(text, Selector):
        return text
    pieces = [text] if isinstance(text, str | int | float) else list(text)
    raw = ",".join(str(piece) for piece in pieces)
    parts = [part.strip().lower() for part in raw.split(",")]
    if not parts or any(not part for part in parts):
        raise _malformed(raw)
    return Selector(tuple(part if part in KEYWORDS else _fraction(part, raw) for part in parts))


def _fraction(part: str, raw: str) -> float:
    try:
        value = parse_float(part)
    except BiosrecallError:
        raise _malformed(raw) from None
    if not (math.isfinite(value) and 0 < value <= 1):
        raise _malformed(raw)
    return value


def _malformed(raw: str) -> BiosrecallError:
    return BiosrecallError(
        "--checkpoint takes a budget fraction in (0, 1] such as 0.45, final, fractions, all, switch, "
        f"or a comma list of these (got {raw!r})"
    )


def _kept_checkpoints(run_dir: Path) -> dict[str, Path]:
    """Every kept checkpoint of a run folder by label (`layout.kept_checkpoints`); a folder that holds
    no run, or no checkpoint yet, is refused."""
    if not layout.config_file(run_dir).is_file():
        raise BiosrecallError(f"{run_dir} is not a run folder (no {layout.CONFIG_FILE})")
    kept = layout.kept_checkpoints(run_dir)
    if not kept:
        raise BiosrecallError(
            f"{run_dir} has no checkpoints yet (no folders under {layout.checkpoints_dir(run_dir)})"
        )
    return kept


def select_checkpoints(run_dir: str | Path, selector=ALL) -> dict[str, Path]:
    """The run's checkpoints named by `selector` (text, repeated values or a `Selector`), by label."""
    run_dir = Path(run_dir)
    kept = _kept_checkpoints(run_dir)
    try:
        parsed = parse_selector(selector)
    except BiosrecallError as exc:
        raise BiosrecallError(f"{exc}; {run_dir} has {_listing(kept)}") from None
    chosen: dict[str, Path] = {}
    for part in parsed.parts:
        for label in _labels(run_dir, part, kept):
            chosen[label] = kept[label]
    return dict(sorted(chosen.items(), key=lambda item: _order(item[0])))


def select_checkpoint(run_dir: str | Path, selector) -> tuple[str, Path]:
    """The one checkpoint `selector` names (a command that works on a single checkpoint)."""
    chosen = select_checkpoints(run_dir, selector)
    if len(chosen) != 1:
        raise BiosrecallError(
            f"--checkpoint names one checkpoint here, but {str(parse_selector(selector))!r} names "
            f"{_listing(chosen)} in {run_dir}"
        )
    return next(iter(chosen.items()))


def _labels(run_dir: Path, part: str | float, kept: dict[str, Path]) -> list[str]:
    fractions = [label for label in kept if label != SWITCH]
    if part == ALL:
        return list(kept)
    if part == FRACTIONS:
        return fractions
    if part == FINAL:
        if not fractions:
            raise BiosrecallError(
                f"{run_dir} has no budget-fraction checkpoint yet (it has {_listing(kept)})"
            )
        return [max(fractions, key=float)]
    if part == SWITCH:
        if SWITCH not in kept:
            raise BiosrecallError(
                f"{run_dir} has no switch checkpoint (only schedules with a switch, such as fixed_first, "
                f"keep one; it has {_listing(kept)})"
            )
        return [SWITCH]
    match = [label for label in fractions if math.isclose(float(label), part, abs_tol=1e-9)]
    if not match:
        raise BiosrecallError(f"{run_dir} has no checkpoint at fraction {part:g} (it has {_listing(kept)})")
    return match


def _order(label: str) -> tuple[int, float]:
    return (1, 0.0) if label == SWITCH else (0, float(label))


def _listing(checkpoints) -> str:
    return ", ".join(sorted(checkpoints, key=_order))


def fraction_of(label: str) -> float | None:
    """The budget fraction of a checkpoint label; None for the switch checkpoint."""
    return None if label == SWITCH else float(label)


def _data_kind(meta_or_record: dict) -> str:
    return _DATA_KIND.get((meta_or_record.get("task") or {}).get("name"), "dataset")


def training_data_of(run_dir: str | Path, meta_or_record: dict, data_dir: str | Path | None = None) -> Path:
    """The dataset (bioS) or corpus (LM) folder a run was trained on: `data_dir` when given, else the
    path recorded in its config.json or checkpoint meta (a relative one first against the run folder,
    as a study archive writes it, then as given)."""
    run_dir, kind = Path(run_dir), _data_kind(meta_or_record)
    if data_dir is not None:
        path = Path(data_dir)
        if not path.is_dir():
            raise BiosrecallError(f"{kind} folder {path} does not exist")
        return path
    recorded = (meta_or_record.get("dataset") or {}).get("path")
    if not recorded:
        raise BiosrecallError(f"{run_dir} records no {kind} it was trained on; pass --data DIR")
    for candidate in (run_dir / recorded, Path(recorded)):
        if candidate.is_dir():
            return candidate
    raise BiosrecallError(
        f"{kind} folder {recorded} that {run_dir} was trained on is missing (pass --data DIR to point at it)"
    )


def check_training_data(run_dir: str | Path, meta_or_record: dict, path: str | Path, found_hash: str) -> None:
    """Refuse data whose manifest hash differs from the one the run recorded at training time."""
    expected = (meta_or_record.get("dataset") or {}).get("manifest_hash")
    if found_hash != expected:
        kind = _data_kind(meta_or_record)
        raise BiosrecallError(
            f"{kind} {path} (manifest hash {str(found_hash)[:12]}) is not the one {run_dir} was trained "
            f"on ({str(expected)[:12]}); pass --data with the right {kind} folder"
        )


def seq_len_of(record: dict) -> int:
    """The training sequence length of a run, from its config.json record."""

    config = TrainConfig.from_dict(record["train_config"])
    return resolve_seq_len(config, ModelConfig.from_dict(record["model_config"]))


# Seed replicates: runs aggregated over seeds (`recall-curve --aggregate-seeds`, `lm compare
# --aggregate-seeds`) must agree on every setting that can change what is trained, which is each
# run's config.json minus the seed, `IGNORED_SETTINGS` (how a run executes, not what it trains: the
# data's own hash is still compared) and the sections the trainer derives or observes (`plan` holds
# seed-dependent FLOP totals). Settings are compared by dotted name, so a refusal names the field.
SEED_SETTING = "train_config.seed"
# Sections written by the trainer about what happened (realised FLOPs, hardware, library versions).
DERIVED_SECTIONS = ("plan", "machine", "versions")
IGNORED_SETTINGS = (
    "train_config.threads",
    "train_config.device",
    "train_config.compile",
    "train_config.activation_checkpointing",
    "train_config.parallel",
    "train_config.grad_accum",
    "train_config.save_every",
    "train_config.log_every",
    "train_config.checkpoint_fractions",
    "train_config.log",  # experiment trackers (`lm train --log`)
    "dataset.path",
)


def flat_settings(config: Mapping) -> dict[str, object]:
    """config.json as {dotted name: value} without the derived sections (lists are compared whole)."""
    flat: dict[str, object] = {}

    def visit(prefix: str, value) -> None:
        if isinstance(value, Mapping):
            for key, inner in value.items():
                visit(f"{prefix}.{key}" if prefix else str(key), inner)
        else:
            flat[prefix] = value

    visit("", {k: v for k, v in config.items() if k not in DERIVED_SECTIONS})
    return flat


def seed_of(config: Mapping) -> int:
    """The training seed a run recorded."""
    return int(config["train_config"]["seed"])


def check_replicates(label: str, members: Sequence[Path]) -> dict[Path, int]:
    """Each member's seed, after checking that the members differ only in the seed (module doc)."""
    configs = {str(member): read_config(member) for member in members}
    check_seed_replicates(
        {name: flat_settings(config) for name, config in configs.items()},
        ignore=(SEED_SETTING, *IGNORED_SETTINGS),
    )
    seeds: dict[int, str] = {}
    for name, config in configs.items():
        seed = seed_of(config)
        if seed in seeds:
            raise BiosrecallError(
                f"cannot aggregate {label} over seeds: {seeds[seed]} and {name} both have seed {seed}"
            )
        seeds[seed] = name
    return {member: seed_of(configs[str(member)]) for member in members}
