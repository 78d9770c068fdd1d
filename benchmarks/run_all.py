"""`make bench`: run every `benchmarks/bench_*.py`, print one table of ratios, save it with the machine.

Absolute times on a shared machine vary from minute to minute; ratios measured side by side in the
same run hold, so the table shows ratios (measured, target, ok) and keeps absolute figures as context.

    python benchmarks/run_all.py                  # every benchmark, full size (the `make bench` entry)
    python benchmarks/run_all.py --quick          # small shapes: a few minutes, for a smoke check
    python benchmarks/run_all.py --only train,eval --threads 2   # an idle machine: every core

A full run writes `benchmarks/results/<date>-<host-kind>.json` and `benchmarks/results/latest.json`
(machine description, load average before and after, the table, every benchmark's raw result); quick
or partial runs write `<date>-<host-kind>-quick.json` / `-partial-<names>.json` and leave `latest.json` alone.

The machine description holds the CPU model and its instruction-set flags, and the run measures its
own peaks first (`measure_peaks`: fp32 and bf16 matmul rates on one thread), so every ratio to a peak
in the table is to a peak measured in the same run on the same machine, never to a constant. Like
every process biosrecall starts, the run sets malloc's thresholds first (`biosrecall.allocator`), so
the benchmarks that train in this process measure the trainer as `biosrecall train` runs it.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import platform
import re
import sys
import time
import traceback
from pathlib import Path

from biosrecall.allocator import tune_malloc
from biosrecall.atomic import atomic_write_text  # light: torch is imported only with the benchmarks

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
# One thread unless asked: a ratio needs no more, and on a shared 2-core machine a 2-thread pool
# swings by 10x or more whenever another process holds a core (measured: 1.1 vs 15 GFLOP/s for the
# same update minutes apart), while one thread stays within a few percent.
DEFAULT_THREADS = 1
FAR_ABOVE = 10.0  # batch assembly must outpace the trainer's consumption by this factor
# Flags that decide which kernels torch's matmuls and vector code can use (the rest are recorded too).
ISA_FLAGS = (
    "avx2",
    "fma",
    "avx512f",
    "avx512_bf16",
    "avx512_fp16",
    "avx_vnni",
    "amx_tile",
    "amx_bf16",
    "amx_int8",
)
PEAK_SIZES = (1024, 2048)


def load_benchmarks(only: set[str] | None) -> dict:
    """Import each `bench_*.py` by path (they also run as scripts, so they are not a package)."""
    sys.path.insert(0, str(HERE))
    modules = {}
    for path in sorted(HERE.glob("bench_*.py")):
        name = path.stem.removeprefix("bench_")
        if only and name not in only:
            continue
        spec = importlib.util.spec_from_file_location(path.stem, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[path.stem] = module  # dataclasses look their module up while it executes
        spec.loader.exec_module(module)
        modules[name] = module
    return modules


def run_benchmarks(modules: dict, quick: bool) -> dict:
    """Each benchmark's result, or its error: one failing benchmark must not hide the others."""
    results = {}
    for name, module in modules.items():
        print(f"running {name} ...", file=sys.stderr, flush=True)
        start = time.perf_counter()
        try:
            results[name] = {"result": module.run(quick=quick)}
        except Exception:  # report and continue; the table marks it as failed
            results[name] = {"error": traceback.format_exc()}
        results[name]["seconds"] = round(time.perf_counter() - start, 1)
        print(f"  {name}: {results[name]['seconds']} s", file=sys.stderr, flush=True)
    return results


def row(name, measured, target=None, op=">=", context="") -> dict:
    if target is None:
        ok = None
    elif isinstance(measured, bool):
        ok = measured == target
    else:
        ok = measured >= target if op == ">=" else measured <= target
    return {"name": name, "measured": measured, "target": target, "op": op, "ok": ok, "context": context}


def data_rows(r: dict) -> list[dict]:
    return [
        row("data batch tokens/s / 1M target", r["tokens_per_s"] / r["target_tokens_per_s"], 1.0,
            context=f"{r['tokens_per_s'] / 1e6:.2f}M tokens/s, {r['batch_ms']} ms per {r['batch_shape']} "
            f"batch; generate {r['people']:,} people {r['generate_s']} s"),
        row("data LM shard first open, sha256 verified / not", r["shard_verify_ratio"],
            context=f"{r['shard_verified_open_s']} vs {r['shard_open_s']} s for {r['shard_tokens']:,} "
            f"tokens; {r['shard_verify_gb_per_s']} GB/s hashed (--no-verify skips it)"),
    ]  # fmt: skip


