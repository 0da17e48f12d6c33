"""Direct logit attribution per layer: attention and MLP side by side, with the embeddings
and the biases at the ends, so "which layers write the answer" reads at a glance.

Bars are signed (up = towards the target, down = towards the contrast) and drawn by two
BarGraphItems created once and updated in place.
"""
from __future__ import annotations

import csv
import io

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtGui import QFontMetrics
from PySide6.QtWidgets import QLabel, QVBoxLayout, QWidget

ATTN_COLOUR = "#2563eb"
MLP_COLOUR = "#f59e0b"
OTHER_COLOUR = "#9ca3af"


class LayerBars(QWidget):
    """Passive view: `set_parts(attn, mlps, embed, bias, caption)` in, nothing out."""

    GAP_PX = 6

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self._attn = np.zeros(0)
        self._mlps = np.zeros(0)
        self._embed = self._bias = 0.0
        self._label_step = 1
        self.caption = QLabel("Direct logit attribution per layer")
        self.caption.setTextFormat(Qt.TextFormat.RichText)
        self.caption.setWordWrap(True)
        self.plot = pg.PlotWidget()
        self.plot.setBackground(None)
        self.plot.setMenuEnabled(False)
        self.plot.hideButtons()
        self.plot.setMouseEnabled(x=False, y=False)
        self.plot.showGrid(x=False, y=True, alpha=0.25)
        self.plot.getAxis("left").setLabel("logit difference")
        self.plot.getAxis("left").enableAutoSIPrefix(False)  # "×0.001" on a logit axis only confuses
        self._zero_line = self.plot.addLine(y=0, pen=pg.mkPen("#6b7280", width=1))
        self.attn_bars = pg.BarGraphItem(x=[], height=[], width=0.38, brush=ATTN_COLOUR, pen=pg.mkPen(None))
        self.mlp_bars = pg.BarGraphItem(x=[], height=[], width=0.38, brush=MLP_COLOUR, pen=pg.mkPen(None))
        self.other_bars = pg.BarGraphItem(x=[], height=[], width=0.6, brush=OTHER_COLOUR, pen=pg.mkPen(None))
        for item in (self.attn_bars, self.mlp_bars, self.other_bars):
            self.plot.addItem(item)
        self.legend = QLabel(f"<span style='background:{ATTN_COLOUR}'>&nbsp;&nbsp;&nbsp;</span> attention "
                             f"&nbsp; <span style='background:{MLP_COLOUR}'>&nbsp;&nbsp;&nbsp;</span> MLP "
                             f"&nbsp; <span style='background:{OTHER_COLOUR}'>&nbsp;&nbsp;&nbsp;</span> "
                             "embeddings / biases")
        self.legend.setTextFormat(Qt.TextFormat.RichText)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.caption)
        layout.addWidget(self.plot, 1)
        layout.addWidget(self.legend)
        self._show_frame(False)  # empty until the first attribution

    def set_parts(self, attn: np.ndarray, mlps: np.ndarray, embed: float, bias: float, caption: str = "") -> None:
        """attn, mlps (L,): each layer's direct effect; embed, bias: the rest of the sum."""
        self._attn, self._mlps = np.asarray(attn, float), np.asarray(mlps, float)
        self._embed, self._bias = float(embed), float(bias)
        L = len(self._attn)
        xs = np.arange(1, L + 1, dtype=float)
        self.attn_bars.setOpts(x=xs - 0.2, height=self._attn)
        self.mlp_bars.setOpts(x=xs + 0.2, height=self._mlps)
        self.other_bars.setOpts(x=[0.0, L + 1.0], height=[self._embed, self._bias])
        self._fit_ticks()
        self.plot.setXRange(-0.7, L + 1.7, padding=0)
        self._show_frame(True)
        if caption:
            self.caption.setText(caption)

    def _fit_ticks(self) -> None:
        """'emb', every k-th layer and 'bias', k as small as keeps the labels apart at the axis's width
        (12 layers in a 900-px window read 'emb L1 L3 …', not 'embL0L1…')."""
        L = len(self._attn)
        ticks = [(0.0, "emb")] + [(float(i + 1), f"L{i}") for i in range(L)] + [(L + 1.0, "bias")]
        axis = self.plot.getAxis("bottom")
        metrics = QFontMetrics(axis.style.get("tickFont") or self.plot.font())
        need = max(metrics.horizontalAdvance(t) for _, t in ticks) + self.GAP_PX
        length = self.plot.width() - self.plot.getAxis("left").width() - 8  # the widget's: known at once on a resize
        per_unit = max(length, 1) / (L + 2.4)  # the x range is L + 2.4 units wide
        step = next(s for s in range(1, len(ticks) + 1) if s * per_unit >= need or s == len(ticks))
        last = len(ticks) - 1  # 'bias' always; a layer closer to it than a step would touch it
        self._label_step = step
        axis.setTicks([[t for i, t in enumerate(ticks) if i == last or (i % step == 0 and last - i >= step)]])

    def label_step(self) -> int:
        return self._label_step

    def resizeEvent(self, event) -> None:  # noqa: N802 - Qt override
        super().resizeEvent(event)
        self._fit_ticks()

    def clear_data(self, caption: str = "") -> None:
        """No bars and no axes (an empty chart's ±0.2 and emb/bias ticks meant nothing); `caption` says why."""
        self.set_parts(np.zeros(0), np.zeros(0), 0.0, 0.0, caption=caption or " ")
        self.other_bars.setOpts(x=[], height=[])
        self._show_frame(False)

    def _show_frame(self, shown: bool) -> None:
        for side in ("left", "bottom"):
            self.plot.showAxis(side, shown)
        self.plot.showGrid(x=False, y=shown, alpha=0.25)
        self._zero_line.setVisible(shown)

    @property
    def heights(self) -> tuple[np.ndarray, np.ndarray, float, float]:
        return self._attn, self._mlps, self._embed, self._bias

    def export_png(self, path: str) -> bool:
        return self.grab().save(path)

    def csv_text(self) -> str:
        out = io.StringIO()
        writer = csv.writer(out)
        writer.writerow(["part", "layer", "logit_difference"])
        writer.writerow(["embed", "", f"{self._embed:.6g}"])
        for layer, (a, m) in enumerate(zip(self._attn, self._mlps)):
            writer.writerow(["attention", layer, f"{a:.6g}"])
            writer.writerow(["mlp", layer, f"{m:.6g}"])
        writer.writerow(["bias", "", f"{self._bias:.6g}"])
        return out.getvalue()
