"""Bounds on numbers: every numeric trainer option, the config file, the planner and the schedules.

The CLI cases run `biosrecall.cli.main` in-process inside a private copy of a small world (a bioS
dataset, LM shards, an earlier run folder). Each gives an option a value at 0, negative, NaN, inf or
beyond its limit (0 only where 0 is not a valid value) and asserts exit code 2, exactly one stderr line
`error: ...` naming the option, and that nothing was written: a new run folder is not created and the
earlier run, given with --overwrite, is untouched. The library cases check that the planner and the
schedules refuse absurd sizes in closed form, before allocating (peak traced memory stays small).

    pytest -q tests/test_bounds.py
"""

from __future__ import annotations

import hashlib
import math
import shutil
import tracemalloc
from pathlib import Path

import pytest

from biosrecall.cli import main
from biosrecall.compute.planner import budget_of, plan_run, plan_updates
from biosrecall.compute.schedules import MAX_UPDATES, parse_schedule
from biosrecall.errors import BiosrecallError
from biosrecall.model import get_preset
from biosrecall.train.config import TrainConfig, resolve_seq_len

HUGE_INT = str(2**64)
# option: its bad values at (0, negative, NaN, inf, huge); None where that value is a valid setting.
NUMERIC = {
    "--budget": ("0", "-1e15", "nan", "inf", "1e30"),
    "--budget-of": ("fixed:2:0", "fixed:2:-5", "fixed:2:nan", "fixed:2:inf", f"fixed:2:{10**12}"),
    "--updates": ("0", "-3", "nan", "inf", str(10**12)),
    "--batch-size": ("0", "-4", "nan", "inf", str(10**12)),
    "--grad-accum": ("0", "-2", "nan", "inf", str(10**12)),
    "--seq-len": ("0", "-16", "nan", "inf", str(10**12)),
    "--lr": ("0", "-0.001", "nan", "inf", "1e30"),
    "--min-lr-ratio": (None, "-0.1", "nan", "inf", "1e30"),
    "--warmup": (None, "-0.1", "nan", "inf", "1e30"),
    "--weight-decay": (None, "-0.1", "nan", "inf", "1e30"),
    "--betas": (None, "-0.1,0.95", "nan,0.95", "inf,0.95", "0.9,1e30"),
    "--grad-clip": (None, "-1", "nan", "inf", "1e39"),
    "--seed": (None, "-1", "nan", "inf", str(2**70)),
    "--threads": ("0", "-1", "nan", "inf", str(10**12)),
    "--checkpoint-fractions": ("0", "-0.5", "nan", "inf", "1e30"),
    "--save-every": ("0", "-1", "nan", "inf", HUGE_INT),
    "--log-every": ("0", "-1", "nan", "inf", HUGE_INT),
    "--backprop-depth": ("0", "-1", "nan", "inf", str(10**12)),
}
LM_NUMERIC = {**NUMERIC, "--vocab-size": ("0", "-1", "nan", "inf", str(10**12))}
PLAN_NUMERIC = {"--nproc-per-node": ("0", "-1", "nan", "inf", str(10**12))}
FLOPS_NUMERIC = {
    "--seq-len": ("0", "-1", "nan", "inf", str(10**12)),
    "--updates": ("0", "-1", "nan", "inf", str(10**12)),
    "--backprop-depth": ("0", "-1", "nan", "inf", str(10**12)),
}
KINDS = ("zero", "negative", "nan", "inf", "huge")
# What the error line may name instead of the option (a rule between options, the planner).
ALSO_NAMED = {
    "--nproc-per-node": "world size",
    "--weight-decay": "weight_decay",
    "--seq-len": "sequence length",
    "--updates": "total updates",
}


def cases(table: dict[str, tuple]) -> list:
    return [
        pytest.param(option, value, id=f"{option[2:]}-{kind}")
        for option, values in table.items()
        for kind, value in zip(KINDS, values, strict=True)
        if value is not None
    ]


