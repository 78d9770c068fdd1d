"""Trainer options built once from the config dataclasses, for `biosrecall train`, `lm train` and `lm plan`.

    @click.command()
    @trainer_options(overrides=("injection", "backprop_depth"), run=True)
    def train(**options):
        config, overrides = split_options(options)   # a checked TrainConfig and the model overrides

Every `TrainConfig` field is one option (`batch_size` -> `--batch-size`) whose default is the field's
default, whose help is the docstring under the field, and whose type parses the text and applies
`check_field`, the rule `TrainConfig` itself applies, so a bad number is refused while the command line
is read, before anything is opened or written. Model overrides are `ModelConfig` fields the same way
(unset: the preset's value). `--config FILE` (every command) is `biosrecall.cli.config_file`.

Why a decorator factory over click, not jsonargparse: every command is click already (one error path:
`error: ...` and exit 2), the factory is this one module with no new dependency, and the option names,
`--flag/--no-flag` switches and comma-separated lists users type stay exactly as they were.
"""

from __future__ import annotations

import ast
import functools
import inspect
import textwrap
import types
from collections.abc import Callable, Iterable, Mapping
from dataclasses import MISSING, fields, replace
from pathlib import Path
from typing import Any, get_args, get_origin, get_type_hints

import click
from click.core import ParameterSource

from biosrecall.errors import BiosrecallError, excerpt
from biosrecall.model import config as model_config
from biosrecall.model.config import ModelConfig
from biosrecall.model.presets import parse_model_overrides
from biosrecall.numbers import Limit, check_number, parse_float, parse_int, split_list
from biosrecall.train.config import CHOICES, RUN_SIZE, TrainConfig, check_field

BIOS_ONLY = ("exposures",)
"""TrainConfig fields that only a bioS run has (people whose biographies are counted): `lm train` and
`lm plan` have no such option."""
# The checkpoint selector's syntax (parsed by `biosrecall.train.run_folder`), in words for `--checkpoint`'s help;
# written here, not in `runs`, so that help needs no torch.
SELECTOR_HELP = (
    "final (the largest budget fraction), fractions (every budget fraction), all (the fractions and "
    "switch), switch, a budget fraction such as 0.45, or a comma list of these"
)
RUN_FLAGS = {
    "resume": "Continue the run in --out from its `latest` checkpoint.",
    "overwrite": "Replace an existing run in --out (once the new one is checked).",
    "quiet": "No progress output.",
}


