"""Hostile inputs, round three: inputs larger than the machine, a worker that dies, damaged derived
files, empty or padded list items, and leftovers (metrics past the saved state, stale temporaries,
advice, a refusal that writes).

Most cases run the CLI in-process in a private copy of `test_hostile_runs`' world (a dataset and one
finished run) and assert exit 2, exactly one `error:` line, no traceback and nothing touched. The
machine's limits are made small by replacing what `biosrecall.sizing` reads; one case runs under a real
address-space limit, and one checks the dataset estimate against a measured run. Workers are killed
for real (SIGKILL), by a scoring function that kills itself or the fork server it came from.

    pytest -q tests/test_hostile_round3.py
"""

from __future__ import annotations

import fcntl
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from harness import run_cli
from test_hostile_data import assert_refused, hidden
from test_hostile_runs import assert_same_run, case_dir, stopped_at, train_args, world

from biosrecall import sizing
from biosrecall.errors import BiosrecallError
from biosrecall.train.config import TrainConfig
from biosrecall.train.run_folder import RunFolder

__all__ = ["case_dir", "world"]  # the shared fixtures: a fresh copy of the world per test

TESTS = Path(__file__).resolve().parent
GB = 1e9


def small_machine(monkeypatch, memory: float = 1 * GB, disk: float | None = None) -> None:
    """A machine with `memory` bytes available (and `disk` bytes free), as `biosrecall.sizing` reads it."""
    monkeypatch.setattr(sizing, "available_memory", lambda: (int(memory), "a test limit"))
    if disk is not None:
        monkeypatch.setattr(sizing, "free_disk", lambda path: int(disk))


# ---- 1. inputs larger than the machine -------------------------------------------------------------

MEASURE = """
import resource, sys, time
from pathlib import Path
from biosrecall.bios import generate_dataset

def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS"):
            return int(line.split()[1]) * 1024

before, start = rss(), time.perf_counter()
generate_dataset(sys.argv[1], people=int(sys.argv[2]), seed=0)
seconds = time.perf_counter() - start
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
disk = sum(p.stat().st_size for p in Path(sys.argv[1]).iterdir())
print(peak - before, disk, seconds)
"""


