"""Every figure the package writes fits its canvas: each is drawn from a small made-up table (no
training) and no title, label, tick label, legend entry or annotation reaches past the figure's
edges, and no two tick labels of one axis overlap.

    pytest -q tests/test_figures_fit.py
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.text import Text

from biosrecall.bios import ATTRIBUTES
from biosrecall.eval.plots import plot_exit_frontier, plot_recall_curves
from biosrecall.experiments.budget_results import budget_figure
from biosrecall.experiments.capacity_results import plot_capacity
from biosrecall.lm import compare_plots

POOLS = (200, 28, 12, 300, 100, 263)
CEILING = sum(math.log2(p) for p in POOLS)
CHANCE = sum(math.log2(p) / p for p in POOLS)
STUDY = {  # figure1's run names and specs, as its tables hold them
    "fixed_k4": "fixed:4",
    "fixed_first_k4_80": "fixed_first:k0=4,switch=0.8,finish=uniform,range=1-16",
    "uniform_1_16": "uniform:1-16",
    "uniform_1_16_update_matched": "uniform:1-16",
}


def _texts(fig) -> list[Text]:
    """Every text drawn: titles, axis labels, the tick labels inside the view, legends, annotations."""
    texts = [t for t in fig.texts] + ([fig._suptitle] if fig._suptitle is not None else [])
    for legend in fig.legends:
        texts += legend.get_texts()
    for ax in fig.axes:
        if not ax.get_visible():
            continue
        texts += [ax.title, ax._left_title, ax._right_title, ax.xaxis.label, ax.yaxis.label, *ax.texts]
        if ax.get_legend() is not None:
            texts += ax.get_legend().get_texts()
        for axis in (ax.xaxis, ax.yaxis):
            texts += _tick_labels(axis)
    return [t for t in texts if t.get_visible() and t.get_text().strip()]


def _tick_labels(axis) -> list[Text]:
    """The tick labels matplotlib draws: those of ticks inside the axis' view interval."""
    low, high = sorted(axis.get_view_interval())
    shown = []
    for tick in [*axis.get_major_ticks(), *axis.get_minor_ticks()]:
        if low - 1e-9 * abs(low) <= tick.get_loc() <= high + 1e-9 * abs(high):
            shown += [label for label in (tick.label1, tick.label2) if label.get_visible()]
    return shown


def assert_fits(fig) -> None:
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    renderer = canvas.get_renderer()
    box = fig.bbox
    outside = []
    for text in _texts(fig):
        extent = text.get_window_extent(renderer)
        if (
            extent.x0 < box.x0 - 0.5
            or extent.y0 < box.y0 - 0.5
            or extent.x1 > box.x1 + 0.5
            or extent.y1 > box.y1 + 0.5
        ):
            outside.append(text.get_text())
    assert not outside, f"text cut off by the figure's edge: {outside}"
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis) if ax.get_visible() else ():
            labels = [t for t in _tick_labels(axis) if t.get_text().strip()]
            extents = sorted((t.get_window_extent(renderer) for t in labels), key=lambda e: (e.x0, e.y0))
            for first, second in zip(extents, extents[1:], strict=False):
                assert not first.overlaps(second), f"tick labels overlap on {ax.get_title()!r}"


def recall_table(runs=STUDY, depths=range(1, 65), fractions=(0.45, 1.0), seeds: int = 0) -> pd.DataFrame:
    """A `recall_curves`-shaped table (or, with `seeds`, an aggregated one with intervals)."""
    records = []
    for i, (run, schedule) in enumerate(runs.items()):
        for fraction in fractions:
            for depth in depths:
                share = fraction * math.exp(-((math.log2(depth) - 2 - i) ** 2) / 8)
                for attribute, pool in zip((*ATTRIBUTES, "all"), (*POOLS, None), strict=True):
                    ceiling = math.log2(pool) if pool else CEILING
                    chance = math.log2(pool) / pool if pool else CHANCE
                    row = {"run": run, "schedule": schedule, "checkpoint": str(fraction), "fraction": fraction,
                           "budget": 2.05e13, "depth": depth, "attribute": attribute, "recall": share,
                           "bits": share * ceiling, "ceiling_bits": ceiling, "chance_bits": chance,
                           "role": "control" if "update_matched" in run else "main"}  # fmt: skip
                    if seeds:
                        row.update(bits_low=0.8 * row["bits"], bits_high=1.2 * row["bits"], n_seeds=seeds)
                        row.update(recall_low=0.8 * share, recall_high=min(1.0, 1.2 * share))
                    records.append(row)
    return pd.DataFrame.from_records(records)


