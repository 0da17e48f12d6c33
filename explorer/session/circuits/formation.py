"""When did this prompt's circuit form over training? One plain definition (issue 38). No Qt.

The circuit's *last link*: at the walk's last kept step F, in the prompt's graph pruned at the panel's
thresholds, the top logit (the most probable next token t* there) and, among its kept incoming edges
from transcoder features, the strongest one (largest weight): feature i of layer L at position p, weight
w_F. A direct edge into the logit, not a longer path: a path's strength has no one natural definition,
an edge's is the number the graph shows.

Its weight at an earlier kept step s, w_s: the edge from the same feature (layer L, index i — the walk
warm-starts each step's transcoders from its neighbour's, so index i is the same feature's ancestor) at
the same position into the logit of the same token t*, in step s's full graph (unpruned: a link below
the pruning threshold still counts); 0 when that feature is not active there or t* is not among that
step's logit nodes (the model does not yet put it among its likely next tokens), and 0 where that
step's transcoder of layer L was fitted afresh by the walk (not aligned: index i is another feature).

"The circuit formed at step N": the first kept step from which w_s stays at or above SHARE (half) of
w_F at every later kept step — the rule the Features panel uses for a feature's forming. It says when
this one link reached its final strength, not that nothing else changed after; and it measures each
step with that step's own transcoders, whose errors differ from step to step.
"""
from __future__ import annotations

import numpy as np
import torch

from explorer.session.circuits.pruned import node_long_label
from explorer.session.circuits.results import CircuitFormation

SHARE = 0.5


def last_link(graph, node_threshold: float, edge_threshold: float):
    """(feature node index, logit node index, weight) of the strongest kept feature → top-logit edge, or None."""
    from gptcore import prune_graph

    node_mask, edge_mask = prune_graph(graph, node_threshold, edge_threshold)
    top = graph.logit_nodes.start
    row = graph.adjacency[top, : graph.n_features].clone()  # (n_f,) edges from features into the top logit
    row[~edge_mask[top, : graph.n_features] | ~node_mask[: graph.n_features]] = -float("inf")
    if graph.n_features == 0 or not torch.isfinite(row).any() or float(row.max()) <= 0:
        return None
    source = int(row.argmax())
    return source, top, float(graph.adjacency[top, source])


def link_weight(graph, layer: int, position: int, feature: int, token: int, aligned: bool = True) -> float:
    """The adjacency entry from (layer, position, feature) into the logit of `token`; 0 when either node is absent,
    or the step's transcoder of that layer is not aligned with the last step's (a fresh fit: its index i is
    another feature)."""
    if not aligned:
        return 0.0
    hit = ((graph.features[:, 0] == layer) & (graph.features[:, 1] == position)
           & (graph.features[:, 2] == feature)).nonzero()
    logit = (graph.logit_tokens == token).nonzero()
    if not len(hit) or not len(logit):
        return 0.0
    return float(graph.adjacency[graph.logit_nodes.start + int(logit[0, 0]), int(hit[0, 0])])


def formed_step(steps: np.ndarray, weights: np.ndarray, final: float, share: float = SHARE) -> int | None:
    """The first step from which weights / final stays >= share (None when final is not positive)."""
    if not final > 0:
        return None
    ok = weights >= share * final
    broken = np.nonzero(~ok)[0]
    return int(steps[broken[-1] + 1]) if broken.size else int(steps[0])


def formation(steps, graph_at, node_threshold: float, edge_threshold: float, token_text, text: str = "",
              aligned_at=lambda step, layer: True) -> CircuitFormation:
    """The last link's weight at every kept step in `steps`; `graph_at(step)` gives that step's
    AttributionGraph of the prompt (computed one at a time: only one graph is held at once),
    `aligned_at(step, layer)` whether that step's transcoder of the layer descends from the last step's."""
    steps = np.array(sorted(int(s) for s in steps), dtype=np.int64)
    final = graph_at(int(steps[-1]))
    token = int(final.logit_tokens[0])
    link = last_link(final, node_threshold, edge_threshold)
    if link is None:
        return CircuitFormation(steps, np.zeros(len(steps)), 0.0, None, "", token_text(token), SHARE, text)
    source, _top, w_final = link
    layer, position, feature = (int(v) for v in final.features[source])
    words = f"{node_long_label(final, source, token_text)} → {token_text(token)!r}"
    del final
    weights = []
    for s in steps[:-1]:
        g = graph_at(int(s))
        weights.append(link_weight(g, layer, position, feature, token, aligned_at(int(s), layer)))
    weights = np.array(weights + [w_final])
    return CircuitFormation(steps, weights, w_final, formed_step(steps, weights, w_final), words, token_text(token),
                            SHARE, text)
