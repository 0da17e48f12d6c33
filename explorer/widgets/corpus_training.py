"""The training controls the Features panel (an SAE) and the Circuits panel (transcoders) share, said
once: a row of width, k, tokens, the corpus (built-in text, the run's data, a text file: Browse… and its
name), Train, the form's own buttons and Cancel; and the progress bar with its text on a line of its own.

Passive: the form that holds them says what exists (`set_corpus_choices`) and what runs (`set_running`,
`set_progress`), reads what the user asked for (`values`), and connects the buttons to its own signals.
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterable

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QComboBox, QHBoxLayout, QLabel, QProgressBar, QPushButton, QSpinBox, QWidget

from explorer.widgets.elided_label import ElidedLabel

CORPORA = (("builtin", "built-in text"), ("run", "run's data"), ("file", "text file"))
CORPUS_TIPS = ("A built-in English text (Python's documentation topics)", "The training data of the run the model "
               "comes from (offered for a model opened from a run folder)", "A plain-text file of your own (Browse…)")
DEFAULTS = {"width": 1024, "k": 16, "tokens": 2_000_000}  # issue 38's quality bar for transcoders was measured at these


def spin_box(low: int, high: int, value: int, step: int, tip: str) -> QSpinBox:
    """A whole-number box with thousands separators (2,000,000 tokens read at a glance)."""
    box = QSpinBox()
    box.setRange(low, high)
    box.setSingleStep(step)
    box.setValue(value)
    box.setGroupSeparatorShown(True)
    box.setToolTip(tip)
    return box


class CorpusTrainingRow(QWidget):
    """width, k, tokens and corpus with their labels, Browse… and the chosen file's name, Train, `extra`
    (buttons of the form's own), Cancel. `spins` gives (low, high, step, tip) for "width", "k" and
    "tokens" (each starts at DEFAULTS)."""

    def __init__(self, spins: dict[str, tuple[int, int, int, str]], corpus_tip: str, train_text: str,
                 train_tip: str, extra: Iterable[QWidget] = (), parent: QWidget | None = None):
        super().__init__(parent)
        self._file = ""

        def spin(key: str) -> QSpinBox:
            low, high, step, tip = spins[key]
            return spin_box(low, high, DEFAULTS[key], step, tip)

        self.width_box, self.k_box, self.tokens_box = spin("width"), spin("k"), spin("tokens")
        self.corpus = QComboBox()
        for i, (key, text) in enumerate(CORPORA):
            self.corpus.addItem(text, key)
            self.corpus.setItemData(i, CORPUS_TIPS[i], Qt.ItemDataRole.ToolTipRole)
        self.corpus.setToolTip(corpus_tip)
        self.browse = QPushButton("Browse…")
        self.browse.setToolTip("Choose a plain-text file as the corpus")
        self.file_label = ElidedLabel()
        self.train = QPushButton(train_text)
        self.train.setToolTip(train_tip)
        self.cancel = QPushButton("Cancel")
        self.cancel.setEnabled(False)
        self._set_corpus_enabled("run", False)
        self._set_corpus_enabled("file", False)
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        for label, widget in (("width", self.width_box), ("k", self.k_box), ("tokens", self.tokens_box),
                              ("corpus", self.corpus)):
            row.addWidget(QLabel(label))
            row.addWidget(widget)
        row.addWidget(self.browse)
        row.addWidget(self.file_label, 1)
        for widget in (self.train, *extra, self.cancel):
            row.addWidget(widget)

    def values(self) -> dict:
        """width, k, tokens, corpus and path (the file's, for the file corpus; else "")."""
        return {"width": self.width_box.value(), "k": self.k_box.value(), "tokens": self.tokens_box.value(),
                "corpus": self.corpus.currentData(), "path": self._file if self.corpus.currentData() == "file" else ""}

    def set_corpus_choices(self, run_available: bool, file_path: str) -> None:
        """The run's data offered when there is a run (and chosen when it comes, in place of the built-in
        text: a run's character model cannot read another alphabet); a chosen file is shown and selected."""
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

    def set_running(self, running: bool) -> None:
        """While a training runs: the settings and Train locked, Cancel offered."""
        for widget in (self.width_box, self.k_box, self.tokens_box, self.corpus, self.browse, self.train):
            widget.setEnabled(not running)
        self.cancel.setEnabled(running)

    def _enabled(self, key) -> bool:
        index = self.corpus.findData(key)
        return index >= 0 and self.corpus.model().item(index).isEnabled()

    def _set_corpus_enabled(self, key: str, enabled: bool) -> None:
        self.corpus.model().item(self.corpus.findData(key)).setEnabled(enabled)


def adopt_row(form, row: CorpusTrainingRow, settings) -> None:
    """Give `form` the row's controls under the names both forms (and their tests) use — width_box, k_box,
    tokens_box, corpus, browse, file_label, train, cancel — and send the form's browseRequested,
    trainRequested(settings()) and cancelRequested when they are clicked."""
    for name in ("width_box", "k_box", "tokens_box", "corpus", "browse", "file_label", "train", "cancel"):
        setattr(form, name, getattr(row, name))
    row.browse.clicked.connect(form.browseRequested)
    row.train.clicked.connect(lambda: form.trainRequested.emit(settings()))
    row.cancel.clicked.connect(form.cancelRequested)


class ProgressLine(QWidget):
    """The progress bar and its text; shown while a training runs or while there is something to say."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self._running = False
        self.progress = QProgressBar()
        self.progress.setRange(0, 1)
        self.progress.setMaximumWidth(260)
        self.progress_text = ElidedLabel()
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(self.progress, 1)
        row.addWidget(self.progress_text, 2)
        self.hide()

    def set_running(self, running: bool) -> None:
        self._running = bool(running)
        if running:
            self.progress.setRange(0, 0)  # busy until the first count arrives
            self.show()
        elif self.progress.maximum() == 0:
            self.progress.setRange(0, 1)

    def set_progress(self, done: int, total: int, text: str) -> None:
        if total > 0:
            self.progress.setRange(0, total)
            self.progress.setValue(min(max(done, 0), total))
        else:
            self.progress.setRange(0, 0)
        self.progress_text.setText(text)
        self.setVisible(bool(text) or self._running)
