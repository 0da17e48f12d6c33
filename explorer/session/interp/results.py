"""What the interpretability domain hands out: attribution, patching and the head census.

Frozen dataclasses of numpy arrays and plain values: numpy only (tests/test_layers.py holds every
results.py to that), so panels, scripts and tests read them without the session's imports.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from explorer.session.results import AblationState


@dataclass(frozen=True)
class TokenChoice:
    id: int
    text: str  # the token as the tokenizer writes it (" Mary")


@dataclass(frozen=True)
class AttributionResult:
    """Direct logit attribution at the last position (see gptcore.interp.attribution)."""

    text: str
    token_ids: np.ndarray  # (T,) int64, what the model read (cropped to block_size)
    tokens: tuple[str, ...]
    target: TokenChoice
    contrast: TokenChoice | None  # None: the plain logit of the target
    heads: np.ndarray  # (L, nh) float64 direct effect of each head
    attn: np.ndarray  # (L,) each attention layer: its heads + its output bias
    mlps: np.ndarray  # (L,)
    embed: float
    bias: float
    total: float  # the model's logit difference; embed + bias + Σ heads + Σ mlps
    top: tuple[TokenChoice, ...]  # the model's most likely next tokens (with the ablation, if any)
    top_probs: np.ndarray  # (k,)
    ablation: AblationState
    version: int
    elapsed_s: float

    @property
    def n_layer(self) -> int:
        return self.heads.shape[0]

    @property
    def n_head(self) -> int:
        return self.heads.shape[1]


@dataclass(frozen=True)
class PatchingResult:
    """Activation patching maps, clean -> corrupted (see gptcore.interp.patching)."""

    clean_text: str
    corrupt_text: str
    tokens: tuple[str, ...]  # (T,) the clean prompt's tokens
    corrupt_tokens: tuple[str, ...]  # (T,)
    target: TokenChoice
    contrast: TokenChoice | None
    resid: np.ndarray  # (L, T) block input patched at one position
    attn: np.ndarray  # (L, T) attention output at one position
    mlp: np.ndarray  # (L, T) MLP output at one position
    heads: np.ndarray  # (L, nh) one head's output, every position
    ld_clean: float
    ld_corrupt: float
    ablation: AblationState
    version: int
    elapsed_s: float

    def map(self, kind: str) -> np.ndarray:
        return {"resid": self.resid, "attn": self.attn, "mlp": self.mlp, "heads": self.heads}[kind]


@dataclass(frozen=True)
class PatchedDistribution:
    """The next-token distribution of the corrupted prompt with one cell patched."""

    kind: str  # "resid", "attn", "mlp" or "heads"
    layer: int
    index: int  # position, or head for "heads"
    label: str  # "L3 H7" / "L3 ' John' (pos 5)"
    strings: tuple[str, ...]  # (k,) most likely tokens after the patch
    probs: np.ndarray  # (k,) their probability with the patch
    corrupt_probs: np.ndarray  # (k,) the same tokens without it
    version: int


@dataclass(frozen=True)
class HeadCensusResult:
    """Every head's previous-token and duplicate-token score (TL's head detector), induction
    scored on repeats of varied length and offset (1.0 = perfect), and the position-copy score
    (attention at one fixed offset on non-repeating tokens: the shortcut that fools a
    fixed-length census) with that offset. gptcore.interp.probes.census defines each."""

    previous_token: np.ndarray  # (L, nh)
    duplicate_token: np.ndarray  # (L, nh)
    induction: np.ndarray  # (L, nh)
    position_copy: np.ndarray  # (L, nh)
    position_offset: np.ndarray  # (L, nh) int: the offset d of position_copy (key i-d)
    sequence_length: int  # tokens of the random sequences scored on
    version: int

    def rows(self) -> list[tuple[int, int, float, float, float, float, int]]:
        """(layer, head, previous, duplicate, induction, position copy, its offset) per head, in layer order."""
        L, nh = self.previous_token.shape
        return [(l, h, float(self.previous_token[l, h]), float(self.duplicate_token[l, h]),
                 float(self.induction[l, h]), float(self.position_copy[l, h]), int(self.position_offset[l, h]))
                for l in range(L) for h in range(nh)]