class TestSizes:
    def test_the_dataset_estimate_holds_against_a_measured_run(self, tmp_path):
        """Memory within a factor of 3 and disk within 25% of a real 300,000-person run; time within
        a factor of 10 (the machine may be shared). Alone the run peaks at 174-179 MB against the
        180 MB estimate; inside the whole suite on two workers it once peaked at 483 MB, which the
        factor allows until that is understood."""
        people = 300_000
        done = subprocess.run([sys.executable, "-c", MEASURE, str(tmp_path / "d"), str(people)],
                              capture_output=True, text=True, timeout=300, check=True)  # fmt: skip
        memory, disk, seconds = map(float, done.stdout.split())
        cost = sizing.dataset_cost(people)
        assert memory / 3 <= cost.memory <= memory * 3, (cost, memory)
        assert disk / 1.25 <= cost.disk <= disk * 1.25, (cost, disk)
        assert seconds / 10 <= cost.seconds <= seconds * 10, (cost, seconds)

    @pytest.mark.parametrize(
        ("argv", "machine", "expect"),
        [
            (["generate", "--out", "big", "--people", "10000000"], {"memory": 1 * GB},
             "--people 10,000,000 needs about 3.6 GB of memory, more than the 1.0 GB"),
            (["generate", "--out", "big", "--people", "10000000"], {"memory": 100 * GB, "disk": 1e8},
             "--people 10,000,000 writes about 660.2 MB, more than the 100.0 MB free"),
            (["generate", "--out", "big", "--people", "1000", "--export-text", "jsonl", "--text-out", "text",
              "--exposures", "10000"], {"memory": 100 * GB, "disk": 1e9}, "exposures writes about 3.9 GB"),
            (["generate", "--from-dataset", "data", "--export-text", "jsonl", "--text-out", "text",
              "--exposures", "10000"], {"memory": 100 * GB, "disk": 1e6}, "the text of 30 people"),
            (["capacity", "--out", "cap", "--people", "10000000"], {"memory": 20 * GB},
             "--people 10,000,000 needs about"),
            (["capacity", "--out", "cap", "--people", "10000000", "--plan"], {"memory": 2 * GB},
             "--people 10,000,000 needs at this batch and these exposures must be at most 1,000,000"),
            (["lm", "prepare", "corpus.txt", "--out", "shards"], {"memory": 100 * GB, "disk": 10},
             "the shards of 0 MB of text writes about"),
            (["recall-curve", "run", "--out", "curves", "--people", "30"], {"memory": 1e6},
             "scoring 30 people needs about"),
        ],
        ids=["generate-memory", "generate-disk", "export-disk", "export-from-dataset", "capacity",
             "capacity-plan", "lm-prepare-disk", "recall-curve-people"],
    )  # fmt: skip
    def test_past_the_machine_refused_before_anything_is_written(
        self, case_dir, capsys, monkeypatch, tmp_path, argv, machine, expect
    ):
        (case_dir / "corpus.txt").write_text("A loop repeats the block.\n\nDepth is chosen late.\n")
        scratch = tmp_path / "scratch"
        scratch.mkdir()
        monkeypatch.setattr(tempfile, "tempdir", str(scratch))  # where `capacity --plan` would generate
        small_machine(monkeypatch, **machine)
        started = time.perf_counter()
        assert_refused(argv, expect, case_dir.parent, capsys)
        assert list(scratch.iterdir()) == []
        assert time.perf_counter() - started < 30  # refused up front, not after the work

    def test_under_a_real_address_space_limit(self, tmp_path):
        """ulimit -v: the command starts (its imports fit), then refuses in one line naming the limit."""
        limit = 3 * 1024**3

        def limited() -> None:
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

        command = [sys.executable, "-m", "biosrecall", "generate", "--out", "big", "--people", "20000000"]
        done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=120,
                              preexec_fn=limited)  # fmt: skip
        lines = done.stderr.splitlines()
        assert done.returncode == 2 and len(lines) == 1, done.stderr
        assert "needs about 7.1 GB of memory" in lines[0] and "ulimit -v" in lines[0], lines[0]
        assert list(tmp_path.iterdir()) == []

    def test_a_dataset_that_fits_is_not_read_back_for_its_summary(self, case_dir, capsys, monkeypatch):
        """Reading it back would double the memory generating it took (the MemoryError after the write)."""
        from biosrecall.bios.encoding import TokenArrays

        def refuse(*args, **kwargs):
            raise MemoryError("the summary read the whole dataset back")

        monkeypatch.setattr(TokenArrays, "load", refuse)
        code, stderr = run_cli(["generate", "--out", "fresh", "--people", "40"], capsys)
        assert (code, stderr) == (0, "")
        assert (case_dir / "fresh" / "manifest.json").is_file()

    def test_long_work_shows_progress(self, case_dir, capsys, monkeypatch):
        monkeypatch.setattr(sizing, "PROGRESS_AFTER", 0.0)
        code, stderr = run_cli(["generate", "--out", "fresh", "--people", "40"], capsys)
        assert code == 0, stderr
        lines = stderr.splitlines()
        assert lines[0].startswith("generating 40 people: about") and "of memory" in lines[0], stderr
        assert "  drawing 40 people" in lines and "  writing fresh" in lines, stderr

    def test_a_run_past_the_planners_limit_is_refused_from_its_first_batches(self, case_dir):
        """Counting a million updates before refusing took minutes: 32 batches tell the length."""
        from biosrecall.bios import BatchSampler, load_dataset
        from biosrecall.bios.exposures import plan_exposures

        sampler = BatchSampler(load_dataset(case_dir / "data"), 1, 96)
        # Full rows would take 0.8 million updates (under the limit); the rows really hold about half
        asked = 0.8e6 * sampler.biographies_per_row / sampler.num_people
        started = time.perf_counter()
        with pytest.raises(
            BiosrecallError, match=r"needs about [\d,]+ updates .* beyond the planner's limit"
        ):
            plan_exposures(sampler, 0, asked)
        assert time.perf_counter() - started < 10

    def test_a_killed_plans_scratch_folder_is_removed_by_the_next(self, tmp_path, monkeypatch):
        from biosrecall.locking import scratch_folder

        monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
        dead = tmp_path / "biosrecall-capacity-plan-dead0000"  # its lock is held by nobody: killed
        (dead / "people10").mkdir(parents=True)
        (dead / ".lock").write_text("")
        alive = tmp_path / "biosrecall-capacity-plan-alive000"  # held: a plan still running
        alive.mkdir()
        fd = os.open(alive / ".lock", os.O_RDWR | os.O_CREAT)
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            with scratch_folder("capacity-plan") as scratch:
                assert scratch.is_dir() and not dead.exists() and alive.exists()
            assert not scratch.exists()
        finally:
            os.close(fd)
        assert sorted(p.name for p in tmp_path.iterdir()) == [alive.name]


