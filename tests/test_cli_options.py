"""The trainer options: built once from TrainConfig, shared by `train`, `lm train` and `lm plan`.

pytest -q tests/test_cli_options.py
"""

from __future__ import annotations

from dataclasses import fields

import pytest
from click.testing import CliRunner

from biosrecall.cli import cli, main
from biosrecall.cli.options import BIOS_ONLY, field_docs, split_options
from biosrecall.train.config import TrainConfig

TRAIN_COMMANDS = {"train": ("train",), "lm train": ("lm", "train"), "lm plan": ("lm", "plan")}
FIELDS = [f.name for f in fields(TrainConfig)]


def command(path: tuple[str, ...]):
    group = cli
    for name in path:
        group = group.get_command(None, name)  # the lazy group loads the command when asked
    return group


def options_by_name(path: tuple[str, ...]) -> dict:
    return {p.name: p for p in command(path).params}


def help_text(path: tuple[str, ...]) -> str:
    result = CliRunner().invoke(cli, [*path, "--help"], terminal_width=200)
    assert result.exit_code == 0, result.output
    return " ".join(result.output.split())


def test_every_field_is_documented_where_it_is_declared():
    docs = field_docs(TrainConfig)
    assert set(docs) == set(FIELDS)
    assert docs["save_every"] == "Updates between refreshes of the resumable `latest` checkpoint."


@pytest.mark.parametrize("name", TRAIN_COMMANDS)
def test_help_shows_each_fields_docstring_and_default(name):
    text = help_text(TRAIN_COMMANDS[name])
    pinned = [
        "--save-every INTEGER Updates between refreshes of the resumable `latest` checkpoint. [default: 200]",
        "--betas LIST AdamW betas, as B1,B2. [default: 0.9,0.95]",
        "--checkpoint-fractions LIST",
        "[default: 0.25,0.45,0.67,0.8,1.0]",
        "--compile / --no-compile",
    ]
    assert [piece for piece in pinned if piece not in text] == []
    for field in fields(TrainConfig):
        if name != "train" and field.name in BIOS_ONLY:  # a language model has no people to count
            assert f"--{field.name.replace('_', '-')}" not in text, field.name
            continue
        assert f"--{field.name.replace('_', '-')}" in text, field.name
        assert field_docs(TrainConfig)[field.name] in text, field.name
        if field.default is not None and not isinstance(field.default, bool | tuple):
            assert f"[default: {field.default}]" in text, field.name


def test_the_training_commands_share_one_definition_of_every_trainer_option():
    commands = {name: options_by_name(path) for name, path in TRAIN_COMMANDS.items()}
    for field in [*FIELDS, "injection", "init_state", "norm", "backprop_depth"]:
        found = [options[field] for options in commands.values() if field in options]
        assert len(found) == (1 if field in BIOS_ONLY else len(commands)), field
        described = {
            (tuple(p.opts), type(p.type), getattr(p.type, "kind", None), p.default, p.help) for p in found
        }
        assert len(described) == 1, (field, described)
    assert {"resume", "overwrite", "quiet"} <= set(commands["lm train"]) & set(commands["train"])
    assert not {"resume", "overwrite", "quiet"} & set(commands["lm plan"])


@pytest.mark.parametrize(("value", "message"), [("2.5", "expected an integer, got '2.5'"),
                                                ("0", "updates must be a positive integer, got 0")])  # fmt: skip
def test_updates_has_one_type_and_one_error_in_both_train_commands(value, message, capsys):
    errors = []
    for path in (("train", "--data", "d"), ("lm", "train", "--data", "d")):
        with pytest.raises(SystemExit):
            main([*path, "--out", "o", "--updates", value])
        errors.append(capsys.readouterr().err)
    assert errors[0] == errors[1] == f"error: Invalid value for '--updates': {message}\n"


@pytest.mark.parametrize("name", TRAIN_COMMANDS)
def test_defaults_parse_to_the_dataclass_defaults(name):
    path = TRAIN_COMMANDS[name]
    args = ["--data", "d"] if name == "lm plan" else ["--data", "d", "--out", "o"]
    context = command(path).make_context(" ".join(path), args)
    config, overrides = split_options(dict(context.params))
    assert config == TrainConfig()
    assert set(overrides) >= {"injection", "init_state", "norm", "backprop_depth"}
    assert set(overrides.values()) == {None}  # unset: the preset decides
