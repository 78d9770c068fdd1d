"""Hostile inputs, round four: `--overwrite` replaces only a folder the command's own record marks, and
whole; training sizes itself before its first update; parsers and messages bound their input; inputs
that would corrupt a result (a source twice, a text in both splits, a sweep writing into its data)
are refused; a killed scoring worker leaves no "leaked semaphore" warning after its line.

Most cases run the CLI in-process on a private copy of `test_hostile_runs`' world (a dataset and one
finished run) and assert exit 2, exactly one `error:` line, no traceback and nothing touched.

    pytest -q tests/test_hostile_round4.py
"""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import click
import numpy as np
import pytest
from harness import changes, run_cli, snapshot
from test_hostile_data import assert_refused
from test_hostile_runs import case_dir, train_args, world

from biosrecall import sizing
from biosrecall.cli import cli
from biosrecall.errors import BiosrecallError
from biosrecall.train.run_folder import RunFolder

__all__ = ["case_dir", "world"]  # the shared fixtures: a fresh copy of the world per test

TESTS = Path(__file__).resolve().parent
MAX_MESSAGE = 500  # the longest error line, whatever the input (issue: "no message longer than 500")
USER_FILES = {"notes.txt": "my own notes\n", "results.csv": "a,b\n1,2\n", "sub/keep.md": "# mine\n"}


def user_folder(path: Path, extra: dict[str, str] | None = None) -> Path:
    """A folder of the user's own files (no command wrote it)."""
    for name, text in {**USER_FILES, **(extra or {})}.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(text)
    return path


def one_line(code, stderr: str, *needles: str) -> str:
    lines = stderr.splitlines()
    assert "Traceback" not in stderr, stderr
    assert code == 2, f"exit {code}; stderr: {stderr}"
    assert len(lines) == 1 and lines[0].startswith("error: "), stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


# ---- 1. --overwrite replaces only what the command's own record marks ----------------------------


@pytest.mark.parametrize(
    ("argv", "extra"),
    [
        (["recall-curve", "run", "--max-depth", "2", "--out", "mine", "--overwrite"], {}),
        # A user's folder that happens to hold a recall-curve-looking file is still not replaced whole.
        (["recall-curve", "run", "--max-depth", "2", "--out", "mine", "--overwrite"], {"summary.csv": "x\n"}),
        (
            ["generate", "--out", "mine", "--people", "12", "--overwrite"],
            {"manifest.json": '{"format": "mine"}'},
        ),
        (["pools", "--out", "mine", "--overwrite"], {"first_name.txt": "Ann\n"}),
        (["lm", "prepare", "doc.txt", "--out", "mine", "--overwrite"], {}),
        (train_args("mine", "--overwrite"), {"config.json": "{}"}),
        (["export", "run", "--out", "mine", "--overwrite"], {"config.json": '{"model_type": "gpt2"}'}),
    ],
    ids=["recall-curve", "recall-curve-lookalike", "generate", "pools", "lm-prepare", "train", "export"],
)
def test_overwrite_refuses_a_folder_the_command_did_not_write(case_dir, capsys, argv, extra):
    mine = user_folder(case_dir / "mine", extra)
    (case_dir / "doc.txt").write_text("\n\n".join(f"text number {i} of a few words" for i in range(20)))
    before = snapshot(case_dir)
    line = one_line(*run_cli(argv, capsys), "mine")
    assert "--overwrite replaces only" in line or "not empty" in line or "is not a" in line, line
    assert changes(before, snapshot(case_dir)) == [], "the user's files stay, nothing is added beside"
    assert (mine / "notes.txt").read_text() == USER_FILES["notes.txt"]


