"""The drawing parts of the attention grid and the zoom: colours and scales, the mosaic of
tiles, the grey staircase over each tile's future half, an image item that converts its
picture once, and an axis whose labels thin out to what fits. Split from heatmap_grid.py,
which composes them into the grid widget.
"""
from __future__ import annotations

import functools
import math

import numpy as np
import pyqtgraph as pg
from PySide6.QtGui import QFont, QFontMetrics, QImage, QPainterPath

LOG_FLOOR = 1e-4  # log scale shows weights from 1e-4 to 1
GRID_COLORMAP = "inferno"
STATS_COLORMAP = "viridis"
# "induction" is the head census's score (repeated random tokens, not this prompt): it comes
# through `set_census`, not with the prompt's data, and stays until the model or ablation changes.
SELECT_COLOUR = "#22d3ee"
ABLATED_COLOUR = "#ef4444"
MASKED_COLOUR = "#8a8f98"  # neutral grey: "cannot attend", distinct from weight 0 (black)


@functools.lru_cache(maxsize=8)
def causal_mask(T: int) -> np.ndarray:
    """(T, T) booleans, True on and below the diagonal; kept, since every redraw needs one.
    Read-only, so no caller can spoil it for the next."""
    mask = np.tri(T, dtype=bool)
    mask.flags.writeable = False
    return mask


def mosaic(thumbnails: np.ndarray) -> np.ndarray:
    """(L, nh, t, t) -> (L·t, nh·t): tile (l, h) at rows l·t.., columns h·t.. (the future half
    holds the pattern's exact zeros; `future_mask_path` covers it)."""
    L, nh, t, _ = thumbnails.shape
    return np.ascontiguousarray(thumbnails.astype(np.float32, copy=False).transpose(0, 2, 1, 3)).reshape(L * t, nh * t)


class OpaqueImageItem(pg.ImageItem):
    """An ImageItem whose rendered picture is converted to RGB32 once per new image: pyqtgraph
    renders a colour-mapped image as Indexed8, which Qt converts again on every paint
    (2.8 ms per paint for a 1000 × 1000 pattern, 0.2 ms once converted). For images without
    transparency, which ours are since the masked half is a separate item."""

    def render(self) -> None:
        super().render()
        if self.qimage is not None and self.qimage.format() == QImage.Format.Format_Indexed8:
            self.qimage = self.qimage.convertToFormat(QImage.Format.Format_RGB32)


def future_mask_path(rows: int, cols: int, t: int, tile: float = 1.0) -> QPainterPath:
    """The cells a query cannot see (key > query) of rows × cols tiles of t × t cells, each
    tile `tile` units wide: one staircase polygon per tile, built with numpy in one path."""
    path = QPainterPath()
    if t < 2 or not rows or not cols:
        return path
    c = tile / t
    q = np.arange(t - 1, 0, -1)  # (t-1,) the steps, bottom-right to top-left
    xs = np.concatenate(([1, t, t], np.repeat(q, 2))) * c  # (2t+1,)
    ys = np.concatenate(([0, 0, t - 1], np.stack((q, q - 1), 1).ravel())) * c
    ox, oy = np.meshgrid(np.arange(cols) * tile, np.arange(rows) * tile)  # tile origins
    x = (ox.ravel()[:, None] + xs).ravel()
    y = (oy.ravel()[:, None] + ys).ravel()
    connect = np.ones((rows * cols, len(xs)), dtype=np.int32)
    connect[:, -1] = 0  # the last point of a tile does not join the next tile's first
    return pg.arrayToQPath(x, y, connect=connect.ravel(), finiteCheck=False)


def to_display(values: np.ndarray, log: bool) -> np.ndarray:
    """Weights as drawn: linear, or log10 clipped at LOG_FLOOR (NaN stays NaN)."""
    if not log:
        return values
    with np.errstate(invalid="ignore"):
        return np.log10(np.maximum(values, LOG_FLOOR))


def display_levels(log: bool) -> tuple[float, float]:
    return (math.log10(LOG_FLOOR), 0.0) if log else (0.0, 1.0)




class ColumnAxis(pg.AxisItem):
    """Integer-centred ticks with given labels: 'H0', 'H1', … at x = 0.5, 1.5, …, thinned to
    every 2nd, 5th, 10th… label so that labels never touch at the axis's current length (25 heads
    in a narrow grid read "H0 H5 H10 …", not "H0H1H2…")."""

    GAP_PX = 3
    _prefix, _count, _step = "", 0, 0  # resizeEvent can come while AxisItem.__init__ runs

    def __init__(self, orientation: str, prefix: str):
        super().__init__(orientation)
        self._prefix, self._count, self._step = prefix, 0, 0
        self.enableAutoSIPrefix(False)
        self.setStyle(hideOverlappingLabels=False)  # thinned here; 'H0' at the edge may pass the axis's end a little

    def set_count(self, count: int) -> None:
        self._count = count
        self._step = 0  # recompute
        self._fit()

    def label_step(self) -> int:
        return self._step

    def _fit(self) -> None:
        count = self._count
        horizontal = self.orientation in ("top", "bottom")
        length = self.geometry().width() if horizontal else self.geometry().height()
        metrics = QFontMetrics(self.style.get("tickFont") or QFont())
        if horizontal:  # neighbours are centred on their cells: half of each label's width meets the gap
            widest = metrics.horizontalAdvance(f"{self._prefix}{max(count - 1, 0)}")
            typical = metrics.horizontalAdvance(f"{self._prefix}{count // 2}")
            need = (widest + typical) / 2 + self.GAP_PX
        else:
            need = metrics.height() + self.GAP_PX
        per_unit = length / count if count and length > 0 else need
        # the tiles' own pixels: an aspect-locked grid is shorter than its axis (a resize comes inside __init__ too)
        view = self.linkedView() if getattr(self, "_linkedView", None) is not None else None
        if count and view is not None and view.width() > 1 and view.height() > 1:
            size = view.viewPixelSize()[0 if horizontal else 1]
            per_unit = 1.0 / size if size > 0 else per_unit
        step = next(s for s in (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000) if s * per_unit >= need or s == 1000)
        if step == self._step:
            return
        self._step = step
        major = [(i + 0.5, f"{self._prefix}{i}") for i in range(0, count, step)]
        minor = [(i + 0.5, "") for i in range(count) if i % step]
        self.setTicks([major, minor])

    def resizeEvent(self, event) -> None:  # noqa: N802 - Qt override
        super().resizeEvent(event)
        self._fit()

    def linkedViewChanged(self, view, newRange=None) -> None:  # noqa: N802 - pyqtgraph override
        super().linkedViewChanged(view, newRange)
        self._fit()  # the view's scale changed (a resize, the aspect lock)
