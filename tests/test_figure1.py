"""`biosrecall figure1 --preset quick` end to end, its resumability, and the notebook that redraws it."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from biosrecall.cli import main
from biosrecall.experiments.figure1 import FIGURE1_SCHEDULES, FRACTIONS

NOTEBOOK = Path(__file__).resolve().parent.parent / "notebooks" / "figure1.ipynb"


@pytest.fixture(scope="module")
def figure1_out(tmp_path_factory):
    out = tmp_path_factory.mktemp("figure1") / "out"
    main(["figure1", "--preset", "quick", "--out", str(out), "--quiet"])  # raises SystemExit on failure
    return out


@pytest.mark.slow
def test_quick_figure1_writes_the_table_the_summary_and_the_figure(figure1_out):
    for name in ("figure1.png", "figure1.pdf", "recall_curve.csv", "recall_curve.parquet", "summary.csv"):
        assert (figure1_out / name).stat().st_size > 0, name
    table = pd.read_parquet(figure1_out / "recall_curve.parquet")
    assert set(table["run"]) == set(FIGURE1_SCHEDULES)
    assert sorted(table["fraction"].unique()) == list(FRACTIONS)
    assert sorted(table["depth"].unique()) == list(range(1, 65))
    # One matched budget: every run's final checkpoint spent it to within one update.
    final = table[table["fraction"] == 1.0].groupby("run")["flops"].first()
    budget = table["budget"].iloc[0]
    assert (final <= budget).all() and (final > 0.8 * budget).all()
    whole = table[table["attribute"] == "all"]
    assert whole["bits"].between(0, whole["ceiling_bits"].iloc[0] + 1e-9).all()


@pytest.mark.slow
def test_rerunning_figure1_skips_finished_runs(figure1_out, capsys):
    stamps = {p: p.stat().st_mtime_ns for p in (figure1_out / "runs").rglob("model.safetensors")}
    main(["figure1", "--preset", "quick", "--out", str(figure1_out), "--quiet"])
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps
    assert "figure:" in capsys.readouterr().out


@pytest.mark.slow
def test_the_notebook_runs_top_to_bottom_on_the_quick_output(figure1_out, monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    monkeypatch.setenv("BIOSRECALL_FIGURE1", str(figure1_out))
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(
        notebook, timeout=180, kernel_name="python3", resources={"metadata": {"path": str(NOTEBOOK.parent)}}
    )
    client.execute()
    errors = [
        o for cell in notebook.cells for o in cell.get("outputs", []) if o.get("output_type") == "error"
    ]
    assert not errors
