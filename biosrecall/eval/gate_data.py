"""What the learned exit gate (`biosrecall.eval.gate`) is fitted and calibrated on, and how its
threshold is calibrated: bioS training phrasings only, and a Learn-then-Test binomial bound.

    fit_people, calibration_people = split_people(dataset.num_people, seed=0)
    fit = gate_queries(dataset, fit_people)                     # every training phrasing of them
    held = gate_queries(dataset, calibration_people, one_per_fact=True, seed=0)
    result = calibrate(scores, exact, reference=4, delta=0.1, alpha=0.05)
    result.threshold                                            # a gate logit, or None

Queries. A query is one training sentence cut where its value starts: `[sep] + piece0 + name +
piece1`, answered by the value, the same layout as an evaluation row (`biosrecall.bios.evalset`), so
the same scorers read it. Only templates whose name comes before the value can be cut so (the value
must be predictable from what precedes it), and never an evaluation phrasing: a dataset built without
`--holdout-eval-templates` also trains on each evaluation prompt as `"<prompt> {value}."`
(`bios.templates.eval_completion`), and those rows are left out here (`eval_completion_rows`), so the
gate sees no token of the five evaluation templates beyond the words they share with training ones.

Calibration. The gate stops a query at the first depth whose gate logit is at least a threshold t,
and always at the reference depth R (the best fixed depth on the fitting people). Its loss on a
query is 1 when the answer is exact at R but not at the exit depth, so the recall lost against R is
at most the mean loss. Thresholds are tried from a grid fixed before any data is seen
(`THRESHOLD_GRID`, strict to lax): threshold t passes when the binomial p-value
P(Binomial(n, delta) <= losses) is at most alpha, and the laxest t reached before the first failure is
chosen (fixed-sequence testing, the Learn-then-Test procedure of Angelopoulos et al. 2021, as CALM
uses). With probability at least 1 - alpha over the calibration draw, the chosen rule's expected loss
is at most delta on queries drawn as the calibration ones were. Those are one training phrasing per
(person, attribute) fact of held-out people, so that queries are independent draws rather than five
phrasings of one fact; the guarantee is about training phrasings, and it does not carry over to the
evaluation templates or to the per-token exit of the decoder. When no threshold passes, the gate
never stops early and serves at R, whose loss is 0 by definition.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from biosrecall.bios.encoding import expand_runs
from biosrecall.bios.evalset import EvalSet
from biosrecall.bios.pools import ATTRIBUTES
from biosrecall.bios.templates import eval_completion
from biosrecall.errors import BiosrecallError

CALIBRATION_SHARE = 0.3
MAX_FIT_QUERIES = 2048
THRESHOLD_GRID = tuple(round(12.0 - 0.1 * i, 1) for i in range(241))
"""Gate-logit thresholds, strict to lax (12 to -12 in steps of 0.1): fixed before any data, as
fixed-sequence testing needs."""
_SPLIT_STREAM = 0x6A7E  # keeps the gate's draws apart from every other seeded stream of a run


def eval_completion_rows(dataset) -> np.ndarray:
    """bool [T]: which training-template rows are evaluation phrasings (`"<prompt> {value}."`); the
    manifest lists them in the rows' order (`bios.validation` checks it when the dataset loads)."""
    templates = dataset.manifest["templates"]
    rows = [
        text in {eval_completion(prompt) for prompt in templates["eval"][attribute]}
        for attribute in ATTRIBUTES
        for text in templates["train"][attribute]
    ]
    return np.array(rows, dtype=bool)


def gate_templates(dataset) -> np.ndarray:
    """Training-template rows the gate may use: name before value, not an evaluation phrasing."""
    store = dataset.token_store
    usable = np.flatnonzero(store.name_first & ~eval_completion_rows(dataset))
    missing = set(range(len(ATTRIBUTES))) - set(store.template_attribute[usable].tolist())
    if missing:
        names = ", ".join(ATTRIBUTES[a] for a in sorted(missing))
        raise BiosrecallError(
            f"dataset {dataset.path} has no training phrasing with the name first for {names}"
        )
    return usable


def split_people(people: int, seed: int, share: float = CALIBRATION_SHARE) -> tuple[np.ndarray, np.ndarray]:
    """(fitting, calibration) person ids, a seeded split with `share` of them held out for calibration."""
    if people < 2:
        raise BiosrecallError(f"the exit gate needs at least 2 people to fit and calibrate on (got {people})")
    order = np.random.default_rng([seed, _SPLIT_STREAM]).permutation(people)
    held = min(people - 1, max(1, round(share * people)))
    return np.sort(order[held:]), np.sort(order[:held])


