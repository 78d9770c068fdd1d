"""A disk that fills while evaluating or exporting: every writer outside the trainer keeps its contract.

Each command runs in a fresh interpreter under a file-size limit (`RLIMIT_FSIZE`; Python ignores
SIGXFSZ, so an oversized write fails with EFBIG as on a full disk) and must exit 2 with one
`error: cannot write PATH: ...` line naming the file it could not write, print no traceback, and leave
the working folder exactly as it was: no new folder, no temporary, no half-written file.

The world (a bioS dataset, a finished tiny run with its recall cached, a tiny figure1 study, an LM
run on prepared shards, a finished one-run sweep) is built once for the module; each case works in a
copy of it.

    pytest -q tests/test_hostile_full_disk.py
"""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import pytest
from harness import changes, snapshot

from biosrecall.bios import generate_dataset
from biosrecall.cli import main
from biosrecall.experiments import figure1
from biosrecall.lm import Corpus, prepare_corpus

TINY = figure1.Figure1Preset(
    people=8, model_preset="bios-tiny", batch_size=4, seq_len=96, budget_updates=12, lr=1e-2,
    max_depth=4, eval_people=4,
)  # fmt: skip
# `biosrecall ARGV` with the tiny figure1 preset registered (figure1 looks its preset up by name).
DRIVER = f"""
import sys
from biosrecall.cli import main
from biosrecall.experiments import figure1
figure1.FIGURE1_PRESETS["tiny"] = figure1.Figure1Preset(**{asdict(TINY)!r})
main(sys.argv[1:])
"""
# The claims tables on their own (figure1 writes them last, after every other table).
CLAIMS = """
import sys
import pandas as pd
from biosrecall.atomic import command_outputs
from biosrecall.errors import BiosrecallError
from biosrecall.experiments.claims import write_claims
row = {"statement": "looped beats fixed", "metric": "bits", "threshold": 1.0, "mean": 2.0, "low": 1.5,
       "high": 2.5, "n_seeds": 2, "verdict": "supported"}
try:
    with command_outputs():  # as a command runs it: its new folders go if a write fails
        write_claims(pd.DataFrame([row] * 200), sys.argv[1])
except BiosrecallError as exc:  # what the CLI makes of it
    print(f"error: {exc}", file=sys.stderr)
    sys.exit(2)
"""
RUN = ["--preset", "bios-tiny", "--batch-size", "4", "--seed", "1", "--budget-of", "fixed:2:6",
       "--checkpoint-fractions", "0.5,1.0", "--schedule", "fixed:2", "--quiet"]  # fmt: skip
LM_RUN = ["--preset", "lm-tiny", "--seq-len", "16", "--batch-size", "8", "--updates", "4", "--device", "cpu",
          "--quiet"]  # fmt: skip
SWEEP = """
[sweep]
out = "runs"
[executor]
workers = 1
[base]
data = "data"
preset = "bios-tiny"
batch_size = 4
budget_of = "fixed:2:6"
quiet = true
[[runs]]
name = "fixed"
schedule = "fixed:2"
"""
RECALL = ["recall-curve", "run", "--checkpoint", "final", "--max-depth", "4", "--device", "cpu"]


def cli(*argv: str) -> None:
    try:
        main(list(argv))
    except SystemExit as exc:
        assert exc.code in (0, None), f"biosrecall {' '.join(argv)} exited {exc.code}"


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("full-disk")
    previous = Path.cwd()
    os.chdir(root)
    try:
        generate_dataset("data", people=20, seed=1)
        cli("train", "--data", "data", "--out", "run", *RUN)
        cli(*RECALL, "--out", "curve")  # caches the final checkpoint's recall
        (root / "corpus.txt").write_text(
            "\n\n".join(f"document {i} about rivers and cities" for i in range(80))
        )
        prepare_corpus(Corpus(["corpus.txt"]), "shards", vocab_size=300, val_fraction=0.1, seed=0)
        cli("lm", "train", "--data", "shards", "--out", "lm-run", *LM_RUN)
        (root / "sweep.toml").write_text(SWEEP)
        cli("sweep", "run", "sweep.toml")
        with pytest.MonkeyPatch.context() as patch:
            patch.setitem(figure1.FIGURE1_PRESETS, "tiny", TINY)
            cli("figure1", "--preset", "tiny", "--out", "study", "--quiet")
    finally:
        os.chdir(previous)
    return root


