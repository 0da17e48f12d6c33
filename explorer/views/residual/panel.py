"""Residual-stream panel (passive view): norm of the stream layer by layer, one curve per
init scheme with its spread over seeds as a band, and a gradient-flow view.

It answers "why does GPT-2 scale its residual projections by 1/sqrt(2·n_layer)?" by
drawing it: at 48 layers the unscaled schemes' curves climb while `gpt2`'s stays flat.
Numpy in (`set_curves`, `set_reference`), intent signals out (`runRequested`, ...); the
controller does the work. No torch, no gptcore.
"""
from __future__ import annotations

import csv
from typing import Sequence

import numpy as np
from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (QCheckBox, QComboBox, QGroupBox, QHBoxLayout, QLabel, QLineEdit,
                               QProgressBar, QPushButton, QScrollArea, QSpinBox, QTabBar, QVBoxLayout, QWidget)

from explorer.views.residual.captions import caption_text
from explorer.widgets.controls import check_box, form_group
from explorer.views.residual.plot import Curve, SchemePlot, scheme_colour

SCHEME_NOTES = {
    "gpt2": "N(0, 0.02); the residual projections (attn/mlp c_proj) N(0, 0.02/√(2·n_layer))",
    "gpt2-unscaled": "N(0, 0.02) everywhere: GPT-2 without the residual scaling",
    "pytorch-default": "torch's own: U(±1/√fan_in) Linear, N(0, 1) embeddings",
    "xavier-uniform": "U(±√(6/(fan_in+fan_out)))", "xavier-normal": "N(0, 2/(fan_in+fan_out))",
    "kaiming-normal": "N(0, 2/fan_in) (He, fan-in)",
}
VIEWS = ("norms", "gradients")
VIEW_TEXT = {
    "norms": ("layer  (0: embedding · k.5: after block k's attention · k+1: after its MLP)",
              "mean ‖x‖ per token"),
    "gradients": ("block", "gradient norm"),
}


def _numbers(*values) -> list[str]:
    """Shortest text that reads back to the same float (repr of a Python float, not numpy's)."""
    return [repr(float(v)) for v in values]


def _spin(low: int, high: int, value: int, tip: str, step: int = 1) -> QSpinBox:
    box = QSpinBox()
    box.setRange(low, high)
    box.setSingleStep(step)
    box.setValue(value)
    box.setToolTip(tip)
    return box


def _combo(items: Sequence[tuple[str, str]], tip: str = "") -> QComboBox:
    """A combo box of (text, data) items."""
    box = QComboBox()
    for text, data in items:
        box.addItem(text, data)
    box.setToolTip(tip)
    return box


