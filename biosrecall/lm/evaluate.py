"""Validation NLL per token of a trained looped LM at every serving depth, from one all-depth sweep.

    table = evaluate_run("runs/lm-ff")                     # final checkpoint, serving depths 1..16
    table = evaluate_run("runs/lm-ff", checkpoints="all", max_sequences=512)
    summarize(table)                                       # mean serving-depth NLL per checkpoint
    exits, _ = evaluate_exits("runs/lm-ff", parse_exits("kl:5e-4,stable:2"), sequences=64)
    norms = evaluate_state_norms("runs/lm-ff", max_depth=64)   # {label: state RMS per depth}, cached
    # CLI: biosrecall lm eval runs/lm-ff [--checkpoint all|final|switch|0.45,1.0] [--max-sequences N]
    #      [--exit kl:5e-4,stable:2 --val-sequences 64 [--applicable-exits]] [--state-norms]

Checkpoints are chosen with the selector syntax of `biosrecall.train.run_folder` (the same in every command); the
corpus is the one the run recorded, or `data_dir`, whose tokenizer must be the run's.

Each validation batch runs through the model once, `forward_all_depths` reading out logits after
every requested depth (the state after k iterations does not depend on how many follow), so a curve
over K = 1..16 costs one 16-iteration pass. NLL is the mean cross-entropy in nats over every target
token of the validation windows (the same windows, in stream order, for every run and checkpoint).

The table is written atomically to RUN_DIR/eval/nll.csv and RUN_DIR/eval/nll.parquet, one row per
(checkpoint, depth): run, schedule, checkpoint, update, flops, train_tokens, wall_seconds, depth, nll,
eval_tokens. The mean serving-depth NLL is the unweighted mean of `nll` over depths 1..16.

Per-token exit (`evaluate_exits`, exit criteria of `biosrecall.eval.exits`, capped at the max serving
depth) scores the first `sequences` validation windows with `biosrecall.model.decode.teacher_forced`:
each window is fed one token at a time through the KV-cached decoder, every position stops at the
first depth its criterion holds on its own readout (on its own recurrent state for the readout-free
`latent` and `accel`, and the learned `gate`, fitted by `biosrecall gate train`), and its next-token distribution is read there; later positions attend to an
earlier one's last-iteration K/V (the decoder's cache semantics). That is sequential in position, so
it is far slower than the one-pass sweep, hence the smaller default window count. Each position is
a decision of its own, so a criterion's NLL is not the NLL of any one fixed depth; to compare like
with like the table also holds the fixed-depth baseline on the same windows. It goes to
RUN_DIR/eval/nll_exit.{csv,parquet}, one row per (checkpoint, criterion): the run columns above,
then criterion (its text, or "K=<k>" for the baseline), kind ("fixed-depth", "fixed",
"kl", "stable", "entropy", "latent", "accel", "gate"), parameter, nll, mean_depth, p95_depth (exit depth over
target tokens), eval_tokens. With `applicable` (`lm eval --applicable-exits`) each checkpoint is scored
on the criteria its recipe can serve (`eval.gate.servable_criteria`; `evaluate_exits` also returns the
others, each with why).

`evaluate_state_norms` (`lm eval --state-norms`): the recurrent state's RMS after each depth on the
first validation windows, cached in each checkpoint folder (`biosrecall.eval.state_norms`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

from biosrecall.errors import BiosrecallError
from biosrecall.eval.exits import (
    LEARNED,
    Fixed,
    check_max_depth,
    check_servable,
    depth_cap,
    exit_judge,
    parameter_of,
    parse_exits,
)
from biosrecall.eval.gate import bind_gates
from biosrecall.eval.state_norms import LM_WINDOWS, cached_state_norms
from biosrecall.lm.loader import validation_batches
from biosrecall.lm.shard_manifest import load_manifest
from biosrecall.model.decode import teacher_forced
from biosrecall.outputs import write_table
from biosrecall.train.checkpoint_files import load_checkpoint
from biosrecall.train.distributed import autocast_for, resolve_device
from biosrecall.train.run_folder import EVAL_DIR, RunFolder, seq_len_of

SERVING_DEPTHS = tuple(range(1, 17))
TABLE = "nll"
EXIT_TABLE = "nll_exit"
BASELINE = "fixed-depth"
DEFAULT_EXIT_SEQUENCES = 64


def depth_nll(model, batches: Iterable[np.ndarray], depths: Sequence[int], device, autocast) -> pd.DataFrame:
    """Mean NLL per target token at each depth over `batches` (int64 [B, T + 1] windows)."""
    depths = sorted(set(depths))
    sums, tokens = np.zeros(len(depths)), 0
    for rows in batches:
        window = torch.from_numpy(rows).to(device)
        inputs, targets = window[:, :-1], window[:, 1:].flatten()
        with autocast():
            for index, (_, logits) in enumerate(model.forward_all_depths(inputs, depths)):
                loss = F.cross_entropy(logits.float().flatten(0, 1), targets, reduction="sum")
                sums[index] += float(loss)
        tokens += targets.numel()
    return pd.DataFrame({"depth": depths, "nll": sums / tokens, "eval_tokens": tokens})


def check_data(run_config: dict, data_dir: Path) -> None:
    """The validation shards must use the tokenizer the run was trained with."""
    trained = run_config.get("dataset", {}).get("tokenizer_sha256")
    given = load_manifest(data_dir)["tokenizer"]["sha256"]
    if trained is not None and trained != given:
        raise BiosrecallError(
            f"{data_dir} was prepared with tokenizer {given[:12]}..., but the run was trained with "
            f"{trained[:12]}...: tokenizer and shards do not match"
        )


class LMSetup(NamedTuple):
    """What evaluating a run needs, checked before any model is loaded (`lm_setup`)."""

    config: dict
    chosen: dict
    data_dir: Path
    seq_len: int
    device: torch.device
    autocast: object


def lm_setup(run_dir: Path, checkpoints, data_dir, device, precision) -> LMSetup:
    """The `LMSetup` of an LM run's chosen checkpoints; a bioS run, or shards of another tokenizer, is
    refused in one line."""
    run = RunFolder(run_dir)
    config = run.read_config()
    if config.get("task", {}).get("name") != "lm":
        raise BiosrecallError(f"{run_dir} is not a language-model run (train it with `biosrecall lm train`)")
    chosen = run.select_checkpoints(checkpoints)
    data_dir = run.training_data(config, data_dir)
    check_data(config, data_dir)
    target = resolve_device(device)
    return LMSetup(config, chosen, data_dir, seq_len_of(config), target, autocast_for(target, precision))


def evaluate_run(
    run_dir: str | Path,
    *,
    checkpoints="final",
    data_dir: str | Path | None = None,
    depths: Sequence[int] = SERVING_DEPTHS,
    batch_size: int = 8,
    max_sequences: int | None = None,
    device: str = "auto",
    precision: str = "auto",
) -> pd.DataFrame:
    """Evaluate the checkpoints `checkpoints` selects (selector text or repeated
    values) of an LM run on the validation split; write and return the table."""
    run_dir = Path(run_dir)
    setup = lm_setup(run_dir, checkpoints, data_dir, device, precision)

    def score(_, model):
        batches = validation_batches(setup.data_dir, setup.seq_len, batch_size, max_windows=max_sequences)
        return depth_nll(model, batches, depths, setup.device, setup.autocast)

    return score_checkpoints(run_dir, setup, setup.chosen, score, TABLE)


def score_checkpoints(run_dir: Path, setup: LMSetup, chosen: dict, score, table: str | None) -> pd.DataFrame:
    """`score(label, model)` of each checkpoint in `chosen` ({label: folder}), one model loaded at a time,
    prefixed with the run and checkpoint columns (run, schedule, checkpoint, update, flops,
    train_tokens, wall_seconds); written as the run's eval table `table` (None: not written) and
    returned. `lm eval` and `lm harness` share it."""
    tables = []
    for name, path in chosen.items():
        model, meta = load_checkpoint(path, device=setup.device)
        scores = score(name, model)
        columns = {
            "run": run_dir.name,
            "schedule": setup.config["plan"]["schedule"],
            "checkpoint": name,
            "update": int(meta["update"]),
            "flops": float(meta["flops"]),
            "train_tokens": int(meta["tokens"]),
            "wall_seconds": float(meta["wall_seconds"]),
        }
        tables.append(pd.DataFrame({**columns, **{c: scores[c] for c in scores.columns}}))
    result = pd.concat(tables, ignore_index=True)
    if table is not None:
        write_table(result, RunFolder(run_dir).eval_dir / table)
    return result


def evaluate_state_norms(
    run_dir: str | Path,
    *,
    checkpoints="final",
    data_dir: str | Path | None = None,
    max_depth: int = max(SERVING_DEPTHS),
    windows: int = LM_WINDOWS,
    device: str = "auto",
) -> dict[str, pd.DataFrame]:
    """{checkpoint label: the recurrent state's RMS per depth 1..`max_depth`} on the first `windows`
    validation windows, each cached in its checkpoint folder (`biosrecall.eval.state_norms`)."""
    setup = lm_setup(Path(run_dir), checkpoints, data_dir, device, "fp32")

    def batches():
        return [
            (torch.from_numpy(rows[:, :-1]), None)
            for rows in validation_batches(setup.data_dir, setup.seq_len, windows, max_windows=windows)
        ]

    corpus = load_manifest(setup.data_dir)["tokenizer"]["sha256"]
    source = {"windows": windows, "seq_len": setup.seq_len, "tokenizer_sha256": corpus}
    return {
        name: cached_state_norms(path, batches, source, max_depth, setup.device)
        for name, path in setup.chosen.items()
    }


def criterion_nll(model, windows: Sequence[np.ndarray], criterion, max_depth: int, device, autocast):
    """(mean NLL per target token, exit depth of every target token) of `windows` under per-token exit
    (module doc); `fixed:K` needs no decision, so it runs without intermediate readouts."""

    cap = depth_cap(criterion, max_depth)
    new_judge = None if isinstance(criterion, Fixed) else (lambda: exit_judge(criterion))
    total, depths = torch.zeros((), dtype=torch.float64, device=device), []
    for rows in windows:
        window = torch.from_numpy(rows).to(device)
        inputs, targets = window[:, :-1], window[:, 1:]
        with autocast():
            for position, (logits, exits) in enumerate(teacher_forced(model, inputs, cap, new_judge)):
                total += F.cross_entropy(logits.float(), targets[:, position], reduction="sum")
                depths.append(exits)
    depths = torch.cat(depths).cpu().numpy()
    return float(total) / depths.size, depths


def exit_nll(
    model, windows: Sequence[np.ndarray], criteria, max_depth: int, device, autocast
) -> pd.DataFrame:
    """The fixed-depth baseline K = 1..max_depth, then each criterion, on the same windows (module doc)."""
    baseline = depth_nll(model, windows, range(1, max_depth + 1), device, autocast)
    records = [
        {
            "criterion": f"K={k}",
            "kind": BASELINE,
            "parameter": float(k),
            "nll": nll,
            "mean_depth": float(k),
            "p95_depth": float(k),
            "eval_tokens": int(tokens),
        }
        for k, nll, tokens in baseline[["depth", "nll", "eval_tokens"]].itertuples(index=False)
    ]
    for criterion in criteria:
        nll, depths = criterion_nll(model, windows, criterion, max_depth, device, autocast)
        records.append(
            {
                "criterion": criterion.spec,
                "kind": criterion.name,
                "parameter": parameter_of(criterion),
                "nll": nll,
                "mean_depth": float(depths.mean()),
                "p95_depth": float(np.percentile(depths, 95)),
                "eval_tokens": int(depths.size),
            }
        )
    return pd.DataFrame.from_records(records)


def exit_criteria(
    exits: Sequence[str], run_dirs, checkpoints, max_depth: int, applicable: bool = False
) -> list:
    """The criteria of `exits` (none when it is empty), and the checkpoints `checkpoints` selects in each
    of `run_dirs`, all checked before the first model loads: a `gate:delta` against each selected
    checkpoint's fitted gate, every other criterion for serving a language model. With `applicable`, a
    checkpoint is checked only against those its recipe can serve (`eval.gate.servable_criteria`)."""
    criteria = parse_exits(exits) if exits else []
    learned = [criterion for criterion in criteria if isinstance(criterion, LEARNED)]
    if len(learned) < len(criteria):  # a gate is checked against each run's fitted one below
        check_servable([criterion for criterion in criteria if criterion not in learned])
    for run_dir in run_dirs:  # every run's selection (and gate) is checked before the first one is evaluated
        _served(criteria, run_dir, RunFolder(run_dir).select_checkpoints(checkpoints), max_depth, applicable)
    return criteria


def _served(criteria, run_dir, chosen: dict, max_depth: int, applicable: bool) -> tuple[dict, list[str]]:
    """({label: the criteria it is scored on, every gate:delta bound to its fitted gate} for each checkpoint
    of `chosen` that serves any, ["<label>: <criterion>: why" for each left out]); with `applicable` a
    checkpoint keeps the criteria its recipe can serve, else all of them (or one error)."""
    served, skipped = {}, []
    for label, path in chosen.items():
        usable, left_out = bind_gates(criteria, run_dir, label, path, max_depth, applicable)
        skipped += [f"{label}: {line}" for line in left_out]
        if usable:
            served[label] = check_servable(usable)
    return served, skipped


def evaluate_exits(
    run_dir: str | Path,
    criteria,
    *,
    checkpoints="final",
    data_dir: str | Path | None = None,
    max_depth: int = max(SERVING_DEPTHS),
    batch_size: int = 8,
    sequences: int = DEFAULT_EXIT_SEQUENCES,
    device: str = "auto",
    precision: str = "auto",
    applicable: bool = False,
) -> tuple[pd.DataFrame | None, list[str]]:
    """NLL with per-token exit of each criterion (parsed, e.g. `parse_exits("kl:5e-4")`) on the first
    `sequences` validation windows of the chosen checkpoints; write the table (module doc) and return
    it with the criteria left out ("<checkpoint>: <criterion>: why"). With `applicable` a checkpoint is
    scored on the criteria its recipe can serve, and one that can serve none is left out: the table is
    None, and nothing is written, when none can."""

    run_dir, max_depth = Path(run_dir), check_max_depth(max_depth)
    setup = lm_setup(run_dir, checkpoints, data_dir, device, precision)
    # Every gate:delta bound to its checkpoint's fitted gate (or refused) before the first model loads.
    resolved, skipped = _served(criteria, run_dir, setup.chosen, max_depth, applicable)
    if not resolved:
        return None, skipped
    windows = list(validation_batches(setup.data_dir, setup.seq_len, batch_size, max_windows=sequences))

    def score(name, model):
        return exit_nll(model, windows, resolved[name], max_depth, setup.device, setup.autocast)

    scored = {name: setup.chosen[name] for name in resolved}
    return score_checkpoints(run_dir, setup, scored, score, EXIT_TABLE), skipped


def read_table(run_dir: str | Path) -> pd.DataFrame:
    """A run's evaluation table, with a pointer to `lm eval` when there is none."""
    table = read_eval_table(run_dir, TABLE)
    if table is None:
        raise BiosrecallError(
            f"{run_dir} has no {EVAL_DIR}/{TABLE}.parquet (run `biosrecall lm eval {run_dir}`)"
        )
    return table


def summarize(table: pd.DataFrame) -> pd.DataFrame:
    """Per checkpoint: mean NLL over its depths, NLL at the smallest and largest depth."""
    rows = []
    keys = ["run", "schedule", "checkpoint", "update", "flops", "train_tokens", "wall_seconds"]
    for key, group in table.groupby(keys, sort=False):
        group = group.sort_values("depth")
        first, last = group.iloc[0], group.iloc[-1]
        rows.append(
            {
                **dict(zip(keys, key, strict=True)),
                "mean_nll": float(group["nll"].mean()),
                f"nll_k{int(first['depth'])}": float(first["nll"]),
                f"nll_k{int(last['depth'])}": float(last["nll"]),
            }
        )
    return pd.DataFrame(rows).sort_values(["run", "update"], ignore_index=True)


def read_eval_table(run_dir: str | Path, name: str) -> pd.DataFrame | None:
    """A run's table `name` in its eval folder (`EXIT_TABLE`, `biosrecall.lm.harness.TABLE`), or None
    when it has none."""
    path = RunFolder(run_dir).eval_dir / f"{name}.parquet"
    return pd.read_parquet(path) if path.is_file() else None