# ---- the world and how it is checked ---------------------------------------------------------------


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> Path:
    from biosrecall.bios import generate_dataset
    from biosrecall.lm.corpus import Corpus
    from biosrecall.lm.shards import prepare_corpus

    root = tmp_path_factory.mktemp("bounds")
    generate_dataset(root / "data", people=40, seed=1)
    text = root / "lm.txt"
    text.write_text("Some text to tokenize.\n\nA second document.\n\n" * 20)
    prepare_corpus(Corpus([text]), root / "shards", vocab_size=300, val_fraction=0.2)
    old = root / "old"
    (old / "checkpoints").mkdir(parents=True)
    (old / "config.json").write_text('{"earlier": "run"}\n')
    (old / "metrics.jsonl").write_text('{"update": 0}\n')
    return root


@pytest.fixture
def here(world, tmp_path, monkeypatch) -> Path:
    copy = tmp_path / "w"
    shutil.copytree(world, copy)
    monkeypatch.chdir(copy)
    return copy


def snapshot(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): "dir" if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
    }


def refused(argv: list[str], capsys) -> str:
    """Run the CLI; assert exit 2 with one `error:` line and no traceback; return that line."""
    with pytest.raises(SystemExit) as info:
        main(argv)
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert info.value.code == 2, err
    assert "Traceback" not in err and len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


def with_option(base: list[str], option: str, value: str) -> list[str]:
    """`base` plus `option=value`; a budget option replaces the base's `--updates N`."""
    if option in ("--budget", "--budget-of"):
        at = base.index("--updates")
        base = base[:at] + base[at + 2 :]
    return [*base, f"{option}={value}"]


def assert_refused_and_nothing_written(base, option, value, here, capsys):
    before = snapshot(here)
    for out in (["--out", "new"], ["--out", "old", "--overwrite"]):
        line = refused(with_option([*base, *out], option, value), capsys)
        names = (f"'{option}'", option[2:].replace("-", "_"), ALSO_NAMED.get(option, option))
        assert any(name in line for name in names), line
    assert snapshot(here) == before


BIOS_TRAIN = ["train", "--data", "data", "--preset", "bios-tiny", "--batch-size", "4", "--updates", "2",
              "--device", "cpu", "--quiet"]  # fmt: skip
LM_TRAIN = ["lm", "train", "--data", "shards", "--preset", "lm-tiny", "--seq-len", "16", "--batch-size", "4",
            "--updates", "2", "--device", "cpu", "--quiet"]  # fmt: skip
LM_PLAN = ["lm", "plan", "--preset", "lm-tiny", "--seq-len", "16", "--batch-size", "4", "--updates", "2"]


# ---- the command line --------------------------------------------------------------------------------


class TestTrainOptions:
    @pytest.mark.parametrize(("option", "value"), cases(NUMERIC))
    def test_bad_number_is_refused_before_anything_is_written(self, option, value, here, capsys):
        assert_refused_and_nothing_written(BIOS_TRAIN, option, value, here, capsys)


class TestLMTrainOptions:
    @pytest.mark.parametrize(("option", "value"), cases(LM_NUMERIC))
    def test_bad_number_is_refused_before_anything_is_written(self, option, value, here, capsys):
        assert_refused_and_nothing_written(LM_TRAIN, option, value, here, capsys)


class TestLMPlanOptions:
    @pytest.mark.parametrize(("option", "value"), cases(PLAN_NUMERIC))
    def test_bad_number_is_refused(self, option, value, here, capsys):
        line = refused(with_option(LM_PLAN, option, value), capsys)
        assert option in line or ALSO_NAMED[option] in line, line


class TestFlopsOptions:
    @pytest.mark.parametrize(("option", "value"), cases(FLOPS_NUMERIC))
    def test_bad_number_is_refused(self, option, value, here, capsys):
        line = refused(
            ["flops", "--preset", "bios-tiny", "--schedule", "fixed:4", f"{option}={value}"], capsys
        )
        named = (option, option[2:].replace("-", "_"), ALSO_NAMED.get(option, option))
        assert any(name in line for name in named), line