class ResidualPanel(QWidget):
    runRequested = Signal(dict)  # settings(): what to measure
    cancelRequested = Signal()
    exportRequested = Signal(str)  # "csv" | "png" | "svg"
    viewChanged = Signal(str)  # "norms" | "gradients"
    modelShapeRequested = Signal()  # "use the loaded model's depth/width/heads"
    measurementEdited = Signal()  # a control that needs Run changed (the plot may now be out of date)

    def __init__(self, schemes: Sequence[str], parent: QWidget | None = None):
        super().__init__(parent)
        self.schemes = tuple(schemes)
        self._data: dict[str, dict] = {}  # view -> what set_curves got
        self._reference: tuple[np.ndarray, np.ndarray, str] | None = None
        self._build_controls()
        self._build_plot()
        outer = QHBoxLayout(self)
        outer.addWidget(self.controls_scroll, 0)
        outer.addLayout(self.plot_column, 1)
        self.set_busy(False)
        self._sync_controls()

    # -- construction --------------------------------------------------------------------
    def _build_controls(self) -> None:
        """The settings column, group by group, in a scroll area that never takes the plot's width."""
        column = QWidget()
        lay = QVBoxLayout(column)
        for group in (self._build_shape_group(), self._build_architecture_group(), self._build_prompts_group(),
                      self._build_measure_group(), self._build_schemes_group(), self._build_look_group()):
            lay.addWidget(group)
        lay.addStretch(1)
        self._connect_measurement_edits()
        self.controls_scroll = QScrollArea()
        self.controls_scroll.setWidget(column)
        self.controls_scroll.setWidgetResizable(True)
        self.controls_scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.controls_scroll.setMinimumWidth(min(column.sizeHint().width(), 280) + 24)  # narrow windows: fields shrink, not the plot

    def _build_shape_group(self) -> QGroupBox:
        self.layers_box = _spin(1, 512, 12, "n_layer: try 48 to see the growth clearly")
        self.width_box = _spin(8, 4096, 768, "n_embd (must be divisible by the number of heads)", step=32)
        self.heads_box = _spin(1, 64, 12, "n_head")
        row = QHBoxLayout()
        self.model_shape_button = QPushButton("Loaded model's")
        self.model_shape_button.setToolTip("Depth, width and heads of the model that is loaded now")
        self.model_shape_button.clicked.connect(self.modelShapeRequested)
        self.deep_button = QPushButton("Deep && narrow")
        self.deep_button.setToolTip("48 layers × 64 wide, 4 heads: fast, and the residual growth is unmistakable")
        self.deep_button.clicked.connect(lambda: self.set_shape(48, 64, 4))
        row.addWidget(self.model_shape_button)
        row.addWidget(self.deep_button)
        return form_group("Model shape (fresh random weights)", [
            ("Layers", self.layers_box), ("Width", self.width_box), ("Heads", self.heads_box), (None, row)])

    def _build_architecture_group(self) -> QGroupBox:
        self.ln_box = _combo((("pre-LN (GPT-2)", "pre"), ("post-LN (2017)", "post")),
                             "pre-LN: x + f(LN(x)), GPT-2's. post-LN: LN(x + f(x)), the original Transformer's")
        self.norm_box = _combo((("LayerNorm (GPT-2)", "layernorm"), ("RMSNorm (Llama)", "rmsnorm")),
                               "LayerNorm subtracts the mean and divides by the spread; RMSNorm only divides by "
                               "the root mean square (no mean, no bias)")
        self.residual_box = check_box("residual connections", "Off: each block's output replaces the stream "
                                      "instead of adding to it", checked=True)
        self.compare_box = check_box("also the other setting, dashed", "Measure with AND without residual "
                                     "connections; the other setting is drawn dashed in each scheme's colour "
                                     "(twice the work)")
        return form_group("Architecture", [("Placement", self.ln_box), ("Norm", self.norm_box),
                                           (None, self.residual_box), (None, self.compare_box)])

    def _build_prompts_group(self) -> QGroupBox:
        self.batch_box = _spin(1, 64, 4, "prompts per step")
        self.length_box = _spin(1, 4096, 64, "tokens per prompt")
        self.seeds_box = _spin(1, 20, 3, "seeds 0..K-1: the band shows the spread over them")
        self.text_box = QLineEdit()
        self.text_box.setPlaceholderText("random tokens (or type a prompt)")
        self.text_box.setToolTip("Empty: uniformly random token ids. Text: its tokens, as one prompt")
        return form_group("Prompts and seeds", [("Batch", self.batch_box), ("Length", self.length_box),
                                                ("Seeds", self.seeds_box), ("Text", self.text_box)])

    def _build_measure_group(self) -> QGroupBox:
        self.metric_box = _combo((("L2 norm ‖x‖₂", "l2"), ("RMS ‖x‖₂/√width", "rms")))
        self.quantity_box = _combo((("‖∂L/∂θ‖ of each block's weights", "params"),
                                    ("‖∂L/∂x‖ at each block's input", "stream")))
        return form_group("Measure (applies on Run)", [("Norm", self.metric_box), ("Gradient", self.quantity_box)])

    def _build_schemes_group(self) -> QGroupBox:
        shown = QGroupBox("Init schemes")
        column = QVBoxLayout(shown)
        self.scheme_boxes: dict[str, QCheckBox] = {}
        for i, name in enumerate(self.schemes):
            box = check_box(name, SCHEME_NOTES.get(name, ""), self._redraw, checked=True)
            box.setStyleSheet(f"QCheckBox {{ color: {scheme_colour(name, i)}; font-weight: bold; }}")
            column.addWidget(box)
            self.scheme_boxes[name] = box
        return shown

    def _build_look_group(self) -> QGroupBox:
        self.spread_box = _combo((("min–max over seeds", "minmax"), ("± 1 std over seeds", "std")))
        self.spread_box.currentIndexChanged.connect(self._redraw)
        self.log_box = check_box("log y", on_toggled=self._redraw)
        return form_group("Plot (applies at once)", [("Band", self.spread_box), (None, self.log_box)])

    def _connect_measurement_edits(self) -> None:
        """Every control a result depends on says so (the plot shown may now be out of date)."""
        for spin in (self.layers_box, self.width_box, self.heads_box, self.batch_box, self.length_box, self.seeds_box):
            spin.valueChanged.connect(self.measurementEdited)
        for combo in (self.ln_box, self.norm_box, self.metric_box, self.quantity_box):
            combo.currentIndexChanged.connect(self.measurementEdited)
        for box in (self.residual_box, self.compare_box):
            box.toggled.connect(self.measurementEdited)
        self.text_box.textChanged.connect(self.measurementEdited)

    def _build_plot(self) -> None:
        self.plot_column = QVBoxLayout()
        self.view_tabs = QTabBar()
        self.view_tabs.addTab("Residual norm")
        self.view_tabs.addTab("Gradient flow")
        self.view_tabs.currentChanged.connect(self._on_tab)
        self.plot = SchemePlot()
        self.legend = self.plot.legend
        self.caption = QLabel("")
        self.caption.setWordWrap(True)
        self.caption.setTextFormat(Qt.TextFormat.RichText)
        self.caption.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.stale_note = QLabel("")
        self.stale_note.setObjectName("staleNote")
        self.stale_note.setWordWrap(True)
        self.stale_note.setStyleSheet("QLabel#staleNote { background: #fef3c7; color: #78350f; padding: 4px 8px;"
                                      " border-radius: 4px; }")
        self.stale_note.hide()
        bar = QHBoxLayout()
        self.run_button = QPushButton("Run")
        self.run_button.setDefault(True)
        self.run_button.clicked.connect(lambda: self.runRequested.emit(self.settings()))
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.clicked.connect(self.cancelRequested)
        self.progress = QProgressBar()
        self.progress.setTextVisible(True)
        self.status = QLabel("")
        bar.addWidget(self.run_button)
        bar.addWidget(self.cancel_button)
        bar.addWidget(self.progress, 1)
        for kind in ("csv", "png", "svg"):
            button = QPushButton(kind.upper())
            button.setToolTip(f"Export the {'curves' if kind == 'csv' else 'plot'} as {kind.upper()}")
            button.clicked.connect(lambda _=False, k=kind: self.exportRequested.emit(k))
            bar.addWidget(button)
        self.plot_column.addWidget(self.view_tabs)
        self.plot_column.addWidget(self.stale_note)
        self.plot_column.addWidget(self.plot, 1)
        self.plot_column.addWidget(self.caption)
        self.plot_column.addLayout(bar)
        self.plot_column.addWidget(self.status)

    # -- intent ----------------------------------------------------------------------------
    @property
    def current_view(self) -> str:
        return VIEWS[self.view_tabs.currentIndex()]

    def settings(self) -> dict:
        return dict(view=self.current_view, n_layer=self.layers_box.value(), n_embd=self.width_box.value(),
                    n_head=self.heads_box.value(), ln_placement=self.ln_box.currentData(),
                    norm=self.norm_box.currentData(),
                    residual=self.residual_box.isChecked(), batch=self.batch_box.value(),
                    length=self.length_box.value(), seeds=tuple(range(self.seeds_box.value())),
                    text=self.text_box.text(), metric=self.metric_box.currentData(),
                    quantity=self.quantity_box.currentData(), schemes=self.enabled_schemes(),
                    compare=self.compare_box.isChecked())

    def _sync_controls(self) -> None:
        """Only the controls of the view shown are live (the norm kind means nothing to gradients)."""
        self.metric_box.setEnabled(self.current_view == "norms")
        self.quantity_box.setEnabled(self.current_view == "gradients")

    def enabled_schemes(self) -> tuple[str, ...]:
        return tuple(n for n in self.schemes if self.scheme_boxes[n].isChecked())

    def _on_tab(self, _index: int) -> None:
        self._sync_controls()
        self._redraw()
        self.viewChanged.emit(self.current_view)

    # -- data in -----------------------------------------------------------------------------
    def set_log_y(self, on: bool) -> None:
        """A log y axis (growth is multiplicative: it shows every scheme)."""
        self.log_box.setChecked(on)

    def set_shape(self, n_layer: int, n_embd: int, n_head: int) -> None:
        self.layers_box.setValue(n_layer)
        self.width_box.setValue(n_embd)
        self.heads_box.setValue(n_head)

    def set_view(self, view: str) -> None:
        self.view_tabs.setCurrentIndex(VIEWS.index(view))

    def set_curves(self, view: str, x: np.ndarray, schemes: Sequence[str], values: np.ndarray, *,
                   labels: Sequence[str] = (), y_label: str = "", title: str = "", context: dict | None = None,
                   comparison: np.ndarray | None = None, comparison_label: str = "") -> None:
        """values (S, K, P): scheme × seed × point; drawn as mean with the spread as a band.
        `comparison` (same shape) is drawn dashed (e.g. the other residual setting).
        `context` (n_layer, residual, ln_placement) lets the caption explain the figures."""
        values = np.asarray(values, dtype=np.float64)
        self._data[view] = dict(x=np.asarray(x, dtype=np.float64), schemes=tuple(schemes), values=values,
                                labels=tuple(labels), y_label=y_label, title=title, context=dict(context or {}),
                                comparison=None if comparison is None else np.asarray(comparison, dtype=np.float64),
                                comparison_label=comparison_label)
        if view == self.current_view:
            self._redraw()

    def set_reference(self, x: np.ndarray | None, y: np.ndarray | None = None, name: str = "") -> None:
        """The loaded model's own curve (norms view) under `name`, its legend entry; None removes it."""
        self._reference = None if x is None else (np.asarray(x, float), np.asarray(y, float), name)
        if self.current_view == "norms":
            self._redraw()

    def clear(self, view: str | None = None) -> None:
        for v in ([view] if view else list(self._data)):
            self._data.pop(v, None)
        self._redraw()

    def set_busy(self, busy: bool) -> None:
        self.run_button.setEnabled(not busy)
        self.cancel_button.setEnabled(busy)
        if not busy:
            self.progress.setRange(0, 1)
            self.progress.setValue(0)
            self.progress.setFormat("")

    def set_progress(self, done: int, total: int, message: str = "") -> None:
        self.progress.setRange(0, max(total, 1))
        self.progress.setValue(done)
        self.progress.setFormat(f"{message}  ({done}/{total})" if message else f"{done}/{total}")

    def set_status(self, text: str) -> None:
        self.status.setText(text)

    def set_stale(self, reason: str | None) -> None:
        """Mark the plot shown as out of date (`reason` says why and what to press), or clear the mark."""
        self.stale_note.setText(f"⚠ Out of date: {reason}" if reason else "")
        self.stale_note.setVisible(bool(reason))

    def stale_reason(self) -> str:
        return self.stale_note.text()

    # -- drawing -----------------------------------------------------------------------------
    def curve_names(self) -> list[str]:
        """Names of the curves drawn now (what the legend lists, the dashed key excepted)."""
        return [n for n in self.plot.curve_names() if not n.startswith("dashed:")]

    def _redraw(self) -> None:
        data = self._data.get(self.current_view)
        x_text, y_text = VIEW_TEXT[self.current_view]
        title, _, detail = (data["title"] if data else "").partition(" · ")
        curves = []
        if data:
            for s, name in enumerate(data["schemes"]):
                if name in self.scheme_boxes and self.scheme_boxes[name].isChecked():
                    colour = scheme_colour(name, self.schemes.index(name))
                    curves.append(Curve(name, colour, data["values"][s]))
                    if data["comparison"] is not None:
                        curves.append(Curve(name, colour, data["comparison"][s], dashed=True))
        reference = self._reference if self.current_view == "norms" else None
        self.plot.draw(data["x"] if data else np.zeros(0), curves, log_y=self.log_box.isChecked(),
                       std_band=self.spread_box.currentData() == "std", x_label=x_text,
                       y_label=data["y_label"] if data and data["y_label"] else y_text, title=title, detail=detail,
                       reference=reference if data else None,
                       comparison_label=data["comparison_label"] if data else "")
        ticked = [name for name in self.schemes if self.scheme_boxes[name].isChecked()]
        self.caption.setText(caption_text(self.current_view, data, ticked) if data else "")

    # -- export ------------------------------------------------------------------------------
    def export_csv(self, path: str) -> None:
        data = self._data.get(self.current_view)
        if not data:
            raise ValueError("nothing to export yet: press Run first")
        with open(path, "w", newline="", encoding="utf-8") as fh:
            out = csv.writer(fh)
            out.writerow(["view", "scheme", "x", "label", "mean", "std", "min", "max", "seeds"])
            labels = data["labels"] or tuple("" for _ in data["x"])
            sets = [(name, data["values"][s]) for s, name in enumerate(data["schemes"])]
            if data["comparison"] is not None:
                sets += [(f"{name} ({data['comparison_label']})", data["comparison"][s])
                         for s, name in enumerate(data["schemes"])]
            for name, runs in sets:
                for p, (x, label) in enumerate(zip(data["x"], labels)):
                    col = runs[:, p]
                    out.writerow([self.current_view, name, f"{x:g}", label, *_numbers(col.mean(), col.std(), col.min(),
                                                                              col.max()), runs.shape[0]])
            if self.current_view == "norms" and self._reference is not None:
                rx, ry, rname = self._reference
                for x, y in zip(rx, ry):
                    out.writerow([self.current_view, rname, f"{x:g}", "", *_numbers(y, 0.0, y, y), 1])

    def export_image(self, path: str) -> None:
        """The plot as PNG or SVG (by the file's suffix)."""
        self.plot.export_image(path)
