"""One head, large: query tokens down the left, key tokens along the bottom.

Token labels are axis ticks at the cell centres. When the prompt is too long for every
label to fit, every n-th token is labelled (the others keep a tick), so the axis stays
readable at 1024 tokens; hovering always names both tokens and the weight exactly.
"""
from __future__ import annotations

import math

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QRectF, Signal
from PySide6.QtGui import QColor, QFont, QFontMetrics, QPainterPath
from PySide6.QtWidgets import QGraphicsPathItem, QGraphicsRectItem

from explorer.widgets.heatmap_grid import (GRID_COLORMAP, MASKED_COLOUR, SELECT_COLOUR, OpaqueImageItem, display_levels,
                           future_mask_path, to_display)
from explorer.widgets.token_chips import TextWidths
from explorer.widgets.token_stream import visible_token

LABEL_CHARS = 10
MIN_TICK_PX = 3  # closest spacing at which every token still gets its own tick


class TokenAxis(pg.AxisItem):
    def __init__(self, orientation: str):
        self._labels: list[str] = []  # before super().__init__, which already resizes
        self._widths = TextWidths()
        self._ticks_for = None  # (labels, room) the ticks were last computed for
        super().__init__(orientation)
        self.enableAutoSIPrefix(False)

    def set_labels(self, labels: list[str]) -> None:
        if labels == self._labels:
            return
        self._labels = labels
        self._update_ticks()

    def resizeEvent(self, ev=None) -> None:  # noqa: N802 - re-space labels when the view resizes
        super().resizeEvent(ev)
        self._update_ticks()

    def _update_ticks(self) -> None:
        n = len(self._labels)
        if not n:
            self.setTicks([[], []])
            return
        vertical = self.orientation in ("left", "right")
        room = self.geometry().height() if vertical else self.geometry().width()
        if self._ticks_for is not None and self._ticks_for[0] is self._labels and self._ticks_for[1] == room:
            return
        self._ticks_for = (self._labels, room)
        short = [s if len(s) <= LABEL_CHARS else s[:LABEL_CHARS - 1] + "…" for s in self._labels]
        fm = QFontMetrics(self.style.get("tickFont") or QFont())
        per_label = fm.height() + 2 if vertical else sum(self._widths(fm, short)) / n + 20
        fits = max(1, int((room or 400) / per_label))
        step = max(1, math.ceil(n / fits))
        # A tick per unlabelled token only while they stand apart (3 px): at 1000 tokens they
        # would be a solid bar of sub-pixel lines, and pyqtgraph lays out each one (~40 ms).
        minor = [(i + 0.5, "") for i in range(n) if i % step] if n * MIN_TICK_PX <= (room or 400) else []
        self.setTicks([[(i + 0.5, short[i]) for i in range(0, n, step)], minor])


