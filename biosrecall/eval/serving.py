"""Adaptive-depth serving scored from the all-depth pass: recall against compute per exit criterion.

A bioS query runs one iteration, checks its answer-predicting positions (a readout there, or for
`latent`/`accel` the recurrent state there), and stops at the first depth where its exit criterion
(`biosrecall.eval.exits`) holds at every one of them, or at the max depth. That is realisable and
exact, so the whole frontier comes from one all-depth pass per checkpoint (`biosrecall.eval.scoring`,
which observes the recurrent state when a readout-free criterion is scored, and writes the recall
table from the same pass when it is asked for both).

    table = exit_frontier(["runs/fixed4", "runs/uniform"], parse_exits("kl,stable:2,oracle"))
    headline = headline_table(table)       # per run: depth needed for 95% of its best recall
    write_table(table, "recall-curve/exit_frontier")
    scores = score_runs(run_dirs, "fractions", criteria, served=run_dirs)  # recall, and the finals' frontier
    figures, headline = write_serving_results("runs/figure1", scores.frontier)  # figure1's

Frontier table: one row per run, checkpoint and criterion, the label columns run, schedule,
checkpoint, fraction before the rows of `biosrecall.eval.scoring` (its module doc names each column).

Each checkpoint's rows are cached in its folder (`exits.parquet`, `biosrecall.eval.table_cache`) under
the criteria, depth, threshold, people, dataset and accounting they were scored with, so a study rerun
or extended by seeds scores only new checkpoints (fitted gates apart: `gate:delta` is always rescored).

`write_serving_results` writes the frontier table and figure and the headline table into one folder
(what `biosrecall figure1` adds for its 100% checkpoints, with the `SERVING_CRITERIA` list), and keeps
them when they are already there for the same runs, criteria and max depth.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from biosrecall.bios import load_dataset
from biosrecall.bios.tokenizer import SEP_TOKEN, SPACE_MARK, split_words
from biosrecall.errors import BiosrecallError
from biosrecall.eval.curves import score_runs
from biosrecall.eval.exits import Fixed, check_max_depth, depth_cap, exit_judge, parse_exit
from biosrecall.eval.gate import resolve_gates
from biosrecall.eval.plots import plot_exit_frontier
from biosrecall.eval.recall import RECALL_SHARE
from biosrecall.eval.scoring import BASELINE, FLOPS_ACCOUNT
from biosrecall.model.decode import greedy_decode
from biosrecall.outputs import FIGURE_FORMATS, TABLE_FORMATS, save_figure, write_table
from biosrecall.train.checkpoint_files import load_checkpoint, read_meta
from biosrecall.train.distributed import resolve_device
from biosrecall.train.run_folder import RunFolder

TABLE_NAME = "exit_frontier"
HEADLINE_NAME = "exit_headline"
# figure1's default: KL at a few thresholds, argmax stability, entropy, the readout-free latent
# (Huginn's 0.03) and accel, and the oracle's upper bound.
SERVING_CRITERIA = (
    "kl:1e-2,kl:1e-3,kl:1e-4,stable:2,stable:4,entropy:0.5,entropy:0.1,"
    "latent:0.03,latent:0.01,accel:0.03,accel:0.01,oracle"
)


def exit_frontier(run_dirs, criteria, checkpoints="final", **options) -> pd.DataFrame:
    """The frontier table (module doc) of the selected checkpoints of each run; `options` are
    `score_runs`' (max_depth, threshold, batch_size, device, data_dir, people, workers, threads...)."""
    return score_runs(run_dirs, checkpoints, criteria, recall=False, **options).frontier


def _shallowest(rows: pd.DataFrame, target: float) -> pd.Series | None:
    reaching = rows[rows["bits"] >= target - 1e-12]
    return None if reaching.empty else reaching.loc[reaching["mean_depth"].idxmin()]


def headline_table(frontier: pd.DataFrame, share: float = RECALL_SHARE) -> pd.DataFrame:
    """Per run and checkpoint: the mean depth (and FLOPs) needed to reach `share` of the run's own best
    fixed-depth recall, at a fixed depth against the best realisable criterion (the oracle apart)."""
    records = []
    for keys, rows in frontier.groupby(["run", "schedule", "checkpoint", "fraction"], sort=False):
        baseline = rows[rows["kind"] == BASELINE]
        best = float(baseline["bits"].max())
        target = share * best
        fixed = _shallowest(baseline, target)
        adaptive = _shallowest(rows[~rows["kind"].isin([BASELINE, "oracle"])], target)
        oracle = rows[rows["kind"] == "oracle"]
        records.append(
            {
                **dict(zip(["run", "schedule", "checkpoint", "fraction"], keys, strict=True)),
                "best_bits": best,
                "target_bits": target,
                "fixed_depth": math.nan if fixed is None else fixed["mean_depth"],
                "fixed_flops": math.nan if fixed is None else fixed["flops_per_query"],
                "adaptive_mean_depth": math.nan if adaptive is None else adaptive["mean_depth"],
                "adaptive_flops": math.nan if adaptive is None else adaptive["flops_per_query"],
                "adaptive_criterion": "" if adaptive is None else adaptive["criterion"],
                "oracle_mean_depth": float(oracle["mean_depth"].iloc[0]) if len(oracle) else math.nan,
            }
        )
    return pd.DataFrame.from_records(records)


