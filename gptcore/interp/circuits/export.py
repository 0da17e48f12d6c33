"""An attribution graph as circuit-tracer's frontend graph JSON, so its local viewer (and Neuronpedia's
schema) opens it.

`graph_json` prunes the graph (prune.py) and writes what circuit-tracer's `create_graph_files`
writes: `metadata` (slug, scan, prompt tokens one by one, prompt, node_threshold, schema_version
1), `qParams` (empty saved view), `nodes` (kept nodes in adjacency order, each with node_id,
feature, layer, ctx_idx, feature_type, jsNodeId, clerp, influence = cumulative score, activation,
token_prob, is_target_logit) and `links` (kept edges between kept nodes, weight = the signed
adjacency entry). Nodes without a kept link are left out, but tokens and logits always stay.
Features carry the Cantor pair of (layer, feature index) as `feature`, as the viewer decodes it.
One deliberate difference: an error node's id is `{layer}_-1_{pos}` (upstream's fix), not 0.5.0's
`0_{layer}_{pos}`, which collides with layer 0's feature number `layer` at the same position.
`save_graph_json` writes `<folder>/<slug>.json` and adds the graph to `<folder>/graph-metadata.json`
(the index the viewer's start page lists), both atomically.
"""
from __future__ import annotations

import json
from pathlib import Path

from gptcore.interp.circuits.prune import cumulative_influence, node_influence, prune_graph
from gptcore.interp.circuits.transcoder import CircuitError
from gptcore.io.atomic import atomic_write_bytes
from gptcore.io.checkpoints import read_json

INDEX = "graph-metadata.json"


def graph_json(graph, *, slug: str, scan: str, decode=None, prompt: str | None = None,
               node_threshold: float = 0.8, edge_threshold: float = 0.98) -> dict:
    """The graph, pruned at the thresholds, as the viewer's JSON object. `decode(token_id) -> str`
    names tokens (default: `#id`); `prompt` defaults to the decoded tokens joined."""
    if not isinstance(slug, str) or not slug or "/" in slug or "\\" in slug:
        raise CircuitError(f"slug must be a non-empty file name without slashes, got {slug!r}")
    decode = decode or (lambda t: f"#{t}")
    influence = node_influence(graph)
    node_mask, edge_mask = prune_graph(graph, node_threshold, edge_threshold, influence=influence)
    scores = cumulative_influence(graph, influence)
    tokens = [decode(int(t)) for t in graph.tokens]
    nodes = {int(i): _node(graph, int(i), float(scores[i]), decode) for i in node_mask.nonzero()[:, 0]}
    targets, sources = edge_mask.nonzero(as_tuple=True)
    weights = graph.adjacency[targets, sources].tolist()
    links = [{"source": nodes[s]["node_id"], "target": nodes[t]["node_id"], "weight": w}
             for t, s, w in zip(targets.tolist(), sources.tolist(), weights) if s in nodes and t in nodes]
    linked = {link["source"] for link in links} | {link["target"] for link in links}
    kept = [n for n in nodes.values() if n["node_id"] in linked or n["feature_type"] in ("embedding", "logit")]
    metadata = {"slug": slug, "scan": scan, "transcoder_list": [], "prompt_tokens": tokens,
                "prompt": "".join(tokens) if prompt is None else prompt, "node_threshold": node_threshold,
                "schema_version": 1}
    return {"metadata": metadata,
            "qParams": {"pinnedIds": [], "supernodes": [], "linkType": "both", "clickedId": "", "sg_pos": ""},
            "nodes": kept, "links": links}


def save_graph_json(graph, folder, *, slug: str, scan: str, decode=None, prompt: str | None = None,
                    node_threshold: float = 0.8, edge_threshold: float = 0.98) -> Path:
    """Write `<folder>/<slug>.json` and list it in `<folder>/graph-metadata.json`; returns the graph file."""
    data = graph_json(graph, slug=slug, scan=scan, decode=decode, prompt=prompt, node_threshold=node_threshold,
                      edge_threshold=edge_threshold)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{slug}.json"
    atomic_write_bytes(path, json.dumps(data).encode("utf-8"))
    index_path = folder / INDEX
    index = read_json(index_path) if index_path.is_file() else {"graphs": []}
    graphs = [g for g in index.get("graphs", []) if isinstance(g, dict) and g.get("slug") != slug]
    atomic_write_bytes(index_path, json.dumps({**index, "graphs": graphs + [data["metadata"]]}, indent=2).encode("utf-8"))
    return path


def cantor(layer: int, feature: int) -> int:
    """The viewer's feature number for (layer, feature index): (l + f)(l + f + 1)/2 + f."""
    return (layer + feature) * (layer + feature + 1) // 2 + feature


def _node(graph, index: int, influence: float, decode) -> dict:
    n = graph.node(index)
    pos, kind = n["position"], n["kind"]
    base = {"token_prob": 0.0, "is_target_logit": False, "run_idx": 0, "reverse_ctx_idx": 0, "clerp": "",
            "influence": influence, "activation": None, "ctx_idx": pos}
    if kind == "feature":
        layer, feature = n["layer"], n["feature"]
        return {**base, "node_id": f"{layer}_{feature}_{pos}", "feature": cantor(layer, feature), "layer": str(layer),
                "feature_type": "cross layer transcoder", "jsNodeId": f"{layer}_{feature}-0",
                "activation": n["activation"]}
    if kind == "error":
        layer = n["layer"]
        return {**base, "node_id": f"{layer}_-1_{pos}", "feature": -1, "layer": str(layer),
                "feature_type": "mlp reconstruction error", "jsNodeId": f"{layer}_-1-{pos}"}
    if kind == "token":
        token = n["token"]
        return {**base, "node_id": f"E_{token}_{pos}", "feature": pos, "layer": "E", "feature_type": "embedding",
                "jsNodeId": f"E_{token}-{pos}"}
    token, p = n["token"], n["probability"]
    layer = str(graph.n_layers + 1)
    return {**base, "node_id": f"{layer}_{token}_{pos}", "feature": token, "layer": layer, "feature_type": "logit",
            "jsNodeId": f"L_{token}-{pos}", "clerp": f'Output "{decode(token)}" (p={p:.3f})', "token_prob": p,
            "is_target_logit": index == graph.logit_nodes.start, "influence": None}
