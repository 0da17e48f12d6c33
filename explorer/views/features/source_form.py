"""Where the Features panel's features come from: a layer, a site, and a dictionary — the layer's
MLP neurons (nothing to train) or a sparse autoencoder, with its training settings, Train, Cancel
and progress. Passive: the controller says what exists (`set_source`, `set_corpus_choices`) and
what runs (`set_training`, `set_progress`); the form says what the user asked for."""
from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QButtonGroup, QComboBox, QHBoxLayout, QLabel, QProgressBar, QPushButton, QRadioButton, QSizePolicy, QSpinBox, QVBoxLayout,
    QWidget,
)

from explorer.widgets.elided_label import ElidedLabel

SITES = (("resid", "residual stream (after the block)"), ("mlp", "MLP output"))
CORPORA = (("builtin", "built-in text"), ("run", "run's data"), ("file", "text file"))
CORPUS_TIPS = ("A built-in English text (Python's documentation topics)", "The training data of the run the model "
               "comes from (offered for a model opened from a run folder)", "A plain-text file of your own (Browse…)")
DEFAULTS = {"width": 1024, "k": 16, "tokens": 2_000_000}
NEURON_SITE_TIP = "Neurons are the MLP's hidden units (after its nonlinearity): the site applies to an SAE"


def _spin(low: int, high: int, value: int, step: int, tip: str) -> QSpinBox:
    box = QSpinBox()
    box.setRange(low, high)
    box.setSingleStep(step)
    box.setValue(value)
    box.setGroupSeparatorShown(True)
    box.setToolTip(tip)
    return box


