"""The Features panel's two small charts: a feature's activation histogram, and its density and
maximum activation over a run's kept steps. Each pyqtgraph item is made once and then fed new
data (setOpts / setData), never rebuilt per feature."""
from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QCheckBox, QVBoxLayout, QWidget


BAR_COLOUR = (249, 115, 22, 200)
AXIS_PX = 56
SERIES_COLOURS = ("#0072B2", "#D55E00", "#009E73", "#E69F00", "#CC79A7")  # Okabe–Ito


def _quiet_plot(plot: pg.PlotItem) -> None:
    plot.setMenuEnabled(False)
    plot.hideButtons()
    plot.setMouseEnabled(x=False, y=False)


class ActivationHistogram(QWidget):
    """Counts of a feature's activations in bins, one BarGraphItem; "log" shows log10(1 + count),
    since one bin near zero often dwarfs the tail where the feature means something. The "log count"
    box sits in the plot's top-right corner, not on a row of its own: at 900 × 600 that row was a
    fifth of the chart's height (issue 39)."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.plot_widget = pg.PlotWidget()
        self.plot = self.plot_widget.getPlotItem()
        _quiet_plot(self.plot)
        self.plot.setLabel("bottom", "activation")
        self.bars = pg.BarGraphItem(x0=[], x1=[], height=[], brush=pg.mkBrush(*BAR_COLOUR), pen=None)
        self.plot.addItem(self.bars)
        self.log = QCheckBox("log", self.plot_widget)  # over the plot's corner (placed in resizeEvent)
        self.log.setToolTip("Bar heights as log10(1 + count): the rare strong activations stay visible")
        self.log.toggled.connect(lambda _on: self._draw())
        self.log.setAutoFillBackground(True)  # readable over the bars and on either theme's plot
        box = QVBoxLayout(self)
        box.setContentsMargins(0, 0, 0, 0)
        box.setSpacing(0)
        box.addWidget(self.plot_widget, 1)
        self.setToolTip("How often the feature takes each activation on the corpus")
        self.edges = np.zeros(0)
        self.counts = np.zeros(0)

    def resizeEvent(self, event) -> None:  # noqa: N802 - Qt override: keep the box in the corner
        super().resizeEvent(event)
        self.log.adjustSize()
        self.log.move(max(0, self.plot_widget.width() - self.log.width() - 4), 2)

    def set_histogram(self, edges, counts) -> None:
        edges, counts = np.asarray(edges, float).reshape(-1), np.asarray(counts, float).reshape(-1)
        if len(counts) and len(edges) != len(counts) + 1:
            raise ValueError(f"a histogram of {len(counts)} bins needs {len(counts) + 1} edges, got {len(edges)}")
        self.edges, self.counts = edges, counts
        self._draw()

    def clear(self) -> None:
        self.set_histogram(np.zeros(0), np.zeros(0))

    def heights(self) -> np.ndarray:
        """What the bars show now (counts, or log10(1 + count))."""
        return np.log10(1 + self.counts) if self.log.isChecked() else self.counts

    def _draw(self) -> None:
        self.bars.setOpts(x0=self.edges[:-1], x1=self.edges[1:], height=self.heights())
        self.plot.setLabel("left", "log10(1 + count)" if self.log.isChecked() else "count")
        if len(self.counts):
            top = float(np.max(self.heights())) or 1.0
            self.plot.setXRange(float(self.edges[0]), float(self.edges[-1]), padding=0.02)
            self.plot.setYRange(0, top, padding=0.05)


class OverTrainingChart(pg.GraphicsLayoutWidget):
    """One small plot per series (density, max activation: different units), stacked over the same
    steps, and a dashed line at the step on screen in each."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self._plots: dict[str, tuple[pg.PlotItem, pg.PlotDataItem, pg.InfiniteLine]] = {}
        self.series_names: list[str] = []

    def _plot_for(self, name: str, row: int) -> tuple:
        if name not in self._plots:
            plot = self.addPlot(row=row, col=0)
            _quiet_plot(plot)
            plot.setLabel("left", name)
            plot.getAxis("bottom").enableAutoSIPrefix(False)  # steps are counts, not "×0.001"
            plot.getAxis("left").enableAutoSIPrefix(False)  # a density of 0.06, not "60 (×0.001)"
            colour = SERIES_COLOURS[row % len(SERIES_COLOURS)]
            curve = plot.plot([], [], pen=pg.mkPen(colour, width=2), symbol="o", symbolSize=4,
                              symbolBrush=colour, symbolPen=None, connect="finite")
            marker = pg.InfiniteLine(angle=90, pen=pg.mkPen((128, 128, 128), style=Qt.PenStyle.DashLine))
            plot.addItem(marker)
            plot.getAxis("left").setWidth(AXIS_PX)  # equal axes: the stacked plots' steps line up
            self._plots[name] = (plot, curve, marker)
        return self._plots[name]

    def set_series(self, steps, series: dict, marker_step) -> None:
        """`series`: name -> (S,) values at `steps` (S,), NaN where a step has none."""
        x = np.asarray(steps, float).reshape(-1)
        if list(series) != list(self._plots):  # other series (rare): the plots are made anew, in order
            for plot, _curve, _marker in self._plots.values():
                self.removeItem(plot)
            self._plots.clear()
        for row, (name, values) in enumerate(series.items()):
            y = np.asarray(values, float).reshape(-1)
            if len(y) != len(x):
                raise ValueError(f"series {name!r} has {len(y)} values for {len(x)} steps")
            plot, curve, marker = self._plot_for(name, row)
            curve.setData(x, y)
            marker.setVisible(marker_step is not None)
            if marker_step is not None:
                marker.setValue(float(marker_step))
            if row == len(series) - 1:
                plot.setLabel("bottom", "training step")
            plot.enableAutoRange(y=True)
            if len(x):  # every plot over the same steps
                plot.setXRange(float(np.nanmin(x)), float(np.nanmax(x)), padding=0.03)
        self.series_names = list(series)

    def curve_data(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        _plot, curve, _marker = self._plots[name]
        return curve.getData()

    def marker_step(self, name: str) -> float | None:
        _plot, _curve, marker = self._plots[name]
        return float(marker.value()) if marker.isVisible() else None
