"""One way to read a JSON record: the file is read into its record class (a dataclass whose field types
and `msgspec.Meta` constraints are the rules), and a bad file is one line naming the file and the field.

    meta = read_record(checkpoint / "meta.json", CheckpointMeta, "checkpoint meta")
    # BiosrecallError: checkpoint meta runs/a/checkpoints/1.0/meta.json is corrupt:
    #                  field 'update': expected int >= 0, got -3

    meta = read_checked_json(path, CheckpointMeta, "checkpoint meta")   # checked, as JSON read it
    parse_record(data, ShardManifest, f"LM shard manifest {path} is corrupt")   # a dict already read

These records are read here: a run's config.json (`biosrecall.train.run_folder.RunConfigRecord`), a
checkpoint's meta.json (`biosrecall.train.checkpoint_files.CheckpointMeta`, `ResumableMeta`), a bioS
dataset's manifest.json (`biosrecall.bios.validation.DatasetManifest`), an LM shard manifest
(`biosrecall.lm.shard_manifest.ShardManifest`), a run spec (`biosrecall.sweep.run_spec.RunSpec`) and,
from TOML, a sweep spec's structure (`biosrecall.sweep.spec.SpecFile`) and a bioS template file's
structure (`biosrecall.bios.templates`). Another record adopts it by declaring its class and calling
`read_record`.

A record class lists only the fields readers rely on: other keys in the file are left alone, so a
record written by an earlier release still loads (a class that must refuse unknown keys, as a user's
file should, is a `msgspec.Struct` with `forbid_unknown_fields=True`; the message then lists the
fields it knows). The file itself (a regular file, bounded in size, UTF-8 JSON whose top level is an
object) is checked by `biosrecall.files.read_json_object`.

A rule that ties fields together lives in the record's `__post_init__`, raising `ValueError`: its
message follows the name of the object that holds the fields. The recurring field types are here:
`Count`, `Amount`, `Fraction`, `Sha256`; `Vocabulary` is the rule of a tokenizer's record (its
special tokens' ids lie inside it); `exact_keys` makes the type of an object that maps exactly
a given set of names (a pool size per attribute), and `optional()` is the default of a field a file
may leave out.
"""

from __future__ import annotations

import contextlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, ClassVar, TypeVar

import msgspec
import msgspec.inspect

from biosrecall.errors import BiosrecallError
from biosrecall.files import read_json_object
from biosrecall.numbers import FLOAT_MAX

Record = TypeVar("Record")

Count = Annotated[int, msgspec.Meta(ge=0)]
"""A whole number of things: an update, tokens, a seed."""
Amount = Annotated[float, msgspec.Meta(ge=0, le=FLOAT_MAX)]
"""A finite non-negative number (FLOPs, seconds, bits): NaN and infinity are refused."""
Fraction = Annotated[float, msgspec.Meta(gt=0, le=1)]
"""A budget fraction in (0, 1]."""
Sha256 = Annotated[str, msgspec.Meta(pattern="^[0-9a-f]{64}$")]
"""A sha256 hex digest."""


@dataclass(kw_only=True)
class Vocabulary:
    """The record of a tokenizer (a bioS dataset's, an LM shard folder's): a subclass declares its
    `vocab_size` field and its special tokens' id fields, each of which must lie inside the vocabulary."""

    special_ids: ClassVar[tuple[str, ...]] = ()
    """The names of the fields that hold a special token's id."""

    def __post_init__(self) -> None:
        for key in self.special_ids:
            if getattr(self, key) >= self.vocab_size:
                raise ValueError(f"{key} {getattr(self, key)} is outside the vocabulary of {self.vocab_size}")


# msgspec's own message and where it points: "Expected `int` >= 0 - at `$.splits.train.tokens`".
_LOCATED = re.compile(r"(?P<problem>.*?)(?: - at `\$(?P<where>[^`]*)`)?", re.DOTALL)
_FIELD_NAMED = re.compile(r"Object (?P<how>missing required|contains unknown) field `(?P<name>[^`]*)`")
_STEP = re.compile(r"\.([^.\[]+)|\[(\d+|\.\.\.)\]")  # "[...]": a value of a mapping, key not told


def read_record(path: str | Path, record_type: type[Record], what: str) -> Record:
    """The JSON file at `path` as a `record_type` (`what` names it in a message: "run config"); any
    problem is one line naming the file and, where one is at fault, the field."""
    return parse_record(read_json_object(path, what), record_type, f"{what} {path} is corrupt")


