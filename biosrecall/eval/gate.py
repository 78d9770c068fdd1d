"""The learned exit gate: a LayerNorm + Linear from the recurrent state to one logit, fitted on a
frozen bioS checkpoint and calibrated so that `gate:delta` loses at most delta of recall.

    biosrecall gate train runs/ff --checkpoint final        # fit_and_save("runs/ff", "final")
    biosrecall recall-curve runs/ff --checkpoint final --exit gate:0.05
    biosrecall ask runs/ff "Ada Quill Morrison was born in" --exit gate:0.1

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
- Data and calibration: training phrasings only (`biosrecall.eval.gate_data`), a seeded split of
  people; the threshold for each delta by the fixed-sequence binomial test there.
- Cost: 4 d FLOPs per checked position and iteration (`compute.flops.GATE_CHECK_FLOPS_PER_WIDTH`),
  checked at depths 1 .. exit (never at R, where every query stops), plus one readout at the exit.

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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

import numpy as np
import torch
from msgspec import Meta

from biosrecall.errors import BiosrecallError
from biosrecall.eval.exits import Gate, GateCdf, OneParameter
from biosrecall.eval.gate_data import Calibration, calibrate
from biosrecall.eval.sweep import answer_batches, check_one_trajectory, reduce_rows
from biosrecall.files import file_sha256, require_regular_file
from biosrecall.model.decode import gate_cdf_judges
from biosrecall.model.recipes import get_recipe
from biosrecall.records import read_record
from biosrecall.train.checkpoint_files import MODEL_FILE, load_checkpoint, read_meta
from biosrecall.train.run_folder import GATE_CALIBRATION_FILE, GATE_RECORD_FILE, RunFolder


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
    """What `load_gate` and `biosrecall gate train`'s report read of gate.json (`gate_fit.fit_from_traces`
    writes it; the other keys are the fit's evidence, left alone here)."""

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
