"""`biosrecall recall-curve`: outputs, the per-checkpoint cache, and one-line errors with exit 2.

Most tests use fake run folders whose checkpoints load as hand-built models (the loaders are patched);
the last one trains nothing but builds a real dataset, a real model and a real checkpoint.

    pytest -q tests/test_cli_recall.py
"""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from test_recall import FakeDataset, LookupModel

import biosrecall.eval.curves as curves
import biosrecall.eval.scoring as scoring
from biosrecall.cli import main
from biosrecall.train.run_folder import RECALL_CACHE_FILE, RunFolder

BUDGET = 2.5e12
SCHEDULES = {"fixed4": "fixed:4", "uniform": "uniform:1-16"}


def run_cli(args, capsys) -> tuple[int, str, str]:
    try:
        main(["recall-curve", *map(str, args)])
        code = 0
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def write_fake_run(root, name, schedule, dataset_dir, fractions=(0.45, 1.0), manifest_hash="fake-manifest"):
    """A run folder with checkpoints whose meta follows the checkpoint contract (weights are not read)."""
    run = root / name
    for fraction in fractions:
        folder = run / "checkpoints" / repr(float(fraction))
        folder.mkdir(parents=True)
        meta = {
            "model_config": {},
            "schedule": schedule,
            "fraction": fraction,
            "flops": fraction * BUDGET,
            "budget": BUDGET,
            "update": int(fraction * 1000),
            "seed": 0,
            "dataset": {"path": str(dataset_dir), "manifest_hash": manifest_hash},
        }
        (folder / "meta.json").write_text(json.dumps(meta))
        (folder / "model.safetensors").write_bytes(b"")
    (run / "config.json").write_text("{}")
    return run


class FakeWorld:
    """Patched loaders: a dataset folder loads as a FakeDataset; a checkpoint loads as a lookup model that
    knows each attribute from depth (attribute + 1) on, and only half the people before the full budget."""

    def __init__(self, monkeypatch, tmp_path):
        self.dataset = FakeDataset(people=10)
        self.dataset_dir = tmp_path / "data"
        self.dataset_dir.mkdir()
        self.loads = []
        monkeypatch.setattr(scoring, "load_dataset", self.load_dataset)
        monkeypatch.setattr(scoring, "load_checkpoint", self.load_checkpoint)

    def load_dataset(self, path):
        assert path == self.dataset_dir
        return self.dataset

    def load_checkpoint(self, path, device="cpu"):
        meta = json.loads((path / "meta.json").read_text())
        self.loads.append(path)
        eval_set = self.dataset.eval_set()
        known_people = self.dataset.num_people if meta["fraction"] == 1.0 else self.dataset.num_people // 2
        rows = np.flatnonzero(eval_set.person < known_people)
        model = LookupModel.from_rows(
            eval_set, self.dataset.vocab_size, rows=rows, min_depth=eval_set.attribute + 1
        )
        return model, meta


@pytest.fixture
def world(monkeypatch, tmp_path):
    return FakeWorld(monkeypatch, tmp_path)


@pytest.fixture
def runs(world, tmp_path):
    return [write_fake_run(tmp_path, name, spec, world.dataset_dir) for name, spec in SCHEDULES.items()]


def test_writes_tables_and_figure(world, runs, tmp_path, capsys):
    out = tmp_path / "out"
    code, stdout, stderr = run_cli([*runs, "--max-depth", 8, "--out", out], capsys)
    assert code == 0, stderr
    for suffix in ("csv", "parquet", "png", "pdf"):
        assert (out / f"recall_curve.{suffix}").stat().st_size > 0
    table = pd.read_parquet(out / "recall_curve.parquet")
    for column in ("run", "schedule", "fraction", "flops", "budget", "depth", "attribute", "recall", "bits"):
        assert column in table.columns
    assert len(table) == 2 * 2 * 8 * 7  # runs x fractions x depths x (6 attributes + all)
    assert set(table["schedule"]) == set(SCHEDULES.values())
    whole = table.query("attribute == 'all' and fraction == 1.0 and run == 'fixed4'").sort_values("depth")
    pools = np.log2(list(world.dataset.pool_sizes.values()))
    assert np.allclose(whole["bits"], [pools[: min(depth, 6)].sum() for depth in range(1, 9)])
    half = table.query("attribute == 'all' and fraction == 0.45 and depth == 8")["bits"]
    assert np.allclose(half, world.dataset.total_bits / 2)
    assert pd.read_csv(out / "recall_curve.csv").shape == table.shape
    assert "recalled bits per person" in stdout and "K=8" in stdout and "wrote" in stdout