def read_checked_json(
    path: str | Path, record_type: type, what: str, *, error: type[BiosrecallError] = BiosrecallError
) -> dict[str, Any]:
    """`read_record`'s checks, returning the JSON object as read (for readers whose callers index it);
    a problem raises `error` (a damaged checkpoint's own type)."""
    try:
        data = read_json_object(path, what)
    except BiosrecallError as exc:
        raise error(str(exc)) from None
    parse_record(data, record_type, f"{what} {path} is corrupt", error=error)
    return data


def parse_record(
    data: Any, record_type: type[Record], where: str, *, error: type[BiosrecallError] = BiosrecallError
) -> Record:
    """`data` (JSON or TOML as read) as a `record_type`; a problem raises `error`: "<where>: field
    'a.b': <what is wrong>" (`where`: "LM shard manifest PATH is corrupt", or a user's file's path)."""
    try:
        return msgspec.convert(data, record_type)
    except msgspec.ValidationError as exc:
        raise error(f"{where}: {describe(exc, data, record_type)}") from None


def describe(exc: msgspec.ValidationError, data: Any, record_type: Any = None) -> str:
    """msgspec's message in the project's words: the field as a dotted path, the value found, and
    for a field the record does not know, the ones it does."""
    found = _LOCATED.fullmatch(str(exc))
    problem, where = found.group("problem"), (found.group("where") or "").lstrip(".")
    named = _FIELD_NAMED.fullmatch(problem)
    if named:
        field = f"{where}.{named.group('name')}" if where else named.group("name")
        if named.group("how") == "missing required":
            return f"field '{field}' is missing"
        known: list[str] = []
        with contextlib.suppress(AttributeError, TypeError, LookupError):
            known = _known_fields(record_type, where)
        return f"field '{field}' is unknown" + (f" (known: {', '.join(known)})" if known else "")
    if problem.startswith("Expected") and ", got " not in problem:  # a bound: msgspec omits the value
        with contextlib.suppress(LookupError, TypeError, ValueError):
            problem += f", got {_show(_value_at(data, where))}"
    if problem.startswith(("Expected", "Invalid")):
        problem = problem[:1].lower() + problem[1:].replace("`", "")
    return f"field '{where}': {problem}" if where else problem  # no field: a rule of the whole record


def optional() -> Any:
    """The default of a field a file may leave out: `msgspec.UNSET` when it does (type the field
    `X | UnsetType`). A factory, not a plain default, so that a subclass can make the field required
    again with `= field()` (msgspec would take a plain default inherited as a class attribute)."""
    return field(default_factory=lambda: msgspec.UNSET)


def exact_keys(name: str, keys: tuple[str, ...], value_type: Any) -> type:
    """A record type for an object that maps exactly `keys` (no more, no fewer) to `value_type`."""
    return msgspec.defstruct(name, [(key, value_type) for key in keys], forbid_unknown_fields=True)


def _known_fields(record_type: Any, where: str) -> list[str]:
    """The field names of the record (or nested record, at `where`) of `record_type`."""
    info = _unwrapped(msgspec.inspect.type_info(record_type)) if record_type is not None else None
    for key, _ in _STEP.findall("." + where) if where else ():
        fields = getattr(info, "fields", ())
        inner = getattr(info, "item_type", None) or getattr(info, "value_type", None)
        info = _unwrapped(next((f.type for f in fields if f.name == key), None) if key else inner)
    return [f.name for f in getattr(info, "fields", ())]


def _unwrapped(info: Any) -> Any:
    """A type's record or list type, past constraints and unions with null or unset."""
    while isinstance(info, msgspec.inspect.Metadata | msgspec.inspect.UnionType):
        kinds = info.types if isinstance(info, msgspec.inspect.UnionType) else (info.type,)
        info = next((kind for kind in kinds if not isinstance(kind, msgspec.inspect.NoneType)), None)
    return info


def _value_at(data: Any, where: str) -> Any:
    """The value at a dotted path such as "splits.train.shards[0].tokens" of `data`."""
    for key, index in _STEP.findall("." + where):
        data = data[key] if key else data[int(index)]  # "[...]": a ValueError
    return data


def _show(value: Any) -> str:
    text = repr(value) if isinstance(value, float) else json.dumps(value, default=str)
    return text if len(text) <= 40 else f"{text[:30]}..."
