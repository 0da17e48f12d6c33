"""Where this process sits among a training's processes, and joining / leaving their group.

The one place that reads the rank. Before the process group is up, torchrun's environment says it
(WORLD_SIZE, RANK, LOCAL_RANK; absent means one process); once a group is up, torch.distributed
says it (a group started by mp.spawn or by hand carries no torchrun variables). Everything else
(the command, the setup's device choice, the Trainer, the loop's rank-0 writer) asks `place()`.
"""
from __future__ import annotations

import dataclasses
import os
import sys


@dataclasses.dataclass(frozen=True)
class Place:
    world_size: int = 1
    rank: int = 0  # 0 alone evaluates, probes and writes the run folder
    local_rank: int = 0  # the GPU index on this machine under torchrun


def place(*, launched: bool = True) -> Place:
    """This process's place: the process group's when one is up, else torchrun's environment
    (`launched=False`: else one process — the Trainer trains alone unless a group is up)."""
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    dist = sys.modules.get("torch.distributed")  # not imported: no group can be up
    if dist is not None and dist.is_available() and dist.is_initialized():
        return Place(dist.get_world_size(), dist.get_rank(), local_rank)
    if not launched:
        return Place()
    return Place(int(os.environ.get("WORLD_SIZE", "1")), int(os.environ.get("RANK", "0")), local_rank)


BARRIER_S = 120  # how long a finished process waits for the others before leaving the group


def init_distributed(world_size: int, device: str) -> None:
    """Join torchrun's process group (nccl for CUDA, gloo on CPU); nothing for one process."""
    if world_size <= 1:
        return
    import torch
    import torch.distributed as dist

    if dist.is_initialized():
        return
    if device.startswith("cuda"):
        torch.cuda.set_device(torch.device(device))
    dist.init_process_group(backend="nccl" if device.startswith("cuda") else "gloo")


def finish_distributed() -> None:
    """Leave the process group. On a normal end every process first waits for the others (a bounded
    barrier): a gloo process whose peer tore the group down while it was still inside a collective
    aborted ("terminate called without an active exception", seen once in the suite under load). While
    an error is propagating, no wait: the other processes may never arrive."""
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return
    if sys.exc_info()[0] is None:
        import datetime

        try:
            if dist.get_backend() == "gloo":
                dist.monitored_barrier(timeout=datetime.timedelta(seconds=BARRIER_S))
            else:
                dist.barrier()
        except RuntimeError:  # a peer died or timed out: leave anyway
            pass
    dist.destroy_process_group()
