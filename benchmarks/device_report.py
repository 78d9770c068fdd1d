"""The device check's report: its measurements as table rows (the benchmarks' one table format) and the
JSON written to `benchmarks/results/<date>-<gpu>.json`. `device_check.py` measures; this formats.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from run_all import row

from biosrecall.atomic import atomic_write_text

DEPTHS = (1, 4, 16)  # serving depths the throughput rows cover
MEMORY_DEPTH = 16  # the depth of the memory rows


def _gib(value: int | None) -> str:
    return "-" if value is None else f"{value / 2**30:.1f} GiB"


def throughput_rows(entries: list[dict]) -> list[dict]:
    rows = []
    for e in entries:
        mode = "compiled" if e["compiled"] else "eager"
        rows.append(row(f"MFU, K={e['depth']}, {mode}", e["mfu"],
                        context=f"{e['tokens_per_s']:,.0f} tokens/s, {e['seconds']:.3f} s/update; "
                        f"first update {e['first_update_s']:.0f} s"))  # fmt: skip
    by_key = {(e["compiled"], e["depth"]): e for e in entries}
    for depth in DEPTHS:
        if (True, depth) in by_key and (False, depth) in by_key:
            speedup = by_key[(True, depth)]["tokens_per_s"] / by_key[(False, depth)]["tokens_per_s"]
            rows.append(row(f"compile speed-up, K={depth}", speedup, context="tokens/s compiled / eager"))
    return rows


def memory_rows(memory: dict, batch: dict) -> list[dict]:
    peaks = memory["peak_bytes"]
    full = peaks["full"]
    rows = []
    for label in [key for key in peaks if key != "full"]:
        ratio = None if full is None or peaks[label] is None else peaks[label] / full
        rows.append(row(f"peak memory K={MEMORY_DEPTH}, {label} / full", ratio,
                        context=f"{_gib(peaks[label])} vs {_gib(full)}, micro-batch {memory['micro_batch']}"))  # fmt: skip
    capped = " (the search's cap)" if batch["capped"] else ""
    rows.append(row(f"largest micro-batch at K={MEMORY_DEPTH}", batch["largest_micro_batch"],
                    context=f"sequences per GPU, full backprop{capped}"))  # fmt: skip
    return rows


def schedule_rows(schedules: dict) -> list[dict]:
    return [
        row(f"wall saving / modeled saving, {c['schedule'].split(',finish')[0].removeprefix('fixed_first:')}",
            c["measured_saving"] / c["modeled_saving"], 0.9,
            context=f"measured {100 * c['measured_saving']:.1f}% vs modeled {100 * c['modeled_saving']:.1f}% "
            f"over {schedules['updates']} updates")
        for c in schedules["comparisons"]
    ]  # fmt: skip


def eval_rows(e: dict) -> list[dict]:
    return [
        row(f"all-depth pass speed-up (K=1..{e['depths']})", e["per_depth_s"] / e["sweep_s"],
            context=f"{e['per_depth_s']:.2f} s per-K vs {e['sweep_s']:.2f} s"),
        row("all-depth argmax == per-K argmax (fraction)", e["min_argmax_agreement"], 1.0,
            context=f"largest logit difference {e['max_abs_logit_difference']:.2e}"),
    ]  # fmt: skip


def nccl_rows(n: dict) -> list[dict]:
    if "skipped" in n:
        return [{**row("NCCL 2-rank all-reduce", None), "context": f"skipped: {n['skipped']}"}]
    return [
        row("NCCL 2-rank all-reduce correct", n["correct"], True, context=f"{n['bus_gb_per_s']:.0f} GB/s")
    ]


ROW_BUILDERS = {  # rows -> (the measurements they read, how)
    "throughput": (("throughput",), lambda r: throughput_rows(r["throughput"])),
    "memory": (("memory", "largest_batch"), lambda r: memory_rows(r["memory"], r["largest_batch"])),
    "schedules": (("schedules",), lambda r: schedule_rows(r["schedules"])),
    "eval": (("eval",), lambda r: eval_rows(r["eval"])),
    "nccl": (("nccl",), lambda r: nccl_rows(r["nccl"])),
}


def table_rows(results: dict) -> list[dict]:
    """The table of `measure_all`'s results: one row per number, a failed measurement as one row."""
    rows = [row("bf16 matmul peak (TFLOP/s)", results["matmul_peak"] / 1e12)]
    for needs, build in ROW_BUILDERS.values():
        failed = [name for name in needs if "error" in results[name]]
        for name in failed:
            last = results[name]["error"].strip().splitlines()[-1]
            rows.append({**row(f"{name}: measurement failed", False, True), "context": last})
        if not failed:
            rows.extend(build(results))
    return rows


def gpu_slug(name: str) -> str:
    """e.g. "nvidia-h200" from "NVIDIA H200": the result file's name."""
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")[:40].rstrip("-") or "gpu"


def write_report(report: dict, results_dir: Path) -> Path:
    """`<results_dir>/<date>-<gpu>.json`, written atomically."""
    path = Path(results_dir) / f"{report['date']}-{gpu_slug(report['gpu'])}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(report, indent=2, default=str) + "\n")
    return path
