"""Seed replicates: runs that may be aggregated over seeds because they differ in nothing else.

    seeds = check_replicates("runs/uniform", [Path("runs/seed0/uniform"), Path("runs/seed1/uniform")])
    # -> {Path("runs/seed0/uniform"): 0, Path("runs/seed1/uniform"): 1}, or BiosrecallError naming a field

Runs aggregated over seeds (`recall-curve --aggregate-seeds`, `lm compare --aggregate-seeds`) must
agree on every setting that can change what is trained, which is each run's config.json minus the
seed, `IGNORED_SETTINGS` (how a run executes, not what it trains: the data's own hash is still
compared) and the sections the trainer derives or observes (`plan` holds seed-dependent FLOP
totals). Settings are compared by dotted name, so a refusal names the field.

`biosrecall.eval.seeds` (recall curves) and `biosrecall.lm.compare` (the LM comparison) group runs
with it; each run's config.json is read through `biosrecall.train.run_folder.RunFolder`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from biosrecall.errors import BiosrecallError
from biosrecall.stats import check_seed_replicates
from biosrecall.train.run_folder import RunFolder

SEED_SETTING = "train_config.seed"
DERIVED_SECTIONS = ("plan", "machine", "versions")
"""Sections written by the trainer about what happened (realised FLOPs, hardware, library versions)."""
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


def check_replicates(label: str, members: Sequence[Path]) -> dict[Path, int]:
    """Each member's seed, after checking that the members differ only in the seed (module doc)."""
    configs = {member: RunFolder(member).read_config() for member in members}
    check_seed_replicates(
        {str(member): flat_settings(config) for member, config in configs.items()},
        ignore=(SEED_SETTING, *IGNORED_SETTINGS),
    )
    seeds = {member: int(config["train_config"]["seed"]) for member, config in configs.items()}
    first_with: dict[int, Path] = {}
    for member, seed in seeds.items():
        if seed in first_with:
            raise BiosrecallError(
                f"cannot aggregate {label} over seeds: {first_with[seed]} and {member} both have seed {seed}"
            )
        first_with[seed] = member
    return seeds
