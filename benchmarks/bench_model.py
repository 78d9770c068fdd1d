"""Benchmark: forward+backward time of one `bios-cpu` update at K = 1, 4, 16, and the achieved FLOP/s
(modeled FLOPs from `compute.flops`) against a dense fp32 matmul peak measured in the same run.

    python benchmarks/bench_model.py            # full: batch 16 x 256 tokens, 1024^2 matmul peak
    python benchmarks/bench_model.py --quick    # seconds: batch 4 x 64 tokens, 512^2 matmul peak

`run(quick=False) -> dict` is the entry point an aggregator imports.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F

from biosrecall.compute.flops import update_flops
from biosrecall.model import LoopedTransformer, get_preset

DEPTHS = (1, 4, 16)


def _best_seconds(fn, repeats: int) -> float:
    fn()  # warm-up: allocator, kernels, autograd graph caches
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times) if len(times) < 3 else statistics.median(times)


def matmul_peak(size: int, repeats: int, dtype: torch.dtype = torch.float32) -> float:
    """Dense square matmul FLOP/s on this machine, now (fp32 unless `dtype`; best of `repeats`)."""
    a, b = torch.randn(size, size, dtype=dtype), torch.randn(size, size, dtype=dtype)
    seconds = _best_seconds(lambda: torch.mm(a, b), repeats)
    return 2.0 * size**3 / seconds


def update_time(
    model: LoopedTransformer, tokens: torch.Tensor, targets: torch.Tensor, depth: int, repeats: int
) -> float:
    """Seconds for forward + loss + backward of one update at `depth`."""

    def step() -> None:
        model.zero_grad(set_to_none=True)
        logits = model(tokens, depth)
        F.cross_entropy(logits.flatten(0, 1), targets.flatten()).backward()

    return _best_seconds(step, repeats)


def run(quick: bool = False) -> dict:
    """Measure and return {preset, batch, seq_len, threads, matmul_peak_flops, results: [...]}."""
    torch.manual_seed(0)
    cfg = get_preset("bios-cpu")
    batch, seq_len = (4, 64) if quick else (16, cfg.context_length)
    repeats = 1 if quick else 3
    peak = matmul_peak(512 if quick else 1024, 3 if quick else 10)
    model = LoopedTransformer(cfg).train()
    data = torch.randint(0, cfg.vocab_size, (batch, seq_len + 1))
    tokens, targets = data[:, :-1], data[:, 1:]
    results = []
    for depth in DEPTHS:
        seconds = update_time(model, tokens, targets, depth, repeats)
        flops = update_flops(cfg, depth, batch * seq_len, seq_len)
        results.append(
            {
                "depth": depth,
                "seconds": seconds,
                "flops": flops,
                "flops_per_second": flops / seconds,
                "fraction_of_peak": flops / seconds / peak,
            }
        )
    return {
        "preset": "bios-cpu",
        "batch": batch,
        "seq_len": seq_len,
        "threads": torch.get_num_threads(),
        "matmul_peak_flops": peak,
        "results": results,
    }


def _print(report: dict) -> None:
    print(
        f"bios-cpu update (batch {report['batch']} x {report['seq_len']} tokens, {report['threads']} threads); "
        f"fp32 matmul peak {report['matmul_peak_flops'] / 1e9:.1f} GFLOP/s"
    )
    print(f"{'K':>4}{'seconds':>10}{'GFLOP':>10}{'GFLOP/s':>10}{'of peak':>9}")
    for row in report["results"]:
        print(
            f"{row['depth']:>4}{row['seconds']:>10.3f}{row['flops'] / 1e9:>10.2f}"
            f"{row['flops_per_second'] / 1e9:>10.1f}{100 * row['fraction_of_peak']:>8.1f}%"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small shapes, one repeat (seconds)")
    parser.add_argument("--json", action="store_true", help="print the result dict as JSON")
    args = parser.parse_args()
    result = run(quick=args.quick)
    print(json.dumps(result, indent=2)) if args.json else _print(result)
