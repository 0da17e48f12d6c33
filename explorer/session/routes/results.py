"""What the routes domain hands out: frozen dataclasses of numpy arrays and plain values.

Beside results.py (same rule: numpy only, no torch, no gptcore, no Qt) so the Routes view and
its controller read them without the session's imports.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from explorer.session.results import NO_ABLATION, AblationState

NODE_KINDS = ("X", "A", "M", "I")  # input token, after attention, the MLP, after the block


@dataclass(frozen=True)
class RoutesResult:
    """The shares of every part of every block for one prompt (gptcore.information_flow), kept so
    the threshold and the chosen position re-draw without recomputing."""

    text: str
    token_ids: np.ndarray  # (T,) int64
    tokens: tuple[str, ...]
    attn: np.ndarray  # (L, T, T, nh) [layer, target i, source j, head]
    attn_residual: np.ndarray  # (L, T)
    mlp: np.ndarray  # (L, T)
    mlp_residual: np.ndarray  # (L, T)
    predicted_ids: np.ndarray  # (T,) the model's top-1 next token after each position
    predicted_texts: tuple[str, ...]  # (T,)
    predicted_probs: np.ndarray  # (T,) its probability
    replaced_heads: tuple[tuple[int, int], ...] = ()  # heads an ablation replaced (their shares at the floor)
    cropped: int = 0  # tokens cut from the left to fit block_size
    ablation: AblationState = NO_ABLATION
    version: int = 0
    elapsed_s: float = 0.0  # information_flow + the logits forward
    rows_only: bool = False  # a long prompt: attn is (L, T, 0, nh) and attn_residual zeros; the session
    # keeps the forward and computes the rows a graph needs (gptcore.RouteState), never the T x T whole

    @property
    def n_layer(self) -> int:
        return int(self.attn.shape[0])

    @property
    def n_tokens(self) -> int:
        return int(self.attn.shape[1])

    @property
    def n_head(self) -> int:
        return int(self.attn.shape[3])


@dataclass(frozen=True)
class RouteGraph:
    """gptcore.flow_graph's edges as arrays the view draws at once. Nodes are numbered; node k is
    (node_kind[k] index into NODE_KINDS, node_layer[k], node_pos[k]) and `names[k]` the tool's name."""

    threshold: float
    position: int  # the chosen position (>= 0)
    names: tuple[str, ...]  # (N,) "X0_3", "A2_5", "M2_5", "I2_5"
    node_kind: np.ndarray  # (N,) int8
    node_layer: np.ndarray  # (N,) int
    node_pos: np.ndarray  # (N,) int
    src: np.ndarray  # (E,) node index
    dst: np.ndarray  # (E,) node index
    weight: np.ndarray  # (E,) float
    on_route: np.ndarray  # (E,) bool: reachable backwards from the chosen position's last output
    is_attention: np.ndarray  # (E,) bool: I{l-1}_j -> A{l}_i
    heads: np.ndarray  # (E, nh) per-head weight of an attention edge (0 elsewhere)
    residual: np.ndarray  # (E,) the residual share an attention edge j == i carries (0 elsewhere)
    target_id: int = -1  # the chosen token: the top-1 prediction after `position`
    target_text: str = ""
    target_prob: float = 0.0
    version: int = 0
    window: tuple[int, int] | None = None  # (lo, hi): grey edges only into positions lo..hi-1 (None: all drawn)
    route_below: float = float("nan")  # the threshold under which the route reaches an attention edge

    @property
    def n_edges(self) -> int:
        return int(len(self.src))

    @property
    def n_route(self) -> int:
        return int(np.count_nonzero(self.on_route))


@dataclass(frozen=True)
class BlockEffect:
    """What one node writes, read through the unembedding: the tokens it pushes up and down."""

    node: str  # "A3_7" / "M3_7"
    title: str
    promoted: tuple[tuple[str, float], ...]
    suppressed: tuple[tuple[str, float], ...]
    version: int = 0


@dataclass(frozen=True)
class EdgeTest:
    """One attention edge removed from the residual update, measured: Δ log p of the chosen token."""

    layer: int
    head: int
    source: int  # token j read
    target: int  # position i written
    route_weight: float  # that head's weight on the edge after the threshold (renormalised), as drawn
    delta_logprob: float
    token_text: str  # the chosen token
    version: int = 0
    share: float = float("nan")  # that head's raw share (before the threshold), as the ranking table shows


@dataclass(frozen=True)
class HeadRanking:
    """Every head into one position: its route weight beside the measured removal effect."""

    position: int
    labels: tuple[str, ...]  # "L1 H3"
    route: np.ndarray  # (n,) Σ_j attn[l, position, j, h]
    effect: np.ndarray  # (n,) Δ log p of the chosen token without that head's update at `position`
    spearman: float  # rank correlation of route weight and −effect (nan when undefined)
    token_text: str
    version: int = 0
    elapsed_s: float = 0.0


@dataclass(frozen=True)
class RoutesOverTraining:
    """The strongest routes' weights at each probe of the run the session's model comes from."""

    steps: np.ndarray  # (S,)
    series: dict = field(default_factory=dict)  # route label -> (S,) weights (nan where not kept)
    prompt: str = ""
    run: str = ""
