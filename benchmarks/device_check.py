"""The GPU check in one command (`scripts/device-check.sh`): what a GPU run depends on, measured.

    scripts/device-check.sh                        # on a machine with a CUDA GPU: a few minutes
    python benchmarks/device_check.py --out DIR    # the same; results go to DIR

On `lm-200m` (random weights, synthetic tokens, no data or network needed), bf16 autocast:
- the bf16 matmul peak of this GPU (the MFU denominator);
- tokens/s and MFU of a training update (forward, backward, AdamW) at K = 1, 4, 16, compiled
  (`compile_layers`) and eager;
- peak memory of an update at K = 16 with full backprop, with backprop through 8 iterations, and with
  activation checkpointing; the largest per-GPU micro-batch that fits at K = 16;
- the wall-clock saving of fixed-first K0 = 2 and K0 = 4 (switch 0.8) over uniform 1..16 across a few
  hundred updates of the realised depths, against the modeled FLOP saving of the same depths;
- the all-depth pass (K = 1..64) against one forward per K: time and agreement;
- with 2 or more GPUs: a 2-rank NCCL all-reduce (correct sum, bus bandwidth).

It prints one table and writes `benchmarks/results/<date>-<gpu>.json`. Without a CUDA GPU it exits 2
with one line saying so. Each measurement that fails is reported as failed; the others still run.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import json
import os
import sys
import tempfile
import time
import traceback
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from biosrecall.compute.flops import update_flops
from biosrecall.compute.schedules import parse_schedule
from biosrecall.model import LoopedTransformer, get_preset
from biosrecall.train.config import TrainConfig
from biosrecall.train.optim import build_optimizer

sys.path.insert(0, str(Path(__file__).resolve().parent))
from device_report import DEPTHS, MEMORY_DEPTH, gpu_slug, table_rows, write_report  # noqa: E402, F401  (re-exported for tests)
from run_all import format_table, row  # noqa: E402, F401  (the one table format of the benchmarks)

RESULTS = Path(__file__).resolve().parent / "results"
TRUNCATED_BACKPROP = 8
UNIFORM = "uniform:1-16"
FIXED_FIRST = tuple(f"fixed_first:k0={k0},switch=0.8,finish=uniform" for k0 in (2, 4))
NO_GPU = "device-check: no CUDA GPU on this machine (torch.cuda.is_available() is false); nothing measured"


@dataclass(frozen=True)
class Shape:
    """How big each measurement is (the GPU default; tests use a CPU-sized one)."""

    preset: str = "lm-200m"
    micro_batch: int = 4
    seq_len: int = 2048
    warmup_updates: int = 2
    timed_updates: int = 5
    max_batch: int = 512
    """Where the search for the largest micro-batch stops."""
    schedule_updates: int = 300
    schedule_batch: int = 1
    eval_batch: int = 2
    eval_positions: int = 16
    """Positions per row read out at every depth in the all-depth comparison."""
    eval_depth: int = 64
    matmul_size: int = 8192
    compile: bool = True
    """Compile in the schedule comparison (as a GPU run would train); the throughput rows do both."""


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _seconds(fn, device: torch.device, repeats: int, warmup: int = 1) -> float:
    """Median wall time of `fn()` over `repeats` calls after `warmup` calls."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        _sync(device)
        start = time.perf_counter()
        fn()
        _sync(device)
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2]


def matmul_peak(shape: Shape, device: torch.device) -> float:
    """Dense bf16 square-matmul FLOP/s (the MFU denominator: measured, not the data sheet's)."""
    a = torch.randn(shape.matmul_size, shape.matmul_size, device=device, dtype=torch.bfloat16)
    b = torch.randn_like(a)
    return 2.0 * shape.matmul_size**3 / _seconds(lambda: a @ b, device, repeats=10, warmup=3)


class Trainer:
    """A model, its AdamW and bf16 autocast: one training update on synthetic tokens at a given depth."""

    def __init__(self, shape: Shape, device: torch.device, compiled=False, checkpointing=False, **model):
        torch.manual_seed(0)
        self.config = get_preset(shape.preset, **model)
        self.model = LoopedTransformer(self.config).to(device)
        self.model.activation_checkpointing = checkpointing
        if compiled:
            self.model.compile_layers()
        self.optimizer = build_optimizer(self.model, TrainConfig(updates=1))
        self.device, self.seq_len = device, shape.seq_len

    def update(self, depth: int, batch: int) -> None:
        rows = torch.randint(0, self.config.vocab_size, (batch, self.seq_len + 1), device=self.device)
        with torch.autocast(self.device.type, dtype=torch.bfloat16):
            logits = self.model(rows[:, :-1], depth)
            loss = F.cross_entropy(logits.flatten(0, 1).float(), rows[:, 1:].flatten())
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)

    def flops(self, depth: int, batch: int) -> int:
        return update_flops(self.config, depth, batch * self.seq_len, self.seq_len)


