"""Data-parallel training with PyTorch's own engine: ``torchrun --nproc-per-node N -m anatomy train ...``.

torchrun sets ``RANK``, ``LOCAL_RANK`` and ``WORLD_SIZE``; ``setup`` joins the process group (gloo on CPU, nccl on
GPU). Every process draws the same *global* batch from the same seeded generator and keeps its own slice of rows,
so N processes see exactly the batches one process sees; ``DistributedDataParallel`` averages the gradients, which
equals the gradient of the global batch's mean loss. Only rank 0 logs, shows progress and writes checkpoints.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn


@dataclass(frozen=True)
class World:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = torch.device("cpu")  # where collectives' tensors live (nccl needs CUDA tensors)

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def active(self) -> bool:
        return self.world_size > 1


def launched_by_torchrun() -> bool:
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


def setup(device: torch.device) -> World:
    """Join the process group when launched by torchrun; a single process otherwise."""
    if not launched_by_torchrun():
        return World()
    world = World(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(os.environ.get("LOCAL_RANK", 0)), device)
    if world.world_size > 1 and not dist.is_initialized():
        backend = "nccl" if device.type == "cuda" else "gloo"
        if device.type == "cuda":
            torch.cuda.set_device(world.local_rank)
        dist.init_process_group(backend=backend)
    return world


def device_for(choice: str) -> torch.device:
    if choice == "cuda" or (choice == "auto" and torch.cuda.is_available()):
        if not torch.cuda.is_available():
            raise ValueError("device=cuda but no CUDA device is available; valid: auto, cpu, cuda")
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
    return torch.device("cpu")


def wrap(model: nn.Module, world: World, device: torch.device) -> nn.Module:
    if not world.active:
        return model
    from torch.nn.parallel import DistributedDataParallel

    return DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)


def shard(batch: dict[str, torch.Tensor], world: World) -> dict[str, torch.Tensor]:
    """This process's rows of a global batch (the global batch size must divide evenly)."""
    if not world.active:
        return batch
    rows = next(iter(batch.values())).shape[0]
    per = rows // world.world_size
    return {k: v[world.rank * per : (world.rank + 1) * per] for k, v in batch.items()}


def mean(value: torch.Tensor, world: World) -> torch.Tensor:
    """The mean of a scalar over processes (every process gets it)."""
    if not world.active:
        return value
    value = value.detach().clone()
    dist.all_reduce(value, op=dist.ReduceOp.SUM)
    return value / world.world_size


def total(value: float, world: World) -> float:
    if not world.active:
        return value
    t = torch.tensor([value], dtype=torch.float64, device=world.device)
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return float(t.item())


def barrier(world: World) -> None:
    if world.active:
        dist.barrier()


def broadcast_flag(flag: bool, world: World) -> bool:
    """Rank 0's decision (early stop), everywhere."""
    if not world.active:
        return flag
    t = torch.tensor([int(flag)], device=world.device)
    dist.broadcast(t, src=0)
    return bool(t.item())


def teardown(world: World) -> None:
    if world.active and dist.is_initialized():
        dist.destroy_process_group()
