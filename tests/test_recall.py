"""Recall scoring and the all-depth sweep, checked on hand-built models whose right answers are known.

The fakes here (a bioS-shaped dataset, lookup models, a depth-dependent recurrent model) implement the
dataset and model contracts of ARCHITECTURE.md; test_cli_recall.py reuses them. The last tests run the
real dataset generator and looped model.

    pytest -q tests/test_recall.py
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter

import numpy as np
import pytest
import torch

from biosrecall.bios import ATTRIBUTES, EvalSet
from biosrecall.errors import BiosrecallError
from biosrecall.eval.recall import recall_table, score_exact
from biosrecall.eval.sweep import exact_at_depth, exact_by_depth

POOL_SIZES = (7, 5, 4, 6, 5, 3)
PAD, SEP, IS = 0, 1, 2


class FakeDataset:
    """bioS-shaped: rows `[sep] + template words + name + "is" + answer`, person-major, right-padded.

    Answers are prefix-free sequences of 2 or 3 tokens; pairs of values of an attribute share their
    first token, so whole-answer scoring differs from first-token scoring.
    """

    def __init__(self, people: int = 12, seed: int = 0, manifest_hash: str = "fake-manifest"):
        rng = np.random.default_rng(seed)
        self.num_people, self.pad_id, self.manifest_hash = people, PAD, manifest_hash
        self.pool_sizes = dict(zip(ATTRIBUTES, POOL_SIZES, strict=True))
        self.values = np.stack([rng.integers(0, size, people) for size in POOL_SIZES], axis=1)
        self.total_bits = float(sum(math.log2(s) for s in POOL_SIZES))
        # bioS's chance level: the bits of always answering each attribute's most common value.
        shares = [np.bincount(self.values[:, a]).max() / people for a in range(6)]
        chance = {
            name: math.log2(self.pool_sizes[name]) * share
            for name, share in zip(ATTRIBUTES, shares, strict=True)
        }
        self.manifest = {"pool_sizes": self.pool_sizes, "chance_bits_per_attribute": chance}
        self.chance_bits = float(sum(chance.values()))
        self._next_token = 3
        self.template_words = {(a, t): self._fresh(1) * (1 + t % 3) for a in range(6) for t in range(5)}
        self.names = [self._fresh(1) for _ in range(people)]
        # Values 2k and 2k + 1 share their first token; the second token differs, so answers are prefix-free.
        first = {(a, k): self._fresh(1) for a in range(6) for k in range((POOL_SIZES[a] + 1) // 2)}
        self.answers = {
            (a, v): first[a, v // 2] + self._fresh(1) * (1 + v % 2)
            for a in range(6)
            for v in range(POOL_SIZES[a])
        }
        self.vocab_size = self._next_token

    def _fresh(self, count: int) -> list[int]:
        self._next_token += count
        return list(range(self._next_token - count, self._next_token))

    def eval_set(self) -> EvalSet:
        rows, starts, lengths, index = [], [], [], []
        for p in range(self.num_people):
            for a in range(6):
                for t in range(5):
                    prompt = [SEP] + self.template_words[a, t] + self.names[p] + [IS]
                    answer = self.answers[a, int(self.values[p, a])]
                    rows.append(prompt + answer)
                    starts.append(len(prompt))
                    lengths.append(len(answer))
                    index.append((p, a, t))
        width = max(map(len, rows))
        tokens = np.full((len(rows), width), PAD, dtype=np.int64)
        for i, row in enumerate(rows):
            tokens[i, : len(row)] = row
        person, attribute, template = (np.array(column) for column in zip(*index, strict=True))
        return EvalSet(tokens, np.array(starts), np.array(lengths), person, attribute, template)


class LookupModel:
    """Predicts the token stored for the exact prefix seen so far (causal by construction), else pad.

    `table` maps a prefix (tuple of tokens) to (next token, smallest depth at which it is known).
    `from_rows` learns eval rows: their true answers, or `answers[row]` in their place.
    """

    def __init__(self, table: dict[tuple, tuple[int, int]], vocab_size: int):
        self.table, self.vocab_size = table, vocab_size
        self._memo: dict = {}

    @classmethod
    def from_rows(cls, eval_set, vocab_size: int, rows=None, min_depth=None, answers=None) -> LookupModel:
        rows = range(len(eval_set.answer_start)) if rows is None else rows
        table = {}
        for r in rows:
            start, length = int(eval_set.answer_start[r]), int(eval_set.answer_len[r])
            sequence = eval_set.tokens[r, : start + length].tolist()
            answer = sequence[start:] if answers is None else list(answers[r])
            sequence = sequence[:start] + answer
            for j, token in enumerate(answer):
                table[tuple(sequence[: start + j])] = (token, 1 if min_depth is None else int(min_depth[r]))
        return cls(table, vocab_size)

    def _lookup(self, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(next token, smallest depth) per position; unknown prefixes get an unreachable depth."""
        key = (tuple(tokens.shape), tokens.numpy().tobytes())
        if key not in self._memo:
            next_token = torch.zeros(tokens.shape, dtype=torch.long)
            min_depth = torch.full(tokens.shape, 10**9, dtype=torch.long)
            for b, row in enumerate(tokens.tolist()):
                for t in range(len(row)):
                    known = self.table.get(tuple(row[: t + 1]))
                    if known is not None:
                        next_token[b, t], min_depth[b, t] = known
            self._memo[key] = (next_token, min_depth)
        return self._memo[key]

    def forward(self, tokens: torch.Tensor, depth: int) -> torch.Tensor:
        next_token, min_depth = self._lookup(tokens)
        logits = torch.zeros(*tokens.shape, self.vocab_size)
        logits.scatter_(-1, next_token[..., None], 5.0 * (depth >= min_depth)[..., None].float())
        return logits

    def forward_all_depths(self, tokens, depths, positions=None):
        for depth in sorted(depths):
            logits = self.forward(tokens, depth)
            yield depth, (logits if positions is None else logits[positions])


