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
from collections.abc import Callable
from dataclasses import MISSING, fields
from typing import Any, get_args, get_origin, get_type_hints

import click
from click.core import ParameterSource

from biosrecall.errors import BiosrecallError
from biosrecall.model.config import INIT_STATES, INJECTIONS, NORMS, ModelConfig
from biosrecall.train.config import CHOICES, TrainConfig, check_field

_MODEL_CHOICES = {"injection": INJECTIONS, "init_state": INIT_STATES, "norm": NORMS}
RUN_SIZE = ("budget", "budget_of", "updates")
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
    """Text (or a typed value from a config file) -> one TrainConfig field, checked by `check_field`.
    A list field (`kind` tuple) reads comma-separated `item`s."""

    def __init__(self, field: str, kind: type, item: type = float):
        self.field, self.kind, self.item = field, kind, item
        self.name = {int: "integer", float: "float", tuple: "list"}.get(kind, "text")

    def convert(self, value: Any, param, ctx) -> Any:
        try:
            return check_field(self.field, self._parse(value))
        except BiosrecallError as exc:
            self.fail(str(exc), param, ctx)

    def _parse(self, value: Any) -> Any:
        if not isinstance(value, str) or self.kind is str:
            return value
        try:
            if self.kind is tuple:
                return tuple(self.item(part.strip()) for part in value.split(",") if part.strip())
            return self.kind(value.strip())
        except ValueError:
            items = "update counts" if self.item is int else "fractions"
            expected = {int: "an integer", float: "a number", tuple: f"comma-separated {items}"}
            raise BiosrecallError(f"expected {expected[self.kind]}, got {value!r}") from None


def _kind(annotation: Any) -> type:
    """int, float, str, bool or tuple: what an annotation such as `int | None` holds."""
    if get_origin(annotation) in (types.UnionType,):
        annotation = next(a for a in get_args(annotation) if a is not type(None))
    return tuple if get_origin(annotation) is tuple else annotation


def _train_option(name: str, annotation: Any, default: Any, help_text: str) -> Callable:
    flag = "--" + name.replace("_", "-")
    kind = _kind(annotation)
    if kind is bool:
        return click.option(f"{flag}/--no-{flag[2:]}", name, default=default, help=help_text)
    if name in CHOICES:
        return click.option(flag, name, type=click.Choice(CHOICES[name]), default=default, help=help_text)
    if kind is tuple and get_args(annotation)[0] is str:
        names = FieldValue(name, kind, item=str)
        return click.option(flag, name, type=names, multiple=True, callback=_joined, help=help_text)
    if kind is tuple:
        item = _item(annotation)
        default = None if default is None else ",".join(map(str, default))
        return click.option(flag, name, type=FieldValue(name, kind, item), default=default, help=help_text)
    return click.option(flag, name, type=FieldValue(name, kind), default=default, help=help_text)


def _item(annotation: Any) -> type:
    """The item type of a tuple annotation such as `tuple[int, ...] | None`."""
    if get_origin(annotation) in (types.UnionType,):
        annotation = next(a for a in get_args(annotation) if a is not type(None))
    return get_args(annotation)[0]


def _joined(ctx, param, value: tuple[tuple[str, ...], ...]) -> tuple[str, ...]:
    """A list of names repeated and comma-separated (--log a --log b,c) as one checked tuple."""
    return check_field(param.name, [item for part in value for item in part])


def train_field_option(name: str) -> Callable:
    """The option of one TrainConfig field alone, for a command that passes only it on to its runs (e.g.
    `figure1 --log`): the same flag, type, rule and help as in `trainer_options`."""
    field = next(f for f in fields(TrainConfig) if f.name == name)
    return _train_option(
        name, get_type_hints(TrainConfig)[name], field.default, field_docs(TrainConfig)[name]
    )


def _override_option(name: str, help_text: str) -> Callable:
    flag = "--" + name.replace("_", "-")
    kind = click.Choice(_MODEL_CHOICES[name]) if name in _MODEL_CHOICES else int
    return click.option(flag, name, type=kind, default=None, help=f"{help_text} [default: the preset's]")


def trainer_options(overrides: tuple[str, ...] = (), run: bool = True) -> Callable:
    """Decorator adding every TrainConfig field as an option, then the ModelConfig `overrides`, then (with
    `run`) --resume, --overwrite and --quiet."""
    hints, docs = get_type_hints(TrainConfig), field_docs(TrainConfig)
    options = [
        _train_option(f.name, hints[f.name], f.default, docs[f.name])
        for f in fields(TrainConfig)
        if f.default is not MISSING
    ]
    options += [_override_option(name, field_docs(ModelConfig)[name]) for name in overrides]
    if run:
        options += [click.option(f"--{name}", is_flag=True, help=text) for name, text in RUN_FLAGS.items()]

    def decorate(command: Callable) -> Callable:
        for option in reversed(options):  # click lists the innermost decorator first
            command = option(command)
        return command

    return decorate


def parse_overrides(ctx, param, values: tuple[str, ...]) -> dict:
    """--model-override: FIELD=VALUE pairs (repeatable or comma-separated), checked against the model
    config's fields."""
    from biosrecall.model.config import parse_model_overrides

    return parse_model_overrides([part for value in values for part in value.split(",") if part])


def merge_overrides(named: dict[str, Any], pairs: dict[str, Any]) -> dict[str, Any]:
    """The model overrides of a command with both named options (--norm) and --model-override pairs;
    a field set both ways to different values is refused."""
    for name, value in pairs.items():
        if named.get(name) is not None and named[name] != value:
            raise BiosrecallError(
                f"--{name.replace('_', '-')} {named[name]} and --model-override {name}={value} disagree"
            )
    return {**named, **pairs}


def split_options(options: dict[str, Any]) -> tuple[TrainConfig, dict[str, Any]]:
    """Remove the TrainConfig fields and the model overrides from parsed `options`; return a checked
    TrainConfig and the overrides (None: keep the preset's)."""
    _run_size_from_command_line(options)
    config = TrainConfig(**{f.name: options.pop(f.name) for f in fields(TrainConfig)})
    model_fields = {f.name for f in fields(ModelConfig)}
    return config, {name: options.pop(name) for name in list(options) if name in model_fields}


def _run_size_from_command_line(options: dict[str, Any]) -> None:
    """--budget, --budget-of and --updates are one setting spelled three ways: one given on the command
    line replaces whichever a --config file gave (a repeated run may change its size)."""
    ctx = click.get_current_context(silent=True)
    if ctx is None:
        return
    sources = {name: ctx.get_parameter_source(name) for name in RUN_SIZE}
    if ParameterSource.COMMANDLINE in sources.values():
        for name, source in sources.items():
            if source is ParameterSource.DEFAULT_MAP:
                options[name] = None
