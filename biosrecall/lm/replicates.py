"""Seed replicates for `lm compare --aggregate-seeds`: which runs form a group, and the check that a
group's runs differ in nothing but the seed.

    groups = expand_groups(["runs/1b/uniform", "runs/1b/ff-k4"], aggregate=True)
    # {"runs/1b/uniform": [runs/1b/uniform/seed0, runs/1b/uniform/seed1, ...], "runs/1b/ff-k4": [...]}
    check_replicates("runs/1b/uniform", groups["runs/1b/uniform"])   # BiosrecallError naming a field

Grouping is explicit: with `aggregate`, a RUN argument that is not a run folder itself stands for the
run folders directly inside it (one per seed, e.g. RUN/seed0, RUN/seed1); a run folder given directly
is a group of one. Without `aggregate`, every argument must be a run folder and is its own group.

A group's runs must differ in nothing but the seed: `biosrecall.train.seed_replicates.check_replicates`,
the check `recall-curve --aggregate-seeds` applies too.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from biosrecall.errors import BiosrecallError
from biosrecall.train.run_folder import CONFIG_FILE
from biosrecall.train.seed_replicates import check_replicates

__all__ = ["check_replicates", "expand_groups"]


def expand_groups(arguments: Sequence[str | Path], aggregate: bool) -> dict[str, list[Path]]:
    """Group label (the argument as given) -> its run folders (module doc)."""
    groups: dict[str, list[Path]] = {}
    for argument in arguments:
        label, folder = str(argument), Path(argument)
        if label in groups:
            raise BiosrecallError(f"{label} is given twice")
        if (folder / CONFIG_FILE).is_file() or not aggregate:
            groups[label] = [folder]
            continue
        members = (
            sorted(p for p in folder.iterdir() if (p / CONFIG_FILE).is_file()) if folder.is_dir() else []
        )
        if not members:
            raise BiosrecallError(
                f"{label} is neither a run folder nor a folder of seed runs (no */{CONFIG_FILE} inside)"
            )
        groups[label] = members
    seen: dict[Path, str] = {}
    for label, members in groups.items():
        for member in members:
            if member.resolve() in seen:
                raise BiosrecallError(f"{member} is compared twice (in {seen[member.resolve()]} and {label})")
            seen[member.resolve()] = label
    return groups
