"""The Train panel's live charts: loss per init scheme, learning rate, gradient norm per layer,
the in-context-learning score, and the head census over steps (layer × head maps with a slider).

Why these together: loss says *that* a model learns; the census and the ICL score say *what* it
learns (previous-token heads first, then — on the induction preset — induction heads, with the
ICL score dropping at the same step: the phase change). Curves are created once and updated with
`setData`, so a redraw every poll costs little; a scheme's colour is the same on every chart.
"""
from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QComboBox, QGridLayout, QHBoxLayout, QLabel, QSizePolicy, QSlider, QVBoxLayout, QWidget

from explorer.widgets.plot_title import wrapping_title
from explorer.widgets.spaced_axis import SpacedAxis
from explorer.widgets.value_heatmap import ValueHeatmap

PALETTE = ("#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#be185d", "#4d7c0f")
CENSUS_TITLES = {"previous_token": "previous-token", "induction": "induction",
                 "position_copy": "position-copy"}


def scheme_colour(index: int) -> str:
    return PALETTE[index % len(PALETTE)]


def _plot(title: str, left: str, log_y: bool = False) -> pg.PlotWidget:
    w = pg.PlotWidget(axisItems={"bottom": SpacedAxis("bottom")})  # colours from the theme (theme.apply_theme)
    p = w.getPlotItem()
    wrapping_title(p)  # a long title wraps: as one line it set the plot wider than its widget (cut at 900 px)
    p.setTitle(title, size="9pt")
    p.setLabel("bottom", "step")
    p.setLabel("left", left)
    p.showGrid(x=True, y=True, alpha=0.25)
    p.getAxis("left").enableAutoSIPrefix(False)  # "0.5", not "500 (x0.001)"
    p.setMenuEnabled(False)
    p.hideButtons()
    if log_y:
        p.setLogMode(y=True)
    w.setMinimumHeight(120)
    _show_axes(w, False)  # an empty chart is its title alone: placeholder axes meant nothing
    return w


def _show_axes(w: pg.PlotWidget, shown: bool) -> None:
    for side in ("left", "bottom"):
        w.getPlotItem().showAxis(side, shown)


def _legend_html(names_colours, per_line: int = 4) -> str:
    """"■ embed  ■ blocks.0 …" in the curves' colours, `per_line` to a line: a legend under the chart,
    never over its curves (broken by hand: a word-wrapped label made the scroll area as tall as the
    charts' size hint, so they scrolled even at 1400 × 900)."""
    items = [f"<span style='color:{c}'>■</span>&nbsp;{n}" for n, c in names_colours]
    return "<br>".join(" &nbsp;".join(items[i:i + per_line]) for i in range(0, len(items), per_line))


