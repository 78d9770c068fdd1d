"""torchrun support: process-group set-up, DDP or FSDP2 wrapping, and small collective helpers.

Run any training command under torchrun and it becomes data-parallel:

    torchrun --nproc_per_node 2 -m biosrecall train --data ... --out ...

Every rank computes the same depth for each update (depths come from (seed, update), never from
per-rank state), takes its slice of the same global batch, and only rank 0 writes files (except the
sharded `torch.distributed.checkpoint` of an FSDP run, see `biosrecall.train.sharded`).

FSDP2 layout of a `LoopedTransformer`: one unit per prelude, recurrent-block and coda layer, and the
root unit for the rest (embedding, which is also the tied head, adapter, norms). The block's layers
run K times per forward, so they keep their gathered weights after each call
(`reshard_after_forward=False`) instead of re-gathering them K times.
"""

from __future__ import annotations

import os
import time
import warnings
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from biosrecall.errors import BiosrecallError, excerpt


@dataclass(frozen=True)
class DistInfo:
    """This process's place in a torchrun launch (a single process: rank 0 of 1); its device, on its
    own GPU under torchrun, is `init_distributed`'s other result."""

    rank: int = 0
    world_size: int = 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1


def is_main_process() -> bool:
    """Whether this process is rank 0 of its torchrun launch (or not under torchrun), the one that
    reports and writes; usable before the process group is joined."""
    return int(os.environ.get("RANK", "0")) == 0


def resolve_device(name: str) -> torch.device:
    """ "auto" picks CUDA when present; asking for CUDA without it is a user error."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise BiosrecallError("--device cuda was asked for but no CUDA device is available")
    try:
        return torch.device(name)
    except RuntimeError:  # torch's message lists every device type it knows and repeats the name
        raise BiosrecallError(f"unknown device {excerpt(name)} (use auto, cpu, cuda or cuda:N)") from None


def autocast_for(device: torch.device, precision: str):
    """bf16 autocast when asked (on CUDA or CPU), or by default on CUDA; plain fp32 otherwise. Autocast
    casts per operation, so weights, gradients and AdamW's state stay fp32 (fp32 master weights)."""
    if precision == "bf16" or (precision == "auto" and device.type == "cuda"):
        return lambda: torch.autocast(device.type, dtype=torch.bfloat16)
    return nullcontext


def init_distributed(device: torch.device) -> tuple[DistInfo, torch.device]:
    """Join the torchrun process group when WORLD_SIZE > 1 (gloo on CPU, NCCL on GPU)."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size <= 1:
        return DistInfo(), device
    rank, local_rank = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
    if device.type == "cuda":
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
    return DistInfo(rank=rank, world_size=world_size), device


def check_divisible(global_batch: int, info: DistInfo, grad_accum: int = 1) -> None:
    """Every rank gets the same number of rows, split into `grad_accum` equal micro-batches: the batch
    divides into world size x grad_accum equal parts."""
    if global_batch % (info.world_size * grad_accum):
        raise BiosrecallError(
            f"batch size {global_batch} is not divisible by the world size {info.world_size} times "
            f"--grad-accum {grad_accum} (each process takes an equal share, in equal micro-batches)"
        )


def check_parallel(mode: str, info: DistInfo) -> None:
    """Refuse FSDP on one process before anything is written (there is nothing to shard over)."""
    if mode == "fsdp" and not info.enabled:
        raise BiosrecallError("--parallel fsdp needs several processes (run under torchrun)")


def local_rows(global_batch, info: DistInfo):
    """This rank's contiguous slice of a global batch (array or tensor)."""
    per_rank = len(global_batch) // info.world_size
    return global_batch[info.rank * per_rank : (info.rank + 1) * per_rank]


def wrap_model(model: torch.nn.Module, info: DistInfo, mode: str, device: torch.device):
    """DDP (replicated) or FSDP2 (one shard unit per layer, the recurrent block kept gathered); one
    process trains the model itself (`check_parallel` refused FSDP there)."""
    if not info.enabled:
        return model
    if mode == "ddp":
        ids = [device.index] if device.type == "cuda" else None
        return DistributedDataParallel(model, device_ids=ids)
    return _fully_shard(model)


