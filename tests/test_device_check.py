"""`scripts/device-check.sh`, the CPU side: the no-GPU exit, every measurement run at a CPU size, and
the table and JSON file written from (fake) GPU measurements.

    pytest -q tests/test_device_check.py
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def device_check():
    """benchmarks/device_check.py, imported by path (benchmarks/ is not a package)."""
    path = ROOT / "benchmarks" / "device_check.py"
    spec = importlib.util.spec_from_file_location("device_check", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["device_check"] = module
    spec.loader.exec_module(module)
    return module


def test_without_a_gpu_the_script_exits_2_with_one_line():
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "PYTHON": sys.executable}
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "device-check.sh")], capture_output=True, text=True, env=env
    )
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.strip().splitlines() == [
        "device-check: no CUDA GPU on this machine (torch.cuda.is_available() is false); nothing measured"
    ]


def _fake_results(device_check) -> dict:
    """What a one-GPU run returns, with made-up numbers (no GPU is measured here)."""
    throughput = [
        {"compiled": compiled, "depth": depth, "seconds": 0.5, "first_update_s": 60.0 if compiled else 1.0,
         "tokens_per_s": (2.0 if compiled else 1.0) * 1000, "mfu": 0.2}
        for compiled in (False, True) for depth in device_check.DEPTHS
    ]  # fmt: skip
    comparisons = [
        {"schedule": spec, "modeled_saving": 0.4, "measured_saving": 0.38}
        for spec in device_check.FIXED_FIRST
    ]
    return {
        "matmul_peak": 7.5e14,
        "throughput": throughput,
        "memory": {"depth": 16, "micro_batch": 4,
                   "peak_bytes": {"full": 40 * 2**30, "backprop_8": 24 * 2**30, "checkpointing": 10 * 2**30}},
        "largest_batch": {"depth": 16, "largest_micro_batch": 12, "capped": False},
        "schedules": {"updates": 300, "runs": {}, "comparisons": comparisons},
        "eval": {"depths": 64, "sweep_s": 1.0, "per_depth_s": 20.0, "max_abs_logit_difference": 0.0,
                 "min_argmax_agreement": 1.0},
        "nccl": {"skipped": "1 GPU(s)"},
    }  # fmt: skip


def test_table_and_json_from_fake_measurements(device_check, tmp_path):
    results = _fake_results(device_check)
    results["nccl"] = {"error": "Traceback ...\nRuntimeError: NCCL error: unhandled system error"}
    rows = device_check.table_rows(results)
    by_name = {r["name"]: r for r in rows}
    assert by_name["bf16 matmul peak (TFLOP/s)"]["measured"] == 750
    assert by_name["compile speed-up, K=16"]["measured"] == 2.0
    assert by_name["peak memory K=16, checkpointing / full"]["measured"] == 0.25
    assert by_name["peak memory K=16, backprop_8 / full"]["measured"] == 0.6
    assert by_name["largest micro-batch at K=16"]["measured"] == 12
    assert by_name["wall saving / modeled saving, k0=2,switch=0.8"]["measured"] == pytest.approx(0.95)
    assert by_name["all-depth pass speed-up (K=1..64)"]["measured"] == 20
    failed = by_name["nccl: measurement failed"]
    assert failed["ok"] is False and failed["context"] == "RuntimeError: NCCL error: unhandled system error"
    table = device_check.format_table(rows)
    assert "MFU, K=4, compiled" in table and "10.0 GiB vs 40.0 GiB" in table

    report = {"date": "2026-12-01", "gpu": "NVIDIA H200", "results": results, "rows": rows}
    path = device_check.write_report(report, tmp_path / "results")
    assert path == tmp_path / "results" / "2026-12-01-nvidia-h200.json"
    assert json.loads(path.read_text())["rows"] == json.loads(json.dumps(rows))


def test_every_measurement_runs_at_a_cpu_size(device_check, monkeypatch):
    """The measurement code itself, on a tiny model and a CPU (no memory counts there: None)."""
    shape = device_check.Shape(
        preset="lm-tiny", micro_batch=2, seq_len=16, warmup_updates=1, timed_updates=1, max_batch=3,
        schedule_updates=12, schedule_batch=1, eval_batch=2, eval_positions=3, eval_depth=5,
        matmul_size=64, compile=False,
    )  # fmt: skip
    cpu = torch.device("cpu")
    # Compiling with inductor takes a minute on a CPU: throughput is measured eager only here.
    eager_only = lambda s, d, m: device_check.measure_throughput(s, d, m["matmul_peak"], modes=(False,))  # noqa: E731
    monkeypatch.setitem(device_check.MEASUREMENTS, "throughput", eager_only)
    results = device_check.measure_all(shape, cpu)
    assert [name for name, value in results.items() if isinstance(value, dict) and "error" in value] == []
    assert [e["depth"] for e in results["throughput"]] == list(device_check.DEPTHS)
    assert results["memory"]["peak_bytes"] == {"full": None, "backprop_8": None, "checkpointing": None}
    assert results["largest_batch"] == {"depth": 16, "largest_micro_batch": 3, "capped": True}
    assert results["eval"]["min_argmax_agreement"] == 1.0
    assert results["nccl"] == {"skipped": f"{torch.cuda.device_count()} GPU(s)"}
    assert len(device_check.table_rows(results)) >= 10