def frontier_table(seeds: int = 3) -> pd.DataFrame:
    """An `exit_frontier`-shaped table: every fixed depth 1..64 and a few criteria, per seed."""
    rng = np.random.default_rng(0)
    points = [(f"K={depth}", "fixed-depth", depth, 30 - depth % 2) for depth in range(1, 65)]
    for kind, thresholds in (("kl", (1e-4, 1e-3, 1e-2)), ("stable", (2, 4)), ("entropy", (0.1, 0.5))):
        points += [(f"{kind}:{value}", kind, 3 + 4 * j, 30.2) for j, value in enumerate(thresholds)]
    points.append(("oracle", "oracle", 1.1, 31.5))
    rows = []
    for seed in range(seeds):
        for run, schedule in list(STUDY.items())[:3]:
            for criterion, kind, depth, bits in points:
                rows.append({"run": f"seed{seed}/{run}", "schedule": schedule, "checkpoint": "1.0",
                             "fraction": 1.0, "criterion": criterion, "kind": kind, "parameter": depth,
                             "bits": bits + rng.normal(0, 0.3), "mean_depth": depth,
                             "flops_per_query": 1.1e7 + 4.4e6 * (depth - 1)})  # fmt: skip
    return pd.DataFrame(rows)


def budget_table() -> pd.DataFrame:
    rows = []
    for name in STUDY:
        for seed in range(3):
            for multiple in (0.25, 0.5, 1, 2, 4):
                bits = CEILING * (1 - math.exp(-multiple)) - seed
                rows.append({"name": name, "seed": seed, "budget_multiple": multiple, "flops": 2e11 * multiple,
                             "updates": int(800 * multiple), "bits_1_16": bits, "bits_17_64": bits - 1,
                             "bits_1_64": bits, "worst_bits": bits - 2, "ceiling_bits": CEILING})  # fmt: skip
    return pd.DataFrame(rows)


def capacity_table() -> pd.DataFrame:
    rows = []
    models = [(name, "looped", depth) for name in list(STUDY)[:3] for depth in (1, 4, 16, 64)]
    models += [("std_params", "baseline", 1), ("std_flops", "baseline", 1)]
    for name, kind, depth in models:
        for people in (250, 500, 1000):
            ceiling = 33.39 * people
            bits = min(ceiling, 12_000) * (0.5 if people == 1000 else 0.9)
            row = {"people": people, "name": name, "kind": kind, "depth": depth, "parameters": 101_408,
                   "ceiling_bits": ceiling}  # fmt: skip
            for measure in ("exact_bits", "loss_bound_bits"):
                # a collapsed seed makes the interval reach far below zero
                row.update({measure: bits, f"{measure}_low": bits - 3 * bits, f"{measure}_high": bits * 1.1})
            rows.append(row)
    return pd.DataFrame(rows)


def lm_tables():
    order = ["runs/lm/fixed", "runs/lm/fixed-first", "runs/lm/uniform"]
    specs = ["fixed:4", "fixed_first:k0=4,switch=0.8,finish=uniform,range=1-16", "uniform:1-16"]
    curves, summaries, exits, harness = [], [], [], []
    for i, (run, schedule) in enumerate(zip(order, specs, strict=True)):
        for depth in (1, 2, 4, 8, 16, 32):
            nll = 3 + i * 0.1 + 1 / depth
            curves.append({"run": run, "schedule": schedule, "depth": depth, "nll": nll, "nll_low": nll - 0.05,
                           "nll_high": nll + 0.05, "n_seeds": 3})  # fmt: skip
            for task, metric in (
                ("hellaswag", "acc_norm"),
                ("arc_easy", "acc"),
                ("lambada_openai", "perplexity"),
            ):
                harness.append({"run": run, "schedule": schedule, "task": task, "metric": metric, "depth": depth,
                                "value": 0.3 + 0.01 * depth, "n_seeds": 3})  # fmt: skip
        for update, flops in ((100, 1e17), (200, 2e17), (400, 4e17)):
            summaries.append({"run": run, "schedule": schedule, "update": update, "flops": flops,
                              "mean_nll": 3 + 1e17 / flops})  # fmt: skip
        for kind in ("fixed-depth", "kl", "entropy"):
            for depth in (1.0, 4.0, 16.0):
                exits.append({"run": run, "schedule": schedule, "kind": kind, "mean_depth": depth,
                              "nll": 3 + 1 / depth})  # fmt: skip
    frames = [pd.DataFrame(rows) for rows in (curves, summaries, exits, harness)]
    return order, *frames


def _one_depth_model() -> pd.DataFrame:
    """A standard (not looped) Hugging Face model: one depth, no budget, its model type as schedule."""
    table = recall_table({"gpt2": "gpt2"}, depths=[1], fractions=(1.0,))
    return table.assign(checkpoint="hf", budget=math.nan)


