"""Generation precision: fp32 (the default) or bf16 (`gpt-explorer --dtype bf16`, View menu).
No Qt here.

What bf16 changes, and what it does not (issue 28):
- Generation and the next-token distribution run a bf16 copy of the model, made from its weights
  at the first use after a change; decoding reads half the bytes, through each layer's weight
  packed once for oneDNN (gptcore/model/packed_bf16.py). Tokens are drawn from fp32 softmaxes
  (sampling.transformed_logits upcasts the logits).
- Everything the other panels show (attention patterns, norms, attribution, routes, patching,
  the residual stream) stays computed in fp32 on the model's own weights.
- An ablation lives as hooks on the fp32 model, so while one is active generation uses the fp32
  model too (the copy would not be ablated); `describe()` says so.
- bf16 is offered only where the device computes it natively (a CPU with avx512_bf16 or AMX,
  judged by its flags, not its vendor; a CUDA GPU that supports it). Elsewhere it would be
  emulated, slower than fp32: `set("bf16")` refuses and says why rather than run slowly.
"""
from __future__ import annotations

import threading

import torch

CHOICES = ("fp32", "bf16")


class EmulatedBf16(ValueError):
    """bf16 asked for where the device would only emulate it."""


def native_bf16(device: torch.device) -> bool:
    from gptcore.training.speed import native_bf16 as native

    return native(device.type)


def emulated_message(device: torch.device) -> str:
    where = "this CPU has neither avx512_bf16 nor AMX" if device.type == "cpu" else f"{device} does not support it"
    return (f"bf16 is not used: {where}, so bf16 would be emulated in software and run slower than fp32. "
            "Generation stays fp32.")


class GenerationPrecision:
    def __init__(self, core):
        self.core = core
        self.name = "fp32"
        self._copy: tuple | None = None  # (key of the fp32 weights it was made from, bf16 model)
        self._lock = threading.Lock()

    def set(self, name: str) -> str:
        """Choose fp32 or bf16 for generation; raises EmulatedBf16 (the reason) where bf16 is
        not native, ValueError for another name. Tells every view (SettingsChanged 'precision')."""
        if name not in CHOICES:
            raise ValueError(f"unknown precision {name!r}; choose fp32 or bf16")
        if name == "bf16" and not native_bf16(self.core.device):
            raise EmulatedBf16(emulated_message(self.core.device))
        if name != self.name:
            self.name = name
            self._copy = None
            self.core.settings_changed("precision")
        return self.name

    def ablated(self) -> bool:
        return bool(self.core.interp.ablation.active)

    def model_for(self, model):
        """The model generation runs: `model` itself in fp32 or while an ablation is active,
        else its bf16 copy (made again when the weights changed)."""
        if self.name == "fp32" or self.ablated():
            return model
        key = _weights_key(model)
        with self._lock:
            if self._copy is None or self._copy[0] != key:
                self._copy = None  # never hold two copies
                self._copy = (key, _bf16_copy(model))
            return self._copy[1]

    def describe(self, info_dtype: str) -> tuple[str, str]:
        """(status-bar text, tooltip) for the dtype field."""
        if self.name == "fp32":
            return info_dtype, f"weights and every computation in {info_dtype}"
        text = f"{info_dtype} · bf16 generation"
        tip = ("Generation and the next-token bars run a bf16 copy of the weights (decoding reads half the bytes); "
               "attention patterns, norms, attribution, routes and every other panel are computed in fp32.")
        if self.ablated():
            text += " (fp32 while ablated)"
            tip += " While an ablation is active, generation runs the ablated fp32 model."
        return text, tip


def _weights_key(model) -> tuple:
    """Changes when any weight is another tensor or was written in place (a training step shown)."""
    parts = [id(model)]
    for p in model.parameters():
        try:
            version = p._version
        except RuntimeError:  # an inference tensor keeps no count: its storage must do
            version = -1
        parts.append((p.data_ptr(), version))
    return tuple(parts)


def _bf16_copy(model):
    """A bf16 model with `model`'s weights (rounded), its config, no hooks; eval mode."""
    from gptcore.model.gpt import GPT

    copy = GPT.empty(model.config).to(torch.bfloat16).to_empty(device=model.device)  # meta -> bf16, never fp32
    copy.tie_weights()  # to_empty gives the head its own tensor; share it again
    copy.load_state_dict(model.state_dict())  # cast to bf16 while copying
    return copy.eval()
