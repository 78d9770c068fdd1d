"""Stored bits of a model, two ways, per serving depth: exact-match bits and the 3.3 paper's loss bound.

    table = stored_bits_table(model, dataset.eval_set(), dataset.pool_sizes, depths=[1, 4, 16, 64])
    table[["depth", "exact_bits", "loss_bound_bits", "loss_bound_bits_per_param"]]

One row per serving depth: depth, people, ceiling_bits (people x sum of log2 pool sizes), exact_bits,
loss_bound_bits, value_loss_nats, recall, parameters and non_embedding_parameters (from
`compute.flops.param_counts`, the one parameter account), and each measure divided by each count:
exact_bits_per_param, exact_bits_per_nonembedding_param, loss_bound_bits_per_param,
loss_bound_bits_per_nonembedding_param; then threshold. Both measures come from one
`forward_all_depths` pass per batch over the evaluation rows, laid out and judged as the recall sweep
does (`eval.sweep.answer_batch`, `exact_rows`).

Exact-match bits. A fact (person, attribute) is recalled when at least `threshold` (4) of its 5
evaluation prompts are exact (`eval.recall.score_exact`); stored bits = people x recalled bits per
person, each recalled fact counting log2(pool size).

Loss bound: the definition. Allen-Zhu and Li, "Physics of Language Models: Part 3.3, Knowledge Capacity
Scaling Laws", arXiv:2404.05405 (v1, April 2024), Theorem 3.2 (bit complexity lower bound) and, for the
bioS biographies, Definition 4.3: a model F with P parameters trained on bioS(N) stores

    N log2(N0 / e^p1) + N log2(S0 / e^p2)   bits, a capacity ratio of that divided by P,

where N0 is the number of possible names, S0 the product of the attribute pool sizes,
p1 = loss_name = E_n [-ln Pr(F generates name n)] and p2 = loss_value = E_n sum_a [-ln Pr(F, given
(n, a), generates the value v*(n, a))], all in nats. Per Remark 3.1 these probabilities come from the
autoregressive cross-entropy, summed (not averaged) over the tokens of the name or value, whatever the
tokenizer. The theorem bounds the bits of the weights, log2 |W|, from below, in expectation over the
randomly drawn data; a perfect model attains the upper bound, N log2(N0 / N) + N log2 S0.

What this module computes: the value term, loss_bound_bits = N log2(S0 / e^p2)
= sum over people n and attributes a of [log2 |pool_a| - l(n, a) / ln 2], with l(n, a) the
cross-entropy of fact (n, a) in nats. value_loss_nats is p2. Differences from the paper's setting:

- No name term. The paper adds N log2(N0 / e^p1) for knowing which N of the N0 possible names exist.
  Issue 27 asks for the value-token bound, and exact-match bits count attribute values only, so both
  columns count the same knowledge; our prompts always give the name and never ask for one. (Our
  name space would be the product of the first, middle and last name pools.)
- Our pools. The paper's S0 is 2 x (12 x 28 x 200) x 200 x 300 x 100 x 263 (gender, a birth date with
  a year, city, university, major, employer; the working city follows the employer). Ours are the six
  `ATTRIBUTES`, each value drawn uniformly and independently from the first n entries of a fixed list,
  so log2 |pool_a| is exactly the attribute's entropy and the uniform distribution over each pool is
  the right reference. As in the paper's bioS variant (no diversity term of Definition 4.1), the lists
  themselves are prior knowledge that is not counted.
- Multi-token values. l(n, a) sums the token cross-entropies over the whole answer span, which is
  -ln Pr(value) by the chain rule. The span has no end marker, so these probabilities sum to at most 1
  over a pool only when no value's tokens are a prefix of another value's: true of the frozen pools
  in the word-level tokenizer; a pools folder of one's own that breaks it makes the bound optimistic.
- Which text. The paper takes the losses on the training biographies. We take them on the
  evaluation prompts, `[sep] + prompt + answer` teacher-forced, the very rows and positions
  exact-match scoring reads, and average l over a fact's 5 prompts. Why: (1) the two measures then
  differ only in argmax against probability on the same predictions, so their gap is about
  confidence, not phrasing; (2) a prompt names the person and the attribute and nothing else, which
  is the paper's F(W, n, a), whereas in a biography a value also follows the person's other
  attributes; (3) each prompt is a fixed way of reading values out of the weights, chosen before
  training, so the theorem holds for each and for their mean (the bound is linear in the loss).
  With `holdout_eval_templates` the prompts are phrasings never trained on: the bound then counts
  only knowledge a new phrasing can extract, still a valid lower bound, and usually a lower one.
- Serving depth. Each depth K is another fixed read-out of the same weights, so each row is a valid
  bound. Taking the best of D depths after the fact costs at most log2 D bits (6 for 64), negligible.
- No clipping. A fact on which the model is worse than uniform over its pool (probability spent on
  strings outside the pool, or on wrong values) contributes negative bits, as in the paper's formula:
  an untrained model gets a large negative total, which bounds nothing.
- Parameters. The paper divides by the model's parameter count P; we report both the total (a tied
  head counted once) and the count without the embedding (and an untied head).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
from torch.nn import functional

from biosrecall.compute.flops import param_counts
from biosrecall.errors import BiosrecallError
from biosrecall.eval.recall import DEFAULT_THRESHOLD, fact_index, pool_bits, score_exact
from biosrecall.eval.sweep import DEFAULT_BATCH_SIZE, answer_batches, exact_rows
from biosrecall.model.config import ModelConfig

DEFAULT_DEPTHS = tuple(range(1, 65))


@dataclass(frozen=True)
class AnswerScores:
    """Per serving depth (row i is `depths[i]`) and evaluation row: the exact flag and the answer's
    cross-entropy in nats, -ln Pr(answer | prompt), summed over the answer's tokens."""

    depths: tuple[int, ...]
    exact: np.ndarray  # bool [len(depths), M]
    nats: np.ndarray  # float64 [len(depths), M]


