"""What `biosrecall figure1` promises when it is interrupted or rerun, and templates that are not files.

- Ctrl-C or SIGTERM (real signals, passed by the sweep engine to the runs' `train` processes, which
  save their progress) ends with exit code 130, the line "rerun the same command to continue" naming
  the stopped runs and no traceback; the same command then finishes.
- A rerun with another budget, preset, seed or people count is refused with one `error:` line naming
  the difference, its old and new value and the ways on, leaving the output untouched; `--overwrite`
  then replaces it. A folder that holds files but no figure1.json is refused, --overwrite or not.
- `--templates` pointing at a folder whose train.toml is a FIFO is refused at once, not read forever.

A "tiny" preset (registered for these tests) keeps each figure1 call to a few seconds.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
from dataclasses import asdict, replace
from pathlib import Path

import pandas as pd
import pytest
from harness import wait_for_updates

from biosrecall.bios.templates import load_templates
from biosrecall.cli import main
from biosrecall.cli.study import RERUN_HINT
from biosrecall.errors import BiosrecallError
from biosrecall.experiments import figure1
from biosrecall.paths import TEMPLATES_DIR
from biosrecall.train.checkpoint_files import read_meta
from biosrecall.train.run_folder import RunFolder

TINY = figure1.Figure1Preset(
    people=8, model_preset="bios-tiny", batch_size=4, seq_len=96, budget_updates=12, lr=1e-2,
    max_depth=4, eval_people=4,
)  # fmt: skip
RUN_NAMES = list(figure1.FIGURE1_SCHEDULES)
# Runs long enough (a few seconds each) for a signal to arrive while they train.
STOPPABLE = replace(TINY, budget_updates=120)

# `biosrecall figure1` in a fresh interpreter with STOPPABLE registered as "tiny" (each run trains in
# a `biosrecall train` process of its own, which needs no preset).
DRIVER = """
import sys
from biosrecall.cli import main
from biosrecall.experiments import figure1

figure1.FIGURE1_PRESETS["tiny"] = figure1.Figure1Preset(**{tiny})
main(sys.argv[1:])
"""


@pytest.fixture
def tiny_preset(monkeypatch):
    monkeypatch.setitem(figure1.FIGURE1_PRESETS, "tiny", TINY)


def figure1_args(out: Path, *extra: str) -> list[str]:
    return ["figure1", "--preset", "tiny", "--out", str(out), "--quiet", *extra]


def run_cli(args: list[str]) -> int:
    """`biosrecall ARGS` in this process; its exit code."""
    try:
        main(args)
    except SystemExit as exc:
        return exc.code
    return 0


def snapshot(folder: Path) -> dict[str, tuple]:
    """Every entry under `folder` and beside it, with its size, modification time and content hash."""
    state = {f"../{p.name}": () for p in folder.parent.iterdir()}
    for path in sorted(folder.rglob("*")):
        stat = path.lstat()
        digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else ""
        state[str(path.relative_to(folder))] = (stat.st_size, stat.st_mtime_ns, digest)
    return state


def run_dir(out: Path, name: str, seed: int = 0) -> Path:
    return out / figure1.RUNS / f"seed{seed}" / name


def final_weights(out: Path) -> dict[str, int]:
    """Modification time of each finished run's final weights: unchanged means it was not retrained."""
    finals = {
        run.name: RunFolder(run).fraction_checkpoints().get(1.0)
        for run in (out / figure1.RUNS).glob("seed*/*")
    }
    return {name: (path / "model.safetensors").stat().st_mtime_ns for name, path in finals.items() if path}


def record(out: Path) -> dict:
    return json.loads((out / figure1.RECORD).read_text())


@pytest.fixture(scope="module")
def finished_output(tmp_path_factory):
    """A finished tiny figure1 output (copy it before changing anything)."""
    out = tmp_path_factory.mktemp("finished") / "out"
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(figure1.FIGURE1_PRESETS, "tiny", TINY)
        assert run_cli(figure1_args(out)) == 0
    return out


@pytest.fixture
def output_copy(finished_output, tmp_path):
    out = tmp_path / "copy" / "out"
    shutil.copytree(finished_output, out)
    return out


def stop_when_training(process: subprocess.Popen, run: Path, updates: int, stop: signal.Signals) -> str:
    """Send `stop` once `run` has logged `updates` updates; the process's stderr once it has exited."""
    try:
        wait_for_updates(run, updates, process, timeout=600)
    except AssertionError:
        process.kill()
        raise
    process.send_signal(stop)
    return process.communicate(timeout=300)[1]


