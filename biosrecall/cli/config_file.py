"""`--config FILE` on every command: a TOML file of option values, or a run's `config.json` to repeat it.

    @click.command()
    @config_option()                   # first, so --config heads the help
    @click.option("--seeds", type=NumberList(SEED, "seeds", "0,1,2"), default="0", ...)
    def figure1(...): ...

    biosrecall figure1 --config study.toml --out runs/study-b     # the command line wins
    biosrecall train --config runs/ff/config.json --out runs/ff-again

How: --config is an eager option, so its callback reads the file before any other option is looked at
and puts the values into `ctx.default_map`. Click then takes each option's value from the command line
if given there, else from the file, else from its default; the options, their help and their defaults
stay the one definition. Before that, every value is checked the way click checks it when typed (the
option's type, then its callback), so a bad value is one error line naming the file and the key.

Keys are the options' names with underscores (`batch_size`, `update_matched`; `batch-size` is accepted
too); an option with another parameter name answers to both (`data` or `data_dir`). Positional
arguments (run folders, a prompt) stay on the command line. A flag is `true`/`false`, a number a TOML
number, everything else a string; a list (a repeatable option, `betas`, or an option that takes a
comma list in one string, like figure1's `--seeds 0,1,2`: one whose type is `NumberList`, `ParsedBy`
or `CommaList`) is a TOML array or the comma string. Each `lm` subcommand reads the same flat keys,
so one file serves `lm plan` and `lm train`.

A `.json` file is a run spec (what a sweep or study starts each run from) or a run's `config.json`,
read by the commands that train (`task`: "bios" for `train`, "lm" for `lm train` and `lm plan`) with
`biosrecall.sweep.run_spec.read_run_file`: its TrainConfig, read by `TrainConfig.from_dict`, and its
model overrides go to `split_options` whole, the command line replacing only the fields it gives; the
preset, the dataset path, --out and a branch point become option values.
"""

from __future__ import annotations

import difflib
import functools
from dataclasses import fields
from pathlib import Path
from typing import Any

import click

from biosrecall.cli.options import RUN_FILE, CommaList, FieldValue, NumberList, ParsedBy
from biosrecall.errors import BiosrecallError
from biosrecall.files import read_toml_file
from biosrecall.model.config import ModelConfig
from biosrecall.sweep.run_spec import read_run_file
from biosrecall.train.config import TrainConfig

_TOML_HELP = "TOML file of option values keyed by option name (batch_size = 64); the command line wins."
_RUN_HELP = " Also a run's config.json or a sweep's run spec (.json), to train that run again."
COMMA_LISTS = (NumberList, ParsedBy, CommaList)
"""The option types that take a comma list in one string ("0,1,2"): a config file may give a TOML array."""


def config_option(task: str | None = None):
    """The eager `--config FILE` option. `task`: the run kind ("bios", "lm") whose config.json the
    command also reads. An option that takes a comma list (a TOML array is joined with commas for it)
    is known by its type (`COMMA_LISTS`)."""
    return click.option(
        "--config",
        type=click.Path(path_type=Path, dir_okay=False),
        is_eager=True,
        expose_value=False,
        callback=functools.partial(_load, task=task),
        help=_TOML_HELP + (_RUN_HELP if task else ""),
    )


def _load(ctx: click.Context, param, path: Path | None, task: str | None):
    if path is None:
        return None
    if path.suffix == ".json":
        config, overrides, data = _run_file(ctx, path, task)
        ctx.meta[RUN_FILE] = (config, overrides)
    else:
        data = read_toml_file(path, "--config file")
    ctx.default_map = {**(ctx.default_map or {}), **option_defaults(ctx, path, data)}
    return path


def file_values(ctx: click.Context, path: Path) -> dict[str, Any]:
    """The keys and values of the config file `path` as `ctx.command` reads it, not yet checked, a
    run file's TrainConfig and model overrides flattened into option values (a sweep spec's `config`
    key layers its own values over them)."""
    if path.suffix != ".json":
        return read_toml_file(path, "--config file")
    train_config, overrides, values = _run_file(ctx, path, _made_with(ctx.command)["task"])
    by_key = options_by_key(ctx.command)
    flat = {
        key: value for key, value in train_config.to_dict().items() if key in by_key and value is not None
    }
    named = {key: value for key, value in overrides.items() if key in by_key}
    pairs = [f"{key}={value}" for key, value in overrides.items() if key not in by_key]
    return {**flat, **named, **({"model_override": pairs} if pairs else {}), **values}


def _run_file(ctx: click.Context, path: Path, task: str | None) -> tuple[TrainConfig, dict, dict]:
    """A run spec's or config.json's (TrainConfig, model overrides, option values the command has)."""
    if task is None:
        raise click.BadParameter(
            f"{path}: `{ctx.command_path}` reads TOML config files; a .json one is a run spec or a run's "
            "config.json, read by `biosrecall train`, `lm train` and `lm plan`"
        )
    by_key = options_by_key(ctx.command)
    model_fields = {f.name for f in fields(ModelConfig)}
    try:
        config, overrides, values = read_run_file(path, task, tuple(k for k in by_key if k in model_fields))
    except BiosrecallError as exc:
        raise click.BadParameter(str(exc)) from None
    return config, overrides, {key: value for key, value in values.items() if key in by_key}


