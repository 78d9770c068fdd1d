"""torchrun support: process-group set-up, DDP or FSDP2 wrapping, and small collective helpers.

Run any training command under torchrun and it becomes data-parallel:

    torchrun --nproc_per_node 2 -m biosrecall train --data ... --out ...

Every rank computes the same depth for each update (depths come from (seed, update), never from
per-rank state), takes its slice of the same global batch, and only rank 0 writes files.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

from biosrecall.errors import BiosrecallError


@dataclass(frozen=True)
class DistInfo:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1


def resolve_device(name: str) -> torch.device:
    """ "auto" picks CUDA when present; asking for CUDA without it is a user error."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise BiosrecallError("--device cuda was asked for but no CUDA device is available")
    return torch.device(name)


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
    return DistInfo(rank=rank, world_size=world_size, local_rank=local_rank), device


def check_divisible(global_batch: int, info: DistInfo) -> None:
    if global_batch % info.world_size:
        raise BiosrecallError(
            f"batch size {global_batch} is not divisible by the world size {info.world_size}"
        )


def local_rows(global_batch, info: DistInfo):
    """This rank's contiguous slice of a global batch (array or tensor)."""
    per_rank = len(global_batch) // info.world_size
    return global_batch[info.rank * per_rank : (info.rank + 1) * per_rank]


def wrap_model(model: torch.nn.Module, info: DistInfo, mode: str, device: torch.device):
    """DDP (replicated) or FSDP2 (one shard unit per layer, the recurrent block kept gathered)."""
    if not info.enabled:
        if mode == "fsdp":
            raise BiosrecallError("--parallel fsdp needs several processes (run under torchrun)")
        return model
    if mode == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        ids = [device.index] if device.type == "cuda" else None
        return DistributedDataParallel(model, device_ids=ids)
    return _fully_shard(model)


def _fully_shard(model: torch.nn.Module) -> torch.nn.Module:
    from torch.distributed.fsdp import fully_shard

    for unit in model.fsdp_units():
        # The recurrent block runs K times per step: keep its weights gathered between those calls
        # instead of re-gathering them on every iteration.
        fully_shard(unit, reshard_after_forward=unit is not model.recurrent_unit())
    fully_shard(model)
    return model


def all_reduce_sum(value: torch.Tensor, info: DistInfo) -> torch.Tensor:
    if info.enabled:
        dist.all_reduce(value, op=dist.ReduceOp.SUM)
    return value


def barrier(info: DistInfo) -> None:
    if info.enabled:
        dist.barrier()


def shutdown(info: DistInfo) -> None:
    if info.enabled and dist.is_initialized():
        dist.destroy_process_group()
