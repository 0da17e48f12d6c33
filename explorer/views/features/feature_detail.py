"""The selected feature: its title, Clamp / Ablate and the edits in force, its examples (top contexts,
then SAEDashboard's groups), for a run its density and maximum over training, its nearest features by
decoder cosine, its activation histogram, and the tokens its decoder direction promotes and suppresses
through the unembedding."""
from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QLabel, QSplitter, QVBoxLayout, QWidget

from explorer.views.features.charts import ActivationHistogram, OverTrainingChart
from explorer.views.features.examples import ExampleView
from explorer.views.features.neighbours import NeighbourList
from explorer.widgets.controls import side_by_side, tab_pages
from explorer.widgets.feature_edits import FeatureEditRow
from explorer.widgets.token_list import TokenList

PICK_HINT = "Select a feature in the list (or click one of a prompt token's features) to see what it fires on."


class EditBar(FeatureEditRow):
    """A value, Clamp and Ablate for the selected feature; the edits in force and Reset."""

    editRequested = Signal(int, float)

    def __init__(self, parent: QWidget | None = None):
        super().__init__("The activation to hold the feature at on every token; above its maximum it steers",
                         "Hold the selected feature at the value on every token, everywhere in the app (the SAE's "
                         "error term is kept: only this feature changes)",
                         "Set the selected feature to 0 on every token, everywhere in the app", parent)
        self.edits.setObjectName("featureEdits")


class FeatureDetail(QWidget):
    """Passive: `set_feature`, `clear_feature`, `set_over_training` in; the edit bar's signals out."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.feature: int | None = None
        self.contexts: list = []
        self._early: dict = {}  # setter name -> (feature, its arguments): a dashboard part before its detail
        self.title = QLabel(PICK_HINT)
        self.title.setWordWrap(True)
        self.title.setTextFormat(Qt.TextFormat.RichText)
        self.title.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.edit_bar = EditBar()
        self.examples = ExampleView()
        self.context_view = self.examples.browser
        self.training_chart = OverTrainingChart()
        self.neighbours = NeighbourList()
        self.tabs = tab_pages([
            (self.examples, "Examples", "Where the feature fires: its strongest contexts, then examples at each "
                                        "activation level and at random"),
            (self.training_chart, "Over training", "For a model from a training run with SAEs fitted along its kept "
                                                   "steps"),
            (self.neighbours, "Nearest", "The features whose decoder directions are nearest this one's")])
        self.tabs.setTabEnabled(1, False)
        self.histogram = ActivationHistogram()
        self.histogram.setMinimumHeight(100)  # readable in a 900×600 window too (it was ~70 px there)
        self.promoted = TokenList("promotes", "Tokens whose logits its decoder direction raises most (through the "
                                  "unembedding)")
        self.suppressed = TokenList("suppresses", "Tokens whose logits its decoder direction lowers most")
        lists = side_by_side(self.promoted, self.suppressed)
        lists.setMinimumHeight(90)
        column = QSplitter(Qt.Orientation.Vertical)  # the histogram over the two token lists, beside the examples;
        column.addWidget(self.histogram)  # the user moves the line between them
        column.addWidget(lists)
        column.setStretchFactor(0, 1)
        column.setStretchFactor(1, 1)
        column.setChildrenCollapsible(False)
        self.column = column
        self.splitter = QSplitter(Qt.Orientation.Horizontal)
        self.splitter.addWidget(self.tabs)
        self.splitter.addWidget(column)
        self.splitter.setStretchFactor(0, 3)
        self.splitter.setStretchFactor(1, 2)
        self.splitter.setChildrenCollapsible(False)
        box = QVBoxLayout(self)
        box.setContentsMargins(4, 0, 0, 0)
        box.addWidget(self.title)
        box.addWidget(self.edit_bar)
        box.addWidget(self.splitter, 1)

    def set_feature(self, feature: int, title: str, contexts: list, hist_edges, hist_counts, promoted,
                    suppressed) -> None:
        self.histogram.set_histogram(hist_edges, hist_counts)  # checked before anything on screen changes
        other = self.feature != int(feature)
        if other or not self.examples.groups:  # the same feature's groups stay until new ones come
            self.examples.set_contexts(contexts)
        if other:
            self.neighbours.clear()
        self.feature, self.contexts = int(feature), list(contexts)
        self.title.setText(title)
        for name, (early, args) in list(self._early.items()):  # its dashboard came before its detail
            if early == self.feature:
                getattr(self, name)(early, *args)
        self._early.clear()
        self.promoted.set_rows(promoted)
        self.suppressed.set_rows(suppressed)
        self.edit_bar.set_feature(self.feature)
        if not self.tabs.isTabEnabled(1) and self.tabs.currentIndex() == 1:
            self.tabs.setCurrentIndex(0)

    def clear_feature(self, reason: str) -> None:
        self.feature, self.contexts = None, []
        self._early.clear()
        self.title.setText(reason or PICK_HINT)
        self.examples.clear()
        self.neighbours.clear()
        self.histogram.clear()
        self.promoted.set_rows([])
        self.suppressed.set_rows([])
        self.edit_bar.set_feature(None)

    def set_over_training(self, steps, series: dict, marker_step) -> None:
        """The chart tab is enabled while there is something to chart."""
        self.tabs.setTabEnabled(1, bool(series))
        if series:
            self.training_chart.set_series(steps, series, marker_step)
        elif self.tabs.currentIndex() == 1:
            self.tabs.setCurrentIndex(0)

    def set_examples(self, feature: int, groups: list) -> None:
        """The dashboard's example groups for `feature`, shown once `feature` is (kept until then)."""
        if feature == self.feature:
            self.examples.set_groups(groups)
        else:
            self._early["set_examples"] = (int(feature), (groups,))

    def set_neighbours(self, feature: int, ids, cosines, labels) -> None:
        if feature == self.feature:
            self.neighbours.set_neighbours(ids, cosines, labels)
        else:
            self._early["set_neighbours"] = (int(feature), (ids, cosines, labels))

    def contexts_csv(self) -> str:
        return self.examples.csv(self.feature)
