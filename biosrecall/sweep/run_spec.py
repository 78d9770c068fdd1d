"""A run spec: one run's settings as the flat TOML file that `biosrecall train --config FILE` reads.

    options = config_options(config, data="data/bios", preset="bios-tiny")   # a TrainConfig's values
    text = run_spec_text({**options, "out": "runs/seed0/fixed_k4"})
    # schedule = "fixed:4"
    # lr = 0.01
    # checkpoint_fractions = [0.45, 1.0]
    # ...

Every run a sweep starts is `python -m biosrecall train --config OUT/.sweep/<name>.toml` (`lm train`
alike): the sweep worker writes the run's spec there just before starting it, the command's own
`--config` loader (`biosrecall.cli.config_file`) reads it, and the command line adds only --resume and
--threads. The keys are the command's option names, as in any `--config` file and in a sweep spec's
[base] table; a value of None is left out (the option's default), a tuple is a TOML array. The same
text is what the sweep checks before anything starts (`biosrecall.sweep.commands.check_training`), so
a run is checked exactly as it will be read. `biosrecall train --config` on a written spec trains
that run again by hand.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from biosrecall.errors import BiosrecallError

if TYPE_CHECKING:
    from biosrecall.train.config import TrainConfig

SUFFIX = ".toml"
ENGINE_FIELDS = ("threads",)
"""TrainConfig fields a run spec leaves to the command line (the executor's --threads)."""
_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def config_options(config: TrainConfig, **task: Any) -> dict[str, Any]:
    """The option values of a run trained with `config`, plus the task's (data, preset,
    model_override, from, at_update, ...): what a run spec holds, None meaning "not given"."""
    values = {key: value for key, value in config.to_dict().items() if key not in ENGINE_FIELDS}
    return {**values, **task}


def run_spec_text(options: Mapping[str, Any]) -> str:
    """`options` as a flat TOML document, one `key = value` line each, in order; None values left out."""
    lines = [f"{_key(key)} = {_value(key, value)}" for key, value in options.items() if value is not None]
    return "\n".join(lines) + "\n"


def _key(key: str) -> str:
    return key if _BARE_KEY.fullmatch(key) else _string(key)


def _value(key: str, value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        # repr is the shortest text that reads back as the same float; TOML spells the rest inf/nan.
        return repr(value) if math.isfinite(value) else str(value)
    if isinstance(value, str | Path):
        return _string(str(value))
    if isinstance(value, list | tuple) and not any(isinstance(item, list | tuple | dict) for item in value):
        return "[" + ", ".join(_value(key, item) for item in value) + "]"
    raise BiosrecallError(f"{key} takes text, a number, true/false or a list of them, got {value!r}")


def _string(text: str) -> str:
    """A TOML basic string: JSON's escapes are TOML's, except that TOML also refuses DEL raw."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise BiosrecallError(f"{text!r} cannot be written as UTF-8 text") from None
    return json.dumps(text, ensure_ascii=False).replace("\x7f", "\\u007f")


def spec_path(bookkeeping: Path, name: str) -> Path:
    """Where the sweep keeps run `name`'s spec: beside its record and log."""
    return bookkeeping / f"{name}{SUFFIX}"
