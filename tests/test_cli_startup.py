"""Start-up of the command line: `--help`, every command's `--help` and option errors load no torch.

Each check runs the console-script entry (`biosrecall.__main__.main`) in a fresh Python subprocess and
then reads its `sys.modules`, so the result does not depend on what this test process has imported
(conftest imports torch) and is not a timing: a module is either loaded or not.

    pytest -q tests/test_cli_startup.py
"""

from __future__ import annotations

import json
import subprocess
import sys

import click
import pytest

from biosrecall.cli import COMMANDS, cli

# What printing help or an option error needs none of: each is imported only by the commands using it.
HEAVY = ("torch", "torch._dynamo", "transformers", "lm_eval", "matplotlib", "wandb", "tensorboard", "trackio")

# Runs each command line in turn in one process; since a module once loaded stays in sys.modules, the
# first command line whose `loaded` is not empty is the one that imported it.
PROBE = """
import contextlib, io, json, sys
from biosrecall.__main__ import main

heavy, results = json.loads(sys.argv[1]), []
for argv in json.loads(sys.argv[2]):
    sys.argv = ["biosrecall", *argv]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main()
            code = 0
        except SystemExit as exc:
            code = exc.code or 0
    loaded = [name for name in heavy if name in sys.modules]
    results.append({"argv": argv, "code": code, "out": out.getvalue(), "err": err.getvalue(), "loaded": loaded})
print(json.dumps(results))
"""


def probe(*command_lines: list[str]) -> list[dict]:
    """Run the command lines one after another in one fresh interpreter; one result per line."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(HEAVY), json.dumps(list(command_lines))],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def every_help() -> list[list[str]]:
    """`--help` of the program, of every registered command, and of every subcommand of a group."""
    lines = [["--help"]]
    for name in sorted(COMMANDS):
        lines.append([name, "--help"])
        command = cli.get_command(click.Context(cli), name)
        if isinstance(command, click.Group):
            lines += [[name, sub, "--help"] for sub in command.list_commands(click.Context(command))]
    return lines


def test_top_level_help_loads_no_torch():
    (result,) = probe(["--help"])
    assert result["code"] == 0 and result["out"].startswith("Usage: biosrecall"), result
    assert all(name in result["out"] for name in COMMANDS)  # every command listed, none imported
    assert result["loaded"] == []


def test_train_help_loads_no_torch():
    (result,) = probe(["train", "--help"])
    assert result["code"] == 0 and result["out"].startswith("Usage: biosrecall train"), result
    assert result["loaded"] == []


@pytest.mark.parametrize(
    "argv",
    [
        ["train", "--seed", "-1", "--data", "data", "--out", "run"],  # a value its option refuses
        ["train", "--data", "data"],  # a required option missing
        ["train", "--no-such-option"],
        ["no-such-command"],
    ],
)
def test_option_errors_load_no_torch(argv):
    (result,) = probe(argv)
    lines = result["err"].strip().splitlines()
    assert result["code"] == 2 and len(lines) == 1 and lines[0].startswith("error: "), result
    assert result["loaded"] == []


def test_no_help_of_any_command_loads_torch():
    lines = every_help()
    assert ["lm", "train", "--help"] in lines and ["sweep", "run", "--help"] in lines
    results = probe(*lines)
    for result in results:
        usage = "Usage: biosrecall " + " ".join(result["argv"][:-1])
        assert result["code"] == 0 and result["out"].startswith(usage.rstrip()), result["argv"]
    first = next((r for r in results if r["loaded"]), None)
    assert first is None, f"`biosrecall {' '.join(first['argv'])}` imported {first['loaded']}"
