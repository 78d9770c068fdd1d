"""Greedy generation with a KV cache for the prelude, every block iteration and the coda, and a
per-token exit.

    result = greedy_decode(model, prompt_ids, max_new_tokens=8, max_depth=64, new_judge=judge_factory)
    result.tokens, result.depths        # generated ids, and the block iterations each one used
    greedy_decode(model, prompt_ids, 8, max_depth=4)    # no judge: every token at depth 4, which
                                                        # equals greedy decoding with forward(., 4)
    uncached_greedy(model, prompt_ids, 8, depth=4)      # the reference: a full forward per token
    for logits, depths in teacher_forced(model, windows, max_depth=16, new_judge=rows_judge_factory):
        ...                                             # per position: logits [B, V], exit depths [B]

`new_judge()` returns a fresh judge for one token; `judge(depth, logits [V])` is asked after each
iteration's readout and returns True to stop (`biosrecall.eval.exits.exit_judge` builds one from an
exit criterion, or `gate_cdf_judges` from a recipe's trained exit gate). Every token stops at
`max_depth` at the latest. A judge with `reads_state` set (a
readout-free criterion: `latent`, `accel`, or the learned `gate`) is asked with the token's recurrent state [d] instead, and
the token is read out only once, at the depth it stops at.

Cache semantics. The prompt minus its last token is prefilled in one pass at `max_depth` iterations.
Every later token (the last prompt token, then each generated one) runs the prelude once, then block
iterations 1, 2, ... with a readout (coda + head) after each (after the last only, for a judge that
reads the state) until its judge says stop at depth e.
At iteration i it attends to the cached K/V of iteration i of every earlier token; an earlier token
that stopped at e' < i offers the K/V of its last iteration e' instead (as Huginn does). In the coda
every earlier token offers the K/V of its readout at its own exit depth. Without a judge no token
stops early, so the cache holds exactly what `forward(tokens, max_depth)` computes. The decoder
computes nothing of its own: it runs the model's prelude (`start`), its recipe's iteration
(`recipe.step` on `run_block`) and its readout (`final_hidden`, `head_logits`), each stack's layers
with their `KVCache`; it only says which cache each call reads and writes.

Teacher forcing (`teacher_forced`, for scoring NLL with per-token exit). The given tokens [B, T] are
fed one position at a time, B rows side by side, with no prefill: every position, the first one
included, runs the same per-token exit as a generated token above, and its next-token distribution
is the readout at its own exit depth. So the logits at position t are what `greedy_decode` would
compute for that token had the sequence so far been generated; later positions see earlier ones
through the cache rule above, exactly as in generation. Rows are independent: a row that stopped
rides along until every row has stopped, and what its extra iterations compute is thrown away.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch

from biosrecall.errors import BiosrecallError
from biosrecall.model.layers import KVCache, Rope
from biosrecall.numbers import check_count

Judge = Callable[[int, torch.Tensor], bool]
# (depth, logits [B, V]) -> bool [B]: which rows stop (`biosrecall.eval.exits.exit_judge`); with
# `reads_state` set it is given the state [B, d] of the new token instead
RowsJudge = Callable[[int, torch.Tensor], torch.Tensor]


def _reads_state(judge) -> bool:
    """The judge decides from the recurrent state rather than a readout (a readout-free criterion)."""
    return bool(getattr(judge, "reads_state", False))


def _one_row(judge: Judge) -> RowsJudge:
    """A one-token judge as the judge of a single row, reading what it reads."""

    def rows_judge(depth: int, values: torch.Tensor) -> torch.Tensor:
        return torch.tensor([bool(judge(depth, values[0]))])

    rows_judge.reads_state = _reads_state(judge)
    return rows_judge


@dataclass(frozen=True)
class Decoded:
    """Greedy output: the generated token ids and the block iterations each one's prediction used."""

    tokens: list[int]
    depths: list[int]


