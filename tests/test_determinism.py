"""Determinism: the same seed gives byte-identical dataset folders and identical training metrics.

Datasets are generated through the CLI (in-process) twice into different folders; training runs on
each of the two copies, so neither the folder path nor the process history can leak into results.
Wall-clock fields of the metrics (wall_s, tokens_per_s, flops_per_s) are excluded: they measure the
machine, not the run.

    pytest -q tests/test_determinism.py
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from biosrecall.cli import main
from biosrecall.train.config import TrainConfig
from biosrecall.train.run_folder import RunFolder
from biosrecall.train.trainer import train_bios

# Non-default options on purpose: they must be as reproducible as the defaults.
GENERATE_OPTIONS = ["--people", "50", "--pool-size", "employer=64", "--holdout-eval-templates"]
TIMING_FIELDS = {"wall_s", "tokens_per_s", "flops_per_s"}


def generate(out: Path, seed: int) -> Path:
    """`biosrecall generate` in-process (main returns on success and exits only on errors)."""
    try:
        main(["generate", "--out", str(out), "--seed", str(seed), *GENERATE_OPTIONS])
    except SystemExit as exc:
        raise AssertionError(f"generate exited with {exc.code}") from None
    return out


def folder_bytes(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def datasets(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("determinism")
    return {name: generate(root / name, seed) for name, seed in (("a", 11), ("b", 11), ("c", 12))}


@pytest.fixture(scope="module")
def runs(datasets, tmp_path_factory) -> dict[str, tuple[list[dict], Path]]:
    """Two runs with one seed on the two identical datasets, and one with another seed."""
    root = tmp_path_factory.mktemp("runs")
    plan = {"first": ("a", 3), "second": ("b", 3), "other": ("a", 4)}
    return {
        name: (train(datasets[data], root / name, seed), root / name) for name, (data, seed) in plan.items()
    }


def train(data: Path, run_dir: Path, seed: int) -> list[dict]:
    config = TrainConfig(
        schedule="uniform:1-16",  # varied depths, so depth draws are part of what must repeat
        budget_of="uniform:1-16:10",
        batch_size=4,
        seed=seed,
        save_every=4,
        checkpoint_fractions=(0.5, 1.0),
    )
    train_bios(data, run_dir, config, preset="bios-tiny")
    return [
        {k: v for k, v in row.items() if k not in TIMING_FIELDS} for row in RunFolder(run_dir).read_metrics()
    ]


def final_weights(run_dir: Path) -> dict[str, torch.Tensor]:
    return load_file(str(RunFolder(run_dir).fraction_checkpoints()[1.0] / "model.safetensors"))


def test_same_seed_gives_byte_identical_dataset_folders(datasets):
    a, b = folder_bytes(datasets["a"]), folder_bytes(datasets["b"])
    assert len(a) >= 5 and a.keys() == b.keys()
    assert [name for name in a if a[name] != b[name]] == []


def test_different_seeds_give_different_datasets(datasets):
    a, c = folder_bytes(datasets["a"]), folder_bytes(datasets["c"])
    assert a.keys() == c.keys()
    differing = {name for name in a if a[name] != c[name]}
    assert {"people.parquet", "manifest.json"} <= differing


def test_same_seed_gives_identical_training_metrics_and_weights(runs):
    (first, first_dir), (second, second_dir) = runs["first"], runs["second"]
    assert len(first) == 10 and first == second
    assert len({row["depth"] for row in first}) > 3
    w1, w2 = final_weights(first_dir), final_weights(second_dir)
    assert w1.keys() == w2.keys() and all(torch.equal(w1[k], w2[k]) for k in w1)


def test_different_training_seeds_differ(runs):
    first, other = runs["first"][0], runs["other"][0]
    assert [r["depth"] for r in first] != [r["depth"] for r in other]
    assert [r["loss"] for r in first] != [r["loss"] for r in other]
