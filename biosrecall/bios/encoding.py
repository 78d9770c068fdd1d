"""Pre-tokenized dataset arrays, and the vectorised gather that assembles token rows from them.

Every sentence is `piece0 + slot + piece1 + slot + piece2` where the slots are the person's full
name and the attribute value, and every piece, name and value is stored once as token ids. A batch
or an evaluation row is then a list of (start, length) runs into one flat token store, expanded
with `np.repeat` + `np.arange`: no Python loop over people and no string work.

The arrays (`TokenArrays`, one `.npy` file each in a dataset folder; ragged lists are a flat token
array plus int64 offsets, entry i being tokens[offsets[i]:offsets[i + 1]]):

    person_values    int32 [N, 6]   pool index of each person's attribute values (ATTRIBUTES order)
    name_tokens      int32 [*]      every person's full name, concatenated; name_offsets int64 [N + 1]
    value_tokens     int32 [*]      every pool value in use, attribute by attribute, each pool in
                                    pool order; value_offsets int64 [V + 1], V = sum of pool sizes,
                                    so value v of attribute a is entry sum(pool sizes before a) + v
    template_tokens  int32 [*]      the literal pieces of every template, concatenated
    train_templates  int64 [T, 8]   one row per training template: attribute, name_first (1 when
                                    {name} precedes {value}), then (start, length) of 3 pieces
    eval_templates   int64 [30, 6]  row 5 * attribute + j: attribute, j, (start, length) of the
                                    2 pieces around {name}; the answer follows the second piece
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer

from biosrecall.bios.people import People
from biosrecall.bios.pools import ATTRIBUTES, NAME_PARTS
from biosrecall.bios.tokenizer import encode_words, split_template, split_words

TRAIN_COLUMNS = ("attribute", "name_first", "start0", "length0", "start1", "length1", "start2", "length2")
EVAL_COLUMNS = ("attribute", "template", "start0", "length0", "start1", "length1")


@dataclass(frozen=True)
class TokenArrays:
    person_values: np.ndarray
    name_tokens: np.ndarray
    name_offsets: np.ndarray
    value_tokens: np.ndarray
    value_offsets: np.ndarray
    template_tokens: np.ndarray
    train_templates: np.ndarray
    eval_templates: np.ndarray

    @staticmethod
    def file_names() -> list[str]:
        return [f"{field.name}.npy" for field in fields(TokenArrays)]

    def save(self, folder: Path) -> None:
        for field in fields(self):
            np.save(folder / f"{field.name}.npy", np.ascontiguousarray(getattr(self, field.name)))

    @classmethod
    def load(cls, folder: Path) -> TokenArrays:
        return cls(**{f.name: np.load(folder / f"{f.name}.npy", allow_pickle=False) for f in fields(cls)})


def expand_runs(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Indices start_0 .. start_0 + length_0 - 1, start_1 .. : the runs laid end to end, vectorised."""
    starts, lengths = starts.ravel(), lengths.ravel()
    run_begin = np.cumsum(lengths) - lengths
    return np.repeat(starts - run_begin, lengths) + np.arange(int(lengths.sum()))


