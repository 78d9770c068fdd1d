"""The model card (README.md) of an export: what the model is, how it was trained, on what, and what
it recalls.

    recall, note = cached_recall(checkpoint_dir, manifest_hash)   # the run's own recall table, if current
    text = model_card(CardFacts(...), recall, note)

Recall comes only from the table `recall-curve` caches next to the checkpoint (`recall.parquet`), and
only when that table is current (same checkpoint meta, same dataset); otherwise the card says that none
was computed and prints the command that computes it. Nothing is evaluated here.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from biosrecall.eval.scoring import RECALL_CACHE_FORMAT
from biosrecall.eval.table_cache import checkpoint_key, read_cached, read_key
from biosrecall.train.run_folder import recall_cache_file

SHOWN_DEPTHS = (1, 2, 4, 8, 16, 32, 64)


@dataclass(frozen=True)
class CardFacts:
    """What the card states, gathered by the exporter from the run, the checkpoint and the dataset."""

    provenance: dict
    """The `biosrecall` section of the export's config.json (run, checkpoint, schedule, budget, data)."""
    record: dict
    """The run's config.json (model and train configs, plan)."""
    parameters: int
    """Trainable parameters (a tied head counted once)."""
    num_steps: int
    """The default depth of `forward` and `generate`."""
    example_prompt: str
    """One evaluation prompt of the dataset, for the usage snippet."""
    example_answer: str
    """Its answer in the dataset."""


def cached_recall(checkpoint: Path, manifest_hash: str) -> tuple[pd.DataFrame | None, str]:
    """The checkpoint's cached recall table and a sentence on how it was computed, or (None, reason)."""
    path = recall_cache_file(checkpoint)
    if not path.is_file():
        return None, "No recall was computed for this checkpoint (the run holds no cached recall table)."
    stored = read_key(path)
    if stored is None:
        return None, "No recall was computed for this checkpoint (its cached recall table is unreadable)."
    key = checkpoint_key(checkpoint, format=RECALL_CACHE_FORMAT, manifest_hash=manifest_hash)
    table = read_cached(path, key)
    if table is None:
        return None, "No current recall was computed for this checkpoint (its cached table is stale)."
    people = stored.get("people")
    who = "every person" if people is None else f"the first {people} people"
    note = (
        f"Exact-match recall by `biosrecall recall-curve` over {who} of the training dataset: a fact "
        f"counts as recalled when at least {stored.get('threshold')} of its 5 evaluation prompts are "
        f"answered exactly (teacher-forced greedy answer), at serving depths 1..{stored.get('max_depth')}."
    )
    return table, note


def _number(value, spec: str = ".3g") -> str:
    """A number for the card ("unknown" when absent), e.g. 3.5e11 for FLOPs, 5.06 for a depth, 45% for a share."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return "unknown"
    return format(value, spec).replace("e+", "e")


def _recall_section(recall: pd.DataFrame | None, note: str, facts: CardFacts) -> str:
    """The note on how recall was computed, then its table by serving depth (or how to compute it)."""
    if recall is None:
        checkpoint = facts.provenance.get("checkpoint", "final")
        command = f"biosrecall recall-curve RUN --checkpoint {checkpoint}"
        return f"{note}\n\nCompute it with `{command}` before exporting.\n"
    whole = recall[recall["attribute"] == "all"].set_index("depth")
    depths = sorted({d for d in (*SHOWN_DEPTHS, facts.num_steps) if d in whole.index})
    table = (
        "| serving depth K | recalled bits per person | facts recalled | exact answers |\n|---|---|---|---|\n"
    )
    for depth in depths:
        row = whole.loc[depth]
        mark = " (default num_steps)" if depth == facts.num_steps else ""
        table += f"| {depth}{mark} | {row['bits']:.2f} | {row['recall']:.1%} | {row['exact']:.1%} |\n"
    best = whole["bits"].idxmax()
    ceiling, chance = float(whole["ceiling_bits"].iloc[0]), float(whole["chance_bits"].iloc[0])
    return (
        f"{note}\n\n{table}\nBest: {whole.loc[best, 'bits']:.2f} bits at K = {best}; the task ceiling is "
        f"{ceiling:.2f} bits per person and chance is {chance:.2f}.\n"
    )


def model_card(facts: CardFacts, recall: pd.DataFrame | None, recall_note: str) -> str:
    """The README.md text of an export."""
    prov, data = facts.provenance, facts.provenance.get("dataset", {})
    cfg, plan = facts.record.get("model_config", {}), facts.record.get("plan", {})
    train, saving = facts.record.get("train_config", {}), plan.get("saving_vs_uniform")
    # A backslash at the end of a line joins it to the next: each paragraph is one line of the card.
    return f"""\
