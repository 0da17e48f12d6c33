"""How one forward's logits become the distribution a token is drawn from.

The transforms run in HF transformers' order, so a user moving from `generate()` there
gets the same distribution here: ids beyond the tokenizer are removed, then the
repetition penalty (CTRL, Keskar et al. 2019), temperature, top-k, top-p (nucleus,
Holtzman et al. 2019). The GUI calls `next_token_distribution` to redraw its bars as a
slider moves, from the logits of ONE forward; `generate` calls the very same function,
so what the bars show is what gets sampled.
"""
from __future__ import annotations

from typing import Iterable, Sequence

import torch

from gptcore.model.config import GPT2_VOCAB


# Allowed ranges, checked once per request and named in every error message. The upper
# bounds turn a typo (an extra three zeros) into a message: at temperature 100 GPT-2's
# distribution is already flat, and a penalty of 100 already forbids every repeat.
MAX_TEMPERATURE = 100.0
MAX_REPETITION_PENALTY = 100.0
MAX_NEW_TOKENS = 1_000_000


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_settings(temperature=1.0, top_k=None, top_p=None, repetition_penalty=1.0, max_new_tokens=1) -> None:
    """Raise ValueError naming the setting and its allowed range; returns None if all fit.

    Checked before any model work, so a typo fails at once and not after a slow load.
    """
    if not _is_number(temperature) or not 0.0 <= temperature <= MAX_TEMPERATURE:  # NaN fails both
        raise ValueError(f"temperature must be a number from 0 (greedy) to {MAX_TEMPERATURE:g}, got {temperature!r}")
    if top_k is not None and (not _is_int(top_k) or top_k < 0):
        raise ValueError(f"top_k must be a whole number >= 0 (0 or None: off; above the vocabulary: clamped), got {top_k!r}")
    if top_p is not None and (not _is_number(top_p) or not 0.0 < top_p <= 1.0):
        raise ValueError(f"top_p must be in (0, 1] (1 or None: off), got {top_p!r}")
    if not _is_number(repetition_penalty) or not 0.0 < repetition_penalty <= MAX_REPETITION_PENALTY:
        raise ValueError(
            f"repetition_penalty must be in (0, {MAX_REPETITION_PENALTY:g}] (1: off, above 1 discourages repeats), "
            f"got {repetition_penalty!r}"
        )
    if not _is_int(max_new_tokens) or not 0 <= max_new_tokens <= MAX_NEW_TOKENS:
        raise ValueError(f"max_new_tokens must be a whole number from 0 to {MAX_NEW_TOKENS:,}, got {max_new_tokens!r}")


def default_vocab_limit(vocab_size: int) -> int:
    """Models padded past the GPT-2 tokenizer (50304 in nanoGPT) never sample the padding."""
    return GPT2_VOCAB if vocab_size > GPT2_VOCAB else vocab_size


def resolve_vocab_limit(vocab_limit: int | None, vocab_size: int) -> int:
    if vocab_limit is None:
        return default_vocab_limit(vocab_size)
    if not _is_int(vocab_limit) or not 1 <= vocab_limit <= vocab_size:
        raise ValueError(f"vocab_limit must be a whole number from 1 to the model's vocab_size {vocab_size}, got {vocab_limit!r}")
    return vocab_limit


def context_mask(context: Iterable[int] | torch.Tensor | None, vocab_size: int, device) -> torch.Tensor | None:
    """(V,) booleans, True for every id that occurs in `context` (what the penalty hits)."""
    if context is None:
        return None
    ids = torch.as_tensor(context if isinstance(context, torch.Tensor) else list(context), dtype=torch.long)
    ids = ids.reshape(-1).to(device)
    ids = ids[(ids >= 0) & (ids < vocab_size)]
    seen = torch.zeros(vocab_size, dtype=torch.bool, device=device)
    seen[ids] = True
    return seen


