"""The run folder: creation rules, `config.json`, and the `metrics.jsonl` log.

    RUN_DIR/config.json      task, dataset, resolved model and train configs, plan, versions, machine
    RUN_DIR/metrics.jsonl    one JSON line per update
    RUN_DIR/checkpoints/     see `biosrecall.train.layout`, which names every path of a run folder

A run folder is refused when it already holds a run, unless the user resumes or overwrites it (a run
killed before its first resumable state holds nothing to lose and is simply replaced). A new run is
built under a temporary sibling name (`start_run_folder`) and swapped into place once it has saved a
resumable state, so a run that fails before (a bad option, a full disk) leaves the old folder as it
was. `read_config` and `read_metrics` are the only readers of these two files; each checks what it
reads and reports damage in one line naming the file.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import re
import sys
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import numpy as np
import torch

from biosrecall import __version__
from biosrecall.atomic import atomic_directory, atomic_write_json, atomic_write_text
from biosrecall.errors import BiosrecallError, first_line
from biosrecall.files import read_json_object, require_keys, require_regular_file
from biosrecall.model.config import ModelConfig
from biosrecall.train.checkpoint_files import writing
from biosrecall.train.config import TrainConfig
from biosrecall.train.layout import CONFIG_FILE, config_file, holds_nothing_resumable, metrics_file

# What every later stage reads from config.json (resume, evaluation, the diagnostic).
REQUIRED_SECTIONS = ("model_config", "train_config", "plan")


def versions() -> dict[str, str]:
    return {
        "biosrecall": __version__,
        "torch": torch.__version__,
        "numpy": np.__version__,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
    }


def machine() -> dict[str, Any]:
    """What tells two machines apart when the same seed gives different numbers: the CPU model, the
    math libraries torch was built with, and the threads it uses (single runs differ across CPUs)."""
    build = torch.__config__.show()
    return {
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "mkl": torch.backends.mkl.is_available(),
        "mkldnn": torch.backends.mkldnn.is_available(),
        "blas": _build_setting(build, "BLAS_INFO"),
        "lapack": _build_setting(build, "LAPACK_INFO"),
        "cpu_capability": _build_setting(build, "CPU capability usage"),
        "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
    }


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _build_setting(build: str, name: str) -> str | None:
    """One `NAME=value` or `NAME: value` setting of `torch.__config__.show()`, or None."""
    match = re.search(rf"{re.escape(name)}\s*[=:]\s*([^,\n]+)", build)
    return match.group(1).strip() if match else None


def prepare_run_dir(run_dir: str | Path, resume: bool, overwrite: bool) -> bool:
    """Check the folder for a resumable run (`resume`) or a new one; returns whether the new run will
    replace what the folder holds (with `overwrite`, or a run that never saved a resumable state)."""
    run_dir = Path(run_dir)
    if resume and overwrite:
        raise BiosrecallError("--resume and --overwrite contradict each other; choose one")
    if os.path.lexists(run_dir) and not run_dir.is_dir():
        raise BiosrecallError(f"run folder {run_dir} exists and is not a folder")
    if resume:
        if not os.path.lexists(config_file(run_dir)):
            raise BiosrecallError(f"cannot resume: {run_dir} holds no run (no {CONFIG_FILE})")
        return False
    if not run_dir.is_dir() or not any(run_dir.iterdir()):
        return False
    if overwrite or holds_nothing_resumable(run_dir):
        return True
    raise BiosrecallError(f"run folder {run_dir} already holds files (pass --resume or --overwrite)")


def start_run_folder(run_dir: str | Path, replace: bool, building: ExitStack) -> Path:
    """A temporary sibling of `run_dir` to build the new run in. `building.close()` swaps it into place
    (a replaced run is moved aside first and deleted only once the new one is in); an exception
    before that removes it and leaves `run_dir` as it was."""
    return building.enter_context(atomic_directory(run_dir, overwrite=replace))


def write_config(run_dir: Path, record: dict[str, Any]) -> None:
    path = config_file(run_dir)
    with writing(path):
        atomic_write_json(path, {**record, "versions": versions(), "machine": machine()})


def read_config(run_dir: str | Path) -> dict[str, Any]:
    """A run's `config.json`, checked to hold valid model and train configs and a plan."""
    path = config_file(run_dir)
    if not os.path.lexists(path):
        raise BiosrecallError(f"{run_dir} is not a run folder (no {CONFIG_FILE})")
    record = read_json_object(path, "run config", required=REQUIRED_SECTIONS)
    for section in (*REQUIRED_SECTIONS, *(key for key in ("dataset", "task") if key in record)):
        require_keys(record[section], (), f"section {section!r} of run config", path)
    require_keys(record["plan"], ("updates", "budget"), "plan of run config", path)
    problem = _config_problem(record)
    if problem:
        raise BiosrecallError(f"run config {path} is corrupt: {problem}")
    return record


