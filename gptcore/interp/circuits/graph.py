"""`attribution_graph`: which transcoder features caused this prediction, as exact direct effects.

Semantics (circuit-tracer's, Ameisen et al. 2025). At the clean run of the prompt, freeze every
attention pattern, every norm's scale, and every transcoder's activations and error (the MLP's
output minus the transcoder's prediction, so the frozen model reproduces the clean run exactly);
the skip path and the norms' centring stay linear. The model is then linear in what is added to
the residual stream. Nodes: the active features, the errors (layer × position), the tokens (the
embedding row W_E[token] at each position) and the logits (the fewest top tokens whose
probabilities reach `logit_prob`, at most `max_logits`). `adjacency[target, source]` is how much
the target's value changes when the source's vector (activation × decoder row, the error vector,
the embedding row) is added at its position: for a feature, its pre-activation (x·W_enc at its
layer's ln2 output); for a logit, the last position's logit minus the mean logit. So a feature's
row sums to its pre-activation minus what the constants (position embeddings, biases, b_dec,
b_enc) give it, and every edge is exact, not a gradient estimate: in the frozen model they *are*
the gradients.

Differences from circuit-tracer, on purpose: it prepends a BOS token and gives position 0 no
feature or error nodes (its features there are huge and uninformative); our models may have no
BOS (a char model), so every position has features and errors, as the issue defines. It keeps at
most `max_feature_nodes` features (ranked by influence); here every active feature is a node,
and the prompt is refused past MAX_NODES nodes instead.

How (the speed): no backward per target. The frozen model's transposed layers (frozen.py) are
applied to a block of targets at once, as matrix products on a position-major (P, B, C) state,
starting where the targets read (a feature joins at its layer, a logit at the top) and reading
off every source's edge where it writes (one batched product per layer: the gradient at each
position against the vectors written there). Blocks hold targets of one layer in position order,
so a block of targets before position P touches only P positions. Measured (gptcore.bench
--circuits, 2 shared AMD EPYC cores): 4 layers × 256 wide, width-2,048 k-16 transcoders, 64
tokens, 4,426 nodes: 4.5-4.8 s under load, against 106-198 s for one autograd backward per batch of
64 targets (circuit-tracer's way).

Memory: the (N, N) float32 adjacency (75 MB at 4,426 nodes; MAX_NODES = 16,384 bounds it at
1 GiB), plus a block's state, at most BLOCK_FLOATS floats, and about three more of its size
while it is worked on, plus the clean run (per layer: five (T, C) stream captures and the (nh, T,
T) pattern) and one dense (T, width) encoding at a time. Peak extra memory measured at the size
above: 132 MB.
"""
from __future__ import annotations

import copy

import torch

from gptcore.interp.circuits.frozen import ReverseOps, clean_run
from gptcore.interp.circuits.graph_result import AttributionGraph
from gptcore.interp.circuits.transcoder import CircuitError, PromptTooLong, check_transcoders_fit

MAX_NODES = 16_384  # the adjacency is N² float32: 1 GiB at this many nodes
BLOCK_FLOATS = 1 << 20  # one block's (P, B, C) reverse state: 4 MB (the speed is flat from 2^19 to 2^21)


@torch.no_grad()
def attribution_graph(model, transcoders, ids, *, max_logits: int = 10, logit_prob: float = 0.95) -> AttributionGraph:
    """The attribution graph of the prompt `ids` (T,) (or (1, T)) through `transcoders`, one per layer."""
    transcoders = check_transcoders_fit(model, transcoders)
    _check_logit_settings(max_logits, logit_prob)
    ids = _check_prompt(model, transcoders, ids, max_logits)
    run = clean_run(model, ids)
    device = run.final.device
    tcs = [_float_copy(t, device) for t in transcoders]
    layers = [_active_features(t, run.mlp_in[layer], run.mlp_out[layer]) for layer, t in enumerate(tcs)]
    n_f = sum(len(f["feature"]) for f in layers)
    L, T = len(tcs), len(ids)
    logit_tokens, logit_probs = _logit_targets(run.logits, max_logits, logit_prob)
    n_nodes = n_f + L * T + T + len(logit_tokens)
    if n_nodes > MAX_NODES:
        raise PromptTooLong(f"this prompt gives {n_nodes:,} nodes ({n_f:,} active features); an attribution graph "
                            f"holds at most {MAX_NODES:,} (its N × N adjacency grows as N²): shorten the prompt")
    builder = _Builder(model, run, tcs, layers, ids.to(device), logit_tokens, n_nodes)
    adjacency = builder.build()
    features = torch.cat([torch.stack([torch.full_like(f["position"], layer), f["position"], f["feature"]], 1)
                          for layer, f in enumerate(layers)])  # (n_f, 3)
    logit_values = run.logits[logit_tokens] - run.logits.mean()  # what a logit row explains
    return AttributionGraph(
        adjacency=adjacency.cpu(), features=features.cpu(),
        activations=torch.cat([f["activation"] for f in layers]).cpu(),
        logit_tokens=logit_tokens.cpu(), logit_probs=logit_probs.cpu(), tokens=ids.cpu(), n_layers=L,
        error_norms=torch.stack([f["error"].norm(dim=-1) for f in layers]).cpu(),
        pre_activations=torch.cat([f["pre"] for f in layers]).cpu(), logit_values=logit_values.cpu())


