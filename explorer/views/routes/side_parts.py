"""The Routes panel's side parts: the head ranking table (route weight vs measured removal
effect) and the small over-training chart. Passive: plain values in, nothing computed here."""
from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtGui import QColor
from PySide6.QtWidgets import QAbstractItemView, QHeaderView, QTableWidget, QTableWidgetItem

# Okabe–Ito: distinguishable for the common colour-vision deficiencies, on light and dark.
SERIES_COLOURS = ("#0072B2", "#D55E00", "#009E73", "#E69F00", "#CC79A7", "#56B4E9", "#999999")


class RankingTable(QTableWidget):
    """One row per head into the chosen position (the part it reads most): route share and its rank,
    the measured Δ log-prob of removing that part and its rank (rank 1 = strongest). Sorted by share."""

    HEADERS = ("head ← token", "raw share", "rank", "Δ log p", "rank")

    def __init__(self, parent=None):
        super().__init__(0, len(self.HEADERS), parent)
        self.setHorizontalHeaderLabels(self.HEADERS)
        self.verticalHeader().hide()
        self.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.setSelectionMode(QAbstractItemView.SelectionMode.NoSelection)
        header = self.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        self.setToolTip("Raw share: the head's part (reading that token) in the chosen position's attention block, "
                        "from the one forward of the routes, before the threshold (the graph's hover shows the "
                        "weight after it: the shares above the threshold, renormalised).\nΔ log p: the chosen token's log-probability change "
                        "when exactly that part is removed and the model re-run.\nRank 1 = strongest; close ranks = "
                        "the cheap picture and the causal one agree.")

    def set_rows(self, labels, route, effect) -> None:
        """`labels` (n,), `route` (n,) weights, `effect` (n,) Δ log-prob (strongest = most negative)."""
        route, effect = np.asarray(route, float), np.asarray(effect, float)
        order = np.argsort(-route, kind="stable")
        route_rank = np.empty(len(route), int)
        route_rank[order] = np.arange(1, len(route) + 1)
        effect_rank = np.empty(len(effect), int)
        effect_rank[np.argsort(effect, kind="stable")] = np.arange(1, len(effect) + 1)
        self.setRowCount(len(order))
        for row, k in enumerate(order):
            cells = (labels[k], f"{route[k]:.3f}", str(route_rank[k]), f"{effect[k]:+.3f}", str(effect_rank[k]))
            for col, text in enumerate(cells):
                item = QTableWidgetItem(text)
                if col:
                    item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
                self.setItem(row, col, item)

    def clear_rows(self) -> None:
        self.setRowCount(0)

    def row_texts(self) -> list[list[str]]:
        return [[self.item(r, c).text() for c in range(self.columnCount())] for r in range(self.rowCount())]


class OverTrainingChart(pg.PlotWidget):
    """The strongest routes' weights at each probe of a run, a dashed line at the step shown."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setMenuEnabled(False)
        self.hideButtons()
        self.setMouseEnabled(x=False, y=False)
        self.setLabel("bottom", "training step")
        self.setLabel("left", "route weight")
        self.setYRange(0, 1, padding=0.02)
        self.setTitle("strongest routes to the probe prompt's last token", size="9pt")
        self.legend = self.addLegend(offset=(6, 4), labelTextSize="8pt")
        backdrop = QColor(pg.mkColor(pg.getConfigOption("background")))
        backdrop.setAlpha(200)  # curves stay visible behind it, labels stay readable
        self.legend.setBrush(pg.mkBrush(backdrop))
        self.marker = pg.InfiniteLine(angle=90, pen=pg.mkPen((128, 128, 128), style=Qt.PenStyle.DashLine))
        self.addItem(self.marker)
        self.series_names: list[str] = []
        self._curves: list = []

    def set_series(self, steps, series: dict, marker_step: int | None) -> None:
        """`series`: name -> (S,) weights at `steps` (S,) (NaN where a probe did not keep that route)."""
        for curve in self._curves:
            self.removeItem(curve)
        self._curves.clear()
        self.legend.clear()
        x = np.asarray(steps, float)
        for k, (name, y) in enumerate(series.items()):
            colour = SERIES_COLOURS[k % len(SERIES_COLOURS)]
            curve = self.plot(x, np.asarray(y, float), pen=pg.mkPen(colour, width=2), symbol="o", symbolSize=4,
                              symbolBrush=colour, symbolPen=None, name=name, connect="finite")
            self._curves.append(curve)
        self.series_names = list(series)
        if marker_step is None:
            self.marker.hide()
        else:
            self.marker.setValue(marker_step)
            self.marker.show()
