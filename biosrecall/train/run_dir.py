"""The run folder: creation rules, `config.json`, and the `metrics.jsonl` log.

    RUN_DIR/config.json      arguments, resolved model and train configs, plan, versions
    RUN_DIR/metrics.jsonl    one JSON line per update
    RUN_DIR/checkpoints/     see `biosrecall.train.checkpoint`

A run folder is refused when it already holds a run, unless the user resumes or overwrites it.
"""

from __future__ import annotations

import json
import platform
import shutil
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch

from biosrecall import __version__
from biosrecall.atomic import atomic_write_json
from biosrecall.errors import BiosrecallError

CONFIG_FILE = "config.json"
METRICS_FILE = "metrics.jsonl"


def versions() -> dict[str, str]:
    return {
        "biosrecall": __version__,
        "torch": torch.__version__,
        "numpy": np.__version__,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
    }


def prepare_run_dir(run_dir: str | Path, resume: bool, overwrite: bool) -> Path:
    """Create the folder for a new run, or check that a resumable one is there."""
    run_dir = Path(run_dir)
    if resume and overwrite:
        raise BiosrecallError("--resume and --overwrite contradict each other; choose one")
    if run_dir.exists() and not run_dir.is_dir():
        raise BiosrecallError(f"run folder {run_dir} exists and is not a folder")
    has_content = run_dir.is_dir() and any(run_dir.iterdir())
    if resume:
        if not (run_dir / CONFIG_FILE).is_file():
            raise BiosrecallError(f"cannot resume: {run_dir} holds no run (no {CONFIG_FILE})")
        return run_dir
    if has_content and not overwrite:
        raise BiosrecallError(f"run folder {run_dir} already holds files (pass --resume or --overwrite)")
    return run_dir


def clear_run_dir(run_dir: Path) -> None:
    """Overwrite: remove the previous run's files (called only once the new run is validated)."""
    for child in (CONFIG_FILE, METRICS_FILE, "checkpoints"):
        target = run_dir / child
        if target.is_dir():
            shutil.rmtree(target)
        elif target.exists():
            target.unlink()


def write_config(run_dir: Path, record: dict[str, Any]) -> None:
    atomic_write_json(run_dir / CONFIG_FILE, {**record, "versions": versions()})


def read_config(run_dir: str | Path) -> dict[str, Any]:
    path = Path(run_dir) / CONFIG_FILE
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise BiosrecallError(f"{run_dir} is not a run folder (no {CONFIG_FILE})") from None
    except json.JSONDecodeError as exc:
        raise BiosrecallError(f"{path} is corrupt: {exc.msg}") from None


class MetricsLog:
    """Append-only JSON lines, truncated on resume to the updates the checkpoint has seen."""

    def __init__(self, run_dir: Path, resume_from_update: int = 0):
        self.path = run_dir / METRICS_FILE
        kept = []
        if resume_from_update > 0 and self.path.exists():
            for line in self.path.read_text().splitlines():
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:  # a line cut short by a hard kill
                    break
                if record.get("update", 0) >= resume_from_update:
                    break
                kept.append(line)
        self.path.write_text("".join(f"{line}\n" for line in kept))
        self._handle = self.path.open("a")

    def append(self, record: dict[str, Any]) -> None:
        self._handle.write(json.dumps(record, sort_keys=True) + "\n")

    def flush(self) -> None:
        self._handle.flush()

    def close(self) -> None:
        self._handle.close()


def read_metrics(run_dir: str | Path) -> list[dict[str, Any]]:
    path = Path(run_dir) / METRICS_FILE
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
