"""The residual panel's plot: mean curves with their seed spread as a band, log y that
keeps the bands, an optional dashed comparison set and a dashed reference curve.

Split from residual_panel.py along the view/controls seam: this file only draws what it
is given (numpy), the panel owns the controls, the data and the captions.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtGui import QColor

# Okabe–Ito: distinguishable for the common colour-vision deficiencies, on light and dark.
SCHEME_COLOURS = {
    "gpt2": "#0072B2", "gpt2-unscaled": "#D55E00", "pytorch-default": "#009E73",
    "xavier-uniform": "#E69F00", "xavier-normal": "#CC79A7", "kaiming-normal": "#56B4E9",
}
FALLBACK_COLOURS = ("#999999", "#F0E442", "#000000")
LEGEND_OFFSET = (10, 10)  # the legend's top-left corner, pixels from the plot's
MAX_SYMBOL_POINTS = 40  # markers on each point only while they do not merge into a line


def scheme_colour(name: str, index: int) -> str:
    return SCHEME_COLOURS.get(name, FALLBACK_COLOURS[index % len(FALLBACK_COLOURS)])


@dataclass(frozen=True)
class Curve:
    name: str
    colour: str
    runs: np.ndarray  # (K, P): one row per seed
    dashed: bool = False  # a comparison curve: no band, no legend entry of its own


class SchemePlot(pg.PlotWidget):
    def __init__(self, parent=None):
        super().__init__(parent)
        self.showGrid(x=True, y=True, alpha=0.25)
        self.legend = self.addLegend(offset=LEGEND_OFFSET, labelTextSize="9pt")
        backdrop = QColor(pg.mkColor(pg.getConfigOption("background")))
        backdrop.setAlpha(210)  # curves stay visible behind it, labels stay readable
        self.legend.setBrush(pg.mkBrush(backdrop))
        self.legend.setPen(pg.mkPen(QColor(128, 128, 128, 120)))
        self.legend.setColumnCount(3)  # short and wide: it sits in the headroom (_fit_legend_columns)
        self.items_drawn: list = []
        self.log_y = False
        self._y_fit: tuple[float, float] | None = None  # the data's y extent, in plot coordinates
        self.getViewBox().sigResized.connect(self._fit_legend)  # the legend's share grows as the plot shrinks

    def curve_names(self) -> list[str]:
        """Names of the solid curves drawn now (the legend's entries, in order)."""
        return [i.name() for i in self.items_drawn if isinstance(i, pg.PlotDataItem) and i.name()]

    def draw(self, x: np.ndarray, curves: list[Curve], *, log_y: bool, std_band: bool, x_label: str,
             y_label: str, title: str = "", detail: str = "", reference: tuple | None = None,
             comparison_label: str = "") -> None:
        for item in self.items_drawn:
            self.removeItem(item)
        self.items_drawn.clear()
        self.legend.clear()
        self.log_y = log_y
        self.setLabel("bottom", x_label)
        self.setLabel("left", y_label)
        self.setTitle(f"{title}<br><span style='font-size:9pt'>{detail}</span>" if detail else title)
        self.getAxis("left").setLogMode(log_y)
        symbol = "o" if len(x) <= MAX_SYMBOL_POINTS else None
        for curve in curves:
            colour = QColor(curve.colour)
            mean = curve.runs.mean(axis=0)
            if curve.dashed:
                pen = pg.mkPen(colour, width=1.8, style=Qt.PenStyle.DashLine)
                self._add(pg.PlotDataItem(x, self._y(mean), pen=pen))
                continue
            if curve.runs.shape[0] > 1:
                if std_band:
                    spread = curve.runs.std(axis=0)
                    low, high = np.maximum(mean - spread, mean * 1e-3), mean + spread  # > 0 for log y
                else:
                    low, high = curve.runs.min(axis=0), curve.runs.max(axis=0)
                self._band(x, low, high, colour)
            self._add(pg.PlotDataItem(x, self._y(mean), pen=pg.mkPen(colour, width=2.2), name=curve.name,
                                      symbol=symbol, symbolSize=4, symbolBrush=colour, symbolPen=None))
        fg = pg.mkColor(pg.getConfigOption("foreground"))
        if comparison_label and any(c.dashed for c in curves):
            key = pg.PlotDataItem([], [], pen=pg.mkPen(fg, width=1.8, style=Qt.PenStyle.DashLine))
            self._add(key)
            self.legend.addItem(key, f"dashed: {comparison_label}")
        if reference is not None:
            rx, ry, rname = reference
            self._add(pg.PlotDataItem(rx, self._y(ry), pen=pg.mkPen(fg, width=2, style=Qt.PenStyle.DashDotLine),
                                      name=rname))  # the controller's label says what it knows of the model
        self._fit_legend_columns()
        self._leave_headroom(curves, reference)

    def _leave_headroom(self, curves: list[Curve], reference) -> None:
        """Fit the data, plus room at the top for the legend, so no curve hides behind it."""
        ys = [self._y(c.runs.max(axis=0)) for c in curves] + [self._y(c.runs.min(axis=0)) for c in curves]
        if reference is not None:
            ys.append(self._y(np.asarray(reference[1], dtype=float)))
        finite = np.concatenate([y[np.isfinite(y)] for y in ys]) if ys else np.zeros(0)
        if finite.size == 0:
            self._y_fit = None
            self.enableAutoRange()
            return
        self._y_fit = (float(finite.min()), float(finite.max()))
        self._fit_y_range()
        self.enableAutoRange(x=True)

    def legend_rows_px(self) -> float:
        """The legend's height and its offset from the top, in pixels: the band kept free of curves."""
        return self.legend.height() + LEGEND_OFFSET[1] + 6 if self.legend.items else 0.0

    def _fit_legend(self) -> None:
        self._fit_legend_columns()
        self._fit_y_range()

    def _fit_legend_columns(self) -> None:
        """Three columns while they fit across the plot (short and wide: the legend sits in the headroom
        above the curves); fewer when a long name (a model file's) would push the last column out of view."""
        room = self.getViewBox().width() - 2 * LEGEND_OFFSET[0]
        for columns in (3, 2, 1):
            self.legend.setColumnCount(columns)
            # Its natural size, from its entries' texts: pyqtgraph sizes the legend from the widths its
            # layout last stretched the entries to, which only grows as the columns change.
            natural = self.legend.layout.effectiveSizeHint(Qt.SizeHint.PreferredSize)
            self.legend.resize(natural)
            if room <= 0 or natural.width() <= room:
                return

    def _fit_y_range(self) -> None:
        """The y range that puts every curve below the legend: its rows take a fixed number of pixels,
        so a short plot (a 900×600 window) needs a larger share of its height kept free than a tall one
        (a share of the data's span, as before, let the legend cover the top curves there)."""
        if self._y_fit is None:
            return
        low, high = self._y_fit
        span = (high - low) or (abs(high) or 1.0)
        bottom, top = low - 0.03 * span, high + 0.03 * span
        height = self.getViewBox().height()
        share = min(self.legend_rows_px() / height, 0.6) if height > 1 else 0.3
        self.setYRange(bottom, bottom + (top - bottom) / (1.0 - share), padding=0)

    def _y(self, values: np.ndarray) -> np.ndarray:
        """Plot coordinates: log10 under log y. The transform is done here, with the axis
        told to label powers of ten, because FillBetweenItem would fill between the
        untransformed paths if the plot's own log mode did it."""
        if not self.log_y:
            return values
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.log10(np.where(values > 0, values, np.nan))

    def _band(self, x, low, high, colour: QColor) -> None:
        edge = pg.mkPen(QColor(0, 0, 0, 0))  # invisible edges; the fill is the band
        lo = pg.PlotCurveItem(x, self._y(low), pen=edge)
        hi = pg.PlotCurveItem(x, self._y(high), pen=edge)
        fill = QColor(colour)
        fill.setAlpha(60)
        for item in (lo, hi, pg.FillBetweenItem(lo, hi, brush=pg.mkBrush(fill))):
            self._add(item)

    def _add(self, item) -> None:
        self.addItem(item)
        self.items_drawn.append(item)

    def export_image(self, path: str) -> None:
        """PNG (pyqtgraph's ImageExporter, at least 1200 px wide) or SVG by the suffix.

        SVG is written by rendering the plot through Qt's QSvgGenerator (vector output):
        pyqtgraph 0.14's SVGExporter fails on the path syntax of current Qt 6
        ("not enough values to unpack" in correctCoordinates; pyqtgraph issue #3485)."""
        if path.lower().endswith(".svg"):
            from PySide6.QtCore import QRect, QSize
            from PySide6.QtGui import QPainter
            from PySide6.QtSvg import QSvgGenerator

            size = self.size()
            generator = QSvgGenerator()
            generator.setFileName(path)
            generator.setSize(QSize(size.width(), size.height()))
            generator.setViewBox(QRect(0, 0, size.width(), size.height()))
            generator.setResolution(self.logicalDpiX())  # as on screen, or text and data scale apart
            generator.setTitle(self.getPlotItem().titleLabel.text or "residual stream")
            painter = QPainter(generator)
            try:
                self.render(painter)
            finally:
                painter.end()
            return
        import pyqtgraph.exporters as exporters

        item = self.getPlotItem()
        exporter = exporters.ImageExporter(item)
        exporter.parameters()["width"] = max(1200, int(item.width()))
        exporter.export(path)
