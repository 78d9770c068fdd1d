"""Hostile run folders: damaged files of every kind for `train --resume` and `diagnose-update`, a
config.json edited to resume under other settings, and runs killed before their first `latest`.

Each refused case exits 2 with one `error:` line naming the problem, no traceback, and nothing in the
test's folder changed (the checks of `test_hostile_data`). Writes that fail part-way, `--overwrite`
and concurrent writers are in `test_hostile_run_writes.py`, which shares this world.

    pytest -q tests/test_hostile_runs.py
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from harness import run_cli
from safetensors.torch import load_file
from test_hostile_data import assert_refused, hidden

from biosrecall.bios import generate_dataset
from biosrecall.cli import main
from biosrecall.train.run_folder import RunFolder

SCHEDULE = "fixed_first:k0=2,switch=0.5,finish=uniform,range=1-4"
RUN_OPTIONS = ["--preset", "bios-tiny", "--batch-size", "4", "--seed", "1", "--save-every", "3",
               "--checkpoint-fractions", "0.5,1.0", "--schedule", SCHEDULE, "--budget-of", "fixed:2:12",
               "--quiet"]  # fmt: skip
DIAGNOSE = ["diagnose-update", "run", "--checkpoint", "switch", "--out", "diag", "--quiet"]


def train_args(out: str = "run", *extra: str, data: str = "data") -> list[str]:
    return ["train", "--data", data, "--out", out, *RUN_OPTIONS, *extra]


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> Path:
    """A dataset and one finished 11-update fixed-first run of it (kept 0.5, switch, 1.0; `latest`)."""
    root = tmp_path_factory.mktemp("runs")
    generate_dataset(root / "data", people=30, seed=1)
    main(train_args(str(root / "run"), data=str(root / "data")))
    return root


@pytest.fixture
def case_dir(world, tmp_path, monkeypatch) -> Path:
    """A private copy of the world as the working folder."""
    copy = tmp_path / "root" / "w"
    shutil.copytree(world, copy, symlinks=True)
    monkeypatch.chdir(copy)
    return copy


def final_weights(run_dir: Path) -> dict[str, torch.Tensor]:
    return load_file(str(run_dir / "checkpoints" / "1.0" / "model.safetensors"))


def assert_same_run(run_dir: Path, reference: Path) -> None:
    """Bit-identical final weights and the same losses, each update logged once."""
    expected, got = final_weights(reference), final_weights(run_dir)
    assert got.keys() == expected.keys()
    assert [name for name in expected if not torch.equal(got[name], expected[name])] == []
    assert [row["loss"] for row in RunFolder(run_dir).read_metrics()] == [
        row["loss"] for row in RunFolder(reference).read_metrics()
    ]


# ---- ways to damage a file -------------------------------------------------------------------------

Damage = Callable[[Path], None]


def garbage(path: Path) -> None:
    path.write_bytes(bytes(range(256)) * 8)


def truncated(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def text(content: str) -> Damage:
    return lambda path: path.write_text(content)


def edited(change: Callable[[dict], object]) -> Damage:
    def damage(path: Path) -> None:
        data = json.loads(path.read_text())
        change(data)
        path.write_text(json.dumps(data))

    return damage


def relinked(target: str) -> Damage:
    def damage(path: Path) -> None:
        path.unlink()
        os.symlink(target, path)

    return damage


def without_row(number: int) -> Damage:
    def damage(path: Path) -> None:
        lines = path.read_text().splitlines(keepends=True)
        path.write_text("".join(lines[:number] + lines[number + 1 :]))

    return damage


def set_key(section: str, key: str, value) -> Damage:
    return edited(lambda data: data[section].__setitem__(key, value))


LATEST = "run/checkpoints/latest"
SWITCH = "run/checkpoints/switch"
CONFIG_DAMAGE = [
    ("config-a-list", "run/config.json", text("[1, 2]"), "expected a JSON object, got list"),
    ("config-garbage", "run/config.json", garbage, "not UTF-8"),
    ("config-bad-lr", "run/config.json", set_key("train_config", "lr", "fast"), "train_config: lr must be"),
    ("config-task-is-text", "run/config.json", edited(lambda d: d.__setitem__("task", "bios")), "'task'"),
    ("config-no-plan", "run/config.json", edited(lambda d: d.pop("plan")), "field 'plan' is missing"),
    ("config-bad-updates", "run/config.json", set_key("plan", "updates", "11"), "field 'plan.updates'"),
]


def checkpoint_damage(folder: str) -> list[tuple]:
    """Every kind of damage to a checkpoint's meta.json, training_state.pt and model.safetensors."""
    meta, state, weights = (
        f"{folder}/{name}" for name in ("meta.json", "training_state.pt", "model.safetensors")
    )
    return [
        ("meta-garbage", meta, garbage, "not UTF-8"),
        ("meta-empty-object", meta, text("{}"), "field 'model_config' is missing"),
        ("meta-a-list", meta, text("[]"), "expected a JSON object, got list"),
        ("meta-without-update", meta, edited(lambda d: d.pop("update")), "field 'update' is missing"),
        ("meta-negative-update", meta, edited(lambda d: d.__setitem__("update", -3)), "field 'update': expected int >= 0, got -3"),
        ("meta-bad-model", meta, set_key("model_config", "d_model", "wide"), "model_config"),
        ("state-truncated", state, truncated, "training state"),
        ("state-garbage", state, garbage, "training state"),
        ("state-missing", state, Path.unlink, "holds no optimizer state"),
        ("weights-truncated", weights, truncated, "checkpoint weights"),
        ("weights-garbage", weights, garbage, "checkpoint weights"),
    ]  # fmt: skip