def _ragged(token_lists: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
    lengths = np.array([len(tokens) for tokens in token_lists], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    flat = np.fromiter((t for tokens in token_lists for t in tokens), dtype=np.int32, count=int(offsets[-1]))
    return flat, offsets


def _encode_values(tokenizer: Tokenizer, values: Sequence[str]) -> list[list[int]]:
    return [encode_words(tokenizer, split_words(value)) for value in values]


def _encode_names(tokenizer: Tokenizer, pools: Mapping[str, Sequence[str]], people: People):
    """Full-name tokens per person: the three parts' tokens, gathered (a name part is one word)."""
    part_flat, part_offsets = _ragged(
        [tokens for part in NAME_PARTS for tokens in _encode_values(tokenizer, pools[part])]
    )
    part_base = np.cumsum([0] + [len(pools[part]) for part in NAME_PARTS[:-1]])
    rows = people.names + part_base  # [N, 3] rows of the concatenated part lists
    starts, lengths = part_offsets[rows], part_offsets[rows + 1] - part_offsets[rows]
    name_tokens = part_flat[expand_runs(starts, lengths)]
    name_offsets = np.concatenate([[0], np.cumsum(lengths.sum(axis=1))]).astype(np.int64)
    return name_tokens.astype(np.int32), name_offsets


def _encode_templates(tokenizer, training: Mapping[str, Sequence[str]], prompts: Mapping[str, Sequence[str]]):
    """Literal pieces of every template, and the layout rows that point into them."""
    pieces: list[list[int]] = []
    train_rows, eval_rows = [], []
    for a, attribute in enumerate(ATTRIBUTES):
        for template in training[attribute]:
            words, slots = split_template(template)
            train_rows.append([a, int(slots == ["name", "value"]), *range(len(pieces), len(pieces) + 3)])
            pieces += [encode_words(tokenizer, w) for w in words]
        for j, prompt in enumerate(prompts[attribute]):
            words, _ = split_template(prompt)
            eval_rows.append([a, j, *range(len(pieces), len(pieces) + 2)])
            pieces += [encode_words(tokenizer, w) for w in words]
    flat, offsets = _ragged(pieces)

    def layout(rows: list[list[int]], fixed: int) -> np.ndarray:
        rows_array = np.array(rows, dtype=np.int64)
        piece_ids = rows_array[:, fixed:]
        runs = np.stack([offsets[piece_ids], offsets[piece_ids + 1] - offsets[piece_ids]], axis=2)
        return np.concatenate([rows_array[:, :fixed], runs.reshape(len(rows), -1)], axis=1)

    return flat, layout(train_rows, 2), layout(eval_rows, 2)


def encode_arrays(
    tokenizer: Tokenizer,
    pools: Mapping[str, Sequence[str]],
    people: People,
    training: Mapping[str, Sequence[str]],
    prompts: Mapping[str, Sequence[str]],
) -> TokenArrays:
    """All pre-tokenized arrays of a dataset (see the module docstring for the layout)."""
    name_tokens, name_offsets = _encode_names(tokenizer, pools, people)
    value_tokens, value_offsets = _ragged(
        [t for a in ATTRIBUTES for t in _encode_values(tokenizer, pools[a])]
    )
    template_tokens, train_templates, eval_templates = _encode_templates(tokenizer, training, prompts)
    return TokenArrays(
        person_values=people.values.astype(np.int32),
        name_tokens=name_tokens,
        name_offsets=name_offsets,
        value_tokens=value_tokens,
        value_offsets=value_offsets,
        template_tokens=template_tokens,
        train_templates=train_templates,
        eval_templates=eval_templates,
    )


class TokenStore:
    """One flat int32 token array (template pieces, names, values, a separator) plus run tables into it.

    `piece_start/piece_length` [T, 3] and `eval_start/eval_length` [30, 2] locate template pieces;
    `name_start/name_length` [N] and `value_start/value_length` [N, 6] locate each person's name and
    attribute values; `sep_start` is a run of length 1 holding the separator.
    """

    def __init__(self, arrays: TokenArrays, pool_sizes: Sequence[int], sep_id: int):
        name_base = len(arrays.template_tokens)  # the template pieces come first, at offset 0
        value_base = name_base + len(arrays.name_tokens)
        self.sep_start = value_base + len(arrays.value_tokens)
        self.tokens = np.concatenate(
            [arrays.template_tokens, arrays.name_tokens, arrays.value_tokens, np.array([sep_id], np.int32)]
        )
        self.name_start = name_base + arrays.name_offsets[:-1]
        self.name_length = np.diff(arrays.name_offsets)
        first_value = np.concatenate([[0], np.cumsum(pool_sizes)[:-1]]).astype(np.int64)
        value_rows = first_value + arrays.person_values.astype(np.int64)
        self.value_start = value_base + arrays.value_offsets[value_rows]
        self.value_length = arrays.value_offsets[value_rows + 1] - arrays.value_offsets[value_rows]
        train = arrays.train_templates
        self.template_attribute = train[:, 0]
        self.name_first = train[:, 1].astype(bool)
        self.piece_start = train[:, 2::2]
        self.piece_length = train[:, 3::2]
        self.eval_start = arrays.eval_templates[:, 2::2]
        self.eval_length = arrays.eval_templates[:, 3::2]
