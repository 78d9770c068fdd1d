"""Small points of the command line a user meets first: an unknown command suggests the close ones,
`flops --data` counts a run's own parameters, and the command summaries of `--help` and of the CLI
reference hold whole sentences.

    pytest -q tests/test_cli_points.py
"""

from __future__ import annotations

import json

import click
import pytest

from biosrecall.cli import cli, first_sentence, main


def run(argv, capsys) -> tuple[int, str, str]:
    try:
        main([str(a) for a in argv])
        code = 0
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize(
    ("typed", "suggested"),
    [
        ("recal-curve", "'recall-curve'"),
        ("figure", "'figure1'"),
        ("gen", "'generate'"),
        ("g", "'gate' or 'generate'"),
    ],
)
def test_an_unknown_command_suggests_the_close_ones(typed, suggested, capsys):
    code, _, err = run([typed], capsys)
    assert code == 2 and err.strip() == f"error: No such command '{typed}'. (Did you mean {suggested}?)"


def test_an_unknown_command_with_nothing_close_is_one_plain_line(capsys):
    code, _, err = run(["zzz"], capsys)
    assert code == 2 and err.strip() == "error: No such command 'zzz'."


def test_flops_with_a_dataset_counts_the_parameters_a_run_on_it_has(tmp_path, capsys):
    from biosrecall.bios import generate_dataset
    from biosrecall.compute.flops import param_counts
    from biosrecall.model.presets import get_preset

    data = generate_dataset(tmp_path / "data", people=5, seed=0)
    code, out, err = run(["flops", "--preset", "bios-tiny", "--data", data, "--schedule", "fixed:4"], capsys)
    assert code == 0, err
    vocab = json.loads((data / "manifest.json").read_text())["tokenizer"]["vocab_size"]
    total = param_counts(get_preset("bios-tiny", vocab_size=vocab))["total"]
    assert f"vocab {vocab:,} (of {data}" in out and f"{total:>15,}" in out
    code, out, _ = run(["flops", "--preset", "bios-tiny", "--schedule", "fixed:4"], capsys)
    assert "stand-in" in out.splitlines()[0], "without --data the count says it is not a run's"
    code, _, err = run(["flops", "--preset", "bios-tiny", "--data", tmp_path], capsys)
    assert code == 2 and err.startswith("error: --data") and "no manifest.json" in err


def test_command_summaries_are_whole_sentences():
    """The CLI reference lists each command with its short help: the first sentence, whole, where a
    docstring's first line would stop mid-sentence."""
    ctx = click.Context(cli)
    for name in cli.list_commands(ctx):
        command = cli.get_command(ctx, name)
        commands = [command, *getattr(command, "commands", {}).values()]
        for each in commands:
            assert each.short_help.endswith((".", ")")) and "\n" not in each.short_help, (
                name,
                each.short_help,
            )
    assert cli.get_command(ctx, "figure1").short_help.endswith("(two claims rows per schedule).")
    assert first_sentence("Train at one matched\nbudget. Then more.") == "Train at one matched budget."
