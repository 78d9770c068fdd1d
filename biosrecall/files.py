"""Reading the project's own files defensively: one line naming the path and the problem, never a traceback.

Every JSON file biosrecall writes (run `config.json`, checkpoint `meta.json`, manifests) is read back
through `read_json_object`, which checks that the path is a regular file (a FIFO would block forever),
that it holds UTF-8 JSON and that the top level is an object. A record whose fields readers rely on
is read into its record class by `biosrecall.records.read_record`, which reads the file here.

    ids = read_json_object(run_dir / "trackers.json", "tracker ids")

A file the user writes (a `--config` TOML, a sweep spec, a templates file) is read by
`read_toml_file`, bounded in size (`MAX_USER_FILE_BYTES`) and in nesting (`MAX_NESTING`): a 10 MB
or deeply nested file gives one line, not a RecursionError or minutes of parsing. JSON is bounded the
same way (`parse_json_text`).

    data = read_toml_file(path, "sweep spec")
"""

from __future__ import annotations

import hashlib
import json
import re
import stat
import tomllib
from pathlib import Path
from typing import Any

from biosrecall.errors import BiosrecallError

MAX_USER_FILE_BYTES = 1 << 20
"""The largest config file, sweep spec or templates file read: option values, not data (1 MiB)."""
MAX_NESTING = 64
"""The deepest nesting of arrays and tables a user's TOML or JSON file may have (no file of ours
nests more than a few levels; the parsers recurse, and overflow the stack near 1000)."""
# Openers of arrays and inline tables, and their closers, outside strings (a cheap upper bound on the
# nesting, counted before a recursive parser sees the text).
_BRACKETS = re.compile(r'"(?:[^"\\\n]|\\.)*"|\'[^\'\n]*\'|#[^\n]*|[\[{]|[\]}]')


def file_sha256(path: str | Path) -> str:
    """sha256 hex digest of a file's bytes, read in 1 MiB chunks (datasets, corpora and weights can be
    large): the one file hash behind manifests, corpus records and gate records."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def require_regular_file(path: str | Path, what: str, error: type[BiosrecallError] = BiosrecallError) -> Path:
    """`path` must exist and be a regular file (not a folder, FIFO or device); else `error`."""
    path = Path(path)
    try:
        mode = path.stat().st_mode
    except OSError as exc:
        problem = (
            "does not exist" if isinstance(exc, FileNotFoundError) else f"cannot be read: {exc.strerror}"
        )
        raise error(f"{what} {path} {problem}") from None
    if not stat.S_ISREG(mode):
        raise error(f"{what} {path} is not a regular file")
    return path


def check_nesting(text: str, where: str) -> None:
    """Refuse text whose brackets nest deeper than `MAX_NESTING` (strings and comments skipped), before it
    is parsed."""
    depth = 0
    for match in _BRACKETS.finditer(text):
        token = match.group()
        if token in "[{":
            depth += 1
            if depth > MAX_NESTING:
                raise BiosrecallError(f"{where} nests arrays or tables deeper than {MAX_NESTING} levels")
        elif token in "]}":
            depth -= 1


def read_user_text(path: str | Path, what: str, max_bytes: int = MAX_USER_FILE_BYTES) -> str:
    """The UTF-8 text of a file (one the user wrote, or a record read back), refused over `max_bytes`
    or when it cannot be read."""
    path = require_regular_file(path, what)
    try:
        size = path.stat().st_size
        if size > max_bytes:
            raise BiosrecallError(f"{what} {path} holds {size:,} bytes, above the {max_bytes:,} allowed")
        return path.read_bytes().decode("utf-8")
    except (UnicodeDecodeError, OSError) as exc:
        reason = "not UTF-8 text" if isinstance(exc, UnicodeDecodeError) else exc.strerror or exc
        raise BiosrecallError(f"cannot read {what} {path}: {reason}") from None


def parse_toml_text(text: str, where: str) -> dict[str, Any]:
    """TOML from text, nesting bounded (`check_nesting`); an error is one line naming `where` and the
    line at fault (tomllib's "(at end of document)" given as the last line's number)."""
    check_nesting(text, where)
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        end = f"(at the end, line {len(text.splitlines()) or 1})"
        problem = f"is not valid TOML: {str(exc).replace('(at end of document)', end)}"
    except RecursionError:  # nesting the bracket count missed (dotted keys): the parser's stack ran out
        problem = "nests tables too deeply"
    raise BiosrecallError(f"{where} {problem}")


def read_toml_file(path: str | Path, what: str) -> dict[str, Any]:
    """A user's TOML file (size and nesting bounded), or one line naming it and the problem."""
    return parse_toml_text(read_user_text(path, what), f"{what} {path}")


def parse_json_text(text: str, where: str) -> Any:
    """JSON from text; a decoding error or absurd nesting becomes one line naming `where`."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        problem = f"{exc.msg} (line {exc.lineno})"
    except RecursionError:  # nesting no file of ours has; the C decoder gives up on the stack
        problem = "JSON nested too deeply"
    raise BiosrecallError(f"{where} is corrupt: {problem}")


MAX_JSON_BYTES = 64 << 20
"""The largest JSON record read whole (a run's config.json, a checkpoint's meta.json: kilobytes)."""


def read_json_object(path: str | Path, what: str) -> dict[str, Any]:
    """A JSON file (at most `MAX_JSON_BYTES`) whose top level is an object (a record whose fields have
    rules is read by `biosrecall.records.read_record`)."""
    data = parse_json_text(read_user_text(path, what, MAX_JSON_BYTES), f"{what} {path}")
    if not isinstance(data, dict):
        raise BiosrecallError(f"{what} {path} is corrupt: expected a JSON object, got {type(data).__name__}")
    return data
