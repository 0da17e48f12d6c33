"""An `AttributionGraph` (torch, every node) pruned into a `CircuitGraph` (numpy, the kept nodes and edges
only): what the panel draws. Pruning is circuit-tracer's (`gptcore.prune_graph`); it costs a fraction of
the graph itself (0.3 s at 4,426 nodes against 4.5 s), so a threshold moved re-prunes the kept graph
instead of computing it again. No Qt.
"""
from __future__ import annotations

import numpy as np
import torch

from explorer.session.circuits.results import KIND_ERROR, KIND_FEATURE, KIND_LOGIT, KIND_TOKEN, CircuitGraph

KINDS = {"feature": KIND_FEATURE, "error": KIND_ERROR, "token": KIND_TOKEN, "logit": KIND_LOGIT}


def error_share(graph, influence: torch.Tensor) -> float:
    """The error nodes' share of the influence the MLP side carries: errors / (features + errors), the
    whole graph's (gptcore.bench --circuits reports the same). 0 when neither carries any."""
    features = float(influence[: graph.n_features].sum())
    errors = float(influence[graph.error_nodes].sum())
    return errors / (features + errors) if features + errors > 0 else 0.0


def node_label(graph, index: int, token_text) -> str:
    """The short name a node is drawn with: "L1 #421", "err L0", the token's text, "'u' 41%"."""
    n = graph.node(index)
    if n["kind"] == "feature":
        return f"L{n['layer']} #{n['feature']}"
    if n["kind"] == "error":
        return f"err L{n['layer']}"
    if n["kind"] == "token":
        return token_text(n["token"])
    return f"{token_text(n['token'])!r} {n['probability']:.0%}"


def node_long_label(graph, index: int, token_text) -> str:
    """The name with its place, for lists and tooltips: "L1 #421 @5", "err L0 @3", "tok 'e' @2"."""
    n = graph.node(index)
    if n["kind"] == "token":
        return f"tok {token_text(n['token'])!r} @{n['position']}"
    if n["kind"] == "logit":
        return f"logit {node_label(graph, index, token_text)}"
    return f"{node_label(graph, index, token_text)} @{n['position']}"


def pruned_view(graph, influence: torch.Tensor, node_threshold: float, edge_threshold: float, token_text,
                **facts) -> CircuitGraph:
    """The graph pruned at the thresholds, as arrays of the kept nodes and edges; `facts` fill the rest of
    CircuitGraph (seconds, text, step, edits, version)."""
    from gptcore import prune_graph

    node_mask, edge_mask = prune_graph(graph, node_threshold, edge_threshold, influence=influence)
    kept = node_mask.nonzero()[:, 0]  # (K,)
    targets, sources = (edge_mask[kept][:, kept]).nonzero(as_tuple=True)  # within the kept block
    weights = graph.adjacency[kept[targets], kept[sources]]
    nodes = [graph.node(int(i)) for i in kept]
    kinds = np.array([KINDS[n["kind"]] for n in nodes], dtype=np.int64)
    value = np.array([n.get("activation", n.get("norm", n.get("probability", 0.0))) for n in nodes], dtype=np.float64)
    return CircuitGraph(
        tokens=tuple(token_text(int(t)) for t in graph.tokens), n_layers=graph.n_layers,
        node_ids=kept.numpy().astype(np.int64), kind=kinds,
        layer=np.array([n["layer"] for n in nodes], dtype=np.int64),
        position=np.array([n["position"] for n in nodes], dtype=np.int64),
        feature=np.array([n.get("feature", -1) for n in nodes], dtype=np.int64), value=value,
        influence=influence[kept].numpy().astype(np.float64),
        labels=tuple(node_label(graph, int(i), token_text) for i in kept),
        edge_src=sources.numpy().astype(np.int64), edge_dst=targets.numpy().astype(np.int64),
        edge_weight=weights.numpy().astype(np.float64),
        logit_tokens=tuple(token_text(int(t)) for t in graph.logit_tokens),
        logit_probs=graph.logit_probs.numpy().astype(np.float64), error_share=error_share(graph, influence),
        n_nodes=graph.n_nodes, n_features=graph.n_features, node_threshold=float(node_threshold),
        edge_threshold=float(edge_threshold), **facts)


def strongest_edges(graph, index: int, token_text, kept: np.ndarray, count: int = 8) -> tuple[tuple, tuple]:
    """(incoming, outgoing): the node's `count` strongest edges in the full graph by |weight|, each as
    (the other node's long label, the weight, its index among the kept nodes or -1)."""
    where = {int(n): i for i, n in enumerate(kept)}

    def listed(values: torch.Tensor) -> tuple:
        order = torch.argsort(values.abs(), descending=True)[:count]
        return tuple((node_long_label(graph, int(j), token_text), float(values[j]), where.get(int(j), -1))
                     for j in order if float(values[j]) != 0.0)

    return listed(graph.adjacency[index]), listed(graph.adjacency[:, index])
