"""Several training processes started by torchrun: DDP or FSDP2 on CPU (gloo) or GPUs (NCCL).

Every process runs the same loop. Rollouts are split by group between processes and gathered
back, so every process sees the whole batch (advantages and aggregation weights are computed
on it), then each trains on its share; DDP and FSDP both average the gradients, which the loss
undoes by a factor of ``world_size`` so the update equals the single-process one.

With ``run.parallel: fsdp`` the policy is sharded (:func:`wrap_model`): every forward and
backward gathers parameters with the other processes, so all of them must run the same number
of them, and whole weights or optimiser states only exist when gathered
(:func:`full_model_state`, :func:`full_optimizer_state`, :func:`copy_full_weights`) or
scattered back (:func:`load_full_model_state`, :func:`load_full_optimizer_state`). Those are
collectives too: every process calls them, in the same order. The full states have exactly
the layout of an unsharded model's and optimiser's ``state_dict()``, so checkpoints move
freely between one process, DDP and FSDP.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

import torch
import torch.distributed as dist

T = TypeVar("T")
Parallel = Literal["ddp", "fsdp"]


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

    def max(self, value: int) -> int:
        """The largest ``value`` over processes."""
        return max(self.gather([value]))

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


def wrap_model(module: Any, world: World, device: str, mode: Parallel = "ddp") -> Any:
    """The :class:`~roll.prefix.ScoredForward` ``module`` ready for several processes.

    ``ddp``: wrapped in DistributedDataParallel. ``fsdp``: sharded in place with FSDP2, each
    decoder layer of ``module.lm`` on its own (so only one layer is whole at a time) and then
    the root, which holds the rest (embeddings, final norm, output head) and whose forward is
    the entry point; the same module is returned. Create the optimiser after this, over the
    now sharded parameters.

    Mixed precision stays ``torch.autocast`` (as with DDP), not FSDP's ``MixedPrecisionPolicy``:
    the computation is then the one the other modes do (float32 master weights, bf16 matmuls,
    float32 gradients), at the cost of gathering parameters in float32; a bf16
    ``param_dtype`` would halve that traffic but change the numbers, and could not be
    checked on a GPU when this was written.
    """
    if not world.distributed:
        return module
    if mode == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        ids = [world.local_rank] if device.startswith("cuda") else None
        return DistributedDataParallel(module, device_ids=ids)
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh("cuda" if device.startswith("cuda") else "cpu", (world.size,))
    for block in decoder_blocks(module.lm):
        fully_shard(block, mesh=mesh)
    fully_shard(module, mesh=mesh)
    return module


def decoder_blocks(lm: torch.nn.Module) -> list[torch.nn.Module]:
    """The repeated blocks of a transformer, each sharded on its own: the decoder's ``layers``,
    or else the items of the outermost ``nn.ModuleList``s."""
    get_decoder = getattr(lm, "get_decoder", None)
    body = get_decoder() if callable(get_decoder) else None
    layers = getattr(body, "layers", None)
    if isinstance(layers, torch.nn.ModuleList):
        return list(layers)
    blocks: list[torch.nn.Module] = []
    taken: list[str] = []
    for name, child in lm.named_modules():
        if isinstance(child, torch.nn.ModuleList) and not any(
            name.startswith(f"{outer}.") for outer in taken
        ):
            taken.append(name)
            blocks.extend(child)
    return blocks


def _aliases(module: torch.nn.Module) -> dict[str, str]:
    """Each tied parameter's other names, mapped to the name ``state_dict`` lists it first by."""
    first: dict[int, str] = {}
    aliases: dict[str, str] = {}
    for name, param in module.named_parameters(remove_duplicate=False):
        if id(param) in first:
            aliases[name] = first[id(param)]
        else:
            first[id(param)] = name
    return aliases


def full_model_state(lm: torch.nn.Module, world: World) -> dict[str, torch.Tensor]:
    """The sharded ``lm``'s whole state dict on the CPU of the main process (empty elsewhere),
    tied weights sharing one tensor as in ``lm.state_dict()``. A collective."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    state: dict[str, torch.Tensor] = dict(get_model_state_dict(lm, options=options))  # type: ignore[arg-type]
    if world.is_main:
        for alias, name in _aliases(lm).items():
            if name in state:
                state[alias] = state[name]
    return state


def load_full_model_state(lm: torch.nn.Module, state: dict[str, torch.Tensor]) -> None:
    """Scatter a whole state dict (every process passes the same) into the sharded ``lm``.
    Keys left out (a tied weight's twin) keep their values. A collective."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

    options = StateDictOptions(full_state_dict=True, strict=False)
    set_model_state_dict(lm, dict(state), options=options)  # it rewrites the dict it gets


def full_optimizer_state(optimizer: torch.optim.Optimizer, world: World) -> dict[str, Any] | None:
    """The optimiser's ``state_dict()`` with every sharded tensor gathered whole, on the CPU of
    the main process (None elsewhere): the layout an unsharded optimiser saves. A collective."""
    from torch.distributed.tensor import DTensor

    state = optimizer.state_dict()
    keep = world.is_main
    gathered: dict[Any, dict[str, Any]] = {}
    for index, values in state["state"].items():
        entry: dict[str, Any] = {}
        for name, value in values.items():
            if isinstance(value, DTensor):
                value = value.full_tensor()
            if keep:
                entry[name] = value.cpu() if isinstance(value, torch.Tensor) else value
        gathered[index] = entry
    return {"state": gathered, "param_groups": state["param_groups"]} if keep else None


def load_full_optimizer_state(optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> None:
    """Load a whole optimiser state (every process passes the same, as an unsharded optimiser
    saves it) into the optimiser of a sharded model: each process keeps its own slices."""
    from torch.distributed.tensor import DTensor, distribute_tensor

    params = [p for group in optimizer.param_groups for p in group["params"]]
    placed: dict[Any, dict[str, Any]] = {}
    for index, values in state["state"].items():
        if not 0 <= int(index) < len(params):
            raise ValueError(f"it holds state for parameter {index} of {len(params)}")
        param = params[int(index)]
        entry: dict[str, Any] = {}
        for name, value in values.items():
            if isinstance(param, DTensor) and isinstance(value, torch.Tensor) and value.dim():
                if value.shape != param.shape:
                    raise ValueError(
                        f"parameter {index}'s {name} has shape {tuple(value.shape)}, "
                        f"not {tuple(param.shape)}"
                    )
                # every process holds the whole tensor: each keeps its slice, no communication
                value = distribute_tensor(
                    value.to(param.device), param.device_mesh, param.placements, src_data_rank=None
                )
            entry[name] = value
        placed[index] = entry
    optimizer.load_state_dict({**state, "state": placed})


@torch.no_grad()
def copy_full_weights(source: torch.nn.Module, target: torch.nn.Module) -> None:
    """Copy the sharded ``source``'s weights into ``target``, an unsharded module of the same
    architecture, one tensor gathered at a time. A collective."""
    from torch.distributed.tensor import DTensor

    own = target.state_dict()
    source_aliases, target_aliases = _aliases(source), _aliases(target)
    for key, value in source.state_dict().items():
        if key in source_aliases and target_aliases.get(key) == source_aliases[key]:
            continue  # tied in both: copied through its first name
        own[key].copy_(value.full_tensor() if isinstance(value, DTensor) else value)
