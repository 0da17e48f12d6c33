"""Config & parameters panel (passive view): a form for every GPTConfig field and a readout.

The view knows nothing about models: the controller (explorer/controllers/config.py)
feeds it plain numbers (`ParamReadout`) and listens to its intent signals. Editing a
field emits `configEdited(values)` at once; the controller answers with a readout or
with `set_field_error(field, message)`, in which case the last valid readout stays.
"""
from __future__ import annotations

from dataclasses import dataclass

import pyqtgraph as pg
from PySide6.QtCore import QSize, Qt, Signal
from PySide6.QtWidgets import (QCheckBox, QComboBox, QDoubleSpinBox, QFormLayout, QGridLayout, QGroupBox,
                               QHBoxLayout, QHeaderView, QLabel, QLineEdit, QProgressBar, QPushButton, QScrollArea,
                               QSizePolicy, QSpinBox, QSplitter, QTableWidget, QTableWidgetItem, QVBoxLayout, QWidget)

CUSTOM = "custom"

# (field, label, tooltip) in form order; the widgets are made in _make_fields.
FIELDS = (
    ("vocab_size", "vocab_size", "Number of token ids (GPT-2: 50257)."),
    ("block_size", "block_size", "Longest context in tokens; size of the position-embedding table (GPT-2: 1024)."),
    ("n_layer", "n_layer", "Number of transformer blocks."),
    ("n_head", "n_head", "Attention heads per block; must divide n_embd."),
    ("n_embd", "n_embd", "Width of the residual stream."),
    ("mlp_ratio", "mlp_ratio", "MLP hidden width ÷ n_embd (GPT-2: 4)."),
    ("dropout", "dropout", "Dropout probability during training (no parameters)."),
    ("bias", "bias", "Biases in the linear layers and LayerNorms (GPT-2: on)."),
    ("qkv_bias", "qkv_bias", "Bias on the query/key/value projection; 'follow bias' uses the bias setting."),
    ("tie_weights", "tie_weights", "Share the token embedding with the output head (GPT-2: tied)."),
    ("ln_placement", "ln_placement", "LayerNorm before (pre, GPT-2) or after (post, original Transformer) each sublayer."),
    ("residual", "residual", "Residual connections on (GPT-2) or off (for teaching)."),
    ("layer_norm_eps", "layer_norm_eps", "Added to the variance in LayerNorm (GPT-2: 1e-5)."),
)
QKV_CHOICES = (("follow bias", None), ("on", True), ("off", False))


@dataclass(frozen=True)
class ComponentRow:
    name: str
    per_block: int  # 0 outside the blocks
    total: int
    in_blocks: bool


@dataclass(frozen=True)
class ParamReadout:
    """Everything the readout shows, as plain values (the controller computes and formats)."""

    total: int
    total_text: str  # e.g. "124.44M"
    tied: bool
    tied_total: int
    untied_total: int
    tie_saving: int
    vocab_size: int
    n_embd: int
    n_layer: int
    per_block: int
    non_embedding: int  # nanoGPT: total minus the position table
    kaplan_non_embedding: int  # Kaplan et al.: total minus both embedding tables
    components: tuple[ComponentRow, ...]
    memory: tuple[tuple[str, str], ...]  # (what, formatted bytes)


class _FitTable(QTableWidget):
    """Asks for the height of all its rows, so the total row is not hidden when there is room."""

    def sizeHint(self) -> QSize:
        hint = super().sizeHint()
        rows = sum(self.rowHeight(i) for i in range(self.rowCount()))
        return QSize(hint.width(), self.horizontalHeader().height() + rows + 2 * self.frameWidth())


def _restyle(widget: QWidget) -> None:
    widget.style().unpolish(widget)
    widget.style().polish(widget)


