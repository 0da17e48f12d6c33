"""bf16 decoding on the CPU at the memory's speed: each layer's weight packed once for oneDNN.

Why: decoding feeds one row through every linear layer, so each step reads every weight once;
bf16 halves those bytes, but F.linear and oneDNN's linear on a plain (out, in) bf16 weight run a
one-row product no faster than fp32 (measured, AMD EPYC with avx512_bf16, no AMX, GPT-2 small, one
thread, cores shared: 141-224 ms per token bf16 plain vs 148-182 fp32). With the weight reordered
once into oneDNN's blocked layout (`torch.ops.mkldnn._reorder_linear_weight`, what torch's own
compiler does when it freezes a bf16 model) the same step took 93-136 ms.

Only where the CPU computes bf16 natively (avx512_bf16 or AMX: `gptcore.model.cpu`), only
for one row (a prompt's rows take F.linear) and only when nothing needs autograd (Linear checks).
The packed copy costs as much memory again as the bf16 weights; it is made at a layer's first
one-row call and made again when the weight changes (another tensor, or written in place: torch
counts in-place writes in `_version`). Weights made under inference_mode keep no such count, so
they take F.linear (the explorer and `load` make ordinary tensors).

Why it cannot break: the ops are private to torch, so they are probed once against F.linear
(the slow path; agreement within bf16 rounding); an exception or a wrong answer switches the
process to F.linear, logged once, as linear.py does for fp32. `GPTCORE_ONEDNN=0` turns it off too.
"""
from __future__ import annotations

import logging
import os
import weakref

import torch
import torch.nn.functional as F

from gptcore.model import cpu
from gptcore.model.probed import ProbedPath

log = logging.getLogger(__name__)

ENV_SWITCH = "GPTCORE_ONEDNN"  # as linear.py, which imports this module (so it cannot import linear)
_OFF = {"0", "false", "off", "no"}

# layer -> (key, packed weight). Beside the layer, not on it: never saved, copied or pickled with it
# (a deepcopy of a model would fail on oneDNN's opaque tensors), and gone with the layer.
_packed: "weakref.WeakKeyDictionary[torch.nn.Module, tuple]" = weakref.WeakKeyDictionary()


def _reorder(weight: torch.Tensor) -> torch.Tensor:
    return torch.ops.mkldnn._reorder_linear_weight(weight, 1)  # packed for batches of one row


def call(x: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """x (..., in) with one row in all -> (..., out), through the packed weight."""
    rows = x.reshape(1, x.shape[-1])  # (1, in)
    y = torch.ops.mkldnn._linear_pointwise(rows, packed, bias, "none", [], "")  # (1, out)
    return y.view(*x.shape[:-1], y.shape[-1])


def _probe() -> str | None:
    """None when the packed path agrees with F.linear on bf16 one-row calls (3-D and 2-D, with
    and without a bias, a transposed weight as HF's Conv1D layout loads); else why not."""
    g = torch.Generator().manual_seed(0)
    w = torch.randn(24, 40, generator=g).to(torch.bfloat16)  # (out, in)
    b = torch.randn(24, generator=g).to(torch.bfloat16)
    cases = [(torch.randn(1, 1, 40, generator=g).to(torch.bfloat16), w, b),
             (torch.randn(1, 40, generator=g).to(torch.bfloat16), w.t().contiguous().t(), None)]
    for x, weight, bias in cases:
        try:
            got = call(x, _reorder(weight), bias)
        except Exception as exc:  # any failure means "not this op": F.linear always works
            return f"it raised {type(exc).__name__}: {exc}"
        want = F.linear(x.float(), weight.float(), None if bias is None else bias.float())
        if got.shape != want.shape or got.dtype != torch.bfloat16:
            return f"it returned {got.dtype} {tuple(got.shape)}, expected bf16 {tuple(want.shape)}"
        err = float((got.float() - want).abs().max())
        if err > 2 ** -7 * float(want.abs().max()) + 1e-3:  # bf16 keeps 8 significant bits
            return f"its values differ from F.linear by up to {err:.3g}"
    return None


def available() -> bool:
    """Whether bf16 one-row products take the packed path in this process. Decided once."""
    return bool(_path.get())


def _decide() -> bool:
    if os.environ.get(ENV_SWITCH, "").strip().lower() in _OFF:  # linear.py's switch (it refuses bad values)
        return False
    if not cpu.native_bf16("cpu"):  # the kernel's choice; whether bf16 pays is measured (decode_timing.py)
        log.info("this CPU has no native bf16 (avx512_bf16/AMX): bf16 linear layers use F.linear")
        return False
    problem = _probe()
    if problem is not None:
        log.warning("oneDNN's packed bf16 linear failed its check (%s); bf16 layers use F.linear", problem)
        return False
    return True


_path: ProbedPath[bool] = ProbedPath(lambda: _decide() or None, "oneDNN's packed bf16 linear",
                                     "bf16 layers use F.linear", log)


def forget_probe() -> None:
    """Decide again at the next use (a test changing GPTCORE_ONEDNN)."""
    _path.forget()


def give_up(exc: Exception) -> None:
    """A call failed where F.linear did not: F.linear from now on, logged once."""
    _path.give_up(exc)


def packed_weight(layer: torch.nn.Linear) -> torch.Tensor:
    """`layer.weight` packed, from the layer's cache while the weight is the same tensor with
    the same contents (in-place writes bump `_version`), else packed again."""
    w = layer.weight
    key = (w.data_ptr(), w._version, tuple(w.shape), w.stride())
    cached = _packed.get(layer)
    if cached is not None and cached[0] == key:
        return cached[1]
    with torch.inference_mode():
        packed = _reorder(w.detach())
    _packed[layer] = (key, packed)
    return packed


def packed_bytes(model: torch.nn.Module) -> int:
    """Bytes held by the packed copies of `model`'s layers made so far (0 where none were: a prompt's
    rows, no native bf16, or no one-row call yet): the memory this path adds beside the bf16 weights."""
    total = 0
    for layer in model.modules():
        cached = _packed.get(layer)
        if cached is not None:
            total += cached[1].numel() * cached[1].element_size()
    return total
