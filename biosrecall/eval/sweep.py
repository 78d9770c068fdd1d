"""Exact-answer flags of a looped model on an `EvalSet`, for every serving depth from one pass.

An item (person, attribute, template) is exact at depth K when greedy decoding of its prompt at depth
K reproduces every answer token. With teacher forcing that is one forward over prompt + answer: the
argmax at each answer-predicting position (answer_start - 1 .. answer_start + answer_len - 2) must equal
the next answer token. Rows are right-padded and attention is causal, so padding never reaches an
answer position and no mask is needed. The queries and MLP of the last coda layer and the vocabulary
head run only at answer-predicting positions (`positions=` of `forward_all_depths`), so depths 1..64
cost one 64-deep pass plus 64 readouts that are each much cheaper than a layer.

    exact = exact_by_depth(model, dataset.eval_set(), max_depth=64)  # bool [64, M]; row k-1 is depth k
    exact_at_depth(model, eval_set, 4)      # bool [M]: one depth, full forward (the slow reference)
    batch = answer_batch(eval_set, rows, device)  # the layout, for a scorer of its own (the diagnostic)
    exact_rows(model(batch.tokens, 4)[batch.positions], batch)  # bool [len(rows)]

Rows are sorted by length and each batch is trimmed to its longest row, which keeps padding small.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import torch
from tqdm.std import tqdm  # plain text everywhere: tqdm.auto warns in a notebook without ipywidgets

from biosrecall.errors import BiosrecallError
from biosrecall.eval.exits import LogitTrail, StateTrail, StepStats, check_max_depth
from biosrecall.numbers import check_count

DEFAULT_BATCH_SIZE = 256


@dataclass(frozen=True)
class AnswerBatch:
    """One slice of the eval set laid out for teacher-forced answer scoring (`answer_batch`): the model
    reads `tokens` and is scored only at `positions`, where each position must predict its target."""

    rows: np.ndarray  # eval-set row indices, in the batch's order
    tokens: torch.Tensor  # int64 [B, T], trimmed to the last answer-predicting position
    positions: torch.Tensor  # bool [B, T], the answer-predicting positions
    targets: torch.Tensor  # int64 [P], the token each True position must predict (row-major order)
    row_of_target: torch.Tensor  # int64 [P], which batch row each target belongs to


def plan_batches(eval_set, batch_size: int) -> list[np.ndarray]:
    """Row indices per batch, rows sorted by answer end so that batch-mates have similar lengths."""
    check_count(batch_size, "batch size")
    answer_end = np.asarray(eval_set.answer_start) + np.asarray(eval_set.answer_len)
    order = np.argsort(answer_end, kind="stable")
    return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]


def answer_batch(eval_set, rows: np.ndarray, device: torch.device) -> AnswerBatch:
    """The eval-set rows `rows` as one batch on `device`, trimmed to the batch's last answer-predicting
    position. `recall-curve` and the update diagnostic both score answers from this layout, so both
    mean the same thing by "exact"."""
    start = np.asarray(eval_set.answer_start)[rows]
    length = np.asarray(eval_set.answer_len)[rows]
    # The last answer token is only a target, never an input, so the input ends one token earlier.
    width = int((start + length - 1).max())
    full = torch.as_tensor(np.asarray(eval_set.tokens)[rows, : width + 1], dtype=torch.long)
    column = torch.arange(width)
    first = torch.as_tensor(start - 1)[:, None]
    positions = (column >= first) & (column < first + torch.as_tensor(length)[:, None])
    targets = full[:, 1:][positions]
    row_of_target = torch.nonzero(positions)[:, 0]
    return AnswerBatch(
        rows=rows,
        tokens=full[:, :width].to(device),
        positions=positions.to(device),
        targets=targets.to(device),
        row_of_target=row_of_target.to(device),
    )


def exact_rows(logits: torch.Tensor, batch: AnswerBatch) -> torch.Tensor:
    """bool [B]: every answer position of each row of `batch` predicts its target, given the [P, V]
    logits at `batch.positions` (row-major, as `forward_all_depths(..., positions=)` yields them)."""
    wrong = (logits.argmax(dim=-1) != batch.targets).long()
    wrong_per_row = torch.zeros(len(batch.rows), dtype=torch.long, device=wrong.device)
    wrong_per_row.index_add_(0, batch.row_of_target, wrong)
    return wrong_per_row == 0


def progress_bar(batches: list, enabled: bool | None, description: str):
    """A plain-text bar over `batches` on stderr; `enabled` None: only when stderr is a terminal."""
    interactive = sys.stderr.isatty() if enabled is None else enabled
    return tqdm(
        batches, desc=description, unit="batch", file=sys.stderr, disable=not interactive, leave=False
    )


def answer_batches(
    model,
    eval_set,
    batch_size: int = DEFAULT_BATCH_SIZE,
    *,
    device: str | torch.device | None = None,
    progress: bool | None = False,
    label: str = "",
) -> Iterator[AnswerBatch]:
    """The eval set as `answer_batch`es on `device` (default: the model's), with the model in eval mode
    and autograd off until the last one is consumed: how every scorer of the eval set walks it.
    `progress` None shows a bar titled `label` only when stderr is a terminal. The caller's training
    mode is restored after."""
    if device is None:
        parameter = next(iter(model.parameters()), None) if hasattr(model, "parameters") else None
        device = "cpu" if parameter is None else parameter.device
    device = torch.device(device)
    was_training = getattr(model, "training", False)
    if hasattr(model, "eval"):
        model.eval()  # no dropout
    try:
        with torch.inference_mode():
            for rows in progress_bar(plan_batches(eval_set, batch_size), progress, label):
                yield answer_batch(eval_set, rows, device)
    finally:
        if was_training:
            model.train()


def exact_by_depth(
    model,
    eval_set,
    max_depth: int = 64,
    *,
    batch_size: int = DEFAULT_BATCH_SIZE,
    device: str | torch.device | None = None,
    progress: bool | None = None,
    label: str = "recall sweep",
) -> np.ndarray:
    """bool [max_depth, M]: item m is exact at depth k (row k - 1), from one max_depth-deep pass per batch.

    `device` defaults to the model's; `progress` None shows a bar (titled `label`) only when stderr
    is a terminal.
    """
    check_count(max_depth, "max depth")
    depths = list(range(1, max_depth + 1))
    exact = np.zeros((max_depth, len(eval_set.answer_start)), dtype=bool)
    for batch in answer_batches(model, eval_set, batch_size, device=device, progress=progress, label=label):
        outputs = model.forward_all_depths(batch.tokens, depths, positions=batch.positions)
        # Flags stay on the device until the batch is done: one transfer per batch, not per depth.
        flags = [exact_rows(logits, batch) for _, logits in outputs]
        exact[:, batch.rows] = torch.stack(flags).cpu().numpy()
    return exact


def exact_at_depth(
    model,
    eval_set,
    depth: int,
    *,
    batch_size: int = DEFAULT_BATCH_SIZE,
    device: str | torch.device | None = None,
) -> np.ndarray:
    """bool [M] at one serving depth with plain `forward(tokens, depth)`: the per-K reference."""
    check_count(depth, "depth")
    exact = np.zeros(len(eval_set.answer_start), dtype=bool)
    for batch in answer_batches(model, eval_set, batch_size, device=device):
        logits = model.forward(batch.tokens, depth)[batch.positions]
        exact[batch.rows] = exact_rows(logits, batch).cpu().numpy()
    return exact


def answer_stats_by_depth(
    model,
    eval_set,
    max_depth: int = 64,
    *,
    batch_size: int = DEFAULT_BATCH_SIZE,
    device: str | torch.device | None = None,
    progress: bool | None = None,
    label: str = "exit statistics",
    states: bool = False,
):
    """`StepStats` of numpy [max_depth, M] arrays (row k - 1 is depth k) from one all-depth pass: per
    query, the largest KL and entropy and the smallest unchanged-argmax count over its answer-predicting
    positions, and its exact flag (equal to `exact_by_depth`). A whole-query exit criterion scored on
    these holds exactly when it holds at every answer position. With `states`, the same pass also
    observes the recurrent state after each iteration (what the last block layer returns) and adds the
    largest `StateTrail` latent and accel over each query's positions, for the readout-free criteria."""

    max_depth = check_max_depth(max_depth)
    shape = (max_depth, len(eval_set.answer_start))
    fields = {"kl": np.zeros(shape), "entropy": np.zeros(shape), "unchanged": np.zeros(shape, dtype=np.int64)}
    if states:
        fields.update(latent=np.zeros(shape), accel=np.zeros(shape))
    exact = np.zeros(shape, dtype=bool)
    for batch in answer_batches(model, eval_set, batch_size, device=device, progress=progress, label=label):
        per_depth, flags = {name: [] for name in fields}, []
        with _observing_states(model, batch, per_depth if states else None):
            trail = LogitTrail()
            for _, logits in model.forward_all_depths(
                batch.tokens, range(1, max_depth + 1), positions=batch.positions
            ):
                stats = trail.observe(logits)
                flags.append(exact_rows(logits, batch))
                for name, reduce in (("kl", "amax"), ("entropy", "amax"), ("unchanged", "amin")):
                    per_depth[name].append(
                        reduce_rows(getattr(stats, name), batch.row_of_target, len(batch.rows), reduce)
                    )
        exact[:, batch.rows] = torch.stack(flags).cpu().numpy()
        for name, values in per_depth.items():
            fields[name][:, batch.rows] = torch.stack(values).cpu().numpy()
    return StepStats(exact=exact, **fields)


@contextmanager
def _observing_states(model, batch: AnswerBatch, per_depth: dict | None) -> Iterator[None]:
    """While the model iterates, append each iteration's per-row largest latent and accel (`StateTrail`,
    float64, of the states its recipe's steps return) to `per_depth`; nothing when it is None."""
    if per_depth is None:
        yield
        return

    if not getattr(model, "block", None) or not hasattr(model, "observing_states"):
        raise BiosrecallError("latent and accel need a looped model whose recurrent block can be observed")
    check_one_trajectory(model, "latent and accel")
    trail = StateTrail()

    def observe(state):
        stats = trail.observe(state[batch.positions])
        for name in ("latent", "accel"):
            values = getattr(stats, name).double()
            per_depth[name].append(reduce_rows(values, batch.row_of_target, len(batch.rows), "amax"))

    with model.observing_states(observe):
        yield


def check_one_trajectory(model, what: str) -> None:
    """Refuse to observe a depth sweep's states as one trajectory when the model's recipe runs a call
    per depth (its iterations are told K: `Recipe.prefix_consistent` False, e.g. loopformer)."""
    recipe = getattr(model, "recipe", None)
    if recipe is not None and not recipe.prefix_consistent:
        raise BiosrecallError(
            f"{what} read the states of one pass over the depths, but recipe {recipe.name} runs a pass per "
            "depth (its iterations are told K)"
        )


def reduce_rows(values: torch.Tensor, row_of: torch.Tensor, rows: int, reduce: str) -> torch.Tensor:
    """[..., rows]: `reduce` ("amax"/"amin") of per-position `values` [..., P] over each row's positions
    (`row_of` [P]: the row of each position; every row has one)."""
    out = torch.zeros((*values.shape[:-1], rows), dtype=values.dtype, device=values.device)
    return out.scatter_reduce(-1, row_of.expand_as(values), values, reduce, include_self=False)
