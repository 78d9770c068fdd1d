"""bf16 evaluation benchmark: the all-depth recall sweep under CPU bf16 autocast against fp32, on a
trained checkpoint: how much faster, and how many exact-match flags and recalled bits differ.

On CPUs with AMX (amx_bf16) or AVX-512 bf16 a bf16 matmul is several times an fp32 one
(`run_all.py` measures both peaks), so evaluation could run faster in bf16. It is exact only if
every (item, depth) exact-match flag is fp32's, because a table of recalled bits, and so a verdict,
is built from those flags. Each checkpoint is scored twice by `biosrecall.eval.sweep.exact_by_depth`,
the sweep every study uses, once as it is and once inside `torch.autocast("cpu", dtype=bfloat16)`,
timed side by side (the order alternating, the faster of two passes each); then the flags, and
recalled bits per person at every depth (`biosrecall.eval.recall.recall_table`), are compared.

    python benchmarks/bench_bf16.py                     # trains a quick-sized bios-tiny run, K=1..64
    python benchmarks/bench_bf16.py --quick             # fewer updates, K=1..16
    python benchmarks/bench_bf16.py RUN [RUN ...]       # the final checkpoint of trained runs, e.g. a
                                                        # study's OUT/runs/seed0/*, with their datasets

`run(quick=False) -> dict` is what `benchmarks/run_all.py` imports; its "ratios" are its table lines.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

PEOPLE = 40
PRESET = "bios-tiny"
ALL = "all"


def score(model, eval_set, max_depth: int, bf16: bool) -> tuple[np.ndarray, float]:
    """The sweep's flags [max_depth, M] and its seconds, in fp32 or under bf16 autocast."""
    from contextlib import nullcontext

    from biosrecall.eval.sweep import exact_by_depth

    context = torch.autocast("cpu", dtype=torch.bfloat16) if bf16 else nullcontext()
    start = time.perf_counter()
    with context:
        flags = exact_by_depth(model, eval_set, max_depth, progress=False)
    return flags, time.perf_counter() - start


def compare(checkpoint: Path, data_dir: Path, max_depth: int) -> dict:
    """fp32 against bf16 autocast on one checkpoint (module docstring)."""
    from biosrecall.bios import load_dataset
    from biosrecall.eval.recall import recall_table
    from biosrecall.train.checkpoint_files import load_checkpoint

    model, _ = load_checkpoint(checkpoint)
    dataset = load_dataset(data_dir)
    eval_set = dataset.eval_set()
    seconds = {"fp32": [], "bf16": []}
    flags = {}
    for order in (("fp32", "bf16"), ("bf16", "fp32")):
        for name in order:
            flags[name], elapsed = score(model, eval_set, max_depth, bf16=name == "bf16")
            seconds[name].append(elapsed)
    bits = {}
    for name, exact in flags.items():
        table = recall_table(exact, eval_set, dataset.pool_sizes)
        bits[name] = table[table["attribute"] == ALL].sort_values("depth")["bits"].to_numpy()
    differ = flags["fp32"] != flags["bf16"]
    return {
        "checkpoint": str(checkpoint),
        "max_depth": max_depth,
        "flags": int(differ.size),
        "flags_differing": int(differ.sum()),
        "exact_fp32": int(flags["fp32"].sum()),
        "depths_with_differing_bits": int((bits["fp32"] != bits["bf16"]).sum()),
        "largest_bits_difference": float(np.abs(bits["fp32"] - bits["bf16"]).max()),
        "fp32_s": min(seconds["fp32"]),
        "bf16_s": min(seconds["bf16"]),
        "speedup": min(seconds["fp32"]) / min(seconds["bf16"]),
    }


def train_one(workdir: Path, updates: int) -> tuple[Path, Path]:
    """A quick-preset-sized bios-tiny run (fixed K=4, batch 8 x 128, lr 1e-2); its final checkpoint."""
    from biosrecall.bios import generate_dataset
    from biosrecall.train.config import TrainConfig
    from biosrecall.train.trainer import train_bios

    data = generate_dataset(workdir / "data", people=PEOPLE, seed=0)
    config = TrainConfig(
        schedule="fixed:4", budget_of=f"fixed:4:{updates}", batch_size=8, seq_len=128, lr=1e-2,
        checkpoint_fractions=(1.0,), save_every=10**9, seed=0,
    )  # fmt: skip
    result = train_bios(data, workdir / "run", config, preset=PRESET)
    return result.checkpoints[1.0], data


def _row(name, measured, context) -> dict:
    return {"name": name, "measured": measured, "target": None, "op": ">=", "ok": None, "context": context}


def table_rows(result: dict) -> list[dict]:
    r = result["comparison"]
    share = r["flags_differing"] / r["flags"]
    return [
        _row(f"bf16 eval sweep K=1..{r['max_depth']}, fp32 time / bf16 autocast time", r["speedup"],
             f"{r['fp32_s']:.2f} vs {r['bf16_s']:.2f} s, trained {PRESET} ({result['updates']} updates, "
             f"{PEOPLE} people, {r['exact_fp32']:,} exact fp32 flags)"),
        _row(f"bf16 eval exact-match flags differing from fp32, K=1..{r['max_depth']}", share,
             f"{r['flags_differing']:,} of {r['flags']:,} (item, depth) flags; recalled bits differ at "
             f"{r['depths_with_differing_bits']} of {r['max_depth']} depths, by up to "
             f"{r['largest_bits_difference']:.2f} bits per person"),
    ]  # fmt: skip


def run(quick: bool = False) -> dict:
    updates, max_depth = (100, 16) if quick else (300, 64)
    with tempfile.TemporaryDirectory() as tmp:
        checkpoint, data = train_one(Path(tmp), updates)
        comparison = compare(checkpoint, data, max_depth)
    result = {"name": "bf16", "preset": PRESET, "updates": updates, "comparison": comparison}
    result["ratios"] = table_rows(result)
    return result


def compare_runs(run_dirs: list[Path], max_depth: int) -> list[dict]:
    """The final checkpoint of each trained run, scored against the dataset it was trained on."""
    from biosrecall.train.checkpoint_files import read_meta
    from biosrecall.train.run_folder import RunFolder

    results = []
    for run_dir in run_dirs:
        _, checkpoint = RunFolder(run_dir).select_checkpoint("final")
        data = RunFolder(run_dir).training_data(read_meta(checkpoint))
        results.append({"run": str(run_dir), **compare(checkpoint, data, max_depth)})
        print(json.dumps(results[-1]), flush=True)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="*", type=Path, help="trained run folders (default: train one)")
    parser.add_argument("--quick", action="store_true", help="fewer updates, K=1..16")
    parser.add_argument("--max-depth", type=int, default=64, help="deepest serving depth [64]")
    args = parser.parse_args()
    if args.runs:
        results = compare_runs(args.runs, args.max_depth)
        flags = sum(r["flags"] for r in results)
        differing = sum(r["flags_differing"] for r in results)
        print(f"{len(results)} runs: {differing:,} of {flags:,} flags differ ({differing / flags:.4%}); "
              f"bf16 speed-up {min(r['speedup'] for r in results):.2f}-{max(r['speedup'] for r in results):.2f}x",
              file=sys.stderr)  # fmt: skip
        return
    for row in run(quick=args.quick)["ratios"]:
        print(f"{row['name']:<72}{row['measured']:>8.3g}  {row['context']}")


if __name__ == "__main__":
    main()
