"""The session's routes domain: information-flow routes for a prompt (gptcore.information_flow,
gptcore.flow_graph), what one block writes, and the causal check of one edge. No Qt here.

Why the contributions are handed out and kept by the caller: one forward gives every share of
every block; the graph for another threshold or another chosen position is `flow_graph` over the
same shares (milliseconds), so the Routes view's slider never recomputes. Everything runs on the
model as the session holds it, ablation included (its hooks are on the model): an ablated head's
shares sit at the floor, so its edges vanish.

Takes the session core explicitly (`RoutesDomain(core)`, made by `Session`); callers reach it
as `session.routes`.
"""
from __future__ import annotations

import functools
import time

import numpy as np
import torch

from explorer.session.routes.long import LONG_TOKENS, LongRoutes
from explorer.session.routes.over_training import routes_over_training
from explorer.session.routes.results import (NODE_KINDS, BlockEffect, EdgeTest, HeadRanking, RouteGraph,
                                             RoutesResult)

TOP_TOKENS = 6  # promoted / suppressed tokens shown for a clicked node


class RoutesDomain:
    def __init__(self, core):
        self.core = core
        # For typing: a gptcore FlowState (only the rows after the shared prefix run) and the top-1
        # ids and probabilities it last gave (the kept rows reuse them). Valid for one version: every
        # swap, ablation or setting bumps it, and the bump calls forget().
        self._typing = None  # (FlowState, (T,) int64 ids, (T,) float32 probs) | None
        self.long = LongRoutes()  # past LONG_TOKENS: the route's rows only (long.py)

    def forget(self) -> None:
        """Drop the typing state (the core calls it at every version bump: it holds the old model)."""
        self._typing = None
        self.long.forget()

    # -- the contributions (one forward) -----------------------------------------------------------
    def compute(self, text: str) -> RoutesResult:
        """Every block's shares for `text` (cropped from the left to block_size) and the model's
        top-1 next token after every position."""
        self.core.require_model()
        try:
            ids = self.core.encode(text)
        except ValueError as exc:  # a char model and a text it cannot read: offer its run's probe prompt
            from explorer.session.routes.prompt import unencodable

            raise unencodable(exc, self.core.info, self.core.encode, self.core.training.follower_for) from exc
        with self.core.lock:
            model = self.core.require_model()
            version, ablation = self.core.version, self.core.interp.ablation
            block = model.config.block_size
            cropped = max(0, len(ids) - block)
            ids = ids[cropped:]
            self.core.check_token_ids(ids, model)
            started = time.perf_counter()
            if len(ids) > LONG_TOKENS:
                return self._compute_long(text, model, ids, cropped, version, ablation, started)
            flow, top_i, top_p = self._flow_and_predictions(model, ids)
            elapsed = time.perf_counter() - started
        return RoutesResult(
            text=text, token_ids=np.asarray(ids, dtype=np.int64), tokens=tuple(self.core.token_strings(ids)),
            attn=flow.attn, attn_residual=flow.attn_residual, mlp=flow.mlp, mlp_residual=flow.mlp_residual,
            predicted_ids=top_i, predicted_texts=tuple(self.core.token_strings(top_i)),
            predicted_probs=top_p, replaced_heads=tuple(flow.replaced_heads), cropped=cropped,
            ablation=ablation, version=version, elapsed_s=elapsed)

    def _compute_long(self, text, model, ids, cropped, version, ablation, started) -> RoutesResult:
        """One forward kept (gptcore.RouteState), no T x T contributions: graphs compute their rows."""
        self._typing = None  # its (L, T, T, nh) arrays would be the memory this path saves
        state, top_i, top_p = self.long.compute(model, ids, version)
        L, T, nh = state.L, state.T, state.nh
        return RoutesResult(
            text=text, token_ids=np.asarray(ids, dtype=np.int64), tokens=tuple(self.core.token_strings(ids)),
            attn=np.zeros((L, T, 0, nh), np.float32), attn_residual=np.zeros((L, T), np.float32), mlp=state.mlp,
            mlp_residual=state.mlp_residual, predicted_ids=top_i, predicted_texts=tuple(self.core.token_strings(top_i)),
            predicted_probs=top_p, replaced_heads=state.replaced_heads, cropped=cropped, ablation=ablation,
            version=version, elapsed_s=time.perf_counter() - started, rows_only=True)

    def _flow_and_predictions(self, model, ids: list[int]):
        """The shares and the top-1 id and probability after every position, from one forward of the
        rows the typing state could not keep. Under the core's lock (as forget() is called)."""
        from gptcore import FlowState

        state = self._typing[0] if self._typing is not None else FlowState(model)
        flow = state.flow(ids, logits=True)  # the predictions come from the same forward
        top_p, top_i = torch.softmax(flow.logits.float(), dim=-1).max(dim=-1)  # (T - kept,) each
        kept = flow.logits_from  # rows 0..kept-1 are the previous prompt's, unchanged
        top_i = top_i.cpu().numpy().astype(np.int64)
        top_p = top_p.cpu().numpy()
        if kept:
            top_i = np.concatenate([self._typing[1][:kept], top_i])
            top_p = np.concatenate([self._typing[2][:kept], top_p])
        self._typing = (state, top_i, top_p)
        return flow, top_i, top_p

    # -- the graph (no forward) ----------------------------------------------------------------------
    def graph(self, result: RoutesResult, threshold: float = 0.04, position: int = -1, *, window: bool = False,
              cancel=None) -> RouteGraph:
        """`flow_graph` over the kept shares: cheap enough for every slider move. A long prompt's
        (rows_only) computes the rows it needs under the lock (a worker's job): the route, and with
        `window` the grey edges into a window of positions around the chosen one."""
        from gptcore import flow_graph

        if result.rows_only:
            with self.core.lock:
                g, span = self.long.graph(result, float(threshold), int(position), window, cancel)
                top = self.long.top_row(result, g.position) if not g.route else None
            return graph_arrays(g, result, threshold, g.position, window=span, top=top)
        g = flow_graph(contributions_of(result), position=int(position), threshold=float(threshold))
        top = (result.attn[-1, g.position], float(result.attn_residual[-1, g.position])) if not g.route else None
        return graph_arrays(g, result, threshold, g.position, top=top)

    # -- what a node writes ------------------------------------------------------------------------
    def block_effect(self, result: RoutesResult, node: str, top_k: int = TOP_TOKENS) -> BlockEffect:
        """Node `node` (X0_j, A{l}_i, M{l}_i, I{l}_i) read through the final norm and unembedding."""
        from gptcore import block_logit_effect

        with self.core.lock:
            model = self.core.require_model()
            version = self.core.version
            effect = block_logit_effect(model, result.token_ids.tolist(), node, k=top_k)
        names = self.core.token_strings
        promoted = tuple(zip(names(effect.promoted_ids.tolist()), effect.promoted_logits.tolist()))
        suppressed = tuple(zip(names(effect.suppressed_ids.tolist()), effect.suppressed_logits.tolist()))
        return BlockEffect(node=node, title=node_title(node, result.tokens), promoted=promoted,
                           suppressed=suppressed, version=version)

    # -- from routes to causes -----------------------------------------------------------------------
    def remove_edge(self, result: RoutesResult, graph: RouteGraph, edge: int) -> EdgeTest:
        """Re-run without the selected attention edge's strongest head reading its source token into
        its target position; Δ log p of the chosen token (the top-1 after the chosen position)."""
        if not 0 <= edge < graph.n_edges or not graph.is_attention[edge]:
            raise ValueError("select an attention edge first (a line from one row up to the next 'attn' row): "
                             "only a head reading a token can be removed")
        head = int(np.argmax(graph.heads[edge]))
        layer = int(graph.node_layer[graph.dst[edge]])
        source, target = int(graph.node_pos[graph.src[edge]]), int(graph.node_pos[graph.dst[edge]])
        if target > graph.position:
            raise ValueError(f"that edge writes into position {target}, after the chosen position {graph.position}: "
                             f"it cannot change that prediction; pick an edge at or before it (on the blue route)")
        with self.core.lock:
            self.core.require_model()
            version = self.core.version
            delta = self._removal(result, layer, head, source, target, graph.position, graph.target_id)
            share = self._raw_rows(result, target)[layer, source, head]
        return EdgeTest(layer=layer, head=head, source=source, target=target,
                        route_weight=float(graph.heads[edge, head]), delta_logprob=delta,
                        token_text=graph.target_text, version=version, share=float(share))

    def _raw_rows(self, result: RoutesResult, position: int) -> np.ndarray:
        """(L, T, nh) the raw shares into `position` (the core's lock held by the caller)."""
        return self.long.rows_at(result, position) if result.rows_only else result.attn[:, position]

    def _removal(self, result, layer: int, head: int, source: int, target: int, position: int, token: int) -> float:
        """gptcore.remove_edge_effect on the prompt up to `position` (causal: later tokens cannot
        change that prediction), the core's lock held by the caller."""
        from gptcore import remove_edge_effect

        ids = result.token_ids[: position + 1].tolist()
        return float(remove_edge_effect(self.core.model, ids, layer, head, source, target, token))

    def head_ranking(self, result: RoutesResult, position: int = -1, cancel=None) -> HeadRanking:
        """For every head into `position`: its strongest part (the source token it reads most) by
        route share, beside the measured Δ log p of removing exactly that part (two forwards per
        head); Spearman's rank correlation of share and −Δ."""
        position = check_position(position, result.n_tokens)
        L, nh = result.n_layer, result.n_head
        token = int(result.predicted_ids[position])
        route, effect, labels = np.zeros(L * nh), np.zeros(L * nh), []
        started = time.perf_counter()
        with self.core.lock:
            self.core.require_model()
            version = self.core.version
            shares = self._raw_rows(result, position)[:, : position + 1]  # (L, S, nh)
            sources = shares.argmax(axis=1)  # (L, nh) the token each head reads most
            for k in range(L * nh):
                if cancel is not None and cancel():
                    from gptcore.errors import Cancelled

                    raise Cancelled("the ranking was superseded")
                layer, head = divmod(k, nh)
                j = int(sources[layer, head])
                route[k] = shares[layer, j, head]
                effect[k] = self._removal(result, layer, head, j, position, position, token)
                labels.append(f"L{layer} H{head} ← {result.tokens[j]!r}")
        return HeadRanking(position=position, labels=tuple(labels), route=route, effect=effect,
                           spearman=spearman(route, -effect), token_text=result.predicted_texts[position],
                           version=version, elapsed_s=time.perf_counter() - started)

    # -- over training -------------------------------------------------------------------------------
    def over_training(self, top: int = 5):
        """The strongest routes over the probes of the run the model comes from (None otherwise)."""
        return routes_over_training(self.core.info, self.core.training.follower_for, top)


