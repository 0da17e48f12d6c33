"""Routes at length: the route to one token from the rows it passes through, not the whole T × T.

Why it is exact: a representation's thresholded shares depend on its own row only (flow.py: row i
of layer l needs its pattern row, its two residuals and the values of sources 0..i). The route is
what is reachable backwards from I{L-1}_position, so walking DOWN from the top layer needs, at each
layer, only the rows the walk has reached: the top layer one row, each layer below the sources the
layer above read. The forward runs once (fused attention, no pattern kept); per layer it keeps the
rotated queries and keys, the values and the two residuals ((T, C) each, ~15 MB per GPT-2 layer at
1,024 tokens), and a reached row's pattern is recomputed from its query (the same softmax of the
same scaled scores). So the cost is one forward plus (rows on the route) × (sources × heads × C),
against the full definition's T²/2 rows-sources per layer (48 s at 1,024 tokens on GPT-2 small).

Honours hooks as information_flow does: values, residuals and z are read after any hook (an
ablated head is found by comparing z before and after every hook, and sits at the floor). When
another hook listens on a layer's pattern or scores (and so might rewrite them), that layer's
pattern is kept as the forward made it instead of recomputed.

A RouteState serves one model with one set of hooks (like FlowState): re-walking for another
position or threshold reuses the forward and every row already computed.
"""
from __future__ import annotations

import math
from typing import Callable, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from gptcore.errors import Cancelled
from gptcore.interp.flow import check_flow_model, check_prompt, shares_of_parts, two_part_shares, value_parts
from gptcore.interp.flow_graph import (FlowGraph, check_position_threshold, mlp_edges, source_node,
                                       threshold_attention, threshold_mlp)
from gptcore.interp.probes.incremental import in_one_transfer
from gptcore.interp.targets import Ids


class RowShares:
    """(L, T, T, nh)-indexable like FlowGraph.head_shares, holding only the rows computed; a row
    not computed reads as zeros. Indexed [layer, target, source] with ints or equal-shape arrays."""

    def __init__(self, shape: tuple[int, int, int, int], rows: dict[tuple[int, int], np.ndarray]):
        self.shape = shape
        self._index = {key: k for k, key in enumerate(rows)}
        zero = np.zeros((1, shape[2], shape[3]), dtype=np.float32)
        self._data = np.concatenate([np.stack(list(rows.values())), zero]) if rows else zero  # (R + 1, T, nh)

    def __getitem__(self, key):
        layer, target, source = key
        missing = len(self._index)
        if np.ndim(layer) == 0 and np.ndim(target) == 0:
            return self._data[self._index.get((int(layer), int(target)), missing), source]
        layer, target = np.broadcast_arrays(np.asarray(layer), np.asarray(target))
        k = np.array([self._index.get((int(a), int(b)), missing) for a, b in zip(layer.ravel(), target.ravel())],
                     dtype=np.int64).reshape(layer.shape)
        return self._data[k, source]