FIGURES = {
    "figure1 (means over seeds, two fractions, a control)": lambda: plot_recall_curves(recall_table(seeds=6)),
    "one run at one fraction (the tour's recall-curve)": lambda: plot_recall_curves(
        recall_table({"ff": STUDY["fixed_first_k4_80"]}, fractions=(1.0,))
    ),
    "per attribute": lambda: plot_recall_curves(recall_table(), metric="attribute"),
    "per attribute, one run": lambda: plot_recall_curves(
        recall_table({"ff": STUDY["fixed_first_k4_80"]}, fractions=(1.0,)), metric="attribute"
    ),
    "exit frontier": lambda: plot_exit_frontier(frontier_table()),
    "exit frontier, one seed": lambda: plot_exit_frontier(frontier_table(seeds=1)),
    "budget curve and compute to target": lambda: budget_figure(budget_table()),
    "capacity": lambda: plot_capacity(capacity_table()),
}


def _hf_figure():
    pytest.importorskip("transformers")
    from biosrecall.hf.scoring import plot_hf_recall

    return plot_hf_recall(_one_depth_model())


def _lm_figure(name):
    order, curves, summaries, exits, harness = lm_tables()
    if name == "nll_vs_depth":
        return compare_plots.plot_nll_vs_depth(curves, order)
    if name == "nll_vs_compute":
        return compare_plots.plot_nll_vs_compute(summaries, order)
    if name == "nll_vs_exit_depth":
        return compare_plots.plot_nll_vs_exit_depth(exits, order)
    return compare_plots.plot_harness_vs_depth(harness, curves, order)


@pytest.mark.parametrize("name", list(FIGURES))
def test_figure_fits_its_canvas(name):
    assert_fits(FIGURES[name]())


@pytest.mark.parametrize("name", ["nll_vs_depth", "nll_vs_compute", "nll_vs_exit_depth", "harness_vs_depth"])
def test_lm_comparison_figure_fits_its_canvas(name):
    assert_fits(_lm_figure(name))


def test_a_model_with_one_depth_is_drawn_at_that_depth_alone():
    fig = _hf_figure()
    assert_fits(fig)
    ax = fig.axes[0]
    assert [int(t) for t in ax.get_xticks()] == [1]
    legend = [text.get_text() for text in fig.legends[0].get_texts()]
    assert not any("training depths" in text for text in legend), "a standard model has no training depths"
    titles = [fig.get_suptitle(), *(a.get_title() for a in fig.axes)]
    assert sum("gpt2" in title for title in titles) == 1, f"the model is named once: {titles}"


def test_labels_are_words_and_the_interval_swatch_is_not_the_training_shade():
    fig = plot_recall_curves(recall_table(seeds=6))
    legend = fig.legends[0]
    labels = [text.get_text() for text in legend.get_texts()]
    assert labels[:4] == [
        "fixed K=4",
        "fixed-first (K0=4, 80%)",
        "uniform K=1-16",
        "uniform K=1-16 (update-matched)",
    ]
    assert not any(":" in label or "=uniform" in label for label in labels), labels
    interval = labels.index("95% interval over 6 seeds")
    shade = labels.index("training depths (K \u2264 16)")
    handles = legend.legend_handles
    assert handles[interval].get_facecolor() != handles[shade].get_facecolor()


def test_the_exit_frontier_tells_one_story_per_schedule():
    fig = plot_exit_frontier(frontier_table())
    assert [ax.get_title() for ax in fig.axes] == ["fixed K=4", "fixed-first (K0=4, 80%)", "uniform K=1-16"]
    labels = [text.get_text() for text in fig.legends[0].get_texts()]
    assert len(labels) <= 8, labels
    assert any("pays" in label for label in labels) and "mean over 3 seeds" in fig.get_suptitle()


def test_a_sixteen_run_legend_leaves_the_panel_its_height():
    """The LM study draws 16 runs with long labels: the legend goes under the panel, not over it."""
    schedules = [f"fixed_first:k0={k0},switch={switch},finish={finish},range=1-16"
                 for finish in ("uniform", "poisson_lognormal") for k0 in (1, 2, 4) for switch in (0.67, 0.8)]  # fmt: skip
    schedules += ["uniform:1-16", "fixed:4", "uniform:1-16", "curriculum:mean=8,warmup=0.75"]
    order = [f"runs/lm/run{i}" for i in range(len(schedules))]
    curves = pd.DataFrame(
        {"run": run, "schedule": schedule, "depth": depth, "nll": 3 + i * 0.01 + 1 / depth, "n_seeds": 8}
        for i, (run, schedule) in enumerate(zip(order, schedules, strict=True))
        for depth in (1, 2, 4, 8, 16, 32, 64)
    )
    fig = compare_plots.plot_nll_vs_depth(curves, order)
    assert_fits(fig)
    assert len(fig.legends[0].get_texts()) == 16
    panel = fig.axes[0].get_position().height * fig.get_figheight()
    assert panel >= 2.5, f"the panel is squashed to {panel:.2f} inches by its legend"