---
library_name: transformers
pipeline_tag: text-generation
tags: [biosrecall, looped-transformer, depth-recurrent, bios]
---

# {prov["run"]} at checkpoint {prov.get("checkpoint")}: a biosrecall looped transformer

A decoder-only looped transformer (untied prelude, one recurrent block applied K times, untied \
coda) trained by biosrecall with the depth schedule `{prov.get("schedule")}` on synthetic \
biographies, exported with `biosrecall export`.

## Use

```python
from transformers import AutoModelForCausalLM, AutoTokenizer

model = AutoModelForCausalLM.from_pretrained("PATH", trust_remote_code=True)
tokenizer = AutoTokenizer.from_pretrained("PATH", trust_remote_code=True)
ids = tokenizer({json.dumps(facts.example_prompt, ensure_ascii=False)}, return_tensors="pt").input_ids
out = model.generate(ids, num_steps={facts.num_steps}, max_new_tokens=4, do_sample=False)
print(tokenizer.decode(out[0, ids.shape[1]:], skip_special_tokens=True))
```

The dataset's answer is `{facts.example_answer.strip()}`. `num_steps` is the number of iterations \
of the recurrent block (Huginn's argument name); it defaults to {facts.num_steps}, \
{prov.get("num_steps_source", "")}. `model(ids, num_steps=K).logits` gives the logits at any depth. \
The tokenizer puts `<sep>` (the document separator the model was trained with) before every text, \
as training did.

`generate` keeps no KV cache: each new token recomputes the whole sequence at the chosen depth, \
which is exact and cheap for bioS-length texts. Loading needs `trust_remote_code=True` because the \
looped architecture is defined in `modeling_biosrecall.py` (torch and transformers only); the \
tokenizer is a plain `PreTrainedTokenizerFast` and loads without it too, but transformers 5 reads \
config.json first and asks about that code unless it is given.

## Model

- {facts.parameters:,} parameters; width {cfg.get("d_model")}, {cfg.get("n_heads")} heads, \
{cfg.get("mlp")} MLP of width {cfg.get("d_mlp")}, layers {cfg.get("n_prelude")} + \
{cfg.get("n_block")} x K + {cfg.get("n_coda")} (prelude, recurrent block, coda)
- context {cfg.get("context_length")} tokens, vocabulary {cfg.get("vocab_size")} (word-level)
- positions {cfg.get("position")}, norms {cfg.get("norm")}, injection {cfg.get("injection")}, \
initial state {cfg.get("init_state")}, tied embeddings {cfg.get("tie_embeddings")}
- recipe {cfg.get("recipe", "baseline")} (what one iteration computes: `recipe.py` in this folder)

## Training

- schedule `{prov.get("schedule")}`; mean training depth {_number(plan.get("mean_depth"), ".2f")}
- budget {_number(prov.get("budget"))} modeled FLOPs over {plan.get("updates")} planned updates \
(saving against uniform U{{1..16}} at the same updates: \
{"unknown" if saving is None else f"{saving:.1%}"})
- this checkpoint: `{prov.get("checkpoint")}` ({_number(prov.get("fraction"), ".0%")} of the budget), \
update {prov.get("update")}, {_number(prov.get("flops"))} FLOPs spent
- batch {train.get("batch_size")} x {plan.get("seq_len", train.get("seq_len"))} tokens, \
lr {train.get("lr")}, seed {train.get("seed")}, preset `{(facts.record.get("task") or {}).get("preset")}`

## Data

A synthetic bioS dataset made by `biosrecall generate`: {data.get("num_people")} fictional people \
(seed {data.get("seed")}), six attributes each (birth city, day, month, university, major, \
employer) worth {_number(data.get("total_bits"), ".2f")} bits per person; chance is \
{_number(data.get("chance_bits"), ".2f")} bits. Manifest sha256 `{data.get("manifest_hash")}`. \
The model is trained and evaluated on the same people, so it measures storage and retrieval of \
facts, not generalisation.

## Recall

{_recall_section(recall, recall_note, facts)}"""
