"""`--config FILE` on every command (`biosrecall.cli.config_file`): TOML values under the command line, a
run's config.json repeating the run, and one error line (exit 2, nothing written) for every bad file.

    pytest -q tests/test_config_files.py
"""

from __future__ import annotations

import json
from dataclasses import asdict

import click
import pytest
from click.core import ParameterSource
from harness import changes, run_cli, snapshot

from biosrecall.cli import cli, main
from biosrecall.cli.options import split_options
from biosrecall.model.presets import get_preset
from biosrecall.train.config import TrainConfig


def leaf_commands(group: click.Group = cli, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every command a user can run, subcommands of groups included."""
    found = []
    # list_commands/get_command, not .commands: the lazy group loads a command's module when asked
    for name in group.list_commands(None):
        command = group.get_command(None, name)
        if isinstance(command, click.Group):
            found += leaf_commands(command, (*path, name))
        else:
            found.append((*path, name))
    return found


COMMANDS = leaf_commands()


def command(path: tuple[str, ...]) -> click.Command:
    group = cli
    for name in path:
        group = group.get_command(None, name)
    return group


def parse(path: tuple[str, ...], args: list[str]) -> click.Context:
    """Parse `args` as the command would (callbacks included) without running it."""
    return command(path).make_context(" ".join(path), args)


@pytest.fixture
def here(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


def refused(argv: list[str], folder, capsys) -> str:
    """The one error line of a refused command that wrote nothing."""
    before = snapshot(folder)
    code, stderr = run_cli(argv, capsys)
    assert code == 2, stderr
    lines = stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), stderr
    assert changes(before, snapshot(folder)) == []
    return lines[0]


# ---- every command -----------------------------------------------------------------------------


def test_the_walk_finds_the_commands_and_subcommands():
    expected = {("train",), ("figure1",), ("generate",), ("flops",), ("recall-curve",), ("ask",),
                ("diagnose-update",), ("lm", "train"), ("lm", "plan"), ("lm", "prepare"), ("lm", "eval"),
                ("lm", "compare"), ("lm", "harness")}  # fmt: skip
    assert expected <= set(COMMANDS)


@pytest.mark.parametrize("path", COMMANDS, ids=" ".join)
def test_every_command_reads_its_options_from_config(path, here, capsys):
    """An unknown key is named with the command, and every option of the command is a key: a TOML table
    is the wrong type for each, so each is checked and named (a command without --config fails here)."""
    (here / "c.toml").write_text("no_such_option = 1\n")
    line = refused([*path, "--config", "c.toml"], here, capsys)
    assert f"unknown key(s) no_such_option for `biosrecall {' '.join(path)}`" in line
    options = [p for p in command(path).params if isinstance(p, click.Option) and p.name != "config"]
    for option in options:
        if option.name == "help":
            continue
        (here / "c.toml").write_text(f"{option.name} = {{}}\n")
        line = refused([*path, "--config", "c.toml"], here, capsys)
        assert f"c.toml: {option.name} takes " in line and "got table" in line, line


# ---- values: the command line wins, lists, key spelling -----------------------------------------

STUDY = """
out = "runs/study"
preset = "quick"
seeds = [0, 1, 2]
update-matched = true
fixed_sweep = "2,8"
model_override = ["norm=sandwich", "init_state=noise"]
"""


def test_figure1_study_file_and_command_line_override(here):
    (here / "study.toml").write_text(STUDY)
    params = parse(("figure1",), ["--config", "study.toml"]).params
    assert params["seeds"] == (0, 1, 2) and params["update_matched"] and params["fixed_sweep"] == (2, 8)
    assert params["model_override"] == {"norm": "sandwich", "init_state": "noise"}
    assert str(params["out_dir"]) == "runs/study" and params["preset"] == "quick"
    context = parse(("figure1",), ["--config", "study.toml", "--seeds", "4", "--out", "elsewhere"])
    assert context.params["seeds"] == (4,) and str(context.params["out_dir"]) == "elsewhere"
    assert context.get_parameter_source("seeds") is ParameterSource.COMMANDLINE
    assert context.get_parameter_source("update_matched") is ParameterSource.DEFAULT_MAP


@pytest.mark.parametrize(
    ("path", "key", "forms", "value"),
    [
        (("figure1",), "seeds", ["[0, 1, 2]", '"0,1,2"'], (0, 1, 2)),
        (("figure1",), "fixed_sweep", ["[2, 8]", '"2,8"'], (2, 8)),
        (("train",), "betas", ["[0.8, 0.9]", '"0.8,0.9"'], (0.8, 0.9)),
        (("train",), "log", ['["tensorboard"]', '"tensorboard"'], ("tensorboard",)),
        (("flops",), "presets", ['["bios-tiny", "lm-tiny"]'], ("bios-tiny", "lm-tiny")),
        (("lm", "harness"), "depths", ["[4, 8]", '"4,8"', '["4,8"]'], [4, 8]),
        (("recall-curve",), "checkpoints", ['["0.45", "final"]'], ("0.45", "final")),
        (("recall-curve",), "depths", ["[1, 4]", '"1,4"'], "1,4"),
        (("study", "depth"), "seeds", ["[0, 1]", '"0,1"'], (0, 1)),
        (
            ("study", "depth"),
            "schedules",
            ['["uniform", "fixed-k4"]', '"uniform,fixed-k4"'],
            ("uniform", "fixed-k4"),
        ),
    ],
)
def test_a_list_is_an_array_or_a_comma_string(path, key, forms, value, here):
    required = {("train",): ["--data", "d", "--out", "o"], ("figure1",): ["--out", "o"],
                ("study", "depth"): ["--out", "o"],
                ("lm", "harness"): ["run", "--tasks", "t"]}.get(path, [])  # fmt: skip
    for form in forms:
        (here / "c.toml").write_text(f"{key} = {form}\n")
        assert parse(path, [*required, "--config", "c.toml"]).params[key] == value, form


TRAIN_TOML = """
data = "data/bios-1k"
preset = "bios-tiny"
schedule = "uniform:1-4"
budget_of = "fixed:4:100"
batch-size = 8
betas = [0.8, 0.9]
compile = true
injection = "add"
"""


def test_a_train_file_becomes_the_train_config_and_model_overrides(here):
    (here / "train.toml").write_text(TRAIN_TOML)
    options = dict(parse(("train",), ["--config", "train.toml", "--out", "o", "--lr", "0.01"]).params)
    assert options.pop("data_dir") == "data/bios-1k" and options.pop("preset") == "bios-tiny"
    config, overrides = split_options(options)
    assert config == TrainConfig(schedule="uniform:1-4", budget_of="fixed:4:100", batch_size=8,
                                 betas=(0.8, 0.9), compile=True, lr=0.01)  # fmt: skip
    assert overrides["injection"] == "add" and overrides["norm"] is None


def test_a_run_size_on_the_command_line_replaces_the_files(here):
    (here / "train.toml").write_text(TRAIN_TOML)
    with parse(("train",), ["--config", "train.toml", "--out", "o", "--updates", "5"]) as context:
        config, _ = split_options(dict(context.params))
    assert (config.updates, config.budget_of, config.budget) == (5, None, None)


# ---- a run's config.json --------------------------------------------------------------------------


def lm_run_config(folder) -> str:
    """A config.json of the shape `lm train` writes (the sections the file mapping reads, and others)."""
    model = {**asdict(get_preset("lm-tiny")), "vocab_size": 300, "norm": "sandwich"}
    record = {"task": {"name": "lm", "preset": "lm-tiny"}, "dataset": {"path": str(folder / "shards")},
              "train_config": TrainConfig(updates=3, batch_size=8, lr=1e-3).to_dict(),
              "model_config": model, "plan": {"updates": 3, "budget": 1.0}, "versions": {}, "machine": {}}  # fmt: skip
    (folder / "config.json").write_text(json.dumps(record))
    return "config.json"


@pytest.mark.parametrize("path", [("lm", "train"), ("lm", "plan")], ids=" ".join)
def test_lm_commands_read_a_run_config(path, here):
    args = ["--config", lm_run_config(here)] + (["--out", "o"] if path[1] == "train" else [])
    with parse(path, [*args, "--seed", "7"]) as context:  # the command line's seed over the file's
        params = dict(context.params)
        config, overrides = split_options(dict(params))
    assert str(params["data_dir"]) == str(here / "shards") and params["preset"] == "lm-tiny"
    assert (overrides["vocab_size"], overrides["norm"], overrides["injection"]) == (300, "sandwich", "concat")
    assert (config.updates, config.batch_size, config.lr, config.seed) == (3, 8, 1e-3, 7)


def test_train_from_its_config_json_repeats_the_run(here):
    from biosrecall.bios import generate_dataset

    generate_dataset(here / "data", people=40, seed=1)
    main(["train", "--data", "data", "--out", "run", "--preset", "bios-tiny", "--batch-size", "4",
          "--budget-of", "fixed:2:8", "--schedule", "uniform:1-4", "--seed", "3", "--lr", "3e-3",
          "--injection", "add", "--init-state", "noise", "--checkpoint-fractions", "1.0", "--quiet"])  # fmt: skip
    main(["train", "--config", "run/config.json", "--out", "again", "--quiet"])
    first, second = (json.loads((here / run / "config.json").read_text()) for run in ("run", "again"))
    for section in ("task", "dataset", "train_config", "model_config", "plan"):
        assert first[section] == second[section], section
    assert first["model_config"]["injection"] == "add" and first["train_config"]["seed"] == 3
    losses = [[json.loads(line)["loss"] for line in (here / run / "metrics.jsonl").open()] for run in ("run", "again")]  # fmt: skip
    assert len(losses[0]) > 1 and losses[0] == losses[1]


# ---- bad files: one error line, exit 2, nothing written -------------------------------------------


@pytest.mark.parametrize(
    ("argv", "content", "expect"),
    [
        (["figure1"], "seedz = [1]\n", "unknown key(s) seedz for `biosrecall figure1` (did you mean seeds?)"),
        (["train"], 'batch_size = "8"\n', "c.toml: batch_size takes an integer, got str '8'"),
        (["figure1"], 'update_matched = "yes"\n', "update_matched takes true or false, got str"),
        (["figure1"], "seeds = [0, {a = 1}]\n", "seeds takes strings or numbers, got table"),
        (
            ["figure1"],
            "fixed_sweep = [0, 2]\n",
            "c.toml: fixed_sweep: depths must be a positive integer, got 0",
        ),
        (["lm", "eval"], "max_depth = 0\n", "c.toml: max_depth must be a positive integer, got 0"),
        (["train"], 'data = "a"\ndata_dir = "b"\n', "data and data_dir set the same option"),
        (
            ["generate"],
            'out = "x"\npeople = 1 2\n',
            "c.toml is not valid TOML: Expected newline or end of "
            "document after a statement (at line 2, column 12)",
        ),
        (["generate"], 'out = "x"\npeople = [1, 2\n', "not valid TOML: Unclosed array (at the end, line 2)"),
        (["flops"], b"preset = '\xff'\n", "cannot read --config file c.toml: not UTF-8 text"),
        (["figure1"], None, "--config file c.toml does not exist"),
        (["recall-curve", "runs/a"], "depths = [1, 4]\n", "--depths applies to --hf-model only"),
    ],
    ids=[
        "unknown-key",
        "wrong-type",
        "wrong-type-flag",
        "wrong-item",
        "callback",
        "range",
        "same-option",
        "not-toml",
        "not-toml-at-end",
        "not-utf8",
        "missing",
        "option-of-another-mode",
    ],
)
def test_a_bad_toml_file_is_one_error_line(argv, content, expect, here, capsys):
    if isinstance(content, bytes):
        (here / "c.toml").write_bytes(content)
    elif content is not None:
        (here / "c.toml").write_text(content)
    line = refused([*argv, "--config", "c.toml"], here, capsys)
    assert expect in line, line


def test_a_folder_is_not_a_config_file(here, capsys):
    (here / "folder").mkdir()
    assert "is a directory" in refused(["ask", "--config", "folder"], here, capsys)


@pytest.mark.parametrize(
    ("argv", "record", "expect"),
    [
        (["figure1"], {}, "reads TOML config files; a .json one is a run spec or a run's config.json"),
        (["train", "--out", "o"], "lm", "records a run of `biosrecall lm train`, not of `biosrecall train`"),
        (["train", "--out", "o"], {"train_config": {}}, "is corrupt: field 'task' is missing"),
    ],
    ids=["json-for-a-toml-command", "lm-run-for-train", "not-a-run-config"],
)
def test_a_bad_json_file_is_one_error_line(argv, record, expect, here, capsys):
    name = lm_run_config(here) if record == "lm" else "config.json"
    if record != "lm":
        (here / name).write_text(json.dumps(record))
    line = refused([*argv, "--config", name], here, capsys)
    assert expect in line, line
