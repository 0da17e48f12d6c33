"""What the session hands out: frozen dataclasses of numpy arrays and plain values.

They live apart from `session.py` so that whoever only reads results (panels, controllers,
scripts, tests) never needs the session's imports: this module imports numpy and nothing
else heavy (no torch, no gptcore, no Qt; tests/test_layers.py holds it to that).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import PurePath

import numpy as np


# --- the model ---
@dataclass(frozen=True)
class RunStep:
    """Where a model's weights come from when they are a training run's kept step: a typed fact
    every view reads (banner, badge, status bar, Train, Routes), never parsed back from text."""
    root: str  # the run folder
    scheme: str  # the init scheme (a run may train several side by side)
    step: int  # the training step whose weights these are
    max_iters: int = 0  # the run's planned length (0: not known)
    schemes: int = 1  # how many schemes the run trains

    @property
    def run_name(self) -> str:
        """The run folder's own name ("2026-12-02_05-10-33")."""
        return PurePath(self.root).name

    def where(self) -> str:
        """"step 1,200 of 2,000" (+ "(gpt2 init)" when the run trains several schemes)."""
        text = f"step {self.step:,} of {self.max_iters:,}" if self.max_iters else f"step {self.step:,}"
        return f"{text} ({self.scheme} init)" if self.schemes > 1 else text


@dataclass(frozen=True)
class ModelInfo:
    name: str
    trained: bool
    source: str
    config: dict = field(default_factory=dict)  # GPTConfig.to_dict()
    device: str = "cpu"
    dtype: str = "float32"
    n_params: int = 0
    memory_bytes: int = 0
    tied: bool = True
    note: str = ""  # "" or why the model is what it is (e.g. the untrained label)
    status: str = ""  # "trained" | "untrained" | "loaded" (weights of unknown provenance); "" = from `trained`
    provenance: str = ""  # why the status is what it is
    tokenizer: str = ""  # which tokenizer reads its text, and why
    heads_note: str = ""  # "" or that the head count was given by the user (the file does not record it)
    run: RunStep | None = None  # the training run and step these weights are, if they are one

    @property
    def status_word(self) -> str:
        return self.status or ("trained" if self.trained else "untrained")

    @property
    def loaded(self) -> bool:
        return self.n_params > 0


NO_MODEL = ModelInfo(name="(no model yet)", trained=False, source="", note="loading…")


# --- residual results ---
@dataclass(frozen=True)
class ResidualResult:
    curves: object  # gptcore.interp.probes.residual.Curves: numpy (S, K, P) values, x, labels, schemes, seeds
    reference: np.ndarray | None  # (P',) the loaded trained model's own curve, or None
    reference_name: str  # the model it was measured on ("" without one)
    version: int  # Session.version when measured
    elapsed_s: float  # seconds the scheme × seed sweep took


@dataclass(frozen=True)
class ReferenceCurve:
    x: np.ndarray  # (P,) layer-boundary positions of the loaded model
    y: np.ndarray  # (P,) its norms
    name: str
    version: int


@dataclass(frozen=True)
class GradientResult:
    curves: object  # gptcore.interp.probes.residual.Curves with quantity "grad-params" / "grad-stream"
    version: int
    elapsed_s: float


# --- generation results ---
@dataclass(frozen=True)
class PromptContext:
    ids: np.ndarray  # (T,) int64, what the model reads (T <= block_size)
    text: str  # those ids decoded
    cropped: int  # tokens dropped from the front (prompt longer than block_size)
    total_tokens: int
    from_eot: bool  # the prompt was empty: the model starts from <|endoftext|>
    block_size: int


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


# --- attribution, ablation, patching (issue 14) ---
@dataclass(frozen=True)
class AblationState:
    """The session's ablated components; every panel's computation runs with them knocked out."""

    heads: tuple[tuple[int, int], ...] = ()
    mlps: tuple[int, ...] = ()
    mode: str = "zero"  # "zero" or "mean" (over the sample prompts' positions)
    features: tuple[tuple[int, float], ...] = ()  # (feature, value) held by the Features panel (issue 33)
    feature_source: str = ""  # which dictionary those features are of ("SAE on layer 1 …")

    @property
    def active(self) -> bool:
        return bool(self.heads or self.mlps or self.features)

    def text(self) -> str:
        """'3 heads ablated', '1 head + 2 MLPs ablated (mean)', '… · feature 12 → 5', '' when nothing is."""
        parts = []
        if self.heads:
            parts.append(f"{len(self.heads)} head{'s' if len(self.heads) != 1 else ''}")
        if self.mlps:
            parts.append(f"{len(self.mlps)} MLP{'s' if len(self.mlps) != 1 else ''}")
        words = []
        if parts:
            words.append(" + ".join(parts) + " ablated" + ("" if self.mode == "zero" else f" ({self.mode})"))
        if self.features:
            words.append(self.features_text())
        return " · ".join(words)

    def features_text(self) -> str:
        """'feature 12 ablated', 'feature 7 → 5', '3 features edited' ('' when none)."""
        if not self.features:
            return ""
        if len(self.features) == 1:
            feature, value = self.features[0]
            return f"feature {feature} ablated" if value == 0 else f"feature {feature} → {value:g}"
        return f"{len(self.features)} features edited"


NO_ABLATION = AblationState()


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
