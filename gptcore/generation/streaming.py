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
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Callable, Iterator, Sequence

import torch

from gptcore.generation.sampling import (
    GenerationError,
    check_finite,
    check_settings,
    context_mask,
    greedy_choice,
    next_token_distribution,
    resolve_vocab_limit,
    top_alternatives,
    transformed_logits,
)

# next_token_distribution and top_alternatives live in .sampling; re-exported so the GUI
# needs one import for the stream and for redrawing its bars from one forward's logits.
__all__ = [
    "GenerationError", "GenerationStep", "check_settings", "generate", "next_token_distribution",
    "top_alternatives",
]

EOT = 50256  # GPT-2's <|endoftext|>


@dataclass(frozen=True)
class GenerationStep:
    """One generated token. `prob` and `alternatives` are after the sampling transforms
    (what the token was actually drawn from); `alternatives` holds up to
    `n_alternatives` (id, probability) pairs, most likely first, always including the
    chosen token, never an id the transforms removed. `position` is the token's index
    in the whole sequence (the prompt fills 0..len(prompt)-1)."""

    token: int
    prob: float
    alternatives: tuple[tuple[int, float], ...]
    position: int


def generate(model, idx, *, max_new_tokens: int, temperature: float = 1.0, top_k: int | None = None,
             top_p: float | None = None, repetition_penalty: float = 1.0, seed: int | None = None,
             stop_at_eos: bool = False, eos_id: int = EOT, vocab_limit: int | None = None,
             n_alternatives: int = 10, cancel: Callable[[], bool] | None = None,
             window_shift: int | None = None) -> Iterator[GenerationStep]:
    """Stream up to `max_new_tokens` tokens continuing `idx` (a list of ids, or a 1-D /
    (1, T) LongTensor). Settings are checked here, at the call, not at the first step.

    temperature 0 is greedy; top_k None/0 is off and is clamped to the vocabulary; top_p
    in (0, 1]; repetition_penalty as HF's (CTRL) over the prompt and everything generated.
    Ids >= `vocab_limit` (default: 50257 when the model's vocabulary is padded past
    GPT-2's) are never drawn. `seed` makes sampling repeatable. `cancel()` is checked
    before each step; when it returns True the iterator ends quietly. A NaN in the
    logits raises GenerationError. Runs under torch.inference_mode, step by step.
    `window_shift` (default block_size // 4) is how many of the oldest tokens drop when
    the window is full (see the module docstring).
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

    sampler = _Sampler(temperature=temperature, top_k=top_k, top_p=top_p, repetition_penalty=repetition_penalty,
                       vocab_limit=limit, n_alternatives=n_alternatives, seed=seed, device=model.device)
    window = _SlidingWindow(model, prompt, window_shift)
    return _stream(window, sampler, max_new_tokens, stop_at_eos, eos_id, cancel)


def _stream(window: "_SlidingWindow", sampler: "_Sampler", max_new_tokens: int, stop_at_eos: bool,
            eos_id: int, cancel) -> Iterator[GenerationStep]:
    # Grad mode is thread-local state: it is switched per step, never held across a
    # `yield`, so the caller's own code between steps runs in whatever mode it chose.
    token = None
    for i in range(max_new_tokens):
        if cancel is not None and cancel():
            return
        logits = window.start() if token is None else window.advance(token)  # (V,)
        step = sampler.choose(logits, window.history, position=len(window.history))
        token = step.token
        yield step
        if stop_at_eos and token == eos_id:
            return


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


@contextlib.contextmanager
def _inference(model):
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


class _SlidingWindow:
    """The tokens the model sees and their KV cache. Invariant: the cache holds the last
    `cache.length` tokens of `history` except the newest, which the next forward feeds."""

    def __init__(self, model, prompt: list[int], shift: int):
        self.model = model
        self.history = list(prompt)  # every token: prompt + generated
        self.block = model.config.block_size
        self.shift = shift
        self.cache = None

    def start(self) -> torch.Tensor:
        with _inference(self.model):
            self.cache = self.model.new_kv_cache(1)  # allocated once, written in place
        return self._forward(self.history[-self.block:], rebuild=True)

    def advance(self, token: int) -> torch.Tensor:
        self.history.append(token)
        if self.cache.length + 1 > self.block:  # full: slide, keep the newest tokens
            keep = max(1, self.block - self.shift)
            return self._forward(self.history[-keep:], rebuild=True)
        return self._forward([token], rebuild=False)

    def _forward(self, ids: Sequence[int], rebuild: bool) -> torch.Tensor:
        with _inference(self.model):
            if rebuild:
                self.cache.reset()
            x = torch.tensor([ids], dtype=torch.long, device=self.model.device)  # (1, T)
            return self.model(x, kv_cache=self.cache, logits="last")[0, -1]  # (V,)


class _Sampler:
    """Turns one position's logits into a GenerationStep with the shared transforms."""

    def __init__(self, *, temperature, top_k, top_p, repetition_penalty, vocab_limit, n_alternatives, seed, device):
        self.temperature, self.top_k, self.top_p = temperature, top_k, top_p
        self.repetition_penalty = repetition_penalty
        self.vocab_limit = vocab_limit
        self.n = n_alternatives
        self.generator = None
        if temperature > 0:
            self.generator = torch.Generator(device=device)
            if seed is None:
                self.generator.seed()
            else:
                self.generator.manual_seed(seed)
        self.seen = None  # (V,) ids already in the sequence, for the repetition penalty
        self.seen_upto = 0

    def _update_seen(self, history: list[int], vocab_size: int, device) -> torch.Tensor | None:
        if self.repetition_penalty == 1.0:
            return None
        if self.seen is None:
            self.seen = context_mask(history, vocab_size, device)
        elif self.seen_upto < len(history):
            self.seen[torch.tensor(history[self.seen_upto:], device=device)] = True
        self.seen_upto = len(history)
        return self.seen

    def choose(self, logits: torch.Tensor, history: list[int], position: int) -> GenerationStep:
        with torch.inference_mode():
            check_finite(logits, self.vocab_limit, position)
            seen = self._update_seen(history, logits.shape[-1], logits.device)
            x = transformed_logits(logits, temperature=self.temperature, top_k=self.top_k, top_p=self.top_p,
                                   repetition_penalty=self.repetition_penalty, seen=seen,
                                   vocab_limit=self.vocab_limit)  # (V,)
            if self.temperature == 0:
                token = greedy_choice(x)
                return GenerationStep(token, 1.0, ((token, 1.0),) if self.n else (), position)
            probs = torch.softmax(x, dim=-1)  # (V,)
            token = int(torch.multinomial(probs, 1, generator=self.generator))
            prob = float(probs[token])
            alternatives = top_alternatives(probs, self.n)
            if self.n and all(t != token for t, _ in alternatives):
                alternatives = alternatives[: self.n - 1] + ((token, prob),)  # a long-tail draw
            return GenerationStep(token, prob, alternatives, position)
