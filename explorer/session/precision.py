"""Generation precision: fp32 (the default) or bf16 (`gpt-explorer --dtype bf16`, View menu).
No Qt here.

What bf16 changes, and what it does not (issue 28):
- Generation and the next-token distribution run a bf16 copy of the model, made from its weights
  at the first use after a change; decoding reads half the bytes, through each layer's weight
  packed once for oneDNN where the CPU has native bf16 (gptcore/model/packed_bf16.py). Tokens are drawn from fp32 softmaxes
  (sampling.transformed_logits upcasts the logits).
- Everything the other panels show (attention patterns, norms, attribution, routes, patching,
  the residual stream) stays computed in fp32 on the model's own weights.
- An ablation lives as hooks on the fp32 model, so while one is active generation uses the fp32
  model too (the copy would not be ablated); `describe()` says so.
- bf16 is offered wherever it is measured faster (issue 34): the first time bf16 is chosen for a
  model shape, a short stream of tokens is timed in both dtypes on the compute thread (bf16_speed.py;
  a few seconds for GPT-2 small; a stream, not one decode step, issue 39) and remembered per machine,
  torch version and shape, with the memory the bf16 copy holds (its weights, and oneDNN's packed copies
  of them where the CPU has native bf16: 473 MiB for GPT-2 small, 237 + 236). CPU flags
  decide nothing here: a CPU without avx512_bf16 or AMX decoded GPT-2 small at 62 tok/s in bf16
  against 33 in fp32. Where bf16 is measured slower, `set("bf16")` refuses with both figures
  (Bf16Slower); a model loaded later whose shape is measured slower generates in fp32, and
  `describe()` says so with the figures.
"""
from __future__ import annotations

import threading

import torch

from explorer.session.bf16_speed import DecodeSpeed, SpeedCache, measure, speed_key
from gptcore.errors import UserError

CHOICES = ("fp32", "bf16")


class Bf16Slower(UserError):
    """bf16 asked for where one decode step was measured slower in bf16 than in fp32."""

    title = "bf16 is slower here"  # a choice the machine refused, not bad input


EmulatedBf16 = Bf16Slower  # issue 28's name for the refusal


def slower_message(speed: DecodeSpeed) -> str:
    """The refusal's one reason, with both figures (the caller says what happens instead)."""
    return (f"bf16 is not used: a streamed token of this model took {speed.bf16_ms:.1f} ms in bf16 against "
            f"{speed.fp32_ms:.1f} ms in fp32 ({speed.tok_s(speed.bf16_ms):.1f} against "
            f"{speed.tok_s(speed.fp32_ms):.1f} tokens/s over {speed.tokens} tokens; {speed.where()}), so bf16 would "
            f"make generation slower.")


class GenerationPrecision:
    """The generation dtype and what it was measured to be worth. `measure(model, bf16_copy)`
    and `cache` are the seams a test replaces (bf16_speed.measure, the user's cache file)."""

    def __init__(self, core, cache: SpeedCache | None = None, measure_fn=None):
        self.core = core
        self.name = "fp32"
        self.cache = cache if cache is not None else SpeedCache()
        self.measure = measure_fn if measure_fn is not None else measure
        self._copy: tuple | None = None  # (key of the fp32 weights it was made from, bf16 model)
        self._lock = threading.Lock()

    def set(self, name: str) -> str:
        """Choose fp32 or bf16 for generation; raises Bf16Slower (with both figures) where bf16 is
        measured slower for the loaded model, ValueError for another name. Measures on first use
        for a shape: call it on the compute thread. With no model yet, bf16 is taken and decided
        at the first generation. Tells every view (SettingsChanged 'precision')."""
        if name not in CHOICES:
            raise ValueError(f"unknown precision {name!r}; choose fp32 or bf16")
        if name == "bf16":
            speed = self.measure_loaded()
            if speed is not None and not speed.bf16_faster:
                raise Bf16Slower(slower_message(speed))
        if name != self.name:
            self.name = name
            if name == "fp32":
                self._copy = None
            self.core.settings_changed("precision")
        return self.name

    def known_speed(self, model=None) -> DecodeSpeed | None:
        """The measured speeds for `model` (default: the loaded one) if known; never measures."""
        model = self.core.model if model is None else model
        if model is None:
            return None
        return self.cache.get(speed_key(model.config, model.device))

    def measure_loaded(self) -> DecodeSpeed | None:
        """The loaded model's speeds (None without a model), measured now if not known: call it on
        the compute thread. The window asks after a model swap while bf16 is chosen, so the menu
        and the status bar show the new shape's figures (and the fp32 fallback) before generating."""
        with self.core.lock:
            model = self.core.model
            return None if model is None else self.speed_for(model)

    def speed_for(self, model) -> DecodeSpeed:
        """The speeds for `model`'s shape: from the cache, else measured now (compute thread, with
        the session's lock held) and remembered. The bf16 copy timed is kept when bf16 wins."""
        key = speed_key(model.config, model.device)
        speed = self.cache.get(key)
        if speed is None:
            speed = self.measure(model, self._bf16_model(model))
            self.cache.put(key, speed)
            if not speed.bf16_faster:
                self._copy = None  # never used: give its memory back
        return speed

    def ablated(self) -> bool:
        return bool(self.core.interp.ablation.active)

    def model_for(self, model):
        """The model generation runs: `model` itself in fp32, while an ablation is active or where
        bf16 is measured slower for its shape, else its bf16 copy (made again when the weights changed)."""
        if self.name == "fp32" or self.ablated() or not self.speed_for(model).bf16_faster:
            return model
        return self._bf16_model(model)

    def _bf16_model(self, model):
        key = _weights_key(model)
        with self._lock:
            if self._copy is None or self._copy[0] != key:
                self._copy = None  # never hold two copies
                self._copy = (key, _bf16_copy(model))
            return self._copy[1]

    def describe(self, info_dtype: str) -> tuple[str, str]:
        """(status-bar text, tooltip) for the dtype field, with the measured speeds where known."""
        speed = self.known_speed()
        measured = (f"\n\n{speed.what()}: {speed.figures()} ({speed.where()})."
                    + (f" In bf16, {speed.memory()}." if speed.memory() else "") if speed is not None else
                    "\n\nbf16's speed here is measured when it is chosen (View ▸ Generation precision).")
        if self.name == "fp32":
            return info_dtype, f"weights and every computation in {info_dtype}{measured}"
        if speed is not None and not speed.bf16_faster:
            return (f"{info_dtype} · fp32 generation (bf16 slower here)",
                    f"bf16 was chosen, but for this model it was measured slower than fp32, so generation "
                    f"runs in fp32.{measured}")
        text = f"{info_dtype} · bf16 generation"
        tip = ("Generation and the next-token bars run a bf16 copy of the weights (decoding reads half the bytes); "
               "attention patterns, norms, attribution, routes and every other panel are computed in fp32.")
        if self.ablated():
            text += " (fp32 while ablated)"
            tip += " While an ablation is active, generation runs the ablated fp32 model."
        return text, tip + measured


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