# ---- 2. a worker that dies -------------------------------------------------------------------------


def _die_on_one(item):
    """A scoring function: item 1 kills its own process; the others leave a mark and return."""
    folder, index = item
    if index == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(0.3)
    (Path(folder) / f"scored-{index}").write_text("")
    return index


def _kill_the_server(item):
    """A scoring function: item 1 kills the fork server it was forked from, then would go on working."""
    if item == 1:
        os.kill(os.getppid(), signal.SIGKILL)
    time.sleep(60)
    return item


def _square(item):
    return item * item


def _orphan(marker: str) -> None:
    """A forked command whose fork server dies under it; SIGINT is its chance to save and stop."""
    os.kill(os.getppid(), signal.SIGKILL)
    try:
        time.sleep(120)
    except KeyboardInterrupt:
        Path(marker).write_text("stopped")


def die_once(score, marker: str, item):
    """`score(item)`, except that the first call (of any process) kills its own process."""
    try:
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return score(item)
    os.kill(os.getpid(), signal.SIGKILL)


class TestDeadWorkers:
    def test_a_killed_scoring_worker_is_one_line_naming_it_and_the_signal(self, tmp_path):
        from biosrecall.eval.parallel import WorkerDied, map_in_processes

        items = [(str(tmp_path), index) for index in range(4)]
        with pytest.raises(WorkerDied) as info:
            map_in_processes(_die_on_one, items, workers=2, name=lambda item: f"item {item[1]}")
        message = str(info.value)
        assert "\n" not in message and message.startswith("scoring item 1 failed"), message
        assert "killed by SIGKILL" in message and "rerunning the same command continues" in message
        assert (tmp_path / "scored-0").exists(), "the item under way beside it finished"
        assert not (tmp_path / "scored-3").exists(), "nothing new started after the death"

    def test_an_item_is_named_by_its_run_and_checkpoint(self):
        from biosrecall.eval.parallel import describe_item

        job = SimpleNamespace(run_dir=Path("runs/seed0/fixed_k4"), label="0.45")
        assert describe_item((job, 64, {})) == "runs/seed0/fixed_k4 @ 0.45"
        assert describe_item((SimpleNamespace(), Path("runs/a"), 1)) == "runs/a"

    def test_a_dead_fork_server_is_named_and_the_next_call_starts_a_new_one(self):
        from biosrecall.eval.parallel import WorkerDied, map_in_processes

        with pytest.raises(
            WorkerDied, match=r"fork server its process came from \(pid \d+\) was killed by SIGKILL"
        ):
            map_in_processes(_kill_the_server, [0, 1, 2], workers=2)
        assert map_in_processes(_square, [2, 3], workers=2) == [4, 9]

    def test_a_sweep_run_whose_fork_server_dies_is_stopped_and_named(self, tmp_path):
        import multiprocessing

        from biosrecall import warm
        from biosrecall.locking import pid_alive

        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(warm.SERVER_IMPORTS)
        marker = tmp_path / "orphan"
        process = context.Process(target=_orphan, args=(str(marker),))
        with warm._BOOKKEEPING:
            process.start()
        started = warm.WarmProcess(process)
        with pytest.raises(warm.ForkServerDied, match=r"fork server \(pid \d+\) was killed by SIGKILL"):
            started.wait()
        assert not pid_alive(started.pid) and marker.read_text() == "stopped"

    def test_a_study_run_killed_by_a_signal_is_one_line_not_a_run_failure(self, tmp_path, monkeypatch):
        from biosrecall.experiments import engine
        from biosrecall.sweep.engine import SweepResult
        from biosrecall.sweep.executors import LocalExecutor
        from biosrecall.sweep.jobs import SweepRun
        from biosrecall.sweep.worker import Outcome

        killed = Outcome("seed0/fixed_k4", "failed", "trained", -9, "killed by SIGKILL", "runs/.sweep/a.log")
        monkeypatch.setattr(engine, "run_sweep", lambda *args: SweepResult([killed]))
        run = SweepRun("seed0/fixed_k4", "train", TrainConfig(schedule="fixed:4"))
        with pytest.raises(engine.RunKilled) as info:
            engine.train_study_runs(tmp_path, [run], LocalExecutor(1), None)
        assert isinstance(info.value, BiosrecallError)
        assert "run seed0/fixed_k4 was killed by SIGKILL" in str(info.value)
        assert "rerun the same command to continue" in str(info.value)


