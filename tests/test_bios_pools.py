"""Frozen attribute pools: the 33.39-bit default, the committed files, and pool-size validation."""

from __future__ import annotations

import math

import pytest

from biosrecall.bios import ATTRIBUTES, DEFAULT_POOL_SIZES, attribute_bits, load_pools
from biosrecall.bios.pools import (
    FROZEN_POOL_LENGTHS,
    POOL_NAMES,
    make_pools,
    pool_file_text,
    resolve_pool_sizes,
    stale_pool_files,
)
from biosrecall.errors import BiosrecallError
from biosrecall.paths import POOLS_DIR


def test_default_pool_sizes_carry_33_39_bits_per_person():
    bits = attribute_bits(DEFAULT_POOL_SIZES)
    assert round(sum(bits.values()), 2) == 33.39
    assert bits["birth_day"] == math.log2(28) and bits["birth_month"] == math.log2(12)
    assert set(bits) == set(ATTRIBUTES)


def test_committed_pools_equal_a_rebuild():
    rebuilt = make_pools()
    for name in POOL_NAMES:
        committed = (POOLS_DIR / f"{name}.txt").read_text(encoding="utf-8")
        assert committed == pool_file_text(rebuilt[name]), name
    assert stale_pool_files(POOLS_DIR) == []


def test_pools_have_their_frozen_lengths_and_distinct_values():
    pools = load_pools({name: FROZEN_POOL_LENGTHS[name] for name in POOL_NAMES})
    for name, values in pools.items():
        assert len(values) == FROZEN_POOL_LENGTHS[name] == len(set(values)), name
    assert not set(pools["first_name"]) & set(pools["middle_name"])
    assert all(" " not in v for part in ("first_name", "middle_name", "last_name") for v in pools[part])
    assert pools["birth_day"] == tuple(str(d) for d in range(1, 29))
    assert pools["birth_month"][0] == "January" and pools["birth_month"][-1] == "December"


def test_pool_size_takes_the_first_values_of_the_frozen_pool():
    small = load_pools({"employer": 5})["employer"]
    full = load_pools({"employer": 1000})["employer"]
    assert small == full[:5]
    assert len(load_pools()["birth_city"]) == DEFAULT_POOL_SIZES["birth_city"]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"birth_city": 501}, "above the pool length 500"),
        ({"major": 1}, "field 'major': expected int >= 2, got 1"),
        ({"birth_day": 0}, "field 'birth_day': expected int >= 2, got 0"),
        ({"planet": 3}, r"field 'planet' is unknown \(known: first_name"),
        ({"major": 2.5}, "field 'major': expected int, got float"),
    ],
)
def test_bad_pool_sizes_are_clear_errors(overrides, message):
    with pytest.raises(BiosrecallError, match=message):
        load_pools(overrides)


def test_a_damaged_pool_file_is_reported_with_its_line(tmp_path):
    for name in POOL_NAMES:
        (tmp_path / f"{name}.txt").write_text((POOLS_DIR / f"{name}.txt").read_text())
    lines = (tmp_path / "major.txt").read_text().splitlines()
    (tmp_path / "major.txt").write_text("\n".join([*lines[:3], lines[0], *lines[4:]]) + "\n")
    with pytest.raises(BiosrecallError, match=r"major.txt line 4: duplicate of line 1"):
        load_pools(pools_dir=tmp_path)
    (tmp_path / "major.txt").unlink()
    with pytest.raises(BiosrecallError, match="pool file .*major.txt not found"):
        load_pools(pools_dir=tmp_path)


def test_resolve_pool_sizes_keeps_defaults_for_unnamed_pools():
    sizes = resolve_pool_sizes({"employer": 256})
    assert sizes["employer"] == 256
    assert {k: v for k, v in sizes.items() if k != "employer"} == {
        k: v for k, v in DEFAULT_POOL_SIZES.items() if k != "employer"
    }
