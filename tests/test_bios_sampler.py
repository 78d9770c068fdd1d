"""The batch sampler: whole, freshly phrased biographies, no repeated person per context, padding."""

from __future__ import annotations

import numpy as np
import pytest

from biosrecall.bios import ATTRIBUTES, BatchSampler, generate_dataset, load_dataset
from biosrecall.bios.templates import eval_completion, render
from biosrecall.errors import BiosrecallError


@pytest.fixture(scope="module")
def sampler(bios_dataset):
    return BatchSampler(bios_dataset, batch_size=16, seq_len=256)


def expected_biography(dataset, layout, k):
    """Token ids of biography k of a layout, rendered the slow way: strings, then the tokenizer."""
    person = dataset.people.iloc[layout.person[k]]
    templates = dataset.manifest["templates"]["train"]
    sentences = [
        render(templates[ATTRIBUTES[a]][t], person["name"], person[ATTRIBUTES[a]])
        for a, t in zip(layout.attribute[k], layout.template[k], strict=True)
    ]
    return dataset.tokenizer.encode(" ".join(sentences)).ids


def test_batch_shape_dtype_and_separators(sampler, bios_dataset):
    rows = sampler.batch(np.random.default_rng(0))
    assert rows.shape == (16, 257) and rows.dtype == np.int64
    assert np.all(rows[:, 0] == bios_dataset.sep_id)


def test_biographies_equal_the_slow_string_rendering(sampler, bios_dataset):
    layout = sampler.layout(np.random.default_rng(1))
    for k in range(len(layout.person)):
        row, start, length = layout.row[k], layout.start[k], layout.length[k]
        assert layout.tokens[row, start] == bios_dataset.sep_id
        assert layout.tokens[row, start + 1 : start + length].tolist() == expected_biography(
            bios_dataset, layout, k
        )


def test_every_attribute_appears_exactly_once_per_biography(sampler):
    layout = sampler.layout(np.random.default_rng(2))
    assert np.array_equal(np.sort(layout.attribute, axis=1), np.tile(np.arange(6), (len(layout.person), 1)))


def test_rows_are_packed_whole_biographies_then_padding(sampler, bios_dataset):
    layout = sampler.layout(np.random.default_rng(3))
    for row in range(sampler.batch_size):
        mine = np.flatnonzero(layout.row == row)
        assert layout.start[mine[0]] == 0
        assert np.array_equal(layout.start[mine[1:]], (layout.start + layout.length)[mine[:-1]])
        used = layout.start[mine[-1]] + layout.length[mine[-1]]
        assert np.all(layout.tokens[row, used:] == bios_dataset.pad_id)
        assert np.all(layout.tokens[row, :used] != bios_dataset.pad_id)
        assert (layout.tokens[row, :used] == bios_dataset.sep_id).sum() == len(mine)
    # padding is the only thing without loss: targets are pad exactly after the last biography
    targets = layout.tokens[:, 1:]
    assert (targets == bios_dataset.pad_id).mean() < 0.3


def test_no_person_twice_in_a_row_and_orders_vary(sampler, bios_dataset):
    rng = np.random.default_rng(4)
    orders, templates = set(), set()
    for _ in range(20):
        layout = sampler.layout(rng)
        assert len(set(layout.person)) == len(layout.person)  # N = 300 allows distinct people per batch
        orders.update(tuple(o) for o in layout.attribute)
        templates.update(
            (a, t)
            for a_row, t_row in zip(layout.attribute, layout.template, strict=True)
            for a, t in zip(a_row, t_row, strict=True)
        )
    assert len(orders) > 100
    assert len(templates) == sum(len(t) for t in bios_dataset.manifest["templates"]["train"].values())


def test_few_people_still_never_repeat_within_a_row(tmp_path):
    dataset = load_dataset(generate_dataset(tmp_path / "tiny", people=5, seed=0))
    sampler = BatchSampler(dataset, batch_size=8, seq_len=1024)
    assert sampler.biographies_per_row == 5
    for seed in range(10):
        layout = sampler.layout(np.random.default_rng(seed))
        for row in range(8):
            people = layout.person[layout.row == row]
            assert len(set(people)) == len(people)


def test_same_generator_state_gives_the_same_batch(sampler):
    a = sampler.batch(np.random.default_rng([5, 17]))
    b = sampler.batch(np.random.default_rng([5, 17]))
    c = sampler.batch(np.random.default_rng([5, 18]))
    assert np.array_equal(a, b) and not np.array_equal(a, c)


def test_too_short_seq_len_names_the_minimum(bios_dataset):
    longest = BatchSampler.min_seq_len(bios_dataset)
    assert longest == BatchSampler(bios_dataset, 2, 512).longest_biography
    with pytest.raises(BiosrecallError, match=f"use seq_len >= {longest}"):
        BatchSampler(bios_dataset, 2, longest - 1)
    fits = BatchSampler(bios_dataset, 4, longest)
    layout = fits.layout(np.random.default_rng(0))
    assert np.all(layout.row == np.arange(4))  # exactly one biography per row at the minimum
    with pytest.raises(BiosrecallError, match="batch_size must be a positive integer"):
        BatchSampler(bios_dataset, 0, 256)


def test_longest_biography_bounds_every_drawn_biography(sampler):
    rng = np.random.default_rng(6)
    lengths = np.concatenate([sampler.layout(rng).length for _ in range(20)]) - 1
    assert lengths.max() <= sampler.longest_biography


def test_held_out_eval_phrasings_never_reach_training(tmp_path):
    dataset = load_dataset(
        generate_dataset(tmp_path / "held", people=40, seed=2, holdout_eval_templates=True)
    )
    sampler = BatchSampler(dataset, batch_size=8, seq_len=256)
    eval_prompts = dataset.manifest["templates"]["eval"]
    for seed in range(5):
        layout = sampler.layout(np.random.default_rng(seed))
        for k in range(len(layout.person)):
            person = dataset.people.iloc[layout.person[k]]
            text = dataset.tokenizer.decode(
                layout.tokens[layout.row[k], layout.start[k] : layout.start[k] + layout.length[k]].tolist()
            )
            for attribute in ATTRIBUTES:
                for prompt in eval_prompts[attribute]:
                    assert render(eval_completion(prompt), person["name"], person[attribute]) not in text