KILLING_DRIVER = """
import functools, sys
sys.path.insert(0, {tests!r})
import biosrecall.eval.parallel as parallel
real = parallel.map_in_processes

def killing(score, items, workers, threads=1, name=None):
    import test_hostile_round3 as here
    return real(functools.partial(here.die_once, score, {marker!r}), items, workers, threads, name)

if {kill!r}:  # in every module that took the name already, and in those importing it later
    for module in [m for name, m in sys.modules.items() if name.startswith("biosrecall")]:
        if getattr(module, "map_in_processes", None) is real:
            module.map_in_processes = killing
from biosrecall.cli import main
from biosrecall.experiments import figure1
figure1.FIGURE1_PRESETS["tiny"] = figure1.Figure1Preset(**{tiny})
main(sys.argv[1:])
"""


@pytest.fixture(scope="module")
def tiny_study(tmp_path_factory):
    """A finished one-seed tiny figure1 output, trained two runs at a time."""
    from test_figure1_promises import TINY, figure1_args
    from test_figure1_promises import run_cli as run_quiet

    from biosrecall.experiments import figure1

    out = tmp_path_factory.mktemp("killed") / "study"
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(figure1.FIGURE1_PRESETS, "tiny", TINY)
        assert run_quiet(figure1_args(out, "--workers", "2", "--threads", "1")) == 0
    return out


@pytest.mark.slow
def test_figure1_with_a_killed_scoring_worker_exits_2_in_one_line_and_a_rerun_finishes(tiny_study, tmp_path):
    from test_figure1_promises import TINY, figure1_args

    out = tmp_path / "study"
    shutil.copytree(tiny_study, out)
    for cache in [*out.rglob("recall.parquet"), *out.rglob("exits.parquet")]:
        cache.unlink()  # scored again, in the workers

    def figure1(kill: bool) -> subprocess.CompletedProcess:
        driver = KILLING_DRIVER.format(tests=str(TESTS), marker=str(tmp_path / "killed"), kill=kill,
                                       tiny=asdict(TINY))  # fmt: skip
        args = [sys.executable, "-c", driver, *figure1_args(out, "--workers", "2", "--threads", "1")]
        return subprocess.run(args, cwd=tmp_path, capture_output=True, text=True, timeout=600)

    killed = figure1(kill=True)
    lines = killed.stderr.splitlines()
    assert killed.returncode == 2 and len(lines) == 1, killed.stderr
    assert lines[0].startswith("error: scoring ") and "killed by SIGKILL" in lines[0], lines[0]
    assert "runs/seed0/" in lines[0] and "rerunning the same command continues" in lines[0], lines[0]
    assert "Traceback" not in killed.stderr and "leaked" not in killed.stderr
    assert list(out.rglob("recall.parquet")), "what the other worker scored is kept"
    rerun = figure1(kill=False)
    assert rerun.returncode == 0, rerun.stderr


# ---- 3. damaged derived files ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def gated(world, tmp_path_factory) -> Path:
    """The world with an exit gate fitted on its run's final checkpoint."""
    from biosrecall.cli import main

    root = tmp_path_factory.mktemp("gated") / "w"
    shutil.copytree(world, root, symlinks=True)
    try:
        main(["gate", "train", str(root / "run")])
    except SystemExit as exc:
        assert exc.code == 0
    return root