def serving_names() -> list[str]:
    """The files `write_serving_results` makes in its folder."""
    frontier = [f"{TABLE_NAME}.{fmt}" for fmt in (*TABLE_FORMATS, *FIGURE_FORMATS)]
    return frontier + [f"{HEADLINE_NAME}.{fmt}" for fmt in TABLE_FORMATS]


def _is_current(out_dir: Path, frontier: pd.DataFrame) -> bool:
    """Every serving file is in `out_dir` and its frontier holds `frontier`'s runs, criteria and depths
    under the current FLOP account (False also when a file is unreadable)."""
    if not all((out_dir / name).is_file() for name in serving_names()):
        return False
    try:
        written = pd.read_parquet(out_dir / f"{TABLE_NAME}.parquet")
        pd.read_parquet(out_dir / f"{HEADLINE_NAME}.parquet")
        priced = bool((written["flops_account"] == FLOPS_ACCOUNT).all())
        keys = [_keys(table) for table in (written, frontier)]
    except (OSError, ValueError, KeyError):
        return False
    return priced and keys[0] == keys[1]


def _keys(frontier: pd.DataFrame) -> tuple:
    scored = set(frontier.loc[frontier["kind"] != BASELINE, "criterion"])
    deepest = int(frontier.loc[frontier["kind"] == BASELINE, "parameter"].max())
    return set(frontier["run"]), scored, deepest


def write_serving_results(out_dir, frontier: pd.DataFrame) -> tuple[list[Path], pd.DataFrame]:
    """The frontier table and figure and the headline table in `out_dir` (what `figure1` writes for
    its served checkpoints); files that already hold these runs, criteria and depths are kept, not
    rewritten. Returns the figure's files and the headline."""
    out_dir = Path(out_dir)
    figure = out_dir / TABLE_NAME
    if _is_current(out_dir, frontier):
        return [figure.with_suffix(".png"), figure.with_suffix(".pdf")], headline_table(frontier)
    written, headline = write_frontier(out_dir, frontier)
    return [path for path in written if path.suffix in (".png", ".pdf")], headline


def write_frontier(out_dir, frontier: pd.DataFrame) -> tuple[list[Path], pd.DataFrame]:
    """Write a frontier (table and figure) and its headline table into `out_dir`; returns every file
    written and the headline."""
    out_dir = Path(out_dir)
    headline = headline_table(frontier)
    written = write_table(frontier, out_dir / TABLE_NAME)
    written += save_figure(plot_exit_frontier(frontier), out_dir / TABLE_NAME)
    written += write_table(headline, out_dir / HEADLINE_NAME)
    return written, headline


def answer_prompt(
    run_dir,
    prompt: str,
    exit_spec: str,
    max_depth: int = 64,
    *,
    checkpoint: str = "final",
    max_new_tokens: int = 8,
    device: str = "auto",
    data_dir=None,
) -> list[tuple[str, int]]:
    """Greedy continuation of `prompt` by a run's checkpoint with the KV-cached decoder and a per-token
    exit by the one criterion `exit_spec` (`kl:1e-3`; `biosrecall.eval.exits`): (word, depth) per
    generated token, up to a full stop or a separator."""
    criteria = parse_exit(exit_spec)
    if len(criteria) != 1:
        raise BiosrecallError(f"--exit takes one criterion with its parameter, got {exit_spec!r}")
    check_max_depth(max_depth)
    label, path = RunFolder(run_dir).select_checkpoint(checkpoint)
    criterion = resolve_gates(criteria, run_dir, label, path, max_depth)[0]
    cap = depth_cap(criterion, max_depth)
    judge = None if isinstance(criterion, Fixed) else (lambda: exit_judge(criterion))
    meta = read_meta(path)
    dataset_path = RunFolder(run_dir).training_data(meta, data_dir)
    tokenizer = load_dataset(dataset_path).tokenizer
    words = split_words(prompt)
    ids = [tokenizer.token_to_id(word) for word in words]
    if not words:
        raise BiosrecallError("the prompt is empty")
    if None in ids:
        unknown = words[ids.index(None)].lstrip(SPACE_MARK)
        raise BiosrecallError(f"the word {unknown!r} is not in the vocabulary of {dataset_path}")
    model, _ = load_checkpoint(path, device=resolve_device(str(device)))
    sep = tokenizer.token_to_id(SEP_TOKEN)
    stops = {token for token in (sep, tokenizer.token_to_id(".")) if token is not None}
    result = greedy_decode(model, [sep, *ids], max_new_tokens, cap, judge, stop_ids=stops)
    return [
        (tokenizer.id_to_token(t).lstrip(SPACE_MARK), d)
        for t, d in zip(result.tokens, result.depths, strict=True)
    ]
