"""The package as users install it: resources inside the package, one version, no writes into an install.

The end-to-end check (build the wheel, install it into a fresh venv, run the main job from another
folder) is `scripts/check-wheel.sh`, which CI runs after the tests; these are its fast guards.
"""

import fnmatch
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from hf_fixtures import run_cli

import biosrecall
from biosrecall import paths

ROOT = Path(__file__).resolve().parent.parent


def test_every_resource_file_is_named_by_the_package_data():
    """A resource the wheel would leave out (a new pool or template kind) fails here, not for a user."""
    patterns = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    files = [
        p.relative_to(paths.PACKAGE_DIR).as_posix() for p in paths.RESOURCES_DIR.rglob("*") if p.is_file()
    ]
    assert files, "the package holds its resources"
    missing = [f for f in files if not any(fnmatch.fnmatch(f, g) for g in patterns["biosrecall"])]
    assert missing == []


def test_the_repository_layout_shows_the_packaged_resources():
    """data/pools and templates/ at the root are the package's folders, not copies that could drift."""
    assert (ROOT / "data" / "pools").resolve() == paths.POOLS_DIR
    assert (ROOT / "templates").resolve() == paths.TEMPLATES_DIR
    assert sorted(p.name for p in paths.TEMPLATES_DIR.iterdir()) == ["eval.toml", "train.toml"]
    assert paths.running_from_checkout()


def test_the_version_is_set_once_and_printed():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert "version" not in project and project["dynamic"] == ["version"]
    out = subprocess.run(
        [sys.executable, "-m", "biosrecall", "--version"], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == f"biosrecall, version {biosrecall.__version__}"
    assert f"## {biosrecall.__version__}" in (ROOT / "CHANGELOG.md").read_text()


def test_an_installed_package_does_not_rebuild_pools_into_itself(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(paths, "running_from_checkout", lambda: False)
    before = {p.name: p.read_bytes() for p in paths.POOLS_DIR.iterdir()}
    code, _, err = run_cli(["pools"], capsys)
    assert code == 2 and err.count("\n") == 1 and "--out" in err
    assert {p.name: p.read_bytes() for p in paths.POOLS_DIR.iterdir()} == before
    code, out, err = run_cli(["pools", "--out", tmp_path / "pools"], capsys)
    assert code == 0, err
    assert sorted(p.name for p in (tmp_path / "pools").iterdir()) == sorted(before)


@pytest.mark.parametrize("argv", [["pools", "--check"]])
def test_checking_the_packaged_pools_reads_them_in_place(argv, capsys):
    code, out, err = run_cli(argv, capsys)
    assert code == 0, err
    assert "match a rebuild" in out
