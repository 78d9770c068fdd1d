"""Exact-match recall of any Hugging Face causal LM on bioS: `recall-curve --hf-model`.

    table = score_hf_model("exported/ff", "data/bios-1k")             # an export: num_steps, K = 1..64
    table = score_hf_model("exported/ff", "data/bios-1k", depths=[1, 4, 16])
    table = score_hf_model("models/huginn-bios", "data/bios-1k", depths=[1, 8, 32], depth_arg="num_steps",
                           trust_remote_code=True)
    table = score_hf_model("models/gpt2-bios", "data/bios-1k")                  # not looped: one depth
    options = RecallCurveOptions(hf_model=Path("exported/ff"), data_dir=Path("data/bios-1k"))
    result = hf_recall_curve(options)          # scored, then written into options.out_dir

The scorer is `recall-curve`'s: an item (person, attribute, prompt) is exact when greedy decoding of
the prompt produces the answer, and a fact is recalled when at least `threshold` of its 5 prompts are
exact (`biosrecall.eval.recall`). Prompts are encoded with the model's own tokenizer and the decoded
continuation is compared with the answer text (`prompts.py`), so a model trained elsewhere on bioS text
with any tokenizer is scored by the same rule. The table has recall-curve's columns; an export's rows
carry its run, schedule, checkpoint and budget, another model's its folder name and model type.

Greedy decoding without generating token by token: one teacher-forced forward over prompt + answer
gives the greedy choice at every answer position, and the greedy continuation follows the answer's
tokens up to the first position where the choice differs. An item is exact when there is no such
position, or when the text decoded so far is still a proper prefix of the answer (another tokenization
of the same text) and continuing greedily, one forward per token, spells the answer exactly. A
looped model is run once per depth, with the depth passed as `depth_arg` (Huginn's `num_steps`).

A looped model is scored at every depth 1..`max_depth` (64), as `recall-curve` scores runs, so a
biosrecall export and the run it came from get the same table and the same "mean K<=16"; `depths`
chooses others (one forward per depth: 64 depths cost 64 passes where runs take one).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from biosrecall.bios import load_dataset
from biosrecall.errors import BiosrecallError
from biosrecall.eval.curves import RUN_COLUMNS, check_at_least_one
from biosrecall.eval.plots import TRAINING_DEPTH, plot_recall_curves
from biosrecall.eval.recall import DEFAULT_THRESHOLD, check_threshold, recall_table
from biosrecall.eval.recall_curve import SHOWN_DEPTHS, RecallCurve, write_curves, write_output
from biosrecall.eval.sweep import progress_bar
from biosrecall.hf.loading import LoadedModel, check_depth_argument, load_hf_model
from biosrecall.hf.prompts import (
    EncodedRows,
    EvalTexts,
    check_vocabulary,
    continuation_text,
    encode_rows,
    eval_texts,
)
from biosrecall.hub import check_model_folder
from biosrecall.numbers import check_count
from biosrecall.recall_options import RecallCurveOptions
from biosrecall.train.distributed import resolve_device

DEFAULT_MAX_DEPTH = 64  # recall-curve's --max-depth: runs and looped models are scored at K = 1..64
DEFAULT_BATCH_SIZE = 64
EXPORT_DEPTH_ARG = "num_steps"
# How far greedy decoding may run past the answer's own token count when another tokenization of the
# answer text is being spelled out.
MAX_EXTRA_TOKENS = 8


def score_hf_model(
    model_dir: str | Path,
    data_dir: str | Path,
    depths=None,
    depth_arg: str | None = None,
    threshold: int = DEFAULT_THRESHOLD,
    *,
    batch_size: int = DEFAULT_BATCH_SIZE,
    device: str = "auto",
    people: int | None = None,
    trust_remote_code: bool | None = None,
    progress: bool | None = None,
    max_depth: int | None = None,
) -> pd.DataFrame:
    """recall-curve's long table for the model in `model_dir` on the dataset `data_dir` (module doc).

    `depth_arg` defaults to num_steps for a biosrecall export and to none otherwise; with a depth
    argument `depths` defaults to 1..`max_depth` (default `DEFAULT_MAX_DEPTH`), as for runs; without
    one the model is scored at one depth (labelled 1).
    """

    check_at_least_one(threshold=threshold, batch_size=batch_size, people=people)
    check_model_folder(model_dir)  # before the dataset: a Hub name is refused at once
    dataset = load_dataset(data_dir)
    eval_set = dataset.eval_set(None if people is None else np.arange(min(people, dataset.num_people)))
    check_threshold(eval_set, threshold)
    loaded = load_hf_model(model_dir, resolve_device(str(device)), trust_remote_code)
    _check_export_dataset(loaded, dataset)
    if depth_arg is None and loaded.provenance is not None:
        depth_arg = EXPORT_DEPTH_ARG
    depths = _resolve_depths(depths, depth_arg, max_depth)
    if depth_arg is not None:
        check_depth_argument(loaded, depth_arg)
    texts = eval_texts(dataset, eval_set)
    check_vocabulary(loaded.tokenizer, texts, loaded.path)
    rows = encode_rows(loaded.tokenizer, texts)
    exact = exact_by_depths(loaded, texts, rows, depths, depth_arg, batch_size=batch_size, progress=progress)
    chance = dataset.manifest.get("chance_bits_per_attribute")
    table = recall_table(exact, eval_set, dataset.pool_sizes, threshold, chance_bits=chance)
    table["depth"] = np.asarray(depths)[table["depth"].to_numpy() - 1]
    table["manifest_hash"] = dataset.manifest_hash
    return _label(table, loaded)


def hf_recall_curve(options: RecallCurveOptions, max_depth_given: bool = True) -> RecallCurve:
    """`recall-curve --hf-model`: `score_hf_model` of `options.hf_model` on `options.data_dir` with the
    command's options (`max_depth` only when `max_depth_given`: a model without a depth argument is
    refused an explicit one; `batch_size` None: `DEFAULT_BATCH_SIZE`), then its long table and figure
    written into `options.out_dir` as `biosrecall.eval.recall_curve` writes a run's (`write_output`), with
    the summary at depths 1, 4, 16, 64 and the first and last depth scored."""

    def write(folder: Path) -> RecallCurve:
        table = score_hf_model(
            options.hf_model,
            options.data_dir,
            options.depths,
            options.depth_arg,
            options.threshold,
            batch_size=DEFAULT_BATCH_SIZE if options.batch_size is None else options.batch_size,
            device=options.device,
            people=options.people,
            # Unset (None) lets a biosrecall export's own modeling code be trusted without the flag.
            trust_remote_code=options.trust_remote_code or None,
            max_depth=options.max_depth if max_depth_given else None,
        )
        scored = sorted(table["depth"].unique())
        shown = sorted({int(d) for d in scored if d in SHOWN_DEPTHS} | {int(scored[0]), int(scored[-1])})
        figure = plot_hf_recall(table, options.metric)
        written, summary = write_curves(table, folder, options.metric, shown, figure)
        return RecallCurve(written, summary)

    return write_output(options.out_dir, options.overwrite, write)


def _check_export_dataset(loaded: LoadedModel, dataset) -> None:
    """An export names the dataset it was trained on; scoring it on another is refused, as for runs."""
    if loaded.provenance is None:
        return
    expected = (loaded.provenance.get("dataset") or {}).get("manifest_hash")
    if expected and expected != dataset.manifest_hash:
        raise BiosrecallError(
            f"dataset {dataset.path} (manifest hash {dataset.manifest_hash[:12]}) is not the one {loaded.path} "
            f"was trained on ({expected[:12]}); pass --data with the right dataset folder"
        )


def _resolve_depths(depths, depth_arg: str | None, max_depth: int | None = None) -> list[int]:
    if depths and max_depth is not None:
        raise BiosrecallError("give --depths or --max-depth, not both: --depths lists every depth scored")
    if depth_arg is None:
        if depths or max_depth is not None:
            flag = "--depths" if depths else "--max-depth"
            raise BiosrecallError(f"{flag} needs --depth-arg, the name of the model's depth argument")
        return [1]
    if max_depth is not None:
        check_count(max_depth, "--max-depth")
    return sorted(
        {check_count(d, "--depths") for d in depths or range(1, (max_depth or DEFAULT_MAX_DEPTH) + 1)}
    )


def exact_by_depths(
    loaded: LoadedModel,
    texts: EvalTexts,
    rows: EncodedRows,
    depths: list[int],
    depth_arg: str | None,
    *,
    batch_size: int = DEFAULT_BATCH_SIZE,
    progress: bool | None = None,
) -> np.ndarray:
    """bool [len(depths), M]: greedy decoding of row m's prompt at depths[i] spells its answer."""
    judge = GreedyJudge(loaded.tokenizer, texts, rows)
    order = np.argsort(
        [len(p) + len(a) for p, a in zip(rows.prompt_ids, rows.answer_ids, strict=True)], kind="stable"
    )
    batches = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    exact = np.zeros((len(depths), len(rows.prompt_ids)), dtype=bool)
    steps = list(itertools.product(enumerate(depths), batches))  # one bar over every depth's batches
    with torch.inference_mode():
        for (i, depth), batch in progress_bar(steps, progress, "hf recall"):
            options = {} if depth_arg is None else {depth_arg: depth}
            chosen = _teacher_forced_choices(loaded, rows, batch, options)
            for row, choice in zip(batch, chosen, strict=True):
                extend = _extender(loaded, rows.prompt_ids[row], options)
                exact[i, row] = judge.exact(int(row), choice, extend)
    return exact


