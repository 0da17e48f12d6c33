"""The Circuits panel's transcoder row: width, k, tokens and the corpus, Train transcoders, Over training
(walk the run's kept steps), Cancel, and a progress line. Passive: the controller says what exists
(`set_corpus_choices`, `set_walk_available`) and what runs (`set_training`, `set_progress`)."""
from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QComboBox, QHBoxLayout, QLabel, QProgressBar, QPushButton, QVBoxLayout, QWidget

from explorer.views.features.source_form import CORPORA, CORPUS_TIPS, _spin
from explorer.widgets.elided_label import ElidedLabel

DEFAULTS = {"width": 1024, "k": 16, "tokens": 2_000_000}  # issue 38's quality bar was measured at these


class TrainForm(QWidget):
    trainRequested = Signal(dict)  # width, k, tokens, corpus, path
    walkRequested = Signal(int)  # tokens
    cancelRequested = Signal()
    browseRequested = Signal()

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self._file = ""
        self._walk_available = False
        self.width_box = _spin(16, 1 << 17, DEFAULTS["width"], 256, "Features per transcoder (one transcoder per layer)")
        self.k_box = _spin(1, 999, DEFAULTS["k"], 1, "Features kept active per token (TopK): each layer's L0")
        self.tokens_box = _spin(4096, 999_000_000, DEFAULTS["tokens"], 500_000,
                                "MLP input/output rows each layer's transcoder is trained on (drawn with replacement "
                                "from the corpus)")
        self.corpus = QComboBox()
        for i, (key, text) in enumerate(CORPORA):
            self.corpus.addItem(text, key)
            self.corpus.setItemData(i, CORPUS_TIPS[i], Qt.ItemDataRole.ToolTipRole)
        self.corpus.setToolTip("The text whose MLP activations the transcoders learn from (its last tenth is held "
                               "out: the metrics and a feature's contexts)")
        self.browse = QPushButton("Browse…")
        self.browse.setToolTip("Choose a plain-text file as the corpus")
        self.browse.clicked.connect(self.browseRequested)
        self.file_label = ElidedLabel()
        self.train = QPushButton("Train transcoders")
        self.train.setToolTip("Read every MLP's input and output on the corpus and train one transcoder per layer in "
                              "the background; saved beside the run or model and reopened by itself")
        self.train.clicked.connect(lambda: self.trainRequested.emit(self.settings()))
        self.walk = QPushButton("Over training")
        self.walk.setToolTip("For a run's model: fit a set for every other kept step, each warm-started from its "
                             "neighbour, so the step slider shows the circuit at each step with aligned features")
        self.walk.clicked.connect(lambda: self.walkRequested.emit(self.tokens_box.value()))
        self.cancel = QPushButton("Cancel")
        self.cancel.setEnabled(False)
        self.cancel.clicked.connect(self.cancelRequested)
        self._set_corpus_enabled("run", False)
        self._set_corpus_enabled("file", False)
        row = QHBoxLayout()
        row.setContentsMargins(0, 0, 0, 0)
        for label, widget in (("width", self.width_box), ("k", self.k_box), ("tokens", self.tokens_box),
                              ("corpus", self.corpus)):
            row.addWidget(QLabel(label))
            row.addWidget(widget)
        row.addWidget(self.browse)
        row.addWidget(self.file_label, 1)
        row.addWidget(self.train)
        row.addWidget(self.walk)
        row.addWidget(self.cancel)
        self.progress = QProgressBar()
        self.progress.setRange(0, 1)
        self.progress.setMaximumWidth(260)
        self.progress_text = ElidedLabel()
        progress_row = QHBoxLayout()
        progress_row.setContentsMargins(0, 0, 0, 0)
        progress_row.addWidget(self.progress, 1)
        progress_row.addWidget(self.progress_text, 2)
        self.progress_line = QWidget()
        self.progress_line.setLayout(progress_row)
        self.progress_line.hide()
        box = QVBoxLayout(self)
        box.setContentsMargins(0, 0, 0, 0)
        box.setSpacing(4)
        box.addLayout(row)
        box.addWidget(self.progress_line)
        self.set_walk_available(False)

    def settings(self) -> dict:
        return {"width": self.width_box.value(), "k": self.k_box.value(), "tokens": self.tokens_box.value(),
                "corpus": self.corpus.currentData(), "path": self._file if self.corpus.currentData() == "file" else ""}

    def set_corpus_choices(self, run_available: bool, file_path: str) -> None:
        """The run's data offered (and chosen) for a run's model; a chosen file shown and selected."""
        run_came = run_available and not self._enabled("run")
        self._set_corpus_enabled("run", run_available)
        if run_came and self.corpus.currentData() == "builtin":
            self.corpus.setCurrentIndex(self.corpus.findData("run"))
        new_file = bool(file_path) and file_path != self._file
        self._file = file_path or ""
        self._set_corpus_enabled("file", bool(self._file))
        self.file_label.setText(Path(self._file).name if self._file else "")
        self.file_label.setToolTip(self._file)
        if new_file:
            self.corpus.setCurrentIndex(self.corpus.findData("file"))
        elif not self._enabled(self.corpus.currentData()):
            self.corpus.setCurrentIndex(0)

    def set_walk_available(self, available: bool) -> None:
        self._walk_available = bool(available)
        self.walk.setVisible(self._walk_available)
        self.walk.setEnabled(self._walk_available and not self.cancel.isEnabled())

    def set_training(self, running: bool) -> None:
        for widget in (self.width_box, self.k_box, self.tokens_box, self.corpus, self.browse, self.train):
            widget.setEnabled(not running)
        self.walk.setEnabled(self._walk_available and not running)
        self.cancel.setEnabled(running)
        if running:
            self.progress.setRange(0, 0)
            self.progress_line.show()
        elif self.progress.maximum() == 0:
            self.progress.setRange(0, 1)

    def set_progress(self, done: int, total: int, text: str) -> None:
        if total > 0:
            self.progress.setRange(0, total)
            self.progress.setValue(min(max(done, 0), total))
        else:
            self.progress.setRange(0, 0)
        self.progress_text.setText(text)
        self.progress_line.setVisible(bool(text) or self.cancel.isEnabled())

    def _enabled(self, key) -> bool:
        index = self.corpus.findData(key)
        return index >= 0 and self.corpus.model().item(index).isEnabled()

    def _set_corpus_enabled(self, key: str, enabled: bool) -> None:
        self.corpus.model().item(self.corpus.findData(key)).setEnabled(enabled)
