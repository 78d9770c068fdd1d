"""`biosrecall generate` / `biosrecall pools`: summaries, and one clear error line for every bad input."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from biosrecall.cli import main
from biosrecall.paths import POOLS_DIR, TEMPLATES_DIR


def run_cli(capsys, *args: str) -> tuple[int, str, str]:
    try:
        main(list(args))
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_generate_prints_a_summary(tmp_path, capsys):
    code, out, err = run_cli(
        capsys, "generate", "--out", str(tmp_path / "d"), "--people", "40", "--seed", "3"
    )
    assert code == 0, err
    assert "people        40 (seed 3)" in out
    assert "bits/person   33.39" in out and "chance bits" in out and "vocab size" in out
    assert "manifest.json" in out and (tmp_path / "d" / "manifest.json").is_file()


def test_generate_help_shows_defaults(capsys):
    code, out, _ = run_cli(capsys, "generate", "--help")
    assert code == 0
    assert "[default: 1000]" in out and "[default: 0]" in out and "employer=128" in out


def bad_template_folder(tmp_path):
    folder = tmp_path / "templates"
    folder.mkdir()
    (folder / "train.toml").write_text(
        (TEMPLATES_DIR / "train.toml").read_text().replace("comes from {value}.", "comes from {valu}.")
    )
    (folder / "eval.toml").write_text((TEMPLATES_DIR / "eval.toml").read_text())
    return folder


def missing_template_folder(tmp_path):
    folder = tmp_path / "templates"
    folder.mkdir()
    (folder / "train.toml").write_text((TEMPLATES_DIR / "train.toml").read_text())
    return folder


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--people", "0"], "'--people': people must be a positive integer, got 0"),
        (["--people", "-4"], "'--people': people must be a positive integer, got -4"),
        (["--people", "200000000"], "do not fit in the 160000000 distinct full names"),
        (
            [
                "--people",
                "50",
                "--pool-size",
                "first_name=2",
                "--pool-size",
                "middle_name=2",
                "--pool-size",
                "last_name=3",
            ],
            "50 people do not fit in the 12",
        ),
        (["--pool-size", "birth_city=501"], "above the pool length 500"),
        (["--pool-size", "major=1"], "field 'major': expected int >= 2, got 1"),
        (["--pool-size", "planet=4"], r"field 'planet' is unknown \(known: first_name"),
        (["--pool-size", "birth_city"], "--pool-size expects NAME=SIZE"),
        (["--pool-size", "birth_city=many"], "--pool-size expects NAME=SIZE"),
        (["--people", "ten"], "'ten' is not a valid integer"),
        (["--seed", "-1"], "seed must be a non-negative integer"),
        (["--templates", "{tmp}/nowhere"], "templates folder .*nowhere not found"),
        (["--templates", "{missing}"], "template file .*eval.toml does not exist"),
        (["--templates", "{bad}"], r"train.toml line \d+: .*unknown placeholder \{valu\}"),
    ],
)
def test_bad_generate_input_is_one_error_line_and_leaves_nothing(tmp_path, capsys, args, message):
    import re

    work = tmp_path / "work"
    work.mkdir()
    replacements = {"{tmp}": str(tmp_path)}
    if "{missing}" in args:
        replacements["{missing}"] = str(missing_template_folder(tmp_path))
    if "{bad}" in args:
        replacements["{bad}"] = str(bad_template_folder(tmp_path))
    args = [replacements.get(a, a.replace("{tmp}", str(tmp_path))) for a in args]
    code, out, err = run_cli(capsys, "generate", "--out", str(work / "d"), *args)
    assert code == 2
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err
    assert re.search(message, err), err
    assert list(work.iterdir()) == []


def test_existing_output_needs_overwrite(tmp_path, capsys):
    out = tmp_path / "d"
    assert run_cli(capsys, "generate", "--out", str(out), "--people", "20")[0] == 0
    before = (out / "manifest.json").read_bytes()
    code, _, err = run_cli(capsys, "generate", "--out", str(out), "--people", "25")
    assert code == 2 and err.startswith("error: ") and "--overwrite" in err
    assert (out / "manifest.json").read_bytes() == before
    assert run_cli(capsys, "generate", "--out", str(out), "--people", "25", "--overwrite")[0] == 0
    assert (out / "manifest.json").read_bytes() != before


def test_output_below_a_file_is_refused(tmp_path, capsys):
    (tmp_path / "file").write_text("x")
    code, _, err = run_cli(capsys, "generate", "--out", str(tmp_path / "file" / "d"), "--people", "5")
    assert code == 2 and err.startswith("error: ") and "is a file" in err
    code, _, err = run_cli(capsys, "generate", "--out", str(tmp_path / "file"), "--people", "5")
    assert code == 2 and "not a folder" in err


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root can write anywhere")
def test_non_writable_output_is_refused(tmp_path, capsys):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    try:
        code, _, err = run_cli(capsys, "generate", "--out", str(locked / "d"), "--people", "5")
    finally:
        locked.chmod(0o755)
    assert code == 2 and err.startswith("error: ") and "not writable" in err
    assert list(locked.iterdir()) == []


def test_real_process_reports_one_line_without_traceback(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "biosrecall", "generate", "--out", str(tmp_path / "d"), "--people", "0"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    assert result.stderr == "error: Invalid value for '--people': people must be a positive integer, got 0\n"
    assert not (tmp_path / "d").exists()


def test_pools_check_and_rebuild(tmp_path, capsys):
    code, out, _ = run_cli(capsys, "pools", "--check")
    assert code == 0 and "match a rebuild" in out
    code, out, _ = run_cli(capsys, "pools", "--out", str(tmp_path / "pools"))
    assert code == 0 and "employer 1000" in out
    for path in POOLS_DIR.glob("*.txt"):
        assert (tmp_path / "pools" / path.name).read_bytes() == path.read_bytes()
    (tmp_path / "pools" / "major.txt").write_text("Law\n")
    code, _, err = run_cli(capsys, "pools", "--check", "--out", str(tmp_path / "pools"))
    assert code == 2 and "differ from a rebuild: major.txt" in err
    code, _, err = run_cli(capsys, "pools", "--out", str(tmp_path / "pools"))
    assert code == 2 and "--overwrite" in err
