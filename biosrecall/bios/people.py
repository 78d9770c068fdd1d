"""Fictional people: unique full names and uniformly drawn attribute values, as pool indices.

Names and attributes come from two independent streams of one seed (numpy `SeedSequence.spawn`), so
changing a name pool does not change anyone's attributes. Full names ("first middle last") are
distinct; each attribute value is drawn uniformly and independently from its pool, so an attribute
carries exactly log2(pool size) bits.

    people = draw_people(1000, seed=0, pool_sizes=resolve_pool_sizes())
    people.values[:, ATTRIBUTES.index("major")]      # each person's major, as a pool index
    table = people_table(people, load_pools())       # the people.parquet table
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from biosrecall.bios.pools import ATTRIBUTES, NAME_PARTS
from biosrecall.errors import BiosrecallError
from biosrecall.numbers import check_count


@dataclass(frozen=True)
class People:
    """`names`: int64 [N, 3] indices into the first/middle/last name pools;
    `values`: int64 [N, 6] indices into the attribute pools, columns in `ATTRIBUTES` order."""

    names: np.ndarray
    values: np.ndarray

    def __len__(self) -> int:
        return len(self.values)


def name_space(pool_sizes: Mapping[str, int]) -> int:
    return math.prod(pool_sizes[part] for part in NAME_PARTS)


def check_people_count(num_people: int, pool_sizes: Mapping[str, int]) -> None:
    check_count(num_people, "number of people")
    space = name_space(pool_sizes)
    if num_people > space:
        sizes = " x ".join(str(pool_sizes[part]) for part in NAME_PARTS)
        raise BiosrecallError(
            f"{num_people} people do not fit in the {space} distinct full names ({sizes} first/middle/last names)"
        )


def _distinct_integers(rng: np.random.Generator, space: int, count: int) -> np.ndarray:
    """`count` distinct integers in [0, space) in random order, in O(count) memory when count << space."""
    if 2 * count > space:
        return rng.permutation(space)[:count]
    drawn = rng.integers(0, space, count)
    while True:
        _, first = np.unique(drawn, return_index=True)
        if len(first) == count:
            return drawn
        repeated = np.ones(count, dtype=bool)
        repeated[first] = False
        drawn[repeated] = rng.integers(0, space, int(repeated.sum()))


def draw_people(num_people: int, seed: int, pool_sizes: Mapping[str, int]) -> People:
    """N people with distinct full names and uniform, independent attribute values."""
    check_people_count(num_people, pool_sizes)
    name_seed, value_seed = np.random.SeedSequence(seed).spawn(2)
    name_rng, value_rng = np.random.default_rng(name_seed), np.random.default_rng(value_seed)
    shape = tuple(pool_sizes[part] for part in NAME_PARTS)
    flat = _distinct_integers(name_rng, math.prod(shape), num_people)
    names = np.stack(np.unravel_index(flat, shape), axis=1).astype(np.int64)
    values = np.stack([value_rng.integers(0, pool_sizes[a], num_people) for a in ATTRIBUTES], axis=1).astype(
        np.int64
    )
    return People(names=names, values=values)


def chance_bits(values: np.ndarray, pool_sizes: Mapping[str, int]) -> dict[str, float]:
    """Expected recalled bits per person of a model that always answers each attribute's most common value.

    For attribute a that model is right for count(most common value) / N of the people and then
    earns log2(|pool_a|) bits: chance_a = log2(|pool_a|) * max_count_a / N, on the actual people.
    """
    chance = {}
    for column, attribute in enumerate(ATTRIBUTES):
        counts = np.bincount(values[:, column], minlength=pool_sizes[attribute])
        chance[attribute] = math.log2(pool_sizes[attribute]) * int(counts.max()) / len(values)
    return chance


def _pick(pool: tuple[str, ...], indices: np.ndarray) -> pa.Array:
    return pa.array(pool, type=pa.string()).take(pa.array(indices))


def people_table(people: People, pools: Mapping[str, tuple[str, ...]]) -> pa.Table:
    """One row per person: id, name, the three name parts, then each attribute's value and pool index."""
    parts = {part: _pick(pools[part], people.names[:, i]) for i, part in enumerate(NAME_PARTS)}
    columns = {
        "id": pa.array(np.arange(len(people), dtype=np.int64)),
        "name": pc.binary_join_element_wise(*parts.values(), " "),
        **parts,
    }
    for i, attribute in enumerate(ATTRIBUTES):
        columns[attribute] = _pick(pools[attribute], people.values[:, i])
        columns[f"{attribute}_index"] = pa.array(people.values[:, i].astype(np.int32))
    return pa.table(columns)
