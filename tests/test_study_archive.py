"""`biosrecall figure1 --archive DEST`: a finished study without its weights, which a copy continues.

The archive keeps every table, record and cached evaluation but no weights or training state; the
same command on a copy of it retrains and re-evaluates nothing and writes the same tables, and adding
a seed trains only that seed. An unfinished study or a folder that is not a study is refused.

    pytest -q tests/test_study_archive.py
"""

from __future__ import annotations

import json
import shlex
import shutil
from pathlib import Path

import pandas as pd
import pytest
from test_cli_recall import _one_error_line
from test_figure1_promises import TINY, figure1_args, run_cli

from biosrecall.experiments import engine, figure1, study_archive
from biosrecall.experiments.study import figure1_command
from biosrecall.train.checkpoint_files import MODEL_FILE, STATE_FILE
from biosrecall.train.run_folder import LATEST, METRICS_FILE

RESULTS = Path(__file__).resolve().parents[1] / "docs" / "results"
COMMITTED = ("study-default",)  # archives the README's numbers come from
TABLES = ("claims.csv", "summary.csv", "recall_curve.csv", "exit_frontier.csv", "exit_headline.csv")


@pytest.fixture(scope="module")
def archive(tmp_path_factory):
    """A finished one-seed tiny study and its archive."""
    root = tmp_path_factory.mktemp("archive")
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(figure1.FIGURE1_PRESETS, "tiny", TINY)
        assert run_cli(figure1_args(root / "out")) == 0
        assert run_cli(figure1_args(root / "out", "--archive", str(root / "archive"))) == 0
    return root / "out", root / "archive"


@pytest.fixture
def tiny_preset(monkeypatch):
    monkeypatch.setitem(figure1.FIGURE1_PRESETS, "tiny", TINY)


def test_the_archive_holds_every_result_and_no_weights(archive):
    out, dest = archive
    names = {path.name for path in dest.rglob("*")}
    assert not names & {MODEL_FILE, STATE_FILE, LATEST}
    assert not {name for name in names if name.startswith(".")}, "no lock, temporary or sweep log"
    assert not any(name.startswith(("state-", "update-")) for name in names)
    assert METRICS_FILE not in names, "per-update logs stay in the run folders"
    runs = [path for path in (dest / figure1.RUNS).rglob("*") if path.is_file()]
    assert not [path for path in runs if path.suffix in (".csv", ".png", ".pdf")], "one parquet per table"
    for table in TABLES:
        assert (dest / table).read_bytes() == (out / table).read_bytes(), table
    kept = [path for path in dest.rglob("recall.parquet")] + list(dest.rglob("exits.parquet"))
    assert len(kept) == 2 * 3 + 3, "recall at 45% and 100% of each run, serving at 100%"
    assert (dest / "data" / "manifest.json").is_file()


def test_the_archive_names_no_folder_of_the_machine_that_wrote_it(archive):
    """Committed archives must not carry the writer's paths: a run's dataset is recorded relative to
    the run, and its cached tables still answer for the rewritten meta.json (the next test)."""
    out, dest = archive
    root = str(out.parent)
    mentions = [path for path in dest.rglob("*") if path.is_file() and root.encode() in path.read_bytes()]
    assert not mentions
    config = next(dest.rglob("config.json"))
    recorded = json.loads(config.read_text())["dataset"]["path"]
    assert (config.parent / recorded).resolve() == (dest / "data").resolve()


def test_a_copy_of_the_archive_reruns_without_weights_and_gains_a_seed(archive, tmp_path, tiny_preset):
    out, dest = archive
    copy = tmp_path / "study"
    shutil.copytree(dest, copy)
    assert run_cli(figure1_args(copy)) == 0, "nothing to train or score: the caches answer"
    assert not list(copy.rglob(MODEL_FILE))
    for table in TABLES:
        assert (copy / table).read_bytes() == (out / table).read_bytes(), table
    assert run_cli(figure1_args(copy, "--seeds", "0,1")) == 0
    trained = {path.relative_to(copy / figure1.RUNS).parts[0] for path in copy.rglob(MODEL_FILE)}
    assert trained == {"seed1"}, "only the added seed trains"
    claims = pd.read_csv(copy / "claims.csv")
    assert claims["n_seeds"].max() == 2
    frontier = pd.read_csv(copy / "exit_frontier.csv")
    assert {run.split("/")[0] for run in frontier["run"]} == {"seed0", "seed1"}


def test_a_large_csv_copy_is_left_to_its_parquet_twin_and_a_rerun_writes_it_again(
    archive, tmp_path, tiny_preset, monkeypatch
):
    out, _ = archive
    monkeypatch.setattr(study_archive, "LARGE_CSV_BYTES", (out / "recall_curve.csv").stat().st_size - 1)
    dest = tmp_path / "slim"
    study_archive.archive_study(out, dest)
    assert not (dest / "recall_curve.csv").exists() and (dest / "recall_curve.parquet").is_file()
    assert (dest / "claims.csv").is_file(), "small tables keep their CSV"
    assert run_cli(figure1_args(dest)) == 0
    assert (dest / "recall_curve.csv").read_bytes() == (out / "recall_curve.csv").read_bytes()


