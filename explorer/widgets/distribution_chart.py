"""The next-token distribution as horizontal bars, one row per candidate token.

Each row shows two things at once, so a slider move reads as mass moving:
- a dashed outline: the model's own probability (softmax of the logits, T = 1, nothing masked);
- a filled bar: the probability after the sampling settings, the one a token is drawn
  from, coloured with the same bins as the generated text. Rows the settings removed
  (top-k / top-p) keep their outline and are filled grey with "masked".
Horizontal bars because token strings are the labels: they read left to right on the axis.
The items are created once and updated in place (`setOpts`), so redrawing on every
slider tick is cheap.
"""
from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QFontMetrics
from PySide6.QtWidgets import QLabel, QVBoxLayout, QWidget

from explorer.widgets.formatting import format_prob
from explorer.widgets.token_stream import probability_colour, visible_token

MASKED_COLOUR = "#b9b9b9"
OUTLINE_COLOUR = "#8c8c8c"  # mid grey: visible on the light and the dark theme
MASKED_TEXT_COLOUR = "#8c8c8c"
LABEL_CHARS = 16


class PercentAxis(pg.AxisItem):
    def tickStrings(self, values, scale, spacing):  # noqa: N802 - pyqtgraph override
        return [format_prob(v) if v > 0 else "0" for v in values]


def _short(label: str) -> str:
    label = visible_token(label)
    return label if len(label) <= LABEL_CHARS else label[: LABEL_CHARS - 1] + "…"


