"""Reading runs (`biosrecall.train.run_folder`): the one checkpoint selector syntax of every command, the training
data of a run, and the one table writer and figure saver (`biosrecall.outputs`).

Most tests use hand-made run folders (config.json and checkpoint sidecars only); the last one trains a
tiny fixed-first run and evaluates its switch checkpoint through `recall-curve`.

    pytest -q tests/test_runs.py
"""

from __future__ import annotations

import json

import pandas as pd
import pytest
from matplotlib.figure import Figure

from biosrecall.cli import main
from biosrecall.errors import BiosrecallError
from biosrecall.outputs import COLORS, MARKERS, save_figure, write_table
from biosrecall.train.run_folder import RunFolder, fraction_of, parse_selector

BAD_SELECTORS = ["", "abc", "1.5", "0", "nan", "inf", "-0.25", "0.45,", "final;switch"]


def make_run(root, name="run", fractions=(0.25, 0.45, 1.0), switch=True, dataset=None):
    """A run folder whose checkpoints hold only their sidecar (selection never reads weights)."""
    run = root / name
    labels = [repr(float(f)) for f in fractions] + (["switch"] if switch else [])
    for label in labels:
        folder = run / "checkpoints" / label
        folder.mkdir(parents=True)
        meta = {"fraction": None if label == "switch" else float(label), "dataset": dataset or {}}
        (folder / "meta.json").write_text(json.dumps(meta))
    run.mkdir(exist_ok=True)
    (run / "config.json").write_text(json.dumps({"dataset": dataset or {}}))
    return run


def run_cli(args, capsys) -> tuple[int, str, str]:
    try:
        main([str(a) for a in args])
        code = 0
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


# ---- the selector syntax ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("selector", "labels"),
    [
        ("final", ["1.0"]),
        ("fractions", ["0.25", "0.45", "1.0"]),
        ("all", ["0.25", "0.45", "1.0", "switch"]),
        ("switch", ["switch"]),
        ("0.45", ["0.45"]),
        ("1", ["1.0"]),
        ("switch,0.45,final", ["0.45", "1.0", "switch"]),  # stable order, whatever the order asked
        (" Final , 1.0 ", ["1.0"]),  # duplicates collapse; case and spaces do not matter
        (("0.25", "switch"), ["0.25", "switch"]),  # a repeated option
        ((0.45, 1.0), ["0.45", "1.0"]),  # numbers, as the library takes them
    ],
)
def test_every_selector_form(tmp_path, selector, labels):
    run = make_run(tmp_path)
    chosen = RunFolder(run).select_checkpoints(selector)
    assert list(chosen) == labels
    assert all(path == run / "checkpoints" / label for label, path in chosen.items())


def test_final_is_the_largest_kept_fraction(tmp_path):
    run = make_run(tmp_path, fractions=(0.25, 0.5), switch=False)
    assert list(RunFolder(run).select_checkpoints("final")) == ["0.5"]
    assert list(RunFolder(run).select_checkpoints("all")) == ["0.25", "0.5"]


@pytest.mark.parametrize("text", BAD_SELECTORS)
def test_malformed_selectors_are_refused(tmp_path, text):
    with pytest.raises(BiosrecallError, match="--checkpoint takes a budget fraction"):
        parse_selector(text)
    with pytest.raises(BiosrecallError) as raised:
        RunFolder(make_run(tmp_path)).select_checkpoints(text)
    assert str(raised.value).endswith("run has 0.25, 0.45, 1.0, switch")


@pytest.mark.parametrize(
    ("selector", "needle"),
    [
        ("0.3", "has no checkpoint at fraction 0.3 (it has 0.25, 0.45, 1.0)"),
        ("final,0.8", "has no checkpoint at fraction 0.8"),
        ("switch", "has no switch checkpoint"),
    ],
)
def test_missing_checkpoints_name_the_run_and_what_it_has(tmp_path, selector, needle):
    run = make_run(tmp_path, switch=False)
    with pytest.raises(BiosrecallError, match="run has no") as raised:
        RunFolder(run).select_checkpoints(selector)
    assert needle in str(raised.value) and str(run) in str(raised.value)


