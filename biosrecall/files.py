"""Reading the project's own files defensively: one line naming the path and the problem, never a traceback.

Every JSON file biosrecall writes (run `config.json`, checkpoint `meta.json`, manifests) is read back
through `read_json_object`, which checks that the path is a regular file (a FIFO would block forever),
that it holds UTF-8 JSON, that the top level is an object and that the required keys are there.

    record = read_json_object(run_dir / "config.json", "run config", required=("train_config",))
    require_keys(record["plan"], ("updates",), "run config plan", path)
"""

from __future__ import annotations

import hashlib
import json
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from biosrecall.errors import BiosrecallError


def file_sha256(path: str | Path) -> str:
    """sha256 hex digest of a file's bytes, read in 1 MiB chunks (datasets, corpora and weights can be
    large): the one file hash behind manifests, corpus records and gate records."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def require_regular_file(path: str | Path, what: str) -> Path:
    """`path` must exist and be a regular file (not a folder, FIFO or device)."""
    path = Path(path)
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        raise BiosrecallError(f"{what} {path} does not exist") from None
    except OSError as exc:
        raise BiosrecallError(f"{what} {path} cannot be read: {exc.strerror}") from None
    if not stat.S_ISREG(mode):
        raise BiosrecallError(f"{what} {path} is not a regular file")
    return path


def parse_json_text(text: str, where: str) -> Any:
    """JSON from text; a decoding error or absurd nesting becomes one line naming `where`."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise BiosrecallError(f"{where} is corrupt: {exc.msg} (line {exc.lineno})") from None
    except RecursionError:  # nesting no file of ours has; the C decoder gives up on the stack
        raise BiosrecallError(f"{where} is corrupt: JSON nested too deeply") from None


def read_json_object(path: str | Path, what: str, required: Iterable[str] = ()) -> dict[str, Any]:
    """A JSON file whose top level is an object holding `required` keys."""
    path = require_regular_file(path, what)
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        raise BiosrecallError(f"{what} {path} is corrupt: not UTF-8 text") from None
    except OSError as exc:
        raise BiosrecallError(f"{what} {path} cannot be read: {exc.strerror}") from None
    data = parse_json_text(text, f"{what} {path}")
    if not isinstance(data, dict):
        raise BiosrecallError(f"{what} {path} is corrupt: expected a JSON object, got {type(data).__name__}")
    require_keys(data, required, what, path)
    return data


def require_keys(data: Any, required: Iterable[str], what: str, path: str | Path) -> None:
    if not isinstance(data, dict):
        raise BiosrecallError(f"{what} in {path} is corrupt: expected an object, got {type(data).__name__}")
    missing = [key for key in required if key not in data]
    if missing:
        raise BiosrecallError(f"{what} {path} is corrupt: missing {', '.join(map(repr, missing))}")
