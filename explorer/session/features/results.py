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


# -- the feature dashboard (issue 39): what SAEDashboard and Neuronpedia show for one feature ----------------

@dataclass(frozen=True)
class Example:
    """One window of held-out text around the token it was picked for."""

    tokens: tuple[str, ...]
    acts: np.ndarray  # (n,) the feature's activation on each token
    qualifying: int  # index in `tokens` of the token it was picked for
    row: int  # that token's row among the held-out tokens


@dataclass(frozen=True)
class ExampleGroup:
    """Examples picked alike: the strongest ("top"), at random among the tokens whose activation lies in
    one interval of (0, max] ("interval"), or at random among every token where the feature fires ("random")."""

    kind: str  # "top" | "interval" | "random"
    name: str  # what the panel writes above the group
    low: float  # the interval (low, high]; top: (-1, max)
    high: float
    contains: float  # fraction of all held-out tokens with an activation in (low, high]; -1 for "top"
    examples: tuple[Example, ...]


@dataclass(frozen=True)
class FeatureDashboard:
    """One feature beyond its top contexts: example groups at several activation levels and at random,
    its nearest features by decoder cosine, and what its direction does to every logit."""

    feature: int
    before: int  # context tokens before the picked token
    after: int  # and after it
    groups: tuple[ExampleGroup, ...]  # top, the intervals from the highest down, random
    neighbour_ids: np.ndarray  # (m,) nearest other features, most similar first
    neighbour_cosines: np.ndarray  # (m,) cosine of their decoder (write) directions with this one's
    neighbour_labels: tuple[str, ...]  # (m,) the table's label of each
    logit_hist_edges: np.ndarray  # (B+1,) over every token's logit change through the unembedding
    logit_hist_counts: np.ndarray  # (B,)
    alignment_ids: np.ndarray  # (3,) the coordinates of the write direction largest in size
    alignment_values: np.ndarray  # (3,) their values
    alignment_l1: np.ndarray  # (3,) |value| / L1 norm of the direction
    held_out: tuple  # (sequences, tokens per sequence) the examples are drawn from
    version: int = 0


@dataclass(frozen=True)
class DensityHistogram:
    """How often every feature of the dictionary fires: a histogram of log10(density) over the features
    that fired at all; the dead ones (never fired: no logarithm) and the dense ones counted apart."""

    edges: np.ndarray  # (B+1,) log10 density, from log10(1 / tokens) (one firing) to 0 (every token)
    counts: np.ndarray  # (B,) features per bin
    dead: int  # features that never fired on the held-out tokens
    dense: int  # features firing on more than `dense_at` of them
    dense_at: float  # e.g. 0.1
    features: int
    tokens: int
