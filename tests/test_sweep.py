"""`biosrecall sweep`: a TOML spec of runs, run by the local executor or submitit, resumed, reported.

    pytest -q tests/test_sweep.py

One module-wide sweep (2 tiny bioS runs that finish and are evaluated, 2 whose data is corrupt, with
2 workers) serves the tests of rerun, failure, status and collect; the killed worker and the submitit
path run their own single run.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import threading
import time
from pathlib import Path

import pandas as pd
import pytest
from harness import changes, snapshot

from biosrecall.bios import generate_dataset
from biosrecall.cli import cli, main
from biosrecall.cli.sweep import sweep
from biosrecall.errors import BiosrecallError
from biosrecall.locking import output_lock
from biosrecall.sweep.engine import run_sweep
from biosrecall.sweep.executors import LocalExecutor, SlurmExecutor
from biosrecall.sweep.jobs import SweepRun, check_runs
from biosrecall.sweep.records import run_status
from biosrecall.sweep.spec import load_spec
from biosrecall.train.config import TrainConfig
from biosrecall.train.run_folder import RunFolder

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts" / "lm"
TINY = """
[base]
data = "data"
preset = "bios-tiny"
batch_size = 4
budget_of = "fixed:2:10"
save_every = 5
lr = 3e-3
quiet = true
"""
MAIN = f"""
[sweep]
out = "runs"
[executor]
workers = 2
{TINY}
[grid]
seed = [0, 1]
[[runs]]
name = "fixed"
schedule = "fixed:2"
[[runs]]
name = "broken"
data = "broken"
schedule = "fixed:2"
[eval]
recall_curve = {{ max_depth = 4, checkpoints = "final" }}
"""


@pytest.fixture(autouse=True)
def registered(monkeypatch):
    """`sweep` under `biosrecall` for these tests, whether or not biosrecall.cli lists it yet."""
    if "sweep" not in cli.commands:
        monkeypatch.setitem(cli.commands, "sweep", sweep)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """A folder with a tiny dataset `data` and a copy `broken` whose manifest is not JSON."""
    root = tmp_path_factory.mktemp("sweep")
    generate_dataset(root / "data", people=40, seed=3)
    shutil.copytree(root / "data", root / "broken")
    (root / "broken" / "manifest.json").write_text("not json")
    return root


@pytest.fixture(scope="module")
def swept(folder):
    """The main sweep, run once through the CLI: (exit code, stdout)."""
    from click.testing import CliRunner

    (folder / "main.toml").write_text(MAIN)
    result = CliRunner().invoke(sweep, ["run", str(folder / "main.toml")])
    return result.exit_code, result.output


def run_cli(argv: list[str], capsys) -> tuple[object, str, str]:
    """(exit code, stdout, stderr) of `biosrecall ARGV` run in-process."""
    try:
        main(argv)
        code = 0
    except SystemExit as exc:
        code = exc.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def spec_file(folder: Path, text: str, name: str = "spec.toml") -> Path:
    path = folder / name
    path.write_text(text)
    return path


def final_mtime(run_dir: Path) -> int:
    return (RunFolder(run_dir).fraction_checkpoints()[1.0] / "model.safetensors").stat().st_mtime_ns


# ---- the spec --------------------------------------------------------------------------------------


def test_grid_names_options_and_paths_relative_to_the_spec(tmp_path):
    grid = '[grid]\nschedule = ["fixed:2", "uniform:1-4"]\nseed = [0, 1]\n'
    spec = load_spec(spec_file(tmp_path, f'[sweep]\nout = "runs"\n{TINY}{grid}'))
    names = [run.name for run in spec.runs]
    assert names == [
        "seed0/schedule=fixed_2", "seed1/schedule=fixed_2", "seed0/schedule=uniform_1-4", "seed1/schedule=uniform_1-4"
    ]  # fmt: skip
    run = spec.runs[2]
    assert run.config.schedule == "uniform:1-4" and run.config.seed == 0
    assert run.task["data"] == str(tmp_path / "data") and spec.out == tmp_path / "runs"
    assert run.labels == {"schedule": "uniform:1-4", "seed": 0}


def test_entries_cross_the_grid_and_a_run_size_replaces_the_base_one(tmp_path):
    text = """