@pytest.fixture
def gate_case(gated, tmp_path, monkeypatch) -> Path:
    copy = tmp_path / "root" / "w"
    shutil.copytree(gated, copy, symlinks=True)
    monkeypatch.chdir(copy)
    return copy


def _savez(**arrays):
    def edit(path: Path) -> None:
        np.savez(path, **arrays)

    return edit


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _fifo(path: Path) -> None:
    path.unlink()
    os.mkfifo(path)


def _set_record(key, value):
    def edit(path: Path) -> None:
        record = json.loads(path.read_text())
        record[key] = value
        path.write_text(json.dumps(record))

    return edit


GATE_DAMAGE = [
    ("calibration-torn", "calibration.npz", _truncate, "calibration.npz is unreadable (BadZipFile)"),
    ("calibration-text", "calibration.npz", lambda p: p.write_text("not a zip"), "calibration.npz is unreadable"),
    ("calibration-missing", "calibration.npz", lambda p: p.unlink(), "calibration.npz does not exist"),
    ("calibration-fifo", "calibration.npz", _fifo, "calibration.npz is not a regular file"),
    ("calibration-member", "calibration.npz", _savez(scores=np.zeros((3, 5))), "unreadable (KeyError)"),
    ("calibration-shape", "calibration.npz", _savez(scores=np.zeros((3, 5)), exact=np.zeros((2, 5), bool)),
     "calibration.npz is malformed"),
    ("calibration-nan", "calibration.npz", _savez(scores=np.full((3, 5), np.nan), exact=np.zeros((4, 5), bool)),
     "calibration.npz is malformed"),
    ("record-garbage", "gate.json", lambda p: p.write_text("{"), "gate.json is corrupt"),
    ("record-confidence", "gate.json", _set_record("confidence", "high"), "field 'confidence': expected float, got str"),
    ("record-reference", "gate.json", _set_record("reference_depth", 999), "is inconsistent: reference depth 999"),
]  # fmt: skip


class TestDamagedDerivedFiles:
    @pytest.mark.parametrize(
        ("name", "edit", "expect"), [c[1:] for c in GATE_DAMAGE], ids=[c[0] for c in GATE_DAMAGE]
    )
    def test_a_damaged_gate_is_one_line_naming_its_file_and_the_refit(
        self, gate_case, capsys, name, edit, expect
    ):
        (gate,) = (gate_case / "run" / "gates").iterdir()
        edit(gate / name)
        argv = ["recall-curve", "run", "--checkpoint", "final", "--exit", "gate:0.05", "--out", "curves"]
        line = assert_refused(argv, expect, gate_case.parent, capsys)
        assert f"biosrecall gate train run --checkpoint {gate.name}" in line, line

    @pytest.mark.parametrize(
        ("change", "expect"),
        [({"num_steps": -3}, "num_steps"), ({"num_steps": 0}, "num_steps"), ({"num_steps": "4"}, "num_steps"),
         ({"num_steps": 10**9}, "num_steps"), ({"vocab_size": -1}, "vocab_size"), ({"n_heads": 0}, "n_heads")],
        ids=["negative", "zero", "text", "huge", "vocab", "heads"],
    )  # fmt: skip
    def test_an_exported_config_out_of_bounds_is_refused(self, case_dir, capsys, change, expect):
        from biosrecall.model.presets import get_preset

        folder = case_dir / "exported"
        folder.mkdir()
        config = {**get_preset("bios-tiny").to_dict(), "model_type": "biosrecall_looped", "num_steps": 4}
        (folder / "config.json").write_text(json.dumps({**config, **change}))
        line = assert_refused(["recall-curve", "--hf-model", "exported", "--data", "data", "--out", "c"],
                              "config.json is not a valid biosrecall export", case_dir.parent, capsys)  # fmt: skip
        assert expect in line, line

    def test_a_damaged_cache_table_is_scored_again(self, case_dir, capsys):
        """A derived table that can be made again (a checkpoint's recall.parquet) is: not an error."""
        argv = [
            "recall-curve",
            "run",
            "--checkpoint",
            "final",
            "--max-depth",
            "2",
            "--out",
            "curves",
            "--overwrite",
        ]
        assert run_cli(argv, capsys)[0] == 0
        cache = next((case_dir / "run").rglob("recall.parquet"))
        cache.write_bytes(b"PAR1 torn")
        code, stderr = run_cli(argv, capsys)
        assert code == 0 and "Traceback" not in stderr, stderr
        assert cache.read_bytes()[:4] == b"PAR1" and cache.stat().st_size > 100


