"""TrainConfig: every knob of a training run, with a docstring under each field.

    config = TrainConfig(schedule="uniform:1-16", budget_of="fixed:4:2000", batch_size=64)
    check_field("lr", 5.0)   # BiosrecallError: the rule one field (or one CLI option) must meet

The CLI builds its trainer options from these fields (name, default, and the docstring as help; see
`biosrecall.cli.options`) and fills one from them; `config.json` in the run folder stores it (with the
resolved model config and the plan) so a run can be repeated exactly or resumed only with the same
settings. A TrainConfig checks every field on construction, with the same `check_field` each CLI option
applies, so an impossible one never exists; `validate()` adds the rule a plan needs: exactly one of
budget, budget_of, updates and exposures.
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from typing import Any

import numpy as np

from biosrecall.compute.flops import MAX_TOKENS_PER_UPDATE, check_tokens_per_update
from biosrecall.compute.schedules import MAX_UPDATES, parse_schedule
from biosrecall.errors import BiosrecallError
from biosrecall.model.config import MAX_SEED
from biosrecall.model.recipes.base import check_recipe_name
from biosrecall.numbers import EXPOSURES, FLOAT_MAX, SEED, Limit, check_number

DEFAULT_FRACTIONS = (0.25, 0.45, 0.67, 0.8, 1.0)
LR_SCHEDULES = ("cosine", "wsd")
RUN_SIZE = ("budget", "budget_of", "updates", "exposures")
"""The fields that set a run's length: one setting spelled four ways, exactly one given."""
PRECISIONS = ("auto", "fp32", "bf16")
PARALLEL_MODES = ("ddp", "fsdp")
MAX_THREADS = 1024  # more than any CPU has cores; a larger count is a typo


TRACKERS = {"tensorboard": "tensorboard", "wandb": "wandb", "trackio": "trackio"}
"""Each tracker's name (as --log takes it) and the module it needs."""
INSTALL_HINT = "pip install 'biosrecall[track]'"


def parse_trackers(value: Any) -> tuple[str, ...]:
    """The tracker names of `value` (a name, a comma list, or a list of them), each once, in order."""
    parts = [value] if isinstance(value, str) else value
    if not isinstance(parts, list | tuple) or not all(isinstance(part, str) for part in parts):
        raise BiosrecallError(f"log takes tracker names ({', '.join(TRACKERS)}), got {value!r}")
    names = [name.strip() for part in parts for name in part.split(",")]
    unknown = [name for name in names if name not in TRACKERS]
    if unknown:
        raise BiosrecallError(f"unknown tracker {unknown[0]!r} in log (choose from {', '.join(TRACKERS)})")
    return tuple(dict.fromkeys(names))


def require_installed(names: tuple[str, ...]) -> None:
    """Refuse trackers whose library is missing, naming the extra that installs them."""
    missing = [name for name in names if importlib.util.find_spec(TRACKERS[name]) is None]
    if missing:
        what = f"tracker {missing[0]} is" if len(missing) == 1 else f"trackers {', '.join(missing)} are"
        raise BiosrecallError(f"{what} not installed: {INSTALL_HINT}")