def test_not_a_run_and_a_run_without_checkpoints(tmp_path):
    with pytest.raises(BiosrecallError, match="is not a run folder"):
        RunFolder(tmp_path / "nowhere").select_checkpoints("final")
    fresh = tmp_path / "fresh"
    (fresh / "checkpoints" / "latest").mkdir(parents=True)
    (fresh / "config.json").write_text("{}")
    with pytest.raises(BiosrecallError, match="has no checkpoints yet"):
        RunFolder(fresh).select_checkpoints("all")


def test_one_checkpoint_commands_refuse_a_selector_naming_several(tmp_path):
    run = make_run(tmp_path)
    assert RunFolder(run).select_checkpoint("switch") == ("switch", run / "checkpoints" / "switch")
    with pytest.raises(BiosrecallError, match="names one checkpoint here"):
        RunFolder(run).select_checkpoint("fractions")
    assert fraction_of("0.45") == 0.45 and fraction_of("switch") is None


# ---- the data a run was trained on ------------------------------------------------------------------


def test_training_data_is_the_recorded_folder_or_the_override(tmp_path, monkeypatch):
    data = tmp_path / "data"
    data.mkdir()
    (tmp_path / "cwd" / "inner").mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "cwd" / "inner")  # where "../data" names no folder
    record = {"task": {"name": "lm"}, "dataset": {"path": str(data), "manifest_hash": "abc"}}
    run = make_run(tmp_path, dataset=record["dataset"])
    assert RunFolder(run).training_data(record) == data
    assert (
        RunFolder(run).training_data({"dataset": {"path": "../data"}}) == run / "../data"
    )  # relative to the run
    other = tmp_path / "other"
    other.mkdir()
    assert RunFolder(run).training_data(record, other) == other
    with pytest.raises(BiosrecallError, match="corpus folder nowhere does not exist"):
        RunFolder(run).training_data(record, "nowhere")
    with pytest.raises(BiosrecallError, match="records no dataset"):
        RunFolder(run).training_data({})
    data.rmdir()
    with pytest.raises(BiosrecallError, match="that .* was trained on is missing .*--data"):
        RunFolder(run).training_data(record)
    RunFolder(run).check_training_data(record, data, "abc")
    with pytest.raises(BiosrecallError, match="is not the one .* was trained on"):
        RunFolder(run).check_training_data(record, data, "xyz")


# ---- selectors through the real command line --------------------------------------------------------


@pytest.mark.parametrize("command", [["recall-curve"], ["lm", "eval"]])
@pytest.mark.parametrize(
    ("selector", "needle"),
    [
        ("abc", "--checkpoint takes a budget fraction"),
        ("1.5", "--checkpoint takes a budget fraction"),
        ("0", "--checkpoint takes a budget fraction"),
        ("0.3", "has no checkpoint at fraction 0.3"),
        ("switch", "has no switch checkpoint"),
    ],
)
def test_bad_selectors_give_one_error_line_and_exit_2(tmp_path, capsys, command, selector, needle):
    run = make_run(tmp_path, switch=False)
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    out = ["--out", tmp_path / "out"] if command == ["recall-curve"] else []  # lm eval writes into the run
    code, _, err = run_cli([*command, run, "--checkpoint", selector, *out], capsys)
    assert code == 2, err
    assert err.count("\n") == 1 and err.startswith("error: ") and needle in err, err
    assert str(run) in err, "the error names the run"
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before


def test_lm_eval_checks_every_run_before_evaluating_any(tmp_path, capsys):
    good, bad = make_run(tmp_path, "good"), make_run(tmp_path, "bad", fractions=(0.5,))
    code, _, err = run_cli(["lm", "eval", good, bad, "--checkpoints", "0.25"], capsys)
    assert code == 2 and "bad has no checkpoint at fraction 0.25" in err
    assert not (good / "eval").exists()


