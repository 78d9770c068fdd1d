"""Stored bits, exact-match and the 3.3 loss bound, on crafted models whose answers and probabilities
are set by hand, and on a real looped model against the plain-forward reference.

The dataset has pools of 4, 8, 2, 16, 4 and 2 values: 2 + 3 + 1 + 4 + 2 + 1 = 13 bits per person.

    pytest -q tests/test_stored_bits.py
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from biosrecall.bios import ATTRIBUTES, generate_dataset, load_dataset
from biosrecall.compute.flops import param_counts
from biosrecall.errors import BiosrecallError
from biosrecall.eval.recall import recall_table
from biosrecall.eval.stored_bits import stored_bits_table
from biosrecall.eval.sweep import exact_by_depth
from biosrecall.model.looped import LoopedTransformer
from biosrecall.model.presets import get_preset

POOLS = {"birth_city": 4, "birth_day": 8, "birth_month": 2, "university": 16, "major": 4, "employer": 2}
NAMES = {"first_name": 4, "middle_name": 4, "last_name": 4}
PEOPLE = 5
BITS_PER_PERSON = 13.0
# Per (person, attribute): which prompts the crafted model answers right from depth 2 on.
KNOWN, FOUR, THREE, UNKNOWN = "known", "four", "three", "unknown"
PLAN = {0: KNOWN, 1: FOUR, 2: THREE, 4: UNKNOWN}  # person 3: birth_city known, the rest unknown
WRONG_TEMPLATES = {KNOWN: (), FOUR: (4,), THREE: (3, 4)}


def status(person: int, attribute: int) -> str:
    if person == 3:
        return KNOWN if ATTRIBUTES[attribute] == "birth_city" else UNKNOWN
    return PLAN[person]


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    folder = tmp_path_factory.mktemp("stored") / "data"
    return load_dataset(generate_dataset(folder, people=PEOPLE, seed=0, pool_sizes={**POOLS, **NAMES}))


class CraftedModel(torch.nn.Module):
    """At depth 1 every logit is 0 (uniform). From depth 2 on, each answer-predicting position puts
    logit `confidence` on one token, the right one or a wrong one as `status` plans (a FOUR or THREE
    fact is wrong on the first answer token of its wrong prompts, an UNKNOWN fact on every token), and
    0 on the rest."""

    def __init__(self, eval_set, vocab_size: int, confidence: float, config=None):
        super().__init__()
        self.vocab_size, self.confidence, self.config = vocab_size, confidence, config
        self.chosen: dict[tuple, int] = {}
        for r in range(len(eval_set.answer_start)):
            start, length = int(eval_set.answer_start[r]), int(eval_set.answer_len[r])
            row = eval_set.tokens[r, : start + length].tolist()
            plan = status(int(eval_set.person[r]), int(eval_set.attribute[r]))
            for j in range(length):
                right = row[start + j]
                wrong = plan == UNKNOWN or (j == 0 and int(eval_set.template[r]) in WRONG_TEMPLATES[plan])
                self.chosen[tuple(row[: start + j])] = (3 if right != 3 else 4) if wrong else right

    def forward_all_depths(self, tokens, depths, positions=None):
        for depth in sorted(depths):
            logits = torch.zeros(*tokens.shape, self.vocab_size)
            if depth >= 2:
                for b, row in enumerate(tokens.tolist()):
                    for t in range(len(row)):
                        token = self.chosen.get(tuple(row[: t + 1]))
                        if token is not None:
                            logits[b, t, token] = self.confidence
            yield depth, logits if positions is None else logits[positions]


def answer_lengths(eval_set) -> dict[tuple[int, int], int]:
    lengths = {}
    for p, a, n in zip(eval_set.person, eval_set.attribute, eval_set.answer_len, strict=True):
        lengths[int(p), int(a)] = int(n)
    return lengths


def expected_loss_bound(eval_set, vocab: int, q: float, depth: int) -> float:
    """By hand: per fact log2 |pool| minus its answer's bits averaged over the 5 prompts; a token costs
    -log2 q when the model put q on it, -log2((1 - q) / (V - 1)) otherwise (1 / V at depth 1)."""
    right, wrong = -math.log2(q), -math.log2((1 - q) / (vocab - 1))
    total = 0.0
    for (person, attribute), length in answer_lengths(eval_set).items():
        pool = math.log2(POOLS[ATTRIBUTES[attribute]])
        plan = status(person, attribute)
        if depth == 1:
            answer_bits = length * math.log2(vocab)
        elif plan == UNKNOWN:
            answer_bits = length * wrong
        else:
            wrong_prompts = len(WRONG_TEMPLATES[plan])
            answer_bits = length * right + wrong_prompts * (wrong - right) / 5
        total += pool - answer_bits
    return total


def test_crafted_model_both_measures_by_hand(dataset):
    eval_set, vocab = dataset.eval_set(), dataset.vocab_size
    config = get_preset("bios-tiny", vocab_size=vocab)
    model = CraftedModel(eval_set, vocab, confidence=math.log(vocab - 1), config=config)  # q = 1/2
    table = stored_bits_table(model, eval_set, dataset.pool_sizes, depths=[1, 2, 5], batch_size=7)
    assert list(table["depth"]) == [1, 2, 5]
    assert (table["ceiling_bits"] == PEOPLE * BITS_PER_PERSON).all() and (table["people"] == PEOPLE).all()
    # Exact-match: nothing at depth 1 (uniform logits pick token 0, the padding); from depth 2 on,
    # person 0 (all known) and person 1 (4 of 5 prompts) store 13 bits each, person 2 (3 of 5) none,
    # person 3 only its 4-value birth city: 2 bits.
    assert list(table["exact_bits"]) == pytest.approx([0.0, 28.0, 28.0])
    assert table["recall"].tolist() == pytest.approx([0.0, 13 / 30, 13 / 30])
    for depth, got in zip(table["depth"], table["loss_bound_bits"], strict=True):
        assert got == pytest.approx(expected_loss_bound(eval_set, vocab, 0.5, depth), rel=1e-6)
    # q = 1/2: a fully known single-token fact is worth log2 |pool| - 1, so the crafted model stores
    # less by the loss bound than by exact match, and less than nothing at depth 1.
    assert table.loc[1, "loss_bound_bits"] < 28.0 and table.loc[0, "loss_bound_bits"] < -100
    # bios-tiny at this vocabulary: 33,024 parameters outside the (tied) embedding, plus 32 per token.
    assert param_counts(config)["non_embedding"] == 33_024
    assert (table["parameters"] == 33_024 + 32 * vocab).all()
    assert (table["non_embedding_parameters"] == 33_024).all()
    assert table.loc[1, "exact_bits_per_param"] == pytest.approx(28.0 / (33_024 + 32 * vocab))
    assert table.loc[1, "exact_bits_per_nonembedding_param"] == pytest.approx(28.0 / 33_024)
    expected = expected_loss_bound(eval_set, vocab, 0.5, 2)
    assert table.loc[1, "loss_bound_bits_per_nonembedding_param"] == pytest.approx(expected / 33_024)


def test_a_perfect_model_stores_the_whole_ceiling_both_ways(dataset):
    eval_set = dataset.eval_set(np.array([0, 3]))  # a subset: persons 0 and 3
    config = get_preset("bios-tiny", vocab_size=dataset.vocab_size)
    model = CraftedModel(eval_set, dataset.vocab_size, confidence=60.0, config=config)
    row = stored_bits_table(model, eval_set, dataset.pool_sizes, depths=[2]).iloc[0]
    # person 0 knows everything: 13 bits; person 3 its birth city, and is sure of wrong answers elsewhere
    assert row["people"] == 2 and row["exact_bits"] == pytest.approx(15.0)
    assert row["ceiling_bits"] == 26.0
    # A wrong answer at probability ~1 costs about 60 / ln 2 bits per token: far below nothing.
    assert row["loss_bound_bits"] < -100
    only_known = dataset.eval_set(np.array([0]))
    perfect = CraftedModel(only_known, dataset.vocab_size, confidence=60.0, config=config)
    row = stored_bits_table(perfect, only_known, dataset.pool_sizes, depths=[2]).iloc[0]
    assert row["exact_bits"] == pytest.approx(BITS_PER_PERSON)
    assert row["loss_bound_bits"] == pytest.approx(BITS_PER_PERSON, abs=1e-9)
    assert row["value_loss_nats"] == pytest.approx(0.0, abs=1e-9)


def test_looped_model_matches_the_recall_scorer_and_plain_forward_losses(dataset):
    """A real (random) looped model: exact bits equal the recall table's, and the loss bound equals the
    one computed from plain `forward` at each depth, one row at a time."""
    torch.manual_seed(0)
    config = get_preset("bios-tiny", vocab_size=dataset.vocab_size)
    model = LoopedTransformer(config)
    eval_set = dataset.eval_set()
    table = stored_bits_table(model, eval_set, dataset.pool_sizes, depths=[1, 3], batch_size=16)
    recall = recall_table(exact_by_depth(model, eval_set, 3), eval_set, dataset.pool_sizes)
    whole = recall[recall["attribute"] == "all"].set_index("depth")["bits"]
    assert list(table["exact_bits"]) == pytest.approx([PEOPLE * whole[1], PEOPLE * whole[3]])
    for depth, got in zip(table["depth"], table["loss_bound_bits"], strict=True):
        expected = 0.0
        with torch.no_grad():
            for r in range(len(eval_set.answer_start)):
                start, length = int(eval_set.answer_start[r]), int(eval_set.answer_len[r])
                row = torch.as_tensor(eval_set.tokens[r, : start + length])
                logits = model(row[None, :-1], int(depth))[0, start - 1 :]
                nats = torch.nn.functional.cross_entropy(logits, row[start:], reduction="sum").item()
                pool = math.log2(POOLS[ATTRIBUTES[int(eval_set.attribute[r])]])
                expected += (pool - nats / math.log(2)) / 5
        assert got == pytest.approx(expected, rel=1e-5)


def test_bits_per_parameter_need_a_model_config(dataset):
    eval_set = dataset.eval_set(np.array([0]))
    model = CraftedModel(eval_set, dataset.vocab_size, confidence=1.0)
    with pytest.raises(BiosrecallError, match="ModelConfig"):
        stored_bits_table(model, eval_set, dataset.pool_sizes, depths=[1])