@dataclass
class TrainConfig:
    schedule: str = "fixed_first:k0=4,switch=0.8,finish=uniform"
    """Depth schedule, e.g. fixed:4, uniform:1-16, fixed_first:k0=4,switch=0.8,finish=uniform or
    curriculum:mean=8,warmup=0.5,shape=linear (see `biosrecall.compute.schedules`)."""

    budget: float | None = None
    """Modeled training FLOPs to spend, e.g. 2e14; the run takes as many updates as fit."""

    budget_of: str | None = None
    """Instead of a budget: SPEC:UPDATES, the FLOPs that schedule SPEC spends in UPDATES updates, e.g.
    fixed:4:2000."""

    updates: int | None = None
    """Instead of a budget: exactly this many updates, the budget being what they spend (runs matched in
    tokens rather than FLOPs, like the paper's LM runs)."""

    exposures: float | None = None
    """Instead of a budget (bioS runs): as many updates as it takes to show every person's biography
    this many times on average, counted on the run's own batches, e.g. 100; the FLOPs follow from it
    (see `biosrecall.bios.exposures`)."""

    batch_size: int = 32
    """Sequences per update (the global batch: split across processes under torchrun)."""

    grad_accum: int = 1
    """Micro-batches per update on each process; their gradients add up (same update, less memory)."""

    seq_len: int | None = None
    """Tokens per sequence [default: the model preset's context length]."""

    lr: float = 2e-3
    """Peak learning rate of AdamW."""

    min_lr_ratio: float = 0.1
    """The learning rate decays to lr x min_lr_ratio by the last update."""

    warmup: float = 0.05
    """Linear warm-up length as a fraction of the planned updates."""

    warmup_updates: int | None = None
    """Warm-up length in updates instead of a fraction (runs that branch from one trunk need the same
    absolute warm-up)."""

    lr_schedule: str = "cosine"
    """cosine (warm-up, then cosine decay) or wsd (warm-up, stable, then linear decay over the last
    `decay` share of the updates)."""

    decay: float | None = None
    """wsd: the share of the updates in the final linear decay [default: 0.2]."""

    weight_decay: float = 0.1
    """AdamW decoupled weight decay on matrices (norms, biases and embeddings are not decayed)."""

    betas: tuple[float, float] = (0.9, 0.95)
    """AdamW betas, as B1,B2."""

    grad_clip: float = 1.0
    """Clip the global gradient norm to this value (0 disables clipping)."""

    seed: int = 0
    """Seeds the initial weights, every batch and every depth draw."""

    device: str = "auto"
    """auto (CUDA when present), cpu, cuda or cuda:N."""

    precision: str = "auto"
    """fp32, bf16 (autocast, fp32 weights; on CUDA or CPU) or auto (bf16 on CUDA, fp32 on CPU)."""

    threads: int | None = None
    """CPU threads for torch [default: torch's, one per core]; 1 is best on a busy machine."""

    compile: bool = False
    """Compile each transformer layer with torch.compile, the depth loop staying in Python so every K
    reuses the same graphs (useful on GPU; slow to start on CPU)."""

    activation_checkpointing: bool = False
    """Recompute each block iteration in the backward pass instead of storing its activations: memory
    flat in K, the same gradients, about one more forward of the iterations in time."""

    checkpoint_fractions: tuple[float, ...] = DEFAULT_FRACTIONS
    """Budget fractions at which a weights checkpoint is kept (1.0 is always the final update)."""

    keep_updates: tuple[int, ...] | None = None
    """Also keep the whole training state after each of these updates (checkpoints/update-N/): the
    points other runs can branch from (`train --from RUN --at-update N`)."""

    save_every: int = 200
    """Updates between refreshes of the resumable `latest` checkpoint."""

    log_every: int = 50
    """Updates between log lines when stderr is not a terminal (metrics.jsonl records every update)."""

    parallel: str = "ddp"
    """Under torchrun: ddp (replicated weights) or fsdp (FSDP2, sharded per layer)."""

    log: tuple[str, ...] = ()
    """Also send every metrics.jsonl record and the run's config to these trackers: tensorboard, wandb
    or trackio (repeatable or a comma list; needs pip install 'biosrecall[track]')."""
    recipe: str = "baseline"
    """The looped recipe: what one iteration computes and how the loss weighs the depths. Built in:
    baseline, huginn, deep-supervision, parcae, loopformer, ouro-gate; another is an installed
    package's biosrecall.recipes entry point or --recipe-module's. Recorded in the model config and
    carried into an export."""
    recipe_module: str | None = None
    """A Python file defining RECIPE (a biosrecall.model.recipes.base.Recipe), checked and registered
    before the run; --recipe then names it (the docs' guide "Add a recipe" has an example)."""

    def __post_init__(self) -> None:
        for f in fields(self):
            setattr(self, f.name, check_field(f.name, getattr(self, f.name)))
        # The rules between fields that hold whatever the model (the run size is `validate`'s).
        if self.batch_size % self.grad_accum:
            raise BiosrecallError(
                f"grad accumulation {self.grad_accum} must be at least 1 and divide the batch size "
                f"{self.batch_size}"
            )
        if self.decay is not None and self.lr_schedule != "wsd":
            raise BiosrecallError(f"decay applies to lr_schedule wsd only, not {self.lr_schedule}")
        if self.seq_len is not None:
            check_tokens_per_update(self.batch_size * self.seq_len)
        if self.lr * self.weight_decay >= 1:
            raise BiosrecallError(
                f"lr x weight_decay must be below 1 (each update scales decayed weights by 1 - lr x "
                f"weight_decay), got {self.lr:g} x {self.weight_decay:g}"
            )

    def validate(self) -> None:
        """Check every field again (they may have been reassigned), that the run size is given once (a
        FLOP budget, a schedule's spend, an update count or exposures) and that the trackers of `log`
        are installed (a run read back elsewhere need not have them)."""
        self.__post_init__()
        given = [name for name in RUN_SIZE if getattr(self, name) is not None]
        if self.exposures is not None and len(given) > 1:
            others = " or ".join(f"--{name.replace('_', '-')}" for name in given if name != "exposures")
            raise BiosrecallError(
                "--exposures sets the run's length itself (every biography seen E times); give it "
                f"without {others}"
            )
        if len(given) != 1:
            raise BiosrecallError(
                "give exactly one of --budget FLOPS, --budget-of SPEC:UPDATES, --updates N or --exposures E"
            )
        require_installed(self.log)

    def to_dict(self) -> dict[str, Any]:
        """Every field, but the recipe fields only when set, so earlier runs' records read the same."""
        data = asdict(self)
        for name, default in OMITTED_AT_DEFAULT.items():
            if data[name] == default:
                del data[name]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrainConfig:
        """A checked config from `to_dict()` output; keys it does not know (older runs' `extra`) are left."""
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


