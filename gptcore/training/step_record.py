"""A training step as the run's trace records it (`StepRecord`), and the step between being
launched and being read (`LaunchedStep`): its figures still on the device, its CUDA events.

Why events: on CUDA the host queues a step and goes on, so the host's clock says how long the
queueing took, not the step; a pair of events recorded around the step's work is timed by the
GPU itself, and read once the figures are (trainer.Trainer.collect).
"""
from __future__ import annotations

import dataclasses

import torch


@dataclasses.dataclass(frozen=True)
class StepRecord:
    """One optimizer step as the run's trace records it (trace.py's "train" record): its index, the
    mean loss of its micro-batches, its lr, the gradient norms before clipping (global and per
    part), how long it took (on CUDA the GPU's time from its first to its last kernel, timed with
    events; elsewhere the host's) and the Unix time it ended."""

    step: int
    loss: float
    lr: float
    grad_norm: float
    grad_norms: dict
    seconds: float
    finished: float


@dataclasses.dataclass
class LaunchedStep:
    """A step whose figures are still on the device: (loss, global norm, per-part norms...)."""

    step: int
    lr: float
    figures: torch.Tensor  # (2 + parts,)
    host_seconds: float
    host_finished: float
    events: tuple | None  # CUDA (start, end) events


def step_times(launched: list, read_at: float) -> tuple[list[float], list[float]]:
    """(seconds, Unix end time) of each launched step: on CUDA from its events (all complete once
    the figures were read; the last ended at about `read_at`), elsewhere as the host measured them."""
    if launched[0].events is None:
        return [s.host_seconds for s in launched], [s.host_finished for s in launched]
    last_end = launched[-1].events[1]
    last_end.synchronize()
    seconds = [start.elapsed_time(end) / 1e3 for start, end in (s.events for s in launched)]
    finished = [read_at - end.elapsed_time(last_end) / 1e3 for end in (s.events[1] for s in launched)]
    return seconds, finished