RESUME_DAMAGE = [
    *checkpoint_damage(LATEST),
    (
        "meta-without-flops",
        f"{LATEST}/meta.json",
        edited(lambda d: d.pop("flops")),
        "field 'flops' is missing",
    ),
    ("latest-dangling", LATEST, relinked("state-00000099"), "is not a checkpoint folder"),
    *CONFIG_DAMAGE,
    ("metrics-garbage", "run/metrics.jsonl", garbage, "metrics log"),
    ("metrics-row-missing", "run/metrics.jsonl", without_row(3), "corrupt at line 4"),
]


def ids(cases: list[tuple]) -> list:
    return [pytest.param(*case[1:], id=case[0]) for case in cases]


class TestDamagedRunFiles:
    @pytest.mark.parametrize(("path", "damage", "expect"), ids(RESUME_DAMAGE))
    def test_resume_refuses_a_damaged_file(self, case_dir, capsys, path, damage, expect):
        damage(case_dir / path)
        line = assert_refused(train_args("run", "--resume"), expect, case_dir, capsys)
        if path.startswith(LATEST):
            # A damaged `latest` names what is left to resume from: a checkpoint of the final update.
            assert "the newest intact checkpoint is run" in line and "(update 11)" in line

    @pytest.mark.parametrize(("path", "damage", "expect"), ids([*checkpoint_damage(SWITCH), *CONFIG_DAMAGE]))
    def test_diagnose_update_refuses_a_damaged_file(self, case_dir, capsys, path, damage, expect):
        damage(case_dir / path)
        assert_refused(DIAGNOSE, expect, case_dir, capsys)

    def test_resuming_from_the_named_intact_checkpoint_ends_bit_identical(self, case_dir, world, capsys):
        stopped_at(case_dir, 8, capsys)
        garbage(case_dir / LATEST / "training_state.pt")
        line = assert_refused(
            train_args("run", "--resume"), "the newest intact checkpoint is", case_dir, capsys
        )
        advice = line.split("(ln -sfn ")[1].split(")")[0].split()
        assert advice == ["switch", str(Path("run/checkpoints/latest"))]  # update 6 < latest's 8
        relinked(advice[0])(case_dir / advice[1])
        assert run_cli(train_args("run", "--resume"), capsys) == (0, "")
        assert_same_run(case_dir / "run", world / "run")


def stopped_at(case_dir: Path, update: int, capsys, out: str = "run") -> None:
    """Train `out` afresh and stop it like Ctrl-C does once `update` updates are done (exit 130)."""
    from biosrecall.train.trainer import Trainer

    shutil.rmtree(case_dir / out, ignore_errors=True)
    real = Trainer._one_update

    def stop_after(trainer):
        row = real(trainer)
        if trainer.progress.update == update:
            os.kill(os.getpid(), signal.SIGINT)
        return row

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Trainer, "_one_update", stop_after)
        code, stderr = run_cli(train_args(out), capsys)
    assert code == 130 and f"interrupted at update {update}" in stderr, stderr