# Settings that may change between an interrupted run and its resumption without changing results
# ("extra" was an unused field of older runs' configs).
RESUMABLE_DIFFERENCES = {
    "device",
    "log_every",
    "save_every",
    "compile",
    "activation_checkpointing",
    "path",
    "threads",
    "log",
    "keep_updates",
    "extra",
    "recipe_module",  # where the recipe's file lies may change; its name (in the model config) may not
}


_TOKENS = "the limit on tokens per update"
_RUN = "the planner draws and prices every update"
_INT64 = "counts are signed 64-bit integers"
LIMITS: dict[str, Limit] = {
    "budget": Limit(float, 0, FLOAT_MAX, low_open=True),
    "updates": Limit(int, 1, MAX_UPDATES, why=_RUN),
    "exposures": EXPOSURES,
    "batch_size": Limit(int, 1, MAX_TOKENS_PER_UPDATE, why=_TOKENS),
    "grad_accum": Limit(int, 1, MAX_TOKENS_PER_UPDATE, why=_TOKENS),
    "seq_len": Limit(int, 1, MAX_TOKENS_PER_UPDATE, why=_TOKENS),
    "lr": Limit(float, 0, 1, low_open=True, why="AdamW moves every weight by about lr per update"),
    "min_lr_ratio": Limit(float, 0, 1),
    "warmup": Limit(float, 0, 1, high_open=True),
    "warmup_updates": Limit(int, 0, MAX_UPDATES, why=_RUN),
    "decay": Limit(float, 0, 1, low_open=True),
    "weight_decay": Limit(float, 0, FLOAT_MAX),
    "grad_clip": Limit(float, 0, float(np.finfo(np.float32).max), why="gradient norms are float32"),
    "seed": SEED,
    "threads": Limit(int, 1, MAX_THREADS, why="more than any CPU has cores"),
    # Intervals may exceed the run (10**9: "only at the end"), so only the integer range bounds them.
    "save_every": Limit(int, 1, MAX_SEED, why=_INT64),
    "log_every": Limit(int, 1, MAX_SEED, why=_INT64),
}
"""Every numeric field's bounds."""
ITEM_LIMITS: dict[str, Limit] = {
    "betas": Limit(float, 0, 1, high_open=True),
    "checkpoint_fractions": Limit(float, 0, 1, low_open=True),
    "keep_updates": LIMITS["updates"],
}
"""Bounds of each item of the list fields."""
SETS = ("checkpoint_fractions", "keep_updates")
"""The list fields that name points of a run: kept sorted, each once."""
CHOICES: dict[str, tuple[str, ...]] = {
    "lr_schedule": LR_SCHEDULES,
    "precision": PRECISIONS,
    "parallel": PARALLEL_MODES,
}
KINDS: dict[str, tuple[str, Callable[[Any], bool]]] = {
    **{name: (f"one of {', '.join(choices)}", choices.__contains__) for name, choices in CHOICES.items()},
    "compile": ("true or false", lambda value: isinstance(value, bool)),
    "activation_checkpointing": ("true or false", lambda value: isinstance(value, bool)),
    "recipe_module": (
        "the path of a .py file",
        lambda value: isinstance(value, str) and value.endswith(".py"),
    ),
    **dict.fromkeys(("schedule", "budget_of", "device"), ("text", lambda value: isinstance(value, str))),
}
"""What each field that holds neither a number nor a list must be, in words, and the test of it."""
_UNSET_ALLOWED = {f.name for f in fields(TrainConfig) if f.default is None}
"""The fields whose default is unset (None): a run may leave them so."""
DEFAULT_DECAY = 0.2  # wsd's decay share when `decay` is unset
OMITTED_AT_DEFAULT = {"recipe": "baseline", "recipe_module": None}
"""Fields added after runs were archived: recorded only when they differ from their default."""