class TestConfigFile:
    """`--config FILE` values of the wrong type or out of bounds: one line naming file, key and type."""

    @pytest.mark.parametrize(
        ("toml", "expect"),
        [
            ("batch_size = {rows = 4}", "batch_size takes an integer, got table"),
            ("lr = 2024-01-01", "lr takes a number, got date"),
            ("seed = 07:30:00", "seed takes an integer, got time"),
            ("warmup = [0.1]", "warmup takes a number, got array"),
            ("updates = 2.5", "updates takes an integer, got float"),
            ("budget = '1e15'", "budget takes a number, got str"),
            ("seq_len = true", "seq_len takes an integer, got bool"),
            ("compile = 1", "compile takes true or false, got int"),
            ("schedule = 4", "schedule takes a string, got int"),
            ("checkpoint_fractions = [0.5, {a = 1}]", "fractions must lie in (0, 1]"),
            ("grad_clip = nan", "grad_clip must be a number in [0, "),
            ("lr = inf", "lr must be a number in (0, 1]"),
            ("seq_len = 0", "seq_len must be a positive integer"),
            ("save_every = 0", "save_every must be a positive integer"),
            (f"seed = {2**63}", "seed must be at most 9,223,372,036,854,775,807"),
            ("depth = 4", "unknown key(s) depth"),
        ],
    )
    @pytest.mark.parametrize("command", [LM_TRAIN[:2], LM_PLAN[:2]], ids=["train", "plan"])
    def test_bad_value_names_file_key_and_type(self, command, toml, expect, here, capsys):
        (here / "bad.toml").write_text(toml + "\n")
        before = snapshot(here)
        args = ["--data", "shards", "--out", "new"] if command[1] == "train" else []
        line = refused([*command, *args, "--updates", "2", "--config", "bad.toml"], capsys)
        assert "bad.toml" in line and expect in line, line
        assert snapshot(here) == before

    def test_typed_values_of_every_kind_are_read(self, here, capsys):
        (here / "good.toml").write_text(
            "batch_size = 8\nlr = 1\nbetas = [0.8, 0.9]\ncheckpoint_fractions = [1.0, 0.5]\n"
            'compile = false\nschedule = "fixed:2"\nseq_len = 16\nnproc_per_node = 2\n'
        )
        main([*LM_PLAN[:2], "--updates", "3", "--config", "good.toml"])
        out = capsys.readouterr().out
        assert "schedule fixed:2" in out and "global batch 8 x 16" in out and "processes 2 x 4" in out


# ---- the library ------------------------------------------------------------------------------------

CFG = get_preset("bios-tiny")


def refusal(call) -> tuple[float, str]:
    """Run `call`, which must raise BiosrecallError: (peak traced allocation in MiB, the message)."""
    tracemalloc.start()
    try:
        with pytest.raises(BiosrecallError) as info:
            call()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return peak / 2**20, str(info.value)


class TestPlannerBounds:
    @pytest.mark.parametrize(
        ("call", "expect"),
        [
            (lambda: plan_run(CFG, "uniform:1-16", 512, 1e30, seed=0), "limit of 1,000,000"),
            (lambda: plan_run(CFG, "curriculum:mean=8,warmup=0.5", 512, 1e30, 0), "limit of 1,000,000"),
            (lambda: plan_updates(CFG, "uniform:1-16", 10**12, 512, seed=0), "at most 1,000,000 (a plan"),
            (lambda: budget_of(CFG, "fixed:4", 10**12, 512, seed=0), "at most 1,000,000 (a plan"),
            (lambda: plan_updates(CFG, "fixed:4", 10, 10**12, seed=0), "limit of 67,108,864"),
            (lambda: plan_run(CFG, "fixed:4", 512, math.nan, seed=0), "budget must be a positive finite"),
            (lambda: plan_run(CFG, "fixed:4", 512, 10**400, seed=0), "budget must be a positive finite"),
        ],
        ids=["budget-uniform", "budget-curriculum", "updates", "budget-of", "tokens", "nan", "int-overflow"],
    )
    def test_absurd_plan_is_refused_in_closed_form(self, call, expect):
        peak, message = refusal(call)
        assert expect in message and peak < 16, (peak, message)

    def test_a_budget_refusal_states_the_update_count_and_memory(self):
        _, message = refusal(lambda: plan_run(CFG, "fixed:4", 512, 1e30, seed=0))
        assert "budget 1e+30 FLOPs" in message and "e+" in message.split("about ")[1] and "GiB" in message