def check_position(position: int, n_tokens: int) -> int:
    """-1 (or any negative) counts from the end; past the prompt is refused, naming the range."""
    p = int(position)
    q = p + n_tokens if p < 0 else p
    if not 0 <= q < n_tokens:
        raise ValueError(f"position {p} is past the prompt: it has {n_tokens} tokens, so choose 0–{n_tokens - 1} "
                         f"(or 'last')")
    return q


def contributions_of(result: RoutesResult):
    """The gptcore FlowContributions a RoutesResult was made from (same arrays, no copy)."""
    from gptcore import FlowContributions

    return FlowContributions(attn=result.attn, attn_residual=result.attn_residual, mlp=result.mlp,
                             mlp_residual=result.mlp_residual, tokens=result.token_ids,
                             replaced_heads=tuple(result.replaced_heads))


@functools.lru_cache(maxsize=1 << 16)  # the same few thousand names on every slider move
def parse_node(name: str) -> tuple[int, int, int]:
    """'A3_7' -> (kind index, layer, position); 'X0_5' -> (0, 0, 5)."""
    kind, rest = name[0], name[1:]
    layer, pos = rest.split("_")
    return NODE_KINDS.index(kind), int(layer), int(pos)


def node_title(name: str, tokens) -> str:
    kind, layer, pos = parse_node(name)
    what = ("input token", f"layer {layer} attention", f"layer {layer} MLP", f"layer {layer} output")[kind]
    tok = tokens[pos] if 0 <= pos < len(tokens) else "?"
    return f"{what} at {tok!r} (position {pos})"


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman's rank correlation (average ranks for ties); nan when either side is constant."""
    def ranks(x):
        x = np.asarray(x, float)
        order = np.argsort(x, kind="stable")
        r = np.empty(len(x))
        r[order] = np.arange(len(x), dtype=float)
        for v in np.unique(x):  # ties share their mean rank
            tie = x == v
            if tie.sum() > 1:
                r[tie] = r[tie].mean()
        return r

    if len(a) < 2:
        return float("nan")
    ra, rb = ranks(a), ranks(b)
    if ra.std() == 0 or rb.std() == 0:
        return float("nan")
    return float(np.corrcoef(ra, rb)[0, 1])


