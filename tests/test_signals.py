"""Ctrl-C (SIGINT) and SIGTERM at any moment: exit 0 with a complete output, or 130 with one line.

Each case starts a real `biosrecall` process and sends the signal at one moment of its life: 0.1 s
after the entry point has installed its handlers (while torch and the rest still import), while the
output is being written or a run trains, once the output is in place, and once the command has
printed its result. Whatever the moment, the command either finishes (exit 0, the whole output) or
stops (exit 130, exactly one stderr line) and leaves nothing half-written: no temporary names, no
lock, no output folder that is not complete (a stopped run's folder holds only checkpoints that load).

Moments are events (a file appears, a line is printed), not fixed delays, so the cases hold however
loaded the machine is. The time before the entry point runs (the interpreter starting) is Python's.
The installed console script is also stopped at fixed delays from 0.1 s on, as a user would stop it:
wherever a delay lands on a given machine, the same outcome holds.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

import biosrecall
from biosrecall.bios import generate_dataset, load_dataset
from biosrecall.cli import main
from biosrecall.interrupts import INTERRUPTED, STOP_SIGNALS
from biosrecall.locking import ASIDE_SUFFIX, TEMPORARY_SUFFIX
from biosrecall.train.checkpoint_files import load_checkpoint
from biosrecall.train.run_folder import RunFolder

pytestmark = pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc/<pid>/status")

SETTLE = 0.1  # seconds after the entry point has installed its handlers
TIMEOUT = 600


def start(argv: list[str], cwd: Path, *, driver: str | None = None) -> subprocess.Popen:
    """`python -m biosrecall ARGV` (or `python -c DRIVER ARGV`), with its output piped."""
    entry = ["-c", driver] if driver else ["-m", "biosrecall"]
    return subprocess.Popen(
        [sys.executable, *entry, *argv], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def handlers_installed(process: subprocess.Popen) -> bool:
    """Whether the process catches SIGTERM, which Python does not by default: its entry point has run."""
    try:
        status = Path(f"/proc/{process.pid}/status").read_text()
    except FileNotFoundError:  # already gone
        return True
    caught = next(line for line in status.splitlines() if line.startswith("SigCgt:")).split()[1]
    return bool(int(caught, 16) >> (signal.SIGTERM - 1) & 1)


def wait_until(process: subprocess.Popen, ready: Callable[[], bool]) -> bool:
    """Poll `ready` while the process runs; whether it became true before the process ended."""
    deadline = time.monotonic() + TIMEOUT
    while process.poll() is None and time.monotonic() < deadline:
        if ready():
            return True
        time.sleep(0.005)
    return False


def after_start(process: subprocess.Popen) -> bool:
    if not wait_until(process, lambda: handlers_installed(process)):
        return False
    time.sleep(SETTLE)
    return True


def after_first_line(process: subprocess.Popen) -> bool:
    """Once the command has printed its first line of results (stdout), which it does when done."""
    process.first_line = process.stdout.readline()
    return bool(process.first_line)


def stop(process: subprocess.Popen, moment: Callable, sig: int = signal.SIGINT) -> tuple[int, str, str]:
    """Send `sig` at `moment` (if the process still runs); (exit status, stdout, stderr)."""
    if moment(process) and process.poll() is None:
        process.send_signal(sig)
    if hasattr(process, "first_line"):  # the rest of stdout sits in the reader's buffer: read on from it
        out, err = process.first_line + process.stdout.read(), process.stderr.read()
        process.wait(timeout=TIMEOUT)
    else:
        out, err = process.communicate(timeout=TIMEOUT)
    return process.returncode, out, err


def assert_stopped_or_finished(code: int, stderr: str, stop_lines: tuple[str, ...] = ("interrupted",)):
    """Exit 0 without a traceback, or exit 130 with exactly one stderr line (ending as one of `stop_lines`)."""
    assert code in (0, INTERRUPTED), (code, stderr)
    if code == INTERRUPTED:
        lines = stderr.splitlines()
        assert len(lines) == 1 and lines[0].endswith(stop_lines), stderr
    else:
        assert "Traceback" not in stderr, stderr


def leftovers(folder: Path) -> list[str]:
    """Temporary names, locks and set-aside folders anywhere under `folder`."""
    ends = (TEMPORARY_SUFFIX, ASIDE_SUFFIX, ".lock")
    return [str(p) for p in folder.rglob("*") if p.name.endswith(ends)]


def at_start(cwd: Path) -> Callable[[subprocess.Popen], bool]:
    return after_start


def when_exists(pattern: str) -> Callable[[Path], Callable[[subprocess.Popen], bool]]:
    """The moment a path matching `pattern` (a glob under the working folder) appears."""
    return lambda cwd: lambda process: wait_until(process, lambda: any(cwd.glob(pattern)))


# ---- generate ---------------------------------------------------------------------------------------

GENERATE = ["generate", "--out", "out", "--people", "200", "--seed", "3"]
WRITTEN = when_exists("out")  # the complete folder is swapped into place under this name


@pytest.mark.parametrize(
    "moment, sig",
    [
        pytest.param(at_start, signal.SIGINT, id="starting"),
        pytest.param(when_exists(".out.*.tmp"), signal.SIGINT, id="writing"),
        pytest.param(when_exists(".out.*.tmp"), signal.SIGTERM, id="writing-SIGTERM"),
        pytest.param(WRITTEN, signal.SIGINT, id="written"),
    ],
)
def test_generate_stops_cleanly_or_finishes(tmp_path, moment, sig):
    code, _, stderr = stop(start(GENERATE, tmp_path), moment(tmp_path), sig)
    assert_stopped_or_finished(code, stderr)
    assert leftovers(tmp_path) == []
    if code == 0 or (tmp_path / "out").exists():
        assert load_dataset(tmp_path / "out").num_people == 200  # complete: it loads and checks out
    if moment is WRITTEN:  # the dataset was in place when the signal came: nothing was interrupted
        assert (code, stderr) == (0, ""), stderr


def test_generate_exits_0_once_it_has_printed_its_result(tmp_path):
    code, stdout, stderr = stop(start(GENERATE, tmp_path), after_first_line)
    assert (code, stderr) == (0, "")
    assert "bits/person" in stdout  # the whole summary, not cut short
    assert load_dataset(tmp_path / "out").num_people == 200


# ---- train ------------------------------------------------------------------------------------------

TRAIN_STOPS = ("interrupted", "resume with --resume")


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    return generate_dataset(tmp_path_factory.mktemp("signals") / "data", people=20, seed=0)


def train_args(dataset: Path, *extra: str) -> list[str]:
    return [
        "train", "--data", str(dataset), "--out", "run", "--preset", "bios-tiny", "--batch-size", "4",
        "--schedule", "fixed:1", "--budget-of", "fixed:1:8", "--save-every", "2", "--threads", "1", "--quiet",
        *extra,
    ]  # fmt: skip


def assert_trained(run: Path) -> None:
    """The run is complete: its final checkpoint loads and every update is logged."""
    load_checkpoint(RunFolder(run).select_checkpoints("final")["1.0"])
    assert len((run / "metrics.jsonl").read_text().splitlines()) == 8


@pytest.mark.parametrize(
    "moment",
    [pytest.param(at_start, id="starting"), pytest.param(when_exists("run/metrics.jsonl"), id="training")],
)
def test_train_stops_cleanly_or_finishes(dataset, tmp_path, moment):
    code, _, stderr = stop(start(train_args(dataset), tmp_path), moment(tmp_path))
    assert_stopped_or_finished(code, stderr, TRAIN_STOPS)
    assert leftovers(tmp_path) == []
    if code == INTERRUPTED and (tmp_path / "run").exists():  # what the stop kept resumes
        resumed = subprocess.run(
            [sys.executable, "-m", "biosrecall", *train_args(dataset, "--resume")],
            cwd=tmp_path,
            capture_output=True,
        )
        assert resumed.returncode == 0, resumed.stderr
    if (tmp_path / "run").exists():
        assert_trained(tmp_path / "run")


def test_train_exits_0_once_it_has_printed_its_result(dataset, tmp_path):
    loud = [arg for arg in train_args(dataset) if arg != "--quiet"]  # --quiet prints no result lines
    code, stdout, stderr = stop(start(loud, tmp_path), after_first_line)
    assert code == 0 and "error" not in stderr and "Traceback" not in stderr
    assert stdout.startswith("trained 8 updates") and "checkpoint 1:" in stdout
    assert_trained(tmp_path / "run")


# ---- figure1 ----------------------------------------------------------------------------------------

# `biosrecall figure1` with a tiny preset registered, started as the entry point starts it: the
# handlers first, then the imports (each run trains in a `python -m biosrecall train` of its own).
FIGURE1_DRIVER = """
from biosrecall import interrupts

