"""Tests of `biosrecall flops`: help text, the lm-200m table, and one-line errors with exit code 2.

pytest -q tests/test_cli_flops.py
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from click.testing import CliRunner

from biosrecall.cli import cli, main


def _run(*args: str) -> str:
    result = CliRunner().invoke(cli, ["flops", *args])
    assert result.exit_code == 0, result.output
    return result.output


def test_help_documents_options_and_defaults():
    text = " ".join(_run("--help").split())
    for option in ("--preset", "--schedule", "--seq-len", "--updates", "--backprop-depth", "--recipe"):
        assert option in text
    assert "[default: lm-200m]" in text and "[default: 4800]" in text
    assert "bios-cpu" in text and "preset's context length" in text


def test_lm_200m_table_reproduces_the_paper():
    out = _run("--preset", "lm-200m")
    assert "lm-200m: width 1152" in out and "207,641,088" in out
    assert "K = 8.5 (mean of U{1..16})" in out
    rows = re.findall(
        r"fixed_first:k0=(\d),switch=([\d.]+),finish=uniform\S*\s+[\d.]+\s+[\d.]+\s+([\d.]+)%\s+([\d.]+)%",
        out,
    )
    assert len(rows) == 3
    for _k0, _switch, saving, reported in rows:
        assert abs(float(saving) - float(reported)) <= 1.5
    assert re.search(r"uniform:1-16\s+8\.50\s+1\.000\s+0\.0%", out)


def test_custom_schedules_several_presets_and_seq_len():
    out = _run("--preset", "bios-tiny", "--preset", "bios-cpu", "--schedule", "fixed:4", "--seq-len", "32")
    assert out.count("T = 32") == 2 and out.count("fixed:4 ") == 2
    assert "fixed_first" not in out


@pytest.mark.parametrize("recipe", ["parcae", "loopformer", "ouro-gate"])
def test_a_recipe_is_counted_as_train_builds_it(recipe):
    """--recipe prices the recipe's own parameters and objective: the numbers are the account's for the
    config `train --recipe` would build (its model defaults applied), and they differ from baseline's."""
    from biosrecall.compute.flops import param_counts, train_flops_per_token
    from biosrecall.model import get_preset
    from biosrecall.model.recipes import recipe_overrides

    out = _run("--preset", "bios-tiny", "--schedule", "fixed:4", "--recipe", recipe)
    base = _run("--preset", "bios-tiny", "--schedule", "fixed:4")
    cfg = get_preset("bios-tiny", **recipe_overrides(recipe, {}))
    assert f"recipe {recipe}" in out.splitlines()[0] and "recipe" not in base.splitlines()[0]
    assert f"{param_counts(cfg)['total']:,}" in out
    training = float(re.search(r"K = 4\s+[\d.]+\s+([\d.]+)", out).group(1))
    assert training == pytest.approx(train_flops_per_token(cfg, 4) / 1e6, rel=1e-3)
    assert out != base


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--recipe", "nope"], "error: recipe 'nope' is not installed"),
        (
            ["--preset", "bios-cpu-std-params", "--recipe", "parcae"],
            "error: n_block 0 (no recurrent block: a standard transformer) needs injection none and "
            "recipe baseline, got injection 'none' and recipe 'parcae'",
        ),
        (["--preset", "lm-7b"], "error: unknown preset 'lm-7b'"),
        (["--schedule", "fixed_first:k0=4,switch=2"], "error: schedule 'fixed_first:k0=4,switch=2': switch"),
        (["--schedule", "warp:9"], "error: unknown schedule 'warp'"),
        (
            ["--updates", "0"],
            "error: Invalid value for '--updates': total updates must be a positive integer, got 0",
        ),
        (["--seq-len", "x"], "error: "),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, message, capsys):
    with pytest.raises(SystemExit) as info:
        main(["flops", *args])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(message) and err.count("\n") == 1 and "Traceback" not in err


def test_console_entry_point_exit_code():
    result = subprocess.run(
        [sys.executable, "-m", "biosrecall", "flops", "--preset", "nope"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 2
    assert result.stderr.startswith("error: unknown preset 'nope'") and result.stderr.count("\n") == 1
