"""The numbers docs/results/lm-sizing.md reports, read from the files the sizing runs wrote: per run,
seconds per update (from its metrics.jsonl, past the first quarter of the run), modeled FLOPs per
update, and its final checkpoint's validation NLL at K=1, 4, 8 and 16 and averaged over K=17..64
(from eval/nll.csv, written by `biosrecall lm eval RUN --max-depth 64`).

    python scripts/lm/sizing_numbers.py runs/lm-sizing/t-fixed1 runs/lm-sizing/d-uniform/seed0 ...
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pandas as pd


def speed(run: Path) -> tuple[float, float]:
    """(seconds per update, modeled FLOPs per update) over the last three quarters of the run."""
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    rows = [row for row in rows if "wall_s" in row and "update" in row]
    first, last = rows[len(rows) // 4], rows[-1]
    updates = last["update"] - first["update"]
    return (last["wall_s"] - first["wall_s"]) / updates, last["flops"] / (last["update"] + 1)


def nll(run: Path) -> dict[str, float]:
    path = run / "eval" / "nll.csv"
    if not path.is_file():
        return {}
    table = pd.read_csv(path)
    table = table[table["update"] == table["update"].max()].set_index("depth")["nll"]
    values = {f"K={k}": float(table[k]) for k in (1, 4, 8, 16) if k in table.index}
    beyond = table[table.index > 16]
    if len(beyond):
        values["K=17..64"] = float(beyond.mean())
    return values


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("runs", nargs="+", type=Path)
    args = parser.parse_args()
    print(
        "| run | s/update | GFLOPs/update | " + " | ".join(("K=1", "K=4", "K=8", "K=16", "K=17..64")) + " |"
    )
    print("|---" * 8 + "|")
    for run in args.runs:
        seconds, flops = speed(run)
        values = nll(run)
        cells = [
            f"{values[k]:.4f}" if k in values else "-" for k in ("K=1", "K=4", "K=8", "K=16", "K=17..64")
        ]
        print(f"| {run} | {seconds:.3f} | {flops / 1e9:.2f} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
