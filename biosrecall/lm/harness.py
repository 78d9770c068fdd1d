"""Downstream evaluation of a looped LM with lm-eval-harness, at fixed serving depths.

    table = evaluate_harness("runs/1b/uniform/seed0", ["hellaswag", "arc_easy", "piqa"], depths=(4, 8, 16))
    table = evaluate_harness(run, ["tiny_mc"], include_path="tests/data/lm_harness", limit=20)
    # CLI: biosrecall lm harness RUN --tasks hellaswag,arc_easy,piqa --depths 4,8,16 [--limit N]
    #      [--checkpoint final] [--include-path DIR] [--num-fewshot N] [--out BASE]

Needs the optional extra `eval` (lm-eval 0.4.x; pip install 'biosrecall[eval]'), imported only here.
Task names are checked against lm-eval's task index (plus the YAML task folder `include_path`) before
any model is loaded; an unknown one is one error.

`looped_lm(...)` wraps a trained `LoopedTransformer` as an `lm_eval.api.model.LM` at one serving depth:
- `loglikelihood`: log p(continuation | context), summed over the continuation's tokens, and whether
  greedy decoding would produce it. Whitespace that ends the context moves to the continuation, and the
  continuation's tokens are those of encode(context + continuation) past encode(context), as lm-eval's
  own models do. Every request starts the way every document starts in training: after the
  end-of-document token. Sequences longer than the run's training length keep their last tokens.
- `loglikelihood_rolling`: the log-likelihood of a whole text in disjoint windows of the training
  length, each predicting its tokens once with as much preceding context as fits (lm-eval's rule).
- `generate_until`: greedy decoding through the KV-cached decoder (`biosrecall.model.decode`) at the
  depth, until a stop string, the end-of-document token or `max_gen_toks`; one request at a time.
Requests are scored in batches of `batch_size`, longest first, right-padded (the model is causal, so
padding never changes the scored positions), reading logits only at the scored positions.

`evaluate_harness` runs `lm_eval.simple_evaluate` once per chosen checkpoint and depth and writes one
table, RUN/eval/harness.csv and .parquet (or `out`), one row per (checkpoint, task, metric, depth):
run, schedule, checkpoint, update, flops, train_tokens, wall_seconds, task, metric, depth, value,
stderr (lm-eval's standard error of the score; NaN where it gives none). Next to it, harness.json
records the lm-eval version, the tasks as asked, every evaluated task's config, version and n-shot,
the limit, the depths and the evaluated checkpoints. Each call replaces both files.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from contextlib import nullcontext
from importlib.metadata import version
from pathlib import Path

import pandas as pd
import torch

from biosrecall.atomic import OutputRecord, atomic_write_text, check_files_replaceable, replace_files
from biosrecall.errors import BiosrecallError
from biosrecall.lm.evaluate import lm_setup, score_checkpoints
from biosrecall.lm.tokenizer import load_tokenizer
from biosrecall.model.decode import greedy_decode
from biosrecall.outputs import write_table
from biosrecall.train.run_folder import RunFolder

TABLE = "harness"
EXTRA = "pip install 'biosrecall[eval]'"
DEFAULT_DEPTHS = (4, 8, 16)
DEFAULT_MAX_GEN_TOKENS = 256


def require_lm_eval():
    """The lm_eval package, or one error naming the extra to install."""
    try:
        import lm_eval.api.model  # the package, with the LM base class loaded
    except ImportError:
        raise BiosrecallError(f"downstream evaluation needs lm-eval: {EXTRA}") from None
    return lm_eval


class LoopedScorer:
    """The scoring behind `looped_lm` (module doc): a looped LM at one fixed serving depth."""

    def __init__(
        self, model, tokenizer, depth: int, max_length: int, batch_size: int = 16, autocast=None
    ) -> None:
        super().__init__()  # lm_eval's LM sets its rank, world size and cache hook
        self.model, self.tokenizer, self.depth = model, tokenizer, int(depth)
        self.max_length, self.batch_size = int(max_length), int(batch_size)
        self.autocast = autocast or nullcontext
        self._device = next(model.parameters()).device  # what lm-eval's LM.device returns

    @property
    def eot_token_id(self) -> int:
        return self.tokenizer.eod_id

    def encode_pair(self, context: str, continuation: str) -> tuple[list[int], list[int]]:
        """(end-of-document + context tokens, continuation tokens), split as the module doc says."""
        spaces = len(context) - len(context.rstrip())
        if spaces:
            context, continuation = context[:-spaces], context[-spaces:] + continuation
        context_ids = self.tokenizer.encode(context) if context else []
        whole = self.tokenizer.encode(context + continuation)
        return [self.eot_token_id, *context_ids], whole[len(context_ids) :]

    def score_pairs(self, pairs: Sequence[tuple[list[int], list[int]]]) -> list[tuple[float, bool]]:
        """(sum of log p of the continuation, whether it is greedy) for each (context, continuation)."""
        results: list[tuple[float, bool] | None] = [None] * len(pairs)
        order = sorted(range(len(pairs)), key=lambda i: -(len(pairs[i][0]) + len(pairs[i][1])))
        for start in range(0, len(order), self.batch_size):
            chosen = order[start : start + self.batch_size]
            for index, result in zip(chosen, self._score_batch([pairs[i] for i in chosen]), strict=True):
                results[index] = result
        return results

    def _score_batch(self, pairs) -> list[tuple[float, bool]]:
        rows, counts = [], []
        for context, continuation in pairs:
            if len(continuation) > self.max_length:
                raise BiosrecallError(
                    f"a continuation of {len(continuation)} tokens exceeds the model's length {self.max_length}"
                )
            rows.append((context + continuation)[-(self.max_length + 1) :])
            counts.append(len(continuation))
        width = max(len(row) for row in rows) - 1
        tokens = torch.full((len(rows), width), self.eot_token_id, dtype=torch.long)
        scored = torch.zeros((len(rows), width), dtype=torch.bool)
        targets = []
        for index, (row, count) in enumerate(zip(rows, counts, strict=True)):
            tokens[index, : len(row) - 1] = torch.tensor(row[:-1])
            scored[index, len(row) - 1 - count : len(row) - 1] = True
            targets.extend(row[len(row) - count :])
        if not targets:
            return [(0.0, True)] * len(rows)
        with torch.inference_mode(), self.autocast():
            _, logits = next(
                self.model.forward_all_depths(tokens.to(self._device), [self.depth], scored.to(self._device))
            )
        logprobs = torch.log_softmax(logits.float(), dim=-1)
        wanted = torch.tensor(targets, device=logprobs.device)
        picked = logprobs.gather(1, wanted[:, None])[:, 0].double().cpu()
        greedy = (logprobs.argmax(dim=-1) == wanted).cpu()
        results, offset = [], 0
        for count in counts:
            span = slice(offset, offset + count)
            results.append((float(picked[span].sum()), bool(greedy[span].all())))
            offset += count
        return results

    def loglikelihood(self, requests, **_) -> list[tuple[float, bool]]:
        return self.score_pairs([self.encode_pair(*request.args) for request in requests])

    def rolling_pairs(self, ids: list[int]) -> list[tuple[list[int], list[int]]]:
        """Disjoint windows over end-of-document + `ids`: every token predicted once, each chunk of the
        training length with as much preceding context as fits (lm-eval's own windows, as its
        Hugging Face models cut them: one token of context, made disjoint)."""
        from lm_eval.utils import get_rolling_token_windows, make_disjoint_window

        windows = get_rolling_token_windows(ids, self.eot_token_id, self.max_length, context_len=1)
        return [make_disjoint_window(window) for window in windows]

    def loglikelihood_rolling(self, requests, **_) -> list[float]:
        per_text = [self.rolling_pairs(self.tokenizer.encode(request.args[0])) for request in requests]
        flat = self.score_pairs([pair for pairs in per_text for pair in pairs])
        totals, offset = [], 0
        for pairs in per_text:
            totals.append(sum(logprob for logprob, _ in flat[offset : offset + len(pairs)]))
            offset += len(pairs)
        return totals

    def generate_until(self, requests, **_) -> list[str]:
        return [self.generate(*request.args) for request in requests]

    def generate(self, context: str, options: dict) -> str:
        """Greedy text after `context` at the depth, cut before the first stop string (module doc)."""

        if options.get("do_sample"):
            raise BiosrecallError("the looped LM generates greedily only (the task asks for sampling)")
        until = options.get("until") or []
        until = [until] if isinstance(until, str) else list(until)
        budget = min(int(options.get("max_gen_toks", DEFAULT_MAX_GEN_TOKENS)), self.max_length - 1)
        prompt = [self.eot_token_id, *self.tokenizer.encode(context)][-(self.max_length - budget) :]

        def stop_reached(tokens: list[int]) -> bool:
            text = self.tokenizer.decode(tokens)
            return any(stop in text for stop in until)

        eot = self.eot_token_id
        with self.autocast():
            decoded = greedy_decode(self.model, prompt, budget, self.depth, stop_ids=[eot], stop=stop_reached)
        text = self.tokenizer.decode([token for token in decoded.tokens if token != eot])
        cuts = [text.index(stop) for stop in until if stop in text]
        return text[: min(cuts)] if cuts else text


def looped_lm(model, tokenizer, depth: int, max_length: int, batch_size: int = 16, autocast=None):
    """An `lm_eval.api.model.LM` scoring with `model` at serving depth `depth` (module doc)."""
    lm_class = type("LoopedLM", (LoopedScorer, require_lm_eval().api.model.LM), {})
    return lm_class(model, tokenizer, depth, max_length, batch_size, autocast)


def resolve_tasks(tasks: Sequence[str], include_path: str | Path | None = None):
    """(lm-eval task index, task names), every name known to lm-eval (a task, group or tag) or to the
    YAML task folder `include_path`. When that folder alone defines every named task, only it is
    indexed (indexing lm-eval's own ~15,000 task files takes seconds)."""
    require_lm_eval()
    from lm_eval.tasks import TaskManager

    tasks = [task.strip() for task in tasks if task.strip()]
    if not tasks:
        raise BiosrecallError("give at least one lm-eval task with --tasks")
    if include_path is not None:
        local = TaskManager(include_path=str(include_path), include_defaults=False)
        if set(tasks) <= set(local.all_subtasks):
            return local, tasks
    manager = TaskManager(include_path=None if include_path is None else str(include_path))
    return manager, check_tasks(tasks, manager)


def check_tasks(tasks: Sequence[str], manager) -> list[str]:
    """`tasks`, after checking that `manager` knows each one."""
    known = set(manager.all_tasks)
    unknown = [task for task in tasks if task not in known]
    if unknown:
        raise BiosrecallError(
            f"unknown lm-eval task(s) {', '.join(unknown)} (`lm-eval ls tasks` lists them; "
            "tasks of your own: --include-path DIR of task YAML files)"
        )
    return list(tasks)


def result_rows(results: dict) -> list[dict]:
    """(task, metric, value, stderr) of every numeric score in lm-eval's results; a filter other
    than lm-eval's "none" stays in the metric's name ("exact_match,strict-match")."""
    rows = []
    for task, scores in results["results"].items():
        for key, value in scores.items():
            metric, _, kind = key.partition(",")
            if not kind or metric.endswith("_stderr") or not isinstance(value, int | float):
                continue
            stderr = scores.get(f"{metric}_stderr,{kind}")
            rows.append(
                {
                    "task": task,
                    "metric": metric if kind == "none" else key,
                    "value": float(value),
                    "stderr": float(stderr) if isinstance(stderr, int | float) else math.nan,
                }
            )
    return rows


def evaluate_harness(
    run_dir: str | Path,
    tasks: Sequence[str],
    depths: Sequence[int] = DEFAULT_DEPTHS,
    *,
    checkpoint="final",
    include_path: str | Path | None = None,
    limit: float | None = None,
    num_fewshot: int | None = None,
    batch_size: int = 16,
    data_dir: str | Path | None = None,
    device: str = "auto",
    precision: str = "auto",
    out: str | Path | None = None,
) -> pd.DataFrame:
    """Score the chosen checkpoints of an LM run on lm-eval `tasks` at each serving depth; write the
    table and its record (module doc) and return the table."""
    run_dir = Path(run_dir)
    lm_eval = require_lm_eval()
    depths = sorted(set(depths))
    base = table_base(run_dir, out)
    record_of = OutputRecord("lm harness", f"{base.name}.json", "lm_eval_version")  # marks the table
    names = [f"{base.name}.csv", f"{base.name}.parquet", record_of.name]
    check_files_replaceable(base.parent, names, record_of)  # before hours of scoring, as at the end
    manager, tasks = resolve_tasks(tasks, include_path)
    setup = lm_setup(run_dir, checkpoint, data_dir, device, precision)
    tokenizer = load_tokenizer(setup.data_dir / "tokenizer.json")  # the folder's, as `lm prepare` wrote it
    record = {}  # lm-eval's last results: the task configs, versions and n-shot

    def score(_, model) -> pd.DataFrame:
        tables = []
        for depth in depths:
            lm = looped_lm(model, tokenizer, depth, setup.seq_len, batch_size, setup.autocast)
            results = lm_eval.simple_evaluate(
                model=lm,
                tasks=list(tasks),
                num_fewshot=num_fewshot,
                limit=limit,
                task_manager=manager,
                log_samples=False,
            )
            record.update(results)
            rows = pd.DataFrame(result_rows(results), columns=["task", "metric", "value", "stderr"])
            tables.append(rows.assign(depth=depth)[["task", "metric", "depth", "value", "stderr"]])
        return pd.concat(tables, ignore_index=True)

    table = score_checkpoints(run_dir, setup, setup.chosen, score, None)
    with replace_files(base.parent, record_of) as stage:  # the table and its record, as one
        write_table(table, stage / base.name)
        text = _record_text(record, tasks, depths, setup.chosen, limit, num_fewshot, include_path)
        atomic_write_text(stage / record_of.name, text)
    return table


def table_base(run_dir: str | Path, out: str | Path | None = None) -> Path:
    """Where `evaluate_harness` writes: `out` (a .csv or .parquet suffix dropped), else RUN/eval/harness;
    the table is <base>.csv and .parquet, its record <base>.json."""
    base = Path(out) if out is not None else RunFolder(run_dir).eval_dir / TABLE
    return base.with_suffix("") if base.suffix in (".csv", ".parquet") else base


def _record_text(results: dict, tasks, depths, chosen, limit, num_fewshot, include_path) -> str:
    """harness.json: what produced the table (lm-eval's task configs hold functions: kept as text)."""
    record = {
        "lm_eval_version": version("lm_eval"),
        "tasks": list(tasks),
        "depths": list(depths),
        "evaluated_checkpoints": list(chosen),
        "limit": limit,
        "num_fewshot": num_fewshot,
        "include_path": None if include_path is None else str(include_path),
        "n_shot": results.get("n-shot", {}),
        "task_versions": results.get("versions", {}),
        "task_configs": results.get("configs", {}),
    }
    return json.dumps(record, indent=2, sort_keys=True, default=str) + "\n"
