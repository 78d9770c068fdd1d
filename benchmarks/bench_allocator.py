"""Allocator benchmark: training updates with malloc's thresholds set (`biosrecall.allocator`, what
every process biosrecall starts does) against glibc's defaults, on `bios-tiny` and `bios-cpu`, with
today's step (the fused head and loss) and with the step as it was before it (full logits, then
`F.cross_entropy`; `bench_step.use_plain_loss`).

Each arm is `train_bios` in a fresh process of 1 thread (malloc settings belong to a process),
fixed K=4 at the studies' batch shapes (quick/middle: bios-tiny 8 x 128; default: bios-cpu 8 x 256),
in rotating order over a few rounds. Per update (medians after warm-up, `getrusage` at the end of
every update): CPU time, minor page faults and kernel time. The ratio is CPU time per update with
glibc's defaults over CPU time with the thresholds set: CPU time, not wall time, so a neighbour's
load on a shared machine moves it less. The table's number is today's step; the step before the
fused head is its context, because what the thresholds save depends on what an update allocates:
the full [tokens, vocab] logits and their gradients were freed and faulted in again every update.

    python benchmarks/bench_allocator.py            # 2 rounds: about two minutes
    python benchmarks/bench_allocator.py --quick    # 1 round, fewer updates

Only glibc has these thresholds; elsewhere the benchmark reports itself skipped.
`run(quick=False) -> dict` is what `benchmarks/run_all.py` imports; its "ratios" are its table lines.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_step import measure, summarise  # noqa: E402  (one child process for every training arm)

SHAPES = {"bios-tiny": (8, 128), "bios-cpu": (8, 256)}  # the Figure-1 presets' batches
DEPTH = 4
PEOPLE = 40


@dataclass(frozen=True)
class Settings:
    rounds: int
    updates: dict[str, int]
    warmup: int


FULL = Settings(rounds=2, updates={"bios-tiny": 40, "bios-cpu": 10}, warmup=4)
QUICK = Settings(rounds=1, updates={"bios-tiny": 20, "bios-cpu": 7}, warmup=3)
STEPS = {"fused": False, "plain": True}  # step -> plain_loss


def _row(name, measured, context) -> dict:
    return {"name": name, "measured": measured, "target": None, "op": ">=", "ok": None, "context": context}


def table_rows(report: dict) -> list[dict]:
    rows = []
    arms = report["arms"]

    def compared(preset: str, step: str) -> tuple[float, str]:
        tuned, default = arms[f"{preset} {step} tuned"], arms[f"{preset} {step} default"]
        return default["cpu_s"] / tuned["cpu_s"], (
            f"{1e3 * default['cpu_s']:.1f} vs {1e3 * tuned['cpu_s']:.1f} ms, page faults "
            f"{default['minor_faults']:,.0f} vs {tuned['minor_faults']:,.0f}, kernel "
            f"{1e3 * default['kernel_s']:.1f} vs {1e3 * tuned['kernel_s']:.1f} ms per update"
        )

    for preset in SHAPES:
        ratio, now = compared(preset, "fused")
        before, then = compared(preset, "plain")
        rows.append(
            _row(f"allocator {preset} CPU per update, glibc defaults / thresholds set, K={DEPTH}", ratio,
                 f"{now}; before the fused head: {before:.2f}x, {then}")
        )  # fmt: skip
    return rows


def run(quick: bool = False) -> dict:
    from biosrecall.allocator import tunable
    from biosrecall.bios import generate_dataset

    s = QUICK if quick else FULL
    report = {"name": "allocator", "settings": asdict(s), "depth": DEPTH, "people": PEOPLE}
    if not tunable():
        report["ratios"] = [_row("allocator: benchmark skipped", None, "not glibc: no thresholds to set")]
        return report
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        data = generate_dataset(workdir / "data", people=PEOPLE, seed=0)
        arms = {}
        for preset, (batch, seq_len) in SHAPES.items():
            for step, plain_loss in STEPS.items():
                base = {
                    "arm": "package", "data": str(data), "preset": preset, "depth": DEPTH, "batch": batch,
                    "seq_len": seq_len, "updates": s.updates[preset], "warmup": s.warmup,
                    "plain_loss": plain_loss,
                }  # fmt: skip
                arms[f"{preset} {step} tuned"] = {**base, "tune_malloc": True}
                arms[f"{preset} {step} default"] = {**base, "tune_malloc": False}
        per_round = measure(arms, workdir, s.rounds)
    report["rounds"] = per_round
    report["arms"] = {name: summarise(results) for name, results in per_round.items()}
    report["ratios"] = table_rows(report)
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1 round of fewer updates")
    report = run(quick=parser.parse_args().quick)
    for row in report["ratios"]:
        measured = "-" if row["measured"] is None else f"{row['measured']:.2f}"
        print(f"{row['name']:<72}{measured:>7}  {row['context']}")


if __name__ == "__main__":
    main()
