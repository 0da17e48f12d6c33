"""The graph of information-flow routes, on the LLM Transparency Tool's node names:

    X0_j   the input token j (embeddings)
    A{l}_i the residual stream at position i after layer l's attention (resid_mid)
    M{l}_i layer l's MLP at position i
    I{l}_i the residual stream at position i after block l (resid_post)

Edges (weights from `information_flow`'s shares, after thresholding): I{l-1}_j -> A{l}_i weighs
Σ_h attn[l, i, j, h], plus the attention residual share when j == i (for l = 0 the source is
X0_j); A{l}_i -> M{l}_i and M{l}_i -> I{l}_i weigh mlp[l, i]; A{l}_i -> I{l}_i weighs
mlp_residual[l, i]. Thresholding is the paper's: in each representation (one whole) every share
<= threshold is zeroed and the rest renormalised to sum to 1, so any edge left weighs more than
the threshold. The route to a position is every edge reachable backwards from I{L-1}_position.

Numpy only (no torch): re-thresholding on a slider is a few array operations and a walk.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from gptcore.interp.flow import FlowContributions, FlowError

Edge = tuple[str, str, float]
_NODE = re.compile(r"^(X|A|M|I)(\d+)_(\d+)$")


def node_name(kind: str, layer: int, token: int) -> str:
    """'A', 3, 5 -> 'A3_5'; the attention source below layer 0 is X0_j."""
    return f"{kind}{layer}_{token}"


def parse_node(name: str) -> tuple[str, int, int]:
    """'A3_5' -> ('A', 3, 5). Raises FlowError for anything else."""
    m = _NODE.match(name)
    if not m:
        raise FlowError(f"{name!r} is not a route node; nodes are named X0_j, A<layer>_<token>, "
                        f"M<layer>_<token> or I<layer>_<token>")
    return m.group(1), int(m.group(2)), int(m.group(3))


def source_node(layer: int, token: int) -> str:
    return f"I{layer - 1}_{token}" if layer > 0 else f"X0_{token}"


def threshold_shares(c: FlowContributions, threshold: float):
    """(attn (L,T,T,nh), attn_residual (L,T), mlp (L,T), mlp_residual (L,T)) with every share
    <= threshold zeroed and each representation's survivors renormalised (all zero if none survive)."""
    return (*threshold_attention(c.attn, c.attn_residual, threshold),
            *threshold_mlp(c.mlp, c.mlp_residual, threshold))


def threshold_attention(attn: np.ndarray, attn_residual: np.ndarray, threshold: float):
    """attn (..., T, nh) and attn_residual (...) of the same representations -> both thresholded
    and renormalised (flow_route.py calls it on single rows: the same operations, the same numbers)."""
    attn = np.where(attn > threshold, attn, 0.0).astype(np.float32)
    ares = np.where(attn_residual > threshold, attn_residual, 0.0).astype(np.float32)
    denom = attn.sum(axis=(-2, -1)) + ares  # (...)
    scale = np.divide(1.0, denom, out=np.zeros_like(denom), where=denom > 0)
    return attn * scale[..., None, None], ares * scale


def threshold_mlp(mlp: np.ndarray, mlp_residual: np.ndarray, threshold: float):
    """mlp and mlp_residual (any shape, the same) -> both thresholded and renormalised, float32."""
    mlp = np.where(mlp > threshold, mlp, 0.0)
    mres = np.where(mlp_residual > threshold, mlp_residual, 0.0)
    mden = mlp + mres
    mscale = np.divide(1.0, mden, out=np.zeros_like(mden), where=mden > 0)
    return (mlp * mscale).astype(np.float32), (mres * mscale).astype(np.float32)


@dataclass(frozen=True)
class FlowGraph:
    """Every edge of the thresholded graph, the route to `position`, and the per-head split."""

    edges: tuple[Edge, ...]  # (src, dst, weight), every edge with weight > 0 after thresholding
    route: tuple[Edge, ...]  # the edges reachable backwards from I{L-1}_position
    position: int  # the (non-negative) position the route leads to
    threshold: float
    n_layer: int
    n_tokens: int
    head_shares: np.ndarray  # (L, T, T, nh) thresholded, renormalised [layer, target, source, head]
    residual_shares: np.ndarray  # (L, T) thresholded attention-residual share (in the j == i edge)

    @property
    def output_node(self) -> str:
        return f"I{self.n_layer - 1}_{self.position}"

    @property
    def route_nodes(self) -> tuple[str, ...]:
        """Every node on the route (the output node included), in edge order."""
        seen = {self.output_node: None}
        for src, dst, _ in self.route:
            seen.setdefault(dst)
            seen.setdefault(src)
        return tuple(seen)

    def head_weights(self, src: str, dst: str) -> np.ndarray:
        """(nh,) each head's share in the attention edge src -> dst (the residual share of a j == i
        edge is not in it: see `residual_weight`). Raises FlowError for a non-attention edge."""
        kind_d, layer, i = parse_node(dst)
        kind_s, layer_s, j = parse_node(src)
        expected = source_node(layer, j)
        if kind_d != "A" or src != expected or not (0 <= layer < self.n_layer and i < self.n_tokens and j < self.n_tokens):
            raise FlowError(f"{src} -> {dst} is not an attention edge; attention edges run I<l-1>_j (X0_j at "
                            f"layer 0) -> A<l>_i")
        return self.head_shares[layer, i, j].copy()

    def residual_weight(self, dst: str) -> float:
        """The attention-residual share inside the edge I{l-1}_i -> A{l}_i (dst = A{l}_i)."""
        kind, layer, i = parse_node(dst)
        if kind != "A":
            raise FlowError(f"{dst} is not an attention node (A<layer>_<token>)")
        return float(self.residual_shares[layer, i])


