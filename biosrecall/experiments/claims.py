"""The claims engine: one claim type and one judge for every study's claims rows (bioS, serving,
capacity, LM), and the paper's Figure-1 statements as the first set of them.

    claims = judge_claims(curves)          # curves: one row per run, seed, fraction and depth (bits)
    write_claims(claims, "runs/figure1")   # claims.csv and claims.md
    judge_claims(table, [Claim(...), ...]) # any study: a table with a `seed` column, its own claims

A `Claim` is a metric computed on every seed separately (a paired difference where it compares two
runs, since the seeds share data), a 95% t interval over seeds (`biosrecall.stats`), a threshold with
its side, the reason for the threshold and, where the paper states one, the paper's own number. The
verdict of a one-sided claim is "holds" when the whole interval is on the claim's side of the
threshold, "does not hold" when the whole interval is on the other side, and "inconclusive" when it
straddles it or there is only one seed (no interval). A claim whose runs were not trained (no
`--fixed-sweep`, no `--update-matched`, a grid without the run) is "not measured"; so is one whose
`note` says why this sweep cannot judge it. Thresholds live beside each claim, each with its reason.

A claim of "no difference", "indistinguishable from zero" or "within 0.1%" is two-sided: its
threshold is a margin (low, high), stated with its reason. It holds when the whole interval lies
inside the margin, does not hold when it lies wholly outside, and is inconclusive otherwise. It is
never judged by whether the interval contains 0: that rule rewards running fewer seeds (a wide
interval holds 0) and punishes running many (a tiny, irrelevant effect excludes it).

A claim whose threshold is a share of the ceiling can only be tested where some schedule recalls
that much: when no run of the study (its mean over seeds, at its best depth, at the claim's budget
fraction) reaches it, the verdict is "not testable at this size: no schedule reaches 90% of the
ceiling" (`out_of_reach`) whatever the interval says, since more seeds cannot change it; a larger
size or budget can.

Each row also says how many seeds would decide it (`seeds_to_decide`, a planning estimate from its
mean and interval: `biosrecall.stats.seeds_to_decide`; for a margin, against the margin's edge
nearest the mean). When a rerun judges the claims over another number of seeds, the claims it
replaces are kept as `<stem>_at_<n>seeds.csv` and `<stem>.md` shows their verdicts beside the new
ones, so a study extended after a look says so. `claims_markdown` is the one writer of every claims
table, on `biosrecall.outputs.markdown_columns`, the writer of every study's Markdown table.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from biosrecall.atomic import atomic_write_bytes, atomic_write_text
from biosrecall.experiments.study import FIXED_FIRST, FIXED_K4, UNIFORM, UPDATE_MATCHED
from biosrecall.outputs import markdown_columns, write_table
from biosrecall.stats import SEEDS_CAP, interval_text, sd_from_interval, seed_interval, seeds_to_decide

HOLDS, FAILS, INCONCLUSIVE, NOT_MEASURED = "holds", "does not hold", "inconclusive", "not measured"
NOT_TESTABLE = "not testable at this size"  # the start of the verdict; the rest says what is out of reach
TRAINING_RANGE = (1, 16)  # the depths uniform and the fixed-first finish sample
BEYOND = (17, 64)
NEAR_K4 = (2, 8)  # "near the training depth": within a factor of two of K=4
SEEDS_TO_DECIDE = "seeds_to_decide"  # the last column of claims.csv
CLAIMS_STEM = "claims"  # the stem of figure1's claims files; the LM study's are lm_claims.*


def earlier_look_file(n: int | str, stem: str = CLAIMS_STEM) -> str:
    """`<stem>_at_<n>seeds.csv`: the claims as judged over n seeds, before the study was extended."""
    return f"{stem}_at_{n}seeds.csv"


@dataclass(frozen=True)
class Claim:
    key: str
    statement: str
    metric: str
    above: bool
    """One-sided: the claim says the metric is above the threshold (False: below). Unused by a margin."""
    threshold: float | tuple[float, float]
    """A number (one-sided), or a margin (low, high) the whole interval must lie in (two-sided)."""
    why: str
    """The reason for the threshold: how the paper's words were read."""
    measure: Callable[[pd.DataFrame], float]
    """One seed's rows -> the metric (NaN: cannot be computed)."""
    reach: tuple[float, float] | None = None
    """(budget fraction, share of the ceiling) the claim's regime needs some schedule to reach."""
    paper: str = ""
    """The paper's own number or words, shown beside the statement ("" where the study adds none)."""
    note: str = ""
    """Why this sweep cannot judge the claim ("" when it can): then it is not measured."""


