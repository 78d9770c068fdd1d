"""Planning seeds from a finished Figure-1 output: each claim's verdict, seed count and seeds to decide.

    print(plan_text("runs/study"))     # what `biosrecall figure1 --plan --out runs/study` prints
    refresh_claims("docs/results/study-default")   # rewrite claims.csv/.md from the folder's claims.csv

Both read only the output's figure1.json and claims.csv, so they train nothing and load no torch, and
they work on an archived study that keeps nothing else. `seeds_to_decide` is recomputed from each
row's mean and 95% interval (`biosrecall.stats.sd_from_interval`), so an output written before that
column existed is planned the same way. A folder that is not a finished figure1 output is refused with
one `BiosrecallError` line, before anything is written.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from biosrecall.atomic import atomic_write_path, atomic_write_text
from biosrecall.errors import BiosrecallError
from biosrecall.experiments.claims import (
    CLAIMS,
    INCONCLUSIVE,
    NOT_MEASURED,
    SEEDS_TO_DECIDE,
    claims_markdown,
    earlier_looks,
    out_of_reach,
    read_claims,
    seed_count,
    testable,
    verdict,
    with_seeds_to_decide,
)
from biosrecall.experiments.study import MAX_SEEDS, RECORD, StudySeeds, figure1_command, upgrade
from biosrecall.files import read_json_object
from biosrecall.records import parse_record

NEEDED = ("claim", "threshold", "mean", "low", "high", "n_seeds", "verdict")


@dataclass(kw_only=True)
class PlannedOptions:
    """The options of figure1.json that planning seeds reads (its other keys are kept as written)."""

    preset: str
    """The preset the study ran (`biosrecall.experiments.figure1.FIGURE1_PRESETS`)."""
    study: StudySeeds
    """Its `StudyOptions`: the seeds, and the controls the command names."""
    budget: float | None = None
    """The `--budget` given, if one was."""


@dataclass(kw_only=True)
class PlannedRecord:
    """The part of figure1.json (the engine's record, or release 0.2.0's read as it) planning reads."""

    options: PlannedOptions
    """The options the output was made with."""


def read_output(out_dir: str | Path) -> tuple[dict, pd.DataFrame]:
    """(figure1.json's options, claims.csv) of a finished figure1 output; BiosrecallError for any other
    folder."""
    out_dir = Path(out_dir)
    if not (out_dir / RECORD).exists():
        why = f"it has no {RECORD}" if out_dir.is_dir() else "it is not a folder"
        why = why if out_dir.exists() else "no such folder"
        raise BiosrecallError(f"{out_dir} is not a figure1 output: {why}")
    where = f"figure1 record {out_dir / RECORD} is corrupt"
    record = upgrade(read_json_object(out_dir / RECORD, "figure1 record"), where)
    parse_record(record, PlannedRecord, where)
    claims_path = out_dir / "claims.csv"
    if not claims_path.is_file():
        raise BiosrecallError(
            f"{out_dir} has no claims.csv yet: rerun the command that made it to finish the study"
        )
    try:
        claims = read_claims(claims_path)
    except (ValueError, pd.errors.ParserError) as exc:
        raise BiosrecallError(f"{claims_path} is not a claims table: {exc}") from None
    missing = [column for column in NEEDED if column not in claims]
    if missing:
        raise BiosrecallError(f"{claims_path} is not a claims table: it has no {', '.join(missing)}")
    return record["options"], claims


def plan_text(out_dir: str | Path) -> str:
    """What `figure1 --plan` prints: claim, verdict, n_seeds and seeds_to_decide of each row (the
    estimate recomputed), then the seed count the undecided claims need and the command that trains
    that many (the finished runs are kept)."""
    options, claims = read_output(out_dir)
    table = with_seeds_to_decide(claims)[["claim", "verdict", "n_seeds", SEEDS_TO_DECIDE]]
    table = table.rename(columns={SEEDS_TO_DECIDE: f"{SEEDS_TO_DECIDE} (planning estimate)"})
    lines = [
        f"claims of {out_dir}, judged over {seed_count(claims)} seeds; seeds_to_decide is a planning",
        "estimate: the seed count whose 95% interval would exclude the threshold if the observed mean and",
        "per-seed sd held (docs/concepts/seeds-and-verdicts.md).",
        _text_table(table),
        _next_step(options, claims, table.iloc[:, -1], out_dir),
    ]
    return "\n".join(lines)


def _text_table(table: pd.DataFrame) -> str:
    """Columns padded to their widest cell, left-aligned: claim keys read as a list."""
    rows = [list(map(str, table.columns)), *([str(v) for v in row] for row in table.itertuples(index=False))]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows)


def _next_step(options: dict, claims: pd.DataFrame, estimates: pd.Series, out_dir) -> str:
    """The line after the table: how many seeds the undecided claims need, and how to run them."""
    undecided = estimates[claims["verdict"].eq(INCONCLUSIVE).to_numpy()]
    counts = [int(value) for value in undecided if str(value).isdigit()]
    if seed_count(claims) < 2:
        return "one seed has no interval, so no estimate: rerun with at least two seeds, then plan again."
    if not len(undecided):
        return "no measured claim is inconclusive: more seeds are not needed to decide them."
    if not counts:
        return "no inconclusive claim is decided within the search by this estimate."
    needed = max(counts)
    if needed > MAX_SEEDS:
        return (
            f"the inconclusive claims need up to {needed} seeds by this estimate; --seeds takes {MAX_SEEDS}."
        )
    seeds = list(options["study"]["seeds"])
    seeds += range(max(seeds) + 1, max(seeds) + 1 + needed - len(seeds))
    command = figure1_command(
        options["preset"], {**options["study"], "seeds": seeds}, out_dir, options.get("budget")
    )
    return (
        f"the inconclusive claims need up to {needed} seeds by this estimate; fix the count before "
        f"looking again, and run it with:\n  {command}"
    )


CURVES_OVER_SEEDS = ("recall_curve_seeds.csv", "fixed_sweep_seeds.csv")
"""The archived curves over seeds that say whether a claim's regime is within reach."""


def reach_verdicts(out_dir: Path, claims: pd.DataFrame) -> pd.DataFrame:
    """The claims with each one this size cannot test read as such (`claims.out_of_reach`), judged
    from the output's curves over seeds; a verdict the rule no longer applies to is read back from
    the row's interval. Without those curves the claims are returned as they are."""
    parts = [pd.read_csv(out_dir / name) for name in CURVES_OVER_SEEDS if (out_dir / name).is_file()]
    if not parts:
        return claims
    curves = pd.concat(parts, ignore_index=True)
    curves = curves[curves["attribute"] == "all"]
    rules = {claim.key: claim for claim in CLAIMS if claim.reach is not None}
    verdicts = []
    for row in claims.itertuples():
        judged = row.verdict
        if row.claim in rules and row.verdict != NOT_MEASURED:
            claim = rules[row.claim]
            if not testable(judged):
                judged = verdict(row.low, row.high, claim.threshold, claim.above)
            judged = out_of_reach(claim, curves) or judged
        verdicts.append(judged)
    return claims.assign(verdict=verdicts)


def refresh_claims(out_dir: str | Path) -> list[Path]:
    """Rewrite OUT/claims.csv (and .parquet if there is one) and claims.md from OUT/claims.csv, with
    the columns, table and rules this version writes: a claim the output's size cannot test reads so
    (`reach_verdicts`); every other cell is kept."""
    out_dir = Path(out_dir)
    _, claims = read_output(out_dir)
    claims = reach_verdicts(out_dir, claims)
    table = with_seeds_to_decide(claims)
    written = [out_dir / "claims.csv"]
    with atomic_write_path(written[0]) as tmp:
        table.to_csv(tmp, index=False)
    if (out_dir / "claims.parquet").is_file():
        with atomic_write_path(out_dir / "claims.parquet") as tmp:
            table.to_parquet(tmp, index=False)
        written.append(out_dir / "claims.parquet")
    looks = earlier_looks(out_dir, seed_count(claims))
    atomic_write_text(out_dir / "claims.md", claims_markdown(claims, looks))
    return [*written, out_dir / "claims.md"]
