"""TrainConfig: every knob of a training run, with a docstring under each field.

The CLI fills one from its options; `config.json` in the run folder stores it (with the resolved model
config and the plan) so a run can be repeated exactly or resumed only with the same settings.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

from biosrecall.errors import BiosrecallError

DEFAULT_FRACTIONS = (0.25, 0.45, 0.67, 0.8, 1.0)


@dataclass
class TrainConfig:
    schedule: str = "fixed_first:k0=4,switch=0.8,finish=uniform"
    """Depth schedule spec, parsed by `biosrecall.compute.schedules.parse_schedule`."""

    budget: float | None = None
    """Modeled training FLOPs to spend; the run takes as many updates as fit (see the planner)."""

    budget_of: str | None = None
    """Alternative to `budget`: "SPEC:UPDATES", the FLOPs that schedule spends in that many updates."""

    updates: int | None = None
    """Alternative to `budget` / `budget_of`: exactly this many updates of `schedule`, the budget being
    what they spend (runs matched in tokens rather than FLOPs, like the paper's LM runs; a budget can
    give a fixed-first run a few updates more or less, because its cost dips as its switch moves)."""

    batch_size: int = 32
    """Sequences per update (the global batch: split across ranks under torchrun)."""

    grad_accum: int = 1
    """Micro-batches per update on each rank: its share of the global batch runs as this many
    forward/backward passes whose gradients add up (same update, less activation memory)."""

    seq_len: int | None = None
    """Tokens per sequence; None uses the model preset's context length."""

    lr: float = 2e-3
    """Peak learning rate of AdamW."""

    min_lr_ratio: float = 0.1
    """The learning rate decays to lr * min_lr_ratio by the last update."""

    warmup: float = 0.05
    """Linear warm-up length as a fraction of the planned updates."""

    lr_schedule: str = "cosine"
    """"cosine" (warm-up then cosine decay) or "wsd" (warm-up, stable, linear decay over the last 20%)."""

    weight_decay: float = 0.1
    """AdamW decoupled weight decay on matrices (norms, biases and embeddings are not decayed)."""

    betas: tuple[float, float] = (0.9, 0.95)
    """AdamW betas."""

    grad_clip: float = 1.0
    """Clip the global gradient norm to this value (0 disables)."""

    seed: int = 0
    """Seeds the initial weights, every batch and every depth draw."""

    device: str = "auto"
    """"auto" (CUDA when present), "cpu" or "cuda"."""

    precision: str = "auto"
    """"fp32", "bf16" (autocast; CUDA only) or "auto" (bf16 on CUDA, fp32 on CPU)."""

    threads: int | None = None
    """CPU threads for torch (None: torch's default, one per core). 1 is best on a busy machine."""

    compile: bool = False
    """Wrap the model in torch.compile (useful on GPU; slow to start on CPU)."""

    checkpoint_fractions: tuple[float, ...] = DEFAULT_FRACTIONS
    """Budget fractions at which a weights checkpoint is kept (1.0 is always the final update)."""

    save_every: int = 200
    """Updates between refreshes of the resumable `latest` checkpoint."""

    log_every: int = 50
    """Updates between log lines when not on a terminal (metrics.jsonl records every update)."""

    parallel: str = "ddp"
    """Under torchrun: "ddp" (replicated weights) or "fsdp" (FSDP2, sharded per layer)."""

    extra: dict[str, Any] = field(default_factory=dict)
    """Task-specific settings recorded with the run (e.g. the dataset path and hash)."""

    def validate(self) -> None:
        if sum(value is not None for value in (self.budget, self.budget_of, self.updates)) != 1:
            raise BiosrecallError(
                "give exactly one of --budget FLOPS, --budget-of SPEC:UPDATES or --updates N"
            )
        if self.updates is not None and self.updates < 1:
            raise BiosrecallError(f"updates must be at least 1, got {self.updates}")
        if self.budget is not None and not self.budget > 0:
            raise BiosrecallError(f"budget must be positive, got {self.budget}")
        if self.batch_size < 1:
            raise BiosrecallError(f"batch size must be at least 1, got {self.batch_size}")
        if self.grad_accum < 1 or self.batch_size % self.grad_accum:
            raise BiosrecallError(
                f"grad accumulation {self.grad_accum} must be at least 1 and divide the batch size "
                f"{self.batch_size}"
            )
        if not self.lr > 0 or not 0 <= self.min_lr_ratio <= 1:
            raise BiosrecallError("learning rate must be positive and min-lr-ratio within [0, 1]")
        if not 0 <= self.warmup < 1:
            raise BiosrecallError(f"warmup is a fraction of updates within [0, 1), got {self.warmup}")
        if self.lr_schedule not in ("cosine", "wsd"):
            raise BiosrecallError(f"unknown lr schedule {self.lr_schedule!r} (use cosine or wsd)")
        if self.device not in ("auto", "cpu", "cuda") and not self.device.startswith("cuda:"):
            raise BiosrecallError(f"unknown device {self.device!r} (use auto, cpu or cuda)")
        if self.precision not in ("auto", "fp32", "bf16"):
            raise BiosrecallError(f"unknown precision {self.precision!r} (use auto, fp32 or bf16)")
        if self.parallel not in ("ddp", "fsdp"):
            raise BiosrecallError(f"unknown parallel mode {self.parallel!r} (use ddp or fsdp)")
        bad = [f for f in self.checkpoint_fractions if not 0 < f <= 1]
        if bad:
            raise BiosrecallError(f"checkpoint fractions must lie in (0, 1], got {bad}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrainConfig:
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        for key in ("betas", "checkpoint_fractions"):
            if key in values:
                values[key] = tuple(values[key])
        return cls(**values)


# Settings that may change between an interrupted run and its resumption without changing results.
RESUMABLE_DIFFERENCES = {"device", "log_every", "save_every", "compile", "path", "threads"}
