"""From exact-answer flags to recall: facts recalled, bits per person, and the long-format table.

A fact (person, attribute) is recalled when at least `threshold` (default 4) of its evaluation
templates are exact. Each recalled attribute contributes log2(pool size) bits; recalled bits per person
is that sum averaged over the people in the eval set. A model that always gives one fixed value
recalls about 1/|pool| of an attribute's facts: the chance level, log2(|pool|) / |pool| per attribute
unless the dataset supplies its own (bioS datasets record the most-common-value model's bits).

    score = score_exact(exact, eval_set, dataset.pool_sizes)          # one depth: a RecallScore
    table = recall_table(exact_by_depth(...), eval_set, dataset.pool_sizes,
                         chance_bits=dataset.manifest["chance_bits_per_attribute"])

`recall_table` has one row per (depth, attribute), plus attribute "all" for the whole person:
depth, attribute, recall (share of facts recalled), bits (recalled bits per person), exact (share of
exact items), exact_template_0..4 (per template), ceiling_bits and chance_bits (of that attribute, or
of the person for "all"), threshold.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd

from biosrecall.bios import ATTRIBUTES
from biosrecall.errors import BiosrecallError

DEFAULT_THRESHOLD = 4
ALL = "all"
RECALL_SHARE = 0.95
"""The serving headline's target: the share of a run's best fixed-depth recall a depth must reach."""


@dataclass(frozen=True)
class RecallScore:
    """Recall of one model at one serving depth (attribute axes follow `ATTRIBUTES`)."""

    fact_recalled: np.ndarray  # bool [people, attributes]
    attribute_recall: np.ndarray  # [attributes]: share of people whose fact is recalled
    attribute_bits: np.ndarray  # [attributes]: recalled bits per person from each attribute
    attribute_exact: np.ndarray  # [attributes]: share of exact items over all templates
    template_exact: np.ndarray  # [attributes, templates]: share of exact items per template
    bits_per_person: float  # the headline number: sum of attribute_bits

    @property
    def recall(self) -> float:
        """Share of all facts recalled."""
        return float(self.fact_recalled.mean())


def pool_bits(pool_sizes: Mapping[str, int]) -> np.ndarray:
    """log2(pool size) per attribute, in `ATTRIBUTES` order: the bits one recalled fact carries (a
    dataset's manifest holds a size for each, `bios.validation.DatasetManifest`)."""
    return np.log2(np.array([pool_sizes[name] for name in ATTRIBUTES], dtype=float))


def chance_pool_bits(
    pool_sizes: Mapping[str, int], chance_bits: Mapping[str, float] | None = None
) -> np.ndarray:
    """Chance bits per attribute in `ATTRIBUTES` order: `chance_bits` when given, else the expectation
    for a model that always answers one fixed value of a uniformly drawn attribute, log2(n) / n."""
    if chance_bits is not None:
        return np.array([float(chance_bits[name]) for name in ATTRIBUTES])
    sizes = np.array([pool_sizes[name] for name in ATTRIBUTES], dtype=float)
    return np.log2(sizes) / sizes


def fact_index(eval_set) -> tuple[np.ndarray, int]:
    """Flat (person, attribute) index of every row, and the number of people in the eval set."""
    # Person ids need not be 0..N-1 (an eval set of a subset of people); number them densely.
    _, person = np.unique(np.asarray(eval_set.person), return_inverse=True)
    attribute = np.asarray(eval_set.attribute)
    return person * len(ATTRIBUTES) + attribute, int(person.max()) + 1


def check_threshold(eval_set, threshold: int) -> None:
    """The threshold must be reachable: 1 <= threshold <= templates per fact."""
    fact, people = fact_index(eval_set)
    templates_per_fact = np.bincount(fact, minlength=people * len(ATTRIBUTES))
    fewest = int(templates_per_fact.min())
    if not 1 <= threshold <= fewest:
        raise BiosrecallError(
            f"threshold must be between 1 and {fewest} templates per fact (got {threshold})"
        )


def score_exact(
    exact: np.ndarray, eval_set, pool_sizes: Mapping[str, int], threshold: int = DEFAULT_THRESHOLD
) -> RecallScore:
    """Score one depth's exact flags (bool [M], aligned with the eval set's rows)."""
    exact = np.asarray(exact, dtype=bool)
    check_threshold(eval_set, threshold)
    fact, people = fact_index(eval_set)
    attributes = len(ATTRIBUTES)
    exact_per_fact = np.bincount(fact, weights=exact, minlength=people * attributes)
    fact_recalled = exact_per_fact.reshape(people, attributes) >= threshold
    attribute_recall = fact_recalled.mean(axis=0)
    attribute_bits = attribute_recall * pool_bits(pool_sizes)
    return RecallScore(
        fact_recalled=fact_recalled,
        attribute_recall=attribute_recall,
        attribute_bits=attribute_bits,
        attribute_exact=_mean_by(exact, np.asarray(eval_set.attribute), attributes),
        template_exact=_template_exact(exact, eval_set, attributes),
        bits_per_person=float(attribute_bits.sum()),
    )


def _mean_by(values: np.ndarray, groups: np.ndarray, size: int) -> np.ndarray:
    totals = np.bincount(groups, weights=values, minlength=size)
    counts = np.bincount(groups, minlength=size)
    return totals / np.maximum(counts, 1)


def _template_exact(exact: np.ndarray, eval_set, attributes: int) -> np.ndarray:
    template = np.asarray(eval_set.template)
    templates = int(template.max()) + 1
    cell = np.asarray(eval_set.attribute) * templates + template
    return _mean_by(exact, cell, attributes * templates).reshape(attributes, templates)


def recall_table(
    exact_by_depth: np.ndarray,
    eval_set,
    pool_sizes: Mapping[str, int],
    threshold: int = DEFAULT_THRESHOLD,
    chance_bits: Mapping[str, float] | None = None,
) -> pd.DataFrame:
    """Long-format recall for every depth (row k - 1 of `exact_by_depth` is depth k).

    `chance_bits` maps each attribute to the dataset's chance level (default: log2(n) / n); the
    person's chance level is their sum.
    """
    ceilings = pool_bits(pool_sizes)
    chances = chance_pool_bits(pool_sizes, chance_bits)
    template = np.asarray(eval_set.template)
    tables = []
    for depth, exact in enumerate(np.asarray(exact_by_depth, dtype=bool), start=1):
        score = score_exact(exact, eval_set, pool_sizes, threshold)
        overall = _mean_by(exact, template, int(template.max()) + 1)
        template_exact = np.vstack([score.template_exact, overall])
        # One row per attribute, then the whole person's ("all").
        columns = {
            "depth": depth,
            "attribute": [*ATTRIBUTES, ALL],
            "recall": [*score.attribute_recall, score.recall],
            "bits": [*score.attribute_bits, score.bits_per_person],
            "exact": [*score.attribute_exact, exact.mean()],
            **{f"exact_template_{t}": rates for t, rates in enumerate(template_exact.T)},
            "ceiling_bits": [*ceilings, ceilings.sum()],
            "chance_bits": [*chances, chances.sum()],
        }
        tables.append(pd.DataFrame(columns))
    table = pd.concat(tables, ignore_index=True)
    table["threshold"] = threshold
    return table
