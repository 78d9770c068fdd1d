"""People: unique names, uniform and independent attribute draws, chance bits, reproducibility."""

from __future__ import annotations

import math

import numpy as np
import pytest

from biosrecall.bios import ATTRIBUTES, DEFAULT_POOL_SIZES
from biosrecall.bios.people import chance_bits, draw_people, name_space
from biosrecall.errors import BiosrecallError


def chi_square_critical(dof: int, z: float = 3.09) -> float:
    """Upper critical value of chi-square at p ~ 0.001 (Wilson-Hilferty approximation)."""
    return dof * (1 - 2 / (9 * dof) + z * math.sqrt(2 / (9 * dof))) ** 3


def chi_square(counts: np.ndarray) -> float:
    expected = counts.sum() / counts.size
    return float(((counts - expected) ** 2 / expected).sum())


@pytest.fixture(scope="module")
def many_people():
    return draw_people(200_000, seed=11, pool_sizes=DEFAULT_POOL_SIZES)


def test_full_names_are_unique(many_people):
    names = many_people.names
    assert len(np.unique(names, axis=0)) == len(names)


def test_unique_names_even_when_the_name_space_is_nearly_full():
    sizes = {**DEFAULT_POOL_SIZES, "first_name": 3, "middle_name": 2, "last_name": 5}
    people = draw_people(30, seed=0, pool_sizes=sizes)
    assert len(np.unique(people.names, axis=0)) == 30 == name_space(sizes)


def test_attribute_values_are_uniform(many_people):
    for column, attribute in enumerate(ATTRIBUTES):
        counts = np.bincount(many_people.values[:, column], minlength=DEFAULT_POOL_SIZES[attribute])
        assert len(counts) == DEFAULT_POOL_SIZES[attribute]
        assert chi_square(counts) < chi_square_critical(len(counts) - 1), attribute


def test_attributes_are_independent_of_each_other(many_people):
    day, month = many_people.values[:, 1], many_people.values[:, 2]
    table = np.bincount(day * 12 + month, minlength=28 * 12).reshape(28, 12).astype(float)
    expected = table.sum(1, keepdims=True) * table.sum(0, keepdims=True) / table.sum()
    statistic = float(((table - expected) ** 2 / expected).sum())
    assert statistic < chi_square_critical(27 * 11)


def test_same_seed_same_people_and_name_pools_do_not_move_attributes():
    a = draw_people(500, seed=3, pool_sizes=DEFAULT_POOL_SIZES)
    b = draw_people(500, seed=3, pool_sizes=DEFAULT_POOL_SIZES)
    c = draw_people(500, seed=4, pool_sizes=DEFAULT_POOL_SIZES)
    smaller_names = draw_people(500, seed=3, pool_sizes={**DEFAULT_POOL_SIZES, "last_name": 50})
    assert np.array_equal(a.names, b.names) and np.array_equal(a.values, b.values)
    assert not np.array_equal(a.values, c.values)
    assert np.array_equal(a.values, smaller_names.values)


@pytest.mark.parametrize(
    ("count", "message"),
    [
        (0, "must be a positive integer"),
        (-5, "must be a positive integer"),
        (160_000_001, "do not fit in the 160000000"),
    ],
)
def test_bad_people_counts(count, message):
    with pytest.raises(BiosrecallError, match=message):
        draw_people(count, seed=0, pool_sizes=DEFAULT_POOL_SIZES)


def test_chance_bits_is_the_most_common_value_share_times_log2_pool():
    sizes = {**DEFAULT_POOL_SIZES}
    values = np.zeros((4, len(ATTRIBUTES)), dtype=np.int64)
    values[:, 0] = [5, 5, 5, 1]  # birth_city: the most common value covers 3 of 4 people
    values[:, 1] = [0, 1, 2, 3]  # birth_day: every value once
    chance = chance_bits(values, sizes)
    assert chance["birth_city"] == pytest.approx(6 * 3 / 4)
    assert chance["birth_day"] == pytest.approx(math.log2(28) / 4)
    assert chance["employer"] == pytest.approx(7.0)  # everyone shares value 0
