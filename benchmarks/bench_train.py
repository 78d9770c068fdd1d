"""Training benchmark: how well the real trainer uses this machine, measured through `train_bios`.

Three measurements on the `bios-cpu` preset, each read back from the run folder's `metrics.jsonl`, so
the FLOPs are the trainer's own (`biosrecall.compute.flops.update_flops`, the one FLOP account):

- utilisation: achieved model FLOP/s of training updates at K = 1, 4, 16 (median over the updates
  after the warm-up ones) over a dense fp32 matmul peak measured in the same run (issue 4's target:
  at least 50% at K = 4);
- schedules: loop wall-clock of fixed-first runs (K0 = 2 and 4, switch 0.67 and 0.8, then uniform
  1..16) against a uniform 1..16 run of the same number of updates; the measured saving over the
  modeled FLOP saving of the same realised depths (target: at least 0.9);
- memory: peak resident memory (VmHWM of a process of its own per run) of training at K = 16 with
  full backprop and with backprop through the last 8 iterations only.

    python benchmarks/bench_train.py            # batch 16 x 256 (the default Figure-1 shape): minutes
    python benchmarks/bench_train.py --quick    # batch 4 x 128, fewer updates: about a minute

On its own it uses torch's thread count; on a busy machine prefix OMP_NUM_THREADS=1 (as run_all.py
does by default), since a thread pool that shares its cores with other jobs makes every ratio noise.

`run(quick=False) -> dict` is what `benchmarks/run_all.py` imports; its "ratios" are its table lines.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch

from biosrecall.bios import generate_dataset
from biosrecall.model import get_preset
from biosrecall.train.config import TrainConfig
from biosrecall.train.run_folder import RunFolder
from biosrecall.train.trainer import train_bios

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_model import matmul_peak  # noqa: E402  (one peak measurement for every benchmark)

PRESET = "bios-cpu"
DEPTHS = (1, 4, 16)
UNIFORM = "uniform:1-16"
FIXED_FIRST = tuple(
    f"fixed_first:k0={k0},switch={switch},finish=uniform" for k0 in (2, 4) for switch in (0.67, 0.8)
)
TARGET_UTILISATION = {4: 0.5}  # issue 4 sets a bar at K = 4 only; K = 1 and 16 are reported
TARGET_SAVING_RATIO = 0.9
MEMORY_DEPTH, TRUNCATED_BACKPROP = 16, 8


@dataclass(frozen=True)
class Settings:
    batch_size: int
    seq_len: int
    people: int
    warmup_updates: int
    """Updates per depth left out of the utilisation median (allocator and autograd warm-up)."""
    measured_updates: int
    compare_updates: int
    """Length of every run in the wall-clock comparison of schedules."""
    compare_repeats: int
    memory_batch: int
    """Sequences (of the preset's full context) per update in the memory runs: activations must
    outgrow the heap that imports leave behind, or the peak cannot see them."""
    memory_updates: int
    peak_size: int
    """Side of the square fp32 matmul whose rate is the peak."""


# Full: the default Figure-1 training shape (16 x 256 tokens) on a 1,000-person dataset.
FULL = Settings(16, 256, 1000, 2, 4, 12, 2, 16, 2, 1024)
QUICK = Settings(4, 128, 200, 1, 2, 8, 1, 16, 1, 512)


def _config(schedule: str, updates: int, s: Settings) -> TrainConfig:
    """A run of exactly `updates` updates of `schedule` (its budget is what it spends in them)."""
    return TrainConfig(
        schedule=schedule,
        budget_of=f"{schedule}:{updates}",
        batch_size=s.batch_size,
        seq_len=s.seq_len,
        checkpoint_fractions=(1.0,),
        save_every=10**9,  # only the final save: periodic saves would blur the per-update timing
        seed=0,
    )


def _train(data: Path, run_dir: Path, schedule: str, updates: int, s: Settings) -> list[dict]:
    train_bios(data, run_dir, _config(schedule, updates, s), preset=PRESET)
    return RunFolder(run_dir).read_metrics()


def _update_flops(rows: list[dict]) -> list[float]:
    """Each update's modeled FLOPs (the log holds the running total)."""
    totals = [0.0] + [row["flops"] for row in rows]
    return [b - a for a, b in zip(totals, totals[1:], strict=False)]


def measure_utilisation(data: Path, workdir: Path, s: Settings) -> dict:
    """Trainer FLOP/s per depth over a matmul peak measured just before and just after that depth's
    run (the higher of the two), so both sides of each ratio see the same load from other processes."""
    per_depth = []
    for depth in DEPTHS:
        before = matmul_peak(s.peak_size, 5)
        updates = s.warmup_updates + s.measured_updates
        rows = _train(data, workdir / f"util-k{depth}", f"fixed:{depth}", updates, s)
        peak = max(before, matmul_peak(s.peak_size, 5))
        rate = statistics.median(row["flops_per_s"] for row in rows[s.warmup_updates :])
        seconds = _update_flops(rows)[-1] / rate
        per_depth.append(
            {
                "depth": depth,
                "flops_per_update": _update_flops(rows)[-1],
                "flops_per_s": rate,
                "matmul_peak_flops": peak,
                "fraction_of_peak": rate / peak,
                "seconds_per_update": seconds,
                "tokens_per_s": s.batch_size * s.seq_len / seconds,
            }
        )
    return {"depths": per_depth}


def measure_schedules(data: Path, workdir: Path, s: Settings) -> dict:
    """Loop wall-clock and modeled FLOPs of each fixed-first run against one uniform run of the same
    number of updates. Each run is repeated (the order reversed on every other pass, so a drift in
    load hits both sides alike) and its fastest pass counts: a burst of load elsewhere only adds."""
    runs = {}
    order = [UNIFORM, *FIXED_FIRST]
    for repeat in range(s.compare_repeats):
        for schedule in order if repeat % 2 == 0 else order[::-1]:
            run_dir = workdir / f"sched-{repeat}-{order.index(schedule)}"
            rows = _train(data, run_dir, schedule, s.compare_updates, s)
            entry = runs.setdefault(schedule, {"flops": rows[-1]["flops"], "wall_s": []})
            entry["wall_s"].append(rows[-1]["wall_s"])
            entry["mean_depth"] = statistics.fmean(row["depth"] for row in rows)
    uniform = runs[UNIFORM]
    comparisons = []
    for schedule in FIXED_FIRST:
        modeled = 1 - runs[schedule]["flops"] / uniform["flops"]
        measured = 1 - min(runs[schedule]["wall_s"]) / min(uniform["wall_s"])
        comparisons.append(
            {"schedule": schedule, "modeled_saving": modeled, "measured_saving": measured,
             "ratio": measured / modeled}
        )  # fmt: skip
    return {"updates": s.compare_updates, "runs": runs, "comparisons": comparisons}


def peak_rss_kb() -> int:
    """This process's peak resident memory in kB. Linux: VmHWM, because ru_maxrss of a process
    started by fork + exec also counts the parent's RSS at the fork (it survives exec)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak // 1024 if sys.platform == "darwin" else peak  # macOS reports bytes


def _rss_child(spec: dict) -> dict:
    """In a fresh process: peak RSS after set-up, then after training (kB)."""
    from biosrecall.bios import load_dataset

    load_dataset(spec["data"])  # pays for the dataset's arrays before the baseline is read
    before = peak_rss_kb()
    s = Settings(**spec["settings"])
    config = _config(f"fixed:{MEMORY_DEPTH}", s.memory_updates, s)
    config = replace(config, batch_size=s.memory_batch, seq_len=None)
    overrides = {"backprop_depth": spec["backprop_depth"]}
    train_bios(spec["data"], spec["run_dir"], config, preset=PRESET, model_overrides=overrides)
    return {"baseline_kb": before, "peak_kb": peak_rss_kb()}


def measure_memory(data: Path, workdir: Path, s: Settings) -> dict:
    """Each variant in its own process, since a process's peak RSS never goes down."""
    result = {}
    for label, backprop in (("full", None), ("truncated", TRUNCATED_BACKPROP)):
        spec = {
            "data": str(data),
            "run_dir": str(workdir / f"memory-{label}"),
            "backprop_depth": backprop,
            "settings": asdict(s),
        }
        command = [sys.executable, str(Path(__file__).resolve()), "--rss-child", json.dumps(spec)]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"memory run ({label}) failed: {done.stderr.strip()[-2000:]}")
        result[label] = json.loads(done.stdout.strip().splitlines()[-1])
    full, cut = result["full"], result["truncated"]
    growth = {
        label: result[label]["peak_kb"] - result[label]["baseline_kb"] for label in ("full", "truncated")
    }
    # No growth means the training peak stayed inside memory the imports had already touched.
    result["increment_ratio"] = growth["truncated"] / growth["full"] if growth["full"] > 0 else None
    result["peak_ratio"] = cut["peak_kb"] / full["peak_kb"]
    cfg = get_preset(PRESET)
    kept = cfg.n_prelude + cfg.n_coda + min(TRUNCATED_BACKPROP, MEMORY_DEPTH) * cfg.n_block
    result["layer_ratio"] = kept / (cfg.n_prelude + cfg.n_coda + MEMORY_DEPTH * cfg.n_block)
    return result


