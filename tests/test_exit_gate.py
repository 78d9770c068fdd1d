"""The learned exit gate (`biosrecall gate train`, `--exit gate:DELTA`): it never sees an evaluation
template, its calibrated threshold loses at most delta on the calibration split, its FLOPs, the CLI end
to end, and the one-line refusals of bad input.

    pytest -q tests/test_exit_gate.py

One tiny world per module: a 20-person dataset whose evaluation prompts carry a planted marker word
(so that a leak would show), a bios-tiny run of 60 updates on it, and the final checkpoint's gate.
"""

from __future__ import annotations

import json
import re
import shutil

import numpy as np
import pytest
import torch
from hf_fixtures import one_error_line, run_cli

from biosrecall.cli import main
from biosrecall.compute.flops import GATE_CHECK_FLOPS_PER_WIDTH, serving_flops
from biosrecall.errors import BiosrecallError
from biosrecall.eval.exits import DEFAULT_SWEEPS, Gate, check_servable, parse_exits
from biosrecall.eval.gate import binomial_cdf, calibrate, exit_depths_at
from biosrecall.paths import TEMPLATES_DIR
from biosrecall.train.checkpoint_files import load_checkpoint
from biosrecall.train.run_folder import GATE_CALIBRATION_FILE, GATE_RECORD_FILE, RunFolder

MARKER = "Zqxmark"


def run(capsys, *args) -> tuple[int, str, str]:
    return run_cli(args, capsys)


def _quiet(*args) -> None:
    try:
        main([str(a) for a in args])
    except SystemExit as exc:
        assert exc.code == 0, args


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """(root, dataset folder, run folder) with the final checkpoint's gate fitted."""
    root = tmp_path_factory.mktemp("gate")
    templates = root / "templates"
    shutil.copytree(TEMPLATES_DIR, templates)
    eval_file = templates / "eval.toml"
    # Every evaluation prompt starts with the marker: it also enters training as "<prompt> {value}."
    eval_file.write_text(re.sub(r'^(\s+)"', rf'\1"{MARKER} ', eval_file.read_text(), flags=re.M))
    _quiet("generate", "--out", root / "data", "--people", 20, "--seed", 0, "--templates", templates)
    _quiet("train", "--data", root / "data", "--out", root / "run", "--preset", "bios-tiny",
           "--budget-of", "fixed:4:60", "--batch-size", 8)  # fmt: skip
    _quiet("gate", "train", root / "run")
    return root, root / "data", root / "run"


def _record(run_dir, label="1.0") -> dict:
    return json.loads((RunFolder(run_dir).gate_dir(label) / GATE_RECORD_FILE).read_text())


# ---- the gate never sees an evaluation template ----------------------------------------------------


def test_the_gate_never_sees_an_evaluation_template(world, monkeypatch):
    from biosrecall.bios import BatchSampler, load_dataset
    from biosrecall.eval import gate
    from biosrecall.train.run_folder import RunFolder

    _, data, run_dir = world
    dataset = load_dataset(data)
    from biosrecall.bios.tokenizer import split_words

    marker = dataset.tokenizer.token_to_id(split_words(MARKER)[0])
    assert marker is not None
    # The plant took: the marker is in every evaluation prompt and in the biographies the run trained on.
    assert (dataset.eval_set().tokens == marker).any(axis=1).all()
    sampler = BatchSampler(dataset, batch_size=8, seq_len=128)
    assert any((sampler.batch(np.random.default_rng(i)) == marker).any() for i in range(20))
    seen = []
    real = gate.trace_queries
    monkeypatch.setattr(gate, "trace_queries", lambda model, q, *a: seen.append(q) or real(model, q, *a))
    model, _ = load_checkpoint(RunFolder(run_dir).select_checkpoint("final")[1])
    gate.fit_gate(model, dataset, {"seed": 0, "confidence": 0.95, "max_depth": 8})
    assert len(seen) == 2 and all(len(q) for q in seen)  # the fitting and the calibration queries
    for queries in seen:
        assert not (queries.tokens == marker).any()
        evaluation = dataset.eval_set()
        prompts = {
            tuple(row[1:start]) for row, start in zip(evaluation.tokens, evaluation.answer_start, strict=True)
        }
        for row, start in zip(queries.tokens, queries.answer_start, strict=True):
            assert tuple(row[1:start]) not in prompts


# ---- calibration ------------------------------------------------------------------------------------


def test_binomial_cdf_matches_the_sum_of_its_terms():
    from math import comb

    for n, k, p in [(30, 0, 0.1), (50, 3, 0.05), (200, 17, 0.1), (10, 10, 0.5)]:
        exact = sum(comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(k + 1))
        assert binomial_cdf(k, n, p) == pytest.approx(exact, rel=1e-9)


