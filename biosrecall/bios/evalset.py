"""The evaluation set: every (person, attribute, evaluation prompt) as a token row with its answer span.

Row i is `[sep] + prompt + answer`, right-padded with `pad_id` to the longest row. Rows are
person-major, then attribute (`ATTRIBUTES` order), then template (0..4): M = people x 6 x 5. The
answer occupies `tokens[i, answer_start[i] : answer_start[i] + answer_len[i]]`, so a model scores
it from the logits at positions answer_start - 1 .. answer_start + answer_len - 2.

    evalset = dataset.eval_set()                     # all people; eval_set(people=ids) for a subset
    rows = evalset.tokens[evalset.attribute == ATTRIBUTES.index("major")]

Built on demand with the same vectorised gathers as the batch sampler (nothing is cached: for
100,000 people it is 3,000,000 rows).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from biosrecall.bios.encoding import TokenStore, expand_runs
from biosrecall.bios.pools import ATTRIBUTES
from biosrecall.bios.templates import EVAL_TEMPLATES
from biosrecall.errors import BiosrecallError


@dataclass(frozen=True)
class EvalSet:
    """`tokens` int64 [M, L]; `answer_start`, `answer_len`, `person`, `attribute`, `template` int64 [M]."""

    tokens: np.ndarray
    answer_start: np.ndarray
    answer_len: np.ndarray
    person: np.ndarray
    attribute: np.ndarray
    template: np.ndarray

    def __len__(self) -> int:
        return len(self.tokens)


def _people_indices(people: np.ndarray | None, num_people: int) -> np.ndarray:
    if people is None:
        return np.arange(num_people, dtype=np.int64)
    indices = np.asarray(people)
    if indices.ndim != 1 or not np.issubdtype(indices.dtype, np.integer):
        raise BiosrecallError("eval_set(people=...) takes a 1-D array of integer person ids")
    if len(indices) and (indices.min() < 0 or indices.max() >= num_people):
        raise BiosrecallError(f"person ids must lie in 0..{num_people - 1}")
    return indices.astype(np.int64)


def build_eval_set(store: TokenStore, pad_id: int, people: np.ndarray | None = None) -> EvalSet:
    """The evaluation rows of `people` (default: everyone), in person, attribute, template order."""
    person_ids = _people_indices(people, len(store.name_start))
    grid = np.meshgrid(person_ids, np.arange(len(ATTRIBUTES)), np.arange(EVAL_TEMPLATES), indexing="ij")
    person, attribute, template = (axis.ravel().astype(np.int64) for axis in grid)
    prompt_row = attribute * EVAL_TEMPLATES + template
    pieces = [(store.eval_start[prompt_row, i], store.eval_length[prompt_row, i]) for i in (0, 1)]
    return prompt_rows(store, pad_id, person, attribute, template, pieces)


def prompt_rows(store: TokenStore, pad_id: int, person, attribute, template, pieces) -> EvalSet:
    """Rows `[sep] + piece0 + name + piece1 + answer` (module doc) of each (person, attribute), the
    answer being its value; `pieces` is the (start, length) arrays in `store.tokens` of the prompt piece
    before the name and of the one after it, one entry per row; `template` is kept as given. The one
    row builder of the evaluation set and of the exit gate's queries (`biosrecall.eval.gate`)."""
    runs = [  # (start, length): separator, prompt piece before the name, name, piece after it, answer
        (np.full(len(person), store.sep_start), np.ones(len(person), dtype=np.int64)),
        pieces[0],
        (store.name_start[person], store.name_length[person]),
        pieces[1],
        (store.value_start[person, attribute], store.value_length[person, attribute]),
    ]
    starts, lengths = (np.stack(column, axis=1) for column in zip(*runs, strict=True))
    row_length = lengths.sum(axis=1)
    width = int(row_length.max()) if len(row_length) else 1
    tokens = np.full((len(person), width), pad_id, dtype=np.int64)
    tokens.ravel()[expand_runs(np.arange(len(person)) * width, row_length)] = store.tokens[
        expand_runs(starts, lengths)
    ]
    return EvalSet(
        tokens=tokens,
        answer_start=row_length - lengths[:, 4],
        answer_len=lengths[:, 4].copy(),
        person=person,
        attribute=attribute,
        template=template,
    )
