"""Training batches: rows of whole biographies, freshly phrased and shuffled on every exposure.

    sampler = BatchSampler(dataset, batch_size=64, seq_len=256)
    rows = sampler.batch(np.random.default_rng([run_seed, update]))   # int64 [64, 257]
    inputs, targets = rows[:, :-1], rows[:, 1:]                          # targets == pad_id: no loss
    sampler.longest_biography, BatchSampler.min_seq_len(dataset)         # smallest usable seq_len
    BatchSampler.everyone_once(dataset).layout(batch_generator(seed, e))  # one exposure of everyone

Each row is `sep bio sep bio ... sep bio pad ... pad`: every biography is six sentences, one per
attribute, each from a freshly drawn training template, in a freshly shuffled order (the
"multi + permute" presentation that makes facts extractable). A row never holds one person twice:
people are drawn without replacement across the whole batch when there are enough of them, else
within each row. Biographies are never cut: a row takes candidates in order while they fit, so the
first biography of every row is an unbiased draw but the last one that fits favours short ones.
Measured with the default pools and templates (biographies of 44-83 tokens, 63 on average), the
tenth of people with the shortest biographies is shown about 26% more often than the longest tenth
at seq_len 128, 6% more at 256 and 2% more at 512: use a context of several biographies.

All the work is numpy gathers over the dataset's pre-tokenized arrays (`encoding.TokenStore`); the
generator is passed in, so the same generator state always gives the same batch. `batch_generator(seed,
update)` is the generator a training run seeded `seed` draws update `update` from; the text export
(`biosrecall.bios.export_text`) draws its exposures the same way from `everyone_once`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from biosrecall.bios.encoding import TokenStore, expand_runs
from biosrecall.bios.pools import ATTRIBUTES
from biosrecall.errors import BiosrecallError
from biosrecall.numbers import check_count

# Keeps the batch stream apart from the depth draws, which the trainer seeds from the same (seed, update).
BATCH_STREAM = 0xB105


def batch_generator(seed: int, update: int) -> np.random.Generator:
    """The generator that update `update` of a run seeded `seed` draws its batch from."""
    return np.random.default_rng([seed, update, BATCH_STREAM])


@dataclass(frozen=True)
class BatchLayout:
    """A batch and where its biographies sit. Per biography [K]: `row`, `start` (column of its
    separator), `length` (tokens including the separator), `person`; per sentence [K, 6] in reading
    order: `attribute` (index into ATTRIBUTES) and `template` (index into that attribute's templates)."""

    tokens: np.ndarray
    row: np.ndarray
    start: np.ndarray
    length: np.ndarray
    person: np.ndarray
    attribute: np.ndarray
    template: np.ndarray


def biography_length_range(store: TokenStore) -> tuple[int, int]:
    """Longest and shortest possible biography (without its separator), over people and templates."""
    literal_length = store.piece_length.sum(axis=1)
    by_attribute = [literal_length[store.template_attribute == a] for a in range(len(ATTRIBUTES))]
    slots = len(ATTRIBUTES) * store.name_length + store.value_length.sum(axis=1)
    longest = int(slots.max()) + sum(int(lengths.max()) for lengths in by_attribute)
    shortest = int(slots.min()) + sum(int(lengths.min()) for lengths in by_attribute)
    return longest, shortest


class BatchSampler:
    """Assembles `[batch_size, seq_len + 1]` token rows of whole biographies from a `BiosDataset`."""

    def __init__(self, dataset, batch_size: int, seq_len: int):
        self.batch_size = check_count(batch_size, "batch_size")
        self.seq_len = check_count(seq_len, "seq_len")
        self.row_length = self.seq_len + 1
        self.dataset = dataset
        self.pad_id = dataset.pad_id
        self.num_people = dataset.num_people
        store = self._store = dataset.token_store
        per_attribute = np.bincount(store.template_attribute, minlength=len(ATTRIBUTES))
        self._template_count = per_attribute
        self._template_first = np.cumsum(per_attribute) - per_attribute  # templates are grouped by attribute
        self._literal_length = store.piece_length.sum(axis=1)
        self.longest_biography, shortest = biography_length_range(store)
        if self.longest_biography + 1 > self.row_length:
            raise BiosrecallError(
                f"seq_len {self.seq_len} is too short for whole biographies: the longest takes "
                f"{self.longest_biography} tokens plus a separator; use seq_len >= {self.longest_biography}"
            )
        self.biographies_per_row = min(self.num_people, self.row_length // (shortest + 1))

    @classmethod
    def everyone_once(cls, dataset) -> BatchSampler:
        """A sampler whose one row holds every person exactly once: a whole exposure of the dataset.

        The row is long enough for N of the longest possible biographies, so packing keeps every
        candidate, and with one row of N candidates the draw is a permutation of all N people."""
        return cls(dataset, batch_size=1, seq_len=dataset.num_people * (cls.min_seq_len(dataset) + 1))

    @staticmethod
    def min_seq_len(dataset) -> int:
        """The shortest usable seq_len for `dataset`: the longest possible biography, in tokens."""
        return biography_length_range(dataset.token_store)[0]

    def _draw_people(self, rng: np.random.Generator) -> np.ndarray:
        """[batch_size, biographies_per_row] person ids, distinct in the batch when N allows, else per row."""
        shape = (self.batch_size, self.biographies_per_row)
        if self.num_people >= shape[0] * shape[1]:
            return rng.choice(self.num_people, shape[0] * shape[1], replace=False).reshape(shape)
        return np.argsort(rng.random((shape[0], self.num_people)), axis=1)[:, : shape[1]]

    def batch(self, rng: np.random.Generator) -> np.ndarray:
        """int64 [batch_size, seq_len + 1]: whole biographies separated by `sep`, then `pad_id`."""
        return self.layout(rng).tokens

    def people(self, rng: np.random.Generator) -> np.ndarray:
        """int64 [K]: the person of every biography in the batch drawn from `rng`, in batch order,
        without assembling its tokens (what `biosrecall.bios.exposures` counts); equal to
        `layout(rng).person` for a generator in the same state."""
        return self._pack(rng)[1]

    def _pack(self, rng: np.random.Generator):
        """Draw the candidates and their templates and keep the prefix of each row that fits: (flat
        candidate index, person, templates by attribute, length with separator, end column) of each
        kept biography. Whether one fits does not depend on its sentence order, drawn after this."""
        store, columns = self._store, self.biographies_per_row
        candidates = self._draw_people(rng).ravel()
        draw = rng.random((len(candidates), len(ATTRIBUTES)))
        template = self._template_first + (draw * self._template_count).astype(np.int64)  # by attribute
        sentence_length = (
            self._literal_length[template]
            + store.name_length[candidates][:, None]
            + store.value_length[candidates]
        )
        unit_length = 1 + sentence_length.sum(axis=1)  # biography plus its leading separator
        end_in_row = np.cumsum(unit_length.reshape(-1, columns), axis=1).ravel()
        kept = np.flatnonzero(end_in_row <= self.row_length)  # a prefix of each row's candidates
        return kept, candidates[kept], template[kept], unit_length[kept], end_in_row[kept]

    def layout(self, rng: np.random.Generator) -> BatchLayout:
        """The batch plus where each biography, sentence and template went (for tests and inspection)."""
        store, columns = self._store, self.biographies_per_row
        kept, person, template, length, end = self._pack(rng)
        candidates = self.batch_size * columns
        order = np.argsort(rng.random((candidates, len(ATTRIBUTES))), axis=1)  # attribute of each sentence
        attribute = order[kept]
        template = np.take_along_axis(template, attribute, axis=1)
        starts, lengths = self._runs(person, attribute, template)
        row, start = kept // columns, end - length
        tokens = np.full((self.batch_size, self.row_length), self.pad_id, dtype=np.int64)
        tokens.ravel()[expand_runs(row * self.row_length + start, length)] = store.tokens[
            expand_runs(starts, lengths)
        ]
        return BatchLayout(
            tokens=tokens,
            row=row,
            start=start,
            length=length,
            person=person,
            attribute=attribute,
            template=template - self._template_first[attribute],
        )

    def _runs(self, person: np.ndarray, attribute: np.ndarray, template: np.ndarray):
        """(start, length) runs [K, 31] into the token store: a separator, then per sentence
        piece, slot, piece, slot, piece, where the slots are the name and the value in template order."""
        store = self._store
        name_start = np.broadcast_to(store.name_start[person][:, None], attribute.shape)
        name_length = np.broadcast_to(store.name_length[person][:, None], attribute.shape)
        value_start = np.take_along_axis(store.value_start[person], attribute, axis=1)
        value_length = np.take_along_axis(store.value_length[person], attribute, axis=1)
        name_first = store.name_first[template]
        piece_start, piece_length = store.piece_start[template], store.piece_length[template]
        runs = [  # (start, length) of each run of a sentence
            (piece_start[..., 0], piece_length[..., 0]),
            (np.where(name_first, name_start, value_start), np.where(name_first, name_length, value_length)),
            (piece_start[..., 1], piece_length[..., 1]),
            (np.where(name_first, value_start, name_start), np.where(name_first, value_length, name_length)),
            (piece_start[..., 2], piece_length[..., 2]),
        ]
        starts, lengths = (
            np.stack(column, axis=2).reshape(len(person), -1) for column in zip(*runs, strict=True)
        )
        separator = np.full((len(person), 1), store.sep_start)
        return np.hstack([separator, starts]), np.hstack([np.ones_like(separator), lengths])
