"""Where the Features panel's features come from: a layer, a site, and a dictionary — the layer's
MLP neurons (nothing to train) or a sparse autoencoder, with its training settings, Train, Cancel
and progress. Passive: the controller says what exists (`set_source`, `set_corpus_choices`) and
what runs (`set_training`, `set_progress`); the form says what the user asked for."""
from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QButtonGroup, QComboBox, QHBoxLayout, QLabel, QRadioButton, QSizePolicy, QVBoxLayout, QWidget

from explorer.widgets.corpus_training import CorpusTrainingRow, ProgressLine, adopt_row

SITES = (("resid", "residual stream (after the block)"), ("mlp", "MLP output"))
NEURON_SITE_TIP = "Neurons are the MLP's hidden units (after its nonlinearity): the site applies to an SAE"
SAE_SPINS = {  # (low, high, step, tip)
    "width": (2, 1 << 17, 256, "Latents in the SAE (its dictionary size)"),
    "k": (1, 999, 1, "Latents kept active per token (TopK): the SAE's L0"),
    "tokens": (1000, 999_000_000, 500_000, "Activation rows trained on in all (sampled with replacement from the corpus)"),
}


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
        self._sae_site = SITES[0][0]  # the site an SAE was last asked for (neurons show theirs: the MLP)
        box = QVBoxLayout(self)
        box.setContentsMargins(0, 0, 0, 0)
        box.setSpacing(4)
        self.first_row = self._build_source_row()
        box.addLayout(self.first_row)
        self.sae_row = CorpusTrainingRow(SAE_SPINS, "The text whose activations the SAE learns from", "Train SAE",
                                         "Harvest the site's activations on the corpus and train the SAE in the background")
        adopt_row(self, self.sae_row, self.train_settings)
        box.addWidget(self.sae_row)
        self.progress_row = ProgressLine()
        self.progress, self.progress_text = self.progress_row.progress, self.progress_row.progress_text
        self.progress.setValue(0)  # this form's bar has always started at 0 (the Circuits form's starts empty)
        box.addWidget(self.progress_row)
        self._show_kind()
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
        self.sae_row.set_corpus_choices(run_available, file_path)

    def set_training(self, running: bool) -> None:
        for widget in (self.layer, self.site, self.neurons, self.sae):
            widget.setEnabled(not running)
        self.sae_row.set_running(running)
        self.progress_row.set_running(running)
        self._show_kind()

    def set_progress(self, done: int, total: int, text: str) -> None:
        self.progress_row.set_progress(done, total, text)

    # -- what the user asked for ------------------------------------------------------------------
    def current_kind(self) -> str:
        return "sae" if self.sae.isChecked() else "neurons"

    def train_settings(self) -> dict:
        return {"layer": max(self.layer.currentIndex(), 0), "site": self.site.currentData(), **self.sae_row.values()}

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