class NoisyRecurrentModel(torch.nn.Module):
    """A depth-dependent looped model: an oracle hint plus random recurrent features that change with K.

    Some answers are right at some depths and wrong at others, so sweep-vs-per-K checks are not trivial.
    """

    def __init__(self, oracle: LookupModel, width: int = 24, hint: float = 1.5, seed: int = 0):
        super().__init__()
        generator = torch.Generator().manual_seed(seed)
        vocab = oracle.vocab_size
        self.oracle, self.hint = oracle, hint
        self.embed = torch.nn.Parameter(torch.randn(vocab, width, generator=generator))
        self.recur = torch.nn.Parameter(torch.randn(width, width, generator=generator) * 1.2 / width**0.5)
        self.mix = torch.nn.Parameter(torch.randn(width, width, generator=generator) / width**0.5)
        self.head = torch.nn.Parameter(torch.randn(width, vocab, generator=generator) / width**0.5)

    def _states(self, tokens: torch.Tensor, max_depth: int):
        injected = self.embed[tokens]
        counts = torch.arange(1, tokens.shape[1] + 1, dtype=injected.dtype)[None, :, None]
        state = torch.zeros_like(injected)
        for depth in range(1, max_depth + 1):
            causal_mean = state.cumsum(dim=1) / counts
            state = torch.tanh(state @ self.recur + causal_mean @ self.mix + injected)
            yield depth, state

    def forward(self, tokens: torch.Tensor, depth: int) -> torch.Tensor:
        *_, (_, state) = self._states(tokens, depth)
        return state @ self.head + self.hint * self.oracle.forward(tokens, depth) / 5.0

    def forward_all_depths(self, tokens, depths, positions=None):
        wanted = set(depths)
        hints = self.hint * self.oracle.forward(tokens, 1) / 5.0
        for depth, state in self._states(tokens, max(wanted)):
            if depth in wanted:
                logits = state @ self.head + hints
                yield depth, (logits if positions is None else logits[positions])


def oracle_for(dataset: FakeDataset, eval_set=None, **kwargs) -> LookupModel:
    return LookupModel.from_rows(
        dataset.eval_set() if eval_set is None else eval_set, dataset.vocab_size, **kwargs
    )


def constant_model(eval_set, vocab_size: int) -> LookupModel:
    """Always answers each attribute's most common answer, whoever is asked about."""
    ends = eval_set.answer_start + eval_set.answer_len
    answers = [
        tuple(eval_set.tokens[r, eval_set.answer_start[r] : ends[r]].tolist()) for r in range(len(ends))
    ]
    most_common = {
        a: Counter(answers[r] for r in np.flatnonzero(eval_set.attribute == a)).most_common(1)[0][0]
        for a in np.unique(eval_set.attribute)
    }
    fixed = {r: most_common[eval_set.attribute[r]] for r in range(len(answers))}
    return LookupModel.from_rows(eval_set, vocab_size, answers=fixed)


