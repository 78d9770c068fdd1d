"""Where each run of a sweep stands: its record in OUT/.sweep/<name>.json and its run folder.

    update_record(job, state="running", pid=1234)      # atomic rewrite, other fields kept
    record = run_state(job.record)                     # RunRecord(state="running", pid=1234, ...)
    status = run_status(job)                           # {"name": ..., "state": "done", "detail": ..., ...}
    rows = [run_status(job) for job in jobs]           # `biosrecall sweep status`: format_status(rows)

A run's state, in this order:

    running  its record says so and its process is alive (checked by pid on this host; a record
             written on another host, a cluster node, is taken at its word), or the run folder's
             lock (`biosrecall.locking`) names a live process: a run started outside the sweep
    done     its run folder holds the final 1.0 checkpoint and, when the sweep evaluates, the record
             says these evaluations finished
    failed   its record holds a non-zero exit code, or says running with no process left (killed)
    waiting  anything else: not started, interrupted (Ctrl-C or SIGTERM: exit 130 with a `latest`
             checkpoint; rerunning resumes it), or trained but not yet evaluated

A record is only a cache of what happened: the run folder decides what a rerun does (finished: skip;
a `latest` checkpoint: resume; nothing: start).
"""

from __future__ import annotations

import datetime
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from biosrecall.atomic import atomic_write_json
from biosrecall.errors import BiosrecallError
from biosrecall.files import read_json_object
from biosrecall.locking import pid_alive
from biosrecall.records import parse_record
from biosrecall.sweep.jobs import SweepRun
from biosrecall.train.run_folder import RunFolder

STATES = ("done", "running", "failed", "waiting")
INTERRUPTED = 130  # the trainer's exit status after a Ctrl-C or SIGTERM, once `latest` is saved


def now() -> str:
    return datetime.datetime.now().astimezone().isoformat(timespec="seconds")


@dataclass(kw_only=True)
class RunRecord:
    """OUT/.sweep/<name>.json as `run_state` reads it: what the sweep last did with the run (the file
    also keeps the command and times, as written)."""

    state: str | None = None
    """running, done or failed (none yet: waiting)."""
    phase: str = "train"
    """What the attempt was doing: train, or eval (the evaluations after it)."""
    action: str = "finished"
    """What the attempt did: trained, resumed, evaluated or skipped."""
    host: str | None = None
    """The host the attempt ran on."""
    pid: int | None = None
    """Its process id there."""
    exit_code: int | None = None
    """Its exit status (130: interrupted, `INTERRUPTED`)."""
    error: str = ""
    """Why it failed: its last error line."""
    evaluated: str | None = None
    """The evaluations finished after training (`SweepRun.eval_key`)."""


def run_state(path: Path) -> RunRecord:
    """A run's record, empty when there is none yet (a damaged one counts as none: it is only a cache)."""
    try:
        return parse_record(_stored(path), RunRecord, str(path))
    except BiosrecallError:
        return RunRecord()


def _stored(path: Path) -> dict[str, Any]:
    """The record as JSON read it, or {} when there is none or it is damaged."""
    try:
        return read_json_object(path, "sweep run record")
    except BiosrecallError:
        return {}


def update_record(job: SweepRun, **changes: Any) -> None:
    """Rewrite the run's record atomically with `changes` over what it held."""
    record = {**_stored(job.record), "name": job.name, "run_dir": str(job.run_dir), "log": str(job.log)}
    atomic_write_json(job.record, {**record, **changes})


def lock_holder(run_dir: Path) -> int | None:
    """The live process holding the run folder's lock, found without taking the lock: the pid its lock
    file records, if that process is alive (a killed holder leaves the file but its pid is gone)."""
    try:
        text = RunFolder(run_dir).lock_file.read_text().strip()
    except (OSError, UnicodeDecodeError):  # unreadable or damaged: it names no live holder
        return None
    # isascii: str.isdigit also takes digits such as '²' that int() refuses; no pid has 20 digits.
    pid = int(text) if text.isascii() and text.isdigit() and len(text) < 20 else None
    return pid if pid_alive(pid) else None


def record_running(record: RunRecord) -> bool:
    """The record says running and, when written on this host, its process is still alive."""
    if record.state != "running":
        return False
    return record.host != socket.gethostname() or pid_alive(record.pid)


def run_status(job: SweepRun) -> dict[str, Any]:
    """Where `job`'s run stands, as a row of `sweep status`: name, state (module docstring), detail
    (one line), updates done and planned (None: not known yet) and the log's path."""
    record = run_state(job.record)
    updates, planned = progress(job.run_dir)
    state, detail = _state(job, record, updates)
    return {
        "name": job.name,
        "state": state,
        "detail": detail,
        "updates": updates,
        "planned": planned,
        "log": str(job.log),
    }


def _state(job: SweepRun, record: RunRecord, updates: int) -> tuple[str, str]:
    if record_running(record):
        return "running", f"{record.phase} on {record.host} (pid {record.pid})"
    holder = lock_holder(job.run_dir)
    if holder is not None:
        return "running", f"run folder locked by pid {holder}"
    run = RunFolder(job.run_dir)
    is_finished = run.finished()
    if is_finished and (job.eval_key is None or record.evaluated == job.eval_key):
        return "done", record.action
    saved = run.latest_checkpoint() is not None
    interrupted = record.exit_code == INTERRUPTED and saved
    if record.state == "failed" and not interrupted:
        return "failed", f"exit {record.exit_code}: {record.error}"
    if record.state == "running":  # on this host, with no process left
        return "failed", f"stopped during {record.phase} without an exit status (killed?)"
    if is_finished:
        return "waiting", "trained; to evaluate"
    if saved:
        return "waiting", f"interrupted; resumes after update {updates}"
    return "waiting", "not started"


def progress(run_dir: Path) -> tuple[int, int | None]:
    """(updates logged so far, updates planned) of a run folder, read cheaply (0, None before it exists)."""
    try:
        updates = RunFolder(run_dir).metrics_file.read_bytes().count(b"\n")
    except OSError:
        updates = 0
    plan = _stored(RunFolder(run_dir).config_file).get("plan")
    planned = plan.get("updates") if isinstance(plan, dict) else None
    return updates, planned if isinstance(planned, int) else None


def format_status(rows: list[dict[str, Any]]) -> str:
    """The status rows as a fixed-width table followed by the counts of each state."""
    lines = [("run", "state", "updates", "detail")]
    for row in rows:
        planned = "?" if row["planned"] is None else str(row["planned"])
        lines.append((row["name"], row["state"], f"{row['updates']}/{planned}", row["detail"]))
    widths = [max(len(line[i]) for line in lines) for i in range(3)]
    text = [f"{a:<{widths[0]}}  {b:<{widths[1]}}  {c:>{widths[2]}}  {d}".rstrip() for a, b, c, d in lines]
    counts = {state: sum(row["state"] == state for row in rows) for state in STATES}
    text.append(f"{len(rows)} runs: " + ", ".join(f"{n} {state}" for state, n in counts.items()))
    return "\n".join(text)
