"""Copy a Figure-1 study's generated tables into README.md, so the README holds no hand-written numbers.

    python scripts/readme_results.py runs/study            # rewrites README.md's generated blocks
    python scripts/readme_results.py runs/study --check    # exit 1 when README.md is out of date
    python scripts/readme_results.py docs/results/study-default --refresh-claims

Each block sits between `<!-- generated: NAME -->` and `<!-- end: NAME -->` in README.md and is
replaced by the file of the same name that `biosrecall figure1` wrote: `claims` <- claims.md,
`summary` <- summary.md, `fixed_sweep_summary` <- fixed_sweep_summary.md, `exit_summary` <-
exit_summary.md (adaptive-depth serving per schedule), `timings` <- timings.md (wall time per
phase of each part), and from a budget sweep `compute_to_target` <- compute_to_target.md,
`compute_saving` <- its savings over K=1..16 only, `budget_modes` <- budget_modes.md; from a
`biosrecall capacity` output `capacity_claims` <- capacity_claims.md and `capacity_k4` <- the means
of capacity.md at K=4 and the baselines' one depth, and from a `biosrecall lm study` output
`lm_claims` <- lm_claims.md. `--only`
limits the blocks (the README reports more than one study). A block whose file is missing is left
as it is and named on stderr.

`--refresh-claims` rewrites the study's claims.csv and claims.md from its own claims.csv, with the
columns, table and rules this version of biosrecall writes (`biosrecall.experiments.claims_plan`), so
an archived study gains a new column (`seeds_to_decide`) or reads a claim its size cannot test as
such (from its recall_curve_seeds.csv) without being rerun; its other cells are kept.

`--refresh-figures` redraws the study's figures from its archived tables with this version's figure
code, training and scoring nothing: those the folder keeps (figure1, figure5, exit_frontier: PNG and
PDF) and the docs' copies of them (`DOCS_FIGURES`, docs/figures/*.png).

Archive a study first with `biosrecall figure1 --out runs/study --archive docs/results/study-default`
(`biosrecall.experiments.study_archive`: the whole output without weights, which a copy continues):
the README's numbers then come from files in the repository, and `tests/test_readme_results.py`
checks that the README's blocks match them. The documentation site's results pages read the other
archived tables when the site is built (scripts/docs_hooks.py).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from biosrecall.experiments.study import figure1_command, upgrade

README = Path(__file__).resolve().parent.parent / "README.md"
DOCS = README.parent / "docs" / "figures"
DOCS_FIGURES = {
    "study-default": {"figure1": "figure1_default", "exit_frontier": "exit_frontier_default"},
    "budget-sweep-middle": {"budget_curve": "budget_curve_middle", "exit_frontier": "exit_frontier_middle"},
    "budget-sweep-quick": {"budget_curve": "budget_curve_quick"},
    "budget-sweep-quick-10seeds": {"budget_curve": "budget_curve_quick_10seeds"},
    "capacity": {"capacity": "capacity_bios_tiny"},
}
"""Archived study folder -> {figure: its copy in docs/figures}: the figures the docs pages show."""
BLOCKS = (
    "claims",
    "summary",
    "fixed_sweep_summary",
    "exit_summary",
    "timings",
    "compute_to_target",
    "compute_saving",
    "budget_modes",
    "capacity_claims",
    "capacity_k4",
    "lm_claims",
)
SOURCES = {"compute_saving": "compute_to_target", "capacity_k4": "capacity"}
"""Blocks that show part of another block's file."""
CAPACITY_DEPTHS = ("4", "1 (its one depth)")
"""The serving depths `capacity_k4` keeps: the looped models' training depth and a baseline's only one."""


def provenance(study: Path, name: str) -> str:
    """One line naming the study a block comes from: its seed count first (a reader sees how many
    seeds decided the table before the table), then its preset, seeds and controls."""
    seeds = len(_record(study)[1])
    return (
        f"*{seeds} {'seed' if seeds == 1 else 'seeds'}: `{name}.md` of `{study_command(study)}`, copied by "
        "`scripts/readme_results.py`.*\n\n"
    )


ENGINE_STUDIES = {
    "capacity": ("biosrecall.experiments.capacity", "CAPACITY"),
    "leaderboard": ("biosrecall.experiments.leaderboard", "LEADERBOARD"),
    "depth": ("biosrecall.experiments.depth_study", "DEPTH"),
    "lm_study": ("biosrecall.experiments.lm_study", "LM_STUDY"),
}
"""Studies declared on the engine (`biosrecall.experiments.engine`), by name: each records `<name>.json`."""
RECORDS = ("figure1.json", *(f"{name}.json" for name in ENGINE_STUDIES))
"""The record that each kind of study writes in its output folder."""


def _engine_study(study: Path):
    """(the declaration, its record) of an engine study's output, else None; a record an earlier
    release wrote in a format of its own is read as the engine's (the study's `upgrade`)."""
    import importlib

    for name, (module, attribute) in ENGINE_STUDIES.items():
        path = study / f"{name}.json"
        if path.is_file():
            declaration = getattr(importlib.import_module(module), attribute)
            record = json.loads(path.read_text())
            if declaration.upgrade is not None:
                record = declaration.upgrade(record, f"{path} is corrupt")
            return declaration, record
    return None


def _record(study: Path) -> tuple[dict, list[int]]:
    """The study's record (an engine study's, else figure1.json) and its seeds."""
    if (engine := _engine_study(study)) is not None:
        return engine[1], engine[1]["options"]["seeds"]
    path = study / "figure1.json"
    record = upgrade(json.loads(path.read_text()), f"{path} is corrupt")  # the engine's, or 0.2.0's
    return record, record["options"]["study"]["seeds"]