def _logits(loaded: LoadedModel, ids: torch.Tensor, mask: torch.Tensor | None, options: dict) -> torch.Tensor:
    output = loaded.model(input_ids=ids, attention_mask=mask, **options)
    return output.logits if hasattr(output, "logits") else output[0]


def _teacher_forced_choices(loaded: LoadedModel, rows: EncodedRows, batch, options: dict) -> list[list[int]]:
    """Per row of the batch: the greedy token at each answer position, given the answer before it."""
    sequences = [rows.prompt_ids[r] + rows.answer_ids[r][:-1] for r in batch]
    width = max(len(s) for s in sequences)
    pad = loaded.tokenizer.pad_token_id if loaded.tokenizer.pad_token_id is not None else 0
    device = next(loaded.model.parameters()).device
    ids = torch.full((len(batch), width), pad, dtype=torch.long)
    mask = torch.zeros((len(batch), width), dtype=torch.long)
    for i, sequence in enumerate(sequences):
        ids[i, : len(sequence)] = torch.tensor(sequence)
        mask[i, : len(sequence)] = 1
    choices = _logits(loaded, ids.to(device), mask.to(device), options).argmax(dim=-1).cpu()
    found = []
    for i, r in enumerate(batch):
        first = len(rows.prompt_ids[r]) - 1
        found.append(choices[i, first : first + len(rows.answer_ids[r])].tolist())
    return found