class _Keep:
    """Forward hooks that keep what the walk needs, per layer, and the MLP shares of every row."""

    def __init__(self, model, T: int):
        self.model, self.T = model, T
        L, nh = model.config.n_layer, model.config.n_head
        self.kept: dict[tuple[int, str], torch.Tensor] = {}
        # Filled on the model's device by the hooks and read back once, after the forward (finish()):
        # a read per layer would make the host wait for the device at every layer.
        self._replaced = torch.zeros(L, nh, dtype=torch.bool, device=model.device)
        self._mlp = torch.zeros(2, L, T, dtype=torch.float32, device=model.device)  # mlp, mlp_residual
        self.handles = []

    def finish(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(replaced (L, nh), mlp (L, T), mlp_residual (L, T)) as numpy, in one read from the device."""
        replaced, mlp = (t.numpy() for t in in_one_transfer(self._replaced.float(), self._mlp))
        return replaced > 0, mlp[0], mlp[1]

    def attach(self) -> None:
        hd, rope = self.model.hook_dict, self.model.config.pos_embedding == "rope"
        for l in range(self.model.config.n_layer):
            a = f"blocks.{l}.attn."
            keep = {"pre": f"blocks.{l}.hook_resid_pre", "v": a + "hook_v", "mid": f"blocks.{l}.hook_resid_mid",
                    "mlp_out": f"blocks.{l}.hook_mlp_out"}
            if self.model.blocks[l].attn.wants_pattern:  # someone else listens: keep the pattern it made
                keep["pattern"] = a + "hook_pattern"
            else:
                keep.update(q=a + ("hook_rot_q" if rope else "hook_q"), k=a + ("hook_rot_k" if rope else "hook_k"))
            for key, name in keep.items():
                self.handles.append(hd[name].register_forward_hook(self._keeper(l, key)))
            z = hd[a + "hook_z"]
            self.handles.append(z.register_forward_hook(self._keeper(l, "z_raw", clone=True), prepend=True))
            self.handles.append(z.register_forward_hook(self._z_final(l)))
            self.handles.append(hd[f"blocks.{l}.hook_resid_post"].register_forward_hook(self._mlp_done(l)))

    def detach(self) -> None:
        for h in self.handles:
            h.remove()
        self.handles.clear()

    def _keeper(self, l: int, key: str, clone: bool = False):
        def keep(_module, _inputs, out):
            t = out[0].detach()
            self.kept[l, key] = t.clone() if clone else t

        return keep

    def _z_final(self, l: int):
        def compare(_module, _inputs, out):  # out (1, T, nh, hs)
            raw = self.kept.pop((l, "z_raw"))  # (T, nh, hs)
            self._replaced[l] = (raw != out[0]).any(dim=2).any(dim=0)  # (nh,)

        return compare

    def _mlp_done(self, l: int):
        def done(_module, _inputs, out):  # out (1, T, C)
            if l == self.model.config.n_layer - 1:
                self.kept["final"] = out[0].detach()  # (T, C) the last residual, for predictions()
            mid = self.kept[l, "mid"].float()  # (T, C)
            m, r = two_part_shares(self.kept.pop((l, "mlp_out")).float(), mid, out[0].detach().float())
            self._mlp[0, l], self._mlp[1, l] = m, r

        return done


class RouteState:
    """One forward of `ids` through `model`, kept so that `graph(position, threshold)` computes only
    the rows a route reaches (and reuses rows computed before). Not thread-safe; one model state."""

    @torch.no_grad()
    def __init__(self, model, ids: Ids):
        check_flow_model(model)
        idx = check_prompt(model, ids)  # (1, T)
        self.model, self.T = model, int(idx.shape[1])
        self.tokens = idx[0].cpu().numpy().astype(np.int64)
        cfg = model.config
        self.L, self.nh = cfg.n_layer, cfg.n_head
        keep = _Keep(model, self.T)
        keep.attach()
        try:
            model(idx, logits=None)
        finally:
            keep.detach()
        self._kept = keep.kept
        self._replaced_here = keep._replaced  # (L, nh) where the model is: what _compute reads, never sent back
        self.replaced, self.mlp, self.mlp_residual = keep.finish()  # (L, nh), (L, T) every row: cheap
        self._rows: dict[tuple[int, int], tuple[np.ndarray, float]] = {}  # (layer, i) -> ((T, nh), residual)

    @property
    def replaced_heads(self) -> tuple[tuple[int, int], ...]:
        return tuple((int(l), int(h)) for l, h in zip(*np.nonzero(self.replaced)))

    @torch.no_grad()
    def predictions(self, chunk: int = 256) -> tuple[np.ndarray, np.ndarray]:
        """(T,) the top-1 next-token id after every position and (T,) its probability, through the
        final norm and unembedding `chunk` rows at a time (never the whole (T, vocab) softmax)."""
        x = self._kept["final"]  # (T, C)
        ids, probs = [], []
        for c0 in range(0, self.T, chunk):
            logits = self.model._unembed(self.model.ln_final(x[None, c0:c0 + chunk]))[0].float()  # (r, vocab)
            top, idx = logits.max(dim=-1)  # (r,) each
            probs.append(torch.exp(top - torch.logsumexp(logits, dim=-1)).cpu().numpy())
            ids.append(idx.cpu().numpy().astype(np.int64))
        return np.concatenate(ids), np.concatenate(probs).astype(np.float32)

    @property
    def rows_computed(self) -> int:
        return len(self._rows)

    def attention_rows(self, layer: int, rows: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
        """information_flow's attn[layer, rows] (r, T, nh) and attn_residual[layer, rows] (r,)."""
        missing = sorted({int(i) for i in rows if (layer, int(i)) not in self._rows})
        if missing:
            self._compute(layer, missing)
        got = [self._rows[layer, int(i)] for i in rows]
        shares = np.stack([g[0] for g in got]) if got else np.zeros((0, self.T, self.nh), np.float32)
        return shares, np.array([g[1] for g in got], dtype=np.float32)

    @torch.no_grad()
    def _compute(self, l: int, rows: list[int]) -> None:
        kept, attn = self._kept, self.model.blocks[l].attn
        S = rows[-1] + 1  # no row reads a source past the last one
        v = kept[l, "v"][:S].float().repeat_interleave(self.nh // attn.n_kv_head, dim=1)  # (S, nh, hs)
        C = kept[l, "mid"].shape[-1]
        W_O = attn.c_proj.weight.detach().float().view(C, attn.n_head, attn.head_dim)  # (C, nh, hs)
        u = value_parts(v, W_O)  # (S, nh, C)
        pattern = self._pattern_rows(l, rows, S)  # (nh, r, S)
        pre, mid = kept[l, "pre"].float(), kept[l, "mid"].float()  # (T, C) each
        replaced = self._replaced_here[l]  # (nh,) on mid's device
        pad = torch.zeros(self.nh, 1, self.T, dtype=torch.float32, device=mid.device)  # (nh, 1, T)
        shares = torch.empty(len(rows), self.T, self.nh, dtype=torch.float32, device=mid.device)  # (r, T, nh)
        resid = torch.empty(len(rows), dtype=torch.float32, device=mid.device)  # (r,)
        for k, i in enumerate(rows):
            pad.zero_()
            pad[:, 0, :S] = pattern[:, k]
            row, res = shares_of_parts(pad, u, pre[i:i + 1], mid[i:i + 1], replaced, start=i)  # (1, T, nh), (1,)
            shares[k], resid[k] = row[0], res[0]
        shares, resid = shares.cpu().numpy(), resid.cpu().tolist()  # one read for all the rows, not one per row
        for k, i in enumerate(rows):
            self._rows[l, i] = (shares[k], resid[k])

    def _pattern_rows(self, l: int, rows: list[int], S: int) -> torch.Tensor:
        """(nh, r, S) the pattern rows: kept, or softmax(q_i · k / sqrt(hs)) over sources 0..i, as
        the attention's explicit path computes it (in float32)."""
        idx = torch.tensor(rows, dtype=torch.long)
        if (l, "pattern") in self._kept:
            return self._kept[l, "pattern"][:, idx, :S].float()  # (nh, r, S)
        q = self._kept[l, "q"][idx].float().transpose(0, 1)  # (nh, r, hs)
        k = self._kept[l, "k"][:S].float().transpose(0, 1)  # (nkv, S, hs)
        k = k.repeat_interleave(self.nh // k.shape[0], dim=0)  # (nh, S, hs)
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1]))  # (nh, r, S)
        future = torch.arange(S)[None, :] > idx[:, None]  # (r, S)
        return F.softmax(scores.masked_fill(future.to(scores.device), float("-inf")), dim=-1)  # (nh, r, S)

    def graph(self, position: int = -1, threshold: float = 0.04, *, window: tuple[int, int] | None = None,
              cancel: Callable[[], bool] | None = None) -> FlowGraph:
        """The route to `position` as flow_graph gives it, walked down from the top layer. `edges`
        holds the route's edges, plus with `window=(lo, hi)` every edge into a position lo..hi-1 (those
        rows computed at every layer: a context to draw around the route). Rows not computed read as
        zero in head_shares and residual_shares. `cancel()` true between layers raises Cancelled."""
        pos = check_position_threshold(self.T, position, threshold)
        thr = float(threshold)
        mlp_t, mres_t = threshold_mlp(self.mlp, self.mlp_residual, thr)  # (L, T) each
        residual = np.zeros((self.L, self.T), dtype=np.float32)
        heads: dict[tuple[int, int], np.ndarray] = {}
        window_rows = set(range(max(0, window[0]), min(self.T, window[1]))) if window is not None else set()
        layers: list[tuple[list, list]] = []  # per layer, top first: (attention edges, MLP edges), both keyed by token
        reached = {pos}  # I{l}_i the walk reached
        on_route: set[tuple[str, str]] = set()
        for l in reversed(range(self.L)):
            if cancel is not None and cancel():
                raise Cancelled("the route was superseded")
            mlp_rows = [(i, e) for i in sorted(reached | window_rows) for e in mlp_edges(l, i, mlp_t, mres_t)]
            on_route.update((e[0], e[1]) for i, e in mlp_rows if i in reached and e[2] > thr)
            targets = sorted(i for i in reached if mlp_t[l, i] > thr or mres_t[l, i] > thr)  # A{l}_i reached
            rows = sorted(set(targets) | window_rows)
            shares, resid = self.attention_rows(l, rows)
            attn_t, ares_t = threshold_attention(shares, resid, thr)  # (r, T, nh), (r,)
            edge_w = attn_t.sum(axis=2)  # (r, T) [row, source]
            attn_edges, reached = [], set()
            for k, i in enumerate(rows):
                edge_w[k, i] += ares_t[k]
                heads[l, i], residual[l, i] = attn_t[k], ares_t[k]
                for j in np.flatnonzero(edge_w[k] > 0):
                    attn_edges.append((i, (source_node(l, int(j)), f"A{l}_{i}", float(edge_w[k, j]))))
                    if i in targets and edge_w[k, j] > thr:
                        reached.add(int(j))
                        on_route.add(attn_edges[-1][1][:2])
            layers.append((attn_edges, mlp_rows))
        edges = [e for attn_edges, mlp_rows in reversed(layers) for e in
                 [e for _i, e in attn_edges] + [e for _i, e in mlp_rows]]
        return FlowGraph(edges=tuple(edges), route=tuple(e for e in edges if (e[0], e[1]) in on_route),
                         position=pos, threshold=thr, n_layer=self.L, n_tokens=self.T,
                         head_shares=RowShares((self.L, self.T, self.T, self.nh), heads), residual_shares=residual)


def flow_route(model, ids: Ids, position: int = -1, threshold: float = 0.04) -> FlowGraph:
    """`flow_graph(information_flow(model, ids), position, threshold)`'s route, from one forward and
    the rows the route reaches only (flow_route.py says why that is exact). Its `edges` are the
    route's; head_shares / residual_shares hold the route's rows (zero elsewhere). Honours hooks
    active on the model (ablation) as information_flow does; refuses what it and flow_graph refuse."""
    check_flow_model(model)
    idx = check_prompt(model, ids)  # (1, T)
    check_position_threshold(int(idx.shape[1]), position, threshold)  # refused before the forward
    return RouteState(model, idx).graph(position, threshold)