def _row_nats(logits: torch.Tensor, batch) -> torch.Tensor:
    """float64 [B]: the summed cross-entropy of each batch row's answer tokens."""
    per_token = functional.cross_entropy(logits.float(), batch.targets, reduction="none")
    total = torch.zeros(len(batch.rows), dtype=torch.float64, device=per_token.device)
    return total.index_add_(0, batch.row_of_target, per_token.double())


def answer_scores_by_depth(
    model,
    eval_set,
    depths: Iterable[int] = DEFAULT_DEPTHS,
    *,
    batch_size: int = DEFAULT_BATCH_SIZE,
    device: str | torch.device | None = None,
) -> AnswerScores:
    """Exact flags and answer cross-entropies at every depth in `depths`, from one all-depth pass per
    batch (the layout of `eval.sweep.exact_by_depth`, whose flags these equal)."""
    given = list(depths)
    wanted = tuple(sorted(set(given)))
    if not wanted or min(wanted) < 1:
        raise BiosrecallError(f"depths must be integers >= 1, got {given!r}")
    exact = np.zeros((len(wanted), len(eval_set.answer_start)), dtype=bool)
    nats = np.zeros(exact.shape)
    for batch in answer_batches(model, eval_set, batch_size, device=device):
        flags, losses = [], []
        for _, logits in model.forward_all_depths(batch.tokens, wanted, positions=batch.positions):
            flags.append(exact_rows(logits, batch))
            losses.append(_row_nats(logits, batch))
        exact[:, batch.rows] = torch.stack(flags).cpu().numpy()
        nats[:, batch.rows] = torch.stack(losses).cpu().numpy()
    return AnswerScores(wanted, exact, nats)


def _facts(eval_set) -> tuple[np.ndarray, np.ndarray, int]:
    """Each row's fact number, the number of prompts of each fact, and the number of people."""
    fact, people = fact_index(eval_set)
    return fact, np.bincount(fact), people


def loss_bound_bits(nats: np.ndarray, eval_set, pool_sizes: Mapping[str, int]) -> float:
    """The value term of the 3.3 bound (module docstring) from one depth's answer nats [M]: the sum over
    facts of log2 |pool| minus the fact's cross-entropy in bits, averaged over its prompts."""
    fact, prompts, _ = _facts(eval_set)
    row_bits = pool_bits(pool_sizes)[np.asarray(eval_set.attribute)] - np.asarray(nats) / math.log(2)
    return float(np.sum(row_bits / prompts[fact]))


def value_loss_nats(nats: np.ndarray, eval_set) -> float:
    """The paper's p2: per person, the sum over attributes of the fact's cross-entropy (averaged over
    its prompts), averaged over people."""
    fact, prompts, people = _facts(eval_set)
    return float(np.sum(np.asarray(nats) / prompts[fact]) / people)


def _config_of(model, config: ModelConfig | None) -> ModelConfig:
    config = getattr(model, "config", None) if config is None else config
    if not isinstance(config, ModelConfig):
        raise BiosrecallError(
            "stored bits per parameter need the model's ModelConfig (pass config=, or a model with .config)"
        )
    return config


def stored_bits_table(
    model,
    eval_set,
    pool_sizes: Mapping[str, int],
    *,
    config: ModelConfig | None = None,
    depths: Iterable[int] = DEFAULT_DEPTHS,
    threshold: int = DEFAULT_THRESHOLD,
    batch_size: int = DEFAULT_BATCH_SIZE,
    device: str | torch.device | None = None,
) -> pd.DataFrame:
    """Stored bits per serving depth, exact-match and loss-bound, with bits per parameter (module
    docstring). `config` defaults to `model.config`; its parameters are counted by `param_counts`."""
    counts = param_counts(_config_of(model, config))
    scores = answer_scores_by_depth(model, eval_set, depths, batch_size=batch_size, device=device)
    _, _, people = _facts(eval_set)
    ceiling = people * float(pool_bits(pool_sizes).sum())
    records = []
    for depth, exact, nats in zip(scores.depths, scores.exact, scores.nats, strict=True):
        score = score_exact(exact, eval_set, pool_sizes, threshold)
        bits = {
            "exact": people * score.bits_per_person,
            "loss_bound": loss_bound_bits(nats, eval_set, pool_sizes),
        }
        record = {
            "depth": depth,
            "people": people,
            "ceiling_bits": ceiling,
            "exact_bits": bits["exact"],
            "loss_bound_bits": bits["loss_bound"],
            "value_loss_nats": value_loss_nats(nats, eval_set),
            "recall": score.recall,
            "parameters": counts["total"],
            "non_embedding_parameters": counts["non_embedding"],
        }
        for name, value in bits.items():
            record[f"{name}_bits_per_param"] = value / counts["total"]
            record[f"{name}_bits_per_nonembedding_param"] = value / counts["non_embedding"]
        records.append(record)
    table = pd.DataFrame.from_records(records)
    table["threshold"] = threshold
    return table
