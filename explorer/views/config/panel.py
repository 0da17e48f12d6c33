"""Config & parameters panel (passive view): a form for every GPTConfig field, the Build
box, and the parameter readout beside them (param_readout.py).

The view knows nothing about models: the controller (explorer/controllers/config.py)
feeds it plain numbers (`ParamReadout`) and listens to its intent signals. Editing a
field emits `configEdited(values)` at once; the controller answers with a readout or
with `set_field_error(field, message)`, in which case the last valid readout stays.
"""
from __future__ import annotations

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QColor, QPalette
from PySide6.QtWidgets import (QAbstractSpinBox, QCheckBox, QComboBox, QDoubleSpinBox, QFormLayout, QFrame,
                               QGraphicsOpacityEffect, QGridLayout, QGroupBox, QLabel, QLineEdit, QProgressBar,
                               QPushButton, QScrollArea, QSpinBox, QSplitter, QVBoxLayout, QWidget)

from explorer.widgets.theme import restyle
from explorer.views.config.param_readout import ParamReadout, ParamReadoutView

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
    # The parts models since 2024 swap into GPT-2's skeleton (Llama, Qwen2, SmolLM2).
    ("pos_embedding", "positions", "learned (GPT-2's table), sinusoidal (fixed sin/cos, no parameters) or "
                                   "rope (rotary: queries and keys rotated by position, no parameters)."),
    ("rope_theta", "rope_theta", "Base of the rotary frequencies (10000; Llama 3 uses 500000). Only for rope."),
    ("norm", "norm", "layernorm (GPT-2) or rmsnorm (scale only, no mean and no bias: Llama)."),
    ("mlp", "mlp", "gelu (GPT-2: two matrices) or swiglu (Llama: a gate matrix too)."),
    ("activation", "activation", "The GELU MLP's nonlinearity: gelu_tanh (GPT-2's tanh approximation, also HF's "
                                 "and the book's) or gelu (exact erf, nanoGPT's nn.GELU()). No parameters."),
    ("mlp_hidden", "mlp_hidden", "MLP hidden width; 'from mlp_ratio' uses mlp_ratio × n_embd."),
    ("n_kv_head", "n_kv_head", "Key/value heads shared by groups of query heads (grouped-query attention); "
                               "'= n_head' is ordinary multi-head attention."),
)
CHOICES = {"ln_placement": ("pre", "post"), "pos_embedding": ("learned", "sinusoidal", "rope"),
           "norm": ("layernorm", "rmsnorm"), "mlp": ("gelu", "swiglu"), "activation": ("gelu_tanh", "gelu")}
OPTIONAL_INTS = {"mlp_hidden": "from mlp_ratio", "n_kv_head": "= n_head"}  # 0 in the spin box = None
QKV_CHOICES = (("follow bias", None), ("on", True), ("off", False))


def _hidden_note(name: str) -> QLabel:
    """A wrapping note line, hidden until it has something to say; `name` picks its style."""
    label = QLabel("")
    label.setObjectName(name)
    label.setWordWrap(True)
    label.hide()
    return label


