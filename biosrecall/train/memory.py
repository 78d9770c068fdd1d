"""Training memory before the first update, and a torch out-of-memory mid-run as one line.

    need = training_memory(model_config, config, seq_len, deepest=1024)   # Cost: bytes beyond the model
    check_training_fits(model_config, config, plan, seq_len, device)      # refuse before any update
    with memory_checked(trainer): ...                                      # the trainer's loop

Why: a deep schedule with a large batch (`--schedule fixed:1024 --batch-size 256`) otherwise runs
for seconds and dies with torch's "can't allocate memory" traceback. The data commands size their
work first (`biosrecall.sizing`); training does the same here, once the plan says how deep its
deepest update goes, and refuses in one line naming what to lower.

The estimate: what one update holds beyond the model's weights, which are allocated already:

- **state**: the gradients (4 bytes a parameter) and AdamW's two moments (8 bytes a parameter);
- **activations**: what autograd keeps for the backward pass of one micro-batch (`batch_size /
  grad_accum` sequences of `seq_len` tokens): per token and per layer applied with gradients,
  `ACTIVATION_FLOATS_PER_D` x d_model + `ACTIVATION_FLOATS_PER_MLP` x d_mlp floats (the tensors a
  pre-norm attention + SwiGLU layer saves: inputs and outputs of both norms, q, k, v, the attention
  output; the MLP's up, gate, activation and product), times `ALLOCATOR_FACTOR`, measured. The layers
  applied with gradients are the prelude, the coda and `n_block` per iteration, with the iterations
  capped at `backprop_depth` when set; `activation_checkpointing` keeps only each iteration's state
  and recomputes one iteration at a time. Under bf16 autocast a kept float takes
  `BF16_ACTIVATION_BYTES` on average.

Measured against real peak resident memory (`ru_maxrss` of a 2-update `biosrecall train --threads 1`
less that of the same run at depth 1 and batch 1, fp32; 2-core x86, torch 2.13 CPU):

    preset     depth  batch  option                      measured   estimate
    bios-tiny      4      8                                  47 MB     +4%
    bios-tiny     64     64                               1,627 MB     +2%
    bios-tiny    256     64                               6,258 MB     +2%
    bios-tiny     16    256                               1,907 MB     -7%
    bios-tiny   1024      8                               3,094 MB     +3%
    bios-cpu      16     32                               2,153 MB     -1%
    bios-cpu      64     32                               7,631 MB     +2%
    bios-cpu     128     16                               7,406 MB     +3%
    bios-cpu      32     16                               1,983 MB     +2%
    bios-cpu       8    128                               5,039 MB     -8%
    bios-cpu      32     64  --grad-accum 4               2,553 MB    -21%
    bios-cpu      64     64  --activation-checkpointing   2,704 MB     -8%
    bios-cpu      32     16  --precision bf16             1,356 MB     -2%
    bios-tiny    128     32  --precision bf16             1,172 MB     -9%

So within -9% .. +4% of the peak, except with gradient accumulation, which holds about a quarter more
than one micro-batch (-21%): an estimate low by that much is still caught mid-run as one line. On a
GPU the limit is the device's free memory (not measured here). A recipe that keeps more per depth
(a loss at every depth) is estimated as the baseline loop.
"""

from __future__ import annotations

import re
from contextlib import contextmanager
from typing import TYPE_CHECKING

from biosrecall import sizing
from biosrecall.compute.flops import param_counts
from biosrecall.errors import BiosrecallError
from biosrecall.sizing import Cost, show_bytes

if TYPE_CHECKING:
    from biosrecall.model.config import ModelConfig
    from biosrecall.train.config import TrainConfig

FLOAT_BYTES = 4
BF16_ACTIVATION_BYTES = 2.6
"""Bytes a kept float takes on average under bf16 autocast: matmul outputs are bf16, norms and the
residual stream fp32."""
STATE_BYTES_PER_PARAMETER = 12
"""Gradients (4) and AdamW's first and second moments (4 + 4), fp32; the weights are already held."""
ACTIVATION_FLOATS_PER_D = 10
"""Floats per token and layer application that scale with d_model (see the module docstring)."""
ACTIVATION_FLOATS_PER_MLP = 4
"""Floats per token and layer application that scale with d_mlp."""
ADAPTER_FLOATS_PER_D = 3
"""Floats per token and iteration of the concat adapter ([state, e] in, the new state out)."""
CHECKPOINTED_FLOATS_PER_D = 3
"""Floats per token and iteration kept under activation checkpointing (the iteration's input state
and what torch's checkpoint keeps with it; measured: 3.1 d at bios-cpu)."""
ALLOCATOR_FACTOR = 1.12
"""Measured peak over the tensors counted (temporaries of the backward pass, allocator slack)."""
TRAINING_FIXED = 30e6
"""What any update takes beyond its tensors (thread pools, allocator arenas): measured 26 MB."""

