"""Command-line start-up benchmark: what a user waits for before `--help` prints or training begins.

Three ratios, every process measured side by side in one run (in rotating order, medians of a few
repeats, so a busy moment of a shared machine biases none of them):

- `biosrecall --help` wall time over `python -c pass` (each 5 times a round): the cost of the command
  line itself. Help imports no torch (tests/test_cli_startup.py), so this should stay a small multiple
  of bare Python;
- the overhead of a `biosrecall train` process before its first update over `python -c "import torch"`:
  from the process start to the moment the first line of its `metrics.jsonl` appears, minus that
  line's `wall_s` (the trainer's own clock from the start of its loop to the end of update 0). What is
  left is start-up: imports, reading the dataset, building the model, the plan and the run folder. The
  run is the tiny `bios-tiny` preset on a tiny generated dataset, so nothing here is training;
- the same start-up of a `train` forked warm, as a sweep starts its runs (`biosrecall.warm`),
  over the cold process's: what every run of a study saves. The warm server starts in round 0, which
  is dropped, as a sweep pays it once.

Each process is `python -m biosrecall ...`, the way the sweep engine starts its runs; the console
script `biosrecall` runs the same entry point.

    python benchmarks/bench_cli.py            # 5 rounds of every process: about half a minute
    python benchmarks/bench_cli.py --quick    # 3 rounds

`run(quick=False) -> dict` is what `benchmarks/run_all.py` imports; its "ratios" are its table lines.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from biosrecall.bios import generate_dataset
from biosrecall.sweep.worker import PROGRAM
from biosrecall.train.run_folder import RunFolder
from biosrecall.warm import start_warm

PRESET = "bios-tiny"
PEOPLE = 40
POLL_S = 0.002  # how often the first metrics line is looked for: the error it adds to each start-up
PROCESSES = ("pass", "help", "import torch", "train", "warm train")
# The two fast processes run this many times a round: tens of milliseconds swing most with load.
FAST = {"pass": 5, "help": 5}


def _wall(command: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def _train_command(data: Path, run_dir: Path) -> list[str]:
    return [
        *PROGRAM, "train", "--data", str(data), "--out", str(run_dir),
        "--preset", PRESET, "--schedule", "fixed:1", "--updates", "2", "--batch-size", "2",
        "--checkpoint-fractions", "1.0", "--quiet",
    ]  # fmt: skip


def _first_metrics_line(path: Path, process) -> tuple[dict, float]:
    """The first complete metrics row and when it appeared; fails if the process ends without one."""
    while True:
        if path.is_file():
            text = path.read_text()
            if "\n" in text:
                return json.loads(text.split("\n", 1)[0]), time.perf_counter()
        if process.poll() is not None:
            raise RuntimeError("train exited before its first update")
        time.sleep(POLL_S)


def _train_start_up(data: Path, run_dir: Path, warm: bool = False) -> dict:
    """Seconds from the process start to its first update, and the whole process's wall time."""
    command = _train_command(data, run_dir)
    start = time.perf_counter()
    if warm:
        log = run_dir.parent / f"{run_dir.name}.log"
        process = start_warm(command[len(PROGRAM) :], log, {**os.environ, "OMP_NUM_THREADS": "1"})
    else:
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    row, seen = _first_metrics_line(RunFolder(run_dir).metrics_file, process)
    code = process.wait()
    if code != 0:
        raise RuntimeError(f"train failed with exit status {code}: {' '.join(command)}")
    return {"before_first_update_s": seen - start - row["wall_s"], "process_s": time.perf_counter() - start}


def _measure(workdir: Path, repeats: int) -> dict[str, list[float]]:
    """Every process `repeats` times, the order rotating each round."""
    data = generate_dataset(workdir / "data", people=PEOPLE, seed=0)
    python = [sys.executable, "-c"]
    commands = {
        "pass": python + ["pass"],
        "help": [*PROGRAM, "--help"],
        "import torch": python + ["import torch"],
    }
    times: dict[str, list[float]] = {name: [] for name in (*PROCESSES, "train process", "warm train process")}
    for number in range(repeats + 1):  # round 0 warms the page cache and is dropped
        for name in PROCESSES[number % len(PROCESSES) :] + PROCESSES[: number % len(PROCESSES)]:
            if name in ("train", "warm train"):
                run_dir = workdir / f"{name.replace(' ', '-')}{number}"
                measured = _train_start_up(data, run_dir, warm=name == "warm train")
                if number:
                    times[name].append(measured["before_first_update_s"])
                    times[f"{name} process"].append(measured["process_s"])
            else:
                seconds = [_wall(commands[name]) for _ in range(FAST.get(name, 1))]
                if number:
                    times[name].extend(seconds)
    return times


def _row(name: str, measured: float, context: str) -> dict:
    return {"name": name, "measured": measured, "target": None, "op": ">=", "ok": None, "context": context}


def run(quick: bool = False) -> dict:
    repeats = 3 if quick else 5
    with tempfile.TemporaryDirectory() as tmp:
        times = _measure(Path(tmp), repeats)
    ms = {name: round(statistics.median(values) * 1000, 1) for name, values in times.items()}
    help_ratio = ms["help"] / ms["pass"]
    train_ratio = ms["train"] / ms["import torch"]
    warm_ratio = ms["warm train"] / ms["train"]
    report = {"name": "cli", "repeats": repeats, "preset": PRESET, "people": PEOPLE, "median_ms": ms}
    report["times_s"] = {name: [round(t, 4) for t in values] for name, values in times.items()}
    report["help_ratio"], report["train_ratio"] = round(help_ratio, 2), round(train_ratio, 2)
    report["warm_ratio"] = round(warm_ratio, 3)
    report["ratios"] = [
        _row("cli `biosrecall --help` / `python -c pass`", help_ratio,
             f"{ms['help']:.0f} vs {ms['pass']:.0f} ms; `import torch` alone {ms['import torch']:.0f} ms"),
        _row("cli `train` start-up to first update / `import torch`", train_ratio,
             f"{ms['train']:.0f} vs {ms['import torch']:.0f} ms; whole 2-update {PRESET} process "
             f"{ms['train process']:.0f} ms"),
        _row("sweep run forked warm: `train` start-up to first update / cold process", warm_ratio,
             f"{ms['warm train']:.0f} vs {ms['train']:.0f} ms; whole warm process {ms['warm train process']:.0f} ms"),
    ]  # fmt: skip
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 rounds instead of 5")
    report = run(quick=parser.parse_args().quick)
    for name, value in report["median_ms"].items():
        print(f"{name:<14} {value:8.1f} ms (median)")
    print(f"biosrecall --help / python -c pass:          {report['help_ratio']:.2f}")
    print(f"train start-up to first update / import torch: {report['train_ratio']:.2f}")
    print(f"warm train start-up / cold train start-up:     {report['warm_ratio']:.3f}")


if __name__ == "__main__":
    main()