def eval_rows(r: dict) -> list[dict]:
    return [
        row("eval all-depth sweep speed-up (K=1..64)", r["speedup"], r["target_speedup"],
            context=f"{r['per_depth_seconds']} s per-K vs {r['sweep_seconds']} s sweep; "
            f"layer-count ratio {r['layer_ratio']}"),
        row("eval sweep results == per-K results", r["identical"], True, context=f"{r['rows']} eval rows"),
    ]  # fmt: skip


def model_rows(r: dict) -> list[dict]:
    return [
        row(f"model fwd+bwd FLOP/s / matmul peak, K={e['depth']}", e["fraction_of_peak"],
            context=f"{e['flops_per_second'] / 1e9:.1f} of {r['matmul_peak_flops'] / 1e9:.1f} GFLOP/s, "
            f"batch {r['batch']} x {r['seq_len']}, no optimizer or data")
        for e in r["results"]
    ]  # fmt: skip


def cross_rows(results: dict) -> list[dict]:
    """Ratios between benchmarks: batch assembly against the fastest trainer consumption (K = 1)."""
    data, train = (results.get(k, {}).get("result") for k in ("data", "train"))
    if not data or not train:
        return []
    fastest = max(e["tokens_per_s"] for e in train["utilisation"]["depths"])
    return [
        row("data tokens/s / trainer tokens/s at K=1", data["tokens_per_s"] / fastest, FAR_ABOVE,
            context=f"trainer consumes {fastest:,.0f} tokens/s")
    ]  # fmt: skip


ADAPTERS = {"data": data_rows, "eval": eval_rows, "model": model_rows}


def table_rows(results: dict) -> list[dict]:
    rows = []
    for name, outcome in results.items():
        if "error" in outcome:
            last = outcome["error"].strip().splitlines()[-1]
            rows.append({**row(f"{name}: benchmark failed", False, True), "context": last})
        elif name in ADAPTERS:
            rows.extend(ADAPTERS[name](outcome["result"]))
        elif isinstance(outcome["result"].get("ratios"), list):  # a benchmark that builds its own rows
            rows.extend(outcome["result"]["ratios"])
    return rows + cross_rows(results)


def _fmt(value) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if value is None:
        return "-"
    return f"{value:.3g}" if abs(value) < 1000 else f"{value:,.0f}"