[sweep]
out = "lm"
command = "lm train"
[base]
data = "corpus"
updates = 100
[grid]
seed = [3]
lr = [0.001]
[[runs]]
name = "a"
schedule = "fixed:4"
[[runs]]
name = "b"
budget_of = "fixed:4:50"
"""
    spec = load_spec(spec_file(tmp_path, text), overrides=["preset=lm-tiny"])
    assert [run.name for run in spec.runs] == ["a,lr=0.001/seed3", "b,lr=0.001/seed3"]
    assert (spec.runs[0].config.updates, spec.runs[0].config.budget_of) == (100, None)
    assert (spec.runs[1].config.updates, spec.runs[1].config.budget_of) == (None, "fixed:4:50")
    assert all(run.task["preset"] == "lm-tiny" for run in spec.runs)


def test_status_reads_a_spec_whose_data_is_elsewhere(capsys):
    """The 200M spec's data folder is not here (it comes with `sweep run ... --set data=...`): status
    reads every run's state all the same, while a run is refused with one line before anything starts."""
    code, out, _ = run_cli(["sweep", "status", str(SCRIPTS / "sweep-200m.toml")], capsys)
    assert code == 0 and out.splitlines()[-1] == "15 runs: 0 done, 0 running, 0 failed, 15 waiting"
    code, _, err = run_cli(["sweep", "run", str(SCRIPTS / "sweep-200m.toml"), "--dry-run"], capsys)
    assert code == 2 and err.count("\n") == 1 and "run uniform: data folder" in err, err


def test_a_damaged_record_or_lock_pid_is_no_live_process(tmp_path, capsys):
    """A pid no process can have (a damaged record or lock file) is a run that is not running, not a
    traceback; status reads on."""
    import socket

    from biosrecall.locking import pid_alive

    assert pid_alive(os.getpid()) and not any(map(pid_alive, (2**40, 0, -1, True, "12", None)))
    job = SweepRun("a", out=tmp_path)
    job.record.parent.mkdir(parents=True)
    job.record.write_text(json.dumps({"state": "running", "pid": 2**40, "host": socket.gethostname()}))
    (tmp_path / ".a.lock").write_text("99999999999\n")
    assert run_status(job)["state"] == "failed"


def test_the_200m_spec_holds_the_runs_of_the_old_script(tmp_path):
    spec = load_spec(SCRIPTS / "sweep-200m.toml", overrides=[f"data={tmp_path}"])
    expected = {"uniform": "uniform:1-16", "curriculum": "curriculum:mean=8,warmup=0.75,shape=1-sqrt"}
    for finish in ("uniform", "poisson_lognormal"):
        for k0 in (1, 2, 4):
            for switch in ("0.67", "0.8"):
                expected[f"ff-k{k0}-s{switch}-{finish}"] = (
                    f"fixed_first:k0={k0},switch={switch},finish={finish}"
                )
    expected["uniform-matched-k4-s0.67"] = "uniform:1-16"
    # sweep-200m.sh launched 15 runs: uniform, 12 fixed-first, curriculum and the matched uniform.
    assert {run.name: run.config.schedule for run in spec.runs} == expected and len(spec.runs) == 15
    sizes = {run.name: (run.config.updates, run.config.budget_of) for run in spec.runs}
    assert sizes.pop("uniform-matched-k4-s0.67") == (None, "fixed_first:k0=4,switch=0.67,finish=uniform:4800")
    assert set(sizes.values()) == {(4800, None)}
    assert spec.out == (SCRIPTS / "../../runs/200m").absolute() and spec.executor == {"gpus_per_run": 8}
    assert [(e.command, dict(e.options)) for e in spec.evaluations] == [("lm eval", {"checkpoints": "all"})]
    check_runs(spec.runs, spec.evaluations)  # every run starts as `lm train` would (data aside)
    one_b = load_spec(SCRIPTS / "sweep-1b.toml", overrides=[f"data={tmp_path}"])
    assert [run.name for run in one_b.runs] == [
        "uniform/seed0", "ff-k4-s0.67-uniform/seed0", "ff-k4-s0.8-uniform/seed0"
    ]  # fmt: skip
    check_runs(one_b.runs, one_b.evaluations)


