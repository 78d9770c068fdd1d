"""Where a figure1 study's wall time went: its runs' start-up, their training loops, and the work after.

    python scripts/study_time_shares.py OUT [OUT ...]     # one column per study output

For every run the sweep trained, its `train` processes are timed from the sweep's log (each process's
header line to the next, the last to the record's end; whole seconds) and its training loop from the
run's own metrics (`wall_s` of its last update). What a process spent outside its loop is start-up,
planning and saving. The sweep span runs from the first process's start to the last one's end; what
follows it, to the moment `claims.csv` was written, is evaluation, serving and the tables. Runs train
`workers` at a time, so process seconds add up to more than the span.
"""

from __future__ import annotations

import sys
from datetime import datetime
from pathlib import Path

from biosrecall.files import read_json_object
from biosrecall.train.run_folder import RunFolder


def _time(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


def _processes(log: Path, finished: float) -> list[tuple[str, float, float]]:
    """(phase, start, seconds) of every process in a run's sweep log (`biosrecall.sweep.worker`
    heads each with "== TIME PHASE: COMMAND")."""
    heads = [line.split(" ", 3)[1:3] for line in log.read_text().splitlines() if line.startswith("== ")]
    starts = [(_time(stamp), phase.rstrip(":")) for stamp, phase in heads]
    ends = [start for start, _ in starts[1:]] + [finished]
    return [(phase, start, end - start) for (start, phase), end in zip(starts, ends, strict=True)]


def shares(out: Path) -> dict[str, float]:
    # .specs/ holds each run's training spec, not a record of how the run went
    records = sorted(p for p in (out / "runs" / ".sweep").rglob("*.json") if ".specs" not in p.parts)
    train_s = loop_s = 0.0
    first, last = float("inf"), 0.0
    for path in records:
        record = read_json_object(path, "sweep run record")
        finished = _time(record["finished"])
        spans = _processes(path.with_suffix(".log"), finished)
        train_s += sum(seconds for phase, _, seconds in spans if phase == "train")
        loop_s += RunFolder(record["run_dir"]).read_metrics()[-1]["wall_s"]
        first, last = min(first, spans[0][1]), max(last, finished)
    return {
        "runs": len(records),
        "train process seconds": train_s,
        "of which training loops": loop_s,
        "of which start-up, planning, saving": train_s - loop_s,
        "sweep span (s)": last - first,
        "after the sweep: evaluation, serving, tables (s)": (out / "claims.csv").stat().st_mtime - last,
    }


def main() -> None:
    outs = [Path(arg) for arg in sys.argv[1:]]
    columns = [shares(out) for out in outs]
    print("| | " + " | ".join(out.name for out in outs) + " |")
    print("|---|" + "---|" * len(outs))
    for key in columns[0]:
        print(f"| {key} | " + " | ".join(f"{column[key]:.0f}" for column in columns) + " |")


if __name__ == "__main__":
    main()
