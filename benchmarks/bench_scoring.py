"""Scoring benchmark: a study's checkpoints scored in 2 processes of 1 thread against 1 process of every core.

Until this release a study evaluated its checkpoints one after another in its own process (torch's
default: every core), a third of the default study's wall time. Now it scores them `--workers` at a
time in processes forked from the sweep's warm server (`biosrecall.eval.parallel`). This measures both
side by side in one process, through `biosrecall.eval.curves.score_runs` with the cache refreshed:
the same checkpoints of short `bios-cpu` runs, the default dataset size, every depth to `max_depth`.
Reported: checkpoints scored per second of wall time for each layout and their ratio (above 1: the
processes are faster). Both must give the same table. The layouts alternate and each keeps its best.

    python benchmarks/bench_scoring.py            # bios-cpu, 250 people, 4 checkpoints to K=16: minutes
    python benchmarks/bench_scoring.py --quick    # bios-tiny, 40 people, 2 checkpoints to K=8

`run(quick=False) -> dict` is what `benchmarks/run_all.py` imports; its "ratios" are its table lines.
Both layouts use two cores, so the machine needs two free ones for the ratio to mean anything.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import pandas as pd
import torch

from biosrecall.bios import generate_dataset
from biosrecall.cli import main as biosrecall
from biosrecall.eval.curves import score_runs
from biosrecall.sweep.executors import usable_cores


@dataclass(frozen=True)
class Settings:
    preset: str
    people: int
    runs: int
    """Short runs, each scored at its final checkpoint."""
    max_depth: int
    passes: int


FULL = Settings("bios-cpu", 250, 4, 16, 2)  # the default figure1 preset's model and people
QUICK = Settings("bios-tiny", 40, 2, 8, 1)
LAYOUTS = {"2 processes x 1 thread": (2, 1), "1 process x every core": (1, None)}


def _train(data: Path, out: Path, s: Settings) -> list[Path]:
    """`runs` two-update runs: their weights barely matter, scoring costs the same."""
    folders = [out / f"run{seed}" for seed in range(s.runs)]
    for seed, folder in enumerate(folders):
        args = ["train", "--data", str(data), "--out", str(folder), "--preset", s.preset, "--schedule",
                "fixed:4", "--updates", "2", "--batch-size", "4", "--seed", str(seed), "--quiet"]  # fmt: skip
        try:
            biosrecall(args)
        except SystemExit as exc:
            if exc.code:
                raise RuntimeError(f"training {folder} exited {exc.code}") from None
    return folders


def _measure(folders: list[Path], workers: int, threads: int | None, s: Settings):
    before = torch.get_num_threads()
    torch.set_num_threads(threads or usable_cores())  # the old way: this process, every core
    try:
        start = time.perf_counter()
        scores = score_runs(
            folders,
            "final",
            max_depth=s.max_depth,
            device="cpu",
            refresh=True,
            progress=False,
            workers=workers,
            threads=threads or 1,
        )
        wall = time.perf_counter() - start
    finally:
        torch.set_num_threads(before)
    return {"wall_s": round(wall, 2), "checkpoints_per_s": len(folders) / wall}, scores.recall


def run(quick: bool = False) -> dict:
    s = QUICK if quick else FULL
    report = {"name": "scoring", "settings": asdict(s), "layouts": {}}
    tables = {}
    with tempfile.TemporaryDirectory() as tmp:
        data = generate_dataset(Path(tmp) / "data", people=s.people, seed=0)
        folders = _train(data, Path(tmp) / "runs", s)
        order = list(LAYOUTS)
        for number in range(s.passes):
            for name in order if number % 2 == 0 else order[::-1]:
                measured, tables[name] = _measure(folders, *LAYOUTS[name], s)
                best = report["layouts"].get(name)
                if best is None or measured["checkpoints_per_s"] > best["checkpoints_per_s"]:
                    report["layouts"][name] = measured
    pd.testing.assert_frame_equal(*tables.values())  # the same numbers either way
    parallel, single = (report["layouts"][name] for name in LAYOUTS)
    report["ratio"] = parallel["checkpoints_per_s"] / single["checkpoints_per_s"]
    report["ratios"] = [
        {"name": "scoring 2 processes x 1 thread / 1 process (checkpoints/s)", "measured": report["ratio"],
         "target": None, "op": ">=", "ok": None,
         "context": f"{parallel['wall_s']:.1f} vs {single['wall_s']:.1f} s for {s.runs} {s.preset} checkpoints, "
         f"{s.people} people, K=1..{s.max_depth}, identical tables"}
    ]  # fmt: skip
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="bios-tiny, 2 checkpoints: a smoke check")
    report = run(quick=parser.parse_args().quick)
    for name, measured in report["layouts"].items():
        print(
            f"{name:<24} {measured['checkpoints_per_s']:8.3f} checkpoints/s  {measured['wall_s']:7.1f} s wall"
        )
    print(f"ratio (2 processes x 1 thread) / (1 process): {report['ratio']:.3f}")


if __name__ == "__main__":
    main()
