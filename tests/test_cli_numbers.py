"""One rule per kind of number: every numeric option of every command refuses the same hostile values.

The walk finds each registered command (subgroups such as `lm` and `sweep` included) and each of its
options whose type reads numbers (`Integer`, `Real`, `NumberList`, `ParsedBy`, and the TrainConfig
fields' `FieldValue`), and feeds it values no number rule may accept: full-width digits, underscores,
surrounding spaces, hex, nan, inf, 1e999, integers past 64 bits, and negatives or zero where the
option's floor excludes them. Each must stop while the command line is read: exit 2, one `error:`
line naming the option, no traceback, nothing written.
"""

from __future__ import annotations

import click
import pytest
from harness import changes, snapshot

from biosrecall.cli import cli, main
from biosrecall.cli.options import FieldValue, Integer, NumberList, ParsedBy, Real
from biosrecall.compute.schedules import parse_schedule
from biosrecall.errors import BiosrecallError
from biosrecall.numbers import MAX_SEED, Limit, check_seed, parse_float, parse_int, split_list
from biosrecall.train.config import ITEM_LIMITS, LIMITS

ALWAYS = ["４", "1_000", " 4", "4 ", "0x10", "nan", "inf", "1e999"]
# A list option left empty means "none of these" for these (figure1's optional studies).
EMPTY_IS_NONE = {("figure1", "lr_grid"), ("figure1", "fixed_sweep"), ("figure1", "budgets")}


def _commands(group: click.Group, path: tuple[str, ...], ctx: click.Context):
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        sub = click.Context(command, parent=ctx, info_name=name)
        if isinstance(command, click.Group):
            yield from _commands(command, (*path, name), sub)
        else:
            yield (*path, name), command


def _limit(option: click.Option) -> Limit | None:
    """The kind of number an option holds, or None for an option that holds no number."""
    kind = option.type
    if isinstance(kind, Integer | Real | NumberList | ParsedBy):
        return kind.limit
    if isinstance(kind, FieldValue) and kind.kind in (int, float):
        return LIMITS[kind.field]
    if isinstance(kind, FieldValue) and kind.kind is tuple and kind.item is not str:
        return ITEM_LIMITS.get(kind.field, LIMITS["updates"])  # keep_updates: update counts
    return None


def _numeric_options() -> list[tuple[tuple[str, ...], click.Option, Limit]]:
    found = []
    for path, command in _commands(cli, (), click.Context(cli, info_name="biosrecall")):
        for option in command.params:
            limit = _limit(option) if isinstance(option, click.Option) else None
            if limit is not None:
                found.append((path, option, limit))
    return found


NUMERIC = _numeric_options()


def hostile_values(path: tuple[str, ...], option: click.Option, limit: Limit) -> list[str]:
    values = list(ALWAYS)
    if (path[-1], option.name) not in EMPTY_IS_NONE:
        values.append("")
    if limit.low >= 0:
        values.append("-1")
    if limit.low > 0 or (limit.low == 0 and limit.low_open):
        values.append("0")
    if limit.kind is int:
        values += [str(2**64), str(MAX_SEED + 1), "2.5", "1e3"]
    return values


def test_the_walk_finds_every_command_and_its_numbers():
    commands = {path for path, _, _ in NUMERIC}
    assert {("generate",), ("train",), ("lm", "eval"), ("lm", "harness"), ("sweep", "run")} <= commands
    assert {("generate", "seed"), ("train", "seed"), ("lm", "prepare", "seed")} <= {
        (*path, option.name) for path, option, _ in NUMERIC
    }
    assert len(NUMERIC) >= 90, len(NUMERIC)


@pytest.mark.parametrize(
    ("path", "option", "limit"), NUMERIC, ids=[f"{' '.join(p)} {o.opts[0]}" for p, o, _ in NUMERIC]
)
def test_hostile_number_is_refused_while_reading_the_command_line(
    path, option, limit, tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)
    names = {*option.opts, option.name, option.name.replace("_", " ")}
    for value in hostile_values(path, option, limit):
        with pytest.raises(SystemExit) as info:
            main([*path, option.opts[0], value])
        err = capsys.readouterr().err
        lines = err.splitlines()
        assert info.value.code == 2, (value, err)
        assert len(lines) == 1 and lines[0].startswith("error: "), (value, err)
        assert "Traceback" not in err
        assert any(name in lines[0] for name in names), (value, lines[0])
        assert list(tmp_path.iterdir()) == [], value