class ConfigPanel(QWidget):
    configEdited = Signal(dict)  # every field's current value
    presetChosen = Signal(str)
    buildRequested = Signal(str, object)  # (init scheme, seed or None)

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self._updating = False
        self._invalid: QWidget | None = None
        self.inputs: dict[str, QWidget] = {}
        splitter = QSplitter(Qt.Orientation.Horizontal)
        splitter.addWidget(self._make_form_side())
        splitter.addWidget(self._make_readout_side())
        splitter.setStretchFactor(0, 0)
        splitter.setStretchFactor(1, 1)
        splitter.setChildrenCollapsible(False)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addWidget(splitter)

    # -- construction ----------------------------------------------------------------------
    def _make_form_side(self) -> QWidget:
        box = QWidget()
        column = QVBoxLayout(box)
        column.setContentsMargins(0, 0, 0, 0)
        self.loaded_label = QLabel("")
        self.loaded_label.setObjectName("readoutNote")
        self.loaded_label.setWordWrap(True)
        column.addWidget(self.loaded_label)

        config_box = QGroupBox("Config")
        form = QFormLayout(config_box)
        form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)
        self.preset = QComboBox()
        self.preset.setToolTip("Published GPT-2 shapes; editing any field makes it 'custom'.")
        self.preset.activated.connect(lambda _i: self._preset_activated())
        form.addRow("preset", self.preset)
        for name, label, tip in FIELDS:
            widget = self._make_field(name)
            widget.setToolTip(tip)
            widget.setObjectName(f"field_{name}")
            self.inputs[name] = widget
            form.addRow(label, widget)
        self.error_label = QLabel("")
        self.error_label.setObjectName("fieldError")
        self.error_label.setWordWrap(True)
        self.error_label.hide()
        form.addRow(self.error_label)
        column.addWidget(config_box)

        build_box = QGroupBox("Build")
        grid = QGridLayout(build_box)
        self.init_scheme = QComboBox()
        self.init_scheme.setToolTip("How the new model's weights are initialised (see the Residual panel).")
        self.seed = QSpinBox()
        self.seed.setRange(-1, 2**31 - 1)
        self.seed.setSpecialValueText("random")
        self.seed.setValue(0)
        self.seed.setToolTip("Seed for the initial weights; 'random' draws a new model each time.")
        self.build_button = QPushButton("Build model")
        self.build_button.setToolTip("Build this config with fresh (untrained) weights and make it the current model.")
        self.build_button.clicked.connect(self._build_clicked)
        self.build_progress = QProgressBar()
        self.build_progress.setTextVisible(False)
        self.build_progress.setMaximumHeight(8)
        self.build_progress.hide()
        self.build_status = QLabel("")
        self.build_status.setWordWrap(True)
        self.build_status.setObjectName("readoutNote")
        grid.addWidget(QLabel("init"), 0, 0)
        grid.addWidget(self.init_scheme, 0, 1)
        grid.addWidget(QLabel("seed"), 1, 0)
        grid.addWidget(self.seed, 1, 1)
        grid.addWidget(self.build_button, 2, 0, 1, 2)
        grid.addWidget(self.build_progress, 3, 0, 1, 2)
        grid.addWidget(self.build_status, 4, 0, 1, 2)
        column.addWidget(build_box)
        column.addStretch(1)

        scroll = QScrollArea()
        scroll.setWidget(box)
        scroll.setWidgetResizable(True)
        scroll.setMinimumWidth(300)
        scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        return scroll

    def _make_field(self, name: str) -> QWidget:
        if name in ("bias", "tie_weights", "residual"):
            w = QCheckBox()
            w.toggled.connect(self._edited)
        elif name == "qkv_bias":
            w = QComboBox()
            for text, value in QKV_CHOICES:
                w.addItem(text, value)
            w.currentIndexChanged.connect(self._edited)
        elif name == "ln_placement":
            w = QComboBox()
            w.addItems(["pre", "post"])
            w.currentIndexChanged.connect(self._edited)
        elif name in ("mlp_ratio", "dropout"):
            w = QDoubleSpinBox()
            w.setDecimals(3)
            w.setRange(0.0, 1000.0)
            w.setSingleStep(0.5 if name == "mlp_ratio" else 0.05)
            w.valueChanged.connect(self._edited)
        elif name == "layer_norm_eps":
            w = QLineEdit()
            w.textEdited.connect(self._edited)
        else:  # integers; ranges wider than valid so the config's own message explains a bad value
            w = QSpinBox()
            w.setRange(0, 10_000_000)
            w.setGroupSeparatorShown(True)
            w.setKeyboardTracking(True)
            w.valueChanged.connect(self._edited)
        return w

    def _make_readout_side(self) -> QWidget:
        side = QWidget()
        column = QVBoxLayout(side)
        column.setContentsMargins(6, 0, 0, 0)
        self.total_label = QLabel("")
        self.total_label.setObjectName("readoutBig")
        self.total_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        column.addWidget(self.total_label)

        figures = QGridLayout()
        figures.setHorizontalSpacing(18)
        self.figure_labels: dict[str, QLabel] = {}
        rows = (("tied", "tied head"), ("untied", "untied head"), ("difference", "difference"),
                ("nanogpt", "non-embedding (nanoGPT)"), ("kaplan", "non-embedding (Kaplan)"))
        for r, (key, title) in enumerate(rows):
            name = QLabel(title)
            value = QLabel("")
            value.setAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
            value.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
            note = QLabel("")
            note.setObjectName("readoutNote")
            note.setWordWrap(True)
            figures.addWidget(name, r, 0)
            figures.addWidget(value, r, 1)
            figures.addWidget(note, r, 2)
            self.figure_labels[key] = value
            self.figure_labels[key + "_note"] = note
        figures.setColumnStretch(2, 1)
        column.addLayout(figures)

        self.memory_label = QLabel("")
        self.memory_label.setWordWrap(True)
        self.memory_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        column.addWidget(self.memory_label)

        lower = QSplitter(Qt.Orientation.Vertical)
        self.table = _FitTable(0, 4)
        self.table.setHorizontalHeaderLabels(["component", "per block", "total", "share"])
        self.table.verticalHeader().hide()
        self.table.verticalHeader().setDefaultSectionSize(self.fontMetrics().height() + 6)
        self.table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        self.table.setSelectionMode(QTableWidget.SelectionMode.NoSelection)
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        for col in (1, 2, 3):
            header.setSectionResizeMode(col, QHeaderView.ResizeMode.ResizeToContents)
        lower.addWidget(self.table)
        self.chart = pg.PlotWidget()
        self.chart.setMenuEnabled(False)
        self.chart.setMouseEnabled(x=False, y=False)
        self.chart.hideButtons()
        self.chart.setLabel("bottom", "share of all parameters (%)")
        self.chart.setMinimumHeight(140)
        self.chart.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Expanding)
        self.bars = pg.BarGraphItem(x0=[], y=[], height=0.7, width=[], brushes=[])
        self.chart.addItem(self.bars)
        self._bar_texts: list[pg.TextItem] = []
        lower.addWidget(self.chart)
        lower.setStretchFactor(0, 0)  # the table gets its full height when there is room ...
        lower.setStretchFactor(1, 1)  # ... and the chart takes the rest
        column.addWidget(lower, 1)
        return side

    # -- inputs from the controller -------------------------------------------------------------
    def set_presets(self, names) -> None:
        self.preset.clear()
        self.preset.addItems([*names, CUSTOM])

    def set_init_schemes(self, names, current: str | None = None) -> None:
        self.init_scheme.clear()
        self.init_scheme.addItems(list(names))
        if current:
            self.init_scheme.setCurrentText(current)

    def set_values(self, values: dict, preset: str | None = None) -> None:
        """Show a config (no configEdited is emitted)."""
        self._updating = True
        try:
            for name, value in values.items():
                w = self.inputs.get(name)
                if w is None:
                    continue
                if isinstance(w, QCheckBox):
                    w.setChecked(bool(value))
                elif name == "qkv_bias":
                    w.setCurrentIndex([v for _, v in QKV_CHOICES].index(value))
                elif isinstance(w, QComboBox):
                    w.setCurrentText(str(value))
                elif isinstance(w, QLineEdit):
                    w.setText(f"{value:g}")
                else:
                    w.setValue(value)
            self.set_preset(preset)
        finally:
            self._updating = False

    def set_preset(self, name: str | None) -> None:
        self.preset.setCurrentText(name or CUSTOM)

    def values(self) -> dict:
        """The form as GPTConfig keyword values; unparsable text stays a string (the config says why)."""
        out = {}
        for name, w in self.inputs.items():
            if isinstance(w, QCheckBox):
                out[name] = w.isChecked()
            elif name == "qkv_bias":
                out[name] = w.currentData()
            elif isinstance(w, QComboBox):
                out[name] = w.currentText()
            elif isinstance(w, QLineEdit):
                try:
                    out[name] = float(w.text())
                except ValueError:
                    out[name] = w.text()
            elif isinstance(w, QDoubleSpinBox):
                value = w.value()
                out[name] = int(value) if name == "mlp_ratio" and value == int(value) else value
            else:
                out[name] = w.value()
        return out

    def set_field_error(self, field: str | None, message: str = "") -> None:
        """Highlight `field` with `message`, or clear the highlight (field None)."""
        if self._invalid is not None:
            self._invalid.setProperty("invalid", False)
            self._invalid.setToolTip(self._invalid.property("normalTip") or "")
            _restyle(self._invalid)
            self._invalid = None
        widget = self.inputs.get(field) if field else None
        if widget is not None:
            if widget.property("normalTip") is None:
                widget.setProperty("normalTip", widget.toolTip())
            widget.setProperty("invalid", True)
            widget.setToolTip(message)
            _restyle(widget)
            self._invalid = widget
        self.error_label.setText(f"⚠ {message}  (the readout shows the last valid config)" if field else "")
        self.error_label.setVisible(bool(field))
        self.build_button.setEnabled(not field)

    def set_readout(self, r: ParamReadout) -> None:
        self.total_label.setText(f"{r.total_text} parameters  ({r.total:,})")
        fig = self.figure_labels
        fig["tied"].setText(f"{r.tied_total:,}")
        fig["untied"].setText(f"{r.untied_total:,}")
        fig["tied_note"].setText("← this config" if r.tied else "")
        fig["untied_note"].setText("" if r.tied else "← this config")
        fig["difference"].setText(f"{r.tie_saving:,}")
        fig["difference_note"].setText(f"= vocab_size {r.vocab_size:,} × n_embd {r.n_embd:,} (the output head)")
        fig["nanogpt"].setText(f"{r.non_embedding:,}")
        fig["nanogpt_note"].setText("excludes the position-embedding table only; the token embedding stays in")
        fig["kaplan"].setText(f"{r.kaplan_non_embedding:,}")
        fig["kaplan_note"].setText("excludes both embedding tables (and an untied head)")
        self.memory_label.setText("<b>memory</b> &nbsp; " + " &nbsp;·&nbsp; ".join(
            f"{what}: <b>{size}</b>" for what, size in r.memory))
        self._fill_table(r)
        self._fill_chart(r)

    def _fill_table(self, r: ParamReadout) -> None:
        rows = list(r.components) + [ComponentRow(f"total ({r.n_layer} blocks)", r.per_block, r.total, True)]
        self.table.setRowCount(len(rows))
        for i, c in enumerate(rows):
            share = 100.0 * c.total / r.total if r.total else 0.0
            name = "output head (tied: shares the token embedding)" if c.name == "output head" and r.tied else c.name
            cells = (name, f"{c.per_block:,}" if c.in_blocks else "–", f"{c.total:,}", f"{share:.1f}%")
            for j, text in enumerate(cells):
                item = QTableWidgetItem(text)
                if j:
                    item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
                if i == len(rows) - 1:
                    font = item.font()
                    font.setBold(True)
                    item.setFont(font)
                self.table.setItem(i, j, item)
        self.table.updateGeometry()  # its size hint (every row) changed

    def _fill_chart(self, r: ParamReadout) -> None:
        comps = [c for c in r.components]
        n = len(comps)
        shares = [100.0 * c.total / r.total if r.total else 0.0 for c in comps]
        ys = list(range(n - 1, -1, -1))  # first component at the top
        colours = [(74, 123, 208) if c.in_blocks else (225, 140, 60) for c in comps]
        self.bars.setOpts(x0=[0] * n, y=ys, width=shares, height=0.7, brushes=[pg.mkBrush(*c) for c in colours])
        self.chart.getAxis("left").setTicks([[(y, c.name) for y, c in zip(ys, comps)]])
        for item in self._bar_texts:
            self.chart.removeItem(item)
        self._bar_texts = []
        for y, c, share in zip(ys, comps, shares):
            text = pg.TextItem(f" {c.total:,}" if c.total else " 0 (tied)", anchor=(0, 0.5),
                               color=pg.getConfigOption("foreground"))
            text.setPos(share, y)
            self.chart.addItem(text)
            self._bar_texts.append(text)
        self.chart.setXRange(0, max(shares + [1.0]) * 1.35, padding=0)
        self.chart.setYRange(-0.6, n - 0.4, padding=0)

    def set_loaded_model(self, text: str) -> None:
        self.loaded_label.setText(text)

    def set_build_busy(self, busy: bool) -> None:
        self.build_button.setEnabled(not busy and self._invalid is None)
        self.build_progress.setVisible(busy)
        if busy:
            self.build_progress.setRange(0, 0)

    def set_build_progress(self, done: int, total: int, message: str) -> None:
        self.build_progress.setRange(0, max(total, 1))
        self.build_progress.setValue(done)
        self.build_status.setText(message)

    def set_build_status(self, text: str, error: bool = False) -> None:
        self.build_status.setObjectName("fieldError" if error else "readoutNote")
        _restyle(self.build_status)
        self.build_status.setText(text)

    # -- intents ----------------------------------------------------------------------------------
    def _edited(self, *_):
        if not self._updating:
            self.configEdited.emit(self.values())

    def _preset_activated(self) -> None:
        name = self.preset.currentText()
        if name != CUSTOM:
            self.presetChosen.emit(name)

    def _build_clicked(self) -> None:
        seed = self.seed.value()
        self.buildRequested.emit(self.init_scheme.currentText(), None if seed < 0 else seed)