# ---- config.json edited to resume under other settings ---------------------------------------------

EDITS = [
    ("schedule", set_key("train_config", "schedule", "fixed:2"), ["--schedule", "fixed:2"], "schedule differs"),
    ("seed", set_key("train_config", "seed", 2), ["--seed", "2"], "seed differs"),
    ("budget", set_key("train_config", "budget_of", "fixed:2:10"), ["--budget-of", "fixed:2:10"], "budget differs"),
    ("model", set_key("model_config", "backprop_depth", 1), ["--backprop-depth", "1"],
     "model_config.backprop_depth differs"),
]  # fmt: skip


class TestResumeChecksTheCheckpoint:
    @pytest.mark.parametrize(("edit", "options", "expect"), ids(EDITS))
    def test_an_edited_config_does_not_resume_under_other_settings(
        self, case_dir, capsys, edit, options, expect
    ):
        edit(case_dir / "run" / "config.json")
        line = assert_refused(
            train_args("run", "--resume", *options), f"cannot resume: {expect}", case_dir, capsys
        )
        assert str(Path("run/checkpoints/latest").resolve()) in line or "state-00000011" in line

    def test_a_documented_resumable_difference_is_allowed(self, case_dir, capsys):
        assert run_cli(train_args("run", "--resume", "--save-every", "5", "--log-every", "7"), capsys) == (
            0,
            "",
        )


# ---- runs killed before their first `latest` -------------------------------------------------------

DIE_AT_FIRST_SAVE = """
import os, signal, sys
from biosrecall.train.run_folder import RunFolder
def die(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGKILL)
RunFolder.save_latest = die
from biosrecall.cli import main
main(sys.argv[1:])
"""


def killed_at_first_save(case_dir: Path, *extra: str) -> None:
    done = subprocess.run([sys.executable, "-c", DIE_AT_FIRST_SAVE, *train_args("run", *extra)], cwd=case_dir)
    assert done.returncode == -signal.SIGKILL
    assert any(name.endswith(".tmp") for name in hidden(case_dir)), hidden(case_dir)


def folder_of_an_older_version(case_dir: Path) -> None:
    """What a run killed before its first save left before runs were built under a temporary name."""
    shutil.rmtree(case_dir / "run" / "checkpoints")


class TestKilledBeforeTheFirstLatest:
    @pytest.mark.parametrize(
        "prepare",
        [
            pytest.param(lambda case_dir: (shutil.rmtree(case_dir / "run"), killed_at_first_save(case_dir)),
                         id="killed-building-a-new-run"),
            pytest.param(folder_of_an_older_version, id="older-version-leftover"),
        ],
    )  # fmt: skip
    def test_a_plain_rerun_starts_cleanly(self, case_dir, world, capsys, prepare):
        prepare(case_dir)
        assert run_cli(train_args("run"), capsys) == (0, "")
        assert hidden(case_dir) == [] and hidden(case_dir / "run" / "checkpoints") == []
        assert_same_run(case_dir / "run", world / "run")

    def test_killed_while_overwriting_leaves_the_old_run(self, case_dir, world, capsys):
        old = {p: p.read_bytes() for p in sorted((case_dir / "run").rglob("*")) if p.is_file()}
        killed_at_first_save(case_dir, "--overwrite", "--seed", "2")
        assert {p: p.read_bytes() for p in sorted((case_dir / "run").rglob("*")) if p.is_file()} == old
        assert run_cli(train_args("run", "--overwrite"), capsys) == (0, "")
        assert hidden(case_dir) == []
        assert_same_run(case_dir / "run", world / "run")

    def test_a_folder_holding_other_files_is_still_refused(self, case_dir, capsys):
        (case_dir / "mine").mkdir()
        (case_dir / "mine" / "notes.txt").write_text("not a run\n")
        assert_refused(train_args("mine"), "already holds files", case_dir, capsys)
