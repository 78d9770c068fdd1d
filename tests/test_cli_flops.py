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
    for option in ("--preset", "--schedule", "--seq-len", "--updates", "--backprop-depth"):
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


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--preset", "lm-7b"], "error: unknown preset 'lm-7b'"),
        (["--schedule", "fixed_first:k0=4,switch=2"], "error: schedule 'fixed_first:k0=4,switch=2': switch"),
        (["--schedule", "warp:9"], "error: unknown schedule 'warp'"),
        (["--updates", "0"], "error: total updates must be a positive integer"),
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
