"""The language-model study's grid, the paper's 200M schedules (`scripts/lm/sweep-200m.toml`) by name,
and its options (`LMStudyOptions`, whose field docstrings are `lm study`'s help).

    GRID["ff-k2-s0.67-uniform"]    # "fixed_first:k0=2,switch=0.67,finish=uniform"
    parse_grid("fixed-k4,uniform") # ("uniform", "fixed-k4"): GRID's order

Shared by the study that trains and judges them (`biosrecall.experiments.lm_study`), the depth study
that reuses some (`biosrecall.experiments.depth_study`), the command that parses the study's options
(`biosrecall.cli.lm`) and the archive that copies a finished study
(`biosrecall.experiments.study_archive`): none of them may import torch here.
"""

from __future__ import annotations

from dataclasses import dataclass

from biosrecall.errors import BiosrecallError

UNIFORM, MATCHED, FIXED_K4, CURRICULUM = "uniform", "uniform-matched-k4-s0.67", "fixed-k4", "curriculum"
FINISHES = ("uniform", "poisson_lognormal")
RECORD = "lm_study.json"  # the study's resolved settings, in its output folder


def fixed_first_name(k0: int, switch: float, finish: str) -> str:
    return f"ff-k{k0}-s{switch:g}-{finish}"


# Grid item -> its depth schedule, in the order of scripts/lm/sweep-200m.toml (the legend order).
GRID: dict[str, str] = {UNIFORM: "uniform:1-16"}
GRID.update(
    {
        fixed_first_name(k0, switch, finish): f"fixed_first:k0={k0},switch={switch:g},finish={finish}"
        for finish in FINISHES
        for k0 in (1, 2, 4)
        for switch in (0.67, 0.8)
    }
)
GRID[CURRICULUM] = "curriculum:mean=8,warmup=0.75,shape=1-sqrt"  # as in `biosrecall flops`
GRID[MATCHED] = "uniform:1-16"  # for as many updates as K0=4 / 67%'s modeled compute buys
GRID[FIXED_K4] = "fixed:4"
MATCHED_TO = fixed_first_name(4, 0.67, "uniform")
SERVING = (1, 16)  # the serving depths the paper's mean NLL averages over
# The update diagnostic (the paper's Figure 4): K0=4 / 67%'s switch checkpoint, continued 16 uniform
# updates, then a K=16 update against a K=4 (its K0) one of the same size.
DIAGNOSED, AFTER_UNIFORM, DIAGNOSE = MATCHED_TO, 16, "diagnose"


def parse_grid(items: str | None) -> tuple[str, ...]:
    """A comma list of grid items (None or empty: all of `GRID`), in `GRID`'s order; an unknown or
    repeated item is one error naming the choices."""
    if not items:
        return tuple(GRID)
    names = [item.strip() for item in items.split(",")]
    for name in names:
        if name not in GRID:
            raise BiosrecallError(f"unknown grid item {name!r}; choose from: {', '.join(GRID)}")
    if len(set(names)) != len(names):
        raise BiosrecallError(f"a grid item is given twice in {items!r}")
    return tuple(name for name in GRID if name in names)


@dataclass(frozen=True)
class LMStudyOptions:
    """What one `biosrecall lm study` call asks for: each field is the option of the same name."""

    data: str = ""
    """`lm prepare` output, e.g. of pkg:kjv (see docs/guides/language-models.md); required unless
    --archive. The study's record pins what the folder holds, not where it is."""
    preset: str = "small"
    """Study size: tiny (seconds per run: tests and a smoke run) or small (the committed study's)."""
    seeds: tuple[int, ...] = (0,)
    """Training seeds, e.g. 0,1,2; the claims are judged over them, and a rerun with more seeds trains
    only the new ones."""
    grid: tuple[str, ...] = tuple(GRID)
    """Grid items to train, a comma list [default: all]: uniform,
    ff-k{1,2,4}-s{0.67,0.8}-{uniform,poisson_lognormal}, curriculum, uniform-matched-k4-s0.67, fixed-k4;
    a rerun may add more."""
    tokens: int | None = None
    """Training tokens of every run [default: the preset's updates]; whole updates only."""
    device: str = "auto"
    """Where runs train and evaluate: auto, cpu or cuda."""
