"""The Train panel's settings form: corpus, tokenizer, init schemes, model shape, nanoGPT's
hyper-parameters, and the run buttons. Passive: `values()` / `set_values()` and intent signals.

Why the field names are train.py's: the form's values go to `python -m gptcore.train` as
`--key=value` unchanged, so what the user sets is exactly what a terminal would run (the
command is shown in the panel), and a nanoGPT user recognises every field.
"""
from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (QCheckBox, QComboBox, QDoubleSpinBox, QFormLayout, QGridLayout, QGroupBox,
                               QHBoxLayout, QLineEdit, QPushButton, QScrollArea, QSpinBox, QToolButton,
                               QVBoxLayout, QWidget)

# (key shown to gptcore.train, label, kind, minimum, maximum)
MODEL_FIELDS = (
    ("n_layer", "layers", "int", 1, 96), ("n_head", "heads", "int", 1, 64), ("n_embd", "width", "int", 8, 8192),
    ("block_size", "block size", "int", 8, 8192),
)
TRAIN_FIELDS = (
    ("max_iters", "max iterations", "int", 1, 10_000_000), ("batch_size", "batch size", "int", 1, 4096),
    ("gradient_accumulation_steps", "grad. accumulation", "int", 1, 4096),
    ("learning_rate", "learning rate", "float", 1e-7, 10.0), ("min_lr", "min lr", "float", 0.0, 10.0),
    ("warmup_iters", "warmup iterations", "int", 0, 10_000_000),
    ("lr_decay_iters", "lr decay iterations", "int", 1, 10_000_000),
    ("weight_decay", "weight decay", "float", 0.0, 10.0), ("beta2", "Adam β2", "float", 0.0, 0.99999),
    ("grad_clip", "grad clip (0 = off)", "float", 0.0, 1000.0), ("dropout", "dropout", "float", 0.0, 0.9),
    ("eval_interval", "eval every", "int", 1, 10_000_000), ("eval_iters", "eval batches", "int", 1, 100_000),
    ("probe_interval", "probe every (0 = off)", "int", 0, 10_000_000), ("seed", "seed", "int", 0, 2**31 - 1),
)
CORPORA = (("pydoc", "pydoc topics (built in, offline)"), ("file", "a text file…"),
           ("folder", "a nanoGPT data folder…"), ("induction", "induction preset"))


def _spin(kind: str, low, high) -> QSpinBox | QDoubleSpinBox:
    if kind == "int":
        box = QSpinBox()
        box.setRange(int(low), int(high))
        box.setGroupSeparatorShown(True)
    else:
        box = QDoubleSpinBox()
        box.setDecimals(6)
        box.setRange(float(low), float(high))
        box.setSingleStep(1e-4 if high <= 10 else 1.0)
    box.setAlignment(Qt.AlignmentFlag.AlignRight)
    return box


