"""Benchmark: the exit statistics of readout-free criteria in the answer pass vs in a pass of their own.

Scoring `latent`/`accel` needs the recurrent state after every iteration at the answer positions;
the logit criteria need a readout there at every depth. `answer_stats_by_depth(..., states=True)`
observes the states in the answer pass itself; before, a second all-depth pass (64 iterations, one
readout) produced them. Both ways run side by side on a random-weight `bios-cpu` model and a small
generated eval set and must give identical statistics. Times are best-of-N.

    python benchmarks/bench_serving.py            # 6 people, best of 3
    python benchmarks/bench_serving.py --quick    # 2 people, best of 2

`run(quick=False) -> dict` is what `benchmarks/run_all.py` imports; its "ratios" are its table lines.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from biosrecall.bios import generate_dataset, load_dataset
from biosrecall.eval.exits import StateTrail
from biosrecall.eval.sweep import answer_batch, answer_stats_by_depth, plan_batches
from biosrecall.model import LoopedTransformer, get_preset

MAX_DEPTH = 64
PRESET = "bios-cpu"


def _best(function, repeats: int):
    best, result = float("inf"), None
    for _ in range(repeats):
        start = time.perf_counter()
        result = function()
        best = min(best, time.perf_counter() - start)
    return result, best


def state_pass(model, eval_set) -> dict[str, np.ndarray]:
    """The separate pass (the old way): per query, the largest latent and accel after each iteration."""
    fields = {name: np.zeros((MAX_DEPTH, len(eval_set.answer_start))) for name in ("latent", "accel")}
    with torch.inference_mode():
        for rows in plan_batches(eval_set, 256):
            batch, seen = answer_batch(eval_set, rows, "cpu"), []
            trail = StateTrail()
            hook = model.block[-1].register_forward_hook(
                lambda _m, _i, state, b=batch, s=seen, t=trail: s.append(t.observe(state[b.positions]))
            )
            for _ in model.forward_all_depths(batch.tokens, [MAX_DEPTH], positions=batch.positions):
                pass
            hook.remove()
            for depth, stats in enumerate(seen):
                for name, values in fields.items():
                    per_row = torch.full((len(rows),), -np.inf, dtype=torch.float64)
                    per_row.scatter_reduce_(0, batch.row_of_target, getattr(stats, name).double(), "amax")
                    values[depth, rows] = per_row.numpy()
    return fields


def run(quick: bool = False) -> dict:
    people, repeats = (2, 2) if quick else (6, 3)
    with tempfile.TemporaryDirectory() as workdir:
        dataset = load_dataset(generate_dataset(Path(workdir) / "data", people=people, seed=0))
        eval_set = dataset.eval_set()
    torch.manual_seed(0)
    model = LoopedTransformer(get_preset(PRESET, vocab_size=dataset.vocab_size)).eval()
    one_pass = lambda: answer_stats_by_depth(model, eval_set, MAX_DEPTH, progress=False, states=True)  # noqa: E731
    two_passes = lambda: (answer_stats_by_depth(model, eval_set, MAX_DEPTH, progress=False),  # noqa: E731
                          state_pass(model, eval_set))  # fmt: skip
    one_pass()  # first shapes pay one-off allocation: not the method's cost
    merged, merged_s = _best(one_pass, repeats)
    (_, separate), separate_s = _best(two_passes, repeats)
    identical = all(np.array_equal(getattr(merged, name), separate[name]) for name in separate)
    context = f"{merged_s:.2f} vs {separate_s:.2f} s, {PRESET}, {len(eval_set.answer_start)} queries, K=1..{MAX_DEPTH}"
    return {
        "name": "serving_state_pass",
        "merged_seconds": merged_s,
        "separate_seconds": separate_s,
        "ratio": merged_s / separate_s,
        "identical": identical,
        "ratios": [
            _row(
                "serving exit statistics, state observed in the answer pass / in its own pass",
                round(merged_s / separate_s, 3),
                context,
            ),  # fmt: skip
            _row(
                "serving latent/accel one pass == two passes",
                identical,
                f"{len(eval_set.answer_start)} queries",
            ),
        ],
    }


def _row(name: str, measured, context: str) -> dict:
    return {"name": name, "measured": measured, "target": None, "op": "<=", "ok": None, "context": context}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 people, best of 2 (seconds)")
    report = run(quick=parser.parse_args().quick)
    for row in report["ratios"]:
        print(f"{row['name']:<78}{row['measured']!s:>8.8}  {row['context']}")


if __name__ == "__main__":
    main()
