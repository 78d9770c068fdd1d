"""Figure-1 plots from a long-format recall table: files written, panels, reference lines, labels, styles.

pytest -q tests/test_plots.py
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from biosrecall.bios import ATTRIBUTES
from biosrecall.errors import BiosrecallError
from biosrecall.eval.plots import (
    curve_styles,
    draw_curve,
    figure_grid,
    format_flops,
    line_labels,
    plot_recall_curves,
    schedule_label,
)

POOLS = (200, 28, 12, 300, 100, 263)
SCHEDULES = {
    "fixed4": "fixed:4",
    "fixed-first": "fixed_first:k0=4,switch=0.8,finish=uniform",
    "uniform": "uniform:1-16",
}


def synthetic_table(budget: float = 1.2e15, max_depth: int = 64, schedules=SCHEDULES) -> pd.DataFrame:
    """A table shaped like `recall_curves` output, with curves that peak at different depths."""
    records = []
    for i, (run, schedule) in enumerate(schedules.items()):
        for fraction in (0.45, 1.0):
            for depth in range(1, max_depth + 1):
                share = fraction * math.exp(-((math.log2(depth) - 2 - i) ** 2) / 8)
                for attribute, pool in zip((*ATTRIBUTES, "all"), (*POOLS, None), strict=True):
                    ceiling = math.log2(pool) if pool else sum(math.log2(p) for p in POOLS)
                    chance = math.log2(pool) / pool if pool else sum(math.log2(p) / p for p in POOLS)
                    records.append(
                        {
                            "run": run,
                            "schedule": schedule,
                            "fraction": fraction,
                            "update": 100,
                            "flops": fraction * budget,
                            "budget": budget,
                            "depth": depth,
                            "attribute": attribute,
                            "recall": share,
                            "bits": share * ceiling,
                            "ceiling_bits": ceiling,
                            "chance_bits": chance,
                        }
                    )
    return pd.DataFrame.from_records(records)


def test_bits_figure_has_one_panel_per_fraction_and_is_saved(tmp_path):
    table = synthetic_table()
    fig = plot_recall_curves(table, out_path=tmp_path / "curve")
    assert (tmp_path / "curve.png").stat().st_size > 10_000
    assert (tmp_path / "curve.pdf").read_bytes().startswith(b"%PDF")
    axes = fig.get_axes()
    assert [ax.get_title() for ax in axes] == ["45% of budget", "100% of budget"]
    assert "matched budget 1.2e15 FLOPs" in fig.get_suptitle()
    for ax in axes:
        assert ax.get_xscale() == "log" and ax.get_xlim() == (1, 64)
        assert len(ax.get_lines()) == 2 + len(SCHEDULES)  # ceiling, chance and one line per schedule
    ceiling = sum(math.log2(p) for p in POOLS)
    reference = {round(line.get_ydata()[0], 6): line.get_linestyle() for line in axes[0].get_lines()[:2]}
    assert reference == {round(ceiling, 6): "--", round(table["chance_bits"].iloc[-1], 6): ":"}
    legend = [text.get_text() for text in fig.legends[0].get_texts()]
    assert legend[: len(SCHEDULES)] == ["fixed K=4", "fixed-first (K0=4, 80%)", "uniform K=1-16"]
    assert any("ceiling" in t for t in legend) and any("chance" in t for t in legend)


def test_explicit_ceiling_and_chance_override_the_table(tmp_path):
    fig = plot_recall_curves(synthetic_table(), ceiling=33.39, chance=0.5)
    ys = sorted(line.get_ydata()[0] for line in fig.get_axes()[0].get_lines()[:2])
    assert ys == [0.5, 33.39]


def test_attribute_figure_is_a_grid_of_fractions_by_attributes(tmp_path):
    fig = plot_recall_curves(synthetic_table(), metric="attribute", out_path=tmp_path / "attr.png")
    assert (tmp_path / "attr.png").is_file() and (tmp_path / "attr.pdf").is_file()
    axes = fig.get_axes()
    assert len(axes) == 2 * len(ATTRIBUTES)
    assert axes[0].get_title() == "birth city" and axes[0].get_ylim() == (0, 1.06)
    chance_line = axes[0].get_lines()[1]
    assert chance_line.get_ydata()[0] == pytest.approx(1 / POOLS[0])


def test_styles_are_distinct_and_consistent():
    styles = curve_styles(["a", "b", "c", "a"])
    assert list(styles) == ["a", "b", "c"]
    triples = {(s["color"], s["marker"], str(s["linestyle"])) for s in styles.values()}
    assert len(triples) == 3
    assert len({s["marker"] for s in styles.values()}) == 3, "markers keep lines apart in grey print"
    assert curve_styles(["a", "b"])["b"] == styles["b"]


def test_runs_sharing_a_schedule_are_told_apart():
    table = synthetic_table(schedules={"seed0": "fixed:4", "seed1": "fixed:4", "uni": "uniform:1-16"})
    assert line_labels(table) == {
        "seed0": "fixed K=4 (seed0)",
        "seed1": "fixed K=4 (seed1)",
        "uni": "uniform K=1-16",
    }
    control = synthetic_table(
        schedules={"uniform_1_16": "uniform:1-16", "uniform_1_16_update_matched": "uniform:1-16"}
    )
    assert list(line_labels(control).values()) == ["uniform K=1-16", "uniform K=1-16 (update-matched)"]


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ("fixed:4", "fixed K=4"),
        ("uniform:1-16", "uniform K=1-16"),
        ("fixed_first:k0=4,switch=0.8,finish=uniform,range=1-16", "fixed-first (K0=4, 80%)"),
        ("fixed_first:k0=2,switch=0.5,finish=uniform,range=1-8", "fixed-first (K0=2, 50%, then K=1-8)"),
        ("poisson_lognormal:mean=7.5,sigma=0.5", "Poisson-lognormal (mean 7.5)"),
        ("gpt2", "gpt2"),
    ],
)
def test_schedules_are_labelled_in_words(spec, words):
    assert schedule_label(spec) == words


def test_title_says_when_budgets_are_not_matched():
    table = pd.concat(
        [synthetic_table(1e15).query("run == 'fixed4'"), synthetic_table(2e15).query("run != 'fixed4'")]
    )
    assert "budgets differ: 1e15, 2e15 FLOPs" in plot_recall_curves(table).get_suptitle()


def test_one_depth_is_drawn_at_that_depth_alone():
    fig = plot_recall_curves(synthetic_table(max_depth=1))
    assert list(fig.get_axes()[0].get_xticks()) == [1]
    fig = plot_recall_curves(synthetic_table(max_depth=2))
    assert np.allclose(fig.get_axes()[0].get_xlim(), (1, 2))


def test_bad_requests_are_refused():
    with pytest.raises(BiosrecallError, match="metric"):
        plot_recall_curves(synthetic_table(), metric="nll")
    with pytest.raises(BiosrecallError, match="empty"):
        plot_recall_curves(synthetic_table().iloc[:0])


def test_flops_are_written_compactly():
    assert format_flops(1.2e15) == "1.2e15"
    assert format_flops(1.234567e15) == "1.23e15"


def test_a_line_is_banded_only_where_it_has_an_interval_over_seeds():
    fig, axes = figure_grid(1, 1, 4, 3)
    ax = axes[0, 0]
    draw_curve(ax, [1, 2], [3, 4], [2.5, 3.5], [3.5, 4.5], color="#0072B2")
    draw_curve(ax, [1, 2], [3, 4], [math.nan, math.nan], [math.nan, math.nan])  # one seed: no interval
    draw_curve(ax, [1, 2], [3, 4])
    assert len(ax.get_lines()) == 3 and len(ax.collections) == 1
    band = ax.collections[0]
    assert tuple(band.get_facecolor()[0][:3]) == pytest.approx((0.0, 0x72 / 255, 0xB2 / 255))
    assert band.get_zorder() < ax.get_lines()[0].get_zorder(), "the band lies under its line"
