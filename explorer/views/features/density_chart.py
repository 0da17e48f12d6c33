"""How often every feature of the dictionary fires (issue 39): SAELens' and SAEDashboard's feature-density
histogram — features per bin of log10(density) — with the dead ones (never fired: no logarithm) as a
grey bar of their own at the left, the dense ones (above the line, e.g. 10 %) in red, both counted in the
caption, and a line where the selected feature sits. One pyqtgraph item each, fed new data, never rebuilt."""
from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QSize, Qt
from PySide6.QtWidgets import QLabel, QVBoxLayout, QWidget

from explorer.views.features.charts import BAR_COLOUR, _quiet_plot
from explorer.widgets.spaced_axis import SpacedAxis

DENSE_COLOUR = (220, 38, 38, 210)
DEAD_COLOUR = (140, 140, 140, 220)
MARKER_COLOUR = "#2563eb"


def percent_label(log10_density: float) -> str:
    """-2 -> '1%', -4 -> '0.01%', 0 -> '100%': the axis in words a reader knows."""
    pct = 100 * 10.0 ** log10_density
    return f"{pct:.0f}%" if pct >= 1 else f"{pct:.2g}%"


class DensityChart(QWidget):
    """Passive: `set_density(...)` and `set_marker(density)` in; nothing out."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.caption = QLabel("")
        self.caption.setWordWrap(True)
        self.caption.setTextFormat(Qt.TextFormat.RichText)
        self.plot_widget = pg.PlotWidget(axisItems={"bottom": SpacedAxis("bottom")})
        self.plot = self.plot_widget.getPlotItem()
        _quiet_plot(self.plot)
        self.plot.setLabel("bottom", "density (share of tokens, log scale)")
        self.plot.setLabel("left", "features")
        self.plot.getAxis("left").enableAutoSIPrefix(False)
        self.fired = pg.BarGraphItem(x0=[], x1=[], height=[], brush=pg.mkBrush(*BAR_COLOUR), pen=None)
        self.dense_bars = pg.BarGraphItem(x0=[], x1=[], height=[], brush=pg.mkBrush(*DENSE_COLOUR), pen=None)
        self.dead_bar = pg.BarGraphItem(x0=[], x1=[], height=[], brush=pg.mkBrush(*DEAD_COLOUR), pen=None)
        self.dense_line = pg.InfiniteLine(angle=90, pen=pg.mkPen(DENSE_COLOUR[:3], style=Qt.PenStyle.DashLine))
        self.marker = pg.InfiniteLine(angle=90, pen=pg.mkPen(MARKER_COLOUR, width=2))
        for item in (self.fired, self.dense_bars, self.dead_bar, self.dense_line, self.marker):
            self.plot.addItem(item)
        self.marker.setVisible(False)
        box = QVBoxLayout(self)
        box.setContentsMargins(0, 2, 0, 0)
        box.setSpacing(2)
        box.addWidget(self.caption)
        box.addWidget(self.plot_widget, 1)
        self.setToolTip("Each bar counts the features whose density (share of held-out tokens where they fire) falls "
                        "in it. Grey: dead (never fired). Red, right of the dashed line: dense. Blue line: the "
                        "selected feature")
        self.edges, self.counts = np.zeros(0), np.zeros(0)
        self.dead, self.dense, self.dense_at = 0, 0, 0.1
        self.marker_x: float | None = None

    def sizeHint(self) -> QSize:  # noqa: N802 - as narrow as the table beside which it is a tab
        return QSize(300, 300)

    def set_density(self, edges, counts, dead: int, dense: int, dense_at: float, features: int, tokens: int) -> None:
        edges, counts = np.asarray(edges, float).reshape(-1), np.asarray(counts, float).reshape(-1)
        if len(edges) != len(counts) + 1 or not len(counts):
            raise ValueError(f"a histogram of {len(counts)} bins needs {len(counts) + 1} edges, got {len(edges)}")
        self.edges, self.counts, self.dead, self.dense, self.dense_at = edges, counts, int(dead), int(dense), float(dense_at)
        width = float(edges[1] - edges[0])
        centres = (edges[:-1] + edges[1:]) / 2
        is_dense = centres > np.log10(dense_at)
        self.fired.setOpts(x0=edges[:-1][~is_dense], x1=edges[1:][~is_dense], height=counts[~is_dense])
        self.dense_bars.setOpts(x0=edges[:-1][is_dense], x1=edges[1:][is_dense], height=counts[is_dense])
        dead_x = float(edges[0]) - 2 * width  # a gap of one bin: the dead are not a density
        self.dead_bar.setOpts(x0=[dead_x], x1=[dead_x + width], height=[float(dead)])
        self.dense_line.setValue(float(np.log10(dense_at)))
        low, high = int(np.floor(edges[0])), 0
        step = 1 if high - low <= 6 else 2
        ticks = [(dead_x + width / 2, "dead")] + [(float(x), percent_label(x)) for x in range(high, low - 1, -step)
                                                  if x >= edges[0] - 1e-9]
        self.plot.getAxis("bottom").setTicks([ticks])
        self.plot.setXRange(dead_x - 3 * width, float(edges[-1]) + width, padding=0)  # room for the word "dead"
        self.plot.setYRange(0, max(float(counts.max()), float(dead), 1.0), padding=0.05)
        share = dead / features if features else 0.0
        self.caption.setText(f"{features:,} features on {tokens:,} held-out tokens · <b>{dead:,} dead</b> "
                             f"({share:.1%}, never fired) · <b>{dense:,} dense</b> (on more than {dense_at:.0%} "
                             f"of tokens)")
        self._place_marker()

    def set_marker(self, density: float | None) -> None:
        """The selected feature's density (0: on the dead bar; None: no line)."""
        self.marker_x = None if density is None else float(density)
        self._place_marker()

    def clear(self) -> None:
        for bars in (self.fired, self.dense_bars, self.dead_bar):
            bars.setOpts(x0=[], x1=[], height=[])
        self.edges, self.counts = np.zeros(0), np.zeros(0)
        self.caption.setText("")
        self.set_marker(None)

    def marker_position(self) -> float | None:
        return float(self.marker.value()) if self.marker.isVisible() else None

    def _place_marker(self) -> None:
        if self.marker_x is None or not len(self.edges):
            self.marker.setVisible(False)
            return
        width = float(self.edges[1] - self.edges[0])
        x = float(np.log10(self.marker_x)) if self.marker_x > 0 else float(self.edges[0]) - 1.5 * width
        self.marker.setValue(x)
        self.marker.setVisible(True)
