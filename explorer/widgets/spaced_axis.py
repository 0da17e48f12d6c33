"""A number axis whose tick labels never touch.

Why: pyqtgraph always draws its top tick level's labels, however narrow the plot, so a 120-pixel chart
over 1,500 training steps read "0 5001000" at 900 × 600 (issue 39). This axis drops each label that would
come within GAP_PX of the one kept before it, from the low end up; the ticks themselves stay.
"""
from __future__ import annotations

import pyqtgraph as pg


class SpacedAxis(pg.AxisItem):
    GAP_PX = 6

    def generateDrawSpecs(self, p):  # noqa: N802 - pyqtgraph override
        specs = super().generateDrawSpecs(p)
        if specs is None:
            return None
        axis_spec, tick_specs, text_specs = specs
        across = self.orientation in ("bottom", "top")

        def span(rect) -> tuple[float, float]:
            return (rect.left(), rect.right()) if across else (rect.top(), rect.bottom())

        kept, last_end = [], None
        for spec in sorted(text_specs, key=lambda s: span(s[0])[0] if across else -span(s[0])[1]):
            lo, hi = span(spec[0])
            if last_end is not None and (lo < last_end + self.GAP_PX if across else hi > last_end - self.GAP_PX):
                continue
            kept.append(spec)
            last_end = hi if across else lo
        return axis_spec, tick_specs, kept
