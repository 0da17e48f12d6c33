"""Attention capture: every layer's and head's pattern from ONE forward, in bounded memory.

A naive capture keeps `(n_head, T, T)` per layer: GPT-2 XL at T=1024 is 48 × 25 × 1024² × 4 B
≈ 5 GB. Instead each `hook_pattern` call reduces its layer on the spot, while the pattern is
still alive inside the forward, and lets it go:

- a thumbnail `(n_head, t, t)` with t = min(T, thumb_size), pooled by *probability mass*
  (keys summed within a bin, queries averaged), so every thumbnail row still sums to 1 and
  stays causal (query and key bins share their edges); when T <= thumb_size it IS the pattern;
- per-head summary numbers (entropy, previous-token and first-token attention);
- the full-resolution pattern only for the layers a view asks for (`full_layers`).

So the capture holds L·nh·t² + len(full_layers)·nh·T² floats (XL, T=1024, t=64, one full
layer: 20 MB + 105 MB). The forward also reads each layer's residual stream at the last
position for the logit lens and skips the unembedding of every position (`logits=None`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Sequence

import torch
import torch.nn.functional as F

from .lens import LensRows, logit_lens

DEFAULT_THUMB_SIZE = 64


@dataclass(frozen=True)
class AttentionCapture:
    token_ids: list[int]  # the T tokens that were run (after cropping, BOS included if added)
    cropped: int  # tokens dropped from the left to fit block_size
    thumbnails: torch.Tensor  # (L, nh, t, t) float32 on CPU; rows sum to 1, causal
    bin_edges: torch.Tensor  # (t + 1,) int64: thumbnail bin b covers positions [e[b], e[b+1])
    full: dict[int, torch.Tensor]  # layer -> (nh, T, T) float32 on CPU, for the requested layers
    entropy: torch.Tensor  # (L, nh) mean attention entropy in nats over queries 1..T-1
    prev_token: torch.Tensor  # (L, nh) mean weight on the previous token, queries 1..T-1
    first_token: torch.Tensor  # (L, nh) mean weight on position 0, queries 1..T-1
    lens: LensRows | None  # logit lens at the last position (None for an empty prompt)
    bos_added: bool = False
    meta: dict = field(default_factory=dict)

    @property
    def n_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def exact_thumbnails(self) -> bool:
        """True when no pooling happened: thumbnails are the full patterns."""
        return self.thumbnails.shape[-1] == self.n_tokens

    def pattern(self, layer: int, head: int) -> torch.Tensor:
        """(T, T) full-resolution pattern of one head, if this capture holds it."""
        if layer in self.full:
            return self.full[layer][head]
        if self.exact_thumbnails:
            return self.thumbnails[layer, head]
        raise KeyError(f"layer {layer} was captured as a thumbnail only; pass full_layers=[{layer}]")


def crop_to_block(ids: Sequence[int], block_size: int, bos: int | None = None) -> tuple[list[int], int]:
    """Keep the last tokens that fit `block_size` (with `bos` in front if given).

    Left-cropping keeps what the user typed last, which is what the attention at the end of
    the prompt depends on. Returns (ids, number of the user's tokens dropped).
    """
    room = block_size - (1 if bos is not None else 0)
    ids = list(ids)
    cropped = max(0, len(ids) - room)
    kept = ids[cropped:]
    return ([bos] if bos is not None else []) + kept, cropped


def pooling_edges(T: int, t: int) -> torch.Tensor:
    """t+1 increasing bin edges over 0..T (each bin non-empty since t <= T)."""
    return torch.div(torch.arange(t + 1) * T, t, rounding_mode="floor")  # (t+1,)


def pool_pattern(p: torch.Tensor, edges: torch.Tensor) -> torch.Tensor:
    """Mass-pool (nh, T, T) patterns to (nh, t, t): sum keys in a bin, average queries in a bin.

    Two matrix products with bin-membership matrices (BLAS, ~nh·T²·t flops: 10 ms for XL's
    25 heads at T=1024). Masked weights are exact zeros and so are their products, so
    pooling keeps the map exactly causal; rows still sum to 1.
    """
    T = p.shape[-1]
    t = len(edges) - 1
    bins = torch.bucketize(torch.arange(T), edges[1:], right=True)  # (T,) bin of each position
    member = F.one_hot(bins, t).to(device=p.device, dtype=torch.float32)  # (T, t)
    mean_q = (member / member.sum(0)).T.contiguous()  # (t, T) averages the queries of a bin
    return mean_q @ (p.float() @ member)  # (t, T) @ (nh, T, t) -> (nh, t, t)


ENTROPY_QUERIES = 256


def head_summary(p: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(nh, T, T) pattern -> entropy, previous-token and first-token scores, each (nh,).

    Averaged over queries 1..T-1: query 0 can only look at itself, so including it would
    pull every head towards "first-token head". With a single token: 0, 0 and 1.
    Entropy (a log per weight, the costly one) uses at most ENTROPY_QUERIES evenly spaced
    queries: exact for prompts up to that length, a close estimate of the mean beyond.
    """
    nh, T, _ = p.shape
    p = p.float()
    if T < 2:
        ones = torch.ones(nh, device=p.device)
        return torch.zeros_like(ones), torch.zeros_like(ones), ones
    rows = torch.arange(1, T)
    if len(rows) > ENTROPY_QUERIES:
        rows = rows[torch.linspace(0, len(rows) - 1, ENTROPY_QUERIES).round().long()]
    entropy = torch.special.entr(p[:, rows.to(p.device)]).sum(-1).mean(-1)  # (nh,) nats
    prev = p.diagonal(offset=-1, dim1=-2, dim2=-1).mean(-1)  # (nh,) p[t, t-1], t >= 1
    first = p[:, 1:, 0].mean(-1)  # (nh,)
    return entropy, prev, first


def capture_attention(
    model,
    ids: Sequence[int],
    *,
    full_layers: Iterable[int] = (),
    thumb_size: int = DEFAULT_THUMB_SIZE,
    lens_top_k: int = 5,
    bos: int | None = None,
) -> AttentionCapture:
    """Run `ids` once and capture attention as described in the module docstring.

    ids longer than block_size are cropped from the left (reported in `.cropped`); `bos`,
    if given, is put in front (TransformerLens's prepend_bos). An empty prompt returns an
    empty capture instead of running the model.
    """
    cfg = model.config
    L, nh = cfg.n_layer, cfg.n_head
    if thumb_size < 1:
        raise ValueError(f"thumb_size must be at least 1, got {thumb_size}")
    ids, cropped = crop_to_block(ids, cfg.block_size, bos)
    bad = [i for i in ids if not 0 <= i < cfg.vocab_size]
    if bad:
        raise ValueError(
            f"token id {bad[0]} is outside this model's vocabulary (vocab_size={cfg.vocab_size}); "
            f"use a model whose vocabulary covers the GPT-2 tokenizer (50257) or type other text"
        )
    full_layers = sorted({int(layer) for layer in full_layers})
    for layer in full_layers:
        if not 0 <= layer < L:
            raise ValueError(f"full_layers: layer {layer} does not exist (model has {L} layers, 0..{L - 1})")
    T = len(ids)
    t = min(T, thumb_size)
    edges = pooling_edges(T, t) if T else torch.zeros(1, dtype=torch.long)
    thumbs = torch.zeros(L, nh, t, t)
    entropy, prev, first = torch.zeros(L, nh), torch.zeros(L, nh), torch.zeros(L, nh)
    full: dict[int, torch.Tensor] = {}
    bos_added = bos is not None
    if T == 0:
        return AttentionCapture(ids, cropped, thumbs, edges, full, entropy, prev, first, None, bos_added)

    resid_last = torch.zeros(L, cfg.n_embd)
    wanted_full = set(full_layers)

    def on_pattern(layer: int):
        def hook(pattern: torch.Tensor, _hook) -> None:
            p = pattern[0]  # (nh, T, T)
            entropy[layer], prev[layer], first[layer] = (s.cpu() for s in head_summary(p))
            thumbs[layer] = (p.float() if t == T else pool_pattern(p, edges)).cpu()
            if layer in wanted_full:
                full[layer] = p.float().cpu() if t != T else thumbs[layer]

        return hook

    def on_resid(layer: int):
        def hook(x: torch.Tensor, _hook) -> None:
            resid_last[layer] = x[0, -1].float().cpu()  # (C,)

        return hook

    fwd_hooks = []
    for layer in range(L):
        fwd_hooks.append((f"blocks.{layer}.attn.hook_pattern", on_pattern(layer)))
        fwd_hooks.append((f"blocks.{layer}.hook_resid_post", on_resid(layer)))
    idx = torch.tensor([ids], dtype=torch.long, device=model.device)  # (1, T)
    with torch.inference_mode(), model.hooks(fwd_hooks):
        model(idx, logits=None)
    lens = logit_lens(model, resid_last, k=lens_top_k)
    return AttentionCapture(ids, cropped, thumbs, edges, full, entropy, prev, first, lens, bos_added)


def capture_bytes(n_layer: int, n_head: int, T: int, thumb_size: int, n_full_layers: int) -> int:
    """What a capture keeps, in bytes (float32): the bound quoted in the module docstring."""
    t = min(T, thumb_size)
    full = 0 if t == T else n_full_layers * n_head * T * T
    return 4 * (n_layer * n_head * t * t + full + 3 * n_layer * n_head)