@pytest.mark.parametrize("delta", [0.02, 0.05, 0.1, 0.2])
def test_the_calibrated_threshold_loses_at_most_delta_on_the_calibration_split(delta):
    rng = np.random.default_rng(1)
    depths, queries = 8, 2000
    # A query settles at a random depth: exact from there on; the gate's logit rises with depth, noisily.
    settles = rng.integers(1, depths + 1, queries)
    exact = np.arange(1, depths + 1)[:, None] >= settles[None, :]
    scores = (np.arange(1, depths + 1)[:, None] - settles[None, :]) + rng.normal(0, 1.5, (depths, queries))
    result = calibrate(scores, exact, depths, delta, alpha=0.05)
    assert result.threshold is not None and result.mean_depth < depths
    served = exit_depths_at(scores, result.threshold, depths)
    lost = exact[depths - 1] & ~exact[served - 1, np.arange(queries)]
    assert lost.sum() == result.losses and lost.mean() <= delta
    assert result.p_value <= 0.05


def test_too_few_calibration_queries_serve_at_the_reference_depth():
    exact = np.ones((4, 10), dtype=bool)
    result = calibrate(np.zeros((4, 10)), exact, 4, 0.05, alpha=0.05)  # 0.95^10 > 0.05: nothing passes
    assert result.threshold is None and result.mean_depth == 4.0


def test_the_stored_gate_loses_at_most_delta_on_its_calibration_split(world):
    _, _, run_dir = world
    record = _record(run_dir)
    with np.load(RunFolder(run_dir).gate_dir("1.0") / GATE_CALIBRATION_FILE) as arrays:
        scores, exact = arrays["scores"], arrays["exact"]
    reference = record["reference_depth"]
    assert [row["delta"] for row in record["calibration"]["deltas"]] == list(DEFAULT_SWEEPS["gate"])
    for row in record["calibration"]["deltas"]:
        served = exit_depths_at(scores, row["threshold"], reference)
        lost = exact[reference - 1] & ~exact[served - 1, np.arange(exact.shape[1])]
        assert lost.sum() == row["losses"] and lost.mean() <= row["delta"]
    for key in ("seed", "checkpoint_hash", "model_hash", "data_hash", "versions", "weights", "target"):
        assert record[key] is not None


# ---- FLOPs --------------------------------------------------------------------------------------------


def test_a_gate_check_costs_layernorm_and_linear_at_each_checked_position():
    from biosrecall.model import get_preset

    cfg = get_preset("bios-tiny", vocab_size=100)
    base = serving_flops(cfg, 15, 4, 2)
    assert (
        serving_flops(cfg, 15, 4, 2, gate_checks=3) - base == 3 * 2 * GATE_CHECK_FLOPS_PER_WIDTH * cfg.d_model
    )
    # The Linear part as torch counts it: 2 d per position
    from torch.utils.flop_counter import FlopCounterMode

    linear = torch.nn.Linear(cfg.d_model, 1)
    with FlopCounterMode(display=False) as counter:
        linear(torch.zeros(2, cfg.d_model))
    assert counter.get_total_flops() == 2 * 2 * cfg.d_model


def test_query_flops_charges_the_gate_its_checks():
    from biosrecall.eval.gate import GateExit, GateHead
    from biosrecall.eval.scoring import query_flops
    from biosrecall.model import get_preset

    cfg = get_preset("bios-tiny", vocab_size=100)
    gate = GateExit(0.1, 0.0, 4, GateHead(cfg.d_model, 3))
    lengths, checked, depths = np.array([15, 15, 15]), np.array([2, 2, 2]), np.array([1, 3, 4])
    flops = query_flops(cfg, lengths, checked, depths, gate)
    expected = [serving_flops(cfg, 15, d, 2, gate_checks=min(d, 3)) for d in (1, 3, 4)]
    assert flops.tolist() == expected


# ---- the CLI end to end ---------------------------------------------------------------------------------


def test_gate_train_then_recall_curve_and_ask_serve_with_it(world, capsys):
    import pandas as pd

    root, data, run_dir = world
    out = root / "served"
    code, stdout, err = run(capsys, "recall-curve", run_dir, "--checkpoint", "final", "--exit",
                            "gate:0.1,kl:1e-3", "--out", out, "--max-depth", 16)  # fmt: skip
    assert code == 0, err
    frontier = pd.read_parquet(out / "exit_frontier.parquet")
    gate = frontier[frontier["criterion"] == "gate:0.1"].iloc[0]
    reference = _record(run_dir)["reference_depth"]
    assert gate["kind"] == "gate" and 1 <= gate["mean_depth"] <= reference
    name = pd.read_parquet(data / "people.parquet")["name"][0]
    code, stdout, err = run(capsys, "ask", run_dir, f"{MARKER} {name} was born in", "--exit", "gate:0.1")
    assert code == 0, err
    depths = [int(d) for d in re.findall(r"depth (\d+)", stdout)]
    assert depths and all(1 <= d <= reference for d in depths)