def measure_throughput(shape: Shape, device: torch.device, peak: float, modes=(False, True)) -> list[dict]:
    """Tokens/s and MFU per depth, eager and compiled (`modes`; compile time reported, not timed)."""
    entries = []
    for compiled in modes:
        trainer = Trainer(shape, device, compiled=compiled)
        start = time.perf_counter()
        trainer.update(DEPTHS[0], shape.micro_batch)  # compiles every graph any depth needs
        _sync(device)
        warm_s = time.perf_counter() - start
        for depth in DEPTHS:
            update = functools.partial(trainer.update, depth, shape.micro_batch)
            seconds = _seconds(update, device, shape.timed_updates, shape.warmup_updates)
            flops = trainer.flops(depth, shape.micro_batch)
            entries.append(
                {"compiled": compiled, "depth": depth, "seconds": seconds, "first_update_s": warm_s,
                 "tokens_per_s": shape.micro_batch * shape.seq_len / seconds, "mfu": flops / seconds / peak}
            )  # fmt: skip
    return entries


def _peak_bytes(trainer: Trainer, depth: int, batch: int) -> int | None:
    """Peak CUDA memory of one update (None off CUDA, where the allocator keeps no such count)."""
    if trainer.device.type != "cuda":
        trainer.update(depth, batch)
        return None
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats(trainer.device)
    trainer.update(depth, batch)
    return torch.cuda.max_memory_allocated(trainer.device)


def measure_memory(shape: Shape, device: torch.device) -> dict:
    """Peak memory at K = 16: full backprop, truncated to 8 iterations, activation checkpointing."""
    variants = {
        "full": {},
        f"backprop_{TRUNCATED_BACKPROP}": {"backprop_depth": TRUNCATED_BACKPROP},
        "checkpointing": {"checkpointing": True},
    }
    result = {}
    for label, options in variants.items():
        trainer = Trainer(shape, device, **options)
        trainer.update(MEMORY_DEPTH, shape.micro_batch)  # optimizer state allocated before the peak
        result[label] = _peak_bytes(trainer, MEMORY_DEPTH, shape.micro_batch)
        del trainer
    return {"depth": MEMORY_DEPTH, "micro_batch": shape.micro_batch, "peak_bytes": result}


def _fits(trainer: Trainer, batch: int) -> bool:
    try:
        trainer.update(MEMORY_DEPTH, batch)
        return True
    except torch.OutOfMemoryError:
        trainer.optimizer.zero_grad(set_to_none=True)
        if trainer.device.type == "cuda":
            torch.cuda.empty_cache()
        return False


def largest_batch(shape: Shape, device: torch.device) -> dict:
    """The largest micro-batch whose K = 16 update (full backprop) fits: doubling, then bisection."""
    trainer = Trainer(shape, device)
    fits, batch = 0, 1
    while batch <= shape.max_batch and _fits(trainer, batch):
        fits, batch = batch, batch * 2
    low, high = fits, min(batch, shape.max_batch + 1)  # low fits, high does not (or is past the cap)
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if _fits(trainer, middle) else (low, middle)
    return {"depth": MEMORY_DEPTH, "largest_micro_batch": low, "capped": low == shape.max_batch}


def measure_schedules(shape: Shape, device: torch.device) -> dict:
    """Wall-clock of each schedule's realised depths, one compiled model for all (as a run would)."""
    trainer = Trainer(shape, device, compiled=shape.compile)
    trainer.update(1, shape.schedule_batch)  # compile outside the timed runs
    runs = {}
    for spec in (UNIFORM, *FIXED_FIRST):
        depths = [int(k) for k in parse_schedule(spec).depths(shape.schedule_updates, seed=0)]
        _sync(device)
        start = time.perf_counter()
        for depth in depths:
            trainer.update(depth, shape.schedule_batch)
        _sync(device)
        flops = sum(trainer.flops(depth, shape.schedule_batch) for depth in depths)
        runs[spec] = {"wall_s": time.perf_counter() - start, "flops": flops}
    uniform = runs[UNIFORM]
    comparisons = []
    for spec in FIXED_FIRST:
        modeled = 1 - runs[spec]["flops"] / uniform["flops"]
        measured = 1 - runs[spec]["wall_s"] / uniform["wall_s"]
        comparisons.append({"schedule": spec, "modeled_saving": modeled, "measured_saving": measured})
    return {"updates": shape.schedule_updates, "runs": runs, "comparisons": comparisons}