class TestScheduleBounds:
    @pytest.mark.parametrize(
        ("spec", "expect"),
        [
            ("uniform:1-1000000000", "uniform upper depth must be at most 1,024"),
            ("fixed:1000000000", "depth must be at most 1,024"),
            ("fixed_first:k0=2000,switch=0.5", "k0 must be at most 1,024"),
            ("curriculum:mean=1e6,warmup=0.5", "mean must be a number in [1, 1024], got 1000000.0"),
            ("poisson_lognormal:mean=1000", "beyond the limit of 32,768"),
            ("poisson_lognormal:mean=8,sigma=3", "beyond the limit of 32,768"),
            ("poisson_lognormal:mean=8,sigma=40,cap=32", "too wide"),
            (
                "poisson_lognormal:mean=8,sigma=inf,cap=32",
                "sigma must be a non-negative finite number, got inf",
            ),
            ("poisson_lognormal:mean=nan", "mean must be a number in (0, 1024], got nan"),
            ("poisson_lognormal:mean=8,cap=99999999999", "cap must be at most 1,024"),
        ],
    )
    def test_unbounded_parameters_are_refused_before_drawing(self, spec, expect):
        peak, message = refusal(lambda: parse_schedule(spec).depths(1000, seed=0))
        assert expect in message and peak < 16, (peak, message)

    @pytest.mark.parametrize("total", [0, -1, MAX_UPDATES + 1, 10**30])
    def test_run_lengths_outside_one_to_the_limit_are_refused(self, total):
        peak, message = refusal(lambda: parse_schedule("uniform:1-16").depths(total, seed=0))
        assert "total updates" in message and peak < 16, (peak, message)

    @pytest.mark.parametrize("seed", [-1, 2**63, 2**70])
    def test_seeds_outside_int64_are_refused(self, seed):
        with pytest.raises(BiosrecallError, match="seed"):
            parse_schedule("uniform:1-16").depths(5, seed=seed)

    def test_the_largest_allowed_mean_still_draws_within_its_cap(self):
        schedule = parse_schedule("curriculum:mean=1024,warmup=0.5,cap=1024")
        depths = schedule.depths(300, seed=0)
        assert depths.min() >= 1 and depths.max() <= 1024 and depths[-1] > 100
        assert 100 < schedule.expected_cost(300, lambda k: k) / 300 <= 1024


class TestTrainConfig:
    @pytest.mark.parametrize(
        "values",
        [{"seq_len": 0}, {"batch_size": 0}, {"save_every": 0}, {"lr": math.inf}, {"weight_decay": math.nan},
         {"grad_clip": math.nan}, {"seed": 2**70}, {"budget": 1e400}, {"updates": True}, {"lr": "0.1"},
         {"betas": (0.9,)}, {"batch_size": 4, "grad_accum": 3}, {"batch_size": 2**20, "seq_len": 2**10},
         {"lr": 0.5, "weight_decay": 2.0}, {"threads": 0}, {"budget_of": "fixed:4:0"}],
        ids=repr,
    )  # fmt: skip
    def test_impossible_values_never_make_a_config(self, values):
        with pytest.raises(BiosrecallError):
            TrainConfig(**values)

    def test_seq_len_zero_is_never_read_as_unset(self):
        config = TrainConfig(seq_len=16)
        config.seq_len = 0  # a config changed after construction is checked again by validate
        with pytest.raises(BiosrecallError, match="seq_len must be a positive integer"):
            config.validate()
        with pytest.raises(BiosrecallError, match="at least 1"):
            resolve_seq_len(config, CFG)
        assert resolve_seq_len(TrainConfig(), CFG) == CFG.context_length

    def test_no_run_size_is_a_config_but_not_a_plan(self):
        config = TrainConfig()
        with pytest.raises(BiosrecallError, match="give exactly one of"):
            config.validate()
        assert TrainConfig.from_dict({**config.to_dict(), "extra": {}}) == config