class HeadZoom(pg.GraphicsLayoutWidget):
    """Passive view. In: `set_head(...)`, `set_log`. Out: `hoverText(str)`,
    `queryHovered(query)` (-1 outside) so the token chips can show that query's row."""

    hoverText = Signal(str)
    queryHovered = Signal(int)

    def __init__(self, parent=None):
        super().__init__(parent)
        self._pattern = np.zeros((0, 0), np.float32)
        self._tokens: list[str] = []
        self._log = False
        self.left_axis, self.bottom_axis = TokenAxis("left"), TokenAxis("bottom")
        self.plot = self.addPlot(row=0, col=0, axisItems={"left": self.left_axis, "bottom": self.bottom_axis})
        self.plot.setMenuEnabled(False)
        self.plot.hideButtons()
        self.plot.setMouseEnabled(x=False, y=False)
        self.plot.invertY(True)
        self.plot.setLabel("left", "query")
        self.plot.setLabel("bottom", "key")
        self.plot.setTitle("click a head in the grid", size="10pt")
        self.backdrop = QGraphicsRectItem()  # the future (masked) half shows this grey
        self.backdrop.setBrush(QColor(MASKED_COLOUR))
        self.backdrop.setPen(pg.mkPen(None))
        self.backdrop.setZValue(-1)
        self.plot.addItem(self.backdrop)
        self.image = OpaqueImageItem(axisOrder="row-major")
        self.image.setColorMap(pg.colormap.get(GRID_COLORMAP))
        self.plot.addItem(self.image)
        self.future = QGraphicsPathItem()  # grey over the masked half (see heatmap_grid: not NaN pixels)
        self.future.setBrush(QColor(MASKED_COLOUR))
        self.future.setPen(pg.mkPen(None))
        self.future.setZValue(0.5)
        self.plot.addItem(self.future)
        self._future_T = 0
        self.cursor = QGraphicsRectItem()
        self.cursor.setPen(pg.mkPen(SELECT_COLOUR, width=1.5, cosmetic=True))
        self.cursor.setBrush(QColor(0, 0, 0, 0))
        self.cursor.hide()
        self.plot.addItem(self.cursor)
        self.scene().sigMouseMoved.connect(self._on_move)

    @property
    def title(self) -> str:
        return self.plot.titleLabel.text

    @property
    def query_labels(self) -> list[str]:
        return list(self.left_axis._labels)

    @property
    def key_labels(self) -> list[str]:
        return list(self.bottom_axis._labels)

    def set_head(self, pattern: np.ndarray, tokens: list[str], title: str, levels: tuple[float, float] | None = None) -> None:
        """pattern (T, T) at full resolution (or bin labels with pooled data); NaN-free."""
        T = pattern.shape[0]
        self._pattern = pattern
        self._tokens = [visible_token(t) for t in tokens]
        self._shown = pattern.astype(np.float32, copy=False)  # the future half: exact zeros, covered
        if T != self._future_T:
            self._future_T = T
            self.future.setPath(future_mask_path(1, 1, T, tile=T))
        self._levels = levels
        self._redraw()
        self.image.setRect(QRectF(0, 0, max(T, 1), max(T, 1)))
        self.backdrop.setRect(QRectF(0, 0, T, T))
        self.left_axis.set_labels(self._tokens)
        self.bottom_axis.set_labels(self._tokens)
        self.plot.setXRange(0, max(T, 1), padding=0)
        self.plot.setYRange(0, max(T, 1), padding=0)
        self.plot.setTitle(title, size="10pt")

    def clear_head(self, message: str) -> None:
        self._pattern = np.zeros((0, 0), np.float32)
        self._shown = self._pattern
        self._tokens = []
        self.image.clear()
        self.backdrop.setRect(QRectF())
        self.future.setPath(QPainterPath())
        self._future_T = 0
        self.left_axis.set_labels([])
        self.bottom_axis.set_labels([])
        self.plot.setTitle(message, size="10pt")

    def set_log(self, log: bool, levels: tuple[float, float] | None = None) -> None:
        self._log = log
        self._levels = levels
        self._redraw()

    def _redraw(self) -> None:
        if getattr(self, "_shown", None) is None or not self._shown.size:
            return
        levels = self._levels or display_levels(self._log)
        self.image.setImage(to_display(self._shown, self._log), autoLevels=False, levels=levels)

    def _on_move(self, scene_pos) -> None:
        T = self._pattern.shape[0]
        if not T or not self.plot.sceneBoundingRect().contains(scene_pos):
            self.cursor.hide()
            self.queryHovered.emit(-1)
            return
        p = self.plot.vb.mapSceneToView(scene_pos)
        q, k = math.floor(p.y()), math.floor(p.x())
        if not (0 <= q < T and 0 <= k < T):
            self.cursor.hide()
            self.queryHovered.emit(-1)
            return
        self.cursor.setRect(QRectF(k, q, 1, 1))
        self.cursor.show()
        self.queryHovered.emit(q)
        if k <= q:
            self.hoverText.emit(f"query {q} {self._tokens[q]!s} → key {k} {self._tokens[k]!s}: "
                                f"{self._pattern[q, k]:.4f}")
        else:
            self.hoverText.emit(f"query {q} {self._tokens[q]} cannot attend to key {k} {self._tokens[k]} (future)")
