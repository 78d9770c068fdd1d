"""Where an engine study's runs go (`biosrecall study NAME`, `biosrecall leaderboard`): a tiny leaderboard
runs to the end as a Slurm job array (submitit's local cluster stands in for Slurm), `--device cuda`
reaches every run, its evaluation and its GPU count, `--plan` estimates each run's training time and
the total, and a study whose runs all fail says so in one bounded line.

    pytest -q tests/test_study_executors.py
"""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest

from biosrecall.cli import main
from biosrecall.errors import MAX_MESSAGE
from biosrecall.experiments import engine, leaderboard
from biosrecall.experiments.leaderboard import LEADERBOARD, SCHEDULES, LeaderboardOptions
from biosrecall.sizing import format_seconds
from biosrecall.sweep.engine import SweepResult, prepare
from biosrecall.sweep.executors import LocalExecutor, SlurmExecutor
from biosrecall.sweep.worker import Outcome

TINY = ("--tasks", "bios", "--recipes", "baseline", "--seeds", "0", "--size", "tiny", "--quiet")


@pytest.fixture(scope="module")
def bios(tmp_path_factory) -> Path:
    from biosrecall.bios.dataset import generate_dataset

    return generate_dataset(tmp_path_factory.mktemp("executors") / "bios", people=20, seed=0)


def cli(capsys, *argv) -> tuple[object, str, str]:
    """(exit code, stdout, stderr) of an in-process `biosrecall` call."""
    try:
        main([str(word) for word in argv])
        code = 0
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def slurm_here(monkeypatch) -> None:
    """`--executor slurm` builds its executor on submitit's local cluster: the same array, as processes
    on this machine, where there is no sbatch."""
    real = engine.make_executor

    def local_cluster(kind, defaults, given):
        return real(kind, {**defaults, "cluster": "local"} if kind == "slurm" else defaults, given)

    monkeypatch.setattr(engine, "make_executor", local_cluster)


@pytest.mark.slow
def test_a_tiny_leaderboard_runs_to_the_end_as_a_slurm_job_array(bios, tmp_path, capsys, monkeypatch):
    pytest.importorskip("submitit")  # the `slurm` extra
    slurm_here(monkeypatch)
    # Two schedules are enough to show the array runs them all; the whole grid is tests/test_leaderboard.py's.
    monkeypatch.setattr(leaderboard, "SCHEDULES", {k: SCHEDULES[k] for k in ("fixed-k4", "uniform")})
    out = tmp_path / "lb"
    code, stdout, stderr = cli(capsys, "leaderboard", "--bios-data", bios, *TINY, "--device", "cpu",
                               "--executor", "slurm", "--cpus-per-run", "1", "--array-parallelism", "2",
                               "--out", out)  # fmt: skip
    assert code == 0, stderr
    table = pd.read_csv(out / "leaderboard.csv")
    assert sorted(table["schedule"]) == ["fixed-k4", "uniform"] and set(table["recipe"]) == {"baseline"}
    assert table["k1"].notna().all()  # every run trained and was scored
    assert any((out / "runs/.sweep/submitit").iterdir())  # submitit's scripts and logs: the array ran
    assert "wrote" in stdout and (out / "claims.csv").is_file()
    # Rerun: every run is done, so nothing is handed to the array again.
    handed = []
    monkeypatch.setattr(engine, "sweep_study_runs", lambda *args, **kw: handed.append(args))
    code, _, stderr = cli(capsys, "leaderboard", "--bios-data", bios, *TINY, "--device", "cpu",
                          "--executor", "slurm", "--out", out)  # fmt: skip
    assert code == 0 and not handed, stderr


def test_slurm_options_are_refused_for_local_runs_and_slurm_needs_sbatch(bios, tmp_path, capsys, monkeypatch):
    pytest.importorskip("submitit")
    base = ("leaderboard", "--bios-data", bios, *TINY, "--out", tmp_path / "lb")
    code, _, stderr = cli(capsys, *base, "--partition", "gpu")
    assert code == 2 and stderr.strip() == "error: --partition applies to --executor slurm only"
    code, _, stderr = cli(capsys, *base, "--executor", "slurm", "--threads", "2")
    assert code == 2 and "--threads applies to --executor local only" in stderr
    monkeypatch.setattr("shutil.which", lambda name: None)
    code, _, stderr = cli(capsys, *base, "--executor", "slurm")
    assert code == 2 and "no sbatch command" in stderr
    assert not (tmp_path / "lb").exists()  # refused before anything is written