def test_overwrite_replaces_the_commands_own_output(case_dir, capsys):
    """The same rule lets a command replace what it wrote itself (its record is there)."""
    code, stderr = run_cli(["recall-curve", "run", "--max-depth", "2", "--out", "curve"], capsys)
    assert code == 0, stderr
    record = json.loads((case_dir / "curve" / "recall_curve.json").read_text())
    assert record["command"] == "recall-curve" and "recall_curve.parquet" in record["files"]
    code, stderr = run_cli(
        ["recall-curve", "run", "--max-depth", "3", "--out", "curve", "--overwrite"], capsys
    )
    assert code == 0, stderr
    (case_dir / "curve" / "notes.txt").write_text("mine")  # the user adds a file of their own ...
    code, stderr = run_cli(
        ["recall-curve", "run", "--max-depth", "2", "--out", "curve", "--overwrite"], capsys
    )
    one_line(code, stderr, "notes.txt", "recall-curve did not write")  # ... which is never swapped away
    assert (case_dir / "curve" / "notes.txt").read_text() == "mine"


def test_the_library_rule_is_the_same_for_any_output(tmp_path):
    """`atomic_directory(record=...)`, the call the study engines make: only a marked folder goes."""
    from biosrecall.atomic import OutputRecord, atomic_directory

    record = OutputRecord("mystudy", "study.json", "format", "mystudy-1")
    out = user_folder(tmp_path / "out", {"study.json": json.dumps({"format": "something-else"})})
    refused = pytest.raises(BiosrecallError, match="only a folder that mystudy wrote")
    with refused, atomic_directory(out, overwrite=True, record=record):
        raise AssertionError("refused before the block runs")
    (out / "study.json").write_text(json.dumps({"format": "mystudy-1"}))
    for name in USER_FILES:
        (out / name).unlink()
    with atomic_directory(out, overwrite=True, record=record) as tmp:
        (tmp / "study.json").write_text(json.dumps({"format": "mystudy-1"}))
        (tmp / "table.csv").write_text("new")
    assert sorted(p.name for p in out.iterdir()) == ["study.json", "table.csv"]


# ---- 2. --overwrite swaps the whole result in, or leaves the old one ------------------------------