def format_table(rows: list[dict]) -> str:
    """One fixed-width table; `ok` is "-" for rows reported without a target."""
    lines = [("benchmark", "measured", "target", "ok", "context")]
    for r in rows:
        target = (
            "-"
            if r["target"] is None
            else f"{'' if isinstance(r['target'], bool) else r['op'] + ' '}{_fmt(r['target'])}"
        )
        ok = "-" if r["ok"] is None else ("yes" if r["ok"] else "NO")
        lines.append((r["name"], _fmt(r["measured"]), target, ok, r["context"]))
    widths = [max(len(line[i]) for line in lines) for i in range(4)]
    out = [
        f"{a:<{widths[0]}}  {b:>{widths[1]}}  {c:<{widths[2]}}  {d:<{widths[3]}}  {e}".rstrip()
        for a, b, c, d, e in lines
    ]
    out.insert(1, "-" * max(len(line) for line in out))
    return "\n".join(out)


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _cpu_flags() -> list[str]:
    """The CPU's feature flags (Linux: /proc/cpuinfo), sorted; empty where they cannot be read."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return sorted(line.split(":", 1)[1].split())
    except OSError:
        pass
    return []


def measure_peaks() -> dict:
    """Dense square matmul rates on this machine, now, with the run's threads: fp32 (the peak every
    FLOP/s ratio here is read against) and bf16 (what autocast could use: AMX tiles where the CPU has
    them), each the best of `PEAK_SIZES`."""
    sys.path.insert(0, str(HERE))
    import torch
    from bench_model import matmul_peak

    fp32 = {size: matmul_peak(size, 5) for size in PEAK_SIZES}
    bf16 = {size: matmul_peak(size, 5, torch.bfloat16) for size in PEAK_SIZES}
    return {
        "fp32_flops": max(fp32.values()),
        "bf16_flops": max(bf16.values()),
        "bf16_over_fp32": max(bf16.values()) / max(fp32.values()),
        "by_size": {"fp32": fp32, "bf16": bf16},
    }


def _memory_gb() -> float | None:
    try:
        kb = int(Path("/proc/meminfo").read_text().split("MemTotal:")[1].split()[0])
    except (OSError, IndexError, ValueError):
        return None
    return round(kb / 1024**2, 1)


def describe_machine() -> dict:
    import numpy
    import torch

    cores = os.cpu_count() or 0
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else cores
    flags = _cpu_flags()
    return {
        "cpu_model": _cpu_model(),
        "isa": [flag for flag in ISA_FLAGS if flag in flags],
        "cpu_flags": flags,
        "logical_cores": cores,
        "usable_cores": usable,
        "memory_gb": _memory_gb(),
        "torch_threads": torch.get_num_threads(),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "torch": torch.__version__,
        "numpy": numpy.__version__,
        "python": platform.python_version(),
        "platform": f"{platform.system()} {platform.machine()}",
    }


def host_kind(machine: dict) -> str:
    """e.g. "amd-epyc-2c": enough to tell machines apart without naming this one."""
    slug = re.sub(r"[^a-z0-9]+", "-", machine["cpu_model"].lower()).strip("-")
    return f"{slug[:40].rstrip('-')}-{machine['usable_cores']}c"


def write_results(report: dict, quick: bool, partial: bool) -> list[Path]:
    """A partial run's file names its benchmarks, so partial runs of one day do not replace each other."""
    RESULTS.mkdir(exist_ok=True)
    suffix = "-quick" if quick else f"-partial-{'-'.join(sorted(report['benchmarks']))}" if partial else ""
    name = f"{report['date']}-{host_kind(report['machine'])}{suffix}.json"
    text = json.dumps(report, indent=2, default=str) + "\n"
    paths = [RESULTS / name] + ([] if quick or partial else [RESULTS / "latest.json"])
    for path in paths:
        atomic_write_text(path, text)  # an interrupted run never leaves a truncated latest.json
    return paths


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="every benchmark's quick mode")
    parser.add_argument("--only", default="", help="comma-separated names, e.g. train,eval")
    parser.add_argument(
        "--threads",
        type=int,
        default=int(os.environ.get("OMP_NUM_THREADS") or DEFAULT_THREADS),
        help="CPU threads for torch [$OMP_NUM_THREADS, else 1]",
    )
    args = parser.parse_args()
    # Before torch is imported, so every benchmark and its subprocesses honour it.
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    malloc_tuned = tune_malloc()
    only = {name.strip() for name in args.only.split(",") if name.strip()} or None
    modules = load_benchmarks(only)
    report = {
        "date": datetime.date.today().isoformat(),
        "quick": args.quick,
        "machine": describe_machine(),
        "malloc_tuned": malloc_tuned,
        "load_average_before": list(os.getloadavg()),
        "peaks": measure_peaks(),
    }
    start = time.perf_counter()
    results = run_benchmarks(modules, args.quick)
    report["seconds"] = round(time.perf_counter() - start, 1)
    report["load_average_after"] = list(os.getloadavg())
    report["rows"] = table_rows(results)
    report["benchmarks"] = results
    machine = report["machine"]
    print(
        f"\n{report['date']}  {machine['cpu_model']}, {machine['usable_cores']} cores, "
        f"torch {machine['torch']} ({machine['torch_threads']} threads), {report['seconds']:.0f} s, "
        f"load average {report['load_average_before'][0]:.1f} -> {report['load_average_after'][0]:.1f}"
    )
    peaks = report["peaks"]
    print(
        f"CPU flags: {' '.join(machine['isa']) or 'none of ' + ', '.join(ISA_FLAGS)}; measured now, "
        f"{machine['torch_threads']} thread(s): fp32 matmul peak {peaks['fp32_flops'] / 1e9:.1f} GFLOP/s, "
        f"bf16 {peaks['bf16_flops'] / 1e9:.1f} GFLOP/s ({peaks['bf16_over_fp32']:.1f}x)"
    )
    print(format_table(report["rows"]))
    for path in write_results(report, args.quick, partial=only is not None):
        print(f"wrote {path.relative_to(HERE.parent)}")


if __name__ == "__main__":
    main()