# What torch and the C allocator say when an allocation fails, whatever the device.
_OUT_OF_MEMORY = re.compile(r"out of memory|can't allocate memory|not enough memory", re.IGNORECASE)


def micro_batch(config: TrainConfig) -> int:
    """Sequences in one forward/backward: the batch split by gradient accumulation."""
    return config.batch_size // config.grad_accum  # a TrainConfig's grad_accum divides its batch


def training_memory(
    model_config: ModelConfig, config: TrainConfig, seq_len: int, deepest: int, bf16: bool = False
) -> Cost:
    """Memory one update at depth `deepest` takes beyond the model's weights (`Cost.memory`); `bf16`:
    under bf16 autocast, whose matmul outputs (most of what is kept) take 2 bytes."""
    cfg = model_config
    tokens = micro_batch(config) * seq_len
    per_layer = ACTIVATION_FLOATS_PER_D * cfg.d_model + ACTIVATION_FLOATS_PER_MLP * cfg.d_mlp
    per_iteration = cfg.n_block * per_layer + ADAPTER_FLOATS_PER_D * cfg.d_model
    with_gradients = deepest if cfg.backprop_depth is None else min(deepest, cfg.backprop_depth)
    if config.activation_checkpointing:  # each iteration's state kept, one iteration recomputed at a time
        loop = with_gradients * CHECKPOINTED_FLOATS_PER_D * cfg.d_model + per_iteration
    else:
        loop = with_gradients * per_iteration
    floats = tokens * ((cfg.n_prelude + cfg.n_coda) * per_layer + loop)
    state = STATE_BYTES_PER_PARAMETER * param_counts(cfg)["total"]
    per_float = BF16_ACTIVATION_BYTES if bf16 else FLOAT_BYTES
    return Cost(memory=TRAINING_FIXED + state + ALLOCATOR_FACTOR * per_float * floats)


def check_training_fits(model_config: ModelConfig, config: TrainConfig, plan, seq_len: int, device) -> None:
    """Refuse, before the first update, a run whose deepest update needs more memory than `device`
    has: one line naming the estimate, the limit and the options to lower."""
    deepest = int(plan.depths.max())  # a plan holds at least one update
    kind = getattr(device, "type", str(device))
    bf16 = config.precision == "bf16" or (config.precision == "auto" and kind == "cuda")  # autocast_for
    need = training_memory(model_config, config, seq_len, deepest, bf16).memory
    if kind == "cuda":
        import torch

        limit, _ = torch.cuda.mem_get_info(device)
        source = f"free on {torch.cuda.get_device_name(device)}"
    else:
        limit, source = sizing.available_memory()
    if need > limit:
        raise BiosrecallError(
            f"training at depth {deepest:,} with {micro_batch(config):,} sequences of {seq_len:,} tokens "
            f"per pass needs about {show_bytes(need)} of memory, more than the {show_bytes(limit)} "
            f"available ({source}); {ADVICE}"
        )


ADVICE = (
    "lower the depth (--schedule) or --batch-size, raise --grad-accum, or pass --activation-checkpointing"
)


def is_out_of_memory(exc: BaseException) -> bool:
    """torch's (or the allocator's) failure to allocate, on any device."""
    if isinstance(exc, MemoryError):
        return True
    return isinstance(exc, RuntimeError) and bool(_OUT_OF_MEMORY.search(str(exc).split("\n", 1)[0]))


@contextmanager
def memory_checked(trainer):
    """The trainer's loop: refused on entry when its deepest update cannot fit (`check_training_fits`),
    and an allocation that still fails mid-run becomes one line naming the sizes and what is kept."""
    config, plan = trainer.config, trainer.plan
    check_training_fits(trainer.raw_model.config, config, plan, trainer.seq_len, trainer.device)
    try:
        yield
    except Exception as exc:
        if not is_out_of_memory(exc):
            raise
        progress = trainer.progress
        update = progress.update
        depth = int(plan.depths[min(update, len(plan.depths) - 1)])
        saved = trainer.saved_update
        kept = (
            f"the run keeps its last saved state (update {saved:,}): lower the sizes and train it "
            "again, or resume it where more memory is free"
            if saved is not None
            else "no state had been saved yet, so nothing was kept"
        )
        raise BiosrecallError(
            f"out of memory at update {update:,} (depth {depth:,}, {micro_batch(config):,} sequences of "
            f"{trainer.seq_len:,} tokens per pass); {kept}; {ADVICE}"
        ) from None
