"""Exposure-matched run lengths: how many updates show every person's biography E times.

    exposures = plan_exposures(sampler, seed=0, exposures=100)   # a BatchSampler and the run's seed
    exposures.updates, exposures.mean, exposures.fewest, exposures.most
    counts = exposure_counts(sampler, seed=0, updates=exposures.updates)   # int64 [N], per person

An exposure is one biography of the person in a training batch. A run seeded `seed` draws update u's
batch from `batch_generator(seed, u)`, so the batches of any run length are known before it starts:
`plan_exposures` draws them (people only, no tokens: `BatchSampler.people`) and returns the fewest
updates whose batches hold at least E x N biographies. The mean exposure over people is then at least
E and less than E plus one update's biographies / N.

E is a mean, not a count every person meets exactly: the sampler draws people at random for every
batch (distinct within a batch when N allows), so one person's count over a run varies around E by
about its square root (a Poisson-like spread), and short biographies fit the end of a row more often
(`biosrecall.bios.sampler`: about 6% more at seq_len 256). `fewest` and `most` report the spread that
the run really has. The Physics of Language Models 3.3 paper trains the same way, on randomly drawn
biographies, and counts exposures as this mean.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from biosrecall.bios.sampler import BatchSampler, batch_generator
from biosrecall.compute.schedules import MAX_UPDATES
from biosrecall.errors import BiosrecallError
from biosrecall.numbers import EXPOSURES, check_number


@dataclass(frozen=True)
class Exposures:
    """A run length sized to show every person's biography `asked` times on average."""

    asked: float
    """E, the mean exposures per person that was asked for."""
    updates: int
    """The fewest updates whose batches hold at least E x N biographies."""
    people: int
    """N, the people of the dataset."""
    biographies: int
    """Biographies in those updates' batches."""
    fewest: int
    """Exposures of the person seen least often."""
    most: int
    """Exposures of the person seen most often."""

    @property
    def mean(self) -> float:
        """Mean exposures per person: biographies / N, at least `asked`."""
        return self.biographies / self.people

    def summary(self) -> dict[str, Any]:
        """JSON-safe, for a run's config.json plan: every field but `updates` (the plan's own), and the mean."""
        fields = {key: value for key, value in asdict(self).items() if key != "updates"}
        return {**fields, "mean": self.mean}

    def describe(self) -> str:
        """E.g. "exposures 100 (mean 100.1, per person 73-129)", for the trainer's plan line."""
        return f"exposures {self.asked:g} (mean {self.mean:.4g}, per person {self.fewest}-{self.most})"


def exposure_counts(sampler: BatchSampler, seed: int, updates: int) -> np.ndarray:
    """int64 [N]: how many biographies of each person the first `updates` batches of a run seeded
    `seed` hold."""
    counts = np.zeros(sampler.num_people, dtype=np.int64)
    for update in range(updates):
        np.add.at(counts, sampler.people(batch_generator(seed, update)), 1)
    return counts


def plan_exposures(sampler: BatchSampler, seed: int, exposures: float) -> Exposures:
    """The fewest updates of a run seeded `seed` whose batches show everyone `exposures` times on
    average (see the module doc); a run longer than the planner's `MAX_UPDATES` is refused before any
    batch is drawn when even full rows could not keep it under the limit."""
    asked = check_number("exposures", exposures, EXPOSURES)
    people = sampler.num_people
    # Even batches of full rows (every candidate kept) would need this many updates.
    _check_length(asked * people / (sampler.batch_size * sampler.biographies_per_row), asked)
    needed = math.ceil(asked * people)
    counts = np.zeros(people, dtype=np.int64)
    seen = updates = 0
    while seen < needed:
        if updates == MAX_UPDATES:
            _check_length(MAX_UPDATES + 1, asked)
        drawn = sampler.people(batch_generator(seed, updates))
        np.add.at(counts, drawn, 1)
        seen, updates = seen + len(drawn), updates + 1
        if updates == _PROBE_UPDATES:
            # Counting a run past the limit would take minutes before refusing it: the first batches
            # already tell its length to a few percent.
            projected = needed / (seen / updates)
            if projected > MAX_UPDATES * _PROBE_MARGIN:
                _check_length(projected, asked, about=True)
    return Exposures(asked, updates, people, seen, int(counts.min()), int(counts.max()))


_PROBE_UPDATES = 32
_PROBE_MARGIN = 1.15  # four standard errors of the mean biographies per batch over the probe


def _check_length(updates: float, asked: float, about: bool = False) -> None:
    if updates > MAX_UPDATES:
        count = f"{updates:,.0f}" if updates < 1e15 else f"{updates:.3g}"
        raise BiosrecallError(
            f"--exposures {asked:g} needs {'about' if about else 'at least'} {count} updates of this "
            "batch, beyond the planner's "
            f"limit of {MAX_UPDATES:,} (ask for fewer exposures or a larger --batch-size)"
        )
