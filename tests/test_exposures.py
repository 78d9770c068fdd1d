"""Exposure-matched runs (`train --exposures E`): counted against the sampler's own batches, planned,
reported next to their FLOPs, and read from --config files and run specs.

    pytest -q tests/test_exposures.py
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from harness import run_cli

from biosrecall.bios import BatchSampler, generate_dataset, load_dataset
from biosrecall.bios.exposures import exposure_counts, plan_exposures
from biosrecall.errors import BiosrecallError
from biosrecall.sweep.run_spec import run_spec_text
from biosrecall.train.config import TrainConfig
from biosrecall.train.run_folder import RunFolder
from biosrecall.train.trainer import BiosBatchSource

SEED, BATCH, SEQ_LEN = 3, 4, 128


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    return generate_dataset(tmp_path_factory.mktemp("exposures") / "bios", people=30, seed=5)


@pytest.fixture(scope="module")
def source(data_dir):
    """The batch source a run with these settings trains from."""
    return BiosBatchSource(load_dataset(data_dir), BATCH, SEQ_LEN, SEED)


def _people_in_batch(tokens: np.ndarray, store, num_people: int, sep: int) -> list[int]:
    """The person of every biography in a batch, read from its tokens alone: a biography starts at a
    separator, and its first sentence holds exactly one person's name as a run of tokens."""
    names = {
        tuple(store.tokens[store.name_start[p] : store.name_start[p] + store.name_length[p]]): p
        for p in range(num_people)
    }
    people = []
    for row in tokens:
        starts = np.flatnonzero(row == sep)
        for begin, end in zip(starts, [*starts[1:], len(row)], strict=True):
            text = tuple(row[begin + 1 : end])
            found = {p for name, p in names.items() if _holds(text, name)}
            if found:
                assert len(found) == 1, found
                people.append(found.pop())
    return people


def _holds(text: tuple, name: tuple) -> bool:
    return any(text[i : i + len(name)] == name for i in range(len(text) - len(name) + 1))


def test_a_run_planned_for_E_exposures_shows_each_person_E_times_on_average(source):
    """Count every biography in the batches the trainer will read (decoded from their tokens, not from
    the sampler's bookkeeping) over the planned updates."""
    dataset, sampler = source.sampler.dataset, source.sampler
    exposures = plan_exposures(sampler, SEED, 6)
    counts = np.zeros(dataset.num_people, dtype=np.int64)
    sep = int(source.batch(0)[0, 0])  # every row opens with a separator
    per_update = []
    for update in range(exposures.updates):
        people = _people_in_batch(source.batch(update), dataset.token_store, dataset.num_people, sep)
        np.add.at(counts, people, 1)
        per_update.append(len(people))
    assert counts.sum() == exposures.biographies
    assert counts.mean() == pytest.approx(exposures.mean)
    assert 6 <= counts.mean() < 6 + max(per_update) / dataset.num_people  # less than one update over
    assert counts.sum() - per_update[-1] < 6 * dataset.num_people  # one update fewer is not enough
    assert (counts.min(), counts.max()) == (exposures.fewest, exposures.most)
    assert np.array_equal(counts, exposure_counts(sampler, SEED, exposures.updates))
    assert counts.min() >= 1  # everyone is seen; the spread is the sampler's randomness


def test_more_exposures_take_proportionally_more_updates(source):
    few, many = (plan_exposures(source.sampler, SEED, e) for e in (5, 20))
    assert many.updates == pytest.approx(4 * few.updates, rel=0.1)
    assert plan_exposures(source.sampler, SEED, 0.5).updates < few.updates  # a mean may be a fraction
    assert plan_exposures(source.sampler, SEED + 1, 5).updates == pytest.approx(few.updates, rel=0.1)


@pytest.mark.parametrize("bad", [0, -1, float("inf"), float("nan"), True, "5"])
def test_exposures_must_be_a_positive_finite_number(source, bad):
    with pytest.raises(BiosrecallError, match="exposures must be a positive finite number"):
        plan_exposures(source.sampler, SEED, bad)
    with pytest.raises(BiosrecallError, match="exposures must be a positive finite number"):
        TrainConfig(exposures=bad)


