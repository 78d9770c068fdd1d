"""From a spec's tables to its runs: the grid crossed with the entries, the options of each, its name.

    written = expand_runs("train", base, [("seed", [0, 1])], [("ff", {"schedule": "..."})], {}, here, path)
    # [("seed0/ff", {"schedule": "...", "seed": 0, ...}, {"entry": "ff", "seed": 0}), ...]
    run_name("train", "ff", {"lr": 0.001, "seed": 0})        # "seed0/ff,lr=0.001"

The rules (which table wins, how names are made, where seeds go) are `biosrecall.sweep.spec`'s
module docstring; this module applies them.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from biosrecall.errors import BiosrecallError
from biosrecall.sweep import commands
from biosrecall.sweep.commands import replace_settings, setting_of
from biosrecall.sweep.jobs import check_name

WrittenRun = tuple[str, dict[str, Any], dict[str, Any]]
"""A run as a spec writes it: (its name, its option values by option name, its labels)."""

_UNSAFE = re.compile(r"[^A-Za-z0-9._=+-]")


def resolve(value: Any, here: Path) -> str:
    """`value` as an absolute path, a relative one taken from `here`."""
    path = Path(value).expanduser()
    return str(path if path.is_absolute() else here.absolute() / path)


def option_value(command: str, name: str, value: Any, here: Path | None, where: str, path: Path) -> Any:
    """`value` checked to be a value or a list of values; with `here`, a path option's value resolved
    against it."""
    if isinstance(value, dict) or (
        isinstance(value, list) and any(isinstance(v, dict | list) for v in value)
    ):
        raise BiosrecallError(
            f"{path}: {where} takes a value or a list of values, not {type(value).__name__}"
        )
    if here is not None and isinstance(value, str) and commands.is_path_option(command, name):
        return resolve(value, here)
    return value


def expand_runs(command, base, grid, entries, fixed, here: Path, path: Path) -> list[WrittenRun]:
    """Every entry (or [base] alone) crossed with every combination of the grid."""
    keys = [key for key, _ in grid]
    combos = list(itertools.product(*(values for _, values in grid))) if grid else [()]
    runs = []
    for entry_name, entry in entries or [(None, {})]:
        _no_overlap(command, [(f"[[runs]] {entry_name}", entry), ("[grid]", dict.fromkeys(keys))], path)
        for combo in combos:
            chosen = dict(zip(keys, combo, strict=True))
            values = {
                key: option_value(command, key, value, here, "[grid]", path) for key, value in chosen.items()
            }
            options = dict(base)
            for layer in (entry, values, fixed):
                options = replace_settings(command, options, layer)
            name = run_name(command, entry_name, chosen)
            labels = {**({"entry": entry_name} if entry_name else {}), **chosen}
            runs.append((name, options, labels))
    return runs


def _no_overlap(command: str, tables, path: Path) -> None:
    owner: dict[str, str] = {}
    for where, table in tables:
        for key in table:
            name = setting_of(command, key)
            if name in owner:
                raise BiosrecallError(f"{path}: {key} is set in both {owner[name]} and {where}")
            owner[name] = where


def run_name(command: str, entry_name: str | None, chosen: Mapping[str, Any]) -> str:
    """The run's folder name (module docstring)."""
    parts = [entry_name] if entry_name else []
    parts += [f"{key}={_slug(value)}" for key, value in chosen.items() if key != "seed"]
    stem = ",".join(parts) or "run"
    if "seed" not in chosen:
        return check_name(stem)
    seed = f"seed{_slug(chosen['seed'])}"
    return check_name(f"{seed}/{stem}" if command == "train" else f"{stem}/{seed}")


def _slug(value: Any) -> str:
    if isinstance(value, list):
        return "_".join(_slug(item) for item in value)
    text = ("true" if value else "false") if isinstance(value, bool) else str(value)
    return _UNSAFE.sub("_", text)
