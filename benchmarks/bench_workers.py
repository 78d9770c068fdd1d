"""Sweep benchmark: 2 workers of 1 thread against 1 worker of 2 threads on the same set of short runs.

A sweep on a small machine can spend its cores on runs side by side (`biosrecall sweep run --workers
2 --threads-per-run 1`) or on one run at a time with every core (`--workers 1 --threads-per-run 2`).
This measures both, side by side in one process, through the real engine (`biosrecall.sweep.run_sweep`,
one `python -m biosrecall train` subprocess per run, start-up included): the same runs of the default
preset and batch shape, each a fixed number of K = 4 updates, into fresh folders. Reported: updates
per second of wall time for each layout and their ratio (above 1: parallel runs are faster). The two
layouts alternate (A B, then B A) and each keeps its faster pass, so load from other processes biases
neither.

    python benchmarks/bench_workers.py            # bios-cpu, 8 x 256, 4 runs of 40 updates: minutes
    python benchmarks/bench_workers.py --quick    # bios-tiny, 2 runs of 5 updates: a smoke check

`run(quick=False) -> dict` is what `benchmarks/run_all.py` imports; its "ratios" are its table lines.
Both layouts use two cores, so the machine needs two free ones for the ratio to mean anything.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from biosrecall.bios import generate_dataset
from biosrecall.sweep.engine import run_sweep
from biosrecall.sweep.executors import LocalExecutor
from biosrecall.sweep.jobs import SweepRun
from biosrecall.train.config import TrainConfig
from biosrecall.train.run_folder import RunFolder

LAYOUTS = {"2 workers x 1 thread": (2, 1), "1 worker x 2 threads": (1, 2)}


@dataclass(frozen=True)
class Settings:
    preset: str
    batch_size: int
    seq_len: int
    people: int
    runs: int
    updates: int
    """Updates of every run (K = 4 throughout)."""
    passes: int
    """Passes over both layouts, in alternating order; each layout keeps its fastest."""


FULL = Settings("bios-cpu", 8, 256, 250, 4, 40, 2)  # the default figure1 preset's model, batch and people
QUICK = Settings("bios-tiny", 4, 128, 40, 2, 5, 1)


def _runs(data: Path, s: Settings) -> list[SweepRun]:
    config = TrainConfig(batch_size=s.batch_size, seq_len=s.seq_len, schedule="fixed:4", updates=s.updates,
                         checkpoint_fractions=(1.0,), save_every=10**9)  # fmt: skip
    task = {"data": str(data), "preset": s.preset, "quiet": True}
    return [SweepRun(f"run{i}", "train", replace(config, seed=i), task) for i in range(s.runs)]


def _measure(data: Path, out: Path, workers: int, threads: int, s: Settings) -> dict:
    executor = LocalExecutor(workers=workers, threads_per_run=threads)
    start = time.perf_counter()
    result = run_sweep(out, _runs(data, s), executor=executor)
    wall = time.perf_counter() - start
    if result.failed:
        raise RuntimeError(result.summary())
    updates = sum(len(RunFolder(out / f"run{i}").read_metrics()) for i in range(s.runs))
    training = sum(RunFolder(out / f"run{i}").read_metrics()[-1]["wall_s"] for i in range(s.runs))
    return {"wall_s": round(wall, 2), "updates": updates, "updates_per_s": updates / wall,
            "runs_per_s": s.runs / wall, "training_s": round(training, 2)}  # fmt: skip


def run(quick: bool = False) -> dict:
    s = QUICK if quick else FULL
    report = {"name": "workers", "settings": asdict(s), "layouts": {}}
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        data = generate_dataset(workdir / "data", people=s.people, seed=0)
        order = list(LAYOUTS)
        for number in range(s.passes):
            for name in order if number % 2 == 0 else order[::-1]:
                workers, threads = LAYOUTS[name]
                measured = _measure(data, workdir / f"{number}-{workers}x{threads}", workers, threads, s)
                best = report["layouts"].get(name)
                if best is None or measured["updates_per_s"] > best["updates_per_s"]:
                    report["layouts"][name] = measured
    parallel, threaded = (report["layouts"][name] for name in LAYOUTS)
    report["ratio"] = parallel["updates_per_s"] / threaded["updates_per_s"]
    report["ratios"] = [
        {"name": "sweep 2 workers x 1 thread / 1 x 2 (updates/s)", "measured": report["ratio"],
         "target": None, "op": ">=", "ok": None,
         "context": f"{parallel['updates_per_s']:.2f} vs {threaded['updates_per_s']:.2f} updates/s of wall "
         f"time, {s.runs} runs x {s.updates} updates, {s.preset} {s.batch_size}x{s.seq_len}"}
    ]  # fmt: skip
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="bios-tiny, 2 short runs: a smoke check")
    report = run(quick=parser.parse_args().quick)
    for name, measured in report["layouts"].items():
        print(f"{name:<22} {measured['updates_per_s']:8.2f} updates/s  {measured['wall_s']:7.1f} s wall  "
              f"{measured['training_s']:7.1f} s in training loops")  # fmt: skip
    print(f"ratio (2 workers x 1 thread) / (1 worker x 2 threads): {report['ratio']:.3f}")


if __name__ == "__main__":
    main()
