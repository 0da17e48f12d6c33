"""A training step's forward — the model and nanoGPT's loss — under torch.compile when the run asks
for it (TrainConfig.compile), eager otherwise, and eager for good after a compile that fails.

Why the loss is compiled with the model: nanoGPT's model computes its loss inside forward, so
train.py's `torch.compile(model)` puts the cross-entropy into the same graph, where the (B, T,
vocab) logits are never written out in float32 and read back (at GPT-2's vocabulary, B 12, T 1024,
that is 2.5 GB of traffic a step). `LossOf` is that module here: our GPT plus `lm_loss`.

Why hooks stay out of the graph: the compiled function belongs to the trainer; everything else
(the recorder's probes, an evaluation, a capture in the app) calls the model itself, which shares
its parameters with the compiled graph but runs eagerly. So a probe's hooks are attached, used and
removed on a module the graph never saw being hooked; with none attached a HookPoint is the
identity and traces to nothing, and what the graph guards on (no live hooks, training mode) holds
again when the probe is done, so nothing recompiles (tests/gptcore/test_training_compile.py).

Why a fallback: torch.compile needs a working backend (a C++ compiler on a CPU, Triton on CUDA)
and compiles lazily, at the first forward and the first backward. Any failure there is logged once,
with the reason, and the run goes on eagerly: the caller redoes the step without the graph.
"""
from __future__ import annotations

import logging
from typing import Callable

import torch
from torch import nn

log = logging.getLogger(__name__)


class LossOf(nn.Module):
    """`loss_fn(model(x), y)` as one module: what DDP wraps and torch.compile compiles. Holds the
    model as its only child, so its parameters are the model's (nothing copied)."""

    def __init__(self, model: nn.Module, loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]):
        super().__init__()
        self.model = model
        self.loss_fn = loss_fn
        self._compiled: Callable | None = None
        self.compile_failure: str | None = None  # why compiling failed, once it did

    def loss(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.loss_fn(self.model(x), y)  # ()

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return (self._compiled or self.loss)(x, y)  # ()

    @property
    def compiled(self) -> bool:
        return self._compiled is not None

    def use_compile(self) -> None:
        """Compile `loss` (torch.compile's default mode, as train.py). torch.compile itself only
        wraps; a platform it cannot run on at all is refused here, and counts as a failure."""
        try:
            self._compiled = torch.compile(self.loss)
        except Exception as exc:  # e.g. a Python version this torch's compiler does not support
            self.give_up(exc)

    def give_up(self, exc: BaseException) -> None:
        """Run eagerly from now on; says why once (logged, and kept in `compile_failure` for the run's trace)."""
        self._compiled = None
        self.compile_failure = (f"torch.compile failed ({failure_reason(exc)}); training goes on without it "
                                f"(eagerly, same results); compile=False skips the attempt")
        log.warning("%s", self.compile_failure)


def failure_reason(exc: BaseException) -> str:
    """'RuntimeError: <its first line> (in BackendCompilerFailed)': the innermost cause, which says
    what is missing or wrong; the compiler's own wrapper only says which backend raised."""
    inner = exc
    while (getattr(inner, "inner_exception", None) or inner.__cause__) is not None:
        inner = getattr(inner, "inner_exception", None) or inner.__cause__
    first_line = next((line.strip() for line in str(inner).splitlines() if line.strip()), "")[:300]
    reason = f"{type(inner).__name__}: {first_line}"
    return reason if inner is exc else f"{reason} (in {type(exc).__name__})"


def compile_can_fail(exc: BaseException) -> bool:
    """True for an exception a compiled step may raise where the eager one would not (a backend
    that cannot compile, a graph the compiler cannot handle); False for running out of memory,
    which eager would too (and would only hide the real problem behind a retry)."""
    return isinstance(exc, Exception) and not isinstance(exc, torch.OutOfMemoryError) \
        and "out of memory" not in str(exc).lower()


def random_state(device: torch.device):
    """The random streams a step draws from (dropout): the CPU's and, on CUDA, the device's."""
    cuda = torch.cuda.get_rng_state(device) if device.type == "cuda" else None
    return torch.get_rng_state(), cuda


def restore_random_state(device: torch.device, state) -> None:
    cpu, cuda = state
    torch.set_rng_state(cpu)
    if cuda is not None:
        torch.cuda.set_rng_state(cuda, device)