def _fully_shard(model: torch.nn.Module) -> torch.nn.Module:
    """Shard per layer; whatever no layer owns (embedding = tied head, adapter, norms) joins the root,
    so a shared parameter belongs to exactly one unit."""
    from torch.distributed.fsdp import fully_shard

    for layer in model.prelude:
        fully_shard(layer)
    for layer in model.block:
        # Called K times per forward: stay gathered between those calls. (In backward each call
        # still reduce-scatters its share of the gradient, which FSDP accumulates into the shard.)
        fully_shard(layer, reshard_after_forward=False)
    for layer in model.coda:
        fully_shard(layer)
    # The root is kept gathered after forward by FSDP itself: the head needs it again at the end.
    fully_shard(model)
    return model


def gradient_sync(model: torch.nn.Module, info: DistInfo, mode: str, sync: bool):
    """Context for one micro-batch's backward: skip the gradient all-reduce / reduce-scatter on all
    but the last micro-batch of an update (gradients accumulate locally, then sync once)."""
    if not info.enabled or sync:
        return nullcontext()
    if mode == "ddp":
        return model.no_sync()
    return _fsdp_no_sync(model)


@contextmanager
def _fsdp_no_sync(model: torch.nn.Module):
    inner = getattr(model, "_orig_mod", model)  # torch.compile wraps the FSDP module
    inner.set_requires_gradient_sync(False)
    try:
        yield
    finally:
        inner.set_requires_gradient_sync(True)


def any_rank(flag: bool, info: DistInfo) -> bool:
    """True on every rank when it is true on any: ranks must agree to stop at the same update, or one
    would enter a checkpoint's collectives while another starts the next forward."""
    if not info.enabled:
        return flag
    value = torch.tensor([1.0 if flag else 0.0])
    if dist.get_backend() == "nccl":
        value = value.cuda()
    dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return bool(value.item())


def all_reduce_sum(value: torch.Tensor, info: DistInfo) -> torch.Tensor:
    if info.enabled:
        dist.all_reduce(value, op=dist.ReduceOp.SUM)
    return value


def barrier(info: DistInfo) -> None:
    if info.enabled:
        dist.barrier()


def finish(info: DistInfo) -> None:
    """Tear the process group down together after a successful run.

    Seen once in CI: a two-rank CPU (gloo) run wrote every checkpoint, one rank exited, and the other
    never did; where it waited was not captured (the launch tests now print every rank's stack on a
    hang). A rank that tears down its gloo connections while a peer still waits on them (in a last
    collective or in `destroy_process_group`) can block that peer for good. So the ranks meet on the
    rendezvous store, which outlives every rank under torchrun, rather than in a gloo barrier: once
    all have finished their last collective, each destroys its group, and none exits before all have."""
    if not (info.enabled and dist.is_initialized()):
        return
    # The group's own store; torch.distributed has no public accessor for it.
    store = dist.distributed_c10d._get_default_store()
    _store_barrier(store, "biosrecall/finish/trained", info.world_size)
    dist.destroy_process_group()
    _store_barrier(store, "biosrecall/finish/destroyed", info.world_size)


def _store_barrier(store, key: str, world_size: int, timeout_s: float = 300.0) -> None:
    """Wait until `world_size` ranks have arrived at `key`; a peer that never comes is reported, not
    waited for forever (every file was written before this point)."""
    store.add(key, 1)
    deadline = time.monotonic() + timeout_s
    while store.add(key, 0) < world_size:
        if time.monotonic() > deadline:
            warnings.warn(
                f"not every rank reached {key} within {timeout_s:.0f}s; exiting anyway", stacklevel=2
            )
            return
        time.sleep(0.01)


def shutdown(info: DistInfo) -> None:
    """Destroy the process group if `finish` did not (a failed run: peers may be gone already)."""
    if info.enabled and dist.is_initialized():
        dist.destroy_process_group()
