"""What an attention capture hands out, and the pure helpers that shape it (no forward here).

Split from `attention.py` so that both the one-shot capture and the prefix-reusing state
(`incremental.py`) build the very same `AttentionCapture` with the very same pooling rule.

Pooling rule (why powers of two): a thumbnail bin is `w` consecutive positions, `w` the
smallest power of two that needs at most `thumb_size` bins (the last bin may be shorter).
Bins of a prompt then never move when tokens are appended: a longer prompt either keeps `w`
(new rows and one more bin) or doubles it (two old bins become one, by addition). So the
pooled sums of unchanged rows can be kept and reused exactly, which an even split of 0..T
into `thumb_size` bins (edges moving with every token) would not allow. The price: between
`thumb_size / 2` and `thumb_size` bins instead of exactly `thumb_size`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import torch
import torch.nn.functional as F

from gptcore.interp.probes.lens import LensRows
from gptcore.interp.probes.pattern_fields import PatternFields

DEFAULT_THUMB_SIZE = 64


@dataclass(frozen=True)
class AttentionCapture(PatternFields):
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
    meta: dict = field(default_factory=dict)  # reused_tokens, computed_tokens (incremental runs)


def crop_to_block(ids: Sequence[int], block_size: int, bos: int | None = None,
                  step: int = 1) -> tuple[list[int], int]:
    """Keep the last tokens that fit `block_size` (with `bos` in front if given).

    Left-cropping keeps what the user typed last, which is what the attention at the end of
    the prompt depends on. Returns (ids, number of the user's tokens dropped).

    `step` > 1 crops with slack: the number dropped is rounded up to a multiple of `step`, so
    the window's first token moves only every `step` tokens. Cropping exactly (step 1) moves
    every position at every keystroke past block_size, and each key is then a full forward
    (9.5 s at 2,002 tokens, block 1024); with slack the next keys append to an unchanged
    window and reuse its prefix. The price: up to `step - 1` fewer tokens of context.
    """
    room = block_size - (1 if bos is not None else 0)
    ids = list(ids)
    over = len(ids) - room
    step = max(1, min(int(step), room))
    cropped = 0 if over <= 0 else min(len(ids), -(-over // step) * step)
    kept = ids[cropped:]
    return ([bos] if bos is not None else []) + kept, cropped


def slack_step(block_size: int) -> int:
    """The crop step a live view uses: an eighth of the window (128 tokens of GPT-2's 1,024).
    Each step costs one full forward per `step` keys past block_size and at most `step - 1`
    tokens of context; an eighth keeps both small."""
    return max(1, int(block_size) // 8)


def check_capture_args(cfg, ids: Sequence[int], full_layers, thumb_size: int) -> list[int]:
    """Refuse what a capture cannot serve, naming the fix; returns the sorted full layers."""
    if thumb_size < 1:
        raise ValueError(f"thumb_size must be at least 1, got {thumb_size}")
    bad = [i for i in ids if not 0 <= i < cfg.vocab_size]
    if bad:
        raise ValueError(
            f"token id {bad[0]} is outside this model's vocabulary (vocab_size={cfg.vocab_size}); "
            f"use a model whose vocabulary covers the GPT-2 tokenizer (50257) or type other text"
        )
    layers = sorted({int(layer) for layer in full_layers})
    for layer in layers:
        if not 0 <= layer < cfg.n_layer:
            raise ValueError(f"full_layers: layer {layer} does not exist "
                             f"(model has {cfg.n_layer} layers, 0..{cfg.n_layer - 1})")
    return layers


def pooling_width(T: int, t: int) -> int:
    """Positions per thumbnail bin: the smallest power of two giving at most `t` bins."""
    w = 1
    while -(-T // w) > t:
        w *= 2
    return w


def pooling_edges(T: int, t: int) -> torch.Tensor:
    """Bin edges over 0..T (see the module docstring): multiples of pooling_width, then T."""
    if T == 0:
        return torch.zeros(1, dtype=torch.long)
    w = pooling_width(T, t)
    n = -(-T // w)
    return torch.clamp(torch.arange(n + 1) * w, max=T)  # (n+1,)


def pool_pattern(p: torch.Tensor, edges: torch.Tensor) -> torch.Tensor:
    """Mass-pool (nh, T, T) patterns to (nh, t, t) over any edges: sum keys in a bin,
    average queries in a bin. Masked weights are exact zeros, so pooling keeps the map
    exactly causal (query and key bins share edges) and rows still sum to 1.
    The captures pool with `bin_sum` instead; this general form is the reference in tests."""
    T = p.shape[-1]
    t = len(edges) - 1
    bins = torch.bucketize(torch.arange(T), edges[1:], right=True)  # (T,) bin of each position
    member = F.one_hot(bins, t).to(device=p.device, dtype=torch.float32)  # (T, t)
    mean_q = (member / member.sum(0)).T.contiguous()  # (t, T) averages the queries of a bin
    return mean_q @ (p.float() @ member)  # (t, T) @ (nh, T, t) -> (nh, t, t)


def bin_sum(x: torch.Tensor, width: int, dim: int) -> torch.Tensor:
    """Sum runs of `width` along `dim` (zero-padded at the end): (…, n, …) -> (…, ceil(n/width), …)."""
    if width == 1:
        return x
    n = x.shape[dim]
    bins = -(-n // width)
    x = x.movedim(dim, -1)
    x = F.pad(x, (0, bins * width - n)).unflatten(-1, (bins, width)).sum(-1)
    return x.movedim(-1, dim)


def row_stats(p: torch.Tensor, first_row: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(…, n, S) rows of a pattern (…: heads, or layers and heads), row i at position first_row + i ->
    entropy (nats), weight on the previous token and weight on position 0, each (…, n).
    Kept per row so that a longer prompt only adds rows; the head scores are their means."""
    *lead, n, S = p.shape
    entropy = torch.special.entr(p).sum(-1)  # (…, n)
    pos = torch.arange(first_row, first_row + n, device=p.device)  # (n,)
    prev = p.gather(-1, (pos - 1).clamp(min=0).expand(*lead, n)[..., None])[..., 0]  # (…, n) p[t, t-1]
    first = p[..., 0]  # (…, n)
    return entropy, prev, first


def head_scores(entropy: torch.Tensor, prev: torch.Tensor, first: torch.Tensor, T: int):
    """Per-row stats (…, ≥T) -> per-head means over queries 1..T-1 (…,).

    Query 0 can only look at itself, so including it would pull every head towards
    "first-token head". With a single token: 0, 0 and 1."""
    if T < 2:
        ones = torch.ones(entropy.shape[:-1], device=entropy.device)
        return torch.zeros_like(ones), torch.zeros_like(ones), ones
    return tuple(s[..., 1:T].mean(-1) for s in (entropy, prev, first))


def capture_bytes(n_layer: int, n_head: int, T: int, thumb_size: int, n_full_layers: int) -> int:
    """What a capture hands out, in bytes (float32): the bound quoted in attention.py."""
    t = len(pooling_edges(T, thumb_size)) - 1
    full = 0 if t == T else n_full_layers * n_head * T * T
    return 4 * (n_layer * n_head * t * t + full + 3 * n_layer * n_head)