class TestCtrlC:
    """Ctrl-C or SIGTERM during figure1: exit 130, the rerun line naming the stopped runs, no
    traceback, their progress saved; the same command then finishes without retraining finished runs."""

    @pytest.mark.parametrize(
        ("stopped", "stop", "workers"),
        [
            pytest.param(0, signal.SIGINT, "1", id="first-run"),
            pytest.param(1, signal.SIGTERM, "2", id="sigterm-two-workers"),
        ],
    )
    def test_interrupt_then_plain_rerun_completes(self, tmp_path, monkeypatch, stopped, stop, workers):
        monkeypatch.setitem(figure1.FIGURE1_PRESETS, "tiny", STOPPABLE)
        out, name = tmp_path / "out", RUN_NAMES[stopped]
        args = figure1_args(out, "--workers", workers, "--threads", "1")
        driver = DRIVER.replace("{tiny}", repr(asdict(STOPPABLE)))
        process = subprocess.Popen([sys.executable, "-c", driver, *args], stderr=subprocess.PIPE, text=True)
        stderr = stop_when_training(
            process, run_dir(out, name), 5, stop
        )  # the folder appears at its first save
        assert process.returncode == 130, stderr
        assert "Traceback" not in stderr and "--resume" not in stderr
        last = stderr.strip().splitlines()[-1]
        assert last.endswith(RERUN_HINT) and f"seed0/{name}" in last and "progress is saved" in last
        assert 1.0 not in RunFolder(run_dir(out, name)).fraction_checkpoints()
        assert RunFolder(run_dir(out, name)).latest_checkpoint() is not None  # its progress was saved
        if workers == "1":  # one run at a time: the ones before it finished, the ones after never started
            assert all(1.0 in RunFolder(run_dir(out, n)).fraction_checkpoints() for n in RUN_NAMES[:stopped])
            assert not any(run_dir(out, n).exists() for n in RUN_NAMES[stopped + 1 :])
        kept = final_weights(out)

        assert run_cli(args) == 0
        assert all(1.0 in RunFolder(run_dir(out, name)).fraction_checkpoints() for name in RUN_NAMES)
        assert {name: final_weights(out)[name] for name in kept} == kept  # finished runs were not retrained
        assert (out / "figure1.png").stat().st_size > 0
        assert not list(out.parent.glob(".out.*"))  # no lock or temporary left beside the output

    @pytest.mark.slow
    def test_sigint_from_outside_during_quick_training(self, tmp_path):
        """The real command, the real preset, Ctrl-C sent from outside while its first runs train."""
        out = tmp_path / "out"
        command = [sys.executable, "-m", "biosrecall", "figure1", "--preset", "quick", "--out", str(out)]
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        stderr = stop_when_training(
            process, run_dir(out, "fixed_k4"), 100, signal.SIGINT
        )  # a third of the way
        assert process.returncode == 130, stderr
        assert "Traceback" not in stderr
        last = stderr.strip().splitlines()[-1]
        assert last.startswith("interrupted while training ") and last.endswith(RERUN_HINT)
        assert "seed0/fixed_k4" in last and "progress is saved" in last
        # The progress is there for a rerun to continue from (the reruns themselves are the tiny-preset
        # cases above; a whole quick study here would add minutes for no new path).
        latest = read_meta(run_dir(out, "fixed_k4") / "checkpoints" / "latest")
        assert latest["update"] >= 100


# (options added to the rerun, the preset as redefined for the rerun, what the error line names)
CHANGES = [
    pytest.param(["--budget", "6e9"], None, "budget was fixed:4:12, now 6000000000.0", id="budget"),
    pytest.param(["--seeds", "1"], None, "dataset_seed was 0, now 1", id="seed"),
    pytest.param(["--preset", "tiny2"], None, "--preset tiny, not tiny2", id="preset"),
    pytest.param([], replace(TINY, people=9), "people was 8, now 9", id="people"),
]


def register_change(monkeypatch, redefined) -> None:
    monkeypatch.setitem(figure1.FIGURE1_PRESETS, "tiny2", replace(TINY, lr=5e-3))
    if redefined is not None:  # the preset itself changed (a new release redefined it)
        monkeypatch.setitem(figure1.FIGURE1_PRESETS, "tiny", redefined)


def changed_args(out: Path, extra: list[str]) -> list[str]:
    args = figure1_args(out)
    if "--preset" in extra:
        args[2] = extra[extra.index("--preset") + 1]
        extra = []
    return [*args, *extra]


