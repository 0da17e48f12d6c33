"""Attention capture: every layer's and head's pattern from ONE forward, in bounded memory.

A naive capture keeps `(n_head, T, T)` per layer: GPT-2 XL at T=1024 is 48 × 25 × 1024² × 4 B
≈ 5 GB. Instead each `hook_pattern` call reduces its layer on the spot, while the pattern is
still alive inside the forward, and lets it go:

- a thumbnail `(n_head, t, t)` with t <= thumb_size bins of a power-of-two width (see
  capture.py for why), pooled by *probability mass* (keys summed within a bin, queries
  averaged), so every thumbnail row still sums to 1 and stays causal (query and key bins
  share their edges); when T <= thumb_size it IS the pattern;
- per-head summary numbers (entropy, previous-token and first-token attention, means over
  every query 1..T-1: exact, and cheap to extend when rows are added);
- the full-resolution pattern only for the layers a view asks for (`full_layers`).

So the capture holds L·nh·t² + len(full_layers)·nh·T² floats (XL, T=1024, t=64, one full
layer: 20 MB + 105 MB). `incremental.AttentionState` keeps what the next prompt can reuse
(keys/values, pooled sums, per-row stats) and runs only the changed suffix; this one-shot
capture is that state run once from empty, so both give the same numbers. The forward also
reads each layer's residual stream at the last position for the logit lens and skips the
unembedding of every position (`logits=None`).
"""
from __future__ import annotations

from typing import Iterable, Sequence

from gptcore.interp.probes.capture import (AttentionCapture, DEFAULT_THUMB_SIZE, capture_bytes, crop_to_block, pool_pattern,
                      pooling_edges, pooling_width, slack_step)
from gptcore.interp.probes.incremental import AttentionState

__all__ = ["AttentionCapture", "AttentionState", "DEFAULT_THUMB_SIZE", "capture_attention", "capture_bytes",
           "crop_to_block", "pool_pattern", "pooling_edges", "pooling_width", "slack_step"]


def capture_attention(
    model,
    ids: Sequence[int],
    *,
    full_layers: Iterable[int] = (),
    thumb_size: int = DEFAULT_THUMB_SIZE,
    lens_top_k: int = 5,
    bos: int | None = None,
    crop_step: int = 1,
) -> AttentionCapture:
    """Run `ids` once and capture attention as described in the module docstring.

    ids longer than block_size are cropped from the left (reported in `.cropped`, a multiple of
    `crop_step`: see capture.crop_to_block); `bos`, if given, is put in front (TransformerLens's
    prepend_bos). An empty prompt returns an empty capture instead of running the model. To
    reuse an unchanged prefix across calls, keep an `AttentionState` instead.
    """
    state = AttentionState(model, full_layers=full_layers, thumb_size=thumb_size, lens_top_k=lens_top_k,
                           bos=bos, keep=False, crop_step=crop_step)
    return state.capture(ids)