def graph_arrays(g, result: RoutesResult, threshold: float, position: int, window=None, top=None) -> RouteGraph:
    """A FlowGraph's edges as numbered nodes and arrays (the view draws them at once), with the
    per-head split of every attention edge read from its thresholded head shares. `top`: the raw
    attention row and residual share into the chosen position at the last layer, given when the
    route is empty, to say under which threshold it would show."""
    index: dict[str, int] = {}
    names: list[str] = []
    for s, d, _w in g.edges:
        for name in (s, d):
            if name not in index:
                index[name] = len(names)
                names.append(name)
    src = np.array([index[s] for s, _d, _w in g.edges], dtype=np.int64)
    dst = np.array([index[d] for _s, d, _w in g.edges], dtype=np.int64)
    weight = np.array([w for _s, _d, w in g.edges], dtype=float)
    parsed = np.array([parse_node(n) for n in names], dtype=np.int64).reshape(-1, 3)  # (N, 3) kind, layer, pos
    on_route_pairs = {(s, d) for s, d, _w in g.route}
    on_route = np.array([(s, d) in on_route_pairs for s, d, _w in g.edges], dtype=bool)
    kind_d, layer_d, i, j = parsed[dst, 0], parsed[dst, 1], parsed[dst, 2], parsed[src, 2]  # (E,) each
    is_attention = kind_d == NODE_KINDS.index("A")
    heads = np.zeros((len(src), result.n_head))
    heads[is_attention] = g.head_shares[layer_d[is_attention], i[is_attention], j[is_attention]]
    residual = np.where(is_attention & (i == j), g.residual_shares[layer_d, i], 0.0)
    token = int(result.predicted_ids[position])
    return RouteGraph(threshold=float(threshold), position=position, names=tuple(names),
                      node_kind=parsed[:, 0].astype(np.int8), node_layer=parsed[:, 1], node_pos=parsed[:, 2],
                      src=src, dst=dst, weight=weight, on_route=on_route, is_attention=is_attention, heads=heads,
                      residual=residual, target_id=token, target_text=result.predicted_texts[position],
                      target_prob=float(result.predicted_probs[position]), version=result.version,
                      window=window, route_below=route_limit(result, position, top))


def route_limit(result: RoutesResult, position: int, top) -> float:
    """The threshold under which the route to `position` reaches through the last layer's attention
    into an earlier token: min(the larger MLP share, the largest attention share or residual)."""
    if top is None:
        return float("nan")
    row, residual = top
    mlp = max(float(result.mlp[-1, position]), float(result.mlp_residual[-1, position]))
    return min(mlp, max(float(np.max(row)), residual))
