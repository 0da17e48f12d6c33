"""From routes to causes, and what a route's node says in tokens.

`remove_edge_effect` re-runs the model with exactly one attention part removed from the residual
update (head h of layer l reading from token j into position i) and returns the change in one
token's log-probability at the last position: the causal check of one edge of the route graph.
The part is z[i, j, h] = A^h[i, j] · (v^h_j W_O^h); as the attention output is linear in `hook_z`,
subtracting A^h[i, j] · v^h_j from z[i, h] removes exactly that part and nothing else; later layers
(and later positions) are recomputed.

`block_logit_effect` reads a node of the graph through the unembedding as the logit lens does
(the model's own final norm, then the head): which tokens that block's output promotes and
suppresses. X0_j reads the input embedding, A{l}_i the attention block's output, M{l}_i the MLP's
output, I{l}_i the residual stream after block l (the lens itself).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from gptcore.interp.flow import FlowError, check_flow_model, check_prompt
from gptcore.interp.flow_graph import parse_node
from gptcore.interp.targets import Ids
from gptcore.model.linear import apply_linear


def _check_edge(model, T: int, layer: int, head: int, source: int, target: int, token: int) -> tuple[int, int]:
    cfg = model.config
    if not 0 <= layer < cfg.n_layer or not 0 <= head < cfg.n_head:
        raise FlowError(f"head ({layer}, {head}) does not exist: this model has layers 0..{cfg.n_layer - 1} "
                        f"of heads 0..{cfg.n_head - 1}")
    if not -T <= target < T or not -T <= source < T:
        raise FlowError(f"positions {source} -> {target} are outside the prompt of {T} tokens; use 0..{T - 1}")
    source, target = source % T, target % T
    if source > target:
        raise FlowError(f"token {source} comes after position {target}: attention only reads earlier tokens, "
                        f"so there is no such part; pick a source at or before the target")
    if not 0 <= int(token) < cfg.vocab_size:
        raise FlowError(f"token id {token} is outside this model's vocabulary (vocab_size={cfg.vocab_size})")
    return source, target


def _last_logprob(model, idx: torch.Tensor, hooks, token: int) -> float:
    with model.hooks(hooks):
        logits = model(idx, logits="last")  # (1, 1, vocab)
    return float(torch.log_softmax(logits[0, -1].double(), dim=-1)[token])


@torch.no_grad()
def remove_edge_effect(model, ids: Ids, layer: int, head: int, source: int, target: int, token: int) -> float:
    """log p(token | prompt) at the last position with the part (layer, head, source -> target)
    removed, minus the same with it kept. Negative: the part helped predict `token`.

    Both runs have the same hooks attached (the pattern is materialised in both), so the only
    difference between them is the part; hooks already active on the model (an ablation) stay."""
    check_flow_model(model)
    idx = check_prompt(model, ids)  # (1, T)
    source, target = _check_edge(model, idx.shape[1], layer, head, source, target, int(token))
    group = model.config.n_head // model.config.kv_heads
    seen: dict[str, torch.Tensor] = {}
    removing = {"on": False}

    def keep(name):
        def fn(t, hook):
            seen[name] = t
        return fn

    def edit(z, hook):  # z (1, T, nh, hs)
        if not removing["on"]:
            return None
        a = seen["pattern"][0, head, target, source]  # A^h[i, j]
        v = seen["v"][0, source, head // group]  # (hs,) the value head this query head reads
        z = z.clone()
        z[0, target, head] -= a * v
        return z

    pre = f"blocks.{layer}.attn."
    hooks = [(pre + "hook_v", keep("v")), (pre + "hook_pattern", keep("pattern")), (pre + "hook_z", edit)]
    kept = _last_logprob(model, idx, hooks, int(token))
    removing["on"] = True
    removed = _last_logprob(model, idx, hooks, int(token))
    return removed - kept


@dataclass(frozen=True)
class BlockLogitEffect:
    """The tokens a node's vector promotes (highest logits) and suppresses (lowest), best first."""

    node: str
    promoted_ids: np.ndarray  # (k,) int64
    promoted_logits: np.ndarray  # (k,) float32
    suppressed_ids: np.ndarray  # (k,) int64, most suppressed first
    suppressed_logits: np.ndarray  # (k,) float32


def _node_hooks(model, kind: str, layer: int) -> list[str]:
    if kind == "X":
        return ["hook_embed"] + (["hook_pos_embed"] if "hook_pos_embed" in model.hook_dict else [])
    return [{"A": f"blocks.{layer}.hook_attn_out", "M": f"blocks.{layer}.hook_mlp_out",
             "I": f"blocks.{layer}.hook_resid_post"}[kind]]


@torch.no_grad()
def block_logit_effect(model, ids: Ids, node: str, k: int = 10) -> BlockLogitEffect:
    """What the block behind `node` (X0_j, A{l}_i, M{l}_i, I{l}_i) writes, read through the
    model's final norm and unembedding: its top-k and bottom-k tokens."""
    check_flow_model(model)
    idx = check_prompt(model, ids)  # (1, T)
    kind, layer, pos = parse_node(node)
    T, L = idx.shape[1], model.config.n_layer
    if (kind == "X" and layer != 0) or layer >= L or pos >= T:
        raise FlowError(f"node {node} is not in this graph: layers 0..{L - 1}, tokens 0..{T - 1} (inputs are X0_j)")
    names = _node_hooks(model, kind, layer)
    _, cache = model.run_with_cache(idx[:, :pos + 1], names_filter=names, logits=None)
    vec = sum(cache[n][0, -1] for n in names)  # (C,) the block's output at the node's position
    logits = apply_linear(model.unembed, model.ln_final(vec[None]))[0].float()  # (vocab,)
    k = max(1, min(int(k), logits.numel()))
    top, top_ids = logits.topk(k)
    low, low_ids = logits.topk(k, largest=False)
    return BlockLogitEffect(node=node, promoted_ids=top_ids.cpu().numpy(), promoted_logits=top.cpu().numpy(),
                            suppressed_ids=low_ids.cpu().numpy(), suppressed_logits=low.cpu().numpy())