BAD_SPECS = {
    "unknown section": ("[sweeps]\nout = 'x'\n", "field 'sweeps' is unknown"),
    "no out": ("[sweep]\ncommand = 'train'\n", "field 'sweep.out' is missing"),
    "unknown sweep key": ("[sweep]\nout = 'runs'\nworkers = 2\n", "field 'sweep.workers' is unknown"),
    "unknown option": ("[sweep]\nout = 'runs'\n[base]\nbatch_sise = 4\n", "did you mean batch_size?"),
    "unknown grid option": ("[sweep]\nout = 'runs'\n[grid]\nsed = [1]\n", "unknown option 'sed'"),
    "empty grid": ("[sweep]\nout = 'runs'\n[grid]\n", "field 'grid': expected object of length >= 1"),
    "grid not a list": ("[sweep]\nout = 'runs'\n[grid]\nseed = 0\n", "seed must be a non-empty list"),
    "grid empty list": ("[sweep]\nout = 'runs'\n[grid]\nseed = []\n", "seed must be a non-empty list"),
    "engine option": ("[sweep]\nout = 'runs'\n[base]\nthreads = 2\n", "threads is set by the sweep itself"),
    "bad toml": ("[sweep\nout = 'runs'\n", "is not valid TOML"),
    "entry and grid": (
        "[sweep]\nout = 'runs'\n[grid]\nseed = [0]\n[[runs]]\nname = 'a'\nseed = 1\n",
        "seed is set in both [[runs]] a and [grid]",
    ),
    "same names": (
        "[sweep]\nout = 'runs'\n[[runs]]\nname = 'a'\n[[runs]]\nname = 'a'\n",
        "two runs are named a",
    ),
    "same after cleaning": (
        "[sweep]\nout = 'runs'\n[grid]\nschedule = ['fixed:2', 'fixed_2']\n",
        "two runs are named schedule=fixed_2",
    ),
    "bad name": ("[sweep]\nout = 'runs'\n[[runs]]\nname = '../up'\n", "is not a folder name"),
    "unknown evaluation": ("[sweep]\nout = 'runs'\n[eval]\nrecall = {}\n", "field 'eval.recall' is unknown"),
}
BAD_VALUES = {  # structurally fine specs whose values the commands themselves refuse
    "batch size": ("batch_size = 0", "batch_size must be"),
    "schedule": ("schedule = 'fixd:2'", "schedule"),
    "data missing": ("data = 'nowhere'", "data folder"),
    "learning rate": ("lr = -1.0", "lr must be"),
    "preset": ("preset = 'bios-huge'", "unknown preset 'bios-huge'"),
}


@pytest.mark.parametrize("text, message", BAD_SPECS.values(), ids=BAD_SPECS.keys())
def test_a_bad_spec_is_one_error_line_and_nothing_is_written(text, message, tmp_path, capsys):
    path = spec_file(tmp_path, text)
    before = snapshot(tmp_path)
    code, _, stderr = run_cli(["sweep", "run", str(path)], capsys)
    assert code == 2 and stderr.count("\n") == 1 and stderr.startswith("error: "), stderr
    assert message in stderr
    assert changes(before, snapshot(tmp_path)) == []


@pytest.mark.parametrize("line, message", BAD_VALUES.values(), ids=BAD_VALUES.keys())
def test_every_run_is_checked_before_anything_starts(line, message, folder, tmp_path, capsys):
    text = (
        f"[sweep]\nout = '{tmp_path}/runs'\n{TINY}\n[[runs]]\nname = 'good'\n[[runs]]\nname = 'bad'\n{line}\n"
    )
    path = spec_file(tmp_path, text.replace('data = "data"', f'data = "{folder / "data"}"'))
    code, _, stderr = run_cli(["sweep", "run", str(path)], capsys)
    assert code == 2 and stderr.startswith("error: run bad: ") and message in stderr, stderr
    assert not (tmp_path / "runs").exists()


def test_executor_mistakes_are_one_error_line(folder, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "submitit", None)  # as if it were not installed
    path = spec_file(tmp_path, f"[sweep]\nout = 'runs'\n{TINY}".replace('"data"', f'"{folder / "data"}"'))
    code, _, stderr = run_cli(["sweep", "run", str(path), "--executor", "slurm"], capsys)
    assert code == 2 and "pip install 'biosrecall[slurm]'" in stderr
    code, _, stderr = run_cli(["sweep", "run", str(path), "--partition", "gpu"], capsys)
    assert code == 2 and "--partition applies to --executor slurm only" in stderr
    code, _, stderr = run_cli(["sweep", "run", str(path), "--workers", "0"], capsys)
    assert code == 2 and "workers must be a positive integer" in stderr
    monkeypatch.delitem(sys.modules, "submitit")
    monkeypatch.setattr("shutil.which", lambda name: None)  # a machine without Slurm
    code, _, stderr = run_cli(["sweep", "run", str(path), "--executor", "slurm"], capsys)
    assert code == 2 and "this machine has no sbatch command" in stderr and stderr.count("\n") == 1
    assert not (tmp_path / "runs").exists()