@pytest.fixture(scope="module")
def dataset() -> FakeDataset:
    return FakeDataset(people=12)


def test_oracle_scores_the_ceiling_at_every_depth(dataset):
    eval_set = dataset.eval_set()
    table = recall_table(exact_by_depth(oracle_for(dataset), eval_set, 3), eval_set, dataset.pool_sizes)
    whole = table[table["attribute"] == "all"]
    assert list(whole["depth"]) == [1, 2, 3]
    assert np.allclose(whole["bits"], dataset.total_bits)
    assert np.allclose(whole["ceiling_bits"], dataset.total_bits)
    assert (table["recall"] == 1.0).all() and (table["exact"] == 1.0).all()


def test_constant_model_scores_the_chance_level():
    dataset = FakeDataset(people=400, seed=1)
    eval_set = dataset.eval_set()
    model = constant_model(eval_set, dataset.vocab_size)
    score = score_exact(exact_at_depth(model, eval_set, 1), eval_set, dataset.pool_sizes)
    # It recalls exactly the people holding each attribute's most common value: bioS's chance level...
    assert score.bits_per_person == pytest.approx(dataset.chance_bits)
    most_common_share = [np.bincount(dataset.values[:, a]).max() / 400 for a in range(6)]
    assert np.allclose(score.attribute_recall, most_common_share)
    # ...which is about 1/|pool| of each attribute.
    assert score.bits_per_person == pytest.approx(sum(math.log2(s) / s for s in POOL_SIZES), abs=0.6)
    chance = dataset.manifest["chance_bits_per_attribute"]
    table = recall_table(
        exact_at_depth(model, eval_set, 1)[None], eval_set, dataset.pool_sizes, chance_bits=chance
    )
    assert np.allclose(table["bits"], table["chance_bits"])


@pytest.mark.parametrize(
    ("threshold", "recalled"),
    [(3, [True, True, True]), (4, [False, True, True]), (5, [False, False, True])],
)
def test_threshold_edges_three_four_five_exact_templates(dataset, threshold, recalled):
    eval_set = dataset.eval_set()
    # Person 0 gets 3 exact templates of birth_city, person 1 gets 4, person 2 gets 5; nothing else.
    exact_templates = (
        {(0, t) for t in (0, 1, 2)} | {(1, t) for t in (0, 1, 3, 4)} | {(2, t) for t in range(5)}
    )
    cells = zip(eval_set.person, eval_set.attribute, eval_set.template, strict=True)
    known = [r for r, (p, a, t) in enumerate(cells) if a == 0 and (p, t) in exact_templates]
    exact = exact_at_depth(oracle_for(dataset, eval_set, rows=known), eval_set, 1)
    assert exact.sum() == 12
    score = score_exact(exact, eval_set, dataset.pool_sizes, threshold=threshold)
    assert list(score.fact_recalled[:3, 0]) == recalled
    assert score.fact_recalled.sum() == sum(recalled)
    bits = sum(recalled) * math.log2(POOL_SIZES[0]) / dataset.num_people
    assert score.bits_per_person == pytest.approx(bits)
    assert score.attribute_exact[0] == pytest.approx(12 / (5 * dataset.num_people))


def test_template_exact_rates_count_each_template(dataset):
    eval_set = dataset.eval_set()
    template_two = [r for r in range(len(eval_set.template)) if eval_set.template[r] == 2]
    exact = exact_at_depth(oracle_for(dataset, eval_set, rows=template_two), eval_set, 1)
    score = score_exact(exact, eval_set, dataset.pool_sizes)
    assert np.allclose(score.template_exact[:, 2], 1.0)
    assert np.allclose(np.delete(score.template_exact, 2, axis=1), 0.0)
    assert score.bits_per_person == 0.0
    whole = recall_table(exact[None], eval_set, dataset.pool_sizes).query("attribute == 'all'")
    assert list(whole[[f"exact_template_{t}" for t in range(5)]].iloc[0]) == [0, 0, 1, 0, 0]