def study_command(study: Path) -> str:
    """The command that made `study`, from its record: an engine study's (`capacity` and `lm study`
    among them) or `figure1`'s."""
    if (engine := _engine_study(study)) is not None:
        from biosrecall.experiments.engine import study_command as engine_command

        declaration, record = engine
        values = {k: tuple(v) if isinstance(v, list) else v for k, v in record["options"].items()}
        return engine_command(declaration, declaration.options(**values))
    options = _record(study)[0]["options"]
    return figure1_command(options["preset"], options["study"], budget=options["budget"])


def block_body(name: str, source: Path) -> str:
    """The block's text: the whole file, or part of it: for `compute_saving` the table's header and
    the savings over K=1..16, the depths the compute claim is judged on (the per-schedule FLOPs and
    the K=1..64 rows stay on the results page); for `capacity_k4` the table of means over seeds at
    `CAPACITY_DEPTHS` (every depth and every run stay on the results page)."""
    text = source.read_text()
    lines = text.splitlines(keepends=True)
    if name == "compute_saving":
        saving = [line for line in lines[2:] if line.startswith("| saving:") and "| K=1..16 |" in line]
        return "".join(lines[:2] + saving)
    if name == "capacity_k4":
        means = lines[lines.index("## Mean over seeds\n") + 2 :]
        table = means[: means.index("\n")]
        kept = [line for line in table[2:] if line.split(" | ")[2] in CAPACITY_DEPTHS]
        return "".join(table[:2] + kept)
    return text


def rewrite(text: str, study: Path, blocks=BLOCKS) -> str:
    for name in blocks:
        source = study / f"{SOURCES.get(name, name)}.md"
        pattern = re.compile(rf"(<!-- generated: {name} -->\n).*?(<!-- end: {name} -->)", re.S)
        if not pattern.search(text):
            continue
        if not source.is_file():
            print(f"{source} not found; block {name!r} left as it is", file=sys.stderr)
            continue
        body = provenance(study, source.stem) + block_body(name, source)
        text = pattern.sub(lambda m, body=body: m.group(1) + body + m.group(2), text)
    return text


def _table(study: Path, name: str):
    """An archived table, from its parquet file where there is one (types kept), else its CSV."""
    import pandas as pd

    parquet, csv = study / f"{name}.parquet", study / f"{name}.csv"
    if parquet.is_file():
        return pd.read_parquet(parquet)
    return pd.read_csv(csv) if csv.is_file() else None


def draw_figures(study: Path) -> dict:
    """{figure name: matplotlib Figure} of every figure the study's archived tables can draw, by the
    functions that drew them when the study ran."""
    from biosrecall.eval.plots import plot_exit_frontier, plot_recall_curves
    from biosrecall.experiments.budget_results import budget_figure
    from biosrecall.experiments.capacity_results import plot_capacity

    drawers = {
        "figure1": ("recall_curve_seeds", plot_recall_curves),
        "figure5": ("fixed_sweep_seeds", plot_recall_curves),
        "exit_frontier": ("exit_frontier", plot_exit_frontier),
        "budget_curve": ("budget_curve", budget_figure),
        "capacity": ("capacity_summary", plot_capacity),
    }
    figures = {}
    for figure, (name, draw) in drawers.items():
        table = _table(study, name)
        if table is not None and len(table):
            figures[figure] = draw(table)
    return figures


def refresh_figures(study: Path, docs: Path = DOCS) -> list[Path]:
    """Redraw the figures the study folder keeps (PNG and PDF, in place) and its docs copies (PNG)."""
    from biosrecall.outputs import FIGURE_DPI, save_figure

    written = []
    copies = DOCS_FIGURES.get(study.resolve().name, {})
    for figure, fig in draw_figures(study).items():
        if (study / f"{figure}.png").is_file():
            written += save_figure(fig, study / figure)
        if figure in copies:
            target = docs / f"{copies[figure]}.png"
            tmp = target.with_name(f".{target.name}.tmp")
            fig.savefig(tmp, format="png", dpi=FIGURE_DPI)
            tmp.replace(target)
            written.append(target)
    return written


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "study", type=Path, help="A `biosrecall figure1`, `capacity` or `lm study` output folder."
    )
    parser.add_argument("--readme", type=Path, default=README)
    parser.add_argument("--check", action="store_true", help="Only report whether the README is current.")
    parser.add_argument("--only", default=",".join(BLOCKS), help="Comma-separated blocks to rewrite.")
    parser.add_argument(
        "--refresh-claims",
        action="store_true",
        help="Rewrite the study's claims.csv/.md from its claims.csv.",
    )
    parser.add_argument(
        "--refresh-figures",
        action="store_true",
        help="Redraw the study's figures (and their docs/figures copies) from its archived tables.",
    )
    args = parser.parse_args()
    if args.refresh_figures:
        for path in refresh_figures(args.study):
            print(path)
        return 0
    if args.refresh_claims:
        from biosrecall.experiments.claims_plan import refresh_claims

        for path in refresh_claims(args.study):
            print(path)
        return 0
    blocks = args.only.split(",")
    unknown = sorted(set(blocks) - set(BLOCKS))
    if unknown:
        parser.error(f"unknown block(s) {', '.join(unknown)}; choose from {', '.join(BLOCKS)}")
    old = args.readme.read_text()
    new = rewrite(old, args.study, blocks)
    if args.check:
        return 0 if new == old else 1
    if new != old:
        tmp = args.readme.with_name(f".{args.readme.name}.tmp")
        tmp.write_text(new)
        tmp.replace(args.readme)
    return 0


if __name__ == "__main__":
    sys.exit(main())