def test_a_gate_with_a_deeper_reference_is_checked_per_iteration(world, capsys, tmp_path):
    """A gate fitted at reference depth 4 (the tiny run's best is depth 1): the threshold is a real
    one, the frontier charges its checks, and ask stops within the reference depth."""
    import pandas as pd

    from biosrecall.bios import load_dataset
    from biosrecall.eval.gate import fit_gate, model_hash, write_gate
    from biosrecall.files import file_sha256

    root, data, run_dir = world
    label, path = RunFolder(run_dir).select_checkpoint("0.8")
    model, meta = load_checkpoint(path)
    record, arrays = fit_gate(
        model, load_dataset(data), {"seed": 1, "confidence": 0.95, "max_depth": 8, "reference": 4}
    )
    record.update(checkpoint=label, checkpoint_hash=file_sha256(path / "model.safetensors"),
                  model_hash=model_hash(meta), data_hash=load_dataset(data).manifest_hash)  # fmt: skip
    write_gate(RunFolder(run_dir).gate_dir(label), record, arrays)
    assert record["reference_depth"] == 4
    code, _, err = run(capsys, "recall-curve", run_dir, "--checkpoint", label, "--exit", "gate",
                       "--out", tmp_path / "deep", "--max-depth", 8)  # fmt: skip
    assert code == 0, err
    frontier = pd.read_parquet(tmp_path / "deep" / "exit_frontier.parquet")
    gates = frontier[frontier["kind"] == "gate"]
    assert len(gates) == len(DEFAULT_SWEEPS["gate"]) and (gates["mean_depth"] <= 4).all()
    code, stdout, err = run(
        capsys, "ask", run_dir, "Zqxmark was born in", "--exit", "gate:0.2", "--checkpoint", label
    )
    assert code == 0, err
    assert all(1 <= int(d) <= 4 for d in re.findall(r"depth (\d+)", stdout))


# ---- bad input: one error line, exit 2, nothing written --------------------------------------------------


def test_gate_on_a_checkpoint_without_a_gate_names_the_command(world, capsys, tmp_path):
    _, _, run_dir = world
    out = tmp_path / "out"
    code, _, err = run(
        capsys, "recall-curve", run_dir, "--checkpoint", "0.25", "--exit", "gate:0.1", "--out", out
    )
    one_error_line(code, err, "no exit gate for checkpoint 0.25", "biosrecall gate train")
    assert not out.exists()
    code, _, err = run(capsys, "ask", run_dir, "was born in", "--exit", "gate:0.1", "--checkpoint", "0.25")
    one_error_line(code, err, "biosrecall gate train")


def test_a_gate_fitted_on_another_checkpoint_or_model_is_refused(world, capsys, tmp_path):
    _, _, run_dir = world
    moved = RunFolder(run_dir).gate_dir("0.45")
    shutil.copytree(RunFolder(run_dir).gate_dir("1.0"), moved)
    try:
        code, _, err = run(capsys, "recall-curve", run_dir, "--checkpoint", "0.45", "--exit", "gate:0.1",
                           "--out", tmp_path / "a")  # fmt: skip
        one_error_line(code, err, "fitted on another checkpoint")
        record = json.loads((moved / GATE_RECORD_FILE).read_text())
        record["model_hash"] = "0" * 64  # as a gate fitted on another architecture records
        (moved / GATE_RECORD_FILE).write_text(json.dumps(record))
        code, _, err = run(
            capsys, "ask", run_dir, "was born in", "--exit", "gate:0.1", "--checkpoint", "0.45"
        )
        one_error_line(code, err, "fitted on another model")
        assert not (tmp_path / "a").exists()
    finally:
        shutil.rmtree(moved)


@pytest.mark.parametrize(
    "text", ["gate:0", "gate:1", "gate:1.5", "gate:-0.1", "gate:nan", "gate:inf", "gate:0.\u0661"]
)
def test_a_delta_outside_zero_one_is_refused(world, capsys, tmp_path, text):
    _, _, run_dir = world
    with pytest.raises(BiosrecallError):
        parse_exits(text)
    code, _, err = run(
        capsys, "recall-curve", run_dir, "--checkpoint", "final", "--exit", text, "--out", tmp_path / "o"
    )
    one_error_line(code, err, text)
    assert not (tmp_path / "o").exists()


def test_gate_train_on_a_run_whose_dataset_is_missing(world, capsys):
    _, data, run_dir = world
    aside = data.with_name("data-aside")
    data.rename(aside)
    try:
        before = sorted(p.name for p in (run_dir / "gates").iterdir())
        code, _, err = run(capsys, "gate", "train", run_dir, "--checkpoint", "0.25")
        one_error_line(code, err, "missing")
        assert sorted(p.name for p in (run_dir / "gates").iterdir()) == before
    finally:
        aside.rename(data)


def test_a_gate_not_bound_to_a_fitted_one_cannot_serve():
    with pytest.raises(BiosrecallError, match="gate train"):
        check_servable([Gate(0.1)])
    assert parse_exits("gate") == [Gate(d) for d in DEFAULT_SWEEPS["gate"]]
