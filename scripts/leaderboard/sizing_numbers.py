"""The numbers of the leaderboard's sizing page, read from the files the pilot sweeps wrote.

    python scripts/leaderboard/sizing_numbers.py runs/lb-sizing/bios   # recall by depth per run
    python scripts/leaderboard/sizing_numbers.py runs/lb-sizing/lm     # NLL by depth per run

For each run of a sweep folder (bioS: `recall_curve.csv` of its evaluation; LM: `eval/nll.csv` of the
run), prints one markdown row: the recipe, the schedule, the updates trained, the wall seconds of
training (the last `wall_s` of `metrics.jsonl`), and the metric at K=1, 4, 16 and 64 with its means
over K=1..16 and K=17..64.
"""

import json
import sys
from pathlib import Path

import pandas as pd


def _training(run: Path) -> tuple[int, float]:
    last = json.loads(run.joinpath("metrics.jsonl").read_text().splitlines()[-1])
    return last["update"] + 1, last["wall_s"]


def _by_depth(sweep: Path, run: Path) -> tuple[str, pd.Series] | None:
    """The metric per depth: bits per person (bioS) or validation NLL in nats per token (LM); None
    while the run is not evaluated yet."""
    nll = run / "eval" / "nll.csv"
    recall = sweep / ".sweep" / "eval" / run.relative_to(sweep) / "recall_curve.csv"
    if nll.is_file():
        table = pd.read_csv(nll)
        final = table[table["update"] == table["update"].max()]
        return "NLL", final.groupby("depth")["nll"].mean()
    if not recall.is_file():
        return None
    recall = pd.read_csv(recall)
    whole = recall[recall["attribute"] == "all"]
    return "bits", whole.groupby("depth")["bits"].mean()


def main(sweep: Path) -> None:
    rows = []
    for config in sorted(sweep.glob("**/config.json")):
        run = config.parent
        if ".sweep" in run.parts:
            continue
        settings = json.loads(config.read_text())
        if (evaluated := _by_depth(sweep, run)) is None:
            continue
        metric, curve = evaluated
        updates, seconds = _training(run)
        rows.append(
            {
                "recipe": settings["model_config"].get("recipe", "baseline"),
                "schedule": settings["plan"]["schedule"],
                "updates": updates,
                "train s": round(seconds),
                **{f"K={k}": round(curve.get(k, float("nan")), 3) for k in (1, 4, 16, 64)},
                "K=1..16": round(curve.loc[1:16].mean(), 3),
                "K=17..64": round(curve.loc[17:64].mean(), 3),
            }
        )
    print(f"{metric} by serving depth, {sweep}")
    print(pd.DataFrame(rows).to_markdown(index=False))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
