"""Several training processes started by torchrun: DDP on CPU (gloo) or GPUs (NCCL).

Every process runs the same loop. Rollouts are split by group between processes and gathered
back, so every process sees the whole batch (advantages and aggregation weights are computed
on it), then each trains on its share; DDP averages the gradients, which the loss undoes by
a factor of ``world_size`` so the update equals the single-process one.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, TypeVar

import torch
import torch.distributed as dist

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class World:
    """This process's place among the training processes."""

    rank: int = 0
    size: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.size > 1

    def shard(self, items: list[T]) -> list[T]:
        """This process's share of ``items`` (every ``size``-th, from ``rank``)."""
        return items[self.rank :: self.size]

    def gather(self, items: list[T]) -> list[T]:
        """Every process's ``items`` concatenated in rank order (the inverse of :meth:`shard`
        when each process passes its shard: order restored by interleaving)."""
        if not self.distributed:
            return items
        parts: list[list[T] | None] = [None] * self.size
        dist.all_gather_object(parts, items)
        out: list[T] = []
        longest = max(len(p or []) for p in parts)
        for i in range(longest):
            for part in parts:
                if part is not None and i < len(part):
                    out.append(part[i])
        return out

    def sum(self, tensor: torch.Tensor) -> torch.Tensor:
        """The sum of ``tensor`` over processes (in place, returned)."""
        if self.distributed:
            dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
        return tensor

    def barrier(self) -> None:
        if self.distributed:
            dist.barrier()


def init_world(device: str) -> World:
    """Join the process group torchrun describes (``WORLD_SIZE`` > 1), or a world of one."""
    size = int(os.environ.get("WORLD_SIZE", "1"))
    if size <= 1:
        return World()
    rank = int(os.environ["RANK"])
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if not dist.is_initialized():
        backend = "nccl" if device.startswith("cuda") else "gloo"
        if backend == "nccl":
            torch.cuda.set_device(local_rank)
        dist.init_process_group(backend=backend)
    return World(rank=rank, size=size, local_rank=local_rank)


def close_world(world: World) -> None:
    if world.distributed and dist.is_initialized():
        dist.destroy_process_group()


def wrap_ddp(module: torch.nn.Module, world: World, device: str) -> Any:
    """``module`` in DistributedDataParallel when there are several processes."""
    if not world.distributed:
        return module
    from torch.nn.parallel import DistributedDataParallel

    ids = [world.local_rank] if device.startswith("cuda") else None
    return DistributedDataParallel(module, device_ids=ids)
