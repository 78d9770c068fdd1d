"""Seeds to decide: the seed count each claim needs, `figure1 --plan`, and studies extended after a look.

- `seeds_to_decide` on crafted per-seed values whose answer is worked out by hand, and the same answer
  read back from a claims row's interval (what `--plan` does with an archived claims.csv);
- `figure1 --plan` on the archived default study and on a finished tiny study: each claim's verdict,
  seed count and estimate, nothing written, no torch; one `error:` line for a folder that is not a
  figure1 output;
- a study extended by seeds keeps its earlier claims (claims_at_<n>seeds.csv) and shows the verdicts
  at both counts; a seed list repeating seeds held under other settings is refused naming them.

    pytest -q tests/test_seeds_to_decide.py
"""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from test_claims import paper_like, table
from test_figure1_promises import TINY, figure1_args, run_cli, snapshot

from biosrecall.experiments import figure1
from biosrecall.experiments.claims import (
    SEEDS_TO_DECIDE,
    claims_markdown,
    decide_text,
    judge_claims,
    read_claims,
    write_claims,
)
from biosrecall.experiments.claims_plan import refresh_claims
from biosrecall.stats import SEEDS_CAP, sd_from_interval, seed_interval, seeds_to_decide

ROOT = Path(__file__).resolve().parent.parent
ARCHIVED = ROOT / "docs" / "results" / "study-default"
# The archived default study's estimates, worked from its claims.csv (mean, low, high, n_seeds).
DEFAULT_PLAN = {
    "fixed_beats_uniform_near_k4_at_45": "3",
    "fixed_collapses_beyond_training_at_45": "3",
    "uniform_flatter_than_fixed_at_45": "4",
    "fixed_first_near_ceiling_at_100": "2",
    "uniform_broad_at_100": "4",
    "uniform_declines_beyond_16_at_100": "2",
    "fixed_k_best_near_own_depth": "9",
    "varied_depth_costs_at_matched_updates": "3",
    "fewer_updates_cost_uniform_at_100": "5",
    "serving_pays_fixed_k4": "5",
    "oracle_headroom_fixed_k4": "4",
    "serving_pays_fixed_first_k4_80": "3",
    "oracle_headroom_fixed_first_k4_80": "5",
    "serving_pays_uniform_1_16": "3",
    "oracle_headroom_uniform_1_16": "3",
    "fixed_first_reaches_target_with_less_compute": "",
}


class TestSeedsToDecide:
    """The smallest n >= 2 with |mean - threshold| > t(0.975, n-1) * sd / sqrt(n)."""

    @pytest.mark.parametrize(
        ("values", "threshold", "expected"),
        [
            # mean 2, sd 1: t*sd/sqrt(n) is 8.98 at n=2, 2.48 at n=3, 1.59 at n=4 (first below 2).
            pytest.param([1.0, 2.0, 3.0], 0.0, 4, id="needs-one-more"),
            # mean 11, sd 1: already 8.98 < 11 at n=2, under the 3 seeds it has.
            pytest.param([10.0, 11.0, 12.0], 0.0, 2, id="decided-already"),
            # mean 1 above 0, sd 2: 2.120*2/sqrt(17) = 1.028 > 1, 2.110*2/sqrt(18) = 0.995 < 1.
            pytest.param([-1.0, 1.0, 3.0], 0.0, 18, id="needs-18"),
            # The same gap below a threshold: the side does not matter, only the distance.
            pytest.param([-3.0, -1.0, 1.0], 0.0, 18, id="below"),
            # On the threshold: no seed count separates them.
            pytest.param([-1.0, 0.0, 1.0], 0.0, None, id="on-threshold"),
            # A gap of 0.1 against an sd of 100 needs about 4 million seeds.
            pytest.param([-100.0, 0.3, 100.0], 0.0, None, id="beyond-the-cap"),
        ],
    )
    def test_known_answers(self, values, threshold, expected):
        interval = seed_interval(values)
        sd = float(pd.Series(values).std(ddof=1))
        assert seeds_to_decide(interval.mean, sd, threshold) == expected
        # Read back from the interval, as from a claims.csv row: the same sd, the same answer.
        assert sd_from_interval(interval.low, interval.high, interval.n) == pytest.approx(sd)
        cell = decide_text(interval.mean, interval.low, interval.high, interval.n, f"> {threshold:g}")
        never = "never" if interval.mean == threshold else f">{SEEDS_CAP}"
        assert cell == (never if expected is None else str(expected))

    def test_every_larger_count_decides_too(self):
        needed = seeds_to_decide(1.0, 2.0, 0.0)
        for n in (needed, needed + 1, 50, SEEDS_CAP):
            assert seed_interval_excludes(1.0, 2.0, 0.0, n)
        assert not seed_interval_excludes(1.0, 2.0, 0.0, needed - 1)

    @pytest.mark.parametrize(
        ("low", "high", "n", "threshold", "cell"),
        [
            pytest.param(float("nan"), float("nan"), 1, "> 0", "", id="one-seed"),
            pytest.param(float("nan"), float("nan"), 0, "> 0", "", id="not-measured"),
            pytest.param(0.0, 0.0, 3, "> 0", "2", id="no-spread-on-threshold"),  # verdict: does not hold
            # sd 0.5*sqrt(3)/4.303 = 0.201: 1.81 > 1 at n=2, 0.5 < 1 at n=3.
            pytest.param(0.5, 1.5, 3, 0.0, "3", id="bare-number-threshold"),
        ],
    )
    def test_cells_of_rows(self, low, high, n, threshold, cell):
        mean = 0.0 if high == 0 else 1.0
        assert decide_text(mean, low, high, n, threshold) == cell