@pytest.mark.parametrize("threshold", [0, 6])
def test_unreachable_threshold_is_refused(dataset, threshold):
    eval_set = dataset.eval_set()
    with pytest.raises(BiosrecallError, match="threshold"):
        score_exact(np.zeros(len(eval_set.person), bool), eval_set, dataset.pool_sizes, threshold)


def test_recall_grows_with_depth_when_facts_need_depth(dataset):
    eval_set = dataset.eval_set()
    min_depth = 1 + eval_set.attribute  # attribute a is known from depth a + 1 on
    oracle = oracle_for(dataset, eval_set, min_depth=min_depth)
    table = recall_table(exact_by_depth(oracle, eval_set, 7), eval_set, dataset.pool_sizes)
    bits = table.query("attribute == 'all'")["bits"].to_numpy()
    expected = [sum(math.log2(s) for s in POOL_SIZES[:depth]) for depth in range(1, 8)]
    assert np.allclose(bits, expected)
    per_attribute = table.query("attribute != 'all'").groupby("depth")["bits"].sum().to_numpy()
    assert np.allclose(per_attribute, bits)
    assert len(table) == 7 * (len(ATTRIBUTES) + 1)


def test_sweep_equals_each_depth_evaluated_alone(dataset):
    eval_set = dataset.eval_set()
    model = NoisyRecurrentModel(oracle_for(dataset, eval_set))
    swept = exact_by_depth(model, eval_set, 12, batch_size=50)
    separate = np.stack([exact_at_depth(model, eval_set, k, batch_size=50) for k in range(1, 13)])
    assert np.array_equal(swept, separate)
    assert 0.1 < swept.mean() < 0.9, "the fake must be right on some items and wrong on others"
    assert (swept != swept[0]).any(), "the fake must depend on depth"


@pytest.mark.parametrize("batch_size", [1, 7, 10_000])
def test_sweep_does_not_depend_on_batching(dataset, batch_size):
    eval_set, model = dataset.eval_set(), NoisyRecurrentModel(oracle_for(dataset))
    batched = exact_by_depth(model, eval_set, 5, batch_size=batch_size)
    assert np.array_equal(batched, exact_by_depth(model, eval_set, 5))


def test_sweep_asks_for_answer_predicting_positions_only(dataset):
    eval_set = dataset.eval_set()
    seen = []

    class Recorder(LookupModel):
        def forward_all_depths(self, tokens, depths, positions=None):
            seen.append((tokens.clone(), positions.clone(), list(depths)))
            yield from super().forward_all_depths(tokens, depths, positions)

    exact_by_depth(Recorder({}, dataset.vocab_size), eval_set, 4, batch_size=16)
    assert sum(len(tokens) for tokens, _, _ in seen) == len(eval_set.person)
    for tokens, positions, depths in seen:
        assert depths == [1, 2, 3, 4] and positions.shape == tokens.shape
        assert tokens.shape[1] == int(positions.nonzero()[:, 1].max()) + 1, "each batch is trimmed"
        for row_tokens, row_positions in zip(tokens.numpy(), positions.numpy(), strict=True):
            r = np.flatnonzero((eval_set.tokens[:, : len(row_tokens)] == row_tokens).all(axis=1))[0]
            start, length = eval_set.answer_start[r], eval_set.answer_len[r]
            assert list(np.flatnonzero(row_positions)) == list(range(start - 1, start + length - 1))


def greedy_exact(model, eval_set, depth: int, rows) -> np.ndarray:
    """bool [len(rows)]: greedy generation from each prompt alone reproduces the whole answer: the
    definition teacher forcing stands in for (one forward per generated token, so on a sample)."""
    if hasattr(model, "eval"):
        model.eval()
    exact = np.zeros(len(rows), dtype=bool)
    with torch.inference_mode():
        for i, row in enumerate(rows):
            start, length = int(eval_set.answer_start[row]), int(eval_set.answer_len[row])
            sequence = torch.as_tensor(np.asarray(eval_set.tokens[row, :start]), dtype=torch.long)
            for _ in range(length):
                next_token = model.forward(sequence[None, :], depth)[0, -1].argmax()
                sequence = torch.cat([sequence, next_token[None]])
            exact[i] = np.array_equal(sequence[start:].numpy(), eval_set.tokens[row, start : start + length])
    return exact