def test_cache_serves_replots_without_evaluating(world, runs, tmp_path, capsys, monkeypatch):
    first = tmp_path / "first"
    assert run_cli([*runs, "--max-depth", 8, "--out", first], capsys)[0] == 0
    assert len(world.loads) == 4
    for run in runs:
        assert (run / "checkpoints" / "0.45" / RECALL_CACHE_FILE).is_file()
    again = tmp_path / "again"
    code, _, stderr = run_cli([*runs, "--max-depth", 4, "--metric", "attribute", "--out", again], capsys)
    assert code == 0, stderr
    assert len(world.loads) == 4, "a smaller max depth and another metric are served from the cache"
    cached = pd.read_parquet(first / "recall_curve.parquet").query("depth <= 4").reset_index(drop=True)
    pd.testing.assert_frame_equal(pd.read_parquet(again / "recall_curve.parquet"), cached)
    code, _, stderr = run_cli([runs[0], "--checkpoint", 1.0, "--max-depth", 4, "--out", again], capsys)
    _one_error_line(code, stderr, "already holds recall-curve results", "--overwrite")
    assert len(world.loads) == 4, "a refused output scores nothing"
    again_args = [
        runs[0],
        "--checkpoint",
        1.0,
        "--max-depth",
        4,
        "--threshold",
        5,
        "--out",
        again,
        "--overwrite",
    ]
    run_cli(again_args, capsys)
    assert len(world.loads) == 5, "another threshold re-evaluates"
    run_cli([*again_args, "--refresh"], capsys)
    assert len(world.loads) == 6


def test_rewritten_checkpoint_invalidates_its_cache(world, runs, tmp_path, capsys):
    args = [runs[0], "--checkpoint", 0.45, "--max-depth", 3, "--out", tmp_path / "out", "--overwrite"]
    run_cli(args, capsys)
    meta_path = runs[0] / "checkpoints" / "0.45" / "meta.json"
    meta_path.write_text(meta_path.read_text().replace('"update": 450', '"update": 451'))
    run_cli(args, capsys)
    assert len(world.loads) == 2


def test_chosen_checkpoints_only(world, runs, tmp_path, capsys):
    code, _, _ = run_cli([runs[1], "--checkpoint", 0.45, "--max-depth", 2, "--out", tmp_path / "o"], capsys)
    assert code == 0
    table = pd.read_parquet(tmp_path / "o" / "recall_curve.parquet")
    assert set(table["fraction"]) == {0.45} and set(table["run"]) == {"uniform"}


def test_data_override_is_used_and_still_checked(world, runs, tmp_path, capsys):
    elsewhere = tmp_path / "moved"
    elsewhere.mkdir()
    world.dataset_dir = elsewhere
    code, _, stderr = run_cli(
        [runs[0], "--data", elsewhere, "--max-depth", 2, "--out", tmp_path / "o"], capsys
    )
    assert code == 0, stderr
    world.dataset.manifest_hash = "another-dataset"
    code, _, stderr = run_cli(
        [runs[0], "--data", elsewhere, "--max-depth", 2, "--out", tmp_path / "o", "--overwrite"], capsys
    )
    assert code == 2 and "was trained on" in stderr


def _one_error_line(code: int, stderr: str, *needles: str) -> None:
    assert code == 2
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), stderr
    for needle in needles:
        assert needle in lines[0]


def test_run_without_checkpoints(world, tmp_path, capsys):
    empty = tmp_path / "empty-run"
    (empty / "checkpoints").mkdir(parents=True)
    (empty / "config.json").write_text("{}")
    _one_error_line(*run_cli([empty], capsys)[::2], "has no checkpoints")


def test_not_a_run_folder(world, tmp_path, capsys):
    _one_error_line(*run_cli([tmp_path / "nowhere"], capsys)[::2], "is not a run folder")


def test_missing_fraction(world, runs, capsys):
    _one_error_line(
        *run_cli([runs[0], "--checkpoint", 0.5], capsys)[::2],
        "no checkpoint at fraction 0.5",
        "(it has 0.45, 1.0)",
    )


def test_missing_dataset(world, runs, capsys):
    world.dataset_dir.rmdir()
    _one_error_line(*run_cli([runs[0]], capsys)[::2], "is missing", "--data")


def test_dataset_hash_mismatch(world, tmp_path, capsys):
    run = write_fake_run(tmp_path, "other", "fixed:4", world.dataset_dir, manifest_hash="a-different-dataset")
    _one_error_line(*run_cli([run], capsys)[::2], "is not the one", "other was trained on")