def _pairs(dataset, people: np.ndarray, one_per_fact: bool, seed: int, limit: int | None):
    """(person, template row) of every query: every usable phrasing, or one drawn per fact."""
    store, usable = dataset.token_store, gate_templates(dataset)
    rng = np.random.default_rng([seed, _SPLIT_STREAM, int(one_per_fact)])
    if one_per_fact:
        by_attribute = [usable[store.template_attribute[usable] == a] for a in range(len(ATTRIBUTES))]
        person = np.repeat(people, len(ATTRIBUTES))
        template = np.array(
            [rng.choice(by_attribute[a]) for a in np.tile(range(len(ATTRIBUTES)), len(people))]
        )
    else:
        person, template = np.repeat(people, len(usable)), np.tile(usable, len(people))
    if limit is not None and len(person) > limit:
        keep = np.sort(rng.choice(len(person), size=limit, replace=False))
        person, template = person[keep], template[keep]
    return person.astype(np.int64), template.astype(np.int64)


def gate_queries(
    dataset, people: np.ndarray, *, one_per_fact: bool = False, seed: int = 0, limit: int | None = None
) -> EvalSet:
    """The queries of `people` (module doc) as an `EvalSet` whose `template` is the training-template
    row; `one_per_fact` draws one phrasing per (person, attribute); `limit` subsamples, seeded."""
    store = dataset.token_store
    person, template = _pairs(dataset, np.asarray(people, dtype=np.int64), one_per_fact, seed, limit)
    attribute = store.template_attribute[template]
    pieces = [(store.piece_start[template, i], store.piece_length[template, i]) for i in (0, 1)]
    starts = np.stack(
        [
            np.full(len(person), store.sep_start),
            pieces[0][0],
            store.name_start[person],
            pieces[1][0],
            store.value_start[person, attribute],
        ],
        axis=1,
    )
    lengths = np.stack(
        [
            np.ones(len(person), dtype=np.int64),
            pieces[0][1],
            store.name_length[person],
            pieces[1][1],
            store.value_length[person, attribute],
        ],
        axis=1,
    )
    row_length = lengths.sum(axis=1)
    width = int(row_length.max()) if len(row_length) else 1
    tokens = np.full((len(person), width), dataset.pad_id, dtype=np.int64)
    tokens.ravel()[expand_runs(np.arange(len(person)) * width, row_length)] = store.tokens[
        expand_runs(starts, lengths)
    ]
    return EvalSet(tokens, row_length - lengths[:, 4], lengths[:, 4].copy(), person, attribute, template)


def binomial_cdf(successes: int, trials: int, p: float) -> float:
    """P(Binomial(trials, p) <= successes), summed in log space (no scipy)."""
    if successes >= trials:
        return 1.0
    terms = [
        math.lgamma(trials + 1)
        - math.lgamma(i + 1)
        - math.lgamma(trials - i + 1)
        + i * math.log(p)
        + (trials - i) * math.log1p(-p)
        for i in range(int(successes) + 1)
    ]
    top = max(terms)
    return min(1.0, math.exp(top) * sum(math.exp(term - top) for term in terms))


def exit_depths_at(scores: np.ndarray, threshold: float | None, reference: int) -> np.ndarray:
    """int [M]: each query's exit depth under threshold `threshold` (None: never early), given its gate
    logits `scores` [>= reference - 1, M] at depths 1, 2, ...; every query stops at `reference`."""
    count = scores.shape[1]
    if threshold is None or reference == 1:
        return np.full(count, reference)
    holds = np.vstack([scores[: reference - 1] >= threshold, np.ones((1, count), dtype=bool)])
    return holds.argmax(axis=0) + 1


@dataclass(frozen=True)
class Calibration:
    """The calibrated threshold for one delta (None: no grid threshold passed, serve at the reference)
    with its evidence: queries, losses at it and their binomial p-value, the mean exit depth."""

    delta: float
    alpha: float
    threshold: float | None
    queries: int
    losses: int
    p_value: float
    mean_depth: float


def calibrate(
    scores: np.ndarray, exact: np.ndarray, reference: int, delta: float, alpha: float
) -> Calibration:
    """The laxest grid threshold whose loss against `reference` passes the fixed-sequence binomial test
    (module doc); `exact` is bool [>= reference, M], row k - 1 at depth k. `delta` and `alpha` lie in
    (0, 1): a parsed `gate:delta` and a checked confidence."""
    exact = np.asarray(exact, dtype=bool)
    base, columns, count = exact[reference - 1], np.arange(exact.shape[1]), exact.shape[1]
    chosen = Calibration(delta, alpha, None, count, 0, 0.0, float(reference))
    for threshold in THRESHOLD_GRID if reference > 1 else ():
        depths = exit_depths_at(scores, threshold, reference)
        losses = int((base & ~exact[depths - 1, columns]).sum())
        p_value = binomial_cdf(losses, count, delta)
        if p_value > alpha:
            break
        chosen = Calibration(delta, alpha, threshold, count, losses, p_value, float(depths.mean()))
    return chosen