class SourceForm(QWidget):
    """Layer, site, Neurons | SAE on the first row; an SAE's settings, Train and Cancel on the second
    (shown for SAE); the progress bar and its text on the third (shown while something runs or says)."""

    dictionaryRequested = Signal(str, int, str)  # kind, layer, site
    trainRequested = Signal(dict)
    cancelRequested = Signal()
    browseRequested = Signal()

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self._quiet = False
        self._file = ""
        self._sae_site = SITES[0][0]  # the site an SAE was last asked for (neurons show theirs: the MLP)
        box = QVBoxLayout(self)
        box.setContentsMargins(0, 0, 0, 0)
        box.setSpacing(4)
        self.first_row = self._build_source_row()
        box.addLayout(self.first_row)
        self.sae_row = QWidget()
        self.sae_row.setLayout(self._build_sae_row())
        box.addWidget(self.sae_row)
        self.progress_row = QWidget()
        self.progress_row.setLayout(self._build_progress_row())
        box.addWidget(self.progress_row)
        self._show_kind()
        self.progress_row.hide()
        self.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Maximum)  # spare height goes below

    def _build_source_row(self) -> QHBoxLayout:
        self.layer = QComboBox()
        self.layer.setToolTip("The block whose features are shown")
        self.site = QComboBox()
        for key, text in SITES:
            self.site.addItem(text, key)
        self.neurons = QRadioButton("Neurons")
        self.neurons.setToolTip("The layer's MLP neurons as features: no training, ready at once")
        self.sae = QRadioButton("SAE")
        self.sae.setToolTip("A sparse autoencoder trained on this layer and site (TopK): features that are "
                            "often easier to read than neurons; trained here in minutes and saved beside the model")
        self.kind = QButtonGroup(self)
        self.kind.addButton(self.neurons)
        self.kind.addButton(self.sae)
        self.neurons.setChecked(True)
        self.layer.currentIndexChanged.connect(self._announce)
        self.site.currentIndexChanged.connect(self._site_chosen)
        self.kind.buttonToggled.connect(self._kind_toggled)
        row = QHBoxLayout()
        row.addWidget(QLabel("Layer"))
        row.addWidget(self.layer)
        row.addWidget(QLabel("Site"))
        row.addWidget(self.site)
        row.addSpacing(8)
        row.addWidget(self.neurons)
        row.addWidget(self.sae)
        return row

    def _build_sae_row(self) -> QHBoxLayout:
        self.width_box = _spin(2, 1 << 17, DEFAULTS["width"], 256, "Latents in the SAE (its dictionary size)")
        self.k_box = _spin(1, 999, DEFAULTS["k"], 1, "Latents kept active per token (TopK): the SAE's L0")
        self.tokens_box = _spin(1000, 999_000_000, DEFAULTS["tokens"], 500_000,
                                "Activation rows trained on in all (sampled with replacement from the corpus)")
        self.corpus = QComboBox()
        for i, (key, text) in enumerate(CORPORA):
            self.corpus.addItem(text, key)
            self.corpus.setItemData(i, CORPUS_TIPS[i], Qt.ItemDataRole.ToolTipRole)
        self.corpus.setToolTip("The text whose activations the SAE learns from")
        self.browse = QPushButton("Browse…")
        self.browse.setToolTip("Choose a plain-text file as the corpus")
        self.browse.clicked.connect(self.browseRequested)
        self.file_label = ElidedLabel()
        self.train = QPushButton("Train SAE")
        self.train.setToolTip("Harvest the site's activations on the corpus and train the SAE in the background")
        self.train.clicked.connect(lambda: self.trainRequested.emit(self.train_settings()))
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
        row.addWidget(self.cancel)
        return row

    def _build_progress_row(self) -> QHBoxLayout:
        self.progress = QProgressBar()
        self.progress.setRange(0, 1)
        self.progress.setValue(0)
        self.progress.setMaximumWidth(260)
        self.progress_text = ElidedLabel()
        row = QHBoxLayout()
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(self.progress, 1)
        row.addWidget(self.progress_text, 2)
        return row

    # -- data in ----------------------------------------------------------------------------------
    def set_layers(self, n_layer: int) -> None:
        keep = max(self.layer.currentIndex(), 0)
        self._quiet = True
        try:
            self.layer.clear()
            self.layer.addItems([str(i) for i in range(n_layer)])
            self.layer.setCurrentIndex(min(keep, n_layer - 1) if n_layer else -1)
        finally:
            self._quiet = False

    def set_source(self, kind: str, layer: int, site: str) -> None:
        self._quiet = True
        try:
            (self.sae if kind == "sae" else self.neurons).setChecked(True)
            if 0 <= layer < self.layer.count():
                self.layer.setCurrentIndex(layer)
            index = self.site.findData(site)
            if index >= 0:
                self.site.setCurrentIndex(index)
                if kind == "sae":
                    self._sae_site = site
        finally:
            self._quiet = False
        self._show_kind()

    def set_corpus_choices(self, run_available: bool, file_path: str) -> None:
        """The run's data offered when there is a run (and chosen when it comes, in place of the built-in
        text: a run's character model cannot read another alphabet); a chosen file is shown and selected."""
        run_came = run_available and not self.corpus.model().item(self.corpus.findData("run")).isEnabled()
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
        elif not self.corpus.model().item(self.corpus.currentIndex()).isEnabled():
            self.corpus.setCurrentIndex(0)

    def set_training(self, running: bool) -> None:
        for widget in (self.layer, self.site, self.neurons, self.sae, self.width_box, self.k_box,
                       self.tokens_box, self.corpus, self.browse, self.train):
            widget.setEnabled(not running)
        self.cancel.setEnabled(running)
        if running:
            self.progress.setRange(0, 0)  # busy until the first count arrives
            self.progress_row.show()
        elif self.progress.maximum() == 0:
            self.progress.setRange(0, 1)
        self._show_kind()

    def set_progress(self, done: int, total: int, text: str) -> None:
        if total > 0:
            self.progress.setRange(0, total)
            self.progress.setValue(min(max(done, 0), total))
        else:
            self.progress.setRange(0, 0)
        self.progress_text.setText(text)
        self.progress_row.setVisible(bool(text) or self.cancel.isEnabled())

    # -- what the user asked for ------------------------------------------------------------------
    def current_kind(self) -> str:
        return "sae" if self.sae.isChecked() else "neurons"

    def train_settings(self) -> dict:
        return {"layer": max(self.layer.currentIndex(), 0), "site": self.site.currentData(),
                "width": self.width_box.value(), "k": self.k_box.value(), "tokens": self.tokens_box.value(),
                "corpus": self.corpus.currentData(), "path": self._file if self.corpus.currentData() == "file" else ""}

    def _kind_toggled(self, button, on: bool) -> None:
        """Back to SAE from Neurons: the site the SAE was read at, not the neurons' MLP (issue 39)."""
        if not on:
            return
        if button is self.sae:
            index = self.site.findData(self._sae_site)
            if index >= 0 and index != self.site.currentIndex():
                quiet, self._quiet = self._quiet, True
                try:
                    self.site.setCurrentIndex(index)
                finally:
                    self._quiet = quiet
        self._announce()

    def _site_chosen(self) -> None:
        if self.sae.isChecked():
            self._sae_site = self.site.currentData()
        self._announce()

    def _announce(self) -> None:
        self._show_kind()
        if not self._quiet and self.layer.currentIndex() >= 0:
            self.dictionaryRequested.emit(self.current_kind(), self.layer.currentIndex(), self.site.currentData())

    def _show_kind(self) -> None:
        sae = self.sae.isChecked()
        self.sae_row.setVisible(sae)
        self.site.setEnabled(sae and not self.cancel.isEnabled())
        self.site.setToolTip("Where the SAE reads: the residual stream after the block, or the MLP's output"
                             if sae else NEURON_SITE_TIP)

    def _set_corpus_enabled(self, key: str, enabled: bool) -> None:
        self.corpus.model().item(self.corpus.findData(key)).setEnabled(enabled)