def test_sweep_is_a_command_of_biosrecall():
    from biosrecall.cli import COMMANDS

    assert COMMANDS["sweep"] == ("biosrecall.cli.sweep", "sweep")  # the lead registers it in biosrecall.cli


# ---- running ---------------------------------------------------------------------------------------


def test_two_workers_finish_the_good_runs_and_report_the_failed_ones(folder, swept):
    code, output = swept
    assert code == 1, output  # a run failed: exit 1 at the end, after every other run
    for seed in (0, 1):
        run_dir = folder / "runs" / f"seed{seed}" / "fixed"
        assert 1.0 in RunFolder(run_dir).fraction_checkpoints()
        assert RunFolder(run_dir).read_config()["train_config"]["seed"] == seed
        assert (
            RunFolder(run_dir).fraction_checkpoints()[1.0] / "recall.parquet"
        ).is_file()  # evaluated: the cache
        record = json.loads((folder / "runs/.sweep" / f"seed{seed}" / "broken.json").read_text())
        assert record["state"] == "failed" and record["exit_code"] == 2
        assert "manifest.json is corrupt: Expecting value" in record["error"]
        assert f"failed seed{seed}/broken (exit 2)" in output
    assert "4 runs: 2 trained, 2 failed" in output
    assert "--threads 1" in (folder / "runs/.sweep/seed0/fixed.log").read_text()


def test_a_rerun_skips_finished_runs(folder, swept, capsys):
    runs = [folder / "runs" / f"seed{seed}" / "fixed" for seed in (0, 1)]
    before = [final_mtime(run) for run in runs]
    logs = [(folder / "runs/.sweep" / f"seed{s}" / "fixed.log").read_text() for s in (0, 1)]
    code, out, _ = run_cli(["sweep", "run", str(folder / "main.toml"), "--only", "seed*/fixed"], capsys)
    assert code == 0 and "2 runs: 2 skipped" in out
    assert [final_mtime(run) for run in runs] == before
    assert [(folder / "runs/.sweep" / f"seed{s}" / "fixed.log").read_text() for s in (0, 1)] == logs


def test_status_shows_each_state(folder, swept, capsys):
    spec = spec_file(folder, MAIN + '[[runs]]\nname = "later"\nschedule = "fixed:2"\n', "more.toml")
    (folder / "runs" / "seed1").mkdir(exist_ok=True)
    with output_lock(folder / "runs" / "seed1" / "later"):  # as a trainer started by hand holds it
        code, out, _ = run_cli(["sweep", "status", str(spec), "--json"], capsys)
        rows = {row["name"]: row for row in json.loads(out)}
    assert code == 0
    states = {name: row["state"] for name, row in rows.items()}
    assert states == {
        "seed0/fixed": "done", "seed1/fixed": "done", "seed0/broken": "failed", "seed1/broken": "failed",
        "seed0/later": "waiting", "seed1/later": "running",
    }  # fmt: skip
    assert rows["seed0/fixed"]["updates"] == rows["seed0/fixed"]["planned"] == 10
    _, out, _ = run_cli(["sweep", "status", str(folder / "main.toml")], capsys)
    assert "4 runs: 2 done, 0 running, 2 failed, 0 waiting" in out


def test_collect_writes_the_tables(folder, swept, capsys):
    code, _, _ = run_cli(["sweep", "collect", str(folder / "main.toml")], capsys)
    assert code == 0
    out = folder / "runs" / "collect"
    runs = pd.read_csv(out / "runs.csv")
    assert list(runs["run"]) == ["seed0/fixed", "seed1/fixed", "seed0/broken", "seed1/broken"]
    assert list(runs["state"]) == ["done", "done", "failed", "failed"] and list(runs["entry"])[0] == "fixed"
    curves = pd.read_csv(out / "recall_curve.csv")
    assert curves["depth"].max() == 4 and curves["run"].nunique() == 2  # the evaluation's settings
    seeds = pd.read_csv(out / "recall_curve_seeds.csv")
    assert set(seeds["group"]) == {"fixed"} and set(seeds["n_seeds"]) == {2}
    assert (out / "summary.csv").is_file() and (out / "recall_curve.png").is_file()
    assert (out / "summary_runs.parquet").is_file()  # written by recall-curve's writer, as there