def _made_with(command: click.Command) -> dict[str, Any]:
    """The `task` the command's `--config` option was made with (`config_option`)."""
    return next(p for p in command.params if p.name == "config").callback.keywords


def option_defaults(ctx: click.Context, source, data: dict[str, Any]) -> dict[str, Any]:
    """The values of `data` (a config file's keys and values) by parameter name, each checked as the
    command line would check it; a problem is one click.BadParameter naming `source` and the key. This
    is the whole of reading a config file once it is parsed (the sweep reads its runs' and evaluations'
    options with it)."""
    by_key = {key: option for key, option in options_by_key(ctx.command).items() if option.name != "config"}
    unknown = sorted(key for key in data if key.replace("-", "_") not in by_key)
    if unknown:
        raise click.BadParameter(_unknown_keys(source, unknown, ctx, by_key))
    defaults: dict[str, Any] = {}
    named: dict[str, str] = {}
    for key, value in data.items():
        option = by_key[key.replace("-", "_")]
        if option.name in named:
            raise click.BadParameter(f"{source}: {named[option.name]} and {key} set the same option")
        named[option.name] = key
        defaults[option.name] = _checked(source, key, value, option, ctx)
    return defaults


def options_by_key(command: click.Command) -> dict[str, click.Option]:
    """Every option under its parameter name and each of its flags (underscored): the keys a config
    file or a sweep spec may use for it."""
    return {
        key: option
        for option in command.params
        if isinstance(option, click.Option)
        for key in (option.name, *(flag.lstrip("-").replace("-", "_") for flag in option.opts))
    }


def _unknown_keys(path: Path, unknown: list[str], ctx: click.Context, by_key: dict) -> str:
    close = [m for key in unknown for m in difflib.get_close_matches(key.replace("-", "_"), by_key, 1)]
    hint = f" (did you mean {', '.join(close)}?)" if close else ""
    return f"{path}: unknown key(s) {', '.join(unknown)} for `{ctx.command_path}`{hint}"


def _checked(path: Path, key: str, value: Any, option: click.Option, ctx: click.Context) -> Any:
    """The value as the command line would give it, after checking it as click would (type, callback)."""
    expected, allowed = _expected(option)
    if isinstance(value, bool) != (bool in allowed) or not isinstance(value, allowed):
        raise click.BadParameter(f"{path}: {key} takes {expected}, got {_toml_type(value)} {value!r}")
    raw = _as_typed(path, key, value, option)
    try:
        option.process_value(ctx, raw)
    except (click.BadParameter, BiosrecallError) as exc:  # the type's refusal, or a callback's
        message = exc.message if isinstance(exc, click.BadParameter) else str(exc)
        message = message if message.startswith(key) else f"{key}: {message}"
        raise click.BadParameter(f"{path}: {message}") from None
    return raw


def _expected(option: click.Option) -> tuple[str, tuple[type, ...]]:
    """(what the option takes, in words; the TOML value types that can hold it)."""
    kind = option.type.kind if isinstance(option.type, FieldValue) else None
    if option.multiple:
        return "an array or a string", (list, str, int, float)
    if kind is tuple:
        items = "names" if option.type.item is str else "numbers"
        return f"an array of {items}", (list, str)
    if isinstance(option.type, COMMA_LISTS):
        return "an array or a comma-separated string", (list, str, int, float)
    if option.is_flag or option.type is click.BOOL:
        return "true or false", (bool,)
    if kind is int or isinstance(option.type, click.types.IntParamType):
        return "an integer", (int,)
    if kind is float or isinstance(option.type, click.types.FloatParamType):
        return "a number", (int, float)
    return "a string", (str,)


def _as_typed(path: Path, key: str, value: Any, option: click.Option) -> Any:
    """A list as the command line gives it: a tuple of strings for a repeatable option, one comma
    string for a `COMMA_LISTS` option; a TrainConfig list field takes the array itself (`check_field`)."""
    if isinstance(value, int | float) and (option.multiple or isinstance(option.type, COMMA_LISTS)):
        value = [value]  # one number where a list goes: `seeds = 0`, `depths = 8`
    if not isinstance(value, list) or (isinstance(option.type, FieldValue) and not option.multiple):
        return (value,) if option.multiple else value
    bad = [item for item in value if isinstance(item, bool) or not isinstance(item, str | int | float)]
    if bad:
        raise click.BadParameter(
            f"{path}: {key} takes strings or numbers, got {_toml_type(bad[0])} {bad[0]!r}"
        )
    items = tuple(str(item) for item in value)
    return items if option.multiple else ",".join(items)


def _toml_type(value: Any) -> str:
    return type(value).__name__.replace("dict", "table").replace("list", "array")