# ---- the table writer and the figure saver ----------------------------------------------------------


def test_write_table_writes_csv_and_parquet_that_read_back(tmp_path):
    table = pd.DataFrame({"run": ["a", "b"], "depth": [1, 2], "bits": [0.5, 1.25]})
    written = write_table(table, tmp_path / "out" / "table.csv")  # a given suffix is dropped
    assert written == [tmp_path / "out" / "table.csv", tmp_path / "out" / "table.parquet"]
    pd.testing.assert_frame_equal(pd.read_parquet(written[1]), table)
    pd.testing.assert_frame_equal(pd.read_csv(written[0]), table)
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["table.csv", "table.parquet"]


def test_save_figure_writes_png_and_pdf(tmp_path):
    fig = Figure()
    fig.add_subplot().plot([1, 2], [3, 4], color=COLORS[0], marker=MARKERS[0])
    written = save_figure(fig, tmp_path / "fig.v2")  # a dot in the name is not a suffix to drop
    assert [p.name for p in written] == ["fig.v2.png", "fig.v2.pdf"]
    assert written[0].read_bytes().startswith(b"\x89PNG") and written[1].read_bytes().startswith(b"%PDF")
    assert len(set(COLORS)) == len(COLORS) and len(set(MARKERS)) == len(MARKERS)


def test_the_same_figure_saved_at_another_time_is_the_same_pdf(tmp_path, monkeypatch):
    """Reruns compare their outputs with cmp: a PDF carries no creation date."""
    fig = Figure()
    fig.add_subplot().plot([1, 2], [3, 4])
    pdfs = []
    for epoch in ("0", "1700000000"):  # matplotlib dates a PDF by SOURCE_DATE_EPOCH when it is set
        monkeypatch.setenv("SOURCE_DATE_EPOCH", epoch)
        pdfs.append(save_figure(fig, tmp_path / epoch / "fig")[1].read_bytes())
    assert pdfs[0] == pdfs[1]


def test_outputs_refuse_a_folder_that_is_a_file(tmp_path):
    (tmp_path / "file.txt").write_text("not a folder")
    with pytest.raises(BiosrecallError, match="exists and is not a folder"):
        write_table(pd.DataFrame({"a": [1]}), tmp_path / "file.txt" / "table")
    with pytest.raises(BiosrecallError, match="exists and is not a folder"):
        save_figure(Figure(), tmp_path / "file.txt" / "figure")


# ---- a real run: the switch checkpoint through recall-curve -----------------------------------------


def test_recall_curve_evaluates_the_switch_checkpoint_of_a_real_run(tmp_path, capsys):
    from biosrecall.bios import generate_dataset
    from biosrecall.train.config import TrainConfig
    from biosrecall.train.trainer import train_bios

    data = generate_dataset(tmp_path / "data", people=20, seed=0)
    config = TrainConfig(
        schedule="fixed_first:k0=2,switch=0.5,finish=uniform,range=1-4",
        updates=6,
        batch_size=4,
        checkpoint_fractions=(0.5, 1.0),
    )
    train_bios(data, tmp_path / "ff", config, preset="bios-tiny")
    out = tmp_path / "out"
    args = ["recall-curve", tmp_path / "ff", "--checkpoint", "final", "--checkpoint", "switch"]
    code, stdout, err = run_cli([*args, "--max-depth", "2", "--people", "4", "--out", out], capsys)
    assert code == 0, err
    table = pd.read_parquet(out / "recall_curve.parquet")
    assert sorted(table["checkpoint"].unique()) == ["1.0", "switch"]
    switch = table[table["checkpoint"] == "switch"].iloc[0]
    assert switch["fraction"] == pytest.approx(switch["flops"] / switch["budget"])
    assert 0 < switch["fraction"] < 1
    for name in ("recall_curve.csv", "recall_curve.png", "recall_curve.pdf"):
        assert f"wrote {out / name}" in stdout