def test_dry_run_prints_the_plan_and_writes_nothing(folder, swept, capsys):
    before = snapshot(folder / "runs")
    code, out, _ = run_cli(["sweep", "run", str(folder / "main.toml"), "--dry-run"], capsys)
    assert code == 0 and changes(before, snapshot(folder / "runs")) == []
    assert "skip     seed0/fixed" in out and "train    seed0/broken" in out


def wait_for(condition, what: str, timeout: float = 120) -> None:
    deadline = time.time() + timeout
    while not condition():
        if time.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def test_a_killed_run_is_resumed_on_rerun(folder, tmp_path):
    config = TrainConfig(batch_size=4, schedule="fixed:2", budget_of="fixed:2:80", save_every=3)
    runs = [SweepRun("long", "train", config, tiny_task(folder))]
    outcomes = []
    sweeper = threading.Thread(target=lambda: outcomes.append(run_sweep(tmp_path / "out", runs)))
    sweeper.start()
    record, run_dir = tmp_path / "out/.sweep/long.json", tmp_path / "out/long"
    wait_for(
        lambda: (run_dir / "checkpoints/latest").exists() and len(RunFolder(run_dir).read_metrics()) >= 10,
        "updates",
    )
    os.kill(json.loads(record.read_text())["pid"], signal.SIGKILL)
    sweeper.join()
    assert [(o.state, o.exit_code, o.error) for o in outcomes[0].outcomes] == [
        ("failed", -9, "killed by SIGKILL")
    ]
    assert run_status(load_jobs(tmp_path / "out", runs)[0])["state"] == "failed"
    result = run_sweep(tmp_path / "out", runs)
    assert [(o.state, o.action) for o in result.outcomes] == [("done", "resumed")]
    planned = RunFolder(run_dir).read_config()["plan"]["updates"]
    assert [row["update"] for row in RunFolder(run_dir).read_metrics()] == list(
        range(planned)
    )  # each update once
    assert "--resume" in (tmp_path / "out/.sweep/long.log").read_text().split("== ")[-1]


def tiny_task(folder: Path) -> dict:
    """A bioS run's task on the shared tiny dataset, its progress lines left out."""
    return {"data": str(folder / "data"), "preset": "bios-tiny", "quiet": True}


def load_jobs(out, runs):
    from biosrecall.sweep.jobs import build_jobs

    return build_jobs(out, runs)


def test_the_slurm_executor_runs_a_job_array_through_submitit(folder, tmp_path):
    pytest.importorskip("submitit")  # the `slurm` extra; CI installs it
    config = TrainConfig(batch_size=4, schedule="fixed:2", budget_of="fixed:2:10")
    result = run_sweep(
        tmp_path / "out",
        [SweepRun("one", "train", config, tiny_task(folder))],
        executor=SlurmExecutor(cluster="local"),
    )
    assert [(o.state, o.action) for o in result.outcomes] == [("done", "trained")]
    assert 1.0 in RunFolder(tmp_path / "out/one").fraction_checkpoints()
    assert any((tmp_path / "out/.sweep/submitit").iterdir())


def test_a_run_the_engine_cannot_start_is_failed_and_the_queue_goes_on(folder, tmp_path, monkeypatch):
    """An error of the engine itself (here: the run cannot be started) fails that run, not the sweep."""
    from biosrecall.sweep import executors

    real = executors.run_one

    def broken_for_a(job, env, running):
        if job.name == "a":
            raise OSError(28, "No space left on device")
        return real(job, env, running)

    monkeypatch.setattr(executors, "run_one", broken_for_a)
    config = TrainConfig(batch_size=4, schedule="fixed:2", budget_of="fixed:2:6")
    runs = [SweepRun(name, "train", config, tiny_task(folder)) for name in ("a", "b")]
    result = run_sweep(tmp_path / "out", runs, executor=LocalExecutor(workers=1))
    assert [(o.name, o.state) for o in result.outcomes] == [("a", "failed"), ("b", "done")]
    assert "No space left on device" in result.failed[0].error


def test_the_python_api_refuses_a_bad_run_before_writing(tmp_path):
    with pytest.raises(BiosrecallError, match="run x: data folder"):
        run_sweep(
            tmp_path / "out",
            [SweepRun("x", "train", TrainConfig(updates=5), {"data": str(tmp_path / "none")})],
        )
    assert not (tmp_path / "out").exists()