def _config_problem(record: dict[str, Any]) -> str | None:
    """What is wrong with the values of a run config, or None."""
    for section, build in (("model_config", ModelConfig.from_dict), ("train_config", TrainConfig.from_dict)):
        try:
            build(record[section])
        except (BiosrecallError, TypeError, ValueError) as exc:
            return f"{section}: {first_line(exc)}"
    plan = record["plan"]
    if not _whole(plan["updates"]) or plan["updates"] < 1:
        return f"plan.updates must be a positive integer, got {plan['updates']!r}"
    budget = plan["budget"]
    if isinstance(budget, bool) or not isinstance(budget, int | float) or not 0 < budget < float("inf"):
        return f"plan.budget must be a positive number, got {budget!r}"
    switch = plan.get("switch_update")
    if switch is not None and not (_whole(switch) and 0 <= switch <= plan["updates"]):
        return f"plan.switch_update must be null or an update of the plan, got {switch!r}"
    return None


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class MetricsLog:
    """Append-only JSON lines, one per update in order; on resume, cut back to the updates the
    checkpoint has seen, so no update is ever logged twice. Each row is written straight to the file
    (no buffer), so a killed run leaves whole rows and at most one torn last line; a run that fails
    cuts the file back to the newest saved state (`saved`, `cut_to_saved`), so it never holds updates
    a resume would train again."""

    def __init__(self, run_dir: Path, resume_from_update: int = 0):
        self.path = metrics_file(run_dir)
        kept = _read_rows(self.path, limit=resume_from_update) if resume_from_update else []
        if len(kept) < resume_from_update:
            raise BiosrecallError(
                f"cannot resume: {self.path} holds {len(kept)} updates, the checkpoint has seen "
                f"{resume_from_update}"
            )
        text = "".join(json.dumps(row, sort_keys=True) + "\n" for row in kept)
        with writing(self.path):
            atomic_write_text(self.path, text)
            self._handle = self.path.open("ab", buffering=0)
        self.next_update = resume_from_update
        self._saved = (resume_from_update, len(text.encode("utf-8")))  # (update, bytes up to it)

    def moved_to(self, run_dir: Path) -> None:
        """The run folder was renamed (a new run swapped into place); the open file moved with it."""
        self.path = metrics_file(run_dir)

    def append(self, record: dict[str, Any]) -> None:
        if record.get("update") != self.next_update:
            raise RuntimeError(
                f"metrics out of order: update {record.get('update')}, expected {self.next_update}"
            )
        data = memoryview((json.dumps(record, sort_keys=True) + "\n").encode("utf-8"))
        with writing(self.path):
            while data:
                data = data[self._handle.write(data) :]
        self.next_update += 1

    def saved(self, update: int) -> None:
        """The run's state of `update` is saved: the rows so far are the ones a resume keeps."""
        if update == self.next_update:
            self._saved = (update, self._handle.tell())

    def cut_to_saved(self) -> None:
        """Drop the rows past the newest saved state: a failed run trains them again when resumed.
        Cutting a file frees space, so it works on a full disk too; should it fail anyway, the rows
        stay and the resume cuts them."""
        update, size = self._saved
        if self.next_update != update:
            with contextlib.suppress(OSError):
                os.truncate(self.path, size)
                self.next_update = update

    def close(self) -> None:
        self._handle.close()


def read_metrics(run_dir: str | Path, limit: int | None = None) -> list[dict[str, Any]]:
    """Every logged update of a run (the first `limit`), in order (a last line torn by a hard kill is
    dropped)."""
    return _read_rows(metrics_file(run_dir), limit)


def first_difference(old: Any, new: Any, ignored=frozenset()) -> tuple[str, Any, Any] | None:
    """(".key" or "", old value, new value) of the first difference between two config.json sections
    as JSON reads them back (tuples are lists), keys in `ignored` aside; None when they agree."""
    old, new = json.loads(json.dumps(old)), json.loads(json.dumps(new))
    if isinstance(old, dict) and isinstance(new, dict):
        for key in sorted(set(old) | set(new)):
            if key not in ignored and old.get(key) != new.get(key):
                return f".{key}", old.get(key), new.get(key)
        return None
    return None if old == new else ("", old, new)


def _read_rows(path: Path, limit: int | None = None) -> list[dict[str, Any]]:
    """The first `limit` (default: all) rows of `metrics.jsonl`, checked to be objects numbered 0, 1,
    2, ...; anything else but a torn last line (which a kill mid-write leaves) is refused with the
    line number. Lines after the first `limit` rows are not read."""
    if not os.path.lexists(path):
        return []
    require_regular_file(path, "metrics log")
    try:
        lines = path.read_bytes().split(b"\n")
    except OSError as exc:
        raise BiosrecallError(f"metrics log {path} cannot be read: {exc.strerror}") from None
    rows: list[dict[str, Any]] = []
    for number, line in enumerate(lines, start=1):
        if len(rows) == limit:
            break
        if not line.strip():
            continue
        row = _parse_row(line)
        if row is None and number == len(lines) and line.startswith(b"{"):
            break  # the unterminated last line of a killed write
        if not isinstance(row, dict) or row.get("update") != len(rows):
            found = "not a JSON row" if row is None else f"expected the row of update {len(rows)}"
            raise BiosrecallError(f"metrics log {path} is corrupt at line {number}: {found}")
        rows.append(row)
    return rows


def _parse_row(line: bytes) -> Any:
    """One JSON row, or None when the line is not UTF-8 JSON."""
    try:
        return json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        return None
