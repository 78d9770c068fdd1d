"""Benchmark: activation checkpointing per iteration at K = 16: its memory saving and its time cost.

On `bios-cpu` (batch 16 x 256), forward + loss + backward at K = 16 with and without
`activation_checkpointing`:
- memory: the growth of peak resident memory (VmHWM, `bench_train.peak_rss_kb`) over the model and
  data alone, each variant in a fresh process, since a process's peak never goes down;
- time: the two variants alternated on one model in this process; the ratio of their medians (the
  FLOP account's `recompute_flops_per_token` predicts about 1 + 1/3 of the block's share).

    python benchmarks/bench_checkpointing.py            # full: batch 16 x 256
    python benchmarks/bench_checkpointing.py --quick    # batch 4 x 128

`run(quick=False) -> dict` is what `benchmarks/run_all.py` imports; its "ratios" are its table lines.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from biosrecall.compute.flops import recompute_flops_per_token, train_flops_per_token
from biosrecall.model import LoopedTransformer, get_preset

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_train import peak_rss_kb  # noqa: E402  (one peak-memory reading for every benchmark)

PRESET, DEPTH = "bios-cpu", 16


def _setup(batch: int, seq_len: int) -> tuple[LoopedTransformer, torch.Tensor]:
    torch.manual_seed(0)
    model = LoopedTransformer(get_preset(PRESET)).train()
    return model, torch.randint(0, model.config.vocab_size, (batch, seq_len + 1))


def _update(model: LoopedTransformer, rows: torch.Tensor, checkpointing: bool) -> float:
    """Seconds of forward + loss + backward at K = 16."""
    model.activation_checkpointing = checkpointing
    start = time.perf_counter()
    logits = model(rows[:, :-1], DEPTH)
    F.cross_entropy(logits.flatten(0, 1), rows[:, 1:].flatten()).backward()
    model.zero_grad(set_to_none=True)
    return time.perf_counter() - start


def _memory_child(spec: dict) -> dict:
    """In a fresh process: peak RSS (kB) after set-up, then after one update."""
    model, rows = _setup(spec["batch"], spec["seq_len"])
    before = peak_rss_kb()
    _update(model, rows, spec["checkpointing"])
    return {"baseline_kb": before, "peak_kb": peak_rss_kb()}


def measure_memory(batch: int, seq_len: int) -> dict:
    result = {}
    for checkpointing in (False, True):
        spec = json.dumps({"batch": batch, "seq_len": seq_len, "checkpointing": checkpointing})
        command = [sys.executable, str(Path(__file__).resolve()), "--memory-child", spec]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"memory run failed: {done.stderr.strip()[-2000:]}")
        result["checkpointing" if checkpointing else "full"] = json.loads(
            done.stdout.strip().splitlines()[-1]
        )
    growth = {label: r["peak_kb"] - r["baseline_kb"] for label, r in result.items()}
    result["growth_ratio"] = growth["checkpointing"] / growth["full"] if growth["full"] > 0 else None
    return result


def measure_time(batch: int, seq_len: int, repeats: int) -> dict:
    model, rows = _setup(batch, seq_len)
    for checkpointing in (False, True):
        _update(model, rows, checkpointing)  # warm-up
    times = {False: [], True: []}
    for _ in range(repeats):
        for checkpointing in (False, True):
            times[checkpointing].append(_update(model, rows, checkpointing))
    full, checkpointed = statistics.median(times[False]), statistics.median(times[True])
    cfg = get_preset(PRESET)
    modeled = 1 + recompute_flops_per_token(cfg, DEPTH, seq_len) / train_flops_per_token(cfg, DEPTH, seq_len)
    return {
        "full_s": full,
        "checkpointing_s": checkpointed,
        "ratio": checkpointed / full,
        "modeled_ratio": modeled,
    }


def run(quick: bool = False) -> dict:
    batch, seq_len, repeats = (4, 128, 3) if quick else (16, 256, 5)
    memory, timing = measure_memory(batch, seq_len), measure_time(batch, seq_len, repeats)
    full_mb, cut_mb = (memory[k]["peak_kb"] / 1024 for k in ("full", "checkpointing"))
    report = {"name": "checkpointing", "preset": PRESET, "depth": DEPTH, "batch": batch, "seq_len": seq_len,
              "threads": torch.get_num_threads(), "memory": memory, "time": timing}  # fmt: skip
    report["ratios"] = [
        {"name": f"checkpointing RSS growth K={DEPTH} / full", "measured": memory["growth_ratio"],
         "target": None, "op": "<=", "ok": None,
         "context": f"peak {cut_mb:.0f} vs {full_mb:.0f} MB, batch {batch} x {seq_len}"},
        {"name": f"checkpointing time K={DEPTH} / full", "measured": timing["ratio"], "target": None,
         "op": "<=", "ok": None,
         "context": f"{timing['checkpointing_s']:.2f} vs {timing['full_s']:.2f} s fwd+bwd; modeled "
         f"FLOP ratio {timing['modeled_ratio']:.2f}"},
    ]  # fmt: skip
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small batches")
    parser.add_argument("--memory-child", metavar="JSON", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.memory_child:
        print(json.dumps(_memory_child(json.loads(args.memory_child))))
        return
    for row in run(quick=args.quick)["ratios"]:
        print(f"{row['name']:<44}{row['measured']:>8.3f}  {row['context']}")


if __name__ == "__main__":
    main()
