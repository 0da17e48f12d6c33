"""Streaming generation: one token per step, with the distribution it was drawn from.

`generate` is an iterator so the GUI can draw each token as it arrives and stop at any
step (drop the iterator, or pass `cancel`). Work happens only when the caller asks for
the next step: abandoning after the last wanted token costs no extra forward.

Each step feeds ONE new token through the model with a KV cache (keys and values of
the past are kept, not recomputed), and the head runs at the last position only. When
the window reaches `block_size`, the oldest `window_shift` tokens are dropped and the
cache is rebuilt from the rest, so every position stays inside the trained range and
generation never fails on length. Dropping a chunk instead of one token at a time
amortises the rebuild; `window_shift=1` gives nanoGPT's exact "last block_size tokens".

How a step is computed is the engine's business (decoders.py): on a CPU the plain KV-cached
forward; on CUDA the same step with static shapes, captured once as a CUDA graph and replayed per
token, the token chosen on the device (picking.py) so that only a few numbers come back.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable, Iterator

import torch

from gptcore.generation import decode_graphs
from gptcore.generation.decoders import Engine, GraphEngine, SlidingWindow, StaticEngine, inference
from gptcore.generation.picking import TokenPicker
from gptcore.generation.sampling import (
    GenerationError,
    check_settings,
    next_token_distribution,
    resolve_vocab_limit,
    top_alternatives,
)

# next_token_distribution and top_alternatives live in .sampling; re-exported so the GUI
# needs one import for the stream and for redrawing its bars from one forward's logits.
__all__ = [
    "GenerationError", "GenerationStep", "check_settings", "generate", "next_token_distribution",
    "top_alternatives",
]

EOT = 50256  # GPT-2's <|endoftext|>
ENGINES = ("auto", "plain", "static", "graph")  # decoders.py; auto: graph on CUDA, plain elsewhere

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class GenerationStep:
    """One generated token. `prob` and `alternatives` are after the sampling transforms
    (what the token was actually drawn from); `alternatives` holds up to
    `n_alternatives` (id, probability) pairs, most likely first, always including the
    chosen token, never an id the transforms removed. `position` is the token's index
    in the whole sequence (the prompt fills 0..len(prompt)-1). `capture_s` is the time this
    step spent capturing CUDA graphs before its forward: nonzero only on the first token of the
    first generation for a shape (the graphs are kept for the next one)."""

    token: int
    prob: float
    alternatives: tuple[tuple[int, float], ...]
    position: int
    capture_s: float = 0.0


def generate(model, idx, *, max_new_tokens: int, temperature: float = 1.0, top_k: int | None = None,
             top_p: float | None = None, repetition_penalty: float = 1.0, seed: int | None = None,
             stop_at_eos: bool = False, eos_id: int = EOT, vocab_limit: int | None = None,
             n_alternatives: int = 10, cancel: Callable[[], bool] | None = None,
             window_shift: int | None = None, engine: str = "auto") -> Iterator[GenerationStep]:
    """Stream up to `max_new_tokens` tokens continuing `idx` (a list of ids, or a 1-D /
    (1, T) LongTensor). Settings are checked here, at the call, not at the first step.

    temperature 0 is greedy; top_k None/0 is off and is clamped to the vocabulary; top_p
    in (0, 1]; repetition_penalty as HF's (CTRL) over the prompt and everything generated.
    Ids >= `vocab_limit` (default: 50257 when the model's vocabulary is padded past
    GPT-2's) are never drawn. `seed` makes sampling repeatable. `cancel()` is checked
    before each step; when it returns True the iterator ends quietly. A NaN in the
    logits raises GenerationError. Runs under torch.inference_mode, step by step.
    `window_shift` (default block_size // 4) is how many of the oldest tokens drop when
    the window is full (see the module docstring). `engine` picks how each step runs
    (decoders.py): "plain" (the KV-cached forward), "static" (static shapes, eagerly), "graph"
    (static shapes replayed as CUDA graphs; where that cannot be had, the plain path, the reason
    logged), "auto" (graph on CUDA, plain elsewhere). All give the same tokens.
    """
    check_settings(temperature, top_k, top_p, repetition_penalty, max_new_tokens)
    config = model.config
    prompt = _prompt_ids(idx, config.vocab_size)
    limit = resolve_vocab_limit(vocab_limit, config.vocab_size)
    if not isinstance(n_alternatives, int) or n_alternatives < 0:
        raise ValueError(f"n_alternatives must be a whole number >= 0, got {n_alternatives!r}")
    if window_shift is None:
        window_shift = max(1, config.block_size // 4)
    if not isinstance(window_shift, int) or not 1 <= window_shift <= config.block_size:
        raise ValueError(f"window_shift must be a whole number from 1 to block_size={config.block_size}, got {window_shift!r}")
    if cancel is not None and not callable(cancel):
        raise ValueError("cancel must be a callable returning True to stop, or None")
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {', '.join(ENGINES)}, got {engine!r}")
    if engine == "auto":
        engine = "graph" if model.device.type == "cuda" else "plain"

    settings = dict(temperature=temperature, top_k=top_k, top_p=top_p, repetition_penalty=repetition_penalty,
                    vocab_limit=limit, n_alternatives=n_alternatives, vocab_size=config.vocab_size)

    def make_engine() -> Engine:
        return _make_engine(model, engine, settings)

    return _stream(model, prompt, window_shift, make_engine, seed, max_new_tokens, stop_at_eos, eos_id, cancel)


def _make_engine(model, kind: str, settings: dict) -> Engine:
    """The engine `kind` names, built at the first step (a capture is work: done only when asked),
    under `inference(model)`."""
    if kind == "graph":
        try:
            captured, seconds = decode_graphs.acquire(model)
            return GraphEngine(model, settings, captured, seconds)
        except decode_graphs.GraphsUnavailable as exc:
            log.info("decoding without CUDA graphs: %s", exc)
    picker = TokenPicker(device=model.device, **settings)
    return StaticEngine(model, picker) if kind == "static" else Engine(model, picker)


def _stream(model, prompt: list[int], shift: int, make_engine: Callable[[], Engine], seed: int | None,
            max_new_tokens: int, stop_at_eos: bool, eos_id: int, cancel) -> Iterator[GenerationStep]:
    # Grad mode is thread-local state: it is switched per step, never held across a
    # `yield`, so the caller's own code between steps runs in whatever mode it chose.
    engine = window = None
    token = None
    try:
        for _ in range(max_new_tokens):
            if cancel is not None and cancel():
                return
            capture_s = 0.0
            if window is None:
                with inference(model):  # what a captured step keeps is made and used under inference_mode only
                    engine = make_engine()
                    engine.picker.begin(prompt, seed)
                window = SlidingWindow(engine, prompt, model.config.block_size, shift)
                packed = window.start()
                capture_s = engine.capture_s
            else:
                packed = window.advance(token)
            position = len(window.history)
            token, prob, alternatives = engine.picker.read(packed, position)
            yield GenerationStep(token, prob, alternatives, position, capture_s)
            if stop_at_eos and token == eos_id:
                return
    finally:
        if engine is not None:
            engine.close()  # a captured step is free for the next generation


def _prompt_ids(idx, vocab_size: int) -> list[int]:
    if isinstance(idx, torch.Tensor):
        if idx.dim() == 2 and idx.shape[0] == 1:
            idx = idx[0]
        if idx.dim() != 1:
            raise ValueError(f"generate takes one sequence: a list of ids or a (T,) / (1, T) tensor, got shape {tuple(idx.shape)}")
        if idx.dtype.is_floating_point or idx.dtype == torch.bool:
            raise ValueError(f"token ids must be integers, got a {idx.dtype} tensor")
        ids = idx.tolist()
    else:
        ids = list(idx)
        if not all(isinstance(t, int) and not isinstance(t, bool) for t in ids):
            raise ValueError("token ids must be whole numbers")
    if not ids:
        raise ValueError(f"the prompt is empty; start from a token, e.g. <|endoftext|> ({EOT})")
    bad = [t for t in ids if not 0 <= t < vocab_size]
    if bad:
        raise ValueError(f"token ids must be in [0, {vocab_size}) for this model; got {bad[:5]}")
    return ids