def table_rows(report: dict) -> list[dict]:
    """Ratios for the `make bench` table: name, measured, target (with its direction), ok, context."""
    util, sched, memory = report["utilisation"], report["schedules"], report["memory"]
    rows = []
    for entry in util["depths"]:
        target = TARGET_UTILISATION.get(entry["depth"])
        rows.append(
            _row(f"train FLOP/s / matmul peak, K={entry['depth']}", entry["fraction_of_peak"], target, ">=",
                 f"{entry['flops_per_s'] / 1e9:.1f} of {entry['matmul_peak_flops'] / 1e9:.1f} GFLOP/s, "
                 f"{entry['seconds_per_update']:.2f} s/update")
        )  # fmt: skip
    for entry in sched["comparisons"]:
        name = entry["schedule"].removeprefix("fixed_first:").removesuffix(",finish=uniform")
        rows.append(
            _row(f"wall saving / modeled saving, {name}", entry["ratio"], TARGET_SAVING_RATIO, ">=",
                 f"measured {100 * entry['measured_saving']:.1f}% vs modeled "
                 f"{100 * entry['modeled_saving']:.1f}% over {sched['updates']} updates")
        )  # fmt: skip
    full_mb, cut_mb = (memory[k]["peak_kb"] / 1024 for k in ("full", "truncated"))
    growth = memory["increment_ratio"]
    name = f"train RSS growth K={MEMORY_DEPTH}, backprop {TRUNCATED_BACKPROP} / full"
    if growth is None:  # fall back to whole-process peaks, and say so
        name, growth = (
            f"train peak RSS K={MEMORY_DEPTH}, backprop {TRUNCATED_BACKPROP} / full",
            memory["peak_ratio"],
        )
    rows.append(
        _row(name, growth, None, "<=",
             f"peak {cut_mb:.0f} vs {full_mb:.0f} MB; layers keeping activations {memory['layer_ratio']:.2f}")
    )  # fmt: skip
    return rows


