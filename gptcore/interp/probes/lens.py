"""Logit lens: read each layer's residual stream as if it were the last one.

nostalgebraist's observation: pushing an intermediate residual stream through the model's
own final LayerNorm and unembedding shows what the model "would say" at that depth. We do
it at one position (the last) so it costs L small matrix-vector products, not a full
(L, T, vocab) tensor: GPT-2 small's lens is 12 × 768 × 50257 ≈ 0.5 GFLOP, XL's ≈ 4 GFLOP.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from gptcore.model.linear import apply_linear


@dataclass(frozen=True)
class LensRows:
    """Per layer, the k most likely next tokens after that layer (row l = after block l)."""

    top_ids: torch.Tensor  # (L, k) int64, best first
    top_probs: torch.Tensor  # (L, k) float32, softmax probabilities


@torch.inference_mode()
def logit_lens(model, resid: torch.Tensor, k: int = 5) -> LensRows:
    """resid (L, C): the residual stream after each block at one position -> top-k tokens.

    Uses the model's own `ln_final` and `unembed` (no weight folding, no re-centring), so the
    last row equals the model's real prediction at that position.
    """
    if resid.ndim != 2 or resid.shape[1] != model.config.n_embd:
        raise ValueError(f"resid must be (n_layers, {model.config.n_embd}), got {tuple(resid.shape)}")
    k = max(1, min(int(k), model.config.vocab_size))
    x = resid.to(device=model.device, dtype=model.dtype)  # (L, C)
    logits = _unembed_rows(model, model.ln_final(x)).float()  # (L, vocab)
    top_logits, top_ids = logits.topk(k, dim=-1)  # (L, k): softmax keeps the order
    top_probs = torch.exp(top_logits - torch.logsumexp(logits, dim=-1, keepdim=True))  # (L, k)
    return LensRows(top_ids=top_ids.cpu(), top_probs=top_probs.cpu())


def _unembed_rows(model, x: torch.Tensor) -> torch.Tensor:
    """x (L, C) -> (L, vocab) through the model's unembedding: a handful of rows against the
    whole (vocab, C) head, which `apply_linear` serves at memory speed on CPU (MKL's GEMM runs
    this short, wide product at a fraction of it: 25 ms for 12 rows of GPT-2 small, vs 14 ms)."""
    return apply_linear(model.unembed, x)  # (L, vocab)
