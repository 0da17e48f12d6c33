"""What the Features domain hands out (issue 33): frozen dataclasses of numpy arrays and plain values.

Numpy only (no torch, no Qt): the panel and scripts read these without the session's imports.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

SITES = {"resid": "residual stream after the block", "mlp": "MLP output"}


@dataclass(frozen=True)
class FeatureSource:
    """Which dictionary the features come from: a layer's MLP neurons, or an SAE on one site."""

    kind: str  # "neurons" | "sae"
    layer: int
    site: str  # "resid" | "mlp" (neurons: always the MLP's hidden units)
    hook: str  # the hook point it reads, e.g. "blocks.1.hook_resid_post"
    width: int  # how many features
    k: int = 0  # the SAE's top-k (0 for neurons)
    folder: str = ""  # where the SAE is saved ("" for neurons)
    lineage: str = ""  # equal for dictionaries whose feature i is the same feature: a layer's neurons at any
    #                    step, an SAE and the SAEs the walk over training fitted from it (a fresh SAE: a new one)

    def describe(self) -> str:
        if self.kind == "neurons":
            return f"layer {self.layer} MLP neurons ({self.width:,}, no training)"
        return f"SAE on layer {self.layer} {SITES[self.site]} (width {self.width:,}, k {self.k})"


@dataclass(frozen=True)
class FeatureTable:
    """Every feature's statistics over the corpus sample (held-out tokens)."""

    source: FeatureSource
    ids: np.ndarray  # (F,) int
    density: np.ndarray  # (F,) fraction of tokens where the feature is active (> 0)
    max_act: np.ndarray  # (F,) largest activation seen
    logit_effect: np.ndarray  # (F,) the largest logit its decoder direction adds through the unembedding
    labels: tuple[str, ...]  # (F,) the token where it fires most ("" if it never fires)
    tokens: int  # how many tokens the statistics are over
    corpus: str  # what those tokens are
    metrics: dict = field(default_factory=dict)  # SAE metrics (l0, explained_variance, …); {} for neurons
    metrics_on: str = ""  # what the metrics were measured on (saved with them beside the SAE)
    version: int = 0

    @property
    def dead_fraction(self) -> float:
        return float(np.mean(self.density == 0)) if self.density.size else 0.0


@dataclass(frozen=True)
class FeatureDetail:
    """One feature: its top contexts, histogram, and what its direction promotes and suppresses."""

    feature: int
    title: str
    contexts: tuple  # of (tokens: list[str], acts: np.ndarray (n,)), strongest first
    hist_edges: np.ndarray  # (B+1,) over the active values
    hist_counts: np.ndarray  # (B,)
    density: float
    max_act: float
    promoted: tuple  # of (token, logit), strongest first
    suppressed: tuple  # of (token, logit), most negative first
    version: int = 0


@dataclass(frozen=True)
class PromptFeatures:
    """The features on each token of a prompt: the selected one's activation, and each token's top ones."""

    text: str
    tokens: tuple[str, ...]
    selected: int | None
    selected_acts: np.ndarray | None  # (T,) the selected feature's activation per token
    top_ids: np.ndarray  # (T, n) the most active features per token
    top_acts: np.ndarray  # (T, n)
    version: int = 0