class ConfigPanel(QWidget):
    configEdited = Signal(dict)  # every field's current value
    presetChosen = Signal(str)
    buildRequested = Signal(str, object)  # (init scheme, seed or None)
    buildCancelled = Signal()
    trainRequested = Signal()  # "Train this config…": the Train panel takes the form's config

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self._updating = False
        self._invalid: QWidget | None = None
        self._warned: QWidget | None = None
        self.inputs: dict[str, QWidget] = {}
        splitter = QSplitter(Qt.Orientation.Horizontal)
        splitter.addWidget(self._make_form_side())
        self.readout = ParamReadoutView()
        readout_scroll = self.readout_scroll = QScrollArea()  # at 900×600 the table and chart keep their heights, scroll
        readout_scroll.setWidget(self.readout)
        readout_scroll.setWidgetResizable(True)
        readout_scroll.setFrameShape(QFrame.Shape.NoFrame)
        splitter.addWidget(readout_scroll)
        # The readout's parts, by the names the controller's tests read them under.
        r = self.readout
        self.total_label, self.figure_labels, self.memory_label = r.total_label, r.figure_labels, r.memory_label
        self.table, self.chart, self.bars = r.table, r.chart, r.bars
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
        column.addWidget(self._build_config_group())
        column.addWidget(self._build_build_group())
        column.addStretch(1)

        scroll = self.form_scroll = QScrollArea()
        scroll.setWidget(box)
        scroll.setWidgetResizable(True)
        scroll.setMinimumWidth(300)
        scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        return scroll

    def _build_config_group(self) -> QGroupBox:
        """The preset and one field per GPTConfig entry, with the error and warning lines under them."""
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
        self.error_label = _hidden_note("fieldError")
        form.addRow(self.error_label)
        self.warning_label = _hidden_note("fieldWarning")
        form.addRow(self.warning_label)
        return config_box

    def _build_build_group(self) -> QGroupBox:
        """Init scheme, seed, Build (its progress, Cancel and status) and "Train this config…"."""
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
        self.cancel_build_button = QPushButton("Cancel build")
        self.cancel_build_button.setToolTip("Stop building; the current model stays.")
        self.cancel_build_button.clicked.connect(self.buildCancelled)
        self.cancel_build_button.hide()
        self.train_button = QPushButton("Train this config…")
        self.train_button.setToolTip("Open the Train panel with this model shape (the corpus sets the vocabulary)")
        self.train_button.clicked.connect(self.trainRequested)
        self.build_status = QLabel("")
        self.build_status.setWordWrap(True)
        self.build_status.setObjectName("readoutNote")
        grid.addWidget(QLabel("init"), 0, 0)
        grid.addWidget(self.init_scheme, 0, 1)
        grid.addWidget(QLabel("seed"), 1, 0)
        grid.addWidget(self.seed, 1, 1)
        grid.addWidget(self.build_button, 2, 0, 1, 2)
        grid.addWidget(self.build_progress, 3, 0, 1, 2)
        grid.addWidget(self.cancel_build_button, 4, 0, 1, 2)
        grid.addWidget(self.build_status, 5, 0, 1, 2)
        grid.addWidget(self.train_button, 6, 0, 1, 2)
        return build_box

    def _make_field(self, name: str) -> QWidget:
        if name in ("bias", "tie_weights", "residual"):
            w = QCheckBox()
            w.toggled.connect(self._edited)
        elif name == "qkv_bias":
            w = QComboBox()
            for text, value in QKV_CHOICES:
                w.addItem(text, value)
            w.currentIndexChanged.connect(self._edited)
        elif name in CHOICES:
            w = QComboBox()
            w.addItems(list(CHOICES[name]))
            w.setFocusPolicy(Qt.FocusPolicy.StrongFocus)
            w.currentIndexChanged.connect(self._edited)
        elif name in ("mlp_ratio", "dropout"):
            w = QDoubleSpinBox()
            w.setDecimals(3)
            w.setRange(0.0, 1000.0)
            w.setSingleStep(0.5 if name == "mlp_ratio" else 0.05)
            w.valueChanged.connect(self._edited)
        elif name in ("layer_norm_eps", "rope_theta"):
            w = QLineEdit()
            w.textEdited.connect(self._edited)
        else:  # integers; ranges wider than valid so the config's own message explains a bad value
            w = QSpinBox()
            w.setRange(0, 10_000_000)
            if name in OPTIONAL_INTS:
                w.setSpecialValueText(OPTIONAL_INTS[name])  # shown at 0, which means None
            w.setGroupSeparatorShown(True)
            w.setKeyboardTracking(True)
            w.valueChanged.connect(self._edited)
        return w

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
                elif name in OPTIONAL_INTS:
                    w.setValue(0 if value is None else value)
                else:
                    w.setValue(value)
            self.set_preset(preset)
        finally:
            self._updating = False

    def set_seed(self, seed: int) -> None:
        self.seed.setValue(seed)

    def focus_form(self) -> None:
        """Where File → New model starts typing: the depth field."""
        self.inputs["n_layer"].setFocus()

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
            elif name in OPTIONAL_INTS:
                out[name] = w.value() or None
            else:
                out[name] = w.value()
        return out

    def set_field_error(self, field: str | None, message: str = "") -> None:
        """Highlight `field` with `message`, or clear the highlight (field None). While a field is
        invalid the readout is dimmed (it shows the last valid config) and the preset says custom."""
        if self._invalid is not None:
            _mark(self._invalid, None)
            self._invalid = None
        widget = self.inputs.get(field) if field else None
        if widget is not None:
            _mark(widget, "invalid", message)
            self._invalid = widget
            self.set_preset(None)
        self.error_label.setText(f"⚠ {message}  (the readout, dimmed, shows the last valid config)" if field else "")
        self.error_label.setVisible(bool(field))
        self.build_button.setEnabled(not field)
        self._dim_readout(bool(field))

    def set_field_warning(self, field: str | None, message: str = "") -> None:
        """A value that builds but will surprise (e.g. vocab_size below the tokenizer's ids): shown at
        the field in amber, with what will happen; Build stays possible (the user may accept it)."""
        if self._warned is not None and self._warned is not self._invalid:
            _mark(self._warned, None)
        self._warned = None
        widget = self.inputs.get(field) if field else None
        if widget is not None and widget is not self._invalid:
            _mark(widget, "warning", message)
            self._warned = widget
        self.warning_label.setText(f"⚠ {message}" if field else "")
        self.warning_label.setVisible(bool(field))

    def _dim_readout(self, dim: bool) -> None:
        if dim:
            effect = QGraphicsOpacityEffect(self.readout)
            effect.setOpacity(0.4)
            self.readout.setGraphicsEffect(effect)
        else:
            self.readout.setGraphicsEffect(None)

    def readout_dimmed(self) -> bool:
        return self.readout.graphicsEffect() is not None

    def set_readout(self, r: ParamReadout) -> None:
        self.readout.set_readout(r)

    def set_loaded_model(self, text: str) -> None:
        self.loaded_label.setText(text)

    def set_build_busy(self, busy: bool) -> None:
        self.build_button.setEnabled(not busy and self._invalid is None)
        self.build_progress.setVisible(busy)
        self.cancel_build_button.setVisible(busy)
        if busy:
            self.build_progress.setRange(0, 0)
            QTimer.singleShot(0, self, self._scroll_to_build)  # once the layout has made room for them

    def _scroll_to_build(self) -> None:
        """The progress bar and Cancel appear below Build, past the form's end in a 820-px window: scroll there."""
        self.form_scroll.ensureWidgetVisible(self.cancel_build_button, 0, 4)

    def set_build_progress(self, done: int, total: int, message: str) -> None:
        self.build_progress.setRange(0, max(total, 1))
        self.build_progress.setValue(done)
        self.build_status.setText(message)

    def set_build_status(self, text: str, error: bool = False) -> None:
        self.build_status.setObjectName("fieldError" if error else "readoutNote")
        restyle(self.build_status)
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


