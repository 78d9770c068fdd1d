"""`biosrecall.experiments.engine.StudyTimer`: one record per call of a study, phases that add up, and
the table of parts with each phase's share.

    pytest -q tests/test_study_timings.py
"""

from __future__ import annotations

import json

import pytest

from biosrecall.errors import BiosrecallError
from biosrecall.experiments.engine import PHASES, StudyTimer, read_timings, timings_markdown


def test_phases_add_up_and_each_call_appends_a_part(tmp_path, monkeypatch):
    clock = iter([0.0, 1.0, 61.0, 70.0, 100.0, 130.0, 190.0, 200.0])  # monotonic readings, in order
    monkeypatch.setattr("biosrecall.experiments.engine.time.monotonic", lambda: next(clock))
    timer = StudyTimer(seeds=[0, 1], workers=2, threads=1)  # starts at 0
    with timer.phase("training"):  # 1 -> 61
        pass
    with timer.phase("evaluation"):  # 70 -> 100
        pass
    with timer.phase("training"):  # 130 -> 190: the second wave adds to the first
        pass
    timer.save(tmp_path)  # total read at 200
    (record,) = read_timings(tmp_path)
    assert (record["training"], record["evaluation"], record["serving"], record["total"]) == (120, 30, 0, 200)
    assert record["other"] == 50 and record["seeds"] == [0, 1] and record["workers"] == 2
    second = {**record, "training": 600, "total": 600, "evaluation": 0, "other": 0}
    (tmp_path / "timings.jsonl").write_text(json.dumps(record) + "\n" + json.dumps(second) + "\n")
    table = timings_markdown(read_timings(tmp_path)).splitlines()
    assert len(table) == 2 + 2 + 2 + 1 and table[-1].startswith("| all |")  # intro, head, 2 parts, sum
    assert "12.0 (90%)" in table[-1] and "13.3 |" in table[-1], "training: 720 of 800 s"
    assert all(name in table[2] for name in PHASES)


def test_a_damaged_record_is_one_error(tmp_path):
    (tmp_path / "timings.jsonl").write_text('{"total": 1, "started": "x"}\n[1, 2]\n')
    with pytest.raises(BiosrecallError, match="line 2 of .* is not a timings record"):
        read_timings(tmp_path)
