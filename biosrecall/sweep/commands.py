"""The commands a sweep launches, read from their own click definitions: option names, flags and checks.

    config, task = run_description("train", options, "run x")   # a sweep spec's run, parsed as `train` would
    canonical_key("lm train", "batch-size")       # "batch_size" (or BiosrecallError naming the key)
    args = option_args("recall-curve", {"max_depth": 64})     # ["--max-depth", "64"] (evaluations)

A sweep runs `python -m biosrecall <command> --config <run spec>` in a subprocess, so the command's
click options are the one definition of what a run may set: keys are option names as in `--config`
files (`batch_size`; `batch-size` and an option's flag name, `data` for `data_dir`, are accepted too),
a flag is true or false, a list is a TOML array. A sweep spec's run is read once, by the command's own
`--config` reader, parser and callbacks, into the `TrainConfig` and task the command would build
(`run_description`), so a bad value fails before anything is launched; what the run's process then
reads is that config's own dict (`biosrecall.sweep.run_spec`). An evaluation is given its options as
command-line words. This is the one module of `biosrecall.sweep`
that imports the CLI (lazily): the sweep sits beside `cli/` as a driver of its commands.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click

from biosrecall.cli import cli
from biosrecall.cli.config_file import file_values, option_defaults, options_by_key
from biosrecall.cli.options import RUN_SIZE, merge_overrides, split_options
from biosrecall.errors import BiosrecallError
from biosrecall.train.config import TrainConfig

TRAINERS = ("train", "lm train")
"""The commands a sweep trains with (bioS, language model)."""
EVALUATIONS = {"recall-curve": "train", "lm eval": "lm train", "lm harness": "lm train"}
"""Commands that may evaluate each finished run, and the trainer whose runs each one reads."""
ENGINE_KEYS = ("run_dir", "resume", "overwrite", "threads")
"""Trainer options the sweep sets itself: --out, --resume (never --overwrite), the executor's --threads."""
EVAL_ENGINE_KEYS = {
    "recall-curve": ("out_dir", "hf_model", "depth_arg", "depths", "trust_remote_code", "aggregate_seeds"),
}
"""Options an evaluation may not set: recall-curve's --out is the sweep's, and it scores runs (no
--hf-model); its seed aggregation is `sweep collect`'s."""


@contextmanager
def located(where: str) -> Iterator[None]:
    """A BiosrecallError raised inside as one line that starts with `where` (a spec's path, a section,
    a run): the one place a sweep puts the location in front of a problem."""
    try:
        yield
    except BiosrecallError as exc:
        raise BiosrecallError(f"{where}: {exc}") from None


def click_command(words: str) -> click.Command:
    """The click command of `words` ("train", "lm train", "recall-curve", ...)."""

    command: click.Command = cli
    for word in words.split():
        # get_command, not .commands: the CLI group imports a command's module only when asked for it
        found = (
            command.get_command(click.Context(command), word) if isinstance(command, click.Group) else None
        )
        if found is None:
            raise BiosrecallError(f"unknown command {words!r}")
        command = found
    return command