def seed_interval_excludes(mean: float, sd: float, threshold: float, n: int) -> bool:
    """Whether n seeds with this mean and sd give a 95% interval that excludes `threshold`."""
    from biosrecall.stats import t_critical

    half = t_critical(n - 1) * sd / n**0.5
    return not (mean - half <= threshold <= mean + half)


class TestClaimsColumn:
    def test_the_column_is_appended_and_the_other_columns_keep_their_bytes(self, tmp_path):
        judged = judge_claims(table({s: paper_like(s, 0.3 * s) for s in range(3)}))
        write_claims(judged, tmp_path)
        before = io.StringIO()
        judged.to_csv(before, index=False)  # what claims.csv held before the column existed
        written = (tmp_path / "claims.csv").read_text().splitlines()
        assert written[0] == before.getvalue().splitlines()[0] + f",{SEEDS_TO_DECIDE}"
        for old, new in zip(before.getvalue().splitlines()[1:], written[1:], strict=True):
            assert new.startswith(old + ",")
        column = read_claims(tmp_path / "claims.csv")[SEEDS_TO_DECIDE].fillna("")
        assert column.str.fullmatch(r"\d+|>1000|never|").all()
        assert "seeds to decide (planning estimate)" in (tmp_path / "claims.md").read_text()

    def test_refreshing_the_archive_changes_nothing_more(self, tmp_path):
        """The archived claims were regenerated from their own claims.csv: doing it again is a no-op."""
        study = tmp_path / "study"
        shutil.copytree(ARCHIVED, study)
        refresh_claims(study)
        for name in ("claims.csv", "claims.md"):
            assert (study / name).read_bytes() == (ARCHIVED / name).read_bytes(), name
        assert (study / "claims.parquet").is_file() == (ARCHIVED / "claims.parquet").is_file()  # nothing new


def plan_rows(printed: str) -> dict[str, list[str]]:
    """The --plan table's rows: claim key -> [verdict words..., n_seeds, estimate]."""
    rows = {}
    for line in printed.splitlines():
        words = line.split()
        if words and words[0] in DEFAULT_PLAN:
            rows[words[0]] = words[1:]
    return rows