interrupts.stop_on_signals()
try:
    from biosrecall.experiments import figure1
    figure1.FIGURE1_PRESETS["tiny"] = figure1.Figure1Preset(
        people=8, model_preset="bios-tiny", batch_size=4, seq_len=96, budget_updates=12, lr=1e-2,
        max_depth=4, eval_people=4,
    )
    from biosrecall.cli import main
except KeyboardInterrupt:
    interrupts.interrupted()
main()
"""
FIGURE1 = ["figure1", "--preset", "tiny", "--out", "out", "--seeds", "0", "--workers", "1", "--quiet"]
FIGURE1_STOPS = ("interrupted", "rerun the same command to continue")


@pytest.mark.parametrize(
    "moment",
    [
        pytest.param(at_start, id="starting"),  # stops while importing: a fraction of a second
        # Stopped while training, then resumed: tests/test_figure1_promises.py, TestCtrlC. A signal
        # after the output is complete meets the same `work_done` as generate's and train's below.
    ],
)
def test_figure1_stops_cleanly_or_finishes(tmp_path, moment):
    code, stdout, stderr = stop(start(FIGURE1, tmp_path, driver=FIGURE1_DRIVER), moment(tmp_path))
    assert_stopped_or_finished(code, stderr, FIGURE1_STOPS)
    assert leftovers(tmp_path) == []


# ---- the console script, at fixed delays ------------------------------------------------------------

# Seconds after the process starts. On an idle machine generate ends after about 0.5 s, so its later
# delays come after the end; train imports torch until about 2 s and trains until about 3 s.
DELAYS = (0.1, 0.3, 1.0, 3.0)


@pytest.fixture(scope="module")
def console_script() -> str:
    """The installed `biosrecall` script: beside this interpreter (a virtual environment), or on PATH."""
    beside = Path(sys.executable).with_name("biosrecall")
    found = str(beside) if beside.is_file() else shutil.which("biosrecall")
    if found is None:
        pytest.skip("the biosrecall console script is not installed (pip install -e .)")
    return found


def before_the_first_instruction(code: int, stderr: str) -> bool:
    """The signal came while Python itself was still starting, before the console script reached the
    package's first instruction (on a loaded machine 0.1 s can be that early): no handler of ours can
    exist yet, so Python's default applies. Told by a traceback with no frame in the package; the
    callers still check that nothing was written."""
    if "Fatal Python error: init_import_site" in stderr and "KeyboardInterrupt" in stderr:
        return True  # stopped while the interpreter imported `site`, before any script ran
    frames = [line for line in stderr.splitlines() if line.strip().startswith('File "')]
    package = str(Path(biosrecall.__file__).parent) + os.sep
    return code == -signal.SIGINT and bool(frames) and not any(package in f for f in frames)


def at_delay(seconds: float) -> Callable[[subprocess.Popen], bool]:
    """The moment `seconds` after the start, if the process is still running then."""

    def moment(process: subprocess.Popen) -> bool:
        try:
            process.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            return True
        return False  # ended before the delay: nothing to send

    return moment


def run_script(script: str, argv: list[str], cwd: Path, seconds: float, sig: int) -> tuple[int, str]:
    """Start the console script, send `sig` `seconds` later; (exit status, stderr)."""
    process = subprocess.Popen(
        [script, *argv], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    code, _, stderr = stop(process, at_delay(seconds), sig)
    return code, stderr


@pytest.mark.parametrize("seconds", DELAYS)
def test_the_console_script_generates_or_stops_at_any_delay(console_script, tmp_path, seconds):
    code, stderr = run_script(console_script, GENERATE, tmp_path, seconds, signal.SIGINT)
    if not before_the_first_instruction(code, stderr):
        assert_stopped_or_finished(code, stderr)
    assert leftovers(tmp_path) == []
    if code == 0 or (tmp_path / "out").exists():
        assert load_dataset(tmp_path / "out").num_people == 200


@pytest.mark.parametrize(
    "seconds, sig",
    [*((s, signal.SIGINT) for s in DELAYS), (2.5, signal.SIGTERM)],
    ids=[*(f"SIGINT-{s}" for s in DELAYS), "SIGTERM-2.5"],
)
def test_the_console_script_trains_or_stops_at_any_delay(console_script, dataset, tmp_path, seconds, sig):
    code, stderr = run_script(console_script, train_args(dataset), tmp_path, seconds, sig)
    if not before_the_first_instruction(code, stderr):
        assert_stopped_or_finished(code, stderr, TRAIN_STOPS)
    assert leftovers(tmp_path) == []
    run = tmp_path / "run"
    if code == 0:
        assert_trained(run)
    elif run.exists():  # a stopped run keeps only checkpoints that load (resuming is tested above)
        for checkpoint in RunFolder(run).kept_checkpoints().values():
            load_checkpoint(checkpoint)


# ---- the handlers themselves ------------------------------------------------------------------------


def test_a_stop_caught_after_a_string_exec_still_exits_130(tmp_path):
    """CPython ends a `python -m` process with SIGINT (-2) when a KeyboardInterrupt passed through a
    string `exec` (as dataclasses build their methods during imports), even once it was caught."""
    (tmp_path / "stopped_in_exec.py").write_text(
        "from biosrecall import interrupts\n"
        "interrupts.stop_on_signals()\n"
        "try:\n"
        "    exec('raise KeyboardInterrupt', {})\n"
        "except KeyboardInterrupt:\n"
        "    interrupts.interrupted()\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    done = subprocess.run([sys.executable, "-m", "stopped_in_exec"], env=env, capture_output=True, text=True)
    assert (done.returncode, done.stderr) == (INTERRUPTED, "interrupted\n")


def test_a_call_from_python_puts_the_handlers_back(capsys):
    before = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}
    main(["--help"])
    assert "Commands:" in capsys.readouterr().out
    assert {sig: signal.getsignal(sig) for sig in STOP_SIGNALS} == before