def check_field(name: str, value: Any) -> Any:
    """`value` checked (and normalised: numbers to int or float, lists to tuples) as field `name`;
    a `BiosrecallError` names the field, the rule and the value."""
    if value is None and name in _UNSET_ALLOWED:
        return None
    if name in LIMITS:
        return check_number(name, value, LIMITS[name])
    if name in ITEM_LIMITS:
        return _check_items(name, value, ITEM_LIMITS[name])
    if name == "log":
        return parse_trackers(value)
    if name in KINDS:
        words, holds = KINDS[name]
        if not holds(value):
            raise BiosrecallError(f"{name} must be {words}, got {value!r}")
    if name == "recipe" and (problem := check_recipe_name(value)) is not None:
        raise BiosrecallError(f"recipe {value!r}: {problem}")
    if name == "schedule":
        parse_schedule(value)
    elif name == "budget_of":
        split_budget_of(value)
    elif name == "device" and not (value in ("auto", "cpu", "cuda") or re.fullmatch("cuda:[0-9]+", value)):
        # cuda:N in ASCII digits only ([0-9]: \d and str.isdigit also take other scripts' digits)
        raise BiosrecallError(f"unknown device {value!r} (use auto, cpu, cuda or cuda:N)")
    return value


def _check_items(name: str, value: Any, limit: Limit) -> tuple:
    listed = isinstance(value, list | tuple)
    try:
        items = tuple(check_number(name, item, limit) for item in value) if listed else ()
    except BiosrecallError:
        items = ()  # an item out of bounds, or no number: the list breaks the one rule below
    if not items:
        kind = "whole numbers" if limit.kind is int else "numbers"
        shown = list(value) if listed else value
        raise BiosrecallError(
            f"{name} must lie in {limit.interval()} (a non-empty list of {kind}), got {shown!r}"
        )
    if name == "betas" and len(items) != 2:
        raise BiosrecallError(f"betas must be two numbers B1,B2, got {list(value)!r}")
    return tuple(sorted(set(items))) if name in SETS else items


def split_budget_of(text: Any) -> tuple[str, int]:
    """("SPEC", UPDATES) of a budget_of text "SPEC:UPDATES", both checked."""
    spec, _, count = text.rpartition(":") if isinstance(text, str) else ("", "", "")
    if not spec or not (count.isascii() and count.isdigit()):
        raise BiosrecallError(f"--budget-of takes SPEC:UPDATES (e.g. fixed:4:2000), got {text!r}")
    parse_schedule(spec)
    return spec, check_number("budget_of's update count", int(count), LIMITS["updates"])


def resolve_seq_len(config: TrainConfig, model_config, preset: str | None = None) -> int:
    """The one place a run's sequence length is decided: `config.seq_len`, or the model's context when
    unset; longer than the context (or not positive) is refused, and so are more tokens per update than
    `MAX_TOKENS_PER_UPDATE`. `preset` names the model in the message."""
    seq_len = model_config.context_length if config.seq_len is None else int(config.seq_len)
    if seq_len < 1:
        raise BiosrecallError(f"sequence length must be at least 1, got {seq_len}")
    if seq_len > model_config.context_length:
        advice = (
            "" if preset is None else f": --seq-len must not be longer than the context of preset {preset}"
        )
        raise BiosrecallError(
            f"sequence length {seq_len} exceeds the model's context {model_config.context_length}{advice}"
        )
    check_tokens_per_update(config.batch_size * seq_len)
    return seq_len
