"""`Linear`: nn.Linear with a oneDNN fast path for CPU inference that cannot break a forward.

Why a fast path: for the shapes this app runs (a prompt's worth of rows, or one row while
decoding) MKL's GEMM is far from the machine's speed; oneDNN's linear on the same weight, no
copy, measured on GPT-2 small's layers: 64 rows 9.4 -> 6.2 ms per block, one row 0.63 ->
0.39 ms, and the (50257, 768) head for one row 12.6 -> 5.6 ms. Same maths up to float32
rounding (~1e-6).

Why it cannot break: the op (`torch.ops.mkldnn._linear_pointwise`) is private to torch and
may take other arguments, or none, in another release. So it is probed once, at first use,
against `F.linear` on small tensors; an exception or a wrong answer switches the process to
the plain path (logged once). A call that raises later does the same and returns the plain
result. `GPTCORE_ONEDNN=0` forces the plain path without ever calling the op.

Why a subclass and not a function around any nn.Linear: the fast path lives in `forward`,
so `nn.Module.__call__` still runs every hook a user registers on the layer (forward,
pre-forward, global); whether it has any is asked of `gptcore.model.hooks.module_hooked`, the
one place that reads torch's hook bookkeeping.
"""
from __future__ import annotations

import logging
import os
from typing import Callable, Optional

import torch
import torch.nn.functional as F
from torch import nn

from gptcore.model.config import ConfigError
from gptcore.model.probed import ProbedPath
from gptcore.model.row_choice import make_choice

log = logging.getLogger(__name__)

ENV_SWITCH = "GPTCORE_ONEDNN"
_OFF = {"0", "false", "off", "no"}
_ON = {"", "1", "true", "on", "yes"}

# op(x, weight, bias, "none", [], "") -> x @ weight.T + bias
LinearOp = Callable[..., torch.Tensor]


def _lookup_op() -> Optional[LinearOp]:
    try:
        return torch.ops.mkldnn._linear_pointwise if torch.backends.mkldnn.is_available() else None
    except (AttributeError, RuntimeError):  # a torch built without oneDNN, or without this op
        return None


def _call(op: LinearOp, x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor]) -> torch.Tensor:
    return op(x, weight, bias, "none", [], "")


def _probe(op: LinearOp) -> Optional[str]:
    """None when `op` agrees with F.linear on the kinds of call the model makes (3-D with a
    bias, one 2-D row without, a transposed weight as HF's Conv1D layout loads); else why not.
    Uses its own generator so that probing never moves the global random stream."""
    g = torch.Generator().manual_seed(0)
    w = torch.randn(8, 6, generator=g).t()  # (6, 8) non-contiguous, like a transposed Conv1D weight
    b = torch.randn(6, generator=g)
    cases = [(torch.randn(2, 3, 8, generator=g), w.contiguous(), b),  # (B, T, C) with bias
             (torch.randn(1, 8, generator=g), w, None)]  # one row, no bias
    for x, weight, bias in cases:
        problem = _disagreement(lambda: _call(op, x, weight, bias), F.linear(x, weight, bias),
                                "its values differ from F.linear")
        if problem is not None:
            return problem
    return None


def _disagreement(call: Callable[[], torch.Tensor], want: torch.Tensor, differs: str) -> Optional[str]:
    """None when `call()` returns `want` (same shape and dtype, values to float32 rounding); else why
    not, `differs` opening the sentence for wrong values. Any exception means "not this op": the
    plain path always works."""
    try:
        got = call()
    except Exception as exc:
        return f"it raised {type(exc).__name__}: {exc}"
    if not isinstance(got, torch.Tensor) or got.shape != want.shape or got.dtype != want.dtype:
        return f"it returned {type(got).__name__} {tuple(getattr(got, 'shape', ()))}, expected {tuple(want.shape)}"
    if not torch.allclose(got, want, rtol=1e-4, atol=1e-5):
        return f"{differs} by up to {float((got - want).abs().max()):.3g}"
    return None


def _switch_setting() -> bool:
    """False when the environment turns the fast path off; a value we cannot read is an error."""
    raw = os.environ.get(ENV_SWITCH, "")
    value = raw.strip().lower()
    if value in _OFF:
        return False
    if value in _ON:
        return True
    raise ConfigError(ENV_SWITCH, f"{raw!r} is not a switch; set it to 0 for the plain path, "
                                  "or 1 (or leave it unset) for oneDNN's linear on CPU")


def onednn_linear() -> Optional[LinearOp]:
    """The oneDNN linear op if this process may use it, else None. Decided once, at first use."""
    return _path.get()


def _decide() -> Optional[LinearOp]:
    if not _switch_setting():
        log.info("%s=0: linear layers use the plain path (F.linear)", ENV_SWITCH)
        return None
    op = _lookup_op()
    if op is None:
        log.info("this torch has no oneDNN linear; linear layers use the plain path (F.linear)")
        return None
    problem = _probe(op)
    if problem is not None:
        log.warning("oneDNN linear failed its check (%s); linear layers use the plain path (F.linear)", problem)
        return None
    return op


_path: ProbedPath[LinearOp] = ProbedPath(lambda: _decide(), "oneDNN linear",
                                         "linear layers use the plain path (F.linear)", log)
_give_up = _path.give_up  # a call failed where F.linear did not: the plain path from now on, logged once


_one_row = make_choice(lambda: _path.get())  # oneDNN or F.linear for one row: measured (row_choice.py)