@pytest.mark.parametrize("depth", [1, 3, 8])
def test_teacher_forcing_equals_greedy_generation_fake(dataset, depth):
    eval_set = dataset.eval_set()
    model = NoisyRecurrentModel(oracle_for(dataset, eval_set), seed=3)
    sample = np.random.default_rng(depth).choice(len(eval_set.person), 60, replace=False)
    teacher_forced = exact_at_depth(model, eval_set, depth)[sample]
    assert np.array_equal(greedy_exact(model, eval_set, depth, sample), teacher_forced)
    assert teacher_forced.any() and not teacher_forced.all()


def test_bad_depths_are_refused(dataset):
    with pytest.raises(BiosrecallError, match="max depth"):
        exact_by_depth(oracle_for(dataset), dataset.eval_set(), 0)
    with pytest.raises(BiosrecallError, match="depth"):
        exact_at_depth(oracle_for(dataset), dataset.eval_set(), 0)


def test_eval_set_of_a_subset_of_people_scores_only_them(dataset):
    eval_set = dataset.eval_set()
    chosen = np.isin(eval_set.person, [3, 7, 8])
    subset = EvalSet(*(getattr(eval_set, field.name)[chosen] for field in dataclasses.fields(EvalSet)))
    known = np.flatnonzero(eval_set.person == 7)
    exact = exact_at_depth(oracle_for(dataset, eval_set, rows=known), subset, 1)
    score = score_exact(exact, subset, dataset.pool_sizes)
    assert score.fact_recalled.shape == (3, len(ATTRIBUTES))
    assert score.bits_per_person == pytest.approx(dataset.total_bits / 3)


# The real dataset generator and looped model (random weights), to check the contracts end to end.


@pytest.fixture(scope="module")
def real_dataset(tmp_path_factory):
    from biosrecall.bios import generate_dataset, load_dataset

    return load_dataset(generate_dataset(tmp_path_factory.mktemp("bios") / "data", people=6, seed=0))


def real_model(dataset, **overrides):
    from biosrecall.model import LoopedTransformer, get_preset

    torch.manual_seed(0)
    return LoopedTransformer(get_preset("bios-tiny", vocab_size=dataset.vocab_size, **overrides)).eval()


def with_own_answers(model, eval_set, rows, depth: int):
    """The eval set with `rows` answered by the model's own greedy continuation at `depth`, so that a
    random model is exact on those rows there (and a wrong scorer would show)."""
    tokens = eval_set.tokens.copy()
    with torch.no_grad():
        for r in rows:
            start, length = int(eval_set.answer_start[r]), int(eval_set.answer_len[r])
            for position in range(start, start + length):
                logits = model.forward(torch.as_tensor(tokens[r : r + 1, :position]), depth)
                tokens[r, position] = int(logits[0, -1].argmax())
    return dataclasses.replace(eval_set, tokens=tokens)


def test_real_dataset_oracle_and_constant_models(real_dataset):
    eval_set = real_dataset.eval_set()
    oracle = LookupModel.from_rows(eval_set, real_dataset.vocab_size)
    score = score_exact(exact_at_depth(oracle, eval_set, 1), eval_set, real_dataset.pool_sizes)
    assert score.bits_per_person == pytest.approx(real_dataset.total_bits)
    constant = constant_model(eval_set, real_dataset.vocab_size)
    score = score_exact(exact_at_depth(constant, eval_set, 1), eval_set, real_dataset.pool_sizes)
    assert score.bits_per_person == pytest.approx(real_dataset.chance_bits)


@pytest.mark.parametrize("init_state", ["zeros", "noise"])
def test_real_model_sweep_equals_per_depth_and_greedy(real_dataset, init_state):
    model = real_model(real_dataset, init_state=init_state)
    base = real_dataset.eval_set()
    own = np.arange(0, len(base), 2)
    eval_set = with_own_answers(model, base, own, depth=3)
    swept = exact_by_depth(model, eval_set, 6, batch_size=37)
    separate = np.stack([exact_at_depth(model, eval_set, k) for k in range(1, 7)])
    assert np.array_equal(swept, separate)
    assert swept[2, own].all(), "teacher forcing must accept the model's own greedy answers"
    for depth in (1, 3, 6):
        assert np.array_equal(greedy_exact(model, eval_set, depth, own[:30]), swept[depth - 1, own[:30]])