def test_device_cuda_reaches_every_run_its_evaluation_and_its_gpu(bios, tmp_path):
    options = LeaderboardOptions(bios_data=str(bios), tasks=("bios",), size="tiny", recipes=("baseline",),
                                 seeds=(0,), device="cuda")  # fmt: skip
    runs, evaluations = LEADERBOARD.runs(options), LEADERBOARD.evaluations(options)
    for kind, given in (("local", {}), ("slurm", {"cluster": "local"})):
        executor = engine.study_executor(device="cuda", kind=kind, **given)
        assert isinstance(executor, LocalExecutor if kind == "local" else SlurmExecutor)
        jobs = prepare(tmp_path / "runs", runs, evaluations, executor)
        assert len(jobs) == len(SCHEDULES) and all(job.config.device == "cuda" for job in jobs)
        assert all(job.gpus == 1 for job in jobs)  # each run is given a GPU
        for job in jobs:
            assert job.eval_args and all(
                ("--device", "cuda") in zip(args, args[1:], strict=False) for args in job.eval_args
            )
    assert engine.study_executor(device="cpu", kind="slurm", cluster="local").gpus_per_run == 0


def test_plan_estimates_each_runs_time_and_the_total_from_its_flops(bios, tmp_path, capsys, monkeypatch):
    from biosrecall.train import trainer

    out = tmp_path / "lb"
    code, stdout, stderr = cli(capsys, "leaderboard", "--bios-data", bios, *TINY, "--workers", "2", "--plan",
                               "--out", out)  # fmt: skip
    assert code == 0, stderr
    lines = stdout.strip().splitlines()
    assert len(lines) == 2 + len(SCHEDULES) and all(" est. " in line for line in lines[1:-1])
    assert lines[-1].startswith("estimate: ") and "measured on this machine's CPU" in lines[-1]
    assert not out.exists()  # a plan writes nothing
    # Each estimate is the run's modeled FLOPs times the measured seconds per FLOP.
    monkeypatch.setattr(trainer, "seconds_per_flop", lambda model, batch, seq_len: 1e-9)
    code, stdout, _ = cli(capsys, "leaderboard", "--bios-data", bios, *TINY, "--workers", "2", "--plan",
                          "--out", out)  # fmt: skip
    lines = stdout.strip().splitlines()
    sized = [re.search(r"FLOPs ([\d,]+), est\. (\S+)$", line) for line in lines[1:-1]]
    flops = [int(match[1].replace(",", "")) for match in sized]
    assert [match[2] for match in sized] == [format_seconds(f * 1e-9) for f in flops]
    total = format_seconds(sum(flops) * 1e-9)
    assert lines[-1].startswith(f"estimate: {total} of training for {len(SCHEDULES)} run(s)")
    assert f"about {format_seconds(sum(flops) * 1e-9 / 2)} with 2 at a time" in lines[-1]


def failures(count: int, runs_dir: Path) -> list[Outcome]:
    error = "error: cannot read the dataset: " + "the reason, at length, " * 40
    return [
        Outcome(f"bios/recipe{i}/uniform/seed0", "failed", "trained", 2, error,
                str(runs_dir / ".sweep" / f"bios/recipe{i}/uniform/seed0.log"))
        for i in range(count)
    ]  # fmt: skip


@pytest.mark.parametrize("count", [1, 10])
def test_failed_runs_are_one_bounded_line_naming_the_first_and_the_others_folder(
    bios, tmp_path, capsys, monkeypatch, count
):
    """A leaderboard whose runs all fail once gave a line of over 2,000 characters: now the first run,
    its error's excerpt and log, and how many others failed with the folder of their logs."""
    out = tmp_path / "lb"
    runs_dir = out / "runs"
    monkeypatch.setattr(
        engine, "run_sweep", lambda runs_dir, *args, **kw: SweepResult(failures(count, runs_dir))
    )
    code, _, stderr = cli(capsys, "leaderboard", "--bios-data", bios, *TINY, "--out", out)
    [line] = stderr.strip().splitlines()
    assert code == 1 and len(line) <= MAX_MESSAGE, (len(line), line)
    assert line.startswith(
        "error: run bios/recipe0/uniform/seed0 failed (exit 2): error: cannot read the dataset"
    )
    assert "[log " + str(runs_dir / ".sweep/bios/recipe0/uniform/seed0.log") + "]" in line
    assert line.endswith("rerun the same command to continue once it is fixed")
    others = f"{count - 1} other run(s) failed too, their logs in {runs_dir / '.sweep'}/"
    assert (others in line) == (count > 1)


def test_killed_runs_are_one_bounded_line_too(tmp_path, monkeypatch):
    killed = [Outcome(f"seed0/run{i}", "failed", "trained", -9, "killed by SIGKILL", f"runs/.sweep/run{i}.log")
              for i in range(30)]  # fmt: skip
    monkeypatch.setattr(engine, "run_sweep", lambda *args, **kw: SweepResult(killed))
    with pytest.raises(engine.RunKilled) as info:
        engine.sweep_study_runs(tmp_path / "runs", [], (), LocalExecutor(1))
    message = str(info.value)
    assert len(message) <= engine.STUDY_MESSAGE
    assert message.startswith(
        "run seed0/run0 was killed by SIGKILL [log runs/.sweep/run0.log]; 29 other run(s)"
    )
    assert message.endswith("rerun the same command to continue")
