"""`AttributionGraph`: the nodes and direct effects of one prompt's replacement model, as plain tensors.

Node order (circuit-tracer's): active features sorted by (layer, position, feature); error nodes,
one per (layer, position) at n_features + layer·T + position; token nodes, one per position;
logit nodes, the top logit first. `adjacency[target, source]` is the source's direct effect on
the target under the frozen model (graph.py says exactly what is frozen and what each entry
means). Rows of errors, tokens and logits are zero (nothing feeds them), and so are the logits'
columns (nothing reads them).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

KINDS = ("feature", "error", "token", "logit")


@dataclass
class AttributionGraph:
    adjacency: torch.Tensor  # (N, N) float32, [target, source]
    features: torch.Tensor  # (n_f, 3) int64: layer, position, feature index
    activations: torch.Tensor  # (n_f,) the features' activations in the clean run
    logit_tokens: torch.Tensor  # (n_l,) int64 token ids, most probable first
    logit_probs: torch.Tensor  # (n_l,) their probabilities at the last position (not renormalised)
    tokens: torch.Tensor  # (T,) int64: the prompt
    n_layers: int
    error_norms: torch.Tensor  # (L, T): |error| of each layer's transcoder at each position
    pre_activations: torch.Tensor  # (n_f,) each feature's pre-activation (what its incoming edges explain)
    logit_values: torch.Tensor  # (n_l,) each logit minus the mean logit (what a logit's edges explain)

    @property
    def n_features(self) -> int:
        return int(self.features.shape[0])

    @property
    def n_pos(self) -> int:
        return int(self.tokens.shape[0])

    @property
    def n_logits(self) -> int:
        return int(self.logit_tokens.shape[0])

    @property
    def n_nodes(self) -> int:
        return int(self.adjacency.shape[0])

    @property
    def error_nodes(self) -> slice:
        start = self.n_features
        return slice(start, start + self.n_layers * self.n_pos)

    @property
    def token_nodes(self) -> slice:
        start = self.error_nodes.stop
        return slice(start, start + self.n_pos)

    @property
    def logit_nodes(self) -> slice:
        start = self.token_nodes.stop
        return slice(start, start + self.n_logits)

    def kinds(self) -> list[str]:
        """Each node's kind ("feature", "error", "token", "logit"), in node order."""
        counts = (self.n_features, self.n_layers * self.n_pos, self.n_pos, self.n_logits)
        return [kind for kind, count in zip(KINDS, counts) for _ in range(count)]

    def node(self, index: int) -> dict:
        """One node described: kind, layer (tokens -1, logits n_layers), position, and the feature
        index or token id it stands for."""
        index = int(index)
        if not 0 <= index < self.n_nodes:
            raise IndexError(f"node {index} does not exist: this graph has {self.n_nodes} nodes")
        if index < self.n_features:
            layer, pos, feature = (int(v) for v in self.features[index])
            return {"kind": "feature", "layer": layer, "position": pos, "feature": feature,
                    "activation": float(self.activations[index])}
        if index < self.error_nodes.stop:
            layer, pos = divmod(index - self.n_features, self.n_pos)
            return {"kind": "error", "layer": layer, "position": pos, "norm": float(self.error_norms[layer, pos])}
        if index < self.token_nodes.stop:
            pos = index - self.token_nodes.start
            return {"kind": "token", "layer": -1, "position": pos, "token": int(self.tokens[pos])}
        k = index - self.logit_nodes.start
        return {"kind": "logit", "layer": self.n_layers, "position": self.n_pos - 1,
                "token": int(self.logit_tokens[k]), "probability": float(self.logit_probs[k])}

    def label(self, index: int, decode=None) -> str:
        """A short name for a node ("L1 #407 @3", "err L0 @5", "tok 'a' @2", "logit 'b' p=0.41");
        `decode(token_id) -> str` shows tokens as text."""
        n = self.node(index)
        text = (lambda t: repr(decode(t))) if decode else (lambda t: f"#{t}")
        if n["kind"] == "feature":
            return f"L{n['layer']} #{n['feature']} @{n['position']}"
        if n["kind"] == "error":
            return f"err L{n['layer']} @{n['position']}"
        if n["kind"] == "token":
            return f"tok {text(n['token'])} @{n['position']}"
        return f"logit {text(n['token'])} p={n['probability']:.2f}"