def _extender(loaded: LoadedModel, prompt: list[int], options: dict) -> Callable[[list[int]], int | None]:
    """The greedy next token after prompt + path (None past the model's context)."""
    limit = getattr(loaded.model.config, "max_position_embeddings", None)

    def extend(path: list[int]) -> int | None:
        ids = prompt + path
        if limit is not None and len(ids) >= limit:
            return None
        device = next(loaded.model.parameters()).device
        logits = _logits(loaded, torch.tensor([ids], device=device), None, options)
        return int(logits[0, -1].argmax())

    return extend


class GreedyJudge:
    """Decides whether a greedy continuation spells a row's answer text, remembering each verdict
    (the same wrong first token recurs across depths, and each verdict costs two decodes)."""

    def __init__(self, tokenizer, texts: EvalTexts, rows: EncodedRows) -> None:
        self.tokenizer, self.texts, self.rows = tokenizer, texts, rows
        self.verdicts: dict[tuple[int, tuple[int, ...]], str] = {}

    def verdict(self, row: int, path: list[int]) -> str:
        """ "exact", "prefix" (a proper prefix of the answer so far) or "wrong"."""
        key = (row, tuple(path))
        if key not in self.verdicts:
            text = continuation_text(self.tokenizer, self.rows.prompt_ids[row], path)
            answer = self.texts.answers[row]
            if text == answer:
                self.verdicts[key] = "exact"
            else:
                self.verdicts[key] = "prefix" if answer.startswith(text) else "wrong"
        return self.verdicts[key]

    def exact(self, row: int, choice: list[int], extend: Callable[[list[int]], int | None]) -> bool:
        """`choice` holds the greedy token at each answer position under teacher forcing."""
        answer = self.rows.answer_ids[row]
        first_miss = next((j for j, (a, b) in enumerate(zip(answer, choice, strict=True)) if a != b), None)
        path = list(answer) if first_miss is None else [*answer[:first_miss], choice[first_miss]]
        state = self.verdict(row, path)
        while state == "prefix" and len(path) < len(answer) + MAX_EXTRA_TOKENS:
            token = extend(path)
            if token is None:
                return False
            path.append(token)
            state = self.verdict(row, path)
        return state == "exact"


def _label(table: pd.DataFrame, loaded: LoadedModel) -> pd.DataFrame:
    """recall-curve's run columns in front: from an export's provenance, else the folder and model type."""

    prov = loaded.provenance
    if prov is not None:
        labels = {
            "run": str(prov.get("run") or loaded.path.name),
            "schedule": str(prov.get("schedule") or ""),
            "checkpoint": str(prov.get("checkpoint") or ""),
            "fraction": _float(prov.get("fraction"), 1.0),
            "update": int(prov.get("update") if prov.get("update") is not None else -1),
            "flops": _float(prov.get("flops")),
            "budget": _float(prov.get("budget")),
        }
    else:
        name = loaded.path.resolve().name
        labels = {"run": name, "schedule": loaded.model_type or "hf", "checkpoint": "hf", "fraction": 1.0}
        labels.update(update=-1, flops=math.nan, budget=math.nan)
    front = pd.DataFrame({column: [labels[column]] * len(table) for column in RUN_COLUMNS})
    return pd.concat([front, table.reset_index(drop=True)], axis=1)


def _float(value, default: float = math.nan) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return default
    return number if math.isfinite(number) else default


def plot_hf_recall(table: pd.DataFrame, metric: str = "bits"):
    """`plot_recall_curves` of the table. A model that is not a biosrecall export has no budget and
    no known training depths: its panel is titled with the model's name (once: the figure's title
    names no model) and nothing is shaded."""

    export = not (table["checkpoint"] == "hf").all()
    fig = plot_recall_curves(table, metric=metric, training_depth=TRAINING_DEPTH if export else None)
    if not export:
        name = str(table["run"].iloc[0])
        for ax in fig.axes:
            if ax.get_title().endswith("of budget"):
                ax.set_title(name)
            if "of budget" in ax.get_ylabel():
                ax.set_ylabel(ax.get_ylabel().replace("100% of budget", name))
        head = "Recalled bits per person" if metric == "bits" else "Recall per attribute"
        fig.suptitle(head + (" vs serving depth" if table["depth"].nunique() > 1 else ""))
    return fig