class CachedDecoder:
    """The caches of `rows` sequences of equal length (one by default) and the ways of extending them:
    `prefill`, `step` (one row), `step_rows` (every row)."""

    def __init__(self, model, max_depth: int, rows: int = 1) -> None:
        check_count(max_depth, "max depth")
        cfg = model.config
        self.model, self.max_depth, self.length, self.rows = model, int(max_depth), 0, int(rows)
        param = next(model.parameters())
        shape = (2, self.rows, cfg.context_length, cfg.n_heads, cfg.head_dim)
        zeros = lambda *lead: torch.zeros(*lead, *shape, dtype=param.dtype, device=param.device)  # noqa: E731
        self.prelude, self.coda = zeros(cfg.n_prelude), zeros(cfg.n_coda)
        self.block = zeros(self.max_depth, cfg.n_block)  # [iteration - 1, layer, K/V, ...]

    def _check_room(self, count: int) -> None:
        if self.length + count > self.model.config.context_length:
            raise BiosrecallError(
                f"the sequence would exceed the model's context of {self.model.config.context_length} tokens"
            )

    def _caches(self, stores: torch.Tensor) -> list[KVCache]:
        """The `KVCache` of each layer of a stack (`stores` [layer, K/V, ...]) at the current length."""
        return [KVCache(store, self.length) for store in stores]

    def _iteration(self, state, inject, depth: int, rope: Rope) -> torch.Tensor:
        """Iteration `depth` as the model runs it, its block layers reading and writing this
        iteration's cache; the recipe is told the max depth as the call's total K."""
        caches = self._caches(self.block[depth - 1])
        return self.model._block_step(state, inject, rope, depth, self.max_depth, caches)

    def _readout(self, state: torch.Tensor, rope: Rope, head: bool = True) -> torch.Tensor | None:
        """The model's readout of the newest position through the coda's cache (only the cache's keys
        and values when `head` is False)."""
        hidden = self.model.final_hidden(state, rope, caches=self._caches(self.coda))
        return self.model.head_logits(hidden[:, -1]) if head else None

    def prefill(self, tokens: list[int]) -> None:
        """Run `tokens` (the first ones of the sequence) through every iteration up to the max depth."""
        self._check_room(len(tokens))
        ids = torch.tensor([tokens], device=self.block.device)
        rope, inject, state = self.model.start(ids, self.length, self._caches(self.prelude))
        for depth in range(1, self.max_depth + 1):
            state = self._iteration(state, inject, depth, rope)
        self._readout(state, rope, head=False)  # only the coda's K/V are needed
        self.length = len(tokens)

    def step(self, token: int, judge: Judge | None = None) -> tuple[torch.Tensor, int]:
        """Append one token; return its next-token logits [V] and the depth it stopped at."""
        rows_judge = None if judge is None else _one_row(judge)
        logits, depths = self.step_rows(torch.tensor([token]), rows_judge)
        return logits[0], int(depths[0])

    def step_rows(
        self, tokens: torch.Tensor, judge: RowsJudge | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Append one token to every row (int [B]); return each row's next-token logits [B, V] at the
        depth it stopped at, and those depths (int [B]). Without a judge every row runs to the max
        depth with a single readout; with one that reads the state, a readout happens only at a depth
        where some row stops."""
        self._check_room(1)
        ids = tokens.view(self.rows, 1).to(self.block.device)
        rope, inject, state = self.model.start(ids, self.length, self._caches(self.prelude))
        done = torch.zeros(self.rows, dtype=torch.bool, device=ids.device)
        exits = torch.full_like(ids[:, 0], self.max_depth)
        kept_logits = kept_coda = None
        for depth in range(1, self.max_depth + 1):
            state = self._iteration(state, inject, depth, rope)
            if judge is None and depth < self.max_depth:
                continue  # a fixed depth needs no decision, so no intermediate readout
            stop, logits = self._decide(depth, state, rope, judge, done)
            if logits is None:
                continue
            coda = self.coda[:, :, :, self.length]  # [layer, K/V, row, head, dim]
            first = kept_logits is None
            kept_logits = logits if first else torch.where(stop[:, None], logits, kept_logits)
            kept_coda = coda.clone() if first else torch.where(stop[:, None, None], coda, kept_coda)
            exits = torch.where(stop, depth, exits)
            done |= stop
            if bool(done.all()):
                break
        # Later tokens read each row's readout at its exit depth, and its last iteration's K/V deeper.
        self.coda[:, :, :, self.length] = kept_coda
        self._freeze_block(exits)
        self.length += 1
        return kept_logits, exits

    def _decide(self, depth: int, state, rope: Rope, judge: RowsJudge | None, done: torch.Tensor):
        """(rows that stop at `depth`, the readout's logits [B, V]); the logits are None when a judge
        that reads the state stops no row, because then nothing needs reading out."""
        last = depth == self.max_depth
        if judge is not None and _reads_state(judge):
            stop = ~done if last else ~done & judge(depth, state[:, -1]).to(done.device)
            return stop, (self._readout(state, rope) if bool(stop.any()) else None)
        logits = self._readout(state, rope)
        return (~done if last else ~done & judge(depth, logits).to(done.device)), logits

    def _freeze_block(self, exits: torch.Tensor) -> None:
        """At the newest position, iterations beyond a row's exit depth get the K/V of its exit one."""
        iterations = torch.arange(self.max_depth, device=exits.device)
        offered = torch.minimum(iterations[:, None], exits[None, :] - 1)  # [iteration, row]
        newest = self.block[:, :, :, :, self.length].permute(0, 3, 1, 2, 4, 5)  # [it, row, layer, K/V, ...]
        picked = newest[offered, torch.arange(self.rows, device=exits.device)[None, :]]
        self.block[:, :, :, :, self.length] = picked.permute(0, 2, 3, 1, 4, 5)


def gate_cdf_judges(model, q: float) -> Callable[[], RowsJudge]:
    """For a recipe that trains an exit gate (`Recipe.exit_gate`, e.g. ouro-gate): a factory of fresh
    judges that stop a row at the first depth where its exit CDF, 1 - prod_{i<=t} (1 - lambda_i),
    reaches `q` (in (0, 1], as the `cdf:q` exit criterion's parser ensures). It reads the state, so a
    token is read out once, at its exit."""
    if not model.recipe.exit_gate:
        raise BiosrecallError(f"recipe {model.recipe.name} trains no exit gate to read")

    def new_judge() -> RowsJudge:
        survival = []

        def judge(depth: int, state: torch.Tensor) -> torch.Tensor:
            stay = 1 - model.recipe.gate(model, state).float()
            survival[:] = [stay if not survival else survival[0] * stay]
            return 1 - survival[0] >= q

        judge.reads_state = True
        return judge

    return new_judge


def greedy_decode(
    model,
    prompt: list[int],
    max_new_tokens: int,
    max_depth: int,
    new_judge: Callable[[], Judge] | None = None,
    stop_ids=(),
    stop: Callable[[list[int]], bool] | None = None,
) -> Decoded:
    """Greedy generation of up to `max_new_tokens` tokens, stopping after any of `stop_ids` or once
    `stop(tokens generated so far)` says so (e.g. a stop string in their text)."""
    if not prompt:
        raise BiosrecallError("the prompt is empty")
    decoder = CachedDecoder(model, max_depth)
    tokens, depths = [], []
    with torch.inference_mode():
        if len(prompt) > 1:
            decoder.prefill(list(prompt[:-1]))
        token = prompt[-1]
        for _ in range(max_new_tokens):
            logits, depth = decoder.step(token, None if new_judge is None else new_judge())
            token = int(logits.argmax())
            tokens.append(token)
            depths.append(depth)
            full = decoder.length >= model.config.context_length
            if token in stop_ids or full or (stop is not None and stop(tokens)):
                break
    return Decoded(tokens, depths)


def uncached_greedy(model, prompt: list[int], max_new_tokens: int, depth: int) -> list[int]:
    """Greedy generation with a full `forward(tokens, depth)` per new token: the reference."""
    device = next(model.parameters()).device
    sequence = torch.tensor([prompt], device=device)
    with torch.inference_mode():
        for _ in range(max_new_tokens):
            next_token = model(sequence, depth)[0, -1].argmax()
            sequence = torch.cat([sequence, next_token.view(1, 1)], dim=1)
    return sequence[0, len(prompt) :].tolist()


def teacher_forced(
    model, tokens: torch.Tensor, max_depth: int, new_judge: Callable[[], RowsJudge] | None = None
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Feed `tokens` [B, T] one position at a time with a per-token exit (module doc, "Teacher
    forcing"); yield, per position, the next-token logits [B, V] at each row's exit depth and those
    depths (int [B]). `new_judge()` gives a fresh judge for one position of every row; without one,
    every position runs to `max_depth` (what `forward(tokens, max_depth)` computes)."""
    with torch.no_grad():  # entered per step, never held across a yield
        decoder = CachedDecoder(model, max_depth, rows=tokens.shape[0])
    for position in range(tokens.shape[1]):
        with torch.no_grad():
            step = decoder.step_rows(tokens[:, position], None if new_judge is None else new_judge())
        yield step