class TestChangedSettingsRefused:
    """A rerun that would reuse runs or data made with other settings: one error line, nothing touched."""

    @pytest.mark.parametrize(("extra", "redefined", "named"), CHANGES)
    def test_rerun_with_other_settings_is_refused(
        self, output_copy, tiny_preset, monkeypatch, capsys, extra, redefined, named
    ):
        register_change(monkeypatch, redefined)
        before = snapshot(output_copy)
        capsys.readouterr()
        assert run_cli(changed_args(output_copy, extra)) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("error: ")
        assert named in err and "use another --out, or --overwrite to replace it" in err
        assert snapshot(output_copy) == before

    def test_a_corrupt_record_is_refused_and_replaced_with_overwrite(self, output_copy, tiny_preset, capsys):
        (output_copy / figure1.RECORD).write_text("{")
        before = snapshot(output_copy)
        assert run_cli(figure1_args(output_copy)) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "figure1.json is corrupt" in err and "--overwrite" in err
        assert snapshot(output_copy) == before
        assert run_cli(figure1_args(output_copy, "--overwrite")) == 0
        assert all(1.0 in RunFolder(run_dir(output_copy, name)).fraction_checkpoints() for name in RUN_NAMES)

    @pytest.mark.parametrize(
        "tamper",
        [
            pytest.param(lambda out: (out / figure1.RECORD).unlink(), id="runs-without-record"),
            pytest.param(
                lambda out: [
                    shutil.rmtree(out / figure1.RUNS),
                    (out / figure1.RECORD).unlink(),
                    (out / figure1.DATA / "manifest.json").unlink(),
                ],
                id="broken-dataset",
            ),
        ],
    )
    def test_a_folder_without_its_record_is_refused_even_with_overwrite(
        self, output_copy, tiny_preset, capsys, tamper
    ):
        """--overwrite replaces only what its record marks as a figure1 output: nothing else is moved."""
        tamper(output_copy)
        before = snapshot(output_copy)
        for extra in ([], ["--overwrite"]):
            assert run_cli(figure1_args(output_copy, *extra)) == 2
            err = capsys.readouterr().err
            assert err.count("\n") == 1 and "holds no figure1.json: give a new or empty --out" in err
            assert snapshot(output_copy) == before


class TestOverwrite:
    """`--overwrite` replaces an output made with other settings; one made with these is continued."""

    # Two of the four changes: replacing works the same whatever changed (each change's refusal is
    # tested above), and each case retrains the whole tiny study.
    @pytest.mark.parametrize(("extra", "redefined", "named"), [CHANGES[1], CHANGES[3]])
    def test_overwrite_replaces_the_output(
        self, output_copy, tiny_preset, monkeypatch, extra, redefined, named
    ):
        register_change(monkeypatch, redefined)
        old, trained_before = record(output_copy), final_weights(output_copy)
        (output_copy / "notes.txt").write_text("mine")  # not figure1's: --overwrite leaves it
        assert run_cli([*changed_args(output_copy, extra), "--overwrite"]) == 0
        assert (output_copy / "notes.txt").read_text() == "mine"
        new = record(output_copy)
        assert new != old
        retrained = final_weights(output_copy)
        assert all(retrained[name] != trained_before[name] for name in RUN_NAMES)
        pinned, seed = new["pins"], new["options"]["study"]["seeds"][0]
        for name in RUN_NAMES:  # every run was trained again, with the new settings
            config = json.loads((run_dir(output_copy, name, seed) / "config.json").read_text())
            config = config["train_config"]
            shared = set(config) & set(pinned) - {"schedule", "budget"}  # the run's own; budget: as FLOPs
            assert config["seed"] == seed and {k: config[k] for k in shared} == {k: pinned[k] for k in shared}
        dataset = json.loads((output_copy / figure1.DATA / "manifest.json").read_text())
        assert (dataset["num_people"], dataset["seed"]) == (pinned["people"], pinned["dataset_seed"])
        assert not [p for p in output_copy.parent.iterdir() if p.name.startswith(".")]
        kept = final_weights(output_copy)
        assert run_cli(changed_args(output_copy, extra)) == 0  # the new output is continued as it is
        assert final_weights(output_copy) == kept

    def test_overwrite_with_the_same_settings_keeps_finished_runs(self, output_copy, tiny_preset):
        kept = final_weights(output_copy)
        assert len(kept) == len(RUN_NAMES)
        assert run_cli(figure1_args(output_copy, "--overwrite")) == 0
        assert final_weights(output_copy) == kept

    @pytest.mark.parametrize("through_link", [False, True], ids=["folder", "symlink"])
    def test_overwrite_that_fails_its_checks_puts_everything_back(
        self, output_copy, tiny_preset, capsys, through_link
    ):
        out = output_copy
        if through_link:  # OUT itself cannot be removed and made again: its entries are put back
            out = output_copy.parent / "link"
            out.symlink_to(output_copy)
        before = snapshot(output_copy)
        assert run_cli(figure1_args(out, "--budget", "1", "--overwrite")) == 2
        assert "smaller than one update" in capsys.readouterr().err
        after = snapshot(output_copy)
        assert after == before