def threshold_text(threshold: float | tuple[float, float], above: bool = True) -> str:
    """A threshold cell: "> 0.5" or "< 0.5" one-sided, "in [-0.1, 0.1]" for a margin."""
    if isinstance(threshold, tuple):
        return f"in [{threshold[0]:g}, {threshold[1]:g}]"
    return f"{'>' if above else '<'} {threshold:g}"


def _bits(rows: pd.DataFrame, name: str, fraction: float, depths: tuple[int, int]) -> pd.Series:
    """Bits per person of run `name` at `fraction`, indexed by depth, over the inclusive depth range."""
    part = rows[(rows["name"] == name) & np.isclose(rows["fraction"], fraction)]
    part = part[part["depth"].between(*depths)]
    return part.set_index("depth")["bits"].sort_index()


def _mean(rows, name, fraction, depths) -> float:
    values = _bits(rows, name, fraction, depths)
    return float(values.mean()) if len(values) else math.nan


def _ceiling(rows: pd.DataFrame) -> float:
    return float(rows["ceiling_bits"].iloc[0]) if len(rows) else math.nan


def _ratio(numerator: float, denominator: float) -> float:
    # Below a tenth of a bit a run has recalled nothing, and a ratio of two noise levels means nothing.
    return numerator / denominator if denominator > 0.1 else math.nan


def _collapse(rows: pd.DataFrame) -> float:
    at_k4 = _bits(rows, FIXED_K4, 0.45, (4, 4))
    return _ratio(_mean(rows, FIXED_K4, 0.45, BEYOND), float(at_k4.iloc[0]) if len(at_k4) else math.nan)


def _flatness_gap(rows: pd.DataFrame) -> float:
    spread = [_bits(rows, name, 0.45, (1, 64)).std(ddof=0) for name in (FIXED_K4, UNIFORM)]
    return float(spread[0] - spread[1]) / _ceiling(rows)


def _decline(rows: pd.DataFrame) -> float:
    inside, beyond = _mean(rows, UNIFORM, 1.0, TRAINING_RANGE), _mean(rows, UNIFORM, 1.0, BEYOND)
    return 1 - _ratio(beyond, inside)


def _own_depth_advantage(rows: pd.DataFrame) -> float:
    """Mean over the fixed-K models of (bits at their own K - mean bits at the other models' K)."""
    names = sorted({n for n in rows["name"] if n.startswith("fixed_k") and n[7:].isdigit()})
    depths = {name: int(name[7:]) for name in names}
    if len(names) < 2:
        return math.nan
    advantages = []
    for name, own in depths.items():
        curve = _bits(rows, name, 1.0, (1, 64))
        others = [curve.get(k, math.nan) for other, k in depths.items() if other != name]
        advantages.append(curve.get(own, math.nan) - float(np.mean(others)))
    return float(np.mean(advantages)) / _ceiling(rows)


