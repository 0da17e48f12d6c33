"""How long one decode step takes, in fp32 and in bf16, on this machine, for this model's shape.

Why measure instead of reading CPU flags: decoding feeds one token through every weight, so it is
bound by the memory's speed, and bf16 halves the bytes. A CPU without avx512_bf16 or AMX still
decoded GPT-2 small faster in bf16 (AMD EPYC without avx512: 62 tok/s bf16 against 33 fp32,
issue 34), while bf16 *training* there was 10x slower. What wins depends on the CPU, torch's
kernels and the model's shape, so the explorer asks this module before it offers bf16.

What is timed is what generation runs (streaming.py's step): one new token through the model with
a KV cache already holding a few tokens, logits of the last position only, under inference_mode,
through the model's own layers (linear.py picks oneDNN or F.linear for fp32, packed_bf16.py's
packed weights for bf16 where available). One warm-up step each (oneDNN builds its primitives and
packs bf16 weights at the first one-row call), then the two models alternately, best of `rounds`:
a burst of load from another process lands on both sides, and the minimum is the least disturbed.
GPT-2 small: about 8 steps of 15-60 ms, well under a second.
"""
from __future__ import annotations

import math
import time

import torch

CONTEXT = 4  # tokens already in the cache: decoding's shape without a long prompt's cost
ROUNDS = 3


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class _Stepper:
    """One model with a KV cache filled with `context` tokens; `step()` feeds one more token
    and rewinds the cache, so every step has the same length to attend over."""

    def __init__(self, model, context: int):
        self.model = model
        self.context = min(context, model.config.block_size - 1)
        vocab = model.config.vocab_size
        ids = torch.arange(self.context + 1, device=model.device) % vocab  # (context + 1,)
        self.prompt, self.next = ids[None, :self.context], ids[None, self.context:]  # (1, context), (1, 1)
        self.cache = model.new_kv_cache(1)
        if self.context:
            model(self.prompt, kv_cache=self.cache, logits="last")  # (1, 1, V): the prompt's keys and values

    def step(self) -> float:
        self.cache.length = self.context
        start = time.perf_counter()
        self.model(self.next, kv_cache=self.cache, logits="last")  # (1, 1, V)
        _sync(self.model.device)
        return time.perf_counter() - start


def decode_step_seconds(fp32_model, bf16_model, *, context: int = CONTEXT,
                        rounds: int = ROUNDS) -> tuple[float, float]:
    """Best seconds of one decode step: (fp32_model's, bf16_model's). The models must have the
    same config; their modes (train/eval) are left as they were."""
    if fp32_model.config != bf16_model.config:
        raise ValueError("decode_step_seconds compares two copies of one model: their configs differ")
    modes = [(m, m.training) for m in (fp32_model, bf16_model)]
    best = [math.inf, math.inf]
    try:
        for m, _ in modes:
            m.eval()  # no dropout: the step generation runs
        with torch.inference_mode():
            steppers = [_Stepper(fp32_model, context), _Stepper(bf16_model, context)]
            for s in steppers:
                s.step()  # warm-up: primitives built, bf16 weights packed
            for _ in range(max(1, rounds)):
                for side, s in enumerate(steppers):
                    best[side] = min(best[side], s.step())
    finally:
        for m, training in modes:
            m.train(training)
    return best[0], best[1]
