"""The Circuits panel's transcoder row: width, k, tokens and the corpus, Train transcoders, Over training
(walk the run's kept steps), Cancel, and a progress line. Passive: the controller says what exists
(`set_corpus_choices`, `set_walk_available`) and what runs (`set_training`, `set_progress`)."""
from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QPushButton, QSizePolicy, QVBoxLayout, QWidget

from explorer.widgets.corpus_training import CorpusTrainingRow, ProgressLine, adopt_row

TRANSCODER_SPINS = {  # (low, high, step, tip)
    "width": (16, 1 << 17, 256, "Features per transcoder (one transcoder per layer)"),
    "k": (1, 999, 1, "Features kept active per token (TopK): each layer's L0"),
    "tokens": (4096, 999_000_000, 500_000, "MLP input/output rows each layer's transcoder is trained on (drawn with "
                                           "replacement from the corpus)"),
}


class TrainForm(QWidget):
    trainRequested = Signal(dict)  # width, k, tokens, corpus, path
    walkRequested = Signal(int)  # tokens
    cancelRequested = Signal()
    browseRequested = Signal()

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self._walk_available = False
        self.walk = QPushButton("Over training")
        self.walk.setToolTip("For a run's model: fit a set for every other kept step, each warm-started from its "
                             "neighbour, so the step slider shows the circuit at each step with aligned features")
        self.row = CorpusTrainingRow(
            TRANSCODER_SPINS, "The text whose MLP activations the transcoders learn from (its last tenth is held out: "
            "the metrics and a feature's contexts)", "Train transcoders", "Read every MLP's input and output on the "
            "corpus and train one transcoder per layer in the background; saved beside the run or model and reopened "
            "by itself", extra=(self.walk,))
        row = self.row
        adopt_row(self, row, self.settings)
        self.walk.clicked.connect(lambda: self.walkRequested.emit(self.tokens_box.value()))
        self.progress_line = ProgressLine()
        self.progress, self.progress_text = self.progress_line.progress, self.progress_line.progress_text
        box = QVBoxLayout(self)
        box.setContentsMargins(0, 0, 0, 0)
        box.setSpacing(4)
        row.layout().setSpacing(box.spacing())  # laid out as a sub-layout of this box: as tight, no taller
        row.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Maximum)
        box.addWidget(self.row)
        box.addWidget(self.progress_line)
        self.set_walk_available(False)

    def settings(self) -> dict:
        return self.row.values()

    def set_corpus_choices(self, run_available: bool, file_path: str) -> None:
        """The run's data offered (and chosen) for a run's model; a chosen file shown and selected."""
        self.row.set_corpus_choices(run_available, file_path)

    def set_walk_available(self, available: bool) -> None:
        self._walk_available = bool(available)
        self.walk.setVisible(self._walk_available)
        self.walk.setEnabled(self._walk_available and not self.cancel.isEnabled())

    def set_training(self, running: bool) -> None:
        self.walk.setEnabled(self._walk_available and not running)  # first: the focus the locked settings give
        self.row.set_running(running)  # up never lands on it (nor on Cancel), as it never did
        self.progress_line.set_running(running)

    def set_progress(self, done: int, total: int, text: str) -> None:
        self.progress_line.set_progress(done, total, text)
