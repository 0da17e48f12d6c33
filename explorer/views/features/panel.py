"""The Features panel: what the model represents, read through a dictionary of features — a
layer's MLP neurons, or a sparse autoencoder trained here on one site of one layer.

Top: where the features come from (layer, site, Neurons | SAE, an SAE's training settings, Train,
Cancel, progress) and Export; the dictionary's metrics and a status line. Left: the features,
sortable and filterable, or (the Density tab) the histogram of how often they fire. Right: the selected
feature — Clamp / Ablate, its examples shaded by activation (top contexts, then SAEDashboard's
activation-interval and random groups, the context width adjustable), its density and maximum over
training, its nearest features by decoder cosine, its activation histogram, and the tokens it promotes
and suppresses. Bottom: a prompt whose tokens light up where the feature fires; a clicked token lists
its strongest features.

A passive view (explorer/views/features/protocol.py): numpy and plain values in, intent out;
explorer/controllers/features.py does the rest.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QKeySequence, QShortcut
from PySide6.QtWidgets import QLabel, QSplitter, QTabWidget, QVBoxLayout, QWidget

from explorer.views.features.density_chart import DensityChart
from explorer.views.features.feature_detail import FeatureDetail
from explorer.views.features.feature_table import FeatureTable
from explorer.views.features.prompt_part import PromptArea
from explorer.views.features.source_form import SourceForm
from explorer.widgets.controls import show_text
from explorer.widgets.csv_meta import with_metadata
from explorer.widgets.menu_button import menu_button

ERROR_COLOUR = "#dc2626"


class FeaturesPanel(QWidget):
    dictionaryRequested = Signal(str, int, str)  # kind "neurons" | "sae", layer, site "resid" | "mlp"
    trainRequested = Signal(dict)  # layer, site, width, k, tokens, corpus, path
    cancelRequested = Signal()
    browseRequested = Signal()
    featureSelected = Signal(int)
    promptChanged = Signal(str)
    tokenClicked = Signal(int)
    editRequested = Signal(int, float)
    resetEditsRequested = Signal()
    exportRequested = Signal(str)  # "table-csv" | "contexts-csv" | "saedashboard-json" | "neuronpedia-json"
    contextChanged = Signal(int, int)  # tokens of context before and after each example's token

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.source = SourceForm()
        self.export_button = menu_button("Export", [
            ("Feature table as CSV…", lambda: self.exportRequested.emit("table-csv")),
            ("This feature's contexts as CSV…", lambda: self.exportRequested.emit("contexts-csv")),
            ("This feature's dashboard as SAEDashboard JSON…", lambda: self.exportRequested.emit("saedashboard-json")),
            ("This feature's dashboard as Neuronpedia JSON…", lambda: self.exportRequested.emit("neuronpedia-json"))])
        self.source.first_row.addStretch(1)
        self.source.first_row.addWidget(self.export_button)
        self.metrics = QLabel("")
        self.metrics.setWordWrap(True)
        self.metrics.setTextFormat(Qt.TextFormat.RichText)
        self.metrics.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.status = QLabel("")
        self.status.setWordWrap(True)
        self.status.setTextFormat(Qt.TextFormat.RichText)
        self.table = FeatureTable()
        self.density = DensityChart()
        self.left = QTabWidget()  # every feature: as rows, or as a histogram of how often they fire
        self.left.addTab(self.table, "Features")
        self.left.addTab(self.density, "Density")
        self.left.setTabToolTip(1, "How often every feature fires: dead and dense features counted")
        self.detail = FeatureDetail()
        self.prompt = PromptArea()
        self.sides = QSplitter(Qt.Orientation.Horizontal)
        self.sides.addWidget(self.left)
        self.sides.addWidget(self.detail)
        self.sides.setStretchFactor(0, 0)  # the table keeps its width (every column readable); a wider
        self.sides.setStretchFactor(1, 1)  # window widens the contexts
        self.sides.setChildrenCollapsible(False)
        self.rows = QSplitter(Qt.Orientation.Vertical)
        self.rows.addWidget(self.sides)
        self.rows.addWidget(self.prompt)
        self.rows.setStretchFactor(0, 1)
        self.rows.setStretchFactor(1, 0)
        self.rows.setChildrenCollapsible(False)
        layout = QVBoxLayout(self)
        layout.addWidget(self.source)
        layout.addWidget(self.metrics)
        layout.addWidget(self.status)
        layout.addWidget(self.rows, 1)
        self._wire()
        show_text(self.metrics, "")
        show_text(self.status, "")

    def _wire(self) -> None:
        for name in ("dictionaryRequested", "trainRequested", "cancelRequested", "browseRequested"):
            getattr(self.source, name).connect(getattr(self, name))
        self.detail.edit_bar.editRequested.connect(self.editRequested)
        self.detail.edit_bar.resetEditsRequested.connect(self.resetEditsRequested)
        self.prompt.promptChanged.connect(self.promptChanged)
        self.prompt.tokenClicked.connect(self.tokenClicked)
        self.table.featureSelected.connect(self._on_selected)
        self.prompt.featureClicked.connect(self._on_feature_link)
        self.detail.neighbours.featureClicked.connect(self._on_feature_link)
        self.detail.examples.contextChanged.connect(self.contextChanged)
        self.find = QShortcut(QKeySequence(QKeySequence.StandardKey.Find), self)
        self.find.setContext(Qt.ShortcutContext.WidgetWithChildrenShortcut)
        self.find.activated.connect(self.focus_filter)

    # -- the source -------------------------------------------------------------------------------
    def set_layers(self, n_layer: int) -> None:
        self.source.set_layers(n_layer)

    def set_source(self, kind: str, layer: int, site: str) -> None:
        """Show the dictionary on screen (no signal: the controller chose it)."""
        self.source.set_source(kind, layer, site)

    def set_corpus_choices(self, run_available: bool, file_path: str) -> None:
        self.source.set_corpus_choices(run_available, file_path)

    def set_training(self, running: bool) -> None:
        self.source.set_training(running)

    def set_progress(self, done: int, total: int, text: str) -> None:
        self.source.set_progress(done, total, text)

    # -- lines of text ----------------------------------------------------------------------------
    def set_status(self, text: str) -> None:
        show_text(self.status, text)

    def set_error(self, text: str) -> None:
        show_text(self.status, f"<span style='color:{ERROR_COLOUR}'>{text}</span>" if text else "")

    def set_metrics(self, html: str) -> None:
        show_text(self.metrics, html)

    def set_edits(self, text: str) -> None:
        """'feature 12 → 5.0 · feature 40 → 0' (empty: nothing edited)."""
        self.detail.edit_bar.set_edits(text)

    # -- the features -----------------------------------------------------------------------------
    def set_table(self, ids: np.ndarray, density: np.ndarray, max_act: np.ndarray, logit_effect: np.ndarray,
                  labels: list[str]) -> None:
        """One row per feature; the selected one stays selected when it is still listed."""
        self.table.set_table(ids, density, max_act, logit_effect, labels)
        self.detail.edit_bar.set_feature(self.table.selected())

    def selected_feature(self) -> int | None:
        return self.table.selected()

    def set_feature(self, feature: int, title: str, contexts: list, hist_edges: np.ndarray, hist_counts: np.ndarray,
                    promoted: list, suppressed: list) -> None:
        """`contexts`: (tokens, activations) pairs, strongest first; `promoted`/`suppressed`: (token, logit)."""
        self.detail.set_feature(feature, title, contexts, hist_edges, hist_counts, promoted, suppressed)
        self.table.select_feature(feature)

    def clear_feature(self, reason: str) -> None:
        self.detail.clear_feature(reason)
        self.detail.edit_bar.set_feature(self.table.selected())

    def set_over_training(self, steps: np.ndarray, series: dict, marker_step) -> None:
        self.detail.set_over_training(steps, series, marker_step)

    # -- the dashboard (issue 39) -----------------------------------------------------------------
    def set_density(self, edges: np.ndarray, counts: np.ndarray, dead: int, dense: int, dense_at: float,
                    features: int, tokens: int) -> None:
        """Every feature's log10(density) histogram (edges (B+1,), counts (B,)); dead and dense counted."""
        self.density.set_density(edges, counts, dead, dense, dense_at, features, tokens)

    def set_dashboard(self, feature: int, density: float, groups: list, neighbour_ids: np.ndarray,
                      neighbour_cosines: np.ndarray, neighbour_labels: list) -> None:
        """`feature`'s place on the density histogram, its example groups — (heading, [(tokens, activations
        (n,), index of the token it was picked for)]) pairs — and its nearest features by decoder cosine,
        most similar first. Shown once `feature` is (a dashboard may come before its detail)."""
        self.density.set_marker(density)
        self.detail.set_examples(feature, groups)
        self.detail.set_neighbours(feature, neighbour_ids, neighbour_cosines, neighbour_labels)

    def context_width(self) -> tuple[int, int]:
        """(before, after): tokens of context asked for around each example's token."""
        return self.detail.examples.context()

    # -- the prompt -------------------------------------------------------------------------------
    def prompt_text(self) -> str:
        return self.prompt.prompt.toPlainText()

    def set_prompt_text(self, text: str) -> None:
        self.prompt.prompt.set_text(text)

    def set_prompt_activations(self, tokens: list[str], acts: np.ndarray | None) -> None:
        """The prompt's tokens, shaded by the selected feature's activation (None: unshaded)."""
        self.prompt.set_activations(tokens, acts)

    def set_token_features(self, position: int, token: str, features: list) -> None:
        """A clicked token's strongest features: (feature id, activation, label) rows."""
        self.prompt.set_token_features(position, token, features)

    # -- everything at once -----------------------------------------------------------------------
    def clear_results(self, reason: str) -> None:
        """What belonged to another model or dictionary goes; the prompt's text and the form stay."""
        self.table.clear()
        self.density.clear()
        self.detail.clear_feature(reason)
        self.detail.set_over_training(np.zeros(0), {}, None)
        self.prompt.clear()
        self.set_metrics("")
        self.set_status(reason)

    def focus_filter(self) -> None:
        self.table.filter.setFocus(Qt.FocusReason.ShortcutFocusReason)
        self.table.filter.selectAll()

    # -- export (the controller picked the path) --------------------------------------------------
    def export_table_csv(self, path: str, meta: dict) -> bool:
        """The rows on screen, in their order (a filter in force is named in the header); False
        when there are none. An unwritable path raises OSError."""
        if not self.table.model.rowCount():
            return False
        meta = dict(meta or {})
        if self.table.model.filter_text:
            meta["filter"] = f"{self.table.model.filter_text!r} ({self.table.model.rowCount()} of "\
                             f"{len(self.table.model.ids)} features)"
        Path(path).write_text(with_metadata(self.table.model.csv_text(), meta), encoding="utf-8")
        return True

    def export_contexts_csv(self, path: str, meta: dict) -> bool:
        """The shown feature's contexts, one row per token; False when no feature is shown."""
        if self.detail.feature is None:
            return False
        Path(path).write_text(with_metadata(self.detail.contexts_csv(), meta), encoding="utf-8")
        return True

    # -- internal ---------------------------------------------------------------------------------
    def _on_selected(self, feature: int) -> None:
        self.detail.edit_bar.set_feature(feature)
        self.featureSelected.emit(feature)

    def _on_feature_link(self, feature: int) -> None:
        self.table.select_feature(feature)
        self._on_selected(feature)
