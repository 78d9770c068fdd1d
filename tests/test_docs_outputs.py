"""What `biosrecall figure1` prints says what it is: every summary row names its run and schedule, a
one-seed claims table says why its verdicts cannot decide and how to add seeds, and the output ends
with the paths of the claims, the summary and the figure.

    pytest -q tests/test_docs_outputs.py
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from biosrecall.cli.figure1 import _more_seeds_command, _print
from biosrecall.experiments.engine import StudyResult
from biosrecall.experiments.study import StudyOptions

SCHEDULES = {"fixed_k4": "fixed:4", "uniform_1_16": "uniform:1-16"}


def result(out_dir: Path, n_seeds: int) -> StudyResult:
    summary = pd.DataFrame(
        [
            {"group": run, "schedule": schedule, "fraction": fraction, "K=4": 1.5, "n_seeds": n_seeds}
            for run, schedule in SCHEDULES.items()
            for fraction in (0.45, 1.0)
        ]
    )
    claims = pd.DataFrame(
        [{"statement": "a claim", "metric": "m", "threshold": "> 0", "mean": 1.0, "low": float("nan"),
          "high": float("nan"), "n_seeds": n_seeds, "verdict": "inconclusive"}]
    )  # fmt: skip
    figures = [out_dir / "figure1.png", out_dir / "figure1.pdf"]
    return StudyResult(out_dir, None, {"summary": summary}, claims, figures)


@pytest.mark.parametrize("n_seeds", [1, 3])
def test_figure1_prints_what_each_table_is(tmp_path, capsys, n_seeds):
    out = tmp_path / "demo"
    _print(result(out, n_seeds), _more_seeds_command(out, "quick", StudyOptions(seeds=(0,))))
    printed = capsys.readouterr().out
    summary = printed.split("claims,")[0].splitlines()[2:]  # below its title and column header
    assert len(summary) == 4
    for row in summary:
        assert any(run in row and schedule in row for run, schedule in SCHEDULES.items()), row
    one_seed_note = f"biosrecall figure1 --out {out} --preset quick --seeds 0,1,2"
    assert ("one seed cannot decide" in printed and one_seed_note in printed) == (n_seeds == 1)
    assert printed.rstrip().splitlines()[-4:] == [
        f"claims:  {out / 'claims.md'}",
        f"summary: {out / 'summary.md'}",
        f"figure:  {out / 'figure1.png'}",
        f"figure:  {out / 'figure1.pdf'}",
    ]


def test_the_add_seeds_command_keeps_the_study_options(tmp_path):
    study = StudyOptions(seeds=(0, 1), update_matched=True, lr_grid=(3e-3, 1e-2), fixed_sweep=(8,),
                         budgets=(0.5, 1.0), budget_mode="independent", model_overrides={"n_block": 2})  # fmt: skip
    assert _more_seeds_command(tmp_path, "default", study) == (
        f"biosrecall figure1 --out {tmp_path} --preset default --seeds 0,1,2,3 --update-matched "
        "--lr-grid 0.003,0.01 --fixed-sweep 8 --budgets 0.5,1 --budget-mode independent "
        "--model-override n_block=2"
    )
