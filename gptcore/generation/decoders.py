"""The token loop's engines: how each step of the sliding window becomes the next token's numbers.

The window (`SlidingWindow`) is the same for all: the tokens the model sees, slid by `shift` when
the block is full and rebuilt from the kept tokens with one forward. Each step ends in a
TokenPicker's pick (picking.py), read back once. The engines differ in how one new token goes
through the model:

- `Engine`, the plain path (the CPU's): a `KVCache` whose length is a Python int, attention over
  the filled slots only. A CPU decodes at the speed it reads the weights and launches an op in
  microseconds, so the shortest key range wins there.
- `StaticEngine`: the same step with shapes that never change (a `StaticKVCache`: the position on
  the device, the whole block attended under a mask), run eagerly. What the graphs replay, so the
  tests hold it to `Engine` on the CPU: same logits, same tokens.
- `GraphEngine` (CUDA's): StaticEngine's step and the pick captured as CUDA graphs and replayed
  (decode_graphs.py): a handful of launches and one read per token instead of hundreds of launches.

Whenever a forward hook would fire (HookWatch: an ablation, a feature edit, an active hook point,
any forward hook) a step takes the plain path: a graph replays no Python, and a hook must see the
plain path's shapes (a (T, S) pattern, not the whole block). Both paths share one storage, so they
alternate from one token to the next.
"""
from __future__ import annotations

import contextlib
from typing import Sequence

import torch

from gptcore.generation import decode_graphs
from gptcore.generation.picking import TokenPicker
from gptcore.model.hooks import HookWatch
from gptcore.model.kv_cache import KVCache, StaticKVCache


@contextlib.contextmanager
def inference(model):
    """inference_mode + eval (no dropout) for one step; the caller's mode comes back after."""
    was_training = model.training
    if was_training:
        model.eval()
    try:
        with torch.inference_mode():
            yield
    finally:
        if was_training:
            model.train()


class Engine:
    """The plain path. `prefill(ids)` fills the cache from scratch, `step(token)` feeds one token
    at `cache.length`; both return the pick's numbers as a list."""

    capture_s = 0.0  # seconds this engine spent capturing graphs before its first token

    def __init__(self, model, picker: TokenPicker, cache: KVCache | None = None):
        self.model, self.picker = model, picker
        if cache is None:
            with inference(model):
                cache = model.new_kv_cache(1)  # allocated once, written in place
        self.cache = cache

    def prefill(self, ids: Sequence[int]) -> list[float]:
        with inference(self.model):
            self.cache.reset()
            return self._pick(self._forward(ids))

    def step(self, token: int) -> list[float]:
        with inference(self.model):
            return self._pick(self._forward([token]))

    def _forward(self, ids: Sequence[int]) -> torch.Tensor:
        x = torch.tensor([ids], dtype=torch.long, device=self.model.device)  # (1, T)
        return self.model(x, kv_cache=self.cache, logits="last")[0, -1]  # (V,)

    def _pick(self, logits: torch.Tensor) -> list[float]:
        return self.picker.pick(logits).tolist()  # the step's one wait for the device

    def close(self) -> None:
        """The generation is over (finished, stopped or abandoned)."""


class StaticEngine(Engine):
    """One-token steps through a StaticKVCache over the same storage, eagerly."""

    def __init__(self, model, picker: TokenPicker, cache: KVCache | None = None,
                 static: StaticKVCache | None = None, token: torch.Tensor | None = None):
        if cache is None:
            with inference(model):
                cache = model.new_kv_cache(1, zeroed=True)  # masked slots meet 0 · value, never NaN
        super().__init__(model, picker, cache)
        self.static = static if static is not None else StaticKVCache(cache)
        self.token = token if token is not None else torch.zeros(1, 1, dtype=torch.long, device=model.device)  # (1, 1)
        self.hooks = HookWatch(model)

    def step(self, token: int) -> list[float]:
        if self.hooks.attached():
            return super().step(token)  # the plain path, into the same cache
        with inference(self.model):
            self.token.fill_(token)
            self.static.position.fill_(self.cache.length)
            logits = self._static_forward()  # (V,)
            self.cache.length += 1
            return self._pick(logits)

    def _static_forward(self) -> torch.Tensor:
        return self.model(self.token, kv_cache=self.static, logits="last")[0, -1]  # (V,)


class GraphEngine(StaticEngine):
    """StaticEngine whose forward and pick are replays of a captured step (decode_graphs.py)."""

    def __init__(self, model, settings: dict, captured: decode_graphs.CapturedStep, capture_s: float):
        self.captured = captured
        try:
            self.pick_graph, pick_s = captured.pick_for(settings)
        except BaseException:
            decode_graphs.release(captured)
            raise
        super().__init__(model, self.pick_graph.picker, captured.cache, captured.static, captured.token)
        self.capture_s = capture_s + pick_s

    def _static_forward(self) -> torch.Tensor:
        return self.captured.replay()  # (V,), the captured step's own output buffer

    def _pick(self, logits: torch.Tensor) -> list[float]:
        pick = self.pick_graph
        if pick.graph is None:
            return super()._pick(logits)
        if logits is not self.captured.logits:  # a prefill's or a hooked step's logits: into the graph's input
            self.captured.logits.copy_(logits)
        pick.graph.replay()
        return pick.packed.tolist()

    def close(self) -> None:
        decode_graphs.release(self.captured)


class SlidingWindow:
    """The tokens the model sees and their KV cache. Invariant: the cache holds the last
    `cache.length` tokens of `history` except the newest, which the next step feeds."""

    def __init__(self, engine: Engine, prompt: list[int], block: int, shift: int):
        self.engine = engine
        self.history = list(prompt)  # every token: prompt + generated
        self.block = block
        self.shift = shift

    def start(self) -> list[float]:
        return self.engine.prefill(self.history[-self.block:])

    def advance(self, token: int) -> list[float]:
        self.history.append(token)
        if self.engine.cache.length + 1 > self.block:  # full: slide, keep the newest tokens
            keep = max(1, self.block - self.shift)
            return self.engine.prefill(self.history[-keep:])
        return self.engine.step(token)