class DistributionChart(QWidget):
    """Passive view: `set_distribution(...)` in, nothing out."""

    MIN_ROWS = 5

    def __init__(self, parent: QWidget | None = None, rows: int = 20):
        super().__init__(parent)
        self._rows = rows
        self._note, self._shown = "", 0
        self._labels: list[str] = []
        self._probs = np.zeros(0)
        self._model_probs = np.zeros(0)

        self.caption = QLabel("Next-token distribution")
        self.caption.setWordWrap(True)
        self.caption.setTextFormat(Qt.TextFormat.RichText)
        self.plot = pg.PlotWidget(axisItems={"bottom": PercentAxis("bottom")})
        self.plot.setBackground(None)
        self.plot.setMenuEnabled(False)
        self.plot.setMouseEnabled(x=False, y=False)
        self.plot.hideButtons()
        self.plot.showGrid(x=True, y=False, alpha=0.25)
        self.plot.invertY(True)  # the most likely token on top
        self.plot.getAxis("bottom").setLabel("probability")
        self.plot.getAxis("bottom").enableAutoSIPrefix(False)  # ticks are already percentages
        self.plot.getAxis("left").setStyle(tickTextOffset=6)
        self._text_colour = QColor(pg.mkColor(pg.getConfigOption("foreground")))  # the theme's (set by theme.py)
        for side in ("left", "bottom"):
            self.plot.getAxis(side).setTextPen(self._text_colour)
        self._outline = pg.BarGraphItem(x0=[], y=[], height=0.8, width=[],
                                        pen=pg.mkPen(OUTLINE_COLOUR, width=1.3, style=Qt.PenStyle.DashLine),
                                        brush=pg.mkBrush(0, 0, 0, 0))
        self._bars = pg.BarGraphItem(x0=[], y=[], height=0.56, width=[], pen=pg.mkPen(None), brushes=[])
        self.plot.addItem(self._bars)
        self.plot.addItem(self._outline)
        self._value_items: list[pg.TextItem] = []
        for _ in range(rows):
            item = pg.TextItem(anchor=(0, 0.5))
            item.setZValue(10)
            self.plot.addItem(item)
            self._value_items.append(item)
        self.plot.showAxis("left", False)  # empty until the first distribution
        self.plot.showAxis("bottom", False)
        self.plot.showGrid(x=False, y=False)
        self.note = QLabel("")
        self.note.setWordWrap(True)
        self.note.setTextFormat(Qt.TextFormat.RichText)
        self.legend = QLabel(
            "<span style='color:#8c8c8c'>⬚</span> model (T = 1, nothing masked) &nbsp; "
            f"<span style='background:{probability_colour(0.3)}'>&nbsp;&nbsp;&nbsp;&nbsp;</span> after your settings "
            "(colour as in the text) &nbsp; "
            f"<span style='background:{MASKED_COLOUR}'>&nbsp;&nbsp;&nbsp;&nbsp;</span> masked"
        )
        self.legend.setTextFormat(Qt.TextFormat.RichText)
        self.legend.setWordWrap(True)

        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.caption)
        layout.addWidget(self.plot, 1)
        layout.addWidget(self.note)
        layout.addWidget(self.legend)

    def set_distribution(self, labels: list[str], probs: np.ndarray, model_probs: np.ndarray, *,
                         caption: str = "", note: str = "") -> None:
        """labels (K,) token strings; probs (K,) after the settings (0 = masked);
        model_probs (K,) the model's own probabilities. Rows are drawn in the given order."""
        probs = np.asarray(probs, dtype=np.float64)[: self._rows]
        model_probs = np.asarray(model_probs, dtype=np.float64)[: self._rows]
        labels = list(labels)[: self._rows]
        k = len(labels)
        if not (probs.shape == model_probs.shape == (k,)):
            raise ValueError(f"labels, probs and model_probs must have the same length, got "
                             f"{k}, {probs.shape}, {model_probs.shape}")
        self._labels, self._probs, self._model_probs = labels, probs, model_probs
        ys = np.arange(k, dtype=np.float64)
        masked = probs <= 0
        widths = np.where(masked, model_probs, probs)
        brushes = [pg.mkBrush(MASKED_COLOUR if m else probability_colour(p)) for p, m in zip(probs, masked)]
        self._bars.setOpts(x0=np.zeros(k), y=ys, width=widths, brushes=brushes)
        self._outline.setOpts(x0=np.zeros(k), y=ys, width=model_probs)
        top = float(max(widths.max(initial=0.0), model_probs.max(initial=0.0))) or 1.0
        for i, item in enumerate(self._value_items):
            if i < k:
                text = "masked" if masked[i] else format_prob(probs[i])
                item.setText(text, color=QColor(MASKED_TEXT_COLOUR) if masked[i] else self._text_colour)
                item.setPos(max(widths[i], model_probs[i]) + top * 0.01, ys[i])
                item.setVisible(True)
            else:
                item.setVisible(False)
        left = self.plot.getAxis("left")
        ticks = [(float(y), _short(s)) for y, s in zip(ys, labels)]
        left.setTicks([ticks])
        # A fixed width fitted to the labels: pyqtgraph widens an axis only after a paint,
        # so the first frame (and a screenshot) would clip or skip long token labels.
        metrics = QFontMetrics(left.style.get("tickFont") or self.plot.font())
        left.setWidth(max((metrics.horizontalAdvance(t) for _, t in ticks), default=20) + 16)
        self.plot.setXRange(0, top * 1.22, padding=0)
        self._note = note
        self._fit_rows()
        for side in ("left", "bottom"):  # no bars: axes and grid would only show meaningless ticks
            self.plot.showAxis(side, k > 0)
        self.plot.showGrid(x=k > 0, y=False, alpha=0.25)
        if caption:
            self.caption.setText(caption)

    def _fit_rows(self) -> None:
        """As many rows as fit a line of text each: a short chart (a 600-px window) shows the top
        rows readable, not 20 labels on top of each other; the note says how many are shown."""
        k = len(self._labels)
        row_px = QFontMetrics(self.plot.getAxis("left").style.get("tickFont") or self.plot.font()).height() + 2
        room = self.plot.height() - (self.plot.getAxis("bottom").height() if k else 0) - 8
        shown = min(k, max(self.MIN_ROWS, int(room / row_px)))
        self._shown = shown
        self.plot.setYRange(-0.6, max(shown, 1) - 0.4, padding=0)
        more = f"top {shown} of {k} shown (a taller window shows all)" if shown < k else ""
        self.note.setText(" · ".join(t for t in (self._note, more) if t))

    def shown_rows(self) -> int:
        """How many of the rows fit the chart's height (the others are below its end)."""
        return self._shown

    def resizeEvent(self, event) -> None:  # noqa: N802 - Qt override
        super().resizeEvent(event)
        self._fit_rows()

    # -- read back (tests, export) -------------------------------------------------------
    def bar_labels(self) -> list[str]:
        return list(self._labels)

    def bar_values(self) -> np.ndarray:
        """The filled bars' probabilities (after the settings; 0 where masked)."""
        return self._probs.copy()

    def model_values(self) -> np.ndarray:
        return self._model_probs.copy()

    def masked_rows(self) -> np.ndarray:
        return self._probs <= 0
