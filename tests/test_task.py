"""The task layer (`biosrecall.train.trainer`): the one model-config builder and sequence-length rule that
bioS and LM training share. Training itself is covered by test_train.py and test_lm_train.py.

    pytest -q tests/test_task.py
"""

from __future__ import annotations

import pytest

from biosrecall.errors import BiosrecallError
from biosrecall.lm.task import LM_VOCABULARY
from biosrecall.model import get_preset
from biosrecall.train.config import TrainConfig, resolve_seq_len
from biosrecall.train.trainer import BIOS_VOCABULARY, build_model_config


@pytest.mark.parametrize("rule", [BIOS_VOCABULARY, LM_VOCABULARY])
def test_a_bios_preset_takes_its_vocabulary_from_the_data(rule):
    config = build_model_config("bios-tiny", 300, {"norm": None, "backprop_depth": 2}, rule)
    assert config.vocab_size == 300 and config.backprop_depth == 2
    assert config.d_model == get_preset("bios-tiny").d_model


def test_bios_data_needs_exactly_the_presets_vocabulary():
    with pytest.raises(BiosrecallError, match="preset lm-tiny has vocabulary 512 but the dataset needs 300"):
        build_model_config("lm-tiny", 300, None, BIOS_VOCABULARY)
    assert build_model_config("lm-tiny", 512, None, BIOS_VOCABULARY).vocab_size == 512


def test_an_lm_preset_may_have_spare_ids_but_not_too_few():
    assert build_model_config("lm-tiny", 300, None, LM_VOCABULARY).vocab_size == 512
    with pytest.raises(BiosrecallError, match="the tokenizer has 600 ids but preset lm-tiny only 512"):
        build_model_config("lm-tiny", 600, None, LM_VOCABULARY)
    with pytest.raises(BiosrecallError, match="only 10 .*--vocab-size"):
        build_model_config("lm-tiny", 300, {"vocab_size": 10}, LM_VOCABULARY)


def test_sequence_length_defaults_to_the_context_and_names_the_preset_when_too_long():
    model_config = get_preset("lm-tiny")
    assert resolve_seq_len(TrainConfig(), model_config, "lm-tiny") == model_config.context_length
    assert resolve_seq_len(TrainConfig(seq_len=64), model_config, "lm-tiny") == 64
    with pytest.raises(BiosrecallError, match="longer than the context of preset lm-tiny"):
        resolve_seq_len(TrainConfig(seq_len=4096), model_config, "lm-tiny")
