"""The learned exit gate: a LayerNorm + Linear from the recurrent state to one logit, fitted on a
frozen bioS checkpoint and calibrated so that `gate:delta` loses at most delta of recall; its head, its
data, its calibration, its fitting (`biosrecall gate train`) and its use (`--exit gate:DELTA`).

    biosrecall gate train runs/ff --checkpoint final        # fit_gates("runs/ff", "final")
    biosrecall recall-curve runs/ff --checkpoint final --exit gate:0.05
    biosrecall ask runs/ff "Ada Quill Morrison was born in" --exit gate:0.1

    written = fit_gates("runs/ff", "final", max_depth=64, seed=0, confidence=0.95)
    # -> [Path("runs/ff/gates/1.0")], each holding gate.json and calibration.npz
    fit_gates("runs/lm-ff", tasks={**GATE_TASKS, "lm": lm_gate})  # biosrecall.lm.gate: an LM run's gate
    fit_people, calibration_people = split_people(dataset.num_people, seed=0)
    fit = gate_queries(dataset, fit_people)                     # every training phrasing of them
    held = gate_queries(dataset, calibration_people, one_per_fact=True, seed=0)
    result = calibrate(scores, exact, reference=4, delta=0.1, alpha=0.05)
    result.threshold                                            # a gate logit, or None

Design.
- Head: logit_k(s) = w . LayerNorm(s) + b + c_k on the state s after iteration k (what the last block
  layer returns) at each answer-predicting position. LayerNorm and Linear are shared over iterations,
  and only a scalar bias c_k is per iteration: the block is shared, so its states live in one space
  where "this position has settled" can be one direction, and per-iteration weights would have
  max_depth times the parameters with a max_depth-th of the data each; c_k keeps the depth prior.
  A query's logit at depth k is the smallest over its positions, so it stops only when all have settled.
- Target: the answer read at depth k already equals the answer at the gate's maximum depth, which
  is the reference depth R, the best fixed depth on the fitting people (the shallowest best). Chosen
  over Ouro's loss-improvement rule because it is what calibration then controls (agreement with R
  implies no recall lost against R), it needs no constants tuned to a loss scale (Ouro's 50 and 0.005
  are for LM losses, where a bioS answer's loss falls to ~0), and it is binary, so plain BCE fits it.
  R rather than depth 64 because a run trained at K=4 may degrade far past it: a gate asked to agree
  with depth 64 would learn to wait for a worse answer.
- Data and calibration: training phrasings only (Queries below), a seeded split of people; the
  threshold for each delta by the fixed-sequence binomial test (Calibration below).
- Cost: 4 d FLOPs per checked position and iteration (`compute.flops.GATE_CHECK_FLOPS_PER_WIDTH`),
  checked at depths 1 .. exit (never at R, where every query stops), plus one readout at the exit.

Queries. A query is one training sentence cut where its value starts: `[sep] + piece0 + name +
piece1`, answered by the value, the same layout as an evaluation row (`biosrecall.bios.evalset`), so
the same scorers read it. Only templates whose name comes before the value can be cut so (the value
must be predictable from what precedes it), and never an evaluation phrasing: a dataset built without
`--holdout-eval-templates` also trains on each evaluation prompt as `"<prompt> {value}."`
(`bios.templates.eval_completion`), and those rows are left out here (`gate_templates`), so the
gate sees no token of the five evaluation templates beyond the words they share with training ones.

Calibration. The gate stops a query at the first depth whose gate logit is at least a threshold t,
and always at the reference depth R (the best fixed depth on the fitting people). Its loss on a
query is 1 when the answer is exact at R but not at the exit depth, so the recall lost against R is
at most the mean loss. Thresholds are tried from a grid fixed before any data is seen
(`THRESHOLD_GRID`, strict to lax): threshold t passes when the binomial p-value
P(Binomial(n, delta) <= losses) is at most alpha, and the laxest t reached before the first failure is
chosen (fixed-sequence testing, the Learn-then-Test procedure of Angelopoulos et al. 2021, as CALM
uses). With probability at least 1 - alpha over the calibration draw, the chosen rule's expected loss
is at most delta on queries drawn as the calibration ones were. Those are one training phrasing per
(person, attribute) fact of held-out people, so that queries are independent draws rather than five
phrasings of one fact; the guarantee is about training phrasings, and it does not carry over to the
evaluation templates or to the per-token exit of the decoder. When no threshold passes, the gate
never stops early and serves at R, whose loss is 0 by definition.

Fitting. What a query is differs by task: a bioS run's are the dataset's prompts (`bios_gate`, here); a
language-model run's are positions of its shards' windows (`biosrecall.lm.gate.lm_gate`, beside the LM
code it reads, so that `eval/` never imports `lm/`). The planning, the checks, the lock, the
fitting pipeline (`fit_from_traces`: head, reference depth, calibration) and the writing are shared.
The head is trained here (`train_head`, Adam on BCE for `FIT_STEPS` steps) on a `Trace` of the fitting
queries (`trace_queries`); what it is, its target and its cost: Design above.

Everything is checked (the selector, the dataset on disk and its hash, the numbers) before the first
model loads, and each gate folder is written atomically, so a refusal or a crash writes nothing.

Files (`RunFolder.gate_dir`): RUN/gates/<label>/gate.json (the record: seed, hashes of the
checkpoint weights, model config and dataset, the head's weights, the delta grid with its calibrated
thresholds, versions) and calibration.npz (the calibration queries' gate logits and exact flags, so
that any delta in (0, 1) is calibrated the same way at use). A gate is used only on the checkpoint and
model it was fitted on; anything else is one error line.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import torch
from msgspec import Meta

from biosrecall.atomic import atomic_directory
from biosrecall.bios import load_dataset
from biosrecall.bios.dataset import MANIFEST
from biosrecall.bios.evalset import EvalSet, prompt_rows
from biosrecall.bios.pools import ATTRIBUTES
from biosrecall.bios.templates import eval_completion
from biosrecall.errors import BiosrecallError
from biosrecall.eval.exits import DEFAULT_SWEEPS, Gate, GateCdf, OneParameter, check_max_depth
from biosrecall.eval.scoring import plan_jobs
from biosrecall.eval.sweep import (
    DEFAULT_BATCH_SIZE,
    answer_batches,
    check_one_trajectory,
    exact_rows,
    reduce_rows,
)
from biosrecall.files import file_sha256, require_regular_file
from biosrecall.locking import output_lock
from biosrecall.model.decode import gate_cdf_judges
from biosrecall.model.recipes import get_recipe
from biosrecall.numbers import check_number, check_seed, rates
from biosrecall.records import read_record
from biosrecall.train.checkpoint_files import MODEL_FILE, load_checkpoint, read_meta
from biosrecall.train.distributed import resolve_device
from biosrecall.train.run_folder import GATE_CALIBRATION_FILE, GATE_RECORD_FILE, RunFolder, versions

FORMAT = "biosrecall-exit-gate-1"
TARGET = "the answer at depth k equals the answer at the reference depth (the best fixed depth)"
BOUND = "Learn-then-Test fixed-sequence testing with binomial p-values, one query per fact"
DEFAULT_CONFIDENCE = 0.95
FIT_STEPS, LEARNING_RATE = 300, 0.05

GateFit = Callable[[Any, dict, int], tuple[dict, dict]]
"""(model, settings, batch size) -> (record without the checkpoint's hashes, calibration arrays)."""
GateTask = Callable[[Path, dict, Path], GateFit]
"""How one kind of run (its `task` name in meta.json) is fitted: (run folder, checkpoint meta, data
folder) -> the `GateFit` of its checkpoints, once the data is checked against the run."""

CALIBRATION_SHARE = 0.3
MAX_FIT_QUERIES = 2048
THRESHOLD_GRID = tuple(round(12.0 - 0.1 * i, 1) for i in range(241))
"""Gate-logit thresholds, strict to lax (12 to -12 in steps of 0.1): fixed before any data, as
fixed-sequence testing needs."""
_SPLIT_STREAM = 0x6A7E  # keeps the gate's draws apart from every other seeded stream of a run


class GateHead(torch.nn.Module):
    """logit = Linear(LayerNorm(state)) + bias of the iteration (module doc)."""

    def __init__(self, width: int, depths: int) -> None:
        super().__init__()
        self.norm = torch.nn.LayerNorm(width)
        self.linear = torch.nn.Linear(width, 1)
        self.depth_bias = torch.nn.Parameter(torch.zeros(max(1, depths)))

    def forward(self, states: torch.Tensor, depth: torch.Tensor | int) -> torch.Tensor:
        """Logits [...] of states [..., d] after iteration `depth` (an int, or one per state)."""
        index = torch.as_tensor(depth, device=states.device) - 1
        return self.linear(self.norm(states.float())).squeeze(-1) + self.depth_bias[index]

    def weights(self) -> dict:
        return {
            name: value.detach().cpu().double().flatten().tolist()
            for name, value in self.state_dict().items()
        }

    @classmethod
    def from_weights(cls, weights: dict) -> GateHead:
        head = cls(len(weights["norm.weight"]), len(weights["depth_bias"]))
        shapes = {name: value.shape for name, value in head.state_dict().items()}
        head.load_state_dict(
            {k: torch.tensor(v, dtype=torch.float32).view(shapes[k]) for k, v in weights.items()}
        )
        return head.eval()


# ---- the all-depth pass --------------------------------------------------------------------------


@dataclass
class Trace:
    """Per depth k (row k - 1): the states [D, P, d] and argmax [D, P] at every answer-predicting
    position, and exact [D, M] per query; `query_of` [P] maps a position to its query."""

    states: torch.Tensor
    argmax: torch.Tensor
    exact: np.ndarray
    query_of: torch.Tensor


def batch_states(model, batch, depth: int, readouts: bool):
    """States after each of `depth` iterations at the batch's positions, and (with `readouts`) the
    logits there at every depth (else only at `depth`)."""
    check_one_trajectory(model, "the exit gate's states")
    states = []
    with model.observing_states(lambda state: states.append(state[batch.positions].float())):
        depths = range(1, depth + 1) if readouts else [depth]
        logits = [out for _, out in model.forward_all_depths(batch.tokens, depths, positions=batch.positions)]
    return states, logits


def gate_scores_by_depth(model, eval_set, max_depth: int, cap: int, batch_size: int, score) -> np.ndarray:
    """[max_depth, M] whole-query gate scores of `eval_set` at depths 1 .. cap - 1 (-inf deeper, where
    the gate is not asked): `score(states [D, P, d])` [D, P] reduced to each query's smallest, from the
    model's own pass (readout only at the last depth needed)."""
    scores = np.full((max_depth, len(eval_set)), -np.inf)
    if cap <= 1:
        return scores
    for batch in answer_batches(model, eval_set, batch_size):
        seen, _ = batch_states(model, batch, cap - 1, readouts=False)
        smallest = reduce_rows(
            score(torch.stack(seen)).double(), batch.row_of_target, len(batch.rows), "amin"
        )
        scores[: cap - 1, batch.rows] = smallest.cpu().numpy()
    return scores


def trace_queries(model, queries, depth: int, batch_size: int = DEFAULT_BATCH_SIZE) -> Trace:
    """The `Trace` of `queries` (an `EvalSet`) at depths 1..depth, one all-depth pass per batch."""
    states, argmax, query_of = [], [], []
    exact = np.zeros((depth, len(queries)), dtype=bool)
    for batch in answer_batches(model, queries, batch_size):
        seen, logits = batch_states(model, batch, depth, readouts=True)
        states.append(torch.stack(seen).cpu())
        argmax.append(torch.stack([out.argmax(-1) for out in logits]).cpu())
        exact[:, batch.rows] = torch.stack([exact_rows(out, batch) for out in logits]).cpu().numpy()
        query_of.append(torch.as_tensor(batch.rows)[batch.row_of_target.cpu()])
    return Trace(torch.cat(states, 1), torch.cat(argmax, 1), exact, torch.cat(query_of))


def query_logits(head: GateHead, states: torch.Tensor, query_of: torch.Tensor, queries: int) -> np.ndarray:
    """[D, M]: per depth, the smallest gate logit over each query's positions (states [D, P, d])."""
    depths = torch.arange(1, len(states) + 1)[:, None]
    with torch.inference_mode():
        return reduce_rows(head(states, depths).double(), query_of, queries, "amin").cpu().numpy()


def reference_depth(exact: np.ndarray) -> int:
    """The best fixed depth of `exact` [D, M] (row k - 1 is depth k): the shallowest with most exact."""
    return int(np.argmax(np.asarray(exact).mean(axis=1))) + 1


# ---- the queries ---------------------------------------------------------------------------------


def gate_templates(dataset) -> np.ndarray:
    """Training-template rows the gate may use: name before value, not an evaluation phrasing
    (`"<prompt> {value}."`); the manifest lists the training templates in the rows' order
    (`bios.validation` checks it when the dataset loads)."""
    store, templates = dataset.token_store, dataset.manifest["templates"]
    evaluation_phrasing = [
        text in {eval_completion(prompt) for prompt in templates["eval"][attribute]}
        for attribute in ATTRIBUTES
        for text in templates["train"][attribute]
    ]
    usable = np.flatnonzero(store.name_first & ~np.array(evaluation_phrasing, dtype=bool))
    missing = set(range(len(ATTRIBUTES))) - set(store.template_attribute[usable].tolist())
    if missing:
        names = ", ".join(ATTRIBUTES[a] for a in sorted(missing))
        raise BiosrecallError(
            f"dataset {dataset.path} has no training phrasing with the name first for {names}"
        )
    return usable


def split_people(people: int, seed: int, share: float = CALIBRATION_SHARE) -> tuple[np.ndarray, np.ndarray]:
    """(fitting, calibration) person ids, a seeded split with `share` of them held out for calibration."""
    if people < 2:
        raise BiosrecallError(f"the exit gate needs at least 2 people to fit and calibrate on (got {people})")
    order = np.random.default_rng([seed, _SPLIT_STREAM]).permutation(people)
    held = min(people - 1, max(1, round(share * people)))
    return np.sort(order[held:]), np.sort(order[:held])


def _pairs(dataset, people: np.ndarray, one_per_fact: bool, seed: int, limit: int | None):
    """(person, template row) of every query: every usable phrasing, or one drawn per fact."""
    store, usable = dataset.token_store, gate_templates(dataset)
    rng = np.random.default_rng([seed, _SPLIT_STREAM, int(one_per_fact)])
    if one_per_fact:
        by_attribute = [usable[store.template_attribute[usable] == a] for a in range(len(ATTRIBUTES))]
        person = np.repeat(people, len(ATTRIBUTES))
        template = np.array(
            [rng.choice(by_attribute[a]) for a in np.tile(range(len(ATTRIBUTES)), len(people))]
        )
    else:
        person, template = np.repeat(people, len(usable)), np.tile(usable, len(people))
    if limit is not None and len(person) > limit:
        keep = np.sort(rng.choice(len(person), size=limit, replace=False))
        person, template = person[keep], template[keep]
    return person.astype(np.int64), template.astype(np.int64)


def gate_queries(
    dataset, people: np.ndarray, *, one_per_fact: bool = False, seed: int = 0, limit: int | None = None
) -> EvalSet:
    """The queries of `people` (module doc) as an `EvalSet` whose `template` is the training-template
    row; `one_per_fact` draws one phrasing per (person, attribute); `limit` subsamples, seeded."""
    store = dataset.token_store
    person, template = _pairs(dataset, np.asarray(people, dtype=np.int64), one_per_fact, seed, limit)
    pieces = [(store.piece_start[template, i], store.piece_length[template, i]) for i in (0, 1)]
    attribute = store.template_attribute[template]
    return prompt_rows(store, dataset.pad_id, person, attribute, template, pieces)


# ---- the calibration -----------------------------------------------------------------------------


def binomial_cdf(successes: int, trials: int, p: float) -> float:
    """P(Binomial(trials, p) <= successes), summed in log space (no scipy)."""
    if successes >= trials:
        return 1.0
    terms = [
        math.lgamma(trials + 1)
        - math.lgamma(i + 1)
        - math.lgamma(trials - i + 1)
        + i * math.log(p)
        + (trials - i) * math.log1p(-p)
        for i in range(int(successes) + 1)
    ]
    top = max(terms)
    return min(1.0, math.exp(top) * sum(math.exp(term - top) for term in terms))


def exit_depths_at(scores: np.ndarray, threshold: float | None, reference: int) -> np.ndarray:
    """int [M]: each query's exit depth under threshold `threshold` (None: never early), given its gate
    logits `scores` [>= reference - 1, M] at depths 1, 2, ...; every query stops at `reference`."""
    count = scores.shape[1]
    if threshold is None or reference == 1:
        return np.full(count, reference)
    holds = np.vstack([scores[: reference - 1] >= threshold, np.ones((1, count), dtype=bool)])
    return holds.argmax(axis=0) + 1


@dataclass(frozen=True)
class Calibration:
    """The calibrated threshold for one delta (None: no grid threshold passed, serve at the reference)
    with its evidence: queries, losses at it and their binomial p-value, the mean exit depth."""

    delta: float
    alpha: float
    threshold: float | None
    queries: int
    losses: int
    p_value: float
    mean_depth: float


def calibrate(
    scores: np.ndarray, exact: np.ndarray, reference: int, delta: float, alpha: float
) -> Calibration:
    """The laxest grid threshold whose loss against `reference` passes the fixed-sequence binomial test
    (module doc); `exact` is bool [>= reference, M], row k - 1 at depth k. `delta` and `alpha` lie in
    (0, 1): a parsed `gate:delta` and a checked confidence."""
    exact = np.asarray(exact, dtype=bool)
    base, columns, count = exact[reference - 1], np.arange(exact.shape[1]), exact.shape[1]
    chosen = Calibration(delta, alpha, None, count, 0, 0.0, float(reference))
    for threshold in THRESHOLD_GRID if reference > 1 else ():
        depths = exit_depths_at(scores, threshold, reference)
        losses = int((base & ~exact[depths - 1, columns]).sum())
        p_value = binomial_cdf(losses, count, delta)
        if p_value > alpha:
            break
        chosen = Calibration(delta, alpha, threshold, count, losses, p_value, float(depths.mean()))
    return chosen


# ---- fitting -------------------------------------------------------------------------------------


def train_head(trace: Trace, reference: int, seed: int) -> tuple[GateHead, dict]:
    """Fit the head on depths 1 .. reference - 1 to `TARGET` (why that target: the module doc's Design);
    returns it and a summary."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        head = GateHead(trace.states.shape[-1], reference - 1)
    if reference == 1:
        return head.eval(), {"positions": 0, "target_rate": float("nan"), "loss": float("nan")}
    depths = reference - 1
    inputs = trace.states[:depths].reshape(-1, trace.states.shape[-1])
    depth_of = torch.arange(1, depths + 1).repeat_interleave(trace.states.shape[1])
    target = (trace.argmax[:depths] == trace.argmax[reference - 1]).reshape(-1).float()
    optimizer = torch.optim.Adam(head.parameters(), lr=LEARNING_RATE)
    for _ in range(FIT_STEPS):
        optimizer.zero_grad()
        loss = torch.nn.functional.binary_cross_entropy_with_logits(head(inputs, depth_of), target)
        loss.backward()
        optimizer.step()
    summary = {
        "positions": int(inputs.shape[0]),
        "target_rate": float(target.mean()),
        "loss": float(loss.detach()),
    }
    return head.eval(), summary


def _plan(run_dir: Path, checkpoints, data_dir, tasks: Mapping[str, GateTask]):
    """(every selected checkpoint (`eval.scoring.plan_jobs`), refused when it has no recurrent block;
    per data folder, how its checkpoints are fitted, once its task checked it against the run). A
    checkpoint's task is the one its meta.json names, "bios" when it names none."""
    jobs = plan_jobs([run_dir], checkpoints, data_dir)
    if any(job.meta["model_config"].get("n_block", 1) == 0 for job in jobs):
        raise BiosrecallError(
            f"{run_dir} is a standard transformer (no recurrent block): it has one depth, so there "
            "is no exit for a gate to learn"
        )
    fits: dict[Path, GateFit] = {}
    for job in jobs:
        name = (job.meta.get("task") or {}).get("name") or "bios"
        if name not in tasks:
            raise BiosrecallError(
                f"{run_dir} is a {name} run: this command fits gates of {' and '.join(tasks)} runs only"
            )
        if job.dataset_path not in fits:
            fits[job.dataset_path] = tasks[name](run_dir, job.meta, job.dataset_path)
    return jobs, fits


def fit_gates(
    run_dir,
    checkpoints="final",
    *,
    max_depth: int = 64,
    seed: int = 0,
    confidence: float = DEFAULT_CONFIDENCE,
    batch_size: int = DEFAULT_BATCH_SIZE,
    device: str = "auto",
    data_dir=None,
    tasks: Mapping[str, GateTask] | None = None,
) -> list[Path]:
    """Fit and store the gate of each selected checkpoint of `run_dir`; returns the gate folders.
    `tasks` maps a run's task name to how it is fitted (default `GATE_TASKS`: bioS runs only)."""
    tasks = GATE_TASKS if tasks is None else tasks
    run_dir, max_depth, seed = Path(run_dir), check_max_depth(max_depth), check_seed(seed)
    check_number("--confidence", confidence, rates(0, 1, low_open=True, high_open=True))
    planned, fits = _plan(run_dir, checkpoints, data_dir, tasks)
    # A bioS dataset and an LM shard folder alike are identified by their manifest's sha256.
    data_hashes = {data_path: file_sha256(data_path / MANIFEST) for data_path in fits}
    settings = {"seed": seed, "confidence": float(confidence), "max_depth": max_depth}
    device, written = resolve_device(str(device)), []
    with output_lock(run_dir, clean=False):
        for job in planned:
            model, _ = load_checkpoint(job.path, device=device)
            record, arrays = fits[job.dataset_path](model, settings, batch_size)
            record.update(
                checkpoint=job.label,
                checkpoint_hash=file_sha256(job.path / MODEL_FILE),
                model_hash=model_hash(job.meta),
                data_hash=data_hashes[job.dataset_path],
            )
            written.append(write_gate(RunFolder(run_dir).gate_dir(job.label), record, arrays))
    return written


def bios_gate(run_dir: Path, meta: dict, data_path: Path) -> GateFit:
    """The bioS task (`GateTask`): the dataset, checked to be the one the run trained on, fitted by
    `fit_gate`."""
    dataset = load_dataset(data_path)
    RunFolder(run_dir).check_training_data(meta, data_path, dataset.manifest_hash)
    return lambda model, settings, batch_size: fit_gate(model, dataset, settings, batch_size)


def fit_gate(model, dataset, settings: dict, batch_size: int = DEFAULT_BATCH_SIZE) -> tuple[dict, dict]:
    """(record without the checkpoint's hashes, calibration arrays) of a gate fitted on `model`;
    `settings`: seed, confidence, max_depth and optionally reference (else the best fixed depth)."""
    seed, max_depth = settings["seed"], settings["max_depth"]
    fit_people, held_people = split_people(dataset.num_people, seed)
    fit = gate_queries(dataset, fit_people, seed=seed, limit=MAX_FIT_QUERIES)
    held = gate_queries(dataset, held_people, one_per_fact=True, seed=seed)
    record, arrays = fit_from_traces(
        lambda: trace_queries(model, fit, max_depth, batch_size),
        lambda reference: trace_queries(model, held, reference, batch_size),
        settings,
    )
    record["fit"].update(people=len(fit_people), queries=len(fit))
    record["calibration"].update(people=len(held_people))
    return record, arrays


def fit_from_traces(
    trace_fit: Callable[[], Trace], trace_held: Callable[[int], Trace], settings: dict
) -> tuple[dict, dict]:
    """The one fitting pipeline of every task: train the head on `trace_fit()`, the fitting queries
    traced to max_depth, then calibrate it on `trace_held(reference)`, the held-out queries traced to
    the reference depth. Returns (the gate.json record without the checkpoint's hashes and the task's
    own counts, calibration arrays); `settings` as `fit_gate`'s."""
    trace = trace_fit()
    # A given reference (settings["reference"], for experiments and tests) replaces the best fixed depth.
    reference = min(settings.get("reference") or reference_depth(trace.exact), settings["max_depth"])
    head, summary = train_head(trace, reference, settings["seed"])
    del trace  # the fitting states are the largest thing held; the calibration pass needs room
    held = trace_held(reference)
    queries = held.exact.shape[1]
    scores = query_logits(head, held.states[: reference - 1], held.query_of, queries)
    alpha = round(1 - settings["confidence"], 12)
    # Every record calibrates the grid a bare `gate` sweeps; any other delta is calibrated at use.
    calibrations = [
        calibrate(scores, held.exact, reference, delta, alpha) for delta in DEFAULT_SWEEPS["gate"]
    ]
    clean = lambda value: None if isinstance(value, float) and math.isnan(value) else value  # noqa: E731
    record = {
        "format": FORMAT,
        "seed": settings["seed"],
        "confidence": settings["confidence"],
        "max_depth": settings["max_depth"],
        "reference_depth": reference,
        "target": TARGET,
        "bound": BOUND,
        "fit": {
            "steps": FIT_STEPS,
            "learning_rate": LEARNING_RATE,
            **{k: clean(v) for k, v in summary.items()},
        },
        "calibration": {
            "share": CALIBRATION_SHARE,
            "deltas": [asdict(c) for c in calibrations],
            "queries": queries,
            "reference_exact": float(held.exact[reference - 1].mean()),
        },
        "weights": head.weights(),
        "versions": versions(),
    }
    return record, {"scores": scores, "exact": held.exact}


def write_gate(folder: Path, record: dict, arrays: dict) -> Path:
    """Write one gate folder (record and calibration arrays) atomically, replacing an older one."""
    with atomic_directory(folder, overwrite=True) as tmp:
        (tmp / GATE_RECORD_FILE).write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
        np.savez(tmp / GATE_CALIBRATION_FILE, **arrays)
    return folder


GATE_TASKS: Mapping[str, GateTask] = {"bios": bios_gate}
"""The tasks `fit_gates` fits by default; `biosrecall gate train` adds `biosrecall.lm.gate.lm_gate`."""


# ---- records and use -----------------------------------------------------------------------------


def model_hash(meta: dict) -> str:
    """sha256 of the checkpoint's model config, as canonical JSON: which architecture it is."""
    return hashlib.sha256(json.dumps(meta["model_config"], sort_keys=True).encode()).hexdigest()


@dataclass
class GateCalibrations:
    """The calibration part of gate.json that readers use (its other keys are the calibration's size)."""

    deltas: list[Calibration]
    """The calibrated threshold and its evidence for each delta of the grid (`deltas`)."""


@dataclass
class GateRecord:
    """What `load_gate` and `biosrecall gate train`'s report read of gate.json (`fit_from_traces` writes
    it; the other keys are the fit's evidence, left alone here)."""

    weights: dict[str, list[float]]
    """The head's parameters by name, flattened (`GateHead.weights`)."""
    reference_depth: int
    """The reference depth R: the best fixed depth on the fitting people, where every query stops (the
    calibration's depths, which `load_gate` checks it against)."""
    confidence: Annotated[float, Meta(gt=0, lt=1)]
    """The confidence of the calibration bound, in (0, 1)."""
    model_hash: str
    """`model_hash` of the checkpoint it was fitted on: which architecture."""
    checkpoint_hash: str
    """sha256 of the weights file of the checkpoint it was fitted on."""
    calibration: GateCalibrations
    """The threshold calibrated for each delta of the grid."""


@dataclass(frozen=True)
class FittedGate:
    """A gate read back and checked against its checkpoint: record, head, calibration arrays."""

    record: GateRecord
    head: GateHead
    scores: np.ndarray
    exact: np.ndarray

    @property
    def reference(self) -> int:
        return self.record.reference_depth

    def calibration(self, delta: float):
        alpha = round(1.0 - float(self.record.confidence), 12)
        return calibrate(self.scores, self.exact, self.reference, delta, alpha)


def read_calibration(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """The calibration arrays of a gate (`scores`: gate logits [R - 1, M] at depths 1 .. R - 1, `exact`:
    bool [R, M], R its reference depth): the one reader of calibration.npz. A missing, damaged (a torn
    zip, a wrong member) or malformed file is one line naming it."""

    require_regular_file(path, "exit gate calibration")
    try:
        with np.load(path, allow_pickle=False) as arrays:
            scores, exact = np.asarray(arrays["scores"]), np.asarray(arrays["exact"])
    except Exception as exc:  # noqa: BLE001 - numpy and zipfile raise a dozen kinds for a damaged file
        raise BiosrecallError(f"exit gate calibration {path} is unreadable ({type(exc).__name__})") from None
    typed = np.issubdtype(scores.dtype, np.floating) and exact.dtype == np.bool_
    shaped = scores.ndim == exact.ndim == 2 and scores.shape[1] == exact.shape[1]
    if not (typed and shaped and scores.shape[0] == exact.shape[0] - 1 and np.isfinite(scores).all()):
        raise BiosrecallError(
            f"exit gate calibration {path} is malformed: expected finite float scores [R - 1, M] and bool "
            f"exact flags [R, M], got {scores.dtype} {scores.shape} and {exact.dtype} {exact.shape}"
        )
    return scores, exact


def load_gate(run_dir, label: str, checkpoint) -> FittedGate:
    """The gate of checkpoint `label` of `run_dir`, refused unless fitted on that very checkpoint; every
    refusal of a gate that is there ends with the command that fits it again."""

    folder = RunFolder(run_dir).gate_dir(label)
    refit = f"`biosrecall gate train {run_dir} --checkpoint {label}`"
    if not (folder / GATE_RECORD_FILE).is_file():
        raise BiosrecallError(f"{run_dir} has no exit gate for checkpoint {label}: fit one with {refit}")
    meta = read_meta(checkpoint)  # a damaged checkpoint is its own problem, not the gate's
    try:
        return _read_gate(folder, checkpoint, meta)
    except BiosrecallError as exc:
        raise BiosrecallError(f"{exc}; refit it with {refit}") from None


def _read_gate(folder: Path, checkpoint, meta: dict) -> FittedGate:
    record = read_record(folder / GATE_RECORD_FILE, GateRecord, "exit gate record")
    scores, exact = read_calibration(folder / GATE_CALIBRATION_FILE)
    if record.reference_depth != exact.shape[0]:
        raise BiosrecallError(
            f"the exit gate in {folder} is inconsistent: reference depth {record.reference_depth} in "
            f"{GATE_RECORD_FILE}, calibration to depth {exact.shape[0]}"
        )
    try:
        head = GateHead.from_weights(record.weights)
    except (KeyError, ValueError, RuntimeError) as exc:
        raise BiosrecallError(
            f"the exit gate record {folder / GATE_RECORD_FILE} holds unusable weights ({type(exc).__name__})"
        ) from None
    if record.model_hash != model_hash(meta):
        raise BiosrecallError(
            f"the exit gate in {folder} was fitted on another model (model hash "
            f"{record.model_hash[:12]}, this checkpoint's {model_hash(meta)[:12]})"
        )
    found = file_sha256(Path(checkpoint) / MODEL_FILE)
    if record.checkpoint_hash != found:
        raise BiosrecallError(
            f"the exit gate in {folder} was fitted on another checkpoint (weights hash "
            f"{record.checkpoint_hash[:12]}, this one's {found[:12]})"
        )
    return FittedGate(record, head, scores, exact)


@dataclass(frozen=True, eq=False)
class GateExit(OneParameter):
    """`gate:delta` resolved against one checkpoint's gate: stop at the first depth whose logit is at
    least `threshold` (None: never early), and at `cap`, the gate's reference depth, at the latest."""

    delta: float
    threshold: float | None
    cap: int
    head: GateHead = field(repr=False)
    name = "gate"
    reads = "gate"

    def holds(self, depth, stats):
        values = np.asarray(stats.gate)
        return np.zeros(values.shape, dtype=bool) if self.threshold is None else values >= self.threshold

    def checks(self, depth: int) -> int:
        """Gate checks a query stopping at `depth` paid for: one per iteration before the cap."""
        return 0 if self.threshold is None else min(int(depth), self.cap - 1)

    def scores(self, model, eval_set, max_depth: int, batch_size: int) -> np.ndarray:
        """[max_depth, M] whole-query gate logits, what `holds` compares (`gate_scores_by_depth`)."""
        head = self.head.to(next(model.parameters()).device)
        depths = torch.arange(1, self.cap)[:, None]
        return gate_scores_by_depth(
            model, eval_set, max_depth, self.cap, batch_size, lambda s: head(s, depths)
        )

    def judge(self):
        """A per-token judge for the decoder: given the state [..., d] after iteration `depth`."""
        cap = 1 if self.threshold is None else self.cap  # no threshold passed: never asked, never early
        return _capped_judge(
            cap, lambda depth, state: self.head.to(state.device)(state, depth) >= self.threshold
        )


@dataclass(frozen=True, eq=False)
class RecipeGateExit(OneParameter):
    """`cdf:q` bound to one checkpoint whose recipe trains an exit gate (`Recipe.exit_gate`, e.g.
    ouro-gate): stop at the first depth where the exit CDF 1 - prod_{i<=t} (1 - lambda_i) of every
    checked position reaches q, lambda being the recipe's own gate (`Recipe.gate`), and at `cap`."""

    q: float
    cap: int
    checkpoint: Path
    name = "cdf"
    reads = "gate"

    def holds(self, depth, stats):
        return np.asarray(stats.gate) >= self.q

    def checks(self, depth: int) -> int:
        """Gate checks a query stopping at `depth` paid for: one per iteration before the cap."""
        return min(int(depth), self.cap - 1)

    def scores(self, model, eval_set, max_depth: int, batch_size: int) -> np.ndarray:
        """[max_depth, M]: per depth, the smallest exit CDF over each query's positions (-inf from the
        cap on, where no gate is read), from the model's own pass."""

        def cdf(states: torch.Tensor) -> torch.Tensor:
            return 1 - torch.cumprod(1 - model.recipe.gate(model, states).double(), dim=0)

        return gate_scores_by_depth(model, eval_set, max_depth, self.cap, batch_size, cdf)

    def judge(self):
        """A per-token judge for the decoder (`model.decode.gate_cdf_judges` on this checkpoint)."""
        model = _gate_model(str(self.checkpoint))
        inner = gate_cdf_judges(model, self.q)()
        return _capped_judge(
            self.cap, lambda depth, state: inner(depth, state.to(next(model.parameters()).device))
        )


def _capped_judge(cap: int, decide):
    """A per-token judge of the state [..., d] after iteration `depth` (`reads_state`): `decide(depth,
    state)` before `cap`, never from it on (the gate is not asked where every query stops)."""

    def judge(depth: int, state: torch.Tensor) -> torch.Tensor:
        if depth >= cap:
            return torch.zeros(state.shape[:-1], dtype=torch.bool)
        with torch.inference_mode():
            return decide(depth, state).cpu()

    judge.reads_state = True
    return judge


@functools.lru_cache(maxsize=2)
def _gate_model(checkpoint: str):
    """The checkpoint's model, for a judge that reads its recipe's gate (loaded once per checkpoint)."""
    return load_checkpoint(checkpoint)[0].eval()


def _recipe_of(checkpoint):
    """(name, `Recipe`) of the recipe the checkpoint was trained with."""
    name = (read_meta(Path(checkpoint)).get("model_config") or {}).get("recipe", "baseline")
    return name, get_recipe(name)


def resolve_gates(criteria, run_dir, label: str, checkpoint, max_depth: int) -> list:
    """The criteria with every `gate:delta` bound to the checkpoint's fitted gate and every `cdf:q` to
    its recipe's trained gate (others unchanged)."""
    fitted = trained = None
    if any(isinstance(criterion, GateCdf) for criterion in criteria):
        if any(isinstance(criterion, Gate) for criterion in criteria):
            raise BiosrecallError("cdf:q and gate:delta read different gates: score them in separate calls")
        recipe_name, recipe = _recipe_of(checkpoint)
        if not recipe.exit_gate:
            raise BiosrecallError(
                f"cdf:q reads the exit gate a recipe trains (--recipe ouro-gate); {run_dir} @ {label} was "
                f"trained with recipe {recipe_name}, which has none"
            )
        trained = max_depth
    elif any(isinstance(criterion, Gate) for criterion in criteria):
        fitted = load_gate(run_dir, label, checkpoint)
        if fitted.reference > max_depth:
            raise BiosrecallError(
                f"the exit gate of {run_dir} @ {label} serves up to depth {fitted.reference}, deeper than "
                f"--max-depth {max_depth}"
            )
    resolved = []
    for criterion in criteria:
        if isinstance(criterion, GateCdf):
            criterion = RecipeGateExit(criterion.q, trained, Path(checkpoint))
        elif isinstance(criterion, Gate):
            threshold = fitted.calibration(criterion.delta).threshold
            criterion = GateExit(criterion.delta, threshold, fitted.reference, fitted.head)
        resolved.append(criterion)
    return resolved


def servable_criteria(criteria, run_dir, checkpoint) -> tuple[list, list[str]]:
    """(the criteria the checkpoint's recipe can serve, one line per criterion it cannot, saying why):
    `cdf:q` needs a recipe that trains an exit gate; latent, accel and a fitted `gate:delta` observe one
    trajectory over depths, which a recipe whose iterations are told K (loopformer) does not run. What
    `--applicable-exits` scores on each checkpoint instead of refusing the call."""
    RunFolder(run_dir).read_config()  # registers a recipe the run trained from --recipe-module
    name, recipe = _recipe_of(checkpoint)
    kept, skipped = [], []
    for criterion in criteria:
        if isinstance(criterion, GateCdf) and not recipe.exit_gate:
            skipped.append(f"{criterion.spec}: recipe {name} trains no exit gate")
        elif (
            criterion.reads in ("state", "gate")
            and not isinstance(criterion, GateCdf)
            and not recipe.prefix_consistent
        ):
            skipped.append(
                f"{criterion.spec}: recipe {name} runs a pass per depth (its iterations are told K), "
                "no one trajectory to observe"
            )
        else:
            kept.append(criterion)
    return kept, skipped


def bind_gates(criteria, run_dir, label: str, checkpoint, max_depth: int, applicable: bool):
    """(the criteria checkpoint `label` of `run_dir` is scored on, every gate bound (`resolve_gates`);
    one line per criterion left out, saying why): with `applicable` those its recipe can serve
    (`servable_criteria`), else all of them (or one error). What `recall-curve` and `lm eval` both ask."""
    kept, skipped = servable_criteria(criteria, run_dir, checkpoint) if applicable else (criteria, [])
    return resolve_gates(kept, run_dir, label, checkpoint, max_depth), skipped
