"""The language-model side of biosrecall: text corpora -> tokenizer + token shards -> training sequences.

    from biosrecall.lm import Corpus, prepare_corpus, ShardLoader
    prepare_corpus(Corpus(["books/"]), "data/lm-books", vocab_size=8192)   # or `biosrecall lm prepare`
    loader = ShardLoader("data/lm-books", context_length=1024, seed=0)
    rows = loader.batch(8)                                                 # int64 [8, 1025]

Modules: `corpus` (reading inputs), `tokenizer` (byte-level BPE), `shards` (file format, manifest,
prepare), `loader` (seeded, resumable sequences and the fixed-order validation pass), `task`
(the LM training task), `evaluate` (validation NLL per serving depth), `compare` / `compare_plots`
(Figure 2, aggregated over seeds), `harness` (lm-eval tasks at serving depths).
"""

from biosrecall.lm.corpus import Corpus
from biosrecall.lm.loader import ShardLoader, validation_batches
from biosrecall.lm.shard_manifest import load_manifest
from biosrecall.lm.shards import (
    PrepareResult,
    ShardHeader,
    prepare_corpus,
    read_shard,
    read_shard_header,
)
from biosrecall.lm.tokenizer import EOD_TOKEN, LMTokenizer, load_tokenizer, train_tokenizer

__all__ = [
    "EOD_TOKEN",
    "Corpus",
    "LMTokenizer",
    "PrepareResult",
    "ShardHeader",
    "ShardLoader",
    "load_manifest",
    "load_tokenizer",
    "prepare_corpus",
    "read_shard",
    "read_shard_header",
    "train_tokenizer",
    "validation_batches",
]
