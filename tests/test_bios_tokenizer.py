"""The word-level tokenizer: exact round trips, full coverage, determinism, Hugging Face format."""

from __future__ import annotations

import json

import pytest
from tokenizers import Tokenizer

from biosrecall.bios import ATTRIBUTES, load_pools, load_templates
from biosrecall.bios.pools import FROZEN_POOL_LENGTHS, POOL_NAMES
from biosrecall.bios.templates import render
from biosrecall.bios.tokenizer import (
    PAD_ID,
    PAD_TOKEN,
    SEP_ID,
    SEP_TOKEN,
    UNK_TOKEN,
    build_tokenizer,
    split_template,
    split_words,
)


@pytest.fixture(scope="module")
def full_pools():
    return load_pools({name: FROZEN_POOL_LENGTHS[name] for name in POOL_NAMES})


@pytest.fixture(scope="module")
def full_tokenizer(full_pools):
    templates = load_templates()
    words = {w for values in full_pools.values() for v in values for w in split_words(v)}
    for texts in (*templates.training().values(), *templates.eval.values()):
        for text in texts:
            words.update(w for piece in split_template(text)[0] for w in piece)
    return build_tokenizer(words)


def test_every_pool_value_round_trips_without_unknown_tokens(full_tokenizer, full_pools):
    unk = full_tokenizer.token_to_id(UNK_TOKEN)
    for values in full_pools.values():
        for value in values:
            ids = full_tokenizer.encode(value).ids
            assert unk not in ids, value
            assert full_tokenizer.decode(ids) == value


def test_multi_word_values_stay_multi_token(full_tokenizer):
    assert full_tokenizer.encode("Lake Jessica").tokens == ["▁Lake", "▁Jessica"]
    assert full_tokenizer.encode("Computer Science").tokens == ["▁Computer", "▁Science"]
    assert len(full_tokenizer.encode("Summers, Barnett and Smith").ids) == 5


def test_rendered_sentences_round_trip_and_tokens_match_their_parts(full_tokenizer):
    templates = load_templates()
    name, values = "Ann Lee Smith", {"birth_city": "Lake Jessica", "employer": "Brown-Sellers"}
    for attribute in ATTRIBUTES:
        for template in (*templates.training()[attribute], *templates.eval[attribute]):
            text = render(template, name, values.get(attribute, "Art History"))
            tokens = full_tokenizer.encode(text).tokens
            assert full_tokenizer.decode(full_tokenizer.encode(text).ids) == text
            pieces, slots = split_template(template)
            slot_words = {
                "name": split_words(name),
                "value": split_words(values.get(attribute, "Art History")),
            }
            assembled = pieces[0] + [
                w for slot, piece in zip(slots, pieces[1:], strict=True) for w in slot_words[slot] + piece
            ]
            assert tokens == assembled, template


def test_vocabulary_is_deterministic_with_special_tokens_first():
    a = build_tokenizer(["▁b", "▁a", ",", "▁a"])
    b = build_tokenizer([",", "▁a", "▁b"])
    assert a.to_str() == b.to_str()
    vocab = json.loads(a.to_str())["model"]["vocab"]
    assert list(vocab) == [PAD_TOKEN, SEP_TOKEN, UNK_TOKEN, ",", "▁a", "▁b"]
    assert (vocab[PAD_TOKEN], vocab[SEP_TOKEN]) == (PAD_ID, SEP_ID)


def test_dataset_tokenizer_file_loads_and_covers_the_dataset(bios_dataset, bios_dataset_dir):
    tokenizer = Tokenizer.from_file(str(bios_dataset_dir / "tokenizer.json"))
    assert tokenizer.get_vocab_size() == bios_dataset.vocab_size
    assert tokenizer.token_to_id(SEP_TOKEN) == bios_dataset.sep_id
    for name in bios_dataset.people["name"]:
        assert tokenizer.decode(tokenizer.encode(name).ids) == name
    for values in bios_dataset.manifest["values"].values():
        for value in values:
            assert tokenizer.decode(tokenizer.encode(value).ids) == value
    used = {
        int(t)
        for array in ("name_tokens", "value_tokens", "template_tokens")
        for t in getattr(bios_dataset.arrays, array)
    }
    assert tokenizer.token_to_id(UNK_TOKEN) not in used