class TrainCharts(QWidget):
    """In: `set_losses`, `set_lr`, `set_grad_norms`, `set_icl`, `set_census`, `clear`.
    Out: `censusSchemeChanged(str)` (which scheme the grad-norm chart and census maps show)."""

    censusSchemeChanged = Signal(str)

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self._curves: dict[tuple[str, str], pg.PlotDataItem] = {}
        self._census: dict[str, list] = {}
        self._census_steps: list[int] = []
        self._census_at: int | None = None  # the step shown the slider last followed
        self._legend: list[tuple[str, str]] = []  # (part, colour) of the grad-norm curves
        grid = QGridLayout(self)
        grid.setContentsMargins(0, 0, 0, 0)
        grid.setSpacing(4)
        self.loss_plot = _plot("loss (thin: train batches · thick: eval)", "loss", log_y=True)
        self.loss_legend = self.loss_plot.getPlotItem().addLegend(offset=(-8, 8), labelTextSize="8pt")
        self.lr_plot = _plot("learning rate", "lr")
        self.grad_plot = _plot("gradient norm per part", "‖g‖", log_y=True)
        self.grad_legend = QLabel("")  # under the chart: inside it, the legend covered the curves
        self.grad_legend.setObjectName("secondaryText")
        self.grad_legend.setTextFormat(Qt.TextFormat.RichText)
        self.grad_legend.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        grad = QWidget()
        grad_box = QVBoxLayout(grad)
        grad_box.setContentsMargins(0, 0, 0, 0)
        grad_box.setSpacing(0)
        grad_box.addWidget(self.grad_plot, 1)
        grad_box.addWidget(self.grad_legend)
        self.icl_plot = _plot("in-context learning score", "late − early loss")
        self.icl_plot.setToolTip("Mean loss late in the context minus early (Olsson et al. 2022): below 0, the "
                                 "model predicts better with more context; an induction head forming shows as a drop")
        self.icl_zero = self.icl_plot.getPlotItem().addLine(y=0, pen=pg.mkPen("#9ca3af", style=Qt.PenStyle.DashLine))
        self.icl_zero.hide()  # with the axes: on an empty chart it meant nothing
        grid.addWidget(self.loss_plot, 0, 0)
        grid.addWidget(self.lr_plot, 0, 1)
        grid.addWidget(self.icl_plot, 0, 2)
        grid.addWidget(grad, 1, 0)

        census = self._build_census()
        grid.addWidget(census, 1, 1, 1, 2)  # the head maps get the width: they are what forms
        grid.setColumnStretch(0, 4)
        grid.setColumnStretch(1, 3)
        grid.setColumnStretch(2, 3)

    def _build_census(self) -> QWidget:
        """The head census: its label, the scheme it shows, a slider over probes, one map per score."""
        census = QWidget()
        box = QVBoxLayout(census)
        box.setContentsMargins(0, 0, 0, 0)
        head = QHBoxLayout()
        self.census_label = QLabel("head census: no probe yet")
        self.census_label.setToolTip("Scores 0..1 per layer × head on random tokens: previous-token, induction on "
                                     "repeats of varied length and offset, and position-copy (a fixed-offset "
                                     "shortcut that a fixed-length census would call induction)")
        self.census_label.setObjectName("secondaryText")
        self.scheme_combo = QComboBox()
        self.scheme_combo.setToolTip("The init scheme whose census and gradient norms are shown")
        self.scheme_combo.currentTextChanged.connect(self._scheme_changed)
        head.addWidget(self.census_label, 1)
        head.addWidget(self.scheme_combo)
        box.addLayout(head)
        self.census_slider = QSlider(Qt.Orientation.Horizontal)
        self.census_slider.setToolTip("The probe step whose census is shown")
        self.census_slider.valueChanged.connect(self._show_census)
        box.addWidget(self.census_slider)
        maps = QHBoxLayout()
        self.census_maps = {name: ValueHeatmap(title, value_label="score", signed=False)
                            for name, title in CENSUS_TITLES.items()}
        for heatmap in self.census_maps.values():
            heatmap.setMinimumHeight(110)
            maps.addWidget(heatmap)
        box.addLayout(maps, 1)
        return census

    # -- curves --------------------------------------------------------------------------------------
    def _curve(self, plot: pg.PlotWidget, key: tuple[str, str], colour: str, width: float = 1.5, name=None,
               alpha: int = 255, symbol=None) -> pg.PlotDataItem:
        curve = self._curves.get(key)
        if curve is None:
            pen = pg.mkPen(pg.mkColor(colour), width=width)
            pen.color().setAlpha(alpha)
            colour_q = pg.mkColor(colour)
            colour_q.setAlpha(alpha)
            pen.setColor(colour_q)
            curve = plot.getPlotItem().plot(pen=pen, name=name, symbol=symbol, symbolSize=5,
                                            symbolBrush=pg.mkBrush(colour), symbolPen=None)
            self._curves[key] = curve
        return curve

    def set_losses(self, per_scheme: dict) -> None:
        """{scheme: (train_steps, train_loss, eval_steps, val_loss)}; thin train, thick val with dots."""
        for i, (scheme, (tx, ty, ex, ey)) in enumerate(per_scheme.items()):
            colour = scheme_colour(i)
            self._curve(self.loss_plot, ("train", scheme), colour, 1.0, alpha=90).setData(
                np.asarray(tx, float), np.asarray(ty, float), connect="finite")
            self._curve(self.loss_plot, ("val", scheme), colour, 2.5, name=f"{scheme} val", symbol="o").setData(
                np.asarray(ex, float), np.asarray(ey, float), connect="finite")
        _show_axes(self.loss_plot, bool(per_scheme))

    def set_lr(self, steps, lr) -> None:
        self._curve(self.lr_plot, ("lr", ""), "#0891b2").setData(np.asarray(steps, float), np.asarray(lr, float))
        _show_axes(self.lr_plot, len(steps) > 0)

    def set_grad_norms(self, steps, parts: dict) -> None:
        """{part name: values}: one curve per part (embeddings, each block, the final norm)."""
        steps = np.asarray(steps, float)
        for key in [k for k in self._curves if k[0] == "grad" and k[1] not in parts]:
            self.grad_plot.getPlotItem().removeItem(self._curves.pop(key))
        n = max(1, len(parts))
        legend = []
        for i, (part, values) in enumerate(parts.items()):
            colour = pg.intColor(i, hues=n, values=1, maxValue=200)
            legend.append((part, colour.name()))
            curve = self._curves.get(("grad", part))
            if curve is None:
                curve = self.grad_plot.getPlotItem().plot(pen=pg.mkPen(colour, width=1.2))
                self._curves[("grad", part)] = curve
            values = np.asarray(values, float)
            values = np.where(values > 0, values, np.nan)  # log axis: a zero norm is a gap
            curve.setData(steps, values, connect="finite")
        self._legend = legend
        self._fill_legend()
        _show_axes(self.grad_plot, bool(parts) and len(steps) > 0)

    def set_icl(self, per_scheme: dict) -> None:
        """{scheme: (probe_steps, score)}."""
        for i, (scheme, (x, y)) in enumerate(per_scheme.items()):
            self._curve(self.icl_plot, ("icl", scheme), scheme_colour(i), 2.0, symbol="o").setData(
                np.asarray(x, float), np.asarray(y, float), connect="finite")
        shown = any(len(x) for x, _y in per_scheme.values())
        _show_axes(self.icl_plot, shown)
        self.icl_zero.setVisible(shown)

    def _fill_legend(self) -> None:
        """As many entries to a line as the label's width holds (again on every resize)."""
        metrics = self.grad_legend.fontMetrics()
        widest = max((metrics.horizontalAdvance(f"■ {name}   ") for name, _c in self._legend), default=1)
        self.grad_legend.setText(_legend_html(self._legend, max(1, self.grad_legend.width() // widest)))

    def resizeEvent(self, event) -> None:  # noqa: N802 - Qt override
        super().resizeEvent(event)
        self._fill_legend()

    # -- census --------------------------------------------------------------------------------------
    def set_schemes(self, schemes) -> None:
        current = self.scheme_combo.currentText()
        if [self.scheme_combo.itemText(i) for i in range(self.scheme_combo.count())] == list(schemes):
            return
        self.scheme_combo.blockSignals(True)
        self.scheme_combo.clear()
        self.scheme_combo.addItems(list(schemes))
        if current in schemes:
            self.scheme_combo.setCurrentText(current)
        self.scheme_combo.blockSignals(False)

    def shown_scheme(self) -> str:
        return self.scheme_combo.currentText()

    def set_census(self, steps, maps: dict, at_step: int | None = None) -> None:
        """steps: probe steps; maps: {score name: array (S, L, H)}. `at_step`: the training step every
        panel shows; when it changes the slider moves to the last probe at or before it. Otherwise the
        slider stays on the latest step while it was there (it follows the run), else where the user put it."""
        at_end = self.census_slider.value() >= self.census_slider.maximum()
        self._census_steps = [int(s) for s in steps]
        self._census = {k: np.asarray(v, float) for k, v in maps.items()}
        self.census_slider.blockSignals(True)
        self.census_slider.setRange(0, max(0, len(steps) - 1))
        moved, self._census_at = at_step != self._census_at, at_step
        before = [i for i, s in enumerate(self._census_steps) if at_step is not None and s <= at_step]
        if moved and before:
            self.census_slider.setValue(before[-1])
        elif at_end:
            self.census_slider.setValue(self.census_slider.maximum())
        self.census_slider.blockSignals(False)
        self._show_census()

    def census_step(self) -> int | None:
        i = self.census_slider.value()
        return self._census_steps[i] if 0 <= i < len(self._census_steps) else None

    def _show_census(self, *_args) -> None:
        i = self.census_slider.value()
        if not self._census_steps:
            self.census_label.setText("head census: no probe yet")
            for heatmap in self.census_maps.values():
                heatmap.clear_data()
            return
        self.census_label.setText(f"head census at step {self._census_steps[i]:,} "
                                  f"({i + 1} of {len(self._census_steps)} probes)")
        for name, heatmap in self.census_maps.items():
            stack = self._census.get(name)
            if stack is None or stack.ndim != 3 or i >= len(stack):
                heatmap.clear_data()
                continue
            L, H = stack.shape[1:]
            heatmap.set_matrix(stack[i], [f"L{l}" for l in range(L)], [f"H{h}" for h in range(H)], scale=1.0,
                               col_px=24)

    def _scheme_changed(self, name: str) -> None:
        if name:
            self.censusSchemeChanged.emit(name)

    def clear(self) -> None:
        """Another run: every curve and legend entry goes (its schemes may differ)."""
        for curve in self._curves.values():
            for plot in (self.loss_plot, self.lr_plot, self.grad_plot, self.icl_plot):
                if curve in plot.getPlotItem().items:
                    plot.getPlotItem().removeItem(curve)
        self._curves.clear()
        self._legend = []
        self._fill_legend()
        for plot in (self.loss_plot, self.lr_plot, self.grad_plot, self.icl_plot):
            _show_axes(plot, False)
        self.icl_zero.hide()
        self.set_census([], {})

    def axes_shown(self) -> dict[str, bool]:
        """Which charts show their axes (only those with data): what tests check."""
        return {name: getattr(self, f"{name}_plot").getPlotItem().getAxis("bottom").isVisible()
                for name in ("loss", "lr", "grad", "icl")}