CLAIMS = (
    Claim(
        "fixed_beats_uniform_near_k4_at_45",
        "At 45%, fixed K=4 recalls more than uniform near its training depth",
        "fixed K=4 minus uniform, mean bits over K=2..8, at 45% (paired by seed)",
        True,
        0.0,
        "the paper states a direction, not a size; the interval over seeds carries the uncertainty",
        lambda r: _mean(r, FIXED_K4, 0.45, NEAR_K4) - _mean(r, UNIFORM, 0.45, NEAR_K4),
    ),
    Claim(
        "fixed_collapses_beyond_training_at_45",
        "At 45%, fixed K=4 collapses beyond the training range",
        "fixed K=4 at 45%: mean bits over K=17..64 / bits at K=4",
        False,
        0.5,
        "'collapses' read as keeping less than half of its K=4 recall on average beyond K=16",
        _collapse,
    ),
    Claim(
        "uniform_flatter_than_fixed_at_45",
        "At 45%, uniform is flatter across serving depths than fixed K=4",
        "std of bits over K=1..64, fixed K=4 minus uniform, as a share of the ceiling, at 45%",
        True,
        0.0,
        "a direction; a uniform run that recalls nothing is trivially flat, so read it with row 1",
        _flatness_gap,
    ),
    Claim(
        "fixed_first_near_ceiling_at_100",
        "At 100%, fixed-first stays within 10% of the ceiling at every depth K=1..64",
        "fixed-first at 100%: worst bits over K=1..64 / ceiling",
        True,
        0.9,
        "the paper's 'within 10% of the ceiling', applied to the worst depth",
        lambda r: _bits(r, FIXED_FIRST, 1.0, (1, 64)).min() / _ceiling(r),
        reach=(1.0, 0.9),
    ),
    Claim(
        "uniform_broad_at_100",
        "At 100%, uniform has broad recall",
        "uniform at 100%: mean bits over K=1..16 / ceiling",
        True,
        0.5,
        "'broad recall' read as at least half the ceiling across the depths it trained on",
        lambda r: _mean(r, UNIFORM, 1.0, TRAINING_RANGE) / _ceiling(r),
        reach=(1.0, 0.5),
    ),
    Claim(
        "uniform_declines_beyond_16_at_100",
        "At 100%, uniform declines beyond K=16",
        "uniform at 100%: 1 - mean bits over K=17..64 / mean over K=1..16",
        True,
        0.1,
        "a drop under 10% is within the depth-to-depth ripple of these curves",
        _decline,
    ),
    Claim(
        "fixed_k_best_near_own_depth",
        "Each fixed-K model is best near its own training depth (Figure 5, needs --fixed-sweep)",
        "mean over fixed-K models of bits at own K minus mean at the other models' K, / ceiling, at 100%",
        True,
        0.0,
        "a direction: on average a model recalls more at its own depth than at its neighbours'",
        _own_depth_advantage,
    ),
    Claim(
        "varied_depth_costs_at_matched_updates",
        "Control: at 100%, fixed K=4 recalls more than update-matched uniform near K=4",
        "fixed K=4 minus update-matched uniform, mean bits over K=2..8, at 100% (needs --update-matched)",
        True,
        0.0,
        "separates the depth schedule from the step count: both ran the same number of updates",
        lambda r: _mean(r, FIXED_K4, 1.0, NEAR_K4) - _mean(r, UPDATE_MATCHED, 1.0, NEAR_K4),
    ),
    Claim(
        "fewer_updates_cost_uniform_at_100",
        "Control: at 100%, update-matched uniform recalls more than FLOP-matched uniform",
        "update-matched minus FLOP-matched uniform, mean bits over K=1..16, at 100% (needs --update-matched)",
        True,
        0.0,
        "a direction: how much of uniform's gap is its smaller number of optimizer steps",
        lambda r: _mean(r, UPDATE_MATCHED, 1.0, TRAINING_RANGE) - _mean(r, UNIFORM, 1.0, TRAINING_RANGE),
    ),
)


def verdict(low: float, high: float, threshold: float | tuple[float, float], above: bool = True) -> str:
    """holds / does not hold / inconclusive from an interval; no interval (one seed) is inconclusive.
    A margin (low, high) holds when the whole interval is inside it and fails when wholly outside."""
    if math.isnan(low) or math.isnan(high):
        return INCONCLUSIVE
    if isinstance(threshold, tuple):
        inside = threshold[0] <= low and high <= threshold[1]
        return HOLDS if inside else FAILS if high < threshold[0] or low > threshold[1] else INCONCLUSIVE
    if above:
        return HOLDS if low > threshold else FAILS if high <= threshold else INCONCLUSIVE
    return HOLDS if high < threshold else FAILS if low >= threshold else INCONCLUSIVE


def out_of_reach(claim: Claim, curves: pd.DataFrame) -> str | None:
    """The not-testable verdict when no schedule reaches the share of the ceiling the claim's regime
    needs (`Claim.reach`), else None. `curves`: whole-person recall, columns name, fraction, depth,
    bits, ceiling_bits, one row per seed or already the mean over seeds (both give the same means)."""
    if claim.reach is None:
        return None
    fraction, share = claim.reach
    rows = curves[np.isclose(curves["fraction"], fraction)]
    if rows.empty:
        return None
    best = float(rows.groupby(["name", "depth"])["bits"].mean().max())
    if best >= share * _ceiling(rows):
        return None
    return f"{NOT_TESTABLE}: no schedule reaches {share:.0%} of the ceiling"


