"""One rule per kind of number: seeds, depths, counts and rates, and how their text is read.

    parse_int("4"); parse_float("2e14")          # "４", " 4", "1_000", "0x10" are refused
    check_seed(7)                                # an integer in 0 .. 2^63-1, for every command
    check_depth(64, "--max-depth")               # an integer in 1 .. MAX_DEPTH
    check_count(1000, "people", low=1)           # an integer in low .. high (2^63-1 unless said)
    check_number("lr", 2e-3, rates(0, 1, low_open=True))  # a finite number within bounds: each kind is a `Limit`
    split_list("0.9,0.95")                       # the items of a comma list, each read as above

Every command-line option, `TrainConfig` field and schedule spec that holds one of these kinds reads
and checks it with the functions here, so `generate --seed` and `train --seed` refuse the same values
in the same words. A refusal is a `BiosrecallError` naming the value: "seed must be a non-negative
integer, got -1". Numbers are written in ASCII only (digits, sign, point, exponent), so a value is
recorded exactly as it was read; Python's int() and float() also accept other scripts' digits,
underscores and surrounding spaces, which is why nothing here calls them on raw text.

This module imports neither torch nor numpy: the command line checks its options before it imports
them. numpy's integers and floats are accepted as numbers (they register as `numbers.Integral` and
`numbers.Real`).
"""

from __future__ import annotations

import contextlib
import math
import numbers
import re
import sys
from dataclasses import dataclass
from typing import Any

from biosrecall.errors import BiosrecallError, excerpt

MAX_SEED = 2**63 - 1
"""Largest seed (seeds are drawn into signed 64-bit integers by numpy and torch)."""
MAX_COUNT = 2**63 - 1
"""Largest count of anything: counts are signed 64-bit integers in numpy, torch and every file."""
MAX_DEPTH = 1024
"""Deepest recurrence a schedule, a serving depth or a backprop depth may name: a training update runs
the block K times, and K in the thousands is no experiment anyone runs."""
FLOAT_MAX = sys.float_info.max

_INTEGER = re.compile(r"[+-]?[0-9]+")
_DECIMAL = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")
# Read as numbers so that the bounds refuse them with the words every other bad value gets.
_NON_FINITE = re.compile(r"[+-]?(inf|infinity|nan)", re.IGNORECASE)


def parse_int(text: str) -> int:
    """An integer written in ASCII digits with an optional sign, nothing else (no spaces)."""
    if isinstance(text, str) and text.isascii() and _INTEGER.fullmatch(text):
        with contextlib.suppress(ValueError):  # more digits than Python converts (sys.get_int_max_str_digits)
            return int(text)
    raise BiosrecallError(f"expected an integer, got {excerpt(text)}")


def parse_float(text: str) -> float:
    """A decimal number in ASCII (1, 0.5, 2e14, -3.5E-2; inf and nan are read, for the bounds to
    refuse), nothing else (no spaces, underscores or other scripts' digits)."""
    ascii_text = isinstance(text, str) and text.isascii()
    if not ascii_text or not (_DECIMAL.fullmatch(text) or _NON_FINITE.fullmatch(text)):
        raise BiosrecallError(f"expected a number, got {excerpt(text)}")
    return float(text)


def split_list(text: str) -> list[str]:
    """The items of a comma list ("4,8,16"; a space after a comma is allowed; "" has none); an empty
    item ("4,,8", a trailing comma) and text that starts or ends with a space are refused, as a number
    would be."""
    if not isinstance(text, str) or text != text.strip():
        raise BiosrecallError(f"expected a comma-separated list, got {excerpt(text)}")
    items = [item.strip(" ") for item in text.split(",")] if text else []
    if "" in items:
        raise BiosrecallError(f"expected a comma-separated list without empty items, got {excerpt(text)}")
    return items


@dataclass(frozen=True)
class Limit:
    """The values a number may take: finite numbers of `kind` (int or float) from low to high."""

    kind: type
    low: float
    high: float
    low_open: bool = False
    """`low` itself is refused."""
    high_open: bool = False
    """`high` itself is refused."""
    why: str = ""
    """Why the upper end is where it is (said when a value exceeds it)."""

    def under(self, number: float) -> bool:
        """Whether `number` lies below the floor (or on it, when the floor is open)."""
        return number < self.low or (self.low_open and number == self.low)

    def describe(self) -> str:
        """The allowed values in words, e.g. 'a positive integer' or 'a number in [0, 1)'."""
        if self.kind is int:
            if self.low in (0, 1):
                return "a positive integer" if self.low == 1 else "a non-negative integer"
            return f"an integer of at least {self.low:,}"
        if self.high == FLOAT_MAX:
            return f"a {'positive' if self.low_open else 'non-negative'} finite number"
        return f"a number in {self.interval()}"

    def interval(self) -> str:
        left, right = "(" if self.low_open else "[", ")" if self.high_open else "]"
        return f"{left}{self.low:g}, {self.high:g}{right}"


SEED = Limit(int, 0, MAX_SEED, why="seeds are signed 64-bit integers")
"""Every seed: an integer in 0 .. MAX_SEED."""
DEPTH = Limit(int, 1, MAX_DEPTH, why="deeper than any schedule or serving depth may go")
"""Every recurrent depth, trained, served or backpropagated: an integer in 1 .. MAX_DEPTH."""
EXPOSURES = Limit(float, 0, FLOAT_MAX, low_open=True)
"""Every mean number of exposures per person (`train --exposures`): a positive finite number, a
fraction such as 0.5 included (it is a mean over people, not a count each one meets)."""
_INT64 = "counts are signed 64-bit integers"


def counts(low: int = 1, high: int = MAX_COUNT, why: str = _INT64) -> Limit:
    """A count of things (people, updates, tokens, threads, documents): an integer in low .. high."""
    return Limit(int, low, high, why=why)


def rates(
    low: float = 0.0,
    high: float = FLOAT_MAX,
    low_open: bool = False,
    high_open: bool = False,
    why: str = "",
) -> Limit:
    """A real-valued setting (a rate, fraction, level or budget): a finite number within the bounds."""
    return Limit(float, low, high, low_open, high_open, why)


def check_seed(value: Any, name: str = "seed") -> int:
    return check_number(name, value, SEED)


def check_depth(value: Any, name: str = "depth") -> int:
    return check_number(name, value, DEPTH)


def check_count(value: Any, name: str, low: int = 1, high: int = MAX_COUNT, why: str = _INT64) -> int:
    return check_number(name, value, counts(low, high, why))


def check_number(name: str, value: Any, limit: Limit) -> int | float:
    """`value` as `limit.kind`, refused (naming `name`) unless finite and within the limit: the one
    implementation behind the rules above and every `TrainConfig` bound."""
    number = _as_number(value, limit.kind)
    bad_type = number is None or (limit.kind is float and not math.isfinite(number))
    if bad_type or limit.under(number):
        bound = limit.describe()
    elif number > limit.high or (limit.high_open and number == limit.high):
        reason = f" ({limit.why})" if limit.why else ""
        bound = (limit.describe() if limit.kind is float else f"at most {limit.high:,}") + reason
    else:
        return number
    raise BiosrecallError(f"{name} must be {bound}, got {excerpt(value)}")


def _as_number(value: Any, kind: type) -> int | float | None:
    """int or float (by `kind`) of a number that is one; None for bools, strings, non-numbers."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return None
    if kind is int:
        return int(value) if isinstance(value, numbers.Integral) else None
    try:
        return float(value)
    except OverflowError:  # an int beyond float range
        return math.inf