# -- the linear and its GELU in one call (the MLP's first layer, when nobody reads its output) -----
# Why: oneDNN applies the GELU to each output tile while it is still in cache, where F.gelu reads
# and writes the whole (T, d_mlp) activation again. Measured, GPT-2 small, 64 tokens, Intel Xeon
# (Sapphire Rapids), 2 threads: the capture forward 62 -> 59 ms. Values as F.gelu's to ~1e-6.
GELUS = ("none", "tanh")  # F.gelu's `approximate`; oneDNN's "gelu" post-op takes the same names


def _probe_gelu(op: LinearOp) -> Optional[str]:
    """None when `op`'s bias + GELU agrees with F.gelu(F.linear(...)) for both GELUs; else why not."""
    g = torch.Generator().manual_seed(1)
    x, w, b = torch.randn(2, 3, 8, generator=g), torch.randn(6, 8, generator=g), torch.randn(6, generator=g)
    for approximate in GELUS:
        problem = _disagreement(lambda: op(x, w, b, "gelu", [], approximate),
                                F.gelu(F.linear(x, w, b), approximate=approximate),
                                f"its {approximate!r} GELU differs from F.gelu")
        if problem is not None:
            return problem
    return None


def _decide_gelu() -> Optional[LinearOp]:
    op = _path.get()
    if op is None:
        return None
    problem = _probe_gelu(op)
    if problem is not None:
        log.warning("oneDNN's fused linear + GELU failed its check (%s); the GELU runs after the linear", problem)
        return None
    return op


_gelu_path: ProbedPath[LinearOp] = ProbedPath(lambda: _decide_gelu(), "oneDNN's fused linear + GELU",
                                              "the GELU runs after the linear", log)


def forget_probe() -> None:
    """Decide again at the next use (after a change to GPTCORE_ONEDNN, e.g. in a test)."""
    _path.forget()
    _one_row.forget()
    _gelu_path.forget()


class Linear(nn.Linear):
    """nn.Linear (same parameters, same state_dict) whose forward takes oneDNN's linear on
    CPU fp32 when nothing needs autograd (in bf16, for one row, oneDNN with weights packed
    once: packed_bf16.py); anything else (other devices or dtypes, gradients,
    CPU autocast, which the op would ignore) is nn.Linear's own forward. Hooks on the layer
    fire either way: they run in __call__."""

    def plain_only(self, x: torch.Tensor) -> bool:
        """True where only nn.Linear's own forward is right for `x`: other devices or dtypes,
        gradients, CPU autocast (F.linear follows autocast; the op, and its probe, would not)."""
        w, b = self.weight, self.bias
        return (x.device.type != "cpu" or x.dtype != w.dtype or w.dtype not in (torch.float32, torch.bfloat16)
                or torch.is_autocast_enabled("cpu")
                or (torch.is_grad_enabled() and (w.requires_grad or x.requires_grad
                                                 or (b is not None and b.requires_grad))))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w, b = self.weight, self.bias
        if self.plain_only(x):
            return F.linear(x, w, b)
        if w.dtype == torch.bfloat16:
            return self._bf16_forward(x)
        if x.numel() == x.shape[-1] and not w.is_contiguous():
            # One row against a transposed weight (HF's Conv1D matrices loaded in place): oneDNN
            # runs it far below the memory's speed, MKL's gemv at it. Whole GPT-2 small decode
            # step, CPU time, 1 thread: oneDNN 63-68 ms, F.linear 46-51 (contiguous + oneDNN 43).
            return F.linear(x, w, b)
        op = onednn_linear()
        if op is None or (x.numel() == x.shape[-1] and not _one_row.get()):  # one row: the faster, measured
            return F.linear(x, w, b)
        try:
            return _call(op, x, w, b)  # (..., out_features)
        except Exception as exc:
            plain = F.linear(x, w, b)  # raises too when the input itself is wrong (e.g. its width)
            _give_up(exc)
            return plain

    def forward_gelu(self, x: torch.Tensor, approximate: str) -> torch.Tensor:
        """`F.gelu(self(x), approximate=approximate)`, in one oneDNN call where the fp32 fast path
        applies to `x` (not for one row: decoding keeps linear's measured one-row choice). It skips
        `__call__`: call it only when `module_hooked(self)` is False and nobody reads the pre-activation."""
        w, b = self.weight, self.bias
        op = None
        if not (self.plain_only(x) or w.dtype != torch.float32 or x.numel() == x.shape[-1] or not w.is_contiguous()):
            op = _gelu_path.get()
        if op is None:
            return F.gelu(self.forward(x), approximate=approximate)
        try:
            return op(x, w, b, "gelu", [], approximate)  # (..., out_features)
        except Exception as exc:
            plain = F.gelu(F.linear(x, w, b), approximate=approximate)  # raises too when the input is wrong
            _gelu_path.give_up(exc)
            return plain

    def _bf16_forward(self, x: torch.Tensor) -> torch.Tensor:
        """One bf16 row (decoding) against weights packed once for oneDNN; anything else F.linear."""
        from gptcore.model import packed_bf16

        w, b = self.weight, self.bias
        if x.numel() != x.shape[-1] or w.is_inference() or not packed_bf16.available():
            return F.linear(x, w, b)
        try:
            packed = packed_bf16.packed_weight(self)
            return packed_bf16.call(x, packed, b)  # (..., out_features)
        except Exception as exc:
            plain = F.linear(x, w, b)
            packed_bf16.give_up(exc)
            return plain


def apply_linear(layer: nn.Linear, x: torch.Tensor) -> torch.Tensor:
    """`layer(x)`: the one way model code calls a linear layer. A `Linear` takes the fast
    path inside its forward; a plain nn.Linear is torch's. Both run the layer's hooks."""
    return layer(x)