def fifo_in_place_of(name: str):
    def edit(folder: Path) -> None:
        (folder / name).unlink()
        os.mkfifo(folder / name)

    return edit


def folder_in_place_of(name: str):
    def edit(folder: Path) -> None:
        (folder / name).unlink()
        (folder / name).mkdir()

    return edit


@pytest.fixture
def alarm():
    """Turn a hang (a read of a FIFO nobody writes) into a failure after 60 s."""

    def hung(signum, frame):
        raise TimeoutError("reading the templates did not finish within 60 s")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(60)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


class TestTemplatesThatAreNotFiles:
    """A templates folder whose train.toml or eval.toml is a FIFO or a folder: one line, at once."""

    @pytest.mark.parametrize(
        ("edit", "name"),
        [
            pytest.param(fifo_in_place_of("train.toml"), "train.toml", id="fifo-train"),
            pytest.param(fifo_in_place_of("eval.toml"), "eval.toml", id="fifo-eval"),
            pytest.param(folder_in_place_of("train.toml"), "train.toml", id="folder-train"),
        ],
    )
    def test_generate_refuses_them(self, tmp_path, alarm, capsys, edit, name):
        folder = tmp_path / "templates"
        shutil.copytree(TEMPLATES_DIR, folder)
        edit(folder)
        with pytest.raises(BiosrecallError, match=rf"template file .*{name} is not a regular file"):
            load_templates(folder)
        out = tmp_path / "data"
        assert run_cli(["generate", "--out", str(out), "--people", "5", "--templates", str(folder)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"{name} is not a regular file" in err
        assert not out.exists()


class TestStudyInParts:
    """A study grows by rerunning with more seeds or controls: what is done is kept, the rest trains."""

    def test_adding_a_seed_and_a_control_continues_the_output(self, output_copy, tiny_preset, capsys):
        kept = {name: path.stat().st_mtime_ns for name, path in self._finals(output_copy, 0).items()}
        extra = ("--seeds", "0,1", "--update-matched", "--lr-grid", "5e-3,1e-2")
        assert run_cli(figure1_args(output_copy, *extra)) == 0
        after = {name: p.stat().st_mtime_ns for name, p in self._finals(output_copy, 0).items()}
        assert {name: after[name] for name in kept} == kept  # the finished runs were not retrained
        grid = pd.read_csv(output_copy / "lr_grid.csv")
        assert len(grid) == 2 * len(RUN_NAMES) and grid.groupby("name")["chosen"].sum().eq(1).all()
        chosen = {row.name: row.lr for row in grid[grid["chosen"]].itertuples()}
        labels = {name: name if lr == TINY.lr else f"{name}_lr{lr:g}" for name, lr in chosen.items()}
        control = "uniform_1_16_update_matched"
        control_label = (
            control if chosen["uniform_1_16"] == TINY.lr else f"{control}_lr{chosen['uniform_1_16']:g}"
        )
        assert {*labels.values(), control_label} <= set(self._finals(output_copy, 1))  # seed 1 at the winners
        claims = (output_copy / "claims.md").read_text()
        assert "n=2" in claims  # every measured claim now has two seeds
        assert record(output_copy)["options"]["study"]["seeds"] == [0, 1]

    def test_a_new_output_starts_with_its_learning_rate_grid(self, tmp_path, tiny_preset):
        """The grid trains first, on the dataset the same call makes; its winners choose the runs."""
        out = tmp_path / "out"
        assert run_cli(figure1_args(out, "--lr-grid", "5e-3,1e-2")) == 0
        grid = pd.read_csv(out / "lr_grid.csv")
        assert len(grid) == 2 * len(RUN_NAMES) and grid.groupby("name")["chosen"].sum().eq(1).all()
        assert len(pd.read_csv(out / "summary.csv")) == 2 * len(RUN_NAMES)  # the main runs, two fractions

    @staticmethod
    def _finals(out: Path, seed: int) -> dict[str, Path]:
        folders = (out / figure1.RUNS / f"seed{seed}").iterdir()
        return {run.name: RunFolder(run).fraction_checkpoints()[1.0] / "model.safetensors" for run in folders}
