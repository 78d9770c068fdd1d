"""bioS: the synthetic factual-recall dataset (fictional people, six attributes, five eval prompts each).

    from biosrecall.bios import generate_dataset, load_dataset, BatchSampler
    generate_dataset("data/bios-1k", people=1000, seed=0)       # or `biosrecall generate`
    dataset = load_dataset("data/bios-1k")
    rows = BatchSampler(dataset, batch_size=64, seq_len=256).batch(np.random.default_rng(0))
    evalset = dataset.eval_set()
    export_text("data/bios-1k", TextExport("data/bios-1k-text", "jsonl", exposures=100))   # for other trainers

Modules, one job each: `pools` (frozen value pools, bits), `templates` (TOML templates and their
validation), `people` (drawing people), `tokenizer` (word-level tokenizer), `encoding` (pre-tokenized
arrays), `dataset` (folder writing and loading), `validation` (loader checks), `evalset` (evaluation
rows), `sampler` (training batches), `export_text` (biographies and evaluation prompts as JSON Lines or parquet).
"""

from biosrecall.bios.dataset import BiosDataset, generate_dataset, load_dataset
from biosrecall.bios.evalset import EvalSet
from biosrecall.bios.export_text import TextExport, export_text
from biosrecall.bios.pools import (
    ATTRIBUTES,
    DEFAULT_POOL_SIZES,
    NAME_PARTS,
    POOL_NAMES,
    attribute_bits,
    build_pools,
    load_pools,
)
from biosrecall.bios.sampler import BatchLayout, BatchSampler, batch_generator
from biosrecall.bios.templates import Templates, load_templates
from biosrecall.bios.tokenizer import PAD_TOKEN, SEP_TOKEN

__all__ = [
    "ATTRIBUTES",
    "DEFAULT_POOL_SIZES",
    "NAME_PARTS",
    "PAD_TOKEN",
    "POOL_NAMES",
    "SEP_TOKEN",
    "BatchLayout",
    "BatchSampler",
    "BiosDataset",
    "EvalSet",
    "Templates",
    "TextExport",
    "attribute_bits",
    "batch_generator",
    "build_pools",
    "export_text",
    "generate_dataset",
    "load_dataset",
    "load_pools",
    "load_templates",
]
