"""Scoring checkpoints in several processes (`biosrecall.eval.parallel`) gives the numbers of scoring
them one at a time here, which is what lets a study evaluate `--workers` checkpoints at once.

    pytest -q tests/test_parallel_scoring.py
"""

from __future__ import annotations

import os

import pandas as pd
import pytest
from test_figure1_promises import TINY, figure1_args, run_cli

from biosrecall.errors import BiosrecallError
from biosrecall.eval.curves import recall_curves
from biosrecall.eval.exits import parse_exits
from biosrecall.eval.parallel import map_in_processes
from biosrecall.eval.serving import SERVING_CRITERIA, exit_frontier
from biosrecall.experiments import figure1


def where_and_threads(item: int) -> tuple[int, int, int]:
    import torch

    return item, os.getpid(), torch.get_num_threads()


def refuse(item: int) -> int:
    if item == 2:
        raise BiosrecallError("item 2 is bad")
    return item


def test_items_run_in_other_processes_on_the_threads_asked_and_come_back_in_order():
    results = map_in_processes(where_and_threads, list(range(5)), workers=2, threads=1)
    assert [item for item, _, _ in results] == list(range(5))
    assert {pid for _, pid, _ in results}.isdisjoint({os.getpid()})
    assert {threads for _, _, threads in results} == {1}
    assert map_in_processes(where_and_threads, [7], workers=2)[0][1] == os.getpid(), "one item: here"


def test_a_workers_error_is_raised_here():
    with pytest.raises(BiosrecallError, match="item 2 is bad"):
        map_in_processes(refuse, list(range(4)), workers=2)


@pytest.fixture(scope="module")
def study_runs(tmp_path_factory):
    """The run folders of a finished one-seed tiny study."""
    out = tmp_path_factory.mktemp("parallel") / "study"
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(figure1.FIGURE1_PRESETS, "tiny", TINY)
        assert run_cli(figure1_args(out, "--workers", "2", "--threads", "1")) == 0
    return sorted(path for path in (out / figure1.RUNS / "seed0").iterdir() if path.is_dir())


def test_recall_scored_in_processes_equals_recall_scored_here(study_runs):
    options = {"max_depth": 6, "device": "cpu", "refresh": True, "progress": False}
    here = recall_curves(study_runs, **options)
    elsewhere = recall_curves(study_runs, **options, workers=2, threads=1)
    pd.testing.assert_frame_equal(here, elsewhere)
    assert len(set(here["run"])) == len(study_runs) and here["exact"].any()


def test_serving_scored_in_processes_equals_serving_scored_here(study_runs):
    criteria = parse_exits(SERVING_CRITERIA)
    options = {"max_depth": 6, "device": "cpu", "progress": False}
    here = exit_frontier(study_runs, criteria, **options)
    for cache in (path for run in study_runs for path in run.rglob("exits.parquet")):
        cache.unlink()  # scored afresh in the workers, not read back
    elsewhere = exit_frontier(study_runs, criteria, **options, workers=2, threads=1)
    pd.testing.assert_frame_equal(here, elsewhere)


def test_a_served_checkpoint_is_scored_once_for_its_recall_and_its_frontier(study_runs, monkeypatch):
    """`figure1` serves the final checkpoints it scores: one all-depth pass yields both tables, the
    cheaper flags-only pass scores the rest, and a second call reads both caches."""
    from biosrecall.eval import scoring
    from biosrecall.eval.serving import score_runs

    for cache in (
        p for run in study_runs for name in ("recall", "exits") for p in run.rglob(f"{name}.parquet")
    ):
        cache.unlink()
    passes = []
    for name in ("answer_stats_by_depth", "exact_by_depth"):
        real = getattr(scoring, name)
        monkeypatch.setattr(
            scoring, name, lambda *a, _real=real, _name=name, **k: passes.append(_name) or _real(*a, **k)
        )
    criteria = parse_exits(SERVING_CRITERIA)
    options = {"max_depth": 6, "device": "cpu", "progress": False}
    scores = score_runs(study_runs, "fractions", criteria, served=study_runs, **options)
    assert sorted(passes) == ["answer_stats_by_depth"] * len(study_runs) + ["exact_by_depth"] * len(
        study_runs
    )
    assert set(scores.frontier["checkpoint"]) == {"1.0"} and set(scores.recall["checkpoint"]) == {
        "0.45",
        "1.0",
    }
    passes.clear()
    again = score_runs(study_runs, "fractions", criteria, served=study_runs, **options)
    assert passes == []  # both tables of every checkpoint come from its cache
    pd.testing.assert_frame_equal(again.recall, scores.recall)
    pd.testing.assert_frame_equal(again.frontier, scores.frontier)
    fresh = recall_curves(study_runs, **options, refresh=True)  # the flags-only pass agrees
    pd.testing.assert_frame_equal(fresh, scores.recall)