class TestPlan:
    def test_plan_of_the_archived_default_study(self, tmp_path, capsys):
        study = tmp_path / "study-default"
        shutil.copytree(ARCHIVED, study)
        before = snapshot(study)
        assert run_cli(["figure1", "--plan", "--out", str(study)]) == 0
        printed = capsys.readouterr().out
        assert snapshot(study) == before  # --plan writes nothing
        assert "planning" in printed and "estimate" in printed
        claims = read_claims(study / "claims.csv").set_index("claim")
        assert claims[SEEDS_TO_DECIDE].fillna("").to_dict() == DEFAULT_PLAN  # the archive has the column
        rows = plan_rows(printed)
        assert set(rows) == set(DEFAULT_PLAN)
        for key, estimate in DEFAULT_PLAN.items():
            n, verdict = str(claims.loc[key, "n_seeds"]), claims.loc[key, "verdict"]
            assert rows[key] == [*verdict.split(), n, *([estimate] if estimate else [])]
        # The largest estimate of the inconclusive rows, as the command that runs it.
        assert "--seeds 0,1,2,3,4,5,6,7,8 --update-matched --lr-grid 0.003,0.01 --fixed-sweep 8" in printed

    def test_plan_loads_no_torch(self):
        probe = (
            "import sys\nfrom biosrecall.cli import main\n"
            f"try:\n    main(['figure1', '--plan', '--out', {str(ARCHIVED)!r}])\n"
            "except SystemExit as exc:\n    assert not exc.code, exc.code\n"
            "print('torch' in sys.modules)"
        )
        done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
        assert done.stdout.strip().splitlines()[-1] == "False"

    @pytest.mark.parametrize(
        ("make", "named"),
        [
            pytest.param(
                lambda d: (d / "notes.txt").write_text("x"), "has no figure1.json", id="other-folder"
            ),
            pytest.param(lambda d: None, "no such folder", id="missing"),
            pytest.param(
                lambda d: (d / "figure1.json").write_text('{"preset": "quick", "train_config": {"seed": 0}}'),
                "has no claims.csv yet",
                id="unfinished",
            ),
            pytest.param(lambda d: (d / "figure1.json").write_text("{"), "is corrupt", id="corrupt-record"),
        ],
    )
    def test_plan_of_a_folder_that_is_not_a_figure1_output(self, tmp_path, capsys, make, named):
        folder = tmp_path / "folder"
        if named != "no such folder":
            folder.mkdir()
            make(folder)
        before = snapshot(tmp_path)
        assert run_cli(["figure1", "--plan", "--out", str(folder)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("error: ") and named in err
        assert snapshot(tmp_path) == before


def looked(seeds: int) -> pd.DataFrame:
    return judge_claims(table({s: paper_like(s, 0.5 * s) for s in range(seeds)}))


class TestExtendedAfterALook:
    def test_the_earlier_claims_are_kept_and_both_verdicts_shown(self, tmp_path):
        write_claims(looked(3), tmp_path)
        first = (tmp_path / "claims.csv").read_bytes()
        write_claims(looked(6), tmp_path)
        assert (tmp_path / "claims_at_3seeds.csv").read_bytes() == first
        markdown = (tmp_path / "claims.md").read_text()
        assert markdown.startswith("*An earlier look judged these claims at 3 seeds (claims_at_3seeds.csv)")
        header = markdown.splitlines()[2]
        assert "| verdict at 3 seeds | verdict |" in header
        write_claims(looked(6), tmp_path)  # a rerun at the same count: no new look
        assert sorted(p.name for p in tmp_path.glob("claims_at_*")) == ["claims_at_3seeds.csv"]
        assert (tmp_path / "claims.md").read_text() == markdown

    def test_every_earlier_look_has_its_column(self, tmp_path):
        for seeds in (3, 6, 10):
            write_claims(looked(seeds), tmp_path)
        lines = (tmp_path / "claims.md").read_text().splitlines()
        assert lines[0].startswith("*Earlier looks judged these claims at 3 and 6 seeds")
        assert "| verdict at 3 seeds | verdict at 6 seeds | verdict |" in lines[2]

    def test_one_seed_is_not_a_look(self, tmp_path):
        write_claims(looked(1), tmp_path)
        write_claims(looked(3), tmp_path)
        assert not list(tmp_path.glob("claims_at_*"))
        assert (tmp_path / "claims.md").read_text() == claims_markdown(looked(3))


@pytest.fixture(scope="module")
def extended_output(tmp_path_factory):
    """A tiny figure1 output run at seeds 0,1 and then extended to 0,1,2."""
    out = tmp_path_factory.mktemp("extended") / "out"
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(figure1.FIGURE1_PRESETS, "tiny", TINY)
        assert run_cli(figure1_args(out, "--seeds", "0,1")) == 0
        (out / "claims_before.csv").write_bytes((out / "claims.csv").read_bytes())
        assert run_cli(figure1_args(out, "--seeds", "0,1,2")) == 0
    return out


@pytest.fixture
def tiny_preset(monkeypatch):
    monkeypatch.setitem(figure1.FIGURE1_PRESETS, "tiny", TINY)


class TestExtendedTinyStudy:
    def test_extending_by_seeds_reports_the_verdicts_at_both_counts(self, extended_output, capsys):
        out = extended_output
        assert (out / "claims_at_2seeds.csv").read_bytes() == (out / "claims_before.csv").read_bytes()
        earlier, now = read_claims(out / "claims_at_2seeds.csv"), read_claims(out / "claims.csv")
        assert earlier["n_seeds"].max() == 2 and now["n_seeds"].max() == 3
        lines = (out / "claims.md").read_text().splitlines()
        assert lines[0].startswith("*An earlier look judged these claims at 2 seeds")
        assert "| verdict at 2 seeds | verdict | seeds to decide (planning estimate) |" in lines[2]
        for row, before, after in zip(lines[4:], earlier["verdict"], now["verdict"], strict=True):
            assert f"| {before} | **{after}** |" in row
        assert run_cli(["figure1", "--plan", "--out", str(out)]) == 0
        printed = capsys.readouterr().out
        assert "judged over 3 seeds" in printed and all(key in printed for key in now["claim"])

    def test_repeated_seeds_under_other_settings_are_refused(
        self, extended_output, tiny_preset, capsys, tmp_path
    ):
        out = tmp_path / "out"
        shutil.copytree(extended_output, out)
        before = snapshot(out)
        assert run_cli(figure1_args(out, "--seeds", "1,2,3", "--budget", "6e9")) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("error: ")
        assert "budget was fixed:4:12, now 6000000000.0" in err and "--overwrite to replace it" in err
        assert snapshot(out) == before
        assert json.loads((out / figure1.RECORD).read_text())["options"]["study"]["seeds"] == [0, 1, 2]