def testable(verdict_text) -> bool:
    return not str(verdict_text).startswith(NOT_TESTABLE)


def judge_claims(table: pd.DataFrame, claims=CLAIMS) -> pd.DataFrame:
    """One row per claim, judged over the seeds of `table` (a `seed` column; each claim's `measure`
    reads one seed's rows). The Figure-1 claims read whole-person recall: columns name, seed,
    fraction, depth, bits, ceiling_bits (a run per name and seed). A `paper` column (before the
    measured ones) is there when some claim states the paper's number."""
    rows = []
    for claim in claims:
        values = [claim.measure(part) for _, part in table.groupby("seed", sort=True)]
        measured = [] if claim.note else [v for v in values if not math.isnan(v)]
        interval = seed_interval(measured)
        result = out_of_reach(claim, table) or verdict(
            interval.low, interval.high, claim.threshold, claim.above
        )
        rows.append(
            {
                "claim": claim.key,
                "statement": claim.statement,
                "metric": claim.metric,
                "threshold": threshold_text(claim.threshold, claim.above),
                "paper": claim.paper,
                "mean": interval.mean,
                "low": interval.low,
                "high": interval.high,
                "n_seeds": interval.n,
                "per_seed": ";".join(f"{v:.4g}" for v in values),
                "verdict": result if measured else NOT_MEASURED,
                "note": claim.note,
                "why_threshold": claim.why,
            }
        )
    judged = pd.DataFrame(rows)
    unused = [column for column in ("paper", "note") if not any(getattr(c, column) for c in claims)]
    return judged.drop(columns=unused)


def decide_text(mean: float, low: float, high: float, n_seeds: int, threshold, verdict_text: str = "") -> str:
    """The seeds-to-decide cell of a claims row: a count, ">1000" past the search, "never" when the
    mean sits on the threshold with some spread, "" without an interval (one seed, or not measured)
    or for a claim this size cannot test (no seed count can)."""
    if n_seeds < 2 or math.isnan(low) or math.isnan(high) or not testable(verdict_text):
        return ""
    value = _threshold_value(threshold, mean)
    if high == low:  # no spread: decided at any count, on the threshold too (`verdict` reads it as failing)
        return "2"
    if mean == value:
        return "never"
    needed = seeds_to_decide(mean, sd_from_interval(low, high, n_seeds), value)
    return f">{SEEDS_CAP}" if needed is None else str(needed)


def _threshold_value(threshold, mean: float) -> float:
    """The number of a threshold cell ("> 0.5"; a bare number is accepted too); of a margin
    ("in [-0.1, 0.1]"), the edge nearest `mean`, the one whose crossing decides the claim."""
    if isinstance(threshold, str) and threshold.startswith("in ["):
        low, high = (float(edge) for edge in threshold[4:-1].split(","))
        return low if abs(mean - low) < abs(mean - high) else high
    return float(threshold.split()[-1]) if isinstance(threshold, str) else float(threshold)


def with_seeds_to_decide(claims: pd.DataFrame) -> pd.DataFrame:
    """The claims with their `seeds_to_decide` column (text, so ">1000" and "" sit beside counts): in
    its place where the table has one, else last."""
    cells = [
        decide_text(row.mean, row.low, row.high, int(row.n_seeds), row.threshold, row.verdict)
        for row in claims.itertuples()
    ]
    return claims.assign(**{SEEDS_TO_DECIDE: cells})


def claims_markdown(
    claims: pd.DataFrame,
    earlier: list[tuple[int, pd.DataFrame]] = (),
    stem: str = CLAIMS_STEM,
    paper: bool = False,
) -> str:
    """The claims as a Markdown table, every study's (what the README's claims sections are made of).

    `earlier`: (seed count, claims) of each earlier look (`earlier_looks`); each adds a verdict column
    beside the current one, and a line above the table says the study was extended after it. `paper`:
    each statement shows the paper's number beside it, for the reader to compare (the LM study's)."""
    looks = [(n, dict(zip(table["claim"], table["verdict"], strict=True))) for n, table in earlier]
    columns = {
        "claim": "{statement} (paper: {paper})" if paper else "{statement}",
        "metric": "{metric}",
        "threshold": "{threshold}",
        "measured (95% interval, seeds)": _measured,
        **{
            f"verdict at {n} seeds": lambda row, v=verdicts: v.get(row.get("claim"), "-")
            for n, verdicts in looks
        },
        "verdict": "**{verdict}**",
        "seeds to decide (planning estimate)": lambda row: row[SEEDS_TO_DECIDE] or "-",
    }
    return _look_note([n for n, _ in looks], stem) + markdown_columns(with_seeds_to_decide(claims), columns)


