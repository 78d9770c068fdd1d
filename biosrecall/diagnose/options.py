"""The update diagnostic's options: one checked dataclass, and the parsers of the command's depth lists.

    options = DiagnoseOptions(depths=(4, 16), after_uniform=(0, 16), batches=8)
    diagnose_update("runs/ff", "switch", options)
    parse_depth_list("1..8,16")       # [1, ..., 8, 16]: --serving-depths, --after-uniform
    parse_candidate_depths("4,16")    # (4, 16): --depths, two distinct depths, shallow first

`DiagnoseOptions` checks and normalises every field when it is built (lists become sorted tuples of
distinct values, an `rms` number becomes a float), so a bad value is refused with one line before any
model is loaded. The messages name the command's options, which are these fields. Which checkpoint,
which data and which device are not options of the method: `diagnose_update` takes them.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from biosrecall import numbers
from biosrecall.errors import BiosrecallError
from biosrecall.numbers import MAX_DEPTH, check_count, check_depth, parse_float, parse_int, split_list

DEFAULT_PEOPLE = 100
DEFAULT_VAL_SEQUENCES = 64
RMS_MODES = ("shallow", "deep")
CANDIDATES_HELP = (
    f"--depths takes two depths SHALLOW,DEEP in 1..{MAX_DEPTH} with the shallower first, e.g. 4,16"
)


@dataclass
class DiagnoseOptions:
    depths: tuple[int, int] = (4, 16)
    """The two candidate update depths, shallower first; the advantage reported is the deeper one's.
    Written deeper first they are refused, not sorted, so "16,4" cannot quietly answer the opposite
    question. Equal depths are the method's null control (the advantage is exactly 0): the library
    runs them, the command refuses them."""

    after_uniform: tuple[int, ...] = (0,)
    """Diagnose after continuing the run this many updates from the checkpoint, for each value (>= 0)."""

    batches: int = 8
    """Training batches to average over: the run's own next ones (updates u .. u + batches - 1)."""

    serving_depths: tuple[int, ...] = tuple(range(1, 17))
    """Serving depths at which each updated model is scored (>= 1)."""

    people: int | None = None
    """bioS runs only: score the prompts of the first N people (0 = everyone; unset: DEFAULT_PEOPLE)
    [100]."""

    val_sequences: int | None = None
    """LM runs only: score validation NLL on the first N validation windows of the run's corpus,
    seq-len + 1 tokens each, in stream order as `lm eval` reads them (0 = all; unset:
    DEFAULT_VAL_SEQUENCES) [64]."""

    rms: str | float = "shallow"
    """Common RMS of both updates: "shallow" (the shallower update's), "deep", or a positive number."""

    seed: int = 0
    """Seeds the bootstrap resampling."""

    bootstrap: int = 2000
    """Bootstrap resamples of the batches."""

    level: float = 0.95
    """Confidence level of the bootstrap interval, in (0, 1)."""

    def __post_init__(self) -> None:
        self.depths = _check_candidates(self.depths)
        self.after_uniform = _distinct("--after-uniform", self.after_uniform, low=0)
        self.serving_depths = _distinct("--serving-depths", self.serving_depths, low=1)
        self.batches = check_count(self.batches, "--batches")
        self.bootstrap = check_count(self.bootstrap, "--bootstrap")
        self.seed = numbers.check_seed(self.seed, "--seed")
        for name in ("people", "val_sequences"):
            value = getattr(self, name)
            if value is not None:
                setattr(self, name, check_count(value, f"--{name.replace('_', '-')}", low=0))
        self.rms = _check_rms(self.rms)
        self.level = numbers.check_number(
            "--level", self.level, numbers.rates(0, 1, low_open=True, high_open=True)
        )


def _distinct(option: str, values: Iterable, low: int) -> tuple[int, ...]:
    """Sorted distinct integers >= low, at least one."""
    listed = isinstance(values, Iterable) and not isinstance(values, str)
    chosen = sorted({check_count(value, option, low) for value in values}) if listed else []
    if not chosen:
        raise BiosrecallError(f"{option} takes a non-empty list of integers (got {values!r})")
    return tuple(chosen)


def _check_candidates(depths: Iterable | str) -> tuple[int, int]:
    """Two depths, shallower first, from a sequence or the command line's text ("4,16")."""
    try:
        values = tuple(map(parse_int, split_list(depths)) if isinstance(depths, str) else depths)
        shallow, deep = (check_depth(depth, "--depths") for depth in values)
    except ValueError:  # not two integers, or one is not a depth (a BiosrecallError is a ValueError)
        raise BiosrecallError(f"{CANDIDATES_HELP} (got {depths!r})") from None
    if deep < shallow:
        raise BiosrecallError(f"{CANDIDATES_HELP} (got {shallow},{deep}: write {deep},{shallow})")
    return shallow, deep


def _check_rms(value: Any) -> str | float:
    if value in RMS_MODES:
        return value
    try:
        number = parse_float(value) if isinstance(value, str) else float(value)
    except (TypeError, ValueError):  # a BiosrecallError is a ValueError
        number = math.nan
    if not (math.isfinite(number) and number > 0):
        raise BiosrecallError(f"--rms takes shallow, deep or a positive number (got {value!r})")
    return number


def parse_candidate_depths(text: str) -> tuple[int, int]:
    """--depths "4,16" -> (4, 16): two distinct depths, shallower first. A depth compared with itself is
    refused here as a user's mistake, though `DiagnoseOptions` runs it as the null control."""
    depths = _check_candidates(str(text))
    if depths[0] == depths[1]:
        raise BiosrecallError(
            f"--depths {text} compares depth {depths[0]} with itself, which gives an advantage of 0 by "
            "construction; give two distinct depths SHALLOW,DEEP such as 4,16"
        )
    return depths


def parse_depth_list(
    text: str, option: str = "--serving-depths", minimum: int = 1, maximum: int = MAX_DEPTH
) -> list[int]:
    """ "1..16", "4,16", "1..8,16" -> sorted distinct integers in minimum .. maximum (one-line error
    otherwise), written in ASCII digits (`biosrecall.numbers`)."""
    spans = []
    try:
        for part in split_list(str(text)):
            low, dots, high = part.partition("..")
            first = parse_int(low.strip(" "))
            spans.append((first, parse_int(high.strip(" ")) if dots else first))
    except BiosrecallError:
        raise BiosrecallError(
            f"{option} takes integers or ranges such as 1..16 or 4,16 (got {text!r})"
        ) from None
    spans = [(first, last) for first, last in spans if first <= last]  # 5..2 holds no value
    if not spans or min(first for first, _ in spans) < minimum:
        raise BiosrecallError(f"{option} needs values >= {minimum} (got {text!r})")
    check_count(max(last for _, last in spans), option, minimum, maximum, why="")  # before any range is built
    return sorted({value for first, last in spans for value in range(first, last + 1)})