def transformed_logits(logits: torch.Tensor, *, temperature: float, top_k: int | None, top_p: float | None,
                       repetition_penalty: float = 1.0, seen: torch.Tensor | None = None,
                       vocab_limit: int | None = None) -> torch.Tensor:
    """(V,) float32 logits after every transform but the greedy case; -inf = never drawn.

    `seen` is the (V,) mask of ids already in the context. Temperature 0 is handled by
    the callers (it is a limit, not a division).
    """
    x = logits.reshape(-1).float()  # (V,) fp32 even for a bf16 model: the tail matters
    V = x.shape[0]
    limit = resolve_vocab_limit(vocab_limit, V)
    if limit < V:
        x = x.clone()
        x[limit:] = float("-inf")
    if repetition_penalty != 1.0 and seen is not None:
        # CTRL as in HF: a positive logit is divided, a negative one multiplied, so the
        # penalty always lowers the token's chance whatever the logit's sign.
        penalised = torch.where(x > 0, x / repetition_penalty, x * repetition_penalty)
        x = torch.where(seen, penalised, x)
    if temperature > 0 and temperature != 1.0:
        x = x / temperature
    k = min(top_k or 0, limit)
    if 0 < k < limit:
        kth = torch.topk(x, k).values[-1]  # ties with the k-th are kept, as in HF
        x = x.masked_fill(x < kth, float("-inf"))
    if top_p is not None and top_p < 1.0:
        x = _nucleus(x, top_p)
    return x


def _nucleus(x: torch.Tensor, top_p: float) -> torch.Tensor:
    """Keep the smallest set of most likely ids whose probability reaches `top_p`."""
    sorted_logits, order = torch.sort(x, descending=True)  # (V,)
    probs = torch.softmax(sorted_logits, dim=-1)
    mass_before = torch.cumsum(probs, dim=-1) - probs  # probability of the ids ranked above
    drop_sorted = mass_before >= top_p
    drop_sorted[0] = False  # the most likely id always stays
    drop = torch.empty_like(drop_sorted).scatter_(0, order, drop_sorted)
    return x.masked_fill(drop, float("-inf"))


def greedy_choice(x: torch.Tensor) -> int:
    """argmax; the first of equal maxima, as torch and HF pick it."""
    return int(torch.argmax(x))


def next_token_distribution(logits: torch.Tensor, *, temperature: float = 1.0, top_k: int | None = None,
                            top_p: float | None = None, repetition_penalty: float = 1.0,
                            context: Sequence[int] | torch.Tensor | None = None,
                            vocab_limit: int | None = None) -> torch.Tensor:
    """(V,) probabilities the next token is drawn from, given one position's logits (V,)
    (or (1, V) / (1, 1, V)). Same transforms as `generate`; temperature 0 is one-hot."""
    check_settings(temperature, top_k, top_p, repetition_penalty)
    flat = logits.reshape(-1)
    check_finite(flat, resolve_vocab_limit(vocab_limit, flat.shape[0]))
    seen = context_mask(context, flat.shape[0], flat.device) if repetition_penalty != 1.0 else None
    x = transformed_logits(flat, temperature=temperature, top_k=top_k, top_p=top_p,
                           repetition_penalty=repetition_penalty, seen=seen, vocab_limit=vocab_limit)
    if temperature == 0:
        probs = torch.zeros_like(x)
        probs[greedy_choice(x)] = 1.0
        return probs
    return torch.softmax(x, dim=-1)


class GenerationError(RuntimeError):
    """The model produced something no token can be drawn from (NaN or +inf logits)."""


def check_finite(logits: torch.Tensor, vocab_limit: int, position: int | None = None) -> None:
    """Raise GenerationError when the usable logits hold NaN or +inf: sampling from them
    would return garbage silently (softmax gives NaN, argmax picks the NaN)."""
    usable = logits.reshape(-1)[:vocab_limit]
    check_largest_logit(float(usable.max()), position)  # one pass: max propagates NaN, +inf would be the max


def check_largest_logit(top: float, position: int | None = None) -> None:
    """check_finite's test, given the largest usable logit already read (a pick on the device
    sends it back with the token: picking.py)."""
    if not top < float("inf"):  # False for NaN and for +inf
        where = f" at position {position}" if position is not None else ""
        raise GenerationError(
            f"the model produced NaN or infinite logits{where}; its weights hold NaN/Inf or the "
            f"computation overflowed (fp16?): reload the checkpoint, or run in fp32"
        )


def top_alternatives(probs: torch.Tensor, n: int) -> tuple[tuple[int, float], ...]:
    """The `n` most likely ids with their probabilities, most likely first; ids the
    transforms removed (probability 0) are left out, so top_k=3 shows three bars."""
    if n <= 0:
        return ()
    flat = probs.reshape(-1)
    values, ids = torch.topk(flat, min(n, flat.shape[0]))
    return tuple((int(i), float(p)) for i, p in zip(ids.tolist(), values.tolist()) if p > 0.0)