@pytest.mark.parametrize(
    ("option", "value", "needle"),
    [
        ("--max-depth", 0, "max-depth"),
        ("--threshold", 6, "threshold"),
        ("--threshold", 0, "threshold"),
        ("--batch-size", 0, "batch-size"),
    ],
)
def test_bad_numbers(world, runs, capsys, option, value, needle):
    _one_error_line(*run_cli([runs[0], option, value], capsys)[::2], needle)
    assert world.loads == [], "refused before any model runs"


def write_real_run(tmp_path, people: int):
    """A run folder holding one real (untrained) bios-tiny checkpoint at fraction 1.0."""
    from biosrecall.bios import generate_dataset, load_dataset
    from biosrecall.model import LoopedTransformer, get_preset
    from biosrecall.train.checkpoint_files import save_checkpoint

    data = generate_dataset(tmp_path / "data", people=people, seed=0)
    dataset = load_dataset(data)
    config = get_preset("bios-tiny", vocab_size=dataset.vocab_size)
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text("{}")
    meta = {
        "model_config": config.to_dict(),
        "schedule": "fixed:4",
        "fraction": 1.0,
        "flops": 1e9,
        "budget": 1e9,
        "update": 10,
        "seed": 0,
        "dataset": {"path": str(data), "manifest_hash": dataset.manifest_hash},
    }
    model = LoopedTransformer(config)
    save_checkpoint(RunFolder(run).checkpoint_dir(1.0), model, meta)
    return run, dataset, model


def test_end_to_end_with_a_real_checkpoint(tmp_path, capsys):
    from biosrecall.bios import generate_dataset

    run, dataset, _ = write_real_run(tmp_path, people=8)
    out = tmp_path / "out"
    code, stdout, stderr = run_cli([run, "--max-depth", 4, "--out", out, "--device", "cpu"], capsys)
    assert code == 0, stderr
    table = pd.read_parquet(out / "recall_curve.parquet")
    assert sorted(table["depth"].unique()) == [1, 2, 3, 4]
    whole = table.query("attribute == 'all'")
    assert math.isclose(whole["ceiling_bits"].iloc[0], dataset.total_bits, rel_tol=1e-9)
    assert math.isclose(whole["chance_bits"].iloc[0], dataset.chance_bits, rel_tol=1e-9)
    assert (out / "recall_curve.png").is_file() and (
        run / "checkpoints" / "1.0" / RECALL_CACHE_FILE
    ).is_file()
    other = generate_dataset(tmp_path / "other", people=8, seed=1)
    code, _, stderr = run_cli([run, "--data", other, "--out", out, "--overwrite"], capsys)
    _one_error_line(code, stderr, "is not the one", "was trained on")


def test_people_option_scores_the_first_people_and_matches_their_rows(tmp_path, capsys):
    """--people N gives the same per-depth exact flags as the full evaluation restricted to ids < N."""
    run, dataset, model = write_real_run(tmp_path, people=12)
    code, _, stderr = run_cli([run, "--max-depth", 3, "--people", 5, "--out", tmp_path / "out"], capsys)
    assert code == 0, stderr
    table = pd.read_parquet(tmp_path / "out" / "recall_curve.parquet")
    from biosrecall.eval.sweep import exact_by_depth

    subset = dataset.eval_set(np.arange(5))
    assert len(subset.person) == 5 * 6 * 5 and set(subset.person) == set(range(5))
    exact = exact_by_depth(model, subset, 3, progress=False)
    whole = table.query("attribute == 'all'").sort_values("depth")
    assert np.allclose(whole["exact"].to_numpy(), exact.mean(axis=1))
    code, _, stderr = run_cli([run, "--people", 0, "--out", tmp_path / "out"], capsys)
    _one_error_line(code, stderr, "--people")


def test_summary_shows_a_depth_cycle_that_the_chosen_depths_miss():
    # Peaks at K = 1, 4, 7, ... (every depth the summary names), troughs everywhere else.
    depths = np.arange(1, 65)
    bits = np.where(depths % 3 == 1, 30.0, 6.0)
    table = pd.DataFrame(
        {
            "run": "r",
            "schedule": "fixed:4",
            "fraction": 1.0,
            "attribute": "all",
            "depth": depths,
            "bits": bits,
        }
    )
    row = curves.summary_table(table).iloc[0]
    assert [row[f"K={k}"] for k in (1, 4, 16, 64)] == [30.0] * 4
    assert row["mean K<=16"] == pytest.approx((6 * 30 + 10 * 6) / 16)
    assert row["mean K>16"] == pytest.approx(bits[16:].mean())
    assert row["min"] == 6.0
    assert "mean K>16" not in curves.summary_table(table[table["depth"] <= 8], (1, 4)).columns
