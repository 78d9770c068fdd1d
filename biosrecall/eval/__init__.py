"""Recall evaluation: score factual recall over serving depths, tabulate it, and draw Figure-1 curves.

    sweep.py   model + EvalSet -> exact-answer flags for depths 1..K_max from one all-depth pass
    recall.py  exact flags -> facts recalled (>= 4 of 5 templates), bits per person, long-format table
    curves.py  run folders -> checkpoints evaluated (cached next to each), one long-format table
    plots.py   long-format table -> Figure-1 style figure (and the exit frontier figure)
    exits.py   exit criteria (fixed:K, kl:eps, stable:m, entropy:h, oracle) and their one parser
    serving.py whole-query adaptive exit scored from the all-depth pass; `ask` through the decoder
    recall_curve.py  `recall-curve` of runs in one call: scored, then tables and figures written

Checkpoints are chosen with `biosrecall.train.run_folder`' selector syntax; tables and figures are written by
`biosrecall.outputs` (CSV + parquet, PNG + PDF). From a notebook:

    from biosrecall.eval import recall_curves, plot_recall_curves
    table = recall_curves(["runs/fixed4", "runs/uniform"], checkpoints="0.45,final")
    plot_recall_curves(table)
"""

from biosrecall.eval.curves import recall_curves, summary_table
from biosrecall.eval.exits import parse_exits
from biosrecall.eval.plots import plot_exit_frontier, plot_recall_curves
from biosrecall.eval.recall import RecallScore, recall_table, score_exact
from biosrecall.eval.serving import exit_frontier, headline_table
from biosrecall.eval.sweep import answer_stats_by_depth, exact_at_depth, exact_by_depth

__all__ = [
    "RecallScore",
    "answer_stats_by_depth",
    "exact_at_depth",
    "exact_by_depth",
    "exit_frontier",
    "headline_table",
    "parse_exits",
    "plot_exit_frontier",
    "plot_recall_curves",
    "recall_curves",
    "recall_table",
    "score_exact",
    "summary_table",
]