def measure_eval(shape: Shape, device: torch.device) -> dict:
    """One all-depth pass (K = 1..eval_depth, readouts at a few positions) against a forward per K,
    in fp32: time of each and the largest logit difference."""
    torch.manual_seed(0)
    model = LoopedTransformer(get_preset(shape.preset)).to(device).eval()
    tokens = torch.randint(0, model.config.vocab_size, (shape.eval_batch, shape.seq_len), device=device)
    positions = torch.zeros_like(tokens, dtype=torch.bool)
    positions[:, -shape.eval_positions :] = True
    depths = range(1, shape.eval_depth + 1)
    sweep, single = {}, {}
    with torch.no_grad():
        sweep_s = _seconds(
            lambda: sweep.update(model.forward_all_depths(tokens, depths, positions)), device, 1
        )
        per_k_s = _seconds(lambda: single.update({k: model(tokens, k)[positions] for k in depths}), device, 1)
    difference = max(float((sweep[k] - single[k]).abs().max()) for k in depths)
    agree = min(float((sweep[k].argmax(-1) == single[k].argmax(-1)).float().mean()) for k in depths)
    return {"depths": shape.eval_depth, "sweep_s": sweep_s, "per_depth_s": per_k_s,
            "max_abs_logit_difference": difference, "min_argmax_agreement": agree}  # fmt: skip


def _nccl_rank(rank: int, port: int, out: str) -> None:
    torch.cuda.set_device(rank)
    torch.distributed.init_process_group(
        "nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2
    )
    data = torch.ones(2**26, device="cuda")  # 256 MB
    torch.distributed.all_reduce(data)  # warm-up; every element becomes 2
    correct = bool((data == 2).all())
    seconds = _seconds(lambda: torch.distributed.all_reduce(data), torch.device("cuda", rank), 5)
    if rank == 0:  # a ring all-reduce moves 2 (n - 1) / n of the buffer per rank: 1x for n = 2
        Path(out).write_text(json.dumps({"correct": correct, "bus_gb_per_s": data.nbytes / seconds / 1e9}))
    torch.distributed.destroy_process_group()


def nccl_check(shape: Shape, device: torch.device) -> dict:
    """A 2-rank all-reduce between the first two GPUs (skipped with one GPU)."""
    if device.type != "cuda" or torch.cuda.device_count() < 2:
        return {"skipped": f"{torch.cuda.device_count()} GPU(s)"}
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "nccl.json"
        torch.multiprocessing.spawn(_nccl_rank, args=(29500 + os.getpid() % 1000, str(out)), nprocs=2)
        return json.loads(out.read_text())


MEASUREMENTS = {
    "throughput": lambda s, d, m: measure_throughput(s, d, m["matmul_peak"]),
    "memory": lambda s, d, m: measure_memory(s, d),
    "largest_batch": lambda s, d, m: largest_batch(s, d),
    "schedules": lambda s, d, m: measure_schedules(s, d),
    "eval": lambda s, d, m: measure_eval(s, d),
    "nccl": lambda s, d, m: nccl_check(s, d),
}


def measure_all(shape: Shape, device: torch.device) -> dict:
    """Every measurement (a failing one is recorded as its error; the others still run)."""
    results = {"matmul_peak": matmul_peak(shape, device)}
    for name, measure in MEASUREMENTS.items():
        print(f"device-check: {name} ...", file=sys.stderr, flush=True)
        try:
            results[name] = measure(shape, device, results)
        except Exception:  # report and continue: one failure must not hide the rest
            results[name] = {"error": traceback.format_exc()}
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=RESULTS, help="results folder [benchmarks/results]")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print(NO_GPU, file=sys.stderr)
        return 2
    device, shape = torch.device("cuda"), Shape()
    start = time.perf_counter()
    results = measure_all(shape, device)
    report = {
        "date": datetime.date.today().isoformat(),
        "gpu": torch.cuda.get_device_name(device),
        "gpus": torch.cuda.device_count(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "shape": asdict(shape),
        "seconds": round(time.perf_counter() - start, 1),
        "results": results,
    }
    report["rows"] = table_rows(results)
    print(f"{report['gpu']} x {report['gpus']}, torch {report['torch']}, {report['seconds']:.0f} s")
    print(format_table(report["rows"]))
    print(f"wrote {write_report(report, args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
