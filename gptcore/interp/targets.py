"""What attribution and patching measure: the logit of a target token at the last position,
minus the logit of a contrast token when one is given (the "logit difference", LD).

Shared by `attribution`, `patching` and `interventions` so that all three read prompts and
token ids the same way and refuse the same bad input with the same message.
"""
from __future__ import annotations

from typing import Sequence, Union

import torch

Ids = Union[Sequence[int], torch.Tensor]


def as_ids(model, ids: Ids, what: str = "prompt") -> torch.Tensor:
    """A list of token ids or a (T,) / (1, T) LongTensor -> (1, T) int64 on the model's device.

    Refuses an empty prompt, one longer than block_size and ids outside the vocabulary, each
    with a message naming `what` (the clean / corrupted / reference prompt) and the fix."""
    t = ids if isinstance(ids, torch.Tensor) else torch.tensor(list(ids), dtype=torch.long)
    if t.dim() == 1:
        t = t[None]
    if t.dim() != 2 or t.shape[0] != 1:
        raise ValueError(f"{what}: expected a list of token ids or a (1, T) tensor, got shape {tuple(t.shape)}")
    if t.dtype not in (torch.int64, torch.int32, torch.int16, torch.uint8):
        raise ValueError(f"{what}: token ids must be integers, got dtype {t.dtype}")
    cfg = model.config
    T = t.shape[1]
    if T == 0:
        raise ValueError(f"{what} is empty; type at least one token")
    if T > cfg.block_size:
        raise ValueError(f"{what} has {T} tokens, more than block_size={cfg.block_size}; shorten it")
    lo, hi = int(t.min()), int(t.max())
    if lo < 0 or hi >= cfg.vocab_size:
        bad = lo if lo < 0 else hi
        raise ValueError(f"{what}: token id {bad} is outside this model's vocabulary (vocab_size={cfg.vocab_size}); "
                         f"use ids from 0 to {cfg.vocab_size - 1}")
    return t.to(device=model.device, dtype=torch.long)  # (1, T)


def check_answer(model, target: int, contrast: int | None) -> tuple[int, int | None]:
    """Validate the target and contrast token ids (ints in the vocabulary, not equal)."""
    V = model.config.vocab_size
    for name, tok in (("target", target), ("contrast", contrast)):
        if tok is None and name == "contrast":
            continue
        if isinstance(tok, bool) or not isinstance(tok, int) and not (isinstance(tok, torch.Tensor) and tok.numel() == 1):
            raise ValueError(f"{name} must be one token id (an int), got {tok!r}")
        if not 0 <= int(tok) < V:
            raise ValueError(f"{name} token id {int(tok)} is outside this model's vocabulary (vocab_size={V}); "
                             f"pick a token from 0 to {V - 1}")
    target = int(target)
    contrast = None if contrast is None else int(contrast)
    if contrast == target:
        raise ValueError(f"target and contrast are the same token ({target}); the logit difference would be 0 "
                         f"by definition — pick a different contrast token, or none")
    return target, contrast


def answer_direction(model, target: int, contrast: int | None) -> tuple[torch.Tensor, float]:
    """(u, b): the logit difference of a final normalised vector y is `y @ u + b`.

    u = W_U[target] - W_U[contrast] (C,), b the same difference of the unembedding's bias
    (0 for GPT-2, whose head has none)."""
    W = model.unembed.weight  # (vocab, C)
    bias = getattr(model.unembed, "bias", None)
    u = W[target].float().clone()  # (C,)
    b = float(bias[target]) if bias is not None else 0.0
    if contrast is not None:
        u -= W[contrast].float()
        b -= float(bias[contrast]) if bias is not None else 0.0
    return u, b


def logit_difference(model, final_resid: torch.Tensor, target: int, contrast: int | None) -> torch.Tensor:
    """(N, C) residual stream at the last position, before the final norm -> (N,) LD.

    Only two rows of the unembedding are used: patching reads one number per run, and the
    whole (vocab, C) head would cost as much as half of GPT-2 small's blocks at 15 tokens."""
    u, b = answer_direction(model, target, contrast)
    y = model.ln_final(final_resid)  # (N, C)
    return y.float() @ u.to(y.device) + b  # (N,)