# ---- 4. empty or padded list items -----------------------------------------------------------------

LISTS = [
    ("schedule-padded", train_args("new", "--schedule", " fixed : 4 "), "no spaces inside a schedule"),
    ("schedule-inner-space", train_args("new", "--schedule", "uniform: 1-4"), "no spaces inside a schedule"),
    ("schedule-bare-colon", train_args("new", "--schedule", "uniform:"), "the colon needs"),
    ("schedule-empty-item", train_args("new", "--schedule", "fixed_first:k0=2,,switch=0.5,finish=uniform"),
     "an empty item"),
    ("schedule-trailing-comma", train_args("new", "--schedule", "fixed_first:k0=2,switch=0.5,"), "an empty item"),
    ("schedule-bare-key", train_args("new", "--schedule", "fixed_first:k0=2,=0.5"), "must look like key=value"),
    ("budget-of-padded", train_args("new", "--budget-of", " fixed : 2 :12"), "no spaces inside a schedule"),
    ("exit-bare-colon", ["recall-curve", "run", "--exit", "kl:", "--out", "c"], "the colon needs a value"),
    ("exit-empty-item", ["recall-curve", "run", "--exit", "kl:1e-3,,stable:2", "--out", "c"], "an empty item"),
    ("exit-trailing-comma", ["recall-curve", "run", "--exit", "kl:1e-3,", "--out", "c"], "an empty item"),
    ("exit-padded", ["recall-curve", "run", "--exit", "kl : 1e-3", "--out", "c"], "no spaces inside a criterion"),
    ("exit-oracle-colon", ["recall-curve", "run", "--exit", "oracle:", "--out", "c"], "takes no parameter"),
    ("ask-bare-colon", ["ask", "run", "Ada was born in", "--exit", "stable:"], "the colon needs a value"),
]  # fmt: skip


class TestListItems:
    @pytest.mark.parametrize(("argv", "expect"), [c[1:] for c in LISTS], ids=[c[0] for c in LISTS])
    def test_refused_saying_what_was_expected(self, case_dir, capsys, argv, expect):
        line = assert_refused(argv, expect, case_dir.parent, capsys)
        assert "expected" in line or "must look like" in line or "no parameter" in line, line

    def test_valid_lists_still_parse(self):
        from biosrecall.compute.schedules import Uniform, parse_schedule
        from biosrecall.eval.exits import KL, Stable, parse_exits

        assert parse_exits("kl:1e-3, stable:2") == [KL(1e-3), Stable(2)]  # a space after a comma
        assert parse_exits(["kl", "stable:2"])[-1] == Stable(2)
        assert parse_schedule(" uniform:1-16 ") == parse_schedule("uniform") == Uniform(1, 16)


# ---- 5. leftovers and advice -----------------------------------------------------------------------