class TrainForm(QWidget):
    """In: `set_values`, `set_schemes`, `set_corpora`, `set_running`, `set_corpus_path`. Out: the signals."""

    startRequested = Signal(dict)  # every setting (see values())
    pauseRequested = Signal()
    resumeRequested = Signal()
    stopRequested = Signal()
    openRunRequested = Signal()
    presetRequested = Signal(str)  # "cpu" (nanoGPT's CPU recipe) or "nanogpt" (train.py's defaults)
    modelFromSessionRequested = Signal()
    browseRequested = Signal(str)  # "file" or "folder"
    corpusChanged = Signal(str)  # "pydoc", "file", "folder" or "induction" (a preset brings its own settings)

    def __init__(self, schemes=(), parent: QWidget | None = None):
        super().__init__(parent)
        self._fields: dict[str, QSpinBox | QDoubleSpinBox] = {}
        self._scheme_boxes: dict[str, QCheckBox] = {}
        self._paused = False
        self._decay_follows = True  # lr decay iterations follow max iterations until edited apart
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        body = QWidget()
        layout = QVBoxLayout(body)
        layout.setContentsMargins(4, 4, 8, 4)
        scroll.setWidget(body)
        outer.addWidget(scroll, 1)
        layout.addWidget(self._build_data())
        init = QGroupBox("Init schemes")
        init.setToolTip("Each ticked scheme trains its own model on the same batches, into one run folder")
        self._scheme_grid = QGridLayout(init)
        layout.addWidget(init)
        self.set_schemes(schemes)
        layout.addWidget(self._build_model())
        layout.addWidget(self._build_training())
        layout.addStretch(1)
        # The form never scrolls sideways: the scroll area is as wide as the widest row needs.
        scroll.setMinimumWidth(body.minimumSizeHint().width() + scroll.verticalScrollBar().sizeHint().width() + 4)
        outer.addLayout(self._build_buttons())
        self.set_running(False)
        self._corpus_changed()

    def _build_data(self) -> QGroupBox:
        data = QGroupBox("Data")
        form = QFormLayout(data)
        self.corpus_combo = QComboBox()
        for key, text in CORPORA:
            self.corpus_combo.addItem(text, key)
        self.corpus_combo.currentIndexChanged.connect(self._corpus_changed)
        form.addRow("corpus", self.corpus_combo)
        path_row = QHBoxLayout()
        self.path_edit = QLineEdit()
        self.path_edit.setPlaceholderText("path of the text file or data folder")
        self.browse_button = QToolButton()
        self.browse_button.setText("…")
        self.browse_button.setToolTip("Choose the file or folder")
        self.browse_button.clicked.connect(lambda: self.browseRequested.emit(self.corpus_kind()))
        path_row.addWidget(self.path_edit, 1)
        path_row.addWidget(self.browse_button)
        form.addRow("path", path_row)
        self.tokenizer_combo = QComboBox()
        self.tokenizer_combo.addItem("char (one id per character)", "char")
        self.tokenizer_combo.addItem("gpt2 (GPT-2's BPE)", "gpt2")
        form.addRow("tokenizer", self.tokenizer_combo)
        return data

    def _build_model(self) -> QGroupBox:
        model = QGroupBox("Model")
        form = QFormLayout(model)
        for key, label, kind, low, high in MODEL_FIELDS:
            self._fields[key] = _spin(kind, low, high)
            form.addRow(label, self._fields[key])
        self.bias_box = QCheckBox("bias in Linear and LayerNorm")
        form.addRow("", self.bias_box)
        self.from_session_button = QPushButton("Use the loaded model's shape")
        self.from_session_button.setToolTip("Layers, heads, width and block size of the session's model "
                                            "(the Config panel's 'Train this config…' does the same)")
        self.from_session_button.clicked.connect(self.modelFromSessionRequested)
        form.addRow("", self.from_session_button)
        return model

    def _build_training(self) -> QGroupBox:
        hyper = QGroupBox("Training (nanoGPT's train.py names)")
        form = QFormLayout(hyper)
        presets = QHBoxLayout()
        self.cpu_button = QPushButton("CPU recipe")
        self.cpu_button.setToolTip("nanoGPT's README recipe for a CPU: 4 layers, 4 heads, 128 wide, block 64, "
                                   "batch 12, lr 1e-3, β2 0.99, warmup 100, 2,000 iterations")
        self.cpu_button.clicked.connect(lambda: self.presetRequested.emit("cpu"))
        self.nanogpt_button = QPushButton("train.py defaults")
        self.nanogpt_button.setToolTip("nanoGPT train.py's own defaults (GPT-2 124M on OpenWebText: far too big "
                                       "for a CPU)")
        self.nanogpt_button.clicked.connect(lambda: self.presetRequested.emit("nanogpt"))
        presets.addWidget(self.cpu_button)
        presets.addWidget(self.nanogpt_button)
        form.addRow(presets)
        for key, label, kind, low, high in TRAIN_FIELDS:
            self._fields[key] = _spin(kind, low, high)
            form.addRow(label, self._fields[key])
        self._fields["max_iters"].valueChanged.connect(self._max_iters_edited)
        self._fields["lr_decay_iters"].valueChanged.connect(self._decay_edited)
        self._fields["lr_decay_iters"].setToolTip("Follows max iterations until you set it apart (nanoGPT: "
                                                  "lr_decay_iters ≈ max_iters; past it lr stays at min lr)")
        return hyper

    def _build_buttons(self) -> QGridLayout:
        buttons = QGridLayout()
        self.start_button = QPushButton("Start")
        self.start_button.setObjectName("primaryButton")
        self.start_button.clicked.connect(lambda: self.startRequested.emit(self.values()))
        self.pause_button = QPushButton("Pause")
        self.pause_button.clicked.connect(self._pause_clicked)
        self.pause_button.setVisible(self._can_pause())
        self.stop_button = QPushButton("Stop")
        self.stop_button.setToolTip("Save a checkpoint and stop (the run can be resumed from its folder)")
        self.stop_button.clicked.connect(self.stopRequested)
        self.open_button = QPushButton("Open run…")
        self.open_button.setToolTip("Follow or replay a run folder (one started here, in a terminal, or on a cluster)")
        self.open_button.clicked.connect(self.openRunRequested)
        buttons.addWidget(self.start_button, 0, 0)
        buttons.addWidget(self.pause_button, 0, 1)
        buttons.addWidget(self.stop_button, 0, 2)
        buttons.addWidget(self.open_button, 1, 0, 1, 3)
        return buttons

    @staticmethod
    def _can_pause() -> bool:
        import signal

        return hasattr(signal, "SIGSTOP")

    # -- in ------------------------------------------------------------------------------------------
    def set_schemes(self, schemes, checked=("gpt2",)) -> None:
        for box in self._scheme_boxes.values():
            box.deleteLater()
        self._scheme_boxes.clear()
        for i, name in enumerate(schemes):
            box = QCheckBox(name)
            box.setChecked(name in checked)
            self._scheme_boxes[name] = box
            self._scheme_grid.addWidget(box, i // 2, i % 2)

    def set_corpora(self, available: dict[str, bool]) -> None:
        """Disable the corpus choices this installation lacks (e.g. no induction preset yet)."""
        model = self.corpus_combo.model()
        for i in range(self.corpus_combo.count()):
            key = self.corpus_combo.itemData(i)
            ok = available.get(key, True)
            model.item(i).setEnabled(ok)
            if not ok:
                model.item(i).setToolTip("not available in this gptcore")

    def set_values(self, values: dict) -> None:
        """Any of `values()`'s keys; `corpus` with `path` picks the data too. Afterwards lr decay
        iterations follow max iterations exactly when the two are equal (nanoGPT's advice)."""
        for key, value in values.items():
            if key in self._fields and value is not None:
                self._fields[key].blockSignals(True)
                self._fields[key].setValue(value)
                self._fields[key].blockSignals(False)
        if "bias" in values:
            self.bias_box.setChecked(bool(values["bias"]))
        if "tokenizer" in values:
            self.tokenizer_combo.setCurrentIndex(max(0, self.tokenizer_combo.findData(values["tokenizer"])))
        if "init" in values:
            wanted = set(str(values["init"]).split(","))
            for name, box in self._scheme_boxes.items():
                box.setChecked(name in wanted)
        if values.get("corpus"):
            self.set_corpus_path(str(values["corpus"]), str(values.get("path") or ""), quiet=True)
        self._decay_follows = self._fields["lr_decay_iters"].value() == self._fields["max_iters"].value()

    def set_corpus_path(self, kind: str, path: str, quiet: bool = False) -> None:
        """Pick the corpus `kind` (and its file or folder); `quiet`: without `corpusChanged` (a preset
        would bring its own settings over the ones being set)."""
        self.corpus_combo.blockSignals(quiet)
        self.corpus_combo.setCurrentIndex(max(0, self.corpus_combo.findData(kind)))
        self.corpus_combo.blockSignals(False)
        self.path_edit.setText(path)
        if quiet:
            self._corpus_enables()

    def set_running(self, running: bool, paused: bool = False) -> None:
        """Buttons for a run going (Pause/Resume, Stop) or not (Start, Open run…)."""
        self._paused = paused
        self.start_button.setEnabled(not running)
        self.open_button.setEnabled(not running)
        self.pause_button.setEnabled(running)
        self.pause_button.setText("Resume" if paused else "Pause")
        self.stop_button.setEnabled(running)

    # -- out -----------------------------------------------------------------------------------------
    def corpus_kind(self) -> str:
        return str(self.corpus_combo.currentData())

    def values(self) -> dict:
        """Every setting, by gptcore.train's names; `corpus` and `path` say where the data is."""
        out = {key: box.value() for key, box in self._fields.items()}
        out["bias"] = self.bias_box.isChecked()
        out["tokenizer"] = str(self.tokenizer_combo.currentData())
        out["init"] = ",".join(name for name, box in self._scheme_boxes.items() if box.isChecked())
        out["corpus"] = self.corpus_kind()
        out["path"] = self.path_edit.text().strip()
        return out

    def _corpus_enables(self) -> None:
        needs_path = self.corpus_kind() in ("file", "folder")
        self.path_edit.setEnabled(needs_path)
        self.browse_button.setEnabled(needs_path)
        self.tokenizer_combo.setEnabled(self.corpus_kind() != "folder")  # a prepared folder brings its own

    def _corpus_changed(self, *_args) -> None:
        self._corpus_enables()
        self.corpusChanged.emit(self.corpus_kind())

    def _max_iters_edited(self, value: int) -> None:
        if self._decay_follows:  # nanoGPT: lr_decay_iters should be ~= max_iters
            self._fields["lr_decay_iters"].blockSignals(True)
            self._fields["lr_decay_iters"].setValue(value)
            self._fields["lr_decay_iters"].blockSignals(False)

    def _decay_edited(self, value: int) -> None:
        self._decay_follows = value == self._fields["max_iters"].value()

    def _pause_clicked(self) -> None:
        (self.resumeRequested if self._paused else self.pauseRequested).emit()
