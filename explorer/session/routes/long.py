"""Routes for a long prompt (issue 34): the route first, from the rows it reaches, and grey context
edges only in a window of positions around the chosen one. No Qt here.

Why: the full definition is T x T x heads x width per layer (48 s and 2.6 GB at 1,024 tokens on
GPT-2 small), and its 47,000 grey edges at that length are an unreadable mass anyway. Past
LONG_TOKENS the session keeps one gptcore.RouteState (one forward's per-layer tensors, ~250 MB at
1,024 tokens on GPT-2 small) and computes rows on demand: the route's (a few dozen) and the window's
(a budget of WINDOW_BUDGET elements). Called under the core's lock (the state reads the weights).
"""
from __future__ import annotations

import numpy as np

LONG_TOKENS = 128  # past this many tokens: route + window, not the full contributions
WINDOW_BUDGET = 1_400_000_000  # rows x sources x heads x width for the window (~1 s on 2 cores)
WINDOW_MIN, WINDOW_MAX = 8, 40  # tokens in the window


def window_tokens(n_layer: int, n_tokens: int, n_head: int, n_embd: int) -> int:
    """How many positions the grey context covers: as many as the budget pays for at this length."""
    per_token = max(1, n_layer * n_tokens * n_head * n_embd)
    return int(np.clip(WINDOW_BUDGET // per_token, WINDOW_MIN, WINDOW_MAX))


def window_around(position: int, n_tokens: int, width: int) -> tuple[int, int]:
    """(lo, hi) with `position` inside, mostly before it (the route runs to earlier tokens)."""
    width = min(width, n_tokens)
    lo = max(0, min(position - (3 * width) // 4, n_tokens - width))
    return lo, lo + width


class LongRoutes:
    """The RouteState of the last long prompt, for its graphs, ranking and edge tests."""

    def __init__(self):
        self.state = None  # gptcore.RouteState | None
        self.key = None  # (version, token ids) it was computed for

    def forget(self) -> None:
        self.state = self.key = None

    def compute(self, model, ids: list[int], version: int):
        """A forward with the keepers on; -> (state, (T,) top-1 ids, (T,) their probabilities)."""
        from gptcore import RouteState

        self.forget()  # the old state's ~250 MB go before the new forward
        state = RouteState(model, ids)
        top_i, top_p = state.predictions()
        self.state, self.key = state, (version, tuple(ids))
        return state, top_i, top_p

    def state_for(self, result):
        if self.state is None or self.key != (result.version, tuple(result.token_ids.tolist())):
            raise ValueError("the routes of this long prompt are no longer held (another prompt was computed "
                             "since); edit the prompt or press Enter to compute them again")
        return self.state

    def graph(self, result, threshold: float, position: int, window: bool, cancel=None):
        """(gptcore FlowGraph of the route plus, when `window`, the window's grey edges; the window)."""
        state = self.state_for(result)
        pos = int(position) % result.n_tokens if -result.n_tokens <= int(position) < result.n_tokens else position
        span = None
        if isinstance(pos, int):  # the window shown from the route's first draw on; its rows when `window`
            cfg = state.model.config
            span = window_around(pos, result.n_tokens, window_tokens(cfg.n_layer, result.n_tokens, cfg.n_head,
                                                                     cfg.n_embd))
        return state.graph(position, threshold, window=span if window else None, cancel=cancel), span

    def rows_at(self, result, position: int) -> np.ndarray:
        """(L, T, nh) the raw shares into `position` at every layer (what a ranking reads)."""
        state = self.state_for(result)
        return np.stack([state.attention_rows(l, [position])[0][0] for l in range(result.n_layer)])

    def top_row(self, result, position: int) -> tuple[np.ndarray, float]:
        shares, resid = self.state_for(result).attention_rows(result.n_layer - 1, [position])
        return shares[0], float(resid[0])
