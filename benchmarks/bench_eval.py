"""Benchmark: recall at serving depths 1..64 from one all-depth sweep vs evaluating each depth alone.

The sweep runs the prelude once, the recurrent block 64 times and a readout after each iteration.
Evaluating each K alone runs prelude + K blocks + coda + head over every position, for K = 1..64.
Counting whole layer applications, that is sum_K (prelude + K x block + coda) against
prelude + 64 x (block + coda): `layer_ratio`, 17x for bios-cpu (1 + 1xK + 1 layers). The sweep's
readout is cheaper than a whole coda layer, though: only the keys and values are needed at every
position, while the queries, the MLP and the head run only at the answer-predicting positions, so the
measured speed-up lands above `layer_ratio`. Both ways must give identical exact-answer flags at
every depth.

Times are best-of-N (the sweep as a whole, each per-depth evaluation on its own), because a shared
machine's load inflates long single runs unevenly.

    python benchmarks/bench_eval.py            # 180 eval rows, best of 3: about 2 minutes on 2 idle cores
    python benchmarks/bench_eval.py --quick    # 60 eval rows, best of 2: about 30 seconds

`run(quick=False) -> dict` is what the benchmark aggregator imports.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from biosrecall.bios import generate_dataset, load_dataset
from biosrecall.eval.sweep import exact_at_depth, exact_by_depth
from biosrecall.model import LoopedTransformer, get_preset

MAX_DEPTH = 64
TARGET_SPEEDUP = 20.0


def _layer_ratio(config, max_depth: int) -> float:
    """Layer applications of evaluating every depth alone over those of one sweep with full codas."""
    ends = config.n_prelude + config.n_coda
    separate = sum(ends + k * config.n_block for k in range(1, max_depth + 1))
    sweep = config.n_prelude + max_depth * (config.n_block + config.n_coda)
    return separate / sweep


def _best_time(function, repeats: int):
    """The function's result and its best wall time over `repeats` calls."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        result = function()
        best = min(best, time.perf_counter() - start)
    return result, best


def _setup(preset: str, people: int, workdir: Path):
    """A generated dataset's eval set and a random-weight model (recall is ~0, but the work is real)."""
    dataset = load_dataset(generate_dataset(workdir / "data", people=people, seed=0))
    torch.manual_seed(0)
    model = LoopedTransformer(get_preset(preset, vocab_size=dataset.vocab_size)).eval()
    return model, dataset.eval_set()


def run(quick: bool = False) -> dict:
    """Time both ways on a random-weight model; the answer's correctness is `identical`."""
    # Always the default bioS shape: a tiny model's cost is mostly its vocabulary head, not depth.
    preset = "bios-cpu"
    people, repeats = (2, 2) if quick else (6, 3)
    with tempfile.TemporaryDirectory() as workdir:
        model, eval_set = _setup(preset, people, Path(workdir))
    # The first pass through new shapes pays one-off allocation and kernel set-up: not the method's cost.
    exact_by_depth(model, eval_set, MAX_DEPTH, progress=False)
    exact_at_depth(model, eval_set, MAX_DEPTH)
    swept, sweep_seconds = _best_time(
        lambda: exact_by_depth(model, eval_set, MAX_DEPTH, progress=False), repeats
    )
    # Each depth is timed on its own (best of `repeats`), so a burst of load elsewhere hits one short
    # measurement instead of inflating the whole per-depth total.
    per_depth = [
        _best_time(lambda k=k: exact_at_depth(model, eval_set, k), repeats) for k in range(1, MAX_DEPTH + 1)
    ]
    separate = np.stack([flags for flags, _ in per_depth])
    separate_seconds = sum(seconds for _, seconds in per_depth)
    speedup = separate_seconds / sweep_seconds
    identical = bool(np.array_equal(swept, separate))
    return {
        "name": "eval_all_depth_sweep",
        "preset": preset,
        "rows": int(len(eval_set.answer_start)),
        "max_depth": MAX_DEPTH,
        "threads": torch.get_num_threads(),
        "sweep_seconds": round(sweep_seconds, 3),
        "per_depth_seconds": round(separate_seconds, 3),
        "speedup": round(speedup, 1),
        "layer_ratio": round(_layer_ratio(model.config, MAX_DEPTH), 1),
        "target_speedup": TARGET_SPEEDUP,
        "identical": identical,
        "passed": identical and speedup >= TARGET_SPEEDUP,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny model and few people: seconds")
    result = run(quick=parser.parse_args().quick)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