def canonical_key(words: str, key: str, engine_keys=()) -> str:
    """The parameter name `key` stands for in command `words`; unknown keys and `engine_keys` (set by
    the sweep itself) are refused with one line."""
    options = options_by_key(click_command(words))
    option = options.get(key.replace("-", "_"))
    if option is None:
        close = difflib.get_close_matches(key.replace("-", "_"), options, 1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise BiosrecallError(f"unknown option {key!r} for `biosrecall {words}`{hint}")
    if option.name in engine_keys:
        raise BiosrecallError(f"{key} is set by the sweep itself, not by a spec")
    return option.name


def is_path_option(words: str, name: str) -> bool:
    """Whether the option takes a file or folder (a relative one is resolved by the spec loader)."""
    option = options_by_key(click_command(words)).get(name)
    return option is not None and isinstance(option.type, click.Path)


def is_flag_option(words: str, name: str) -> bool:
    option = options_by_key(click_command(words)).get(name)
    return option is not None and option.is_flag


def option_args(words: str, options: Mapping[str, Any]) -> list[str]:
    """The command-line words that give `options` (keys: option names, an unknown one refused by
    `canonical_key`; None values are left out)."""
    by_key = options_by_key(click_command(words))
    args: list[str] = []
    for key, value in options.items():
        option = by_key[canonical_key(words, key)]
        if value is not None:
            args += _words(option, value)
    return args


def _words(option: click.Option, value: Any) -> list[str]:
    """The words that give `value`, as `check_evaluation` read it (a flag's value is a bool)."""
    flag = next(opt for opt in option.opts if opt.startswith("--"))
    if option.is_flag:
        if value:
            return [flag]
        return [option.secondary_opts[0]] if option.secondary_opts else []
    items = list(value) if isinstance(value, list | tuple) else [value]
    if option.multiple:
        return [word for item in items for word in (flag, _text(item))]
    if isinstance(value, list | tuple):
        return [flag, ",".join(_text(item) for item in items)]
    return [flag, _text(value)]


def _text(value: Any) -> str:
    return repr(value) if isinstance(value, float) else str(value)


def parse(words: str, args: list[str], what: str, config=None, read=dict) -> Any:
    """`read` of the parameters `biosrecall <words> <args>` would get (default: the parameters), checked
    by the command's own parser and callbacks, `read` called in the command's context as its body
    would be; with `config` (a parsed `--config` document), as if `--config` had given it. A problem is
    one BiosrecallError line starting with `what`."""
    command = click_command(words)
    defaults = _config_reader(option_defaults, command, what, config) if config is not None else None
    try:
        with (
            located(what),
            command.make_context(f"biosrecall {words}", list(args), default_map=defaults) as ctx,
        ):
            return read(dict(ctx.params))
    except click.ClickException as exc:
        raise BiosrecallError(f"{what}: {exc.format_message()}".replace("\n", " ")) from None


def _config_reader(read, command: click.Command, *args) -> dict[str, Any]:
    """`read(context, *args)`, a `--config` reader of `command` (`file_values`, `option_defaults`),
    whose BadParameter (its message already names the file or `what`, and the key) is one line."""
    try:
        return read(click.Context(command), *args)
    except click.BadParameter as exc:
        raise BiosrecallError(exc.message) from None


def run_description(words: str, options: Mapping[str, Any], what: str) -> tuple[TrainConfig, dict[str, Any]]:
    """The TrainConfig and task (`biosrecall.sweep.jobs.SweepRun`) of a sweep spec's run given as the
    option values of `biosrecall <words>` (with the `config` file they name merged in), read by the
    command's own `--config` reader, parser and option checks, as that command would build them."""
    return parse(
        words, ["--out", "run"], what, config=with_config_file(words, options), read=_run_description
    )


def _run_description(params: dict[str, Any]) -> tuple[TrainConfig, dict[str, Any]]:
    """`run_description` of the trainer's parsed parameters, as its body builds them."""
    pairs = params.pop("model_override", None) or {}
    config, named = split_options(params)
    overrides = {key: value for key, value in merge_overrides(named, pairs).items() if value is not None}
    task = {
        "data": params["data_dir"],
        "preset": params["preset"],
        "model_overrides": overrides or None,
        "from": params.get("parent"),
        "at_update": params.get("at_update"),
        "tokenizer": params.get("tokenizer"),
        "quiet": params.get("quiet") or None,
        "no_verify": params.get("no_verify") or None,
    }
    return config, {key: value for key, value in task.items() if value is not None}


def with_config_file(command: str, options: Mapping[str, Any]) -> dict[str, Any]:
    """`options` over the values of the `config` file they name, if any (the file's run size replaced
    by theirs), as `--config FILE` under the options on a command line meant."""
    if options.get("config") is None:
        return dict(options)
    base = _config_reader(file_values, click_command(command), Path(options["config"]))
    return replace_settings(command, base, {key: value for key, value in options.items() if key != "config"})


def setting_of(command: str, key: str) -> str:
    """The option `key` names; budget, budget_of, updates and exposures are one setting (the run's size)."""
    name = canonical_key(command, key)
    return "run size" if name in RUN_SIZE else name


def replace_settings(command: str, options: dict[str, Any], layer: dict[str, Any]) -> dict[str, Any]:
    """`options` with each setting of `layer` replacing whichever spelling of it was there (a run size
    replaces all four spellings, as a command line's does a --config file's)."""
    replaced = {setting_of(command, key) for key in layer}
    kept = {k: v for k, v in options.items() if setting_of(command, k) not in replaced}
    return {**kept, **layer}


def absolute_paths(words: str, options: Mapping[str, Any]) -> dict[str, Any]:
    """Path options made absolute (from the current folder), so every worker reads the same files."""
    return {
        key: Path(value).expanduser().absolute()
        if isinstance(value, str | Path) and is_path_option(words, key.replace("-", "_"))
        else value
        for key, value in options.items()
    }


def check_evaluation(words: str, options: Mapping[str, Any], what: str) -> dict[str, Any]:
    """The parameters of `biosrecall <words> RUN` given `options`, each value read and checked by the
    command's own `--config` reader (so `option_args` can write them as words); a problem is one
    BiosrecallError line starting with `what`."""
    extra = ["--out", "eval"] if words == "recall-curve" else []
    given = {key: value for key, value in options.items() if value is not None}
    return parse(words, ["run", *extra], what, config=given)