def test_a_run_beyond_the_planner_limit_is_refused_before_drawing(data_dir):
    sampler = BatchSampler(load_dataset(data_dir), 1, SEQ_LEN)
    with pytest.raises(BiosrecallError, match="needs at least .* updates .* beyond the planner's limit"):
        plan_exposures(sampler, SEED, 1e12)


def test_exposures_set_the_run_length_once():
    with pytest.raises(BiosrecallError, match="--exposures sets the run's length itself.*--budget-of"):
        TrainConfig(exposures=5, budget_of="fixed:4:10").validate()
    with pytest.raises(BiosrecallError, match="give it without --budget or --updates"):
        TrainConfig(exposures=5, budget=1e12, updates=3).validate()
    TrainConfig(exposures=5).validate()


def _train_args(data_dir, out, *extra) -> list[str]:
    return ["train", "--data", str(data_dir), "--out", str(out), "--preset", "bios-tiny", "--batch-size",
            str(BATCH), "--seq-len", str(SEQ_LEN), "--seed", str(SEED), "--schedule", "fixed:2", *extra]  # fmt: skip


def test_train_plans_the_exposures_and_reports_their_flops(data_dir, source, tmp_path, capsys):
    code, err = run_cli([*_train_args(data_dir, tmp_path / "run", "--exposures", "2")], capsys)
    assert code == 0, err
    expected = plan_exposures(source.sampler, SEED, 2)
    stored = RunFolder(tmp_path / "run").read_config()
    plan = stored["plan"]
    assert plan["updates"] == expected.updates and plan["exposures"] == expected.summary()
    assert plan["total_flops"] > 0 and stored["train_config"]["exposures"] == 2.0
    line = next(text for text in err.splitlines() if text.startswith("plan:"))
    assert f"updates {expected.updates}  {expected.describe()}  switch at -  FLOPs " in line
    # config.json repeats the run, exposures and all; a TOML file sizes one the same way.
    code, _ = run_cli(["train", "--config", str(tmp_path / "run" / "config.json"), "--out", str(tmp_path / "again"), "--quiet"], capsys)  # fmt: skip
    assert code == 0 and RunFolder(tmp_path / "again").read_config()["plan"] == plan
    spec = tmp_path / "run.json"
    spec.write_text(run_spec_text("train", TrainConfig.from_dict(stored["train_config"]), {"data": data_dir}))
    code, _ = run_cli(["train", "--config", str(spec), "--out", str(tmp_path / "spec"), "--preset", "bios-tiny", "--quiet"], capsys)  # fmt: skip
    assert code == 0 and RunFolder(tmp_path / "spec").read_config()["plan"]["updates"] == expected.updates


def test_the_command_line_size_replaces_the_files(data_dir, tmp_path, capsys):
    """--updates on the command line replaces a config file's exposures, as it replaces its budget."""
    spec = tmp_path / "run.toml"
    spec.write_text(f'exposures = 2.0\ndata = "{data_dir}"\n')
    code, _ = run_cli([*_train_args(data_dir, tmp_path / "run", "--config", str(spec), "--updates", "3", "--quiet")], capsys)  # fmt: skip
    stored = RunFolder(tmp_path / "run").read_config()
    assert code == 0 and stored["plan"]["updates"] == 3 and stored["train_config"]["exposures"] is None
    assert "exposures" not in stored["plan"]


def test_lm_runs_have_no_exposures(capsys):
    code, err = run_cli(["lm", "train", "--data", "x", "--out", "y", "--exposures", "3"], capsys)
    assert code == 2 and "No such option '--exposures'" in err
    from biosrecall.model import get_preset
    from biosrecall.train.trainer import make_plan

    with pytest.raises(BiosrecallError, match="--exposures counts the biographies of a bioS dataset"):
        make_plan(get_preset("lm-tiny"), TrainConfig(exposures=3, batch_size=2, seq_len=16))


def test_a_resumed_exposure_run_keeps_its_plan(data_dir, tmp_path, capsys):
    args = _train_args(data_dir, tmp_path / "run", "--exposures", "1", "--quiet")
    assert run_cli(args, capsys)[0] == 0
    before = json.loads((tmp_path / "run" / "config.json").read_text())
    code, err = run_cli([*args, "--resume"], capsys)
    assert code == 0, err
    assert json.loads((tmp_path / "run" / "config.json").read_text()) == before