@pytest.fixture
def case_dir(world, tmp_path) -> Path:
    copy = tmp_path / "w"
    shutil.copytree(world, copy, symlinks=True)
    return copy


def limit_file_size(limit: int):
    return lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))


def run_limited(case_dir: Path, argv: list[str], limit: int, script: str = DRIVER) -> str:
    """Run `argv` in `case_dir` under the file-size limit; assert the contract; return the error line.
    A figure1 rerun rewrites its record (`figure1.json`, what was run) before it evaluates anything."""
    before = snapshot(case_dir)
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    done = subprocess.run([sys.executable, "-c", script, *argv], cwd=case_dir, env=env, capture_output=True,
                          text=True, preexec_fn=limit_file_size(limit), timeout=600)  # fmt: skip
    assert "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.splitlines()
    assert done.returncode == 2 and len(lines) == 1, (done.returncode, done.stderr)
    assert lines[0].startswith("error: cannot write ") and "(errno 27, EFBIG)" in lines[0], lines[0]
    assert [c for c in changes(before, snapshot(case_dir)) if c != "changed study/figure1.json"] == []
    return lines[0]


def named(line: str, case_dir: Path) -> Path:
    """The path an `error: cannot write PATH: reason` line names, relative to the case's folder."""
    path = Path(line.removeprefix("error: cannot write ").split(": ")[0])
    return path.relative_to(case_dir) if path.is_absolute() else path


CASES = [
    # (id, argv, limit in bytes, where the named file must lie, its name or suffix)
    ("recall-curve", [*RECALL, "--out", "new/curve"], 4096, "new/curve", ".csv"),
    ("recall-curve-refresh", [*RECALL, "--refresh", "--out", "new"], 4096, "run/checkpoints", "recall.parquet"),
    ("recall-curve-figure", [*RECALL, "--out", "new"], 40_000, "new", "recall_curve.png"),
    ("lm-eval", ["lm", "eval", "lm-run", "--max-depth", "2", "--max-sequences", "2", "--device", "cpu"], 512,
     "lm-run/eval", ""),
    ("export", ["export", "run", "--out", "new/export"], 65_536, "new/export", ".safetensors"),
    ("export-text", ["generate", "--from-dataset", "data", "--export-text", "jsonl", "--text-out", "new/text",
                     "--exposures", "1"], 4096, "new/text", ".jsonl"),
    ("sweep-collect", ["sweep", "collect", "sweep.toml"], 512, "runs/collect", ""),
    ("figure1-evaluation", ["figure1", "--preset", "tiny", "--out", "study", "--quiet"], 4096, "study", ""),
]  # fmt: skip


@pytest.mark.parametrize(("argv", "limit", "folder", "name"), [pytest.param(*c[1:], id=c[0]) for c in CASES])
def test_a_full_disk_gives_one_line_naming_the_file_and_leaves_nothing(case_dir, argv, limit, folder, name):
    path = named(run_limited(case_dir, argv, limit), case_dir)
    assert path.parent == Path(folder) or Path(folder) in path.parents, path
    assert path.name.endswith(name), path


def test_figure1_without_its_recall_cache_names_the_cache_it_could_not_write(case_dir):
    for cache in (case_dir / "study" / "runs").rglob("recall.parquet"):
        cache.unlink()
    path = named(
        run_limited(case_dir, ["figure1", "--preset", "tiny", "--out", "study", "--quiet"], 4096), case_dir
    )
    assert path.name == "recall.parquet" and Path("study/runs") in path.parents, path


def test_the_claims_tables(case_dir):
    path = named(run_limited(case_dir, ["new/claims"], 2048, script=CLAIMS), case_dir)
    assert path.parent == Path("new/claims") and path.name.startswith("claims."), path