def _row(name: str, measured: float, target: float | None, op: str, context: str) -> dict:
    ok = None if target is None else (measured >= target if op == ">=" else measured <= target)
    return {"name": name, "measured": measured, "target": target, "op": op, "ok": ok, "context": context}


def run(quick: bool = False) -> dict:
    """All three measurements on a freshly generated dataset; see the module doc."""
    s = QUICK if quick else FULL
    report = {"name": "train", "preset": PRESET, "settings": asdict(s), "threads": torch.get_num_threads()}
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        data = generate_dataset(workdir / "data", people=s.people, seed=0)
        for key, measure in (
            ("utilisation", measure_utilisation),
            ("schedules", measure_schedules),
            ("memory", measure_memory),
        ):
            start = time.perf_counter()
            report[key] = measure(data, workdir, s)
            report[f"{key}_seconds"] = round(time.perf_counter() - start, 1)
            print(f"  train/{key}: {report[f'{key}_seconds']} s", file=sys.stderr, flush=True)
    report["ratios"] = table_rows(report)
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small batches, few updates (about a minute)")
    parser.add_argument("--rss-child", metavar="JSON", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rss_child:
        print(json.dumps(_rss_child(json.loads(args.rss_child))))
        return
    report = run(quick=args.quick)
    for row in report["ratios"]:
        target = "-" if row["target"] is None else f"{row['op']} {row['target']:.2f}"
        print(f"{row['name']:<52}{row['measured']:>8.3f}  {target:<8}  {row['context']}")


if __name__ == "__main__":
    main()