class TestLeftovers:
    def test_metrics_never_run_ahead_of_the_newest_saved_state(self, case_dir, world, capsys):
        from test_hostile_run_writes import full_disk

        from biosrecall.train.run_folder import RunFolder

        stopped_at(case_dir, 2, capsys)
        with pytest.MonkeyPatch.context() as patch:
            full_disk("weights", 1)(patch)  # the resume's first save finds the disk full
            code, stderr = run_cli(train_args("run", "--resume"), capsys)
        assert code == 2 and "No space left on device" in stderr, stderr
        assert RunFolder(case_dir / "run").latest_checkpoint().name == "state-00000002"
        assert len(RunFolder(case_dir / "run").read_metrics()) == 2, "rows past the saved state are cut"
        assert run_cli(train_args("run", "--resume"), capsys) == (0, "")
        assert_same_run(case_dir / "run", world / "run")

    def test_a_killed_writers_temporaries_are_removed_by_the_next_write(self, tmp_path):
        """SIGKILL while a figure is saved leaves an empty `.<stem>.XXXXXXXX.tmp.pdf`; the next save of
        that figure removes it (and `.tmp` files of plain writes), but never one a live writer holds."""
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        from biosrecall.atomic import atomic_write_text
        from biosrecall.outputs import save_figure

        kill = ("import os, signal\nfrom biosrecall.atomic import atomic_write_path, atomic_write_bytes\n"
                "with atomic_write_path('out/figure1.pdf') as tmp:\n    os.kill(os.getpid(), signal.SIGKILL)\n")  # fmt: skip
        assert subprocess.run([sys.executable, "-c", kill], cwd=tmp_path).returncode == -signal.SIGKILL
        left = hidden(tmp_path / "out")
        assert len(left) == 1 and left[0].startswith(".figure1.") and left[0].endswith(".tmp.pdf"), left
        held = tmp_path / "out" / ".figure1.held0000.tmp.png"  # a live writer's: it holds the lock
        held.write_bytes(b"")
        stale = tmp_path / "out" / ".summary.csv.dead0000.tmp"
        stale.write_bytes(b"")
        old = time.time() - 60
        for path in (tmp_path / "out").iterdir():
            os.utime(path, (old, old))
        fd = os.open(held, os.O_RDONLY)
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            figure = plt.figure()
            save_figure(figure, tmp_path / "out" / "figure1")
            plt.close(figure)
            atomic_write_text(tmp_path / "out" / "summary.csv", "a\n")
        finally:
            os.close(fd)
        assert hidden(tmp_path / "out") == [held.name]

    def test_study_lines_advise_rerunning_the_study_not_resume(self, tmp_path, monkeypatch):
        from biosrecall.experiments import engine
        from biosrecall.sweep.engine import SweepResult
        from biosrecall.sweep.executors import LocalExecutor
        from biosrecall.sweep.jobs import SweepRun
        from biosrecall.sweep.worker import Outcome

        error = ("cannot write run: No space left on device (errno 28, ENOSPC); run/checkpoints/latest still "
                 "holds the complete state of update 8: resume with --resume once the problem is fixed")  # fmt: skip
        failed = Outcome("seed0/fixed_k4", "failed", "trained", 2, error, "a.log")

        def sweep(runs_dir, runs, evaluations, executor, report):
            report(failed)  # as the executor reports each run as it ends
            return SweepResult([failed])

        monkeypatch.setattr(engine, "run_sweep", sweep)
        reported = []
        run = SweepRun("seed0/fixed_k4", "train", TrainConfig(schedule="fixed:4"))
        with pytest.raises(engine.StudyRunFailed) as info:
            engine.train_study_runs(tmp_path, [run], LocalExecutor(1), reported.append)
        lines = [str(info.value), *(o.error for o in reported if not isinstance(o, str))]
        assert len(lines) == 2 and all("--resume" not in line for line in lines), lines
        assert lines[1].endswith("still holds the complete state of update 8"), lines[1]
        stopped = Outcome("a", "failed", "trained", 130, "interrupted at update 3; resume with --resume")
        assert engine.study_words(stopped).error == "interrupted at update 3"

    def test_a_refused_figure1_writes_nothing(self, tmp_path, capsys, monkeypatch):
        """Its record is not rewritten, not even with the same bytes: a run another process holds is
        found before anything is touched."""
        from test_figure1_promises import TINY, figure1_args

        from biosrecall.experiments import engine, figure1

        monkeypatch.setitem(figure1.FIGURE1_PRESETS, "tiny", TINY)
        out = tmp_path / "study"

        def stopped(*args, **kwargs):
            raise KeyboardInterrupt

        with pytest.MonkeyPatch.context() as patch:  # stopped at its first run: record and data written
            patch.setattr(engine, "run_sweep", stopped)
            code, stderr = run_cli(figure1_args(out), capsys)
        assert code == 130, stderr
        lock = RunFolder(out / "runs" / "seed0" / "fixed_k4").lock_file
        lock.parent.mkdir(parents=True, exist_ok=True)
        lock.write_text(f"{os.getpid()}\n")  # `train --resume` of one run, by hand, in another process
        assert_refused(figure1_args(out), "run seed0/fixed_k4 is being trained by another process",
                       tmp_path, capsys)  # fmt: skip
