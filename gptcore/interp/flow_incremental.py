"""Routes while typing: `information_flow` that recomputes only the rows a keystroke changed.

Why it is exact: in a causal model, target row i's shares need only its own pattern row, its
residuals and the values of sources 0..i. So when a new prompt shares its first P tokens with the
last one, rows 0..P-1 are kept as they were, and the forward runs for tokens P.. only, against a
KVCache holding the prefix's keys and values (the values also give each kept source's part). The
result equals a fresh `information_flow` up to float32 rounding (tested on edit scripts).

The state serves one model with one set of hooks: a caller that changes the weights or the
interventions (an ablation) drops it, as the session does. Not thread-safe: run it under the lock
that guards the model.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from gptcore.interp.flow import FlowContributions, check_flow_model, check_prompt, tapped_forward
from gptcore.interp.probes.incremental import common_prefix


class FlowState:
    """The last prompt's contributions and key/value cache; `flow(ids)` runs what changed."""

    def __init__(self, model):
        check_flow_model(model)
        self.model = model
        self.kv_cache = model.new_kv_cache()
        self.ids: list[int] = []
        self.last: FlowContributions | None = None

    def reset(self) -> None:
        self.ids, self.last = [], None
        self.kv_cache.reset()

    @torch.no_grad()
    def flow(self, ids: Sequence[int], *, logits: bool = False) -> FlowContributions:
        """`information_flow(model, ids, logits=...)`, with the shared prefix's rows reused. With
        `logits=True` the result's logits cover the recomputed rows only, from `logits_from`."""
        idx = check_prompt(self.model, list(ids))  # (1, T)
        new = idx[0].tolist()
        T = len(new)
        start = min(common_prefix(self.ids, new), T - 1)  # at least the last row runs (its logits)
        if self.last is None:
            start = 0
        self.kv_cache.length = start  # keys and values past the prefix are overwritten
        try:
            taps, out = tapped_forward(self.model, idx[:, start:], start, self.kv_cache, logits)
        except BaseException:
            self.reset()  # the cache may hold half a forward
            raise
        replaced = set(taps.replaced_heads())
        if start:  # the kept rows, into the taps' arrays (a kept row never reads past itself)
            last = self.last
            taps.attn[:, :start, :start] = last.attn[:, :start, :start]
            for name in ("attn_residual", "mlp", "mlp_residual"):
                getattr(taps, name)[:, :start] = getattr(last, name)[:, :start]
            replaced |= set(last.replaced_heads)
        result = FlowContributions(attn=taps.attn, attn_residual=taps.attn_residual, mlp=taps.mlp,
                                   mlp_residual=taps.mlp_residual, tokens=np.asarray(new, dtype=np.int64),
                                   replaced_heads=tuple(sorted(replaced)), logits=out, logits_from=start)
        self.ids, self.last = new, result
        return result
