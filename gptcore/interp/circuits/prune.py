"""`prune_graph`: circuit-tracer's pruning, step for step, so a graph pruned here keeps the nodes and
edges its viewer would keep.

1. Ā = |A| with each row divided by its sum (a zero row stays zero): how much of a target's total
   input each source carries.
2. Influence of every node on the logits: w·Ā + w·Ā² + ... with w the logit nodes' probabilities
   (not renormalised); the graph is acyclic, so the series ends (summed until a term is all zero).
3. Nodes: keep those whose influence reaches the threshold that keeps `node_threshold` of the
   total (sorted descending, the first value where the cumulative share reaches it); tokens and
   logits are always kept, errors are not protected.
4. Edges: on A with the dropped nodes' rows and columns zeroed, re-normalised, each edge scores
   its normalised weight times its target's influence (plus the target's own logit weight);
   keep those reaching the threshold for `edge_threshold` (over all N² entries; computed on the
   kept nodes' K × K block, where every nonzero score is).
5. Until nothing changes: a feature or error without a kept outgoing edge, or a feature without a
   kept incoming one, is dropped, and its edges with it.

Two of circuit-tracer's quirks are kept on purpose (its masks are the reference): step 5's first
pass does not re-mask the edges of nodes step 3 dropped (they score zero, so this matters only
where the edge threshold is 0), and at edge_threshold 1.0 rounding can make that threshold 0,
keeping every entry. `cumulative_influence` is its `cumulative_scores`: a node's share of the
total influence counting every node at least as influential (small = important).
"""
from __future__ import annotations

from typing import NamedTuple

import torch

from gptcore.interp.circuits.transcoder import CircuitError

MAX_DEPTH = 1000  # terms of the influence series; an acyclic graph needs at most its depth


class PrunedGraph(NamedTuple):
    node_mask: torch.Tensor  # (N,) bool
    edge_mask: torch.Tensor  # (N, N) bool, [target, source]


def prune_graph(graph, node_threshold: float = 0.8, edge_threshold: float = 0.98, *,
                influence: torch.Tensor | None = None) -> PrunedGraph:
    """Which nodes and edges of `graph` (an AttributionGraph) carry most of its logits' influence.
    `influence`: the graph's `node_influence`, where the caller keeps it (step 2 is the costly one: an
    N × N copy and its series), so that a moved threshold only re-prunes."""
    for name, value in (("node_threshold", node_threshold), ("edge_threshold", edge_threshold)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
            raise CircuitError(f"{name} must be a fraction in [0, 1], got {value!r}")
    A = graph.adjacency.float()
    N = A.shape[0]
    n_protected = graph.n_pos + graph.n_logits  # tokens and logits, the last nodes
    n_sources = N - n_protected  # features and errors
    w = logit_weights(graph)
    influence = _influence(normalized(A), w) if influence is None else influence
    node_mask = influence >= find_threshold(influence, node_threshold)
    node_mask[n_sources:] = True
    # Steps 4-5 on the kept nodes only: dropped nodes' rows and columns are zero, so their scores are 0
    # (K² work and memory instead of N²; the zeros count only where the threshold runs into them).
    kept = node_mask.nonzero()[:, 0]
    pruned_norm = normalized(A[kept][:, kept])  # (K, K)
    w_kept = w[kept]
    edge_scores = pruned_norm * (_influence(pruned_norm, w_kept) + w_kept)[:, None]  # (K, K)
    threshold = find_threshold(edge_scores.flatten(), edge_threshold, size=N * N)
    if threshold > 0:
        edge_mask = torch.zeros(N, N, dtype=torch.bool)
        edge_mask[kept[:, None], kept[None, :]] = edge_scores >= threshold
    else:  # circuit-tracer's threshold of 0 keeps every entry, zeros included
        edge_mask = torch.ones(N, N, dtype=torch.bool)
    _drop_dangling(node_mask, edge_mask, n_sources, graph.n_features)
    return PrunedGraph(node_mask, edge_mask)


def node_influence(graph) -> torch.Tensor:
    """(N,) each node's influence on the logits through the row-normalised |adjacency| (step 2)."""
    return _influence(normalized(graph.adjacency.float()), logit_weights(graph))


def cumulative_influence(graph, influence: torch.Tensor | None = None) -> torch.Tensor:
    """(N,) circuit-tracer's cumulative scores: nodes sorted by influence (`node_influence`, unless
    given), descending; a node's score is the cumulative share of the total up to and including it.
    Zero-influence nodes get 1.0."""
    influence = node_influence(graph) if influence is None else influence
    ranked, order = torch.sort(influence, descending=True)
    scores = torch.zeros_like(influence)
    scores[order] = torch.cumsum(ranked, 0) / ranked.sum()
    return scores


def logit_weights(graph) -> torch.Tensor:
    """(N,) zeros but the logit nodes, which weigh their probability."""
    w = torch.zeros(graph.n_nodes)
    w[graph.n_nodes - graph.n_logits:] = graph.logit_probs.float()
    return w


def normalized(A: torch.Tensor) -> torch.Tensor:
    """|A| with each row divided by its sum (floored at 1e-10, so a zero row stays zero); one copy of A."""
    magnitude = A.abs()
    return magnitude.div_(magnitude.sum(dim=1, keepdim=True).clamp(min=1e-10))


def find_threshold(scores: torch.Tensor, keep: float, size: int | None = None) -> torch.Tensor:
    """The score at which the scores (>= 0) from the largest down first reach `keep` of their total.
    Zeros add nothing to the running total, so only the nonzero scores are sorted; `size` counts the
    zeros left out of `scores` too. Where rounding makes the share stop short of `keep` (keep = 1),
    the index runs into the zeros, and the threshold is 0, as circuit-tracer's is."""
    size = scores.numel() if size is None else size
    ranked = torch.sort(scores[scores != 0], descending=True).values
    if len(ranked) == 0:
        return torch.zeros((), dtype=scores.dtype)
    share = torch.cumsum(ranked, 0) / ranked.sum()
    index = int(torch.searchsorted(share, torch.tensor(keep, dtype=share.dtype)))
    if index >= len(ranked):
        return ranked[-1] if size == len(ranked) else torch.zeros((), dtype=scores.dtype)
    return ranked[index]


def _influence(M: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """w·M + w·M² + ..., summed until a term is all zero."""
    term = w @ M
    total = term.clone()
    for _ in range(MAX_DEPTH):
        if not term.any():
            return total
        term = term @ M
        total += term
    raise CircuitError(f"the influence series did not end after {MAX_DEPTH} terms: the adjacency has a cycle, "
                       "so it is not an attribution graph")


def _drop_dangling(node_mask, edge_mask, n_sources: int, n_features: int) -> None:
    """Step 5, in place."""
    before = node_mask.clone()
    _require_edges(node_mask, edge_mask, n_sources, n_features)
    while not torch.equal(node_mask, before):
        before.copy_(node_mask)
        edge_mask[~node_mask] = False
        edge_mask[:, ~node_mask] = False
        _require_edges(node_mask, edge_mask, n_sources, n_features)


def _require_edges(node_mask, edge_mask, n_sources: int, n_features: int) -> None:
    node_mask[:n_sources] &= edge_mask[:, :n_sources].any(0)  # features and errors: a kept outgoing edge
    node_mask[:n_features] &= edge_mask[:n_features].any(1)  # features: a kept incoming edge
