"""What the generation domain hands out: the prompt's context, the next-token distribution, streamed tokens.

Frozen dataclasses of numpy arrays and plain values: numpy only (tests/test_layers.py holds every
results.py to that), so panels, scripts and tests read them without the session's imports.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


# --- generation results ---
@dataclass(frozen=True)
class PromptContext:
    ids: np.ndarray  # (T,) int64, what the model reads (T <= block_size)
    text: str  # those ids decoded
    cropped: int  # tokens dropped from the front (prompt longer than block_size)
    total_tokens: int
    block_size: int
    start: str = ""  # "" unless the prompt was empty: what the model starts from, in words ("<|endoftext|>")
    start_why: str = ""  # why that token ("" for <|endoftext|>, which needs no reason)

    @property
    def from_start(self) -> bool:
        """The prompt was empty: the model reads only its start token."""
        return bool(self.start)


@dataclass(frozen=True)
class NextTokenLogits:
    logits: np.ndarray  # (V,) float32, the last position's logits
    context: PromptContext
    version: int  # Session.version they were computed with
    vocab_limit: int  # ids at or above this are padding, never drawn or shown


@dataclass(frozen=True)
class Distribution:
    ids: np.ndarray  # (K,) int64 rows, most probable first (masked rows last)
    strings: tuple[str, ...]
    probs: np.ndarray  # (K,) after the settings, 0 where masked
    model_probs: np.ndarray  # (K,) softmax(logits), T = 1, nothing masked
    masked_count: int  # tokens (of `vocab`) the settings made impossible
    masked_mass: float  # the model's probability mass on them
    vocab: int
    entropy_bits: float  # of the distribution after the settings


@dataclass(frozen=True)
class GeneratedToken:
    token: int
    text: str  # "" while a multi-byte character is incomplete
    prob: float  # after the settings: what it was drawn with
    alternatives: tuple[tuple[str, float], ...]  # (token text, probability), most likely first, incl. this token
    position: int
    capture_s: float = 0.0  # seconds this token spent capturing CUDA graphs first (the first of a new shape only)