def _full_disk(*args, **kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_a_full_disk_during_an_overwrite_leaves_the_old_result_whole(case_dir, capsys, monkeypatch):
    code, stderr = run_cli(["recall-curve", "run", "--max-depth", "2", "--out", "curve"], capsys)
    assert code == 0, stderr
    before = snapshot(case_dir / "curve")
    # The tables are written, then the disk fills while the figure is saved.
    import matplotlib.figure

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", _full_disk)
    code, stderr = run_cli(
        ["recall-curve", "run", "--max-depth", "3", "--out", "curve", "--overwrite"], capsys
    )
    one_line(code, stderr, "No space left on device")
    assert changes(before, snapshot(case_dir / "curve")) == [], "no new table beside the old figure"
    assert not [p for p in case_dir.iterdir() if p.name.startswith(".curve.") and "lock" not in p.name]


def test_a_set_of_files_in_a_shared_folder_is_replaced_together(tmp_path):
    """`replace_files` (a diagnosis's STEM.*, a harness table and its record): a full disk while the
    second file is written leaves the first one old too; a same-named file no record marks stays."""
    from biosrecall.atomic import OutputRecord, replace_files

    record = OutputRecord("diagnose-update", "diagnose_1.0.json", "checkpoint", "1.0")
    folder = tmp_path / "diagnose"
    with replace_files(folder, record) as stage:
        (stage / "diagnose_1.0.csv").write_text("old")
        (stage / "diagnose_1.0.json").write_text(json.dumps({"checkpoint": "1.0"}))
    before = snapshot(folder)
    with pytest.raises(BiosrecallError, match="No space left"), replace_files(folder, record) as stage:
        (stage / "diagnose_1.0.csv").write_text("new")
        _full_disk()
    assert changes(before, snapshot(folder)) == []
    other = user_folder(tmp_path / "other", {"diagnose_1.0.csv": "the user's"})
    refused = pytest.raises(BiosrecallError, match="diagnose-update did not write it")
    with refused, replace_files(other, record) as stage:
        (stage / "diagnose_1.0.csv").write_text("new")
        (stage / "diagnose_1.0.json").write_text(json.dumps({"checkpoint": "1.0"}))
    assert (other / "diagnose_1.0.csv").read_text() == "the user's"


def test_a_table_is_never_half_new(tmp_path, monkeypatch):
    """Every table's csv and parquet (and a figure's png and pdf) are renamed only once both are
    written: the disk filling on the parquet leaves the old csv, not a new one beside an old parquet."""
    import pandas as pd

    from biosrecall.outputs import write_table

    write_table(pd.DataFrame({"a": [1]}), tmp_path / "t")
    before = snapshot(tmp_path)
    monkeypatch.setattr(pd.DataFrame, "to_parquet", _full_disk)
    with pytest.raises(BiosrecallError, match=r"t\.parquet: No space left"):
        write_table(pd.DataFrame({"a": [2]}), tmp_path / "t")
    assert changes(before, snapshot(tmp_path)) == []


# ---- 5. training sizes itself before its first update ---------------------------------------------


def test_a_run_larger_than_the_machine_is_refused_before_its_first_update(case_dir, capsys, monkeypatch):
    monkeypatch.setattr(sizing, "available_memory", lambda: (200_000_000, "a test limit"))
    argv = ["train", "--data", "data", "--out", "big", "--preset", "bios-tiny", "--schedule", "fixed:32",
            "--batch-size", "32", "--updates", "1", "--quiet"]  # fmt: skip
    before = snapshot(case_dir)
    line = one_line(*run_cli(argv, capsys), "depth 32", "32 sequences", "--schedule", "--batch-size")
    assert "more than the 200.0 MB available" in line
    assert changes(before, snapshot(case_dir)) == []
    # The estimate follows what holds memory: checkpointed activations fit where the full ones did not.
    code, stderr = run_cli([*argv, "--activation-checkpointing"], capsys)
    assert code == 0, stderr


def test_running_out_of_memory_mid_run_is_one_line_and_keeps_the_saved_state(case_dir, capsys, monkeypatch):
    from biosrecall.train import trainer

    real, calls = trainer.backward_and_clip, []

    def fails_at_update_seven(*args, **kwargs):
        calls.append(1)
        if len(calls) == 8:
            raise RuntimeError(
                "[enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: can't allocate memory: "
                "you tried to allocate 123456789 bytes. Error code 12 (Cannot allocate memory)"
            )
        return real(*args, **kwargs)

    monkeypatch.setattr(trainer, "backward_and_clip", fails_at_update_seven)
    code, stderr = run_cli(train_args("oom", "--save-every", "3"), capsys)
    one_line(
        code, stderr, "out of memory at update 7", "keeps its last saved state (update 6)", "--batch-size"
    )
    assert RunFolder(case_dir / "oom").latest_checkpoint().name == "state-00000006"
    monkeypatch.setattr(trainer, "backward_and_clip", real)
    code, stderr = run_cli([*train_args("oom"), "--resume"], capsys)
    assert code == 0, stderr


@pytest.mark.slow
def test_the_estimate_is_near_the_measured_peak(tmp_path):
    """The estimate against real peak resident memory of a training run, less a depth-1 batch-1 run."""
    from biosrecall.bios import generate_dataset, load_dataset
    from biosrecall.model import get_preset
    from biosrecall.train.config import TrainConfig, resolve_seq_len
    from biosrecall.train.memory import training_memory

    data = generate_dataset(tmp_path / "data", people=40, seed=0)

    def peak(depth: int, batch: int) -> int:
        argv = [sys.executable, "-m", "biosrecall", "train", "--data", str(data), "--out",
                str(tmp_path / f"run-{depth}-{batch}"), "--preset", "bios-tiny", "--schedule", f"fixed:{depth}",
                "--batch-size", str(batch), "--updates", "2", "--threads", "1", "--quiet"]  # fmt: skip
        process = subprocess.Popen(argv, stdout=subprocess.DEVNULL)
        _, status, usage = os.wait4(process.pid, 0)
        assert status == 0
        return usage.ru_maxrss * 1024

    measured = peak(128, 32) - peak(1, 1)
    config = get_preset("bios-tiny", vocab_size=load_dataset(data).vocab_size)
    train = TrainConfig(schedule="fixed:128", batch_size=32, updates=2)
    estimate = training_memory(config, train, resolve_seq_len(train, config, "bios-tiny"), 128).memory
    # Measured 0.92-1.04 in one checkout and 1.41 in a fresh clone's venv on another CPU (the peak of
    # freed activations depends on the allocator): an over-estimate refuses early, an under-estimate is
    # still caught mid-run as one line, so the test guards the order of magnitude and the direction.
    assert 0.8 < estimate / measured < 1.5, (estimate, measured)


# ---- 6. parsers and messages bound their input -----------------------------------------------------


def _nested_toml(depth: int) -> str:
    return "schedule = " + "[" * depth + "]" * depth + "\n"


@pytest.mark.parametrize(
    ("name", "text", "argv"),
    [
        ("deep.toml", _nested_toml(50_000), ["generate", "--out", "o", "--config", "deep.toml"]),
        (
            "inline.toml",
            "x = " + "{a = " * 3000 + "1" + "}" * 3000 + "\n",
            ["generate", "--config", "inline.toml"],
        ),
        ("deep.json", '{"task": ' + "[" * 50_000 + "]" * 50_000 + "}", ["train", "--config", "deep.json"]),
        (
            "spec.toml",
            "[sweep]\nout = 'runs'\n[base]\nlr = " + "[" * 5000 + "]" * 5000,
            ["sweep", "run", "spec.toml"],
        ),
        (
            "huge.toml",
            "seed = '" + "9" * (2 << 20) + "'\n",
            ["generate", "--out", "o", "--config", "huge.toml"],
        ),
    ],
    ids=["toml-arrays", "toml-inline-tables", "json-run-file", "sweep-spec", "two-megabyte-config"],
)
def test_deep_or_huge_user_files_are_one_line(case_dir, capsys, name, text, argv):
    (case_dir / name).write_text(text)
    assert_refused(argv, name, case_dir, capsys)


def _options(command: click.Command):
    return [p for p in command.params if isinstance(p, click.Option) and not p.is_flag and p.name != "help"]


TRAIN = cli.get_command(click.Context(cli), "train")


def test_a_megabyte_value_of_any_train_option_is_one_short_line(case_dir, capsys):
    """Every option of `train`, given a 1 MB value (text, then digits) with the rest of a valid run."""
    base = {"--data": "data", "--out": "fresh", "--preset": "bios-tiny", "--updates": "1"}
    options = [p.opts[0] for p in _options(TRAIN)]
    assert len(options) > 30
    before = snapshot(case_dir)
    for option in options:
        for value in ("x" * (1 << 20), "9" * (1 << 20)):
            words = {**base, option: value}
            code, stderr = run_cli(["train", *[w for pair in words.items() for w in pair], "--quiet"], capsys)
            line = one_line(code, stderr)
            assert len(line) <= MAX_MESSAGE, (option, len(line))
            assert value[:200] not in line, f"{option}: a value is quoted as a short, marked excerpt"
    assert changes(before, snapshot(case_dir)) == []


# ---- 7. inputs that would silently corrupt a result ---------------------------------------------


def _corpus(folder: Path) -> Path:
    folder.mkdir()
    docs = [f"document number {i} says {'abc'[i % 3]} and more words follow here" for i in range(30)]
    (folder / "a.txt").write_text("\n\n".join(docs) + "\n")
    return folder / "a.txt"


@pytest.mark.parametrize("how", ["same-path", "dot-dot", "symlink", "hard-link", "through-its-folder"])
def test_lm_prepare_refuses_a_source_given_twice(case_dir, capsys, how):
    text = _corpus(case_dir / "corpus")
    second = {
        "same-path": "corpus/a.txt",
        "dot-dot": "corpus/../corpus/a.txt",
        "symlink": "alias.txt",
        "hard-link": "hard.txt",
        "through-its-folder": "corpus",
    }[how]
    if how == "symlink":
        (case_dir / "alias.txt").symlink_to(text)
    if how == "hard-link":
        os.link(text, case_dir / "hard.txt")
    argv = ["lm", "prepare", "corpus/a.txt", second, "--out", "shards2", "--vocab-size", "300"]
    assert_refused(argv, "is given twice", case_dir, capsys)


def test_lm_prepare_never_puts_one_text_in_both_splits(case_dir, capsys):
    """Another file repeats ten of the corpus's documents (an excerpt pasted into notes, a mirror): every
    copy of a text lands in the split its text was drawn into, so validation holds nothing trained on."""
    from biosrecall.lm.loader import _open_split
    from biosrecall.lm.shard_manifest import load_manifest
    from biosrecall.lm.tokenizer import load_tokenizer

    text = _corpus(case_dir / "corpus")
    (case_dir / "excerpt.txt").write_text("\n\n".join(text.read_text().split("\n\n")[:10]) + "\n")
    argv = ["lm", "prepare", "corpus/a.txt", "excerpt.txt", "--out", "shards2", "--vocab-size", "300"]
    code, stderr = run_cli([*argv, "--val-fraction", "0.3"], capsys)
    assert code == 0, stderr
    manifest = load_manifest(case_dir / "shards2")
    tokenizer = load_tokenizer(case_dir / "shards2" / "tokenizer.json")
    texts = {}
    for split in ("train", "validation"):
        tokens = np.concatenate(_open_split(case_dir / "shards2", manifest, split, tokenizer.sha256))
        cuts = np.flatnonzero(tokens == tokenizer.eod_id)
        texts[split] = [tokenizer.decode(doc.tolist()) for doc in np.split(tokens, cuts + 1)[:-1]]
    assert len(texts["train"]) + len(texts["validation"]) == 40
    assert not set(texts["train"]) & set(texts["validation"])
    assert len(set(texts["validation"])) == 9  # 30% of the 30 distinct texts


SPEC = """
[sweep]
out = "{out}"
[base]
data = "{data}"
preset = "bios-tiny"
batch_size = 4
updates = 2
quiet = true
[[runs]]
name = "a"
schedule = "fixed:2"
"""


@pytest.mark.parametrize("out", ["data", "data/runs"])
def test_a_sweep_into_its_own_dataset_is_refused_up_front(case_dir, capsys, out):
    (case_dir / "spec.toml").write_text(SPEC.format(out=out, data="data"))
    assert_refused(["sweep", "run", "spec.toml"], "the sweep's out", case_dir, capsys)


def test_a_sweep_whose_runs_fail_names_them_and_their_logs_on_stderr(case_dir, capsys):
    (case_dir / "notdata").mkdir()  # a folder, so the spec is accepted, but no dataset: the run fails
    (case_dir / "spec.toml").write_text(SPEC.format(out="runs", data="notdata") + "[executor]\nworkers = 1\n")
    code, stderr = run_cli(["sweep", "run", "spec.toml"], capsys)
    assert code == 1
    assert "failed a (exit 2)" in stderr and "runs/.sweep/a.log" in stderr, stderr


# ---- 8. no noise after the one line ---------------------------------------------------------------


def lock_then_die(item):
    """A scoring function that makes a lock (as tqdm's progress bars do), then item 1 is killed."""
    import multiprocessing

    lock = multiprocessing.get_context().RLock()
    if item == 1:
        with lock:
            time.sleep(0.2)
            os.kill(os.getpid(), signal.SIGKILL)
    return item


KILLED = f"""
import sys
sys.path.insert(0, {str(TESTS)!r})
from biosrecall.eval.parallel import map_in_processes
from test_hostile_round4 import lock_then_die
if __name__ == "__main__":
    try:
        map_in_processes(lock_then_die, [0, 1, 2, 3], workers=2)
    except Exception as exc:
        print("error:", exc, file=sys.stderr)
"""


def test_a_killed_scoring_worker_leaves_no_leaked_semaphore_warning(tmp_path):
    script = tmp_path / "killed.py"
    script.write_text(KILLED)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "killed by SIGKILL" in lines[0], done.stderr
    assert "resource_tracker" not in done.stderr and "leaked" not in done.stderr
