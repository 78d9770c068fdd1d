"""Recall evaluation: score factual recall over serving depths, tabulate it, and draw Figure-1 curves.

    sweep.py   model + EvalSet -> exact-answer flags for depths 1..K_max from one all-depth pass
    recall.py  exact flags -> facts recalled (>= 4 of 5 templates), bits per person, long-format table
    curves.py  run folders -> checkpoints evaluated (cached next to each), tables written
    plots.py   long-format table -> Figure-1 style figure (PNG + PDF)

From a notebook:

    from biosrecall.eval import recall_curves, plot_recall_curves
    table = recall_curves(["runs/fixed4", "runs/uniform"], fractions=[0.45, 1.0])
    plot_recall_curves(table)
"""

from biosrecall.eval.curves import recall_curves, summary_table, write_tables
from biosrecall.eval.plots import plot_recall_curves, save_figure
from biosrecall.eval.recall import RecallScore, recall_table, score_exact
from biosrecall.eval.sweep import exact_at_depth, exact_by_depth, greedy_exact

__all__ = [
    "RecallScore",
    "exact_at_depth",
    "exact_by_depth",
    "greedy_exact",
    "plot_recall_curves",
    "recall_curves",
    "recall_table",
    "save_figure",
    "score_exact",
    "summary_table",
    "write_tables",
]