def _check(c: FlowContributions, position: int, threshold: float) -> int:
    return check_position_threshold(c.n_tokens, position, threshold)


def check_position_threshold(T: int, position: int, threshold: float) -> int:
    """The position as 0..T-1; FlowError for a position outside a prompt of T tokens or a threshold
    outside (0, 1)."""
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not 0.0 < float(threshold) < 1.0:
        raise FlowError(f"threshold must be a number strictly between 0 and 1, got {threshold!r}; "
                        f"the usual value is 0.04")
    if isinstance(position, bool) or not isinstance(position, (int, np.integer)) or not -T <= position < T:
        raise FlowError(f"position {position!r} is outside the prompt of {T} tokens; pick 0..{T - 1} "
                        f"(or -1 for the last)")
    return int(position) % T


def _all_edges(attn: np.ndarray, ares: np.ndarray, mlp: np.ndarray, mres: np.ndarray) -> list[Edge]:
    """Every edge of weight > 0, layer by layer: attention (by target, then source), then the MLP's."""
    L, T = ares.shape
    edge_w = attn.sum(axis=3)  # (L, T, T) [layer, target, source]
    edge_w[:, np.arange(T), np.arange(T)] += ares
    edges: list[Edge] = []
    for l in range(L):
        for i, j in zip(*np.nonzero(edge_w[l])):
            edges.append((source_node(l, int(j)), f"A{l}_{i}", float(edge_w[l, i, j])))
        for i in range(T):
            edges += mlp_edges(l, i, mlp, mres)
    return edges


def mlp_edges(l: int, i: int, mlp: np.ndarray, mres: np.ndarray) -> list[Edge]:
    """Layer l's MLP edges at token i of weight > 0, in order: A -> M, M -> I, then A -> I."""
    edges: list[Edge] = []
    if mlp[l, i] > 0:
        w = float(mlp[l, i])
        edges += [(f"A{l}_{i}", f"M{l}_{i}", w), (f"M{l}_{i}", f"I{l}_{i}", w)]
    if mres[l, i] > 0:
        edges.append((f"A{l}_{i}", f"I{l}_{i}", float(mres[l, i])))
    return edges


def _route(edges: list[Edge], start: str, threshold: float) -> tuple[Edge, ...]:
    """Edges reachable backwards from `start` along edges weighing more than `threshold`."""
    into: dict[str, list[Edge]] = {}
    for e in edges:
        if e[2] > threshold:
            into.setdefault(e[1], []).append(e)
    seen, stack, found = {start}, [start], set()
    while stack:
        for e in into.get(stack.pop(), ()):
            found.add((e[0], e[1]))
            if e[0] not in seen:
                seen.add(e[0])
                stack.append(e[0])
    return tuple(e for e in edges if (e[0], e[1]) in found)


def flow_graph(contributions: FlowContributions, position: int = -1, threshold: float = 0.04) -> FlowGraph:
    """The thresholded routes graph of `contributions` and the route to `position` (default: the
    last token). Raises FlowError for a position outside the prompt or a threshold outside (0, 1)."""
    pos = _check(contributions, position, threshold)
    attn, ares, mlp, mres = threshold_shares(contributions, float(threshold))
    edges = _all_edges(attn, ares, mlp, mres)
    L = contributions.n_layer
    route = _route(edges, f"I{L - 1}_{pos}", float(threshold))
    return FlowGraph(edges=tuple(edges), route=route, position=pos, threshold=float(threshold), n_layer=L,
                     n_tokens=contributions.n_tokens, head_shares=attn, residual_shares=ares)


def top_route_edges(graph: FlowGraph, k: int = 12) -> list[Edge]:
    """The k strongest edges of the route that carry information between tokens (attention from
    source j != target i), strongest first: the part of a route that changes as heads form (the
    residual and MLP edges stay near their defaults and would fill any top-k)."""
    across = [e for e in graph.route if e[1].startswith("A") and e[0].split("_")[1] != e[1].split("_")[1]]
    return sorted(across, key=lambda e: -e[2])[:max(0, int(k))]
