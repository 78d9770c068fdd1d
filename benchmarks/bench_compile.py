"""Benchmark: what `--compile` (layer by layer, inductor) gains on this CPU, at K = 4.

Forward + loss + backward of one `bios-cpu` update, eager and with `compile_layers()`, measured in
alternation (eager, compiled, eager, ...) so both see the same load; the ratio of their medians is the
speed-up. The first compiled update (inductor's compile time) is reported, not timed.

    python benchmarks/bench_compile.py            # batch 16 x 256 (the Figure-1 shape)
    python benchmarks/bench_compile.py --quick    # batch 4 x 128

`run(quick=False) -> dict` is what `benchmarks/run_all.py` imports; its "ratios" are its table lines.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

from biosrecall.model import LoopedTransformer, get_preset

PRESET, DEPTH = "bios-cpu", 4


def _model(compiled: bool) -> LoopedTransformer:
    torch.manual_seed(0)
    model = LoopedTransformer(get_preset(PRESET)).train()
    if compiled:
        model.compile_layers()
    return model


def _update(model: LoopedTransformer, rows: torch.Tensor, depth: int) -> float:
    """Seconds of forward + loss + backward."""
    start = time.perf_counter()
    logits = model(rows[:, :-1], depth)
    F.cross_entropy(logits.flatten(0, 1), rows[:, 1:].flatten()).backward()
    model.zero_grad(set_to_none=True)
    return time.perf_counter() - start


def run(quick: bool = False) -> dict:
    batch, seq_len, repeats = (4, 128, 3) if quick else (16, 256, 7)
    rows = torch.randint(0, get_preset(PRESET).vocab_size, (batch, seq_len + 1))
    models = {"eager": _model(False), "compiled": _model(True)}
    first = {name: _update(model, rows, DEPTH) for name, model in models.items()}
    for model in models.values():
        _update(model, rows, DEPTH)  # allocator warm-up
    times = {name: [] for name in models}
    for _ in range(repeats):
        for name, model in models.items():
            times[name].append(_update(model, rows, DEPTH))
    eager, compiled = (statistics.median(times[name]) for name in ("eager", "compiled"))
    report = {
        "name": "compile", "preset": PRESET, "depth": DEPTH, "batch": batch, "seq_len": seq_len,
        "threads": torch.get_num_threads(), "first_update_s": first, "seconds": times,
    }  # fmt: skip
    report["ratios"] = [
        {"name": f"compile speed-up (fwd+bwd), K={DEPTH}", "measured": eager / compiled, "target": None,
         "op": ">=", "ok": None,
         "context": f"{eager:.3f} s eager vs {compiled:.3f} s compiled, batch {batch} x {seq_len}; "
         f"first compiled update {first['compiled']:.0f} s"}
    ]  # fmt: skip
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small batches")
    report = run(quick=parser.parse_args().quick)
    for row in report["ratios"]:
        print(f"{row['name']:<44}{row['measured']:>8.3f}  {row['context']}")


if __name__ == "__main__":
    main()