def test_an_archive_of_the_previous_release_is_slimmed_by_archiving_it_again(archive, tmp_path, tiny_preset):
    """An archive written with each run's metrics.jsonl (the previous release's) still continues, and
    `figure1 --out OLD --archive NEW` converts it once: the same results without the logs."""
    out, dest = archive
    old = tmp_path / "old"
    shutil.copytree(dest, old)
    for log in out.rglob(METRICS_FILE):
        shutil.copy2(log, old / log.relative_to(out))
    assert run_cli(figure1_args(old)) == 0 and not list(old.rglob(MODEL_FILE)), "it still loads"
    assert run_cli(figure1_args(old, "--archive", str(tmp_path / "new"))) == 0
    new = tmp_path / "new"
    assert list(old.rglob(METRICS_FILE)) and not list(new.rglob(METRICS_FILE))
    for table in TABLES:
        assert (new / table).read_bytes() == (out / table).read_bytes(), table
    assert run_cli(figure1_args(new)) == 0 and not list(new.rglob(MODEL_FILE)), "trains nothing"


def test_an_unfinished_study_or_a_stranger_is_refused(archive, tmp_path, capsys):
    out, _ = archive
    half = tmp_path / "half"
    shutil.copytree(out, half)
    shutil.rmtree(next(half.glob("runs/seed0/*/checkpoints/1.0")))
    assert run_cli(figure1_args(half, "--archive", str(tmp_path / "a"))) == 2
    _one_error_line(2, capsys.readouterr().err, "has not finished")
    assert run_cli(figure1_args(tmp_path, "--archive", str(tmp_path / "b"))) == 2
    _one_error_line(2, capsys.readouterr().err, "not a figure1, capacity or lm study output")
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


@pytest.mark.parametrize("name", COMMITTED)
def test_a_committed_archive_reruns_from_a_clean_checkout_without_training(name, tmp_path, monkeypatch):
    """What the repository holds, not just what `--archive` wrote: a file the archive needs and git
    leaves out (an ignore rule) would make the study retrain from scratch."""

    def no_training(runs_dir, runs, *args):
        raise AssertionError(f"the archive lacks finished runs, would train {[run.name for run in runs]}")

    monkeypatch.setattr(engine, "run_sweep", no_training)
    copy = tmp_path / name
    shutil.copytree(RESULTS / name, copy)
    record = json.loads((copy / figure1.RECORD).read_text())
    command = figure1_command(record["preset"], record["study"], out_dir=copy)
    assert run_cli([*shlex.split(command)[1:], "--quiet"]) == 0
    assert not list(copy.rglob(MODEL_FILE)), "the archive answered every run without training"
    for table in ("claims.csv", "summary.csv", "exit_summary.csv"):
        assert (copy / table).read_bytes() == (RESULTS / name / table).read_bytes(), table


def _pack(path: Path, members: dict[str, bytes]) -> None:
    import io
    import tarfile

    with tarfile.open(path, "w:xz") as tar:
        for name, data in members.items():
            member = tarfile.TarInfo(name)
            member.size = len(data)
            tar.addfile(member, io.BytesIO(data))


def test_packed_runs_unpack_into_runs_and_a_hostile_pack_is_refused_writing_nothing(tmp_path):
    """An engine study's archive packs its runs (`runs.tar.xz`); the study's command on a copy unpacks
    them. A pack that names a file outside runs/, is not a pack, or is damaged is one line, and neither
    runs/ nor anything else is written."""
    good = tmp_path / "good"
    good.mkdir()
    _pack(
        good / study_archive.PACKED_RUNS, {"runs/a/seed0/config.json": b"{}", "runs/a/seed0/x.parquet": b"p"}
    )
    study_archive.unpack_runs(good)
    assert (good / "runs" / "a" / "seed0" / "config.json").read_bytes() == b"{}"
    assert not (good / study_archive.PACKED_RUNS).exists()

    for name, write in [
        ("escape", lambda p: _pack(p, {"runs/../../evil.txt": b"x"})),
        ("outside", lambda p: _pack(p, {"elsewhere/config.json": b"{}"})),
        ("garbage", lambda p: p.write_bytes(b"not a pack at all")),
    ]:
        out = tmp_path / name
        out.mkdir()
        write(out / study_archive.PACKED_RUNS)
        with pytest.raises(study_archive.BiosrecallError) as info:
            study_archive.unpack_runs(out)
        assert "\n" not in str(info.value) and study_archive.PACKED_RUNS in str(info.value)
        assert sorted(p.name for p in out.iterdir()) == [study_archive.PACKED_RUNS], name
    assert not (tmp_path / "evil.txt").exists()