@functools.cache
def field_docs(cls: type) -> dict[str, str]:
    """The docstring under each field of a dataclass, on one line (from its source)."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    body = tree.body[0].body
    docs = {}
    for node, after in zip(body, body[1:], strict=False):
        documented = isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and documented:
            docs[node.target.id] = " ".join(str(after.value.value).split())
    return docs


class FieldValue(click.ParamType):
    """Text (or a typed value from a config file) -> the TrainConfig field `field`, checked by
    `check_field`. A list field (`kind` tuple) reads comma-separated `item`s."""

    def __init__(self, field: str):
        annotation = field_type(TrainConfig, field)
        self.field, self.kind = field, tuple if get_origin(annotation) is tuple else annotation
        self.item = get_args(annotation)[0] if self.kind is tuple else float
        self.name = {int: "integer", float: "float", tuple: "list"}.get(self.kind, "text")

    def convert(self, value: Any, param, ctx) -> Any:
        try:
            return check_field(self.field, self._parse(value))
        except BiosrecallError as exc:
            self.fail(str(exc), param, ctx)

    def _parse(self, value: Any) -> Any:
        if not isinstance(value, str) or self.kind is str:
            return value
        if self.kind is not tuple:
            return _READERS[self.kind](value)
        if self.item is str:
            return tuple(part.strip() for part in value.split(",") if part.strip())
        try:
            return tuple(_READERS[self.item](item) for item in split_list(value))
        except BiosrecallError:
            items = "update counts" if self.item is int else "fractions"
            raise BiosrecallError(f"expected comma-separated {items}, got {excerpt(value)}") from None


_READERS = {int: parse_int, float: parse_float}


class _Number:
    """A numeric option: its text read by `parse_int` or `parse_float` (ASCII only; other text is
    "'４' is not a valid integer.", click's words), then checked against the `Limit` of its kind
    (`biosrecall.numbers`: SEED, DEPTH, counts(...) or rates(...)) by `check_number`, the rule every
    command and `TrainConfig` apply; the message names `label` (default: the parameter)."""

    def __init__(self, limit: Limit, label: str | None = None):
        self.limit, self.label = limit, label

    def convert(self, value: Any, param, ctx) -> Any:
        try:
            number = _READERS[self.limit.kind](value) if isinstance(value, str) else value
        except BiosrecallError:
            self.fail(f"{excerpt(value)} is not a valid {self.name}.", param, ctx)
        try:
            return check_number(self.label or param.name, number, self.limit)
        except BiosrecallError as exc:
            self.fail(str(exc), param, ctx)


class Integer(_Number, click.types.IntParamType):
    """An integer option: a seed, a depth or a count (see `_Number`)."""


class Real(_Number, click.types.FloatParamType):
    """A real-valued option (a rate, fraction, level or budget) with a float `Limit`
    (`biosrecall.numbers.rates`), read by `parse_float` (see `_Number`)."""


class NumberList(click.ParamType):
    """A comma list of numbers ("0,1,2"), each read and checked as `Integer` or `Real` reads one; a
    tuple. `noun` and `example` word the refusal of a list that does not parse. `required`: an empty
    list is refused here, while the command line is read, rather than after the other options (where
    empty means "none", leave it)."""

    name = "text"  # shown as TEXT in help, as before

    def __init__(self, limit: Limit, noun: str, example: str, required: bool = False):
        self.limit, self.noun, self.example, self.required = limit, noun, example, required

    def convert(self, value: Any, param, ctx) -> tuple:
        if isinstance(value, tuple):
            return value
        try:
            items = [_READERS[self.limit.kind](item) for item in split_list(value)]
        except BiosrecallError:
            self.fail(
                f"expected comma-separated {self.noun} such as {self.example}, got {excerpt(value)}",
                param,
                ctx,
            )
        if self.required and not items:
            self.fail(f"is empty; give at least one of the {self.noun}, e.g. {self.example}", param, ctx)
        try:
            return tuple(check_number(self.noun, item, self.limit) for item in items)
        except BiosrecallError as exc:
            self.fail(str(exc), param, ctx)


class ParsedBy(click.ParamType):
    """Text that one of the library's parsers checks (a depth list with ranges such as 1..16), kept
    as text for the command; `limit` is the kind of its numbers."""

    name = "text"  # shown as TEXT in help, as before

    def __init__(self, parser: Callable[[str], Any], limit: Limit):
        self.parser, self.limit = parser, limit

    def convert(self, value: Any, param, ctx) -> str:
        try:
            self.parser(value)
        except BiosrecallError as exc:
            self.fail(str(exc), param, ctx)
        return value


CHECKPOINT_FLAGS = ("--checkpoint", "--checkpoints")
CHECKPOINT_LIST = CHECKPOINT_FLAGS[1].lstrip("-")
"""The parameter of a repeatable --checkpoint (named after its plural flag)."""


def checkpoint_option(
    what: str, default: Any, multiple: bool = False, plural_flag: bool = False, note: str = ""
) -> Callable:
    """--checkpoint, the run checkpoint selector (`biosrecall.train.run_folder`), for every command that reads one.
    `what` begins its help; `multiple`: repeatable, the parameter `CHECKPOINT_LIST` (a tuple);
    `plural_flag`: --checkpoints is a second spelling; `note` ends the help."""
    flags = CHECKPOINT_FLAGS if plural_flag else CHECKPOINT_FLAGS[:1]
    name = CHECKPOINT_LIST if multiple else "checkpoint"
    return click.option(
        *flags, name, multiple=multiple, default=default, help=f"{what}: {SELECTOR_HELP}.{note}"
    )


class CommaList(click.ParamType):
    """A comma list ("0,1,2") of `item` values, as a tuple, split by `split_list` and its numbers read by
    `parse_int` and `parse_float`, as every other list option reads them."""

    name = "list"

    def __init__(self, item: type):
        self.item = item

    def convert(self, value: Any, param, ctx) -> tuple:
        if isinstance(value, tuple | list):
            return tuple(value)
        try:
            items = tuple(map(_READERS.get(self.item, self.item), split_list(str(value))))
        except ValueError:
            items = ()
        if not items:
            self.fail(
                f"expected a comma list of {self.item.__name__} values, got {str(value)[:80]!r}", param, ctx
            )
        return items


FOLDER_FLAGS = {"data_dir": "--data", "out_dir": "--out"}
"""The flags of the fields that name a command's dataset and output folders (`field_option`)."""


def field_options(cls: type, given: Mapping[str, Mapping[str, Any] | None] | None = None) -> Callable:
    """A decorator that gives a command one option per field of the dataclass `cls`, in its order
    (`field_option`). `given` replaces or adds click settings by field name (a checked type, a
    callback, another flag or parameter name); None: no option."""
    given = given or {}
    chosen = [item.name for item in fields(cls) if given.get(item.name, {}) is not None]
    return stacked([field_option(cls, name, given.get(name)) for name in chosen])


def field_option(cls: type, name: str, given: Mapping[str, Any] | None = None) -> Callable:
    """The option of the field `name` of the dataclass `cls`: its flag the field's name (`--max-depth`;
    `FOLDER_FLAGS`' for data_dir and out_dir), its help the docstring under it, its default the field's
    (help shows it unless it is empty), its type the annotation's (`int | None`: what the field holds
    when set; a tuple: a comma list; a bool: a flag; a Path: a path, as a Path). `given` replaces or
    adds click settings (`field_options`)."""
    item, kind = next(f for f in fields(cls) if f.name == name), field_type(cls, name)
    default = item.default if item.default_factory is MISSING else item.default_factory()
    settings = {"type": kind, "default": default, "help": field_docs(cls).get(name, "")}
    if get_origin(kind) is tuple:
        settings["type"] = CommaList(get_args(kind)[0])
    elif kind is Path:
        settings["type"] = click.Path(path_type=Path)
    elif kind is bool:
        settings = {**settings, "type": None, "is_flag": True}
    settings.update(given or {})
    flag = settings.pop("flag", FOLDER_FLAGS.get(name, "--" + name.replace("_", "-")))
    return click.option(flag, settings.pop("name", name), **settings)


def field_type(cls: type, name: str) -> Any:
    """The annotation of the field `name` of the dataclass `cls`; of `X | None`, X (what it holds when set)."""
    kind = _type_hints(cls)[name]
    if get_origin(kind) is types.UnionType:
        kind = next(a for a in get_args(kind) if a is not type(None))
    return kind


def train_field_option(name: str) -> Callable:
    """The option of one TrainConfig field (`trainer_options` adds them all; a command that passes only
    one on to its runs, e.g. `figure1 --log`, adds it alone): `field_option`'s, its text parsed and
    checked by `FieldValue`, a switch `--flag/--no-flag`."""
    value, flag = FieldValue(name), "--" + name.replace("_", "-")
    settings: dict[str, Any] = {"type": click.Choice(CHOICES[name]) if name in CHOICES else value}
    if value.kind is bool:
        settings = {"flag": f"{flag}/--no-{flag[2:]}"}
    elif value.item is str:
        settings.update(multiple=True, callback=_joined)
    elif value.kind is tuple and getattr(TrainConfig, name) is not None:
        settings["default"] = ",".join(map(str, getattr(TrainConfig, name)))  # shown as users type it
    return field_option(TrainConfig, name, settings)


_type_hints = functools.cache(get_type_hints)


def _joined(ctx, param, value: tuple[tuple[str, ...], ...]) -> tuple[str, ...]:
    """A list of names repeated and comma-separated (--log a --log b,c) as one checked tuple."""
    return check_field(param.name, [item for part in value for item in part])


def _override_option(name: str, help_text: str) -> Callable:
    flag = "--" + name.replace("_", "-")
    choices, limits = model_config.CHOICES, model_config.INT_LIMITS
    kind = click.Choice(choices[name]) if name in choices else Integer(limits[name])
    return click.option(flag, name, type=kind, default=None, help=f"{help_text} [default: the preset's]")


def trainer_options(overrides: tuple[str, ...] = (), run: bool = True, bios: bool = True) -> Callable:
    """Decorator adding every TrainConfig field as an option (without `bios`, not the `BIOS_ONLY` ones),
    then the ModelConfig `overrides`, then (with `run`) --resume, --overwrite and --quiet."""
    options = [train_field_option(f.name) for f in fields(TrainConfig) if bios or f.name not in BIOS_ONLY]
    options += [_override_option(name, field_docs(ModelConfig)[name]) for name in overrides]
    if run:
        options += [click.option(f"--{name}", is_flag=True, help=text) for name, text in RUN_FLAGS.items()]
    return stacked(options)


def stacked(options: list[Callable]) -> Callable:
    """One decorator applying the option decorators `options`, which help then lists in this order."""

    def decorate(command: Callable) -> Callable:
        for option in reversed(options):  # click lists the innermost decorator first
            command = option(command)
        return command

    return decorate


def given_flags(ctx: click.Context, names: Iterable[str]) -> list[str]:
    """The flags of the options among `names` that the command line or --config set (not left at
    their default), in the command's order."""
    return [
        param.opts[0]
        for param in ctx.command.params
        if param.name in names and ctx.get_parameter_source(param.name) not in (ParameterSource.DEFAULT, None)
    ]


def refuse_given(ctx: click.Context, names: Iterable[str], why: str) -> None:
    """Refuse, in one line naming its flag, the first option among `names` that was given where it
    does not apply (`why`: "applies to --hf-model only")."""
    given = given_flags(ctx, names)
    if given:
        raise BiosrecallError(f"{given[0]} {why}")


def parse_overrides(ctx, param, values: tuple[str, ...]) -> dict:
    """--model-override: FIELD=VALUE pairs (repeatable or comma-separated), checked against the model
    config's fields."""

    parts = [part for value in values for part in value.split(",")]
    if "" in parts:
        shown = next(value for value in values if "" in value.split(","))
        raise BiosrecallError(
            f"--model-override takes FIELD=VALUE pairs without empty items, got {excerpt(shown)}"
        )
    return parse_model_overrides(parts)


def merge_overrides(named: dict[str, Any], pairs: dict[str, Any]) -> dict[str, Any]:
    """The model overrides of a command with both named options (--norm) and --model-override pairs;
    a field set both ways to different values is refused."""
    for name, value in pairs.items():
        if named.get(name) is not None and named[name] != value:
            raise BiosrecallError(
                f"--{name.replace('_', '-')} {named[name]} and --model-override {name}={value} disagree"
            )
    return {**named, **pairs}


RUN_FILE = "biosrecall.run_file"
"""Where `--config RUN.json` (`biosrecall.cli.config_file`) leaves the file's (TrainConfig, model
overrides) in the click context, for `split_options`."""


def split_options(options: dict[str, Any]) -> tuple[TrainConfig, dict[str, Any]]:
    """Remove the TrainConfig fields and the model overrides from parsed `options`; return a checked
    TrainConfig and the overrides (None: keep the preset's).

    After `--config RUN.json` (a run spec or a run's config.json) the config is the file's, read by
    `TrainConfig.from_dict`, with only the fields given on the command line replaced; otherwise it is
    built from the options. --budget, --budget-of, --updates and --exposures are one setting spelled
    four ways: one given on the command line replaces whichever the file gave (a repeated run may
    change its size)."""
    values = {f.name: options.pop(f.name, f.default) for f in fields(TrainConfig)}
    model_fields = {f.name for f in fields(ModelConfig)}
    overrides = {name: options.pop(name) for name in list(options) if name in model_fields}
    ctx = click.get_current_context(silent=True)
    if ctx is None:
        return TrainConfig(**values), overrides
    given = {name for name in values if ctx.get_parameter_source(name) is ParameterSource.COMMANDLINE}
    from_file = ctx.meta.get(RUN_FILE)
    if from_file is None:
        if given & set(RUN_SIZE):  # a TOML --config file's run size gives way
            for name in RUN_SIZE:
                if ctx.get_parameter_source(name) is ParameterSource.DEFAULT_MAP:
                    values[name] = None
        return TrainConfig(**values), overrides
    config, file_overrides = from_file
    changes = dict.fromkeys(RUN_SIZE) if given & set(RUN_SIZE) else {}
    changes.update({name: values[name] for name in given})
    named = {name: value for name, value in overrides.items() if value is not None}
    return replace(config, **changes), {**file_overrides, **named}
