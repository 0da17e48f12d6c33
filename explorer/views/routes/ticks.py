"""Token labels under the routes graph that never overlap (issue 34): every n-th visible token, n
from the labels' measured width and the pixels per token, the chosen token always labelled.

Why not rotate: a rotated axis label needs a custom AxisItem painter, and at 1,024 tokens even
vertical labels are a black smear; thinning keeps each shown label level and readable, and zooming
in (the x range changes) brings the others back. Pure functions of plain values, tested alone.
"""
from __future__ import annotations

import math
from typing import Callable, Sequence

MAX_CHARS = 12  # a longer token is cut with an ellipsis
GAP_PX = 10  # between two labels


def short_label(text: str) -> str:
    return text if len(text) <= MAX_CHARS else text[: MAX_CHARS - 1] + "…"


def thinned_ticks(labels: Sequence[str], x0: float, x1: float, width_px: float, chosen: int | None,
                  text_px: Callable[[str], float]) -> list[tuple[int, str]]:
    """[(token index, label)] for the tokens visible in [x0, x1] drawn `width_px` wide: every
    `step`-th (step so the widest visible label plus GAP_PX fits), `chosen` always in, its
    neighbours closer than a step dropped."""
    T = len(labels)
    lo, hi = max(0, math.ceil(x0)), min(T - 1, math.floor(x1))
    if hi < lo or width_px <= 0:
        return []
    px_per_token = width_px / max(x1 - x0, 1e-9)
    widest = max(text_px(labels[i]) for i in range(lo, hi + 1)) + GAP_PX
    step = max(1, math.ceil(widest / px_per_token))
    picks = [i for i in range(lo, hi + 1) if i % step == 0]
    if chosen is not None and lo <= chosen <= hi:
        picks = [i for i in picks if abs(i - chosen) >= step] + [chosen]
    return [(i, labels[i]) for i in sorted(picks)]
