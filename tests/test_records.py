"""The one reader of JSON records (`biosrecall.records`): a file read into its record class, a bad one
refused in one line naming the file and the field, and every record an earlier release archived still
loading.

    pytest -q tests/test_records.py
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import msgspec
import pytest

from biosrecall.errors import BiosrecallError
from biosrecall.records import Count, Sha256, exact_keys, parse_record, read_checked_json, read_record
from biosrecall.train.checkpoint_files import DamagedCheckpoint, read_meta
from biosrecall.train.run_folder import RunFolder

ROOT = Path(__file__).resolve().parent.parent


@dataclass(kw_only=True)
class Shard:
    file: str
    tokens: Count


@dataclass(kw_only=True)
class Example:
    name: str
    shards: list[Shard]
    sizes: exact_keys("Sizes", ("a", "b"), Annotated[int, msgspec.Meta(ge=2)])
    sha256: Sha256 | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.shards:
            raise ValueError("an example needs a shard")


GOOD = {"name": "x", "shards": [{"file": "a.bin", "tokens": 3}], "sizes": {"a": 2, "b": 3}, "kept": 1}


def written(tmp_path: Path, data: Any) -> Path:
    path = tmp_path / "record.json"
    path.write_text(json.dumps(data))
    return path


def test_a_record_is_read_into_its_class_and_keys_it_does_not_name_are_left(tmp_path):
    record = read_record(written(tmp_path, GOOD), Example, "example")
    assert record.shards == [Shard(file="a.bin", tokens=3)] and record.sizes.b == 3
    assert read_checked_json(written(tmp_path, GOOD), Example, "example") == GOOD


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.pop("name"), "field 'name' is missing"),
        (
            lambda d: d["shards"][0].__setitem__("tokens", -1),
            "field 'shards[0].tokens': expected int >= 0, got -1",
        ),
        (
            lambda d: d["shards"][0].__setitem__("tokens", True),
            "field 'shards[0].tokens': expected int, got bool",
        ),
        (lambda d: d["sizes"].__setitem__("c", 2), "field 'sizes.c' is unknown (known: a, b)"),
        (lambda d: d["sizes"].pop("b"), "field 'sizes.b' is missing"),
        (lambda d: d.__setitem__("sha256", "zz"), "field 'sha256': expected str matching regex"),
        (lambda d: d.__setitem__("shards", []), "is corrupt: an example needs a shard"),
        (lambda d: d.__setitem__("extra", [1]), "field 'extra': expected object, got array"),
    ],
)
def test_a_bad_record_is_one_line_naming_the_file_and_the_field(tmp_path, change, message):
    data = json.loads(json.dumps(GOOD))
    change(data)
    path = written(tmp_path, data)
    with pytest.raises(BiosrecallError) as info:
        read_record(path, Example, "example")
    text = str(info.value)
    assert text.startswith(f"example {path} is corrupt: ") and message in text and "\n" not in text


def test_the_file_itself_is_checked_before_its_fields(tmp_path):
    with pytest.raises(BiosrecallError, match="expected a JSON object, got list"):
        read_record(written(tmp_path, [1]), Example, "example")
    with pytest.raises(BiosrecallError, match="does not exist"):
        read_record(tmp_path / "absent.json", Example, "example")


def test_the_error_type_is_the_callers(tmp_path):
    with pytest.raises(DamagedCheckpoint, match="field 'update'"):
        read_meta(written(tmp_path, {"model_config": {}, "update": -1}).rename(tmp_path / "meta.json").parent)


def test_a_user_file_names_its_path_only():
    with pytest.raises(BiosrecallError, match=r"^spec.toml: field 'name': expected str, got int$"):
        parse_record({**GOOD, "name": 3}, Example, "spec.toml")


def test_every_archived_run_config_and_meta_still_loads():
    """config.json and meta.json of the runs the repository archives (written by earlier releases)."""
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True).stdout.split()
    configs = [ROOT / f for f in tracked if f.endswith("/config.json") and "/runs/" in f]
    metas = [ROOT / f for f in tracked if f.endswith("/meta.json")]
    if not configs or not metas:
        pytest.skip("not a git checkout with archived runs")
    for path in configs:
        if "train_config" in json.loads(path.read_text()):
            RunFolder(path.parent).read_config()
    for path in metas:
        read_meta(path.parent)


def test_a_hand_edited_tracker_ids_file_is_one_line_naming_the_field(tmp_path):
    from biosrecall.train.tracking import IDS_FILE, run_ids

    (tmp_path / IDS_FILE).write_text(json.dumps({"wandb": {"id": "0a1b2c3d"}}))
    with pytest.raises(BiosrecallError, match=r"trackers.json is corrupt: field 'wandb.project' is missing$"):
        run_ids(tmp_path, "wandb", {"id": "fresh", "project": "p"})


def test_a_sweep_run_record_is_a_cache_a_damaged_one_reads_as_none(tmp_path):
    from biosrecall.sweep.records import RunRecord, run_state

    path = tmp_path / "run.json"
    assert run_state(path) == RunRecord()
    path.write_text(json.dumps({"state": "failed", "exit_code": 1, "error": "boom", "command": ["x"]}))
    assert run_state(path) == RunRecord(state="failed", exit_code=1, error="boom")
    for damaged in ("[1]", "{", json.dumps({"state": "failed", "exit_code": "one"})):
        path.write_text(damaged)
        assert run_state(path) == RunRecord()
    path.unlink()
    os.mkfifo(path)  # read by nothing: a FIFO would block a reader forever
    assert run_state(path) == RunRecord()