@pytest.mark.parametrize("argv", [
    ["generate", "--out", "d", "--seed", str(2**64)],
    ["train", "--data", "d", "--out", "o", "--seed", str(2**64)],
    ["lm", "prepare", "x.txt", "--out", "o", "--seed", str(2**64)],
    ["diagnose-update", "run", "--seed", str(2**64)],
    ["figure1", "--out", "f", "--seeds", f"0,{2**64}"],
])  # fmt: skip
def test_every_seed_has_the_same_ceiling(argv, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as info:
        main(argv)
    err = capsys.readouterr().err
    assert info.value.code == 2 and "must be at most 9,223,372,036,854,775,807" in err, err
    assert list(tmp_path.iterdir()) == []


def test_a_full_width_digit_in_a_schedule_is_refused_before_training(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as info:
        main(["train", "--data", "d", "--out", "o", "--schedule", "fixed:４"])
    err = capsys.readouterr().err
    assert info.value.code == 2 and "'--schedule'" in err and "not ASCII" in err, err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "spec", ["fixed:４", "uniform:1-１6", "fixed_first:\u212a0=4,switch=0.8", "fixed:1_0"]
)
def test_a_schedule_is_ascii_so_the_recorded_spec_is(spec):
    with pytest.raises(BiosrecallError):
        parse_schedule(spec)


def test_ascii_numbers_are_read_as_before():
    assert [parse_int(t) for t in ("0", "+4", "-3", "18446744073709551616")] == [0, 4, -3, 2**64]
    assert [parse_float(t) for t in ("1", "0.5", ".5", "2e14", "-3.5E-2")] == [1, 0.5, 0.5, 2e14, -0.035]
    assert split_list("0.9, 0.95") == ["0.9", "0.95"]
    assert check_seed(MAX_SEED) == MAX_SEED
    for text in ("４", "٣", "1_000", " 4", "4\n", "0x10", "", "1e3"):
        with pytest.raises(BiosrecallError, match="expected an integer"):
            parse_int(text)
    for text in ("１.5", "1_0.5", " 1.5", "0x1p3", ""):
        with pytest.raises(BiosrecallError, match="expected a number"):
            parse_float(text)


# ---- numbers inside text options --------------------------------------------------------------------

# Each option's text holds a number where "{}" is; every form below is one that int() or float() would
# read (or str.isdigit would pass) but the one ASCII rule refuses.
IN_TEXT = {
    "fullwidth": "４",
    "arabic-indic": "٣",
    "superscript": "²",
    "underscore": "1_0",
}
TEXT_OPTIONS = {
    "schedule": ["train", "--data", "d", "--out", "o", "--schedule", "fixed:{}"],
    "budget-of depth": ["train", "--data", "d", "--out", "o", "--budget-of", "fixed:{}:30"],
    "budget-of updates": ["train", "--data", "d", "--out", "o", "--budget-of", "fixed:4:3{}"],
    "exit": ["recall-curve", "run", "--exit", "entropy:{}.5"],
    "pool-size": ["generate", "--out", "o", "--pool-size", "employer={}0"],
    "model-override": ["train", "--data", "d", "--out", "o", "--model-override", "d_model={}4"],
    "checkpoint": ["recall-curve", "run", "--checkpoint", "0.{}"],
}


def _text_cases():
    for option, template in TEXT_OPTIONS.items():
        for form, digits in IN_TEXT.items():
            argv = [part.replace("{}", digits) for part in template]
            yield pytest.param(argv, digits, id=f"{option} {form}")


def fake_run(folder):
    """A folder that passes for a run with a checkpoint at 0.45, for the commands that read
    --checkpoint only once they have found the run's checkpoints."""
    (folder / "run" / "checkpoints" / "0.45").mkdir(parents=True)
    (folder / "run" / "config.json").write_text("{}")
    (folder / "run" / "checkpoints" / "0.45" / "meta.json").write_text("{}")


@pytest.mark.parametrize(("argv", "digits"), list(_text_cases()))
def test_a_number_inside_a_text_option_is_ascii_too(argv, digits, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    fake_run(tmp_path)
    before = snapshot(tmp_path)
    with pytest.raises(SystemExit) as info:
        main(argv)
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert info.value.code == 2 and len(lines) == 1 and lines[0].startswith("error: "), err
    assert digits in lines[0], lines[0]  # refused for the number, not for something else
    assert changes(before, snapshot(tmp_path)) == []


@pytest.mark.parametrize(
    "text", ["²", "٣", "+1_0", b"\xff\xfe"], ids=["superscript", "arabic", "underscore", "bytes"]
)
def test_a_lock_file_that_holds_no_ascii_pid_names_no_holder(text, tmp_path):
    """`sweep status` reads a run's lock file for its holder; str.isdigit passed '²', which int() refused."""
    from biosrecall.sweep.records import lock_holder
    from biosrecall.train.run_folder import RunFolder

    path = RunFolder(tmp_path / "run").lock_file
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    assert lock_holder(tmp_path / "run") is None
