"""What the attention domain hands out: one prompt's attention, every layer and head.

Frozen dataclasses of numpy arrays and plain values: numpy only (tests/test_layers.py holds every
results.py to that), so panels, scripts and tests read them without the session's imports.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


# --- attention results ---
@dataclass(frozen=True)
class AttentionResult:
    """One prompt's attention, every layer and head (see gptcore.interp.probes.attention)."""

    text: str  # the prompt as given
    token_ids: np.ndarray  # (T,) int64, what the model read (after cropping; BOS first if added)
    tokens: tuple[str, ...]  # (T,) token texts
    cropped: int  # the user's tokens dropped from the left to fit block_size
    total_tokens: int  # the user's tokens before cropping
    block_size: int
    bos_added: bool
    thumbnails: np.ndarray  # (L, nh, t, t) float32, t <= thumb size bins of 2^k tokens; rows sum to 1, causal
    bin_edges: np.ndarray  # (t + 1,) thumbnail bin b covers token positions [e[b], e[b+1])
    full: dict  # layer -> (nh, T, T) float32 full resolution: the requested layers, or every layer when
    #             nothing was pooled (views of `thumbnails`); decided by gptcore (PatternFields)
    entropy: np.ndarray  # (L, nh) mean attention entropy (nats), queries 1..T-1
    prev_token: np.ndarray  # (L, nh) mean weight on the previous token
    first_token: np.ndarray  # (L, nh) mean weight on position 0
    lens_ids: np.ndarray  # (L, k) logit lens at the last position: top tokens after each layer
    lens_probs: np.ndarray  # (L, k)
    lens_tokens: tuple[tuple[str, ...], ...]  # (L, k) their texts
    version: int  # Session.version it was computed with
    forward_s: float  # seconds the capture forward took
    reused_tokens: int = 0  # leading tokens served from the previous prompt's kept state
    exact: bool = False  # the thumbnails are the full patterns (no pooling), as gptcore decided
    crop_step: int = 1  # past block_size the window's start moves this many tokens at a time (crop with slack)

    @property
    def n_layer(self) -> int:
        return self.thumbnails.shape[0]

    @property
    def n_head(self) -> int:
        return self.thumbnails.shape[1]

    @property
    def n_tokens(self) -> int:
        return len(self.token_ids)

    def has_full(self, layer: int) -> bool:
        return layer in self.full

    def pattern(self, layer: int, head: int) -> np.ndarray:
        """(T, T) full-resolution pattern of one head, if captured (see has_full)."""
        if layer not in self.full:
            raise KeyError(f"layer {layer} was captured as thumbnails only")
        return self.full[layer][head]