def _look_note(counts: list[int], stem: str) -> str:
    """The line above an extended study's table: when it was looked at, and where those claims are."""
    if not counts:
        return ""
    files = ", ".join(earlier_look_file(n, stem) for n in counts)
    seen = " and ".join(map(str, counts))
    looks, its = ("An earlier look", "its") if len(counts) == 1 else ("Earlier looks", "their")
    return (
        f"*{looks} judged these claims at {seen} seeds ({files}): {its} verdicts are shown before "
        "the current one.*\n\n"
    )


def _measured(row: dict) -> str:
    if row["n_seeds"] == 0:
        note = row.get("note", "")
        return f"- ({note})" if isinstance(note, str) and note else "-"
    measured = interval_text(row["mean"], row["low"], row["high"], "{:.3g}")
    if math.isnan(row["low"]):
        return f"{measured} (one seed, no interval)"
    return f"{measured}, n={row['n_seeds']}"


def read_claims(path: str | Path) -> pd.DataFrame:
    """A claims.csv as written: floats read back exactly, text cells kept as text."""
    text = {"per_seed": str, SEEDS_TO_DECIDE: str, "threshold": str, "verdict": str}
    return pd.read_csv(path, engine="python", dtype=text)  # Python's float(): exact on every pandas


def seed_count(claims: pd.DataFrame) -> int:
    """The seed count claims were judged over: the most any row had (a row not measured has 0)."""
    return int(claims["n_seeds"].max()) if len(claims) else 0


def keep_earlier_look(out_dir: Path, claims: pd.DataFrame, stem: str = CLAIMS_STEM) -> Path | None:
    """Before `claims` replace an OUT/<stem>.csv judged over another seed count, keep that file as
    <stem>_at_<n>seeds.csv (an existing one is the first look at n seeds and stays). Returns it.

    A look at one seed is not kept: every verdict there is inconclusive, so nothing could have
    stopped or steered the study."""
    current = out_dir / f"{stem}.csv"
    if not current.is_file():
        return None
    data = current.read_bytes()
    try:
        n = seed_count(read_claims(current))
    except (ValueError, KeyError, pd.errors.ParserError):
        return None  # not a claims table figure1 wrote: there is no look to keep
    target = out_dir / earlier_look_file(n, stem)
    if n < 2 or n == seed_count(claims) or target.exists():
        return None
    atomic_write_bytes(target, data)
    return target


def earlier_looks(out_dir: Path, current: int, stem: str = CLAIMS_STEM) -> list[tuple[int, pd.DataFrame]]:
    """(seed count, claims) of every <stem>_at_<n>seeds.csv in `out_dir` but the current count, by count."""
    looks = []
    for path in out_dir.glob(earlier_look_file("*", stem)):
        count = path.name.removeprefix(f"{stem}_at_").removesuffix("seeds.csv")
        if count.isdigit() and int(count) != current:
            looks.append((int(count), read_claims(path)))
    return sorted(looks, key=lambda look: look[0])


def write_claims(
    claims: pd.DataFrame, out_dir: str | Path, stem: str = CLAIMS_STEM, paper: bool = False
) -> list[Path]:
    """OUT/<stem>.csv (and .parquet) and OUT/<stem>.md, with `seeds_to_decide`; claims judged earlier
    over another seed count are kept first (`keep_earlier_look`) and shown in the .md (`paper`: with
    the paper's number beside each statement, `claims_markdown`)."""
    out_dir = Path(out_dir)
    kept = keep_earlier_look(out_dir, claims, stem)
    written = write_table(with_seeds_to_decide(claims), out_dir / stem)
    earlier = earlier_looks(out_dir, seed_count(claims), stem) if "claim" in claims else []
    markdown = out_dir / f"{stem}.md"
    atomic_write_text(markdown, claims_markdown(claims, earlier, stem, paper))
    return [*written, markdown, *([kept] if kept else [])]
