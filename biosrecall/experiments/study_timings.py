"""Where a study's wall time goes: one record per call of `biosrecall figure1`, phase by phase.

    timer = StudyTimer(seeds=(0, 1), workers=2, threads=1, report=print)
    with timer.phase("evaluation", "scoring 12 checkpoints at depths 1..64"):  # printed, then its time
        ...
    timer.save(out_dir)    # appends to OUT/timings.jsonl, rewrites OUT/timings.md

A long study runs in parts (each call trains what is missing and re-tabulates), so each part is one
line of `timings.jsonl`: when it started, its seeds, workers and threads, and the wall seconds of each
phase. Phases add up when entered more than once (the lr grid's training and evaluation come before
the main runs'):

- training: the sweep engine training runs, `workers` at a time (start-up, planning, saving included);
- evaluation: recall of every checkpoint at every serving depth, and the exit criteria of the main
  runs' final checkpoints from the same pass (skipped when cached);
- serving: the serving tables, figure and claims rows from those criteria (parts recorded before
  figure1 ran on the study engine; it now writes them with its other tables, under tables);
- tables: result tables, figures and claims;
- other: the rest of the call (checking the output, generating the dataset, planning every run).

`timings.md` shows every part and the sum with each phase's share of it: the README's wall-time table.
"""

from __future__ import annotations

import json
import time
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

from biosrecall.atomic import atomic_write_text
from biosrecall.errors import BiosrecallError
from biosrecall.files import parse_json_text
from biosrecall.train.progress import format_seconds

PHASES = ("training", "evaluation", "serving", "tables", "other")
RECORD, TABLE = "timings.jsonl", "timings.md"


class StudyTimer:
    """Wall seconds per phase of one call, from the moment it is made to `save`."""

    def __init__(self, report=None, **settings) -> None:
        """`report` (a callable taking a line) is told what each announced phase does, then its time."""
        self.settings, self.report = settings, report
        self.started = datetime.now(UTC).isoformat(timespec="seconds")
        self.seconds = dict.fromkeys(PHASES, 0.0)
        self._start = time.monotonic()

    @contextmanager
    def phase(self, name: str, doing: str | None = None):
        """Time the block as `name`; with `doing`, announce it to `report` and say how long it took."""
        begin = time.monotonic()
        if doing and self.report is not None:
            self.report(f"{name}: {doing}")
        try:
            yield
        finally:
            self.seconds[name] += time.monotonic() - begin
            if doing and self.report is not None:
                self.report(f"{name} done in {format_seconds(time.monotonic() - begin)}")

    def record(self) -> dict:
        total = time.monotonic() - self._start
        measured = {name: round(value, 1) for name, value in self.seconds.items() if name != "other"}
        other = round(max(0.0, total - sum(self.seconds.values())), 1)
        return {
            "started": self.started,
            **self.settings,
            **measured,
            "other": other,
            "total": round(total, 1),
        }

    def save(self, out_dir: Path) -> None:
        """Append this call's record to OUT/timings.jsonl and rewrite OUT/timings.md from all of them."""
        records = [*read_timings(out_dir), self.record()]
        atomic_write_text(Path(out_dir) / RECORD, "".join(json.dumps(r) + "\n" for r in records))
        atomic_write_text(Path(out_dir) / TABLE, timings_markdown(records))


def read_timings(out_dir: Path) -> list[dict]:
    """Every part's record, oldest first ([] before the first)."""
    path = Path(out_dir) / RECORD
    if not path.is_file():
        return []
    records = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if line.strip():
            record = parse_json_text(line, f"line {number} of {path}")
            if not isinstance(record, dict) or "total" not in record or "started" not in record:
                raise BiosrecallError(f"line {number} of {path} is not a timings record; remove the file")
            records.append(record)
    return records


def timings_markdown(records: list[dict]) -> str:
    """One row per part (minutes), then their sum with each phase's share of it."""
    head = "| part | started | seeds | workers x threads | " + " | ".join(PHASES) + " | total |"
    lines = [head, "|---" * (len(PHASES) + 5) + "|"]
    for number, r in enumerate(records, start=1):
        cells = " | ".join(f"{r.get(name, 0) / 60:.1f}" for name in PHASES)
        seeds = ",".join(map(str, r.get("seeds", [])))
        lines.append(f"| {number} | {r['started'][:16]} | {seeds} | {r.get('workers')} x {r.get('threads')} | "
                     f"{cells} | {r['total'] / 60:.1f} |")  # fmt: skip
    total = sum(r["total"] for r in records)
    shares = " | ".join(
        f"{sum(r.get(name, 0) for r in records) / 60:.1f} ({sum(r.get(name, 0) for r in records) / total:.0%})"
        for name in PHASES
    )
    lines.append(f"| all | | | | {shares} | {total / 60:.1f} |")
    return (
        "Wall minutes per phase of each call (`timings.jsonl`); the last row sums them.\n\n"
        + "\n".join(lines)
        + "\n"
    )
