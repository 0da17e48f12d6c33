"""What the Circuits domain hands out (issue 38): frozen dataclasses of numpy arrays and plain values.

Numpy only (no torch, no Qt): the panel and scripts read these without the session's imports.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

KIND_FEATURE, KIND_ERROR, KIND_TOKEN, KIND_LOGIT = 0, 1, 2, 3


@dataclass(frozen=True)
class TranscoderSet:
    """The transcoders in use: one per layer, where they are saved, and their metrics (measured once on
    held-out text of the model itself and saved beside them; {} until measured)."""

    folder: str
    n_layer: int
    width: int
    k: int
    step: int | None = None  # the run's step they were trained on (None: not a run's model)
    walked: bool = False  # fitted by the walk over the run's steps (warm-started), not trained by hand
    metrics: dict = field(default_factory=dict)  # fvu, l0, dead_fraction (per layer), ce_* (one number each)
    measured_on: str = ""  # the text the metrics were measured on, in words
    version: int = 0

    def describe(self) -> str:
        how = " (walked from a neighbouring step)" if self.walked else ""
        return f"transcoders, width {self.width:,}, k {self.k}, {self.n_layer} layers{how}"


@dataclass(frozen=True)
class CircuitGraph:
    """One prompt's attribution graph, pruned: only the kept nodes and edges, ready to draw.

    Node arrays are over the kept nodes, in the full graph's order (features, errors, tokens, logits);
    edges index into them. Influence is each node's influence on the logits (prune.py's: logit-probability
    weighted, through the row-normalised |adjacency|); `error_share` = the error nodes' influence over the
    features' and errors' together, over the *whole* graph: how much of what the MLPs contribute the
    transcoders do not explain."""

    tokens: tuple[str, ...]  # (T,) the prompt's tokens
    n_layers: int
    node_ids: np.ndarray  # (K,) each kept node's index in the full graph
    kind: np.ndarray  # (K,) KIND_*
    layer: np.ndarray  # (K,) -1 for tokens, n_layers for logits
    position: np.ndarray  # (K,)
    feature: np.ndarray  # (K,) the transcoder feature's index (-1 for other kinds)
    value: np.ndarray  # (K,) a feature's activation, an error's norm, a logit's probability (0 for tokens)
    influence: np.ndarray  # (K,)
    labels: tuple[str, ...]  # (K,) "L1 #421", "err L0", "'e'", "'u' 41%"
    edge_src: np.ndarray  # (E,) indices into the kept nodes
    edge_dst: np.ndarray  # (E,)
    edge_weight: np.ndarray  # (E,) the signed direct effect (adjacency[target, source])
    logit_tokens: tuple[str, ...]  # the logit nodes' tokens, most probable first
    logit_probs: np.ndarray
    error_share: float
    n_nodes: int  # the full graph's size
    n_features: int  # active features in the full graph
    node_threshold: float
    edge_threshold: float
    seconds: float  # the graph's computation (not the pruning)
    text: str = ""
    step: int | None = None  # the run's step shown, if a run's model
    edits: tuple = ()  # ((layer, feature), value) of the transcoder features held while it was computed
    note: str = ""  # what else shaped it (another panel's feature edit, frozen into the prompt's run)
    version: int = 0

    @property
    def n_kept(self) -> int:
        return int(self.node_ids.size)


@dataclass(frozen=True)
class NodeDetail:
    """One node of the graph: what it is, and for a feature what it reads and writes (its top contexts
    on held-out text, the tokens its decoder row promotes and suppresses), and its strongest edges."""

    node: int  # index in the full graph
    kind: str  # "feature" | "error" | "token" | "logit"
    title: str
    layer: int
    feature: int  # -1 unless a feature
    contexts: tuple = ()  # of (tokens list[str], activations (n,)), strongest first
    promoted: tuple = ()  # of (token, logit)
    suppressed: tuple = ()
    incoming: tuple = ()  # of (label, weight, kept index or -1), strongest |weight| first
    outgoing: tuple = ()
    corpus: str = ""
    version: int = 0


@dataclass(frozen=True)
class CircuitFormation:
    """When this prompt's circuit formed over a run's kept steps (see explorer/session/circuits/formation.py):
    the weight of its last link — the strongest kept feature → top-logit edge at the last step — at each step."""

    steps: np.ndarray  # (S,) ascending
    weights: np.ndarray  # (S,) the link's weight at each step (0 where it is not in that step's graph)
    final_weight: float
    formed_step: int | None  # the first step from which the weight stays at or above SHARE of its final value
    link: str  # "L1 #421 @5 → 'u'" ("" when no feature carries the top logit at the last step)
    token: str  # the top logit's token at the last step
    share: float  # the threshold, e.g. 0.5
    text: str = ""