class _Builder:
    """The adjacency's rows, one block of targets at a time."""

    def __init__(self, model, run, tcs, layers, ids, logit_tokens, n_nodes):
        self.ops = ReverseOps(model, run, tcs)
        self.L, self.T, self.C = len(tcs), len(ids), model.config.n_embd
        self.layers, self.tcs = layers, tcs
        device = run.final.device
        self.A = torch.zeros(n_nodes, n_nodes, device=device)  # [target, source]
        starts = [0]
        for f in layers:
            starts.append(starts[-1] + len(f["feature"]))
        self.feature_start = starts  # layer -> index of its first feature node
        self.n_f = starts[-1]
        self.token_start = self.n_f + self.L * self.T
        self.logit_start = self.token_start + self.T
        self.embeddings = model.embed.weight.detach().float()[ids]  # (T, C): the token nodes' vectors
        self.tables = [self._source_table(layer) for layer in range(self.L)]
        unembed = model.unembed.weight.detach().float()  # (vocab, C)
        self.logit_reads = unembed[logit_tokens] - unembed.mean(0)  # (n_l, C): d (logit - mean logit) / d ln_final out

    def _source_table(self, layer):
        """What layer `layer` writes at each position, as (T, C, S) vectors and their node ids (T, S)
        (-1 for an empty slot): the active features' activation × decoder row, then the error."""
        f = self.layers[layer]
        T, C = self.T, self.C
        counts = torch.bincount(f["position"], minlength=T)  # (T,)
        S = int(counts.max()) + 1 if len(f["position"]) else 1
        vectors = torch.zeros(T, S, C, device=self.A.device)
        node_ids = torch.full((T, S), -1, dtype=torch.long, device=self.A.device)
        first = torch.cumsum(counts, 0) - counts  # (T,) each position's first feature in the sorted list
        slot = torch.arange(len(f["position"]), device=self.A.device) - first[f["position"]]
        vectors[f["position"], slot] = f["activation"][:, None] * self.tcs[layer].W_dec[f["feature"]]
        node_ids[f["position"], slot] = self.feature_start[layer] + torch.arange(len(slot), device=self.A.device)
        vectors[:, S - 1] = f["error"]
        node_ids[:, S - 1] = self.n_f + layer * T + torch.arange(T, device=self.A.device)
        return vectors.transpose(1, 2).contiguous(), node_ids  # (T, C, S), (T, S)

    def build(self) -> torch.Tensor:
        for layer in range(self.L):
            f = self.layers[layer]
            n = len(f["position"])
            if n == 0:
                continue
            rows_per_block = max(16, BLOCK_FLOATS // (self.T * self.C))
            for start in range(0, n, rows_per_block):
                part = slice(start, min(n, start + rows_per_block))
                self._block(layer, f["position"][part], self.tcs[layer].W_enc[:, f["feature"][part]].t(),
                            self.feature_start[layer] + torch.arange(part.start, part.stop, device=self.A.device))
        n_l = len(self.logit_reads)
        positions = torch.full((n_l,), self.T - 1, dtype=torch.long, device=self.A.device)
        self._block(self.L, positions, self.logit_reads,
                    self.logit_start + torch.arange(n_l, device=self.A.device))
        return self.A

    def _block(self, top: int, positions, reads, rows) -> None:
        """Targets that read at layer `top` (the final norm for top = L): their read vectors (B, C) at
        their positions (B,), their node ids (B,). Fills their adjacency rows."""
        ops, B = self.ops, len(rows)
        P = int(positions.max()) + 1
        g = torch.zeros(P, B, self.C, device=self.A.device)  # the targets' gradient on the stream, position-major
        at = torch.arange(B, device=self.A.device)
        if top == self.L:
            g[positions, at] = ops.read_back(reads, ops.final_weight, ops.inv_sigma_final[positions])
        for layer in reversed(range(min(top, self.L - 1) + 1)):
            if layer < top:  # g is at resid_post of `layer`: its sources' edges, then back through its skip
                self._edges(layer, g, rows)
                ops.skip_back(layer, g)
            else:  # the targets read this layer's ln2 output
                g[positions, at] += ops.read_back(reads, ops.ln2_weight[layer], ops.inv_sigma2[layer][positions])
            ops.attention_back(layer, g)
        self.A[rows[:, None], self.token_start + torch.arange(P, device=self.A.device)[None, :]] = \
            torch.einsum("pbc,pc->bp", g, self.embeddings[:P])

    def _edges(self, layer: int, g, rows) -> None:
        """Edges from what layer `layer` wrote at positions < P into the block's targets."""
        vectors, node_ids = self.tables[layer]
        P, B, _ = g.shape
        values = torch.bmm(g, vectors[:P])  # (P, B, S)
        values = values.transpose(0, 1).reshape(B, -1)  # (B, P·S)
        cols = node_ids[:P].reshape(-1)
        keep = cols >= 0
        self.A[rows[:, None], cols[keep][None, :]] = values[:, keep]


def _active_features(t, x, y) -> dict:
    """The layer's active features sorted by (position, feature), with activations, pre-activations and
    the transcoder's error at every position. x (T, d) its input, y (T, d) the MLP's output."""
    pre = t.pre_acts(x)  # (T, width)
    acts = t.encode(x)  # (T, width)
    position, feature = acts.nonzero(as_tuple=True)  # row-major: sorted by (position, feature)
    error = y - t.decode(acts, x)  # (T, d)
    return {"position": position, "feature": feature, "activation": acts[position, feature],
            "pre": pre[position, feature], "error": error}


def _float_copy(t, device):
    """The transcoder in float32 on `device`, without touching the caller's object."""
    if t.W_enc.dtype == torch.float32 and t.W_enc.device == torch.device(device):
        return t
    return copy.deepcopy(t).to(device=device, dtype=torch.float32)


def _logit_targets(logits: torch.Tensor, max_logits: int, logit_prob: float):
    """circuit-tracer's choice: the top tokens by probability, the fewest whose cumulative
    probability reaches logit_prob, at most max_logits."""
    probs = torch.softmax(logits, -1)
    top_p, top_i = probs.topk(min(max_logits, len(probs)))
    cutoff = int(torch.searchsorted(top_p.cumsum(0), torch.tensor(logit_prob, device=top_p.device))) + 1
    cutoff = min(cutoff, len(top_p))
    return top_i[:cutoff], top_p[:cutoff]


def _check_logit_settings(max_logits, logit_prob) -> None:
    if isinstance(max_logits, bool) or not isinstance(max_logits, int) or max_logits < 1:
        raise CircuitError(f"max_logits must be a positive whole number, got {max_logits!r}")
    if isinstance(logit_prob, bool) or not isinstance(logit_prob, (int, float)) or not 0 < logit_prob <= 1:
        raise CircuitError(f"logit_prob must be a probability in (0, 1], got {logit_prob!r}")


def _check_prompt(model, transcoders, ids, max_logits) -> torch.Tensor:
    """ids as a (T,) long tensor within the model's context and the node limit; else PromptTooLong or
    CircuitError naming the limit."""
    if not isinstance(ids, torch.Tensor):
        ids = torch.as_tensor(ids)
    if ids.dim() == 2 and ids.shape[0] == 1:
        ids = ids[0]
    if ids.dim() != 1 or len(ids) < 1 or ids.is_floating_point():
        raise CircuitError(f"the prompt must be token ids (T,) or (1, T), got {tuple(ids.shape)} {ids.dtype}")
    cfg = model.config
    if int(ids.min()) < 0 or int(ids.max()) >= cfg.vocab_size:
        raise CircuitError(f"token ids must lie in 0..{cfg.vocab_size - 1} (the model's vocabulary)")
    T = len(ids)
    if T > cfg.block_size:
        raise PromptTooLong(f"the prompt has {T} tokens but the model's context (block_size) is {cfg.block_size}; "
                            f"use its last {cfg.block_size} tokens")
    if any(t.k is None for t in transcoders):  # ReLU: the count is known after encoding (attribution_graph)
        return ids.long()
    per_position = sum(t.k for t in transcoders) + len(transcoders) + 1
    if T * per_position + max_logits > MAX_NODES:
        limit = (MAX_NODES - max_logits) // per_position
        raise PromptTooLong(f"a prompt of {T} tokens can give {T * per_position + max_logits:,} nodes "
                            f"({per_position} per position: each layer's k features and its error, and the token), "
                            f"more than the {MAX_NODES:,} an attribution graph holds (its N × N adjacency: "
                            f"{MAX_NODES ** 2 * 4 / 2**30:.0f} GiB at the limit); use at most {limit} tokens")
    return ids.long()
