"""How fast generation streams tokens, in fp32 and in bf16, on this machine, for this model's shape.

Why measure instead of reading CPU flags: decoding feeds one token through every weight, so it is
bound by the memory's speed, and bf16 halves the bytes. A CPU without avx512_bf16 or AMX still
decoded GPT-2 small faster in bf16 (AMD EPYC without avx512: 62 tok/s bf16 against 33 fp32,
issue 34), while bf16 *training* there was 10x slower. What wins depends on the CPU, torch's
kernels and the model's shape, so the explorer asks this module before it offers bf16.

What is timed is a stream (issue 39): `tokens` tokens drawn by `gptcore.generate` itself — each one
forward with the KV cache (logits of the last position only, under inference_mode, through the model's
own layers: oneDNN or F.linear for fp32, packed_bf16.py's packed weights for bf16) plus what generation
does around it per token (the fp32 softmax over the vocabulary, the draw, the alternatives the Generation
panel lists). One decode step alone promised more than users saw: issue 39 measured GPT-2 small at 35
against 28 tok/s for one step, and 50 tokens streamed in the window only ~10 % faster in bf16. The first
token of each stream (the prompt's forward) is not counted. What the window adds per token (drawing the
token and the bars) is not in it either, and is the same in both dtypes. One short warm-up stream each
(oneDNN builds its primitives and packs bf16 weights at the first one-row call), then the two models
alternately, best of `rounds`: a burst of load from another process lands on both sides, and the minimum
is the least disturbed. GPT-2 small, one thread on a loaded 2-core AMD EPYC: 4.6-5.0 s in all.
"""
from __future__ import annotations

import math
import time

import torch

from gptcore.generation.streaming import generate

CONTEXT = 4  # prompt tokens: decoding's shape without a long prompt's cost
STREAM_TOKENS = 12  # tokens timed per stream (after the first)
ROUNDS = 2


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _stream_seconds(model, prompt: list[int], tokens: int) -> float:
    """Seconds per token of a stream of `tokens` tokens after the first (which carries the prompt's forward)."""
    stream = generate(model, prompt, max_new_tokens=tokens + 1, temperature=1.0, seed=0)
    next(stream)  # the prompt's forward and the first token: not what streaming costs per token
    _sync(model.device)
    start = time.perf_counter()
    count = sum(1 for _step in stream)
    _sync(model.device)
    return (time.perf_counter() - start) / max(count, 1)


def stream_seconds_per_token(fp32_model, bf16_model, *, tokens: int = STREAM_TOKENS, context: int = CONTEXT,
                             rounds: int = ROUNDS) -> tuple[float, float]:
    """Best seconds per streamed token: (fp32_model's, bf16_model's). The models must have the same
    config; their modes (train/eval) are left as they were."""
    if fp32_model.config != bf16_model.config:
        raise ValueError("stream_seconds_per_token compares two copies of one model: their configs differ")
    config = fp32_model.config
    prompt = [i % config.vocab_size for i in range(max(1, min(context, config.block_size - 1)))]
    modes = [(m, m.training) for m in (fp32_model, bf16_model)]
    best = [math.inf, math.inf]
    try:
        for m, _ in modes:
            m.eval()  # no dropout: the stream generation runs
        for m, _ in modes:
            _stream_seconds(m, prompt, 1)  # warm-up: primitives built, bf16 weights packed
        for _ in range(max(1, rounds)):
            for side, (m, _) in enumerate(modes):
                best[side] = min(best[side], _stream_seconds(m, prompt, max(1, tokens)))
    finally:
        for m, training in modes:
            m.train(training)
    return best[0], best[1]