# Colours of a marked field, (light, dark): background and text.
_MARKS = {"invalid": (("#fdecea", "#a12622"), ("#4a1f1c", "#ff8a80")),
          "warning": (("#fff3cd", "#664d03"), ("#4a3b12", "#ffd36b"))}


def _mark(widget: QWidget, kind: str | None, message: str = "") -> None:
    """Tint a field as invalid or warned (None: back to normal), tooltip = `message`.

    Spin boxes are tinted through their palette, not a style sheet: a style sheet on a spin box
    makes Qt draw its arrows itself, as two flat bars."""
    if widget.property("normalTip") is None:
        widget.setProperty("normalTip", widget.toolTip())
    widget.setToolTip(message if kind else widget.property("normalTip") or "")
    widget.setProperty("invalid", kind == "invalid")
    widget.setProperty("warning", kind == "warning")
    if isinstance(widget, QAbstractSpinBox):
        if kind is None:
            widget.setPalette(QPalette())
        else:
            dark = widget.palette().color(QPalette.ColorRole.Window).lightness() < 128
            base, text = _MARKS[kind][1 if dark else 0]
            palette = widget.palette()
            palette.setColor(QPalette.ColorRole.Base, QColor(base))
            palette.setColor(QPalette.ColorRole.Text, QColor(text))
            widget.setPalette(palette)
        return
    restyle(widget)
