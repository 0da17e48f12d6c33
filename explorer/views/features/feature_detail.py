"""The selected feature: its title, Clamp / Ablate and the edits in force, its examples (top contexts,
then SAEDashboard's groups), for a run its density and maximum over training, its nearest features by
decoder cosine, its activation histogram, and the tokens its decoder direction promotes and suppresses
through the unembedding."""
from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QDoubleSpinBox, QHBoxLayout, QLabel, QListWidget, QPushButton, QSplitter, QTabWidget, QVBoxLayout, QWidget,
)

from explorer.views.features.charts import ActivationHistogram, OverTrainingChart
from explorer.views.features.examples import ExampleView
from explorer.views.features.neighbours import NeighbourList
from explorer.widgets.elided_label import ElidedLabel
from explorer.widgets.token_stream import visible_token

PICK_HINT = "Select a feature in the list (or click one of a prompt token's features) to see what it fires on."
EDITS_NONE = "no feature edited"


class EditBar(QWidget):
    """A value, Clamp and Ablate for the selected feature; the edits in force and Reset."""

    editRequested = Signal(int, float)
    resetEditsRequested = Signal()

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.feature: int | None = None
        self.value = QDoubleSpinBox()
        self.value.setRange(-9999.0, 9999.0)
        self.value.setDecimals(2)
        self.value.setValue(5.0)
        self.value.setToolTip("The activation to hold the feature at on every token; above its maximum it steers")
        self.clamp = QPushButton("Clamp")
        self.clamp.setToolTip("Hold the selected feature at the value on every token, everywhere in the app "
                              "(the SAE's error term is kept: only this feature changes)")
        self.clamp.clicked.connect(lambda: self._request(float(self.value.value())))
        self.ablate = QPushButton("Ablate")
        self.ablate.setToolTip("Set the selected feature to 0 on every token, everywhere in the app")
        self.ablate.clicked.connect(lambda: self._request(0.0))
        self.edits = ElidedLabel()
        self.edits.setObjectName("featureEdits")
        self.edits.setStyleSheet("color: #dc2626; font-weight: 600;")
        self.reset = QPushButton("Reset")
        self.reset.setToolTip("Remove every feature edit: the model runs unedited again")
        self.reset.clicked.connect(self.resetEditsRequested)
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(self.value)
        row.addWidget(self.clamp)
        row.addWidget(self.ablate)
        row.addWidget(self.edits, 1)
        row.addWidget(self.reset)
        self.set_feature(None)
        self.set_edits("")

    def set_feature(self, feature: int | None) -> None:
        self.feature = feature
        for widget in (self.value, self.clamp, self.ablate):
            widget.setEnabled(feature is not None)

    def set_edits(self, text: str) -> None:
        self.edits.setText(text or EDITS_NONE)
        self.edits.setStyleSheet("color: #dc2626; font-weight: 600;" if text else "color: #8c8c8c;")
        self.reset.setEnabled(bool(text))

    def _request(self, value: float) -> None:
        if self.feature is not None:
            self.editRequested.emit(self.feature, value)


class TokenList(QWidget):
    """A titled list of (token, value) rows: what the decoder direction promotes or suppresses."""

    def __init__(self, title: str, tip: str, parent: QWidget | None = None):
        super().__init__(parent)
        self.list = QListWidget()
        self.list.setToolTip(tip)
        # narrow (900 px): each row keeps its token's start and its value, "␣Poti…  +0.01", never a scroll bar
        self.list.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.list.setTextElideMode(Qt.TextElideMode.ElideMiddle)
        heading = QLabel(f"<b>{title}</b>")
        heading.setToolTip(tip)
        box = QVBoxLayout(self)
        box.setContentsMargins(0, 0, 0, 0)
        box.setSpacing(2)
        box.addWidget(heading)
        box.addWidget(self.list, 1)

    def set_rows(self, rows) -> None:
        self.list.clear()
        self.list.addItems([f"{visible_token(str(t))}  {float(v):+.2f}" for t, v in rows])
        for i in range(self.list.count()):  # the whole row on hover, where it is elided
            self.list.item(i).setToolTip(self.list.item(i).text())

    def texts(self) -> list[str]:
        return [self.list.item(i).text() for i in range(self.list.count())]


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
        self.tabs = QTabWidget()
        self.tabs.setUsesScrollButtons(False)  # every tab's name in view, at 900 px too
        self.tabs.addTab(self.examples, "Examples")
        self.tabs.addTab(self.training_chart, "Over training")
        self.tabs.addTab(self.neighbours, "Nearest")
        self.tabs.setTabEnabled(1, False)
        self.tabs.setTabToolTip(0, "Where the feature fires: its strongest contexts, then examples at each activation "
                                   "level and at random")
        self.tabs.setTabToolTip(1, "For a model from a training run with SAEs fitted along its kept steps")
        self.tabs.setTabToolTip(2, "The features whose decoder directions are nearest this one's")
        self.histogram = ActivationHistogram()
        self.histogram.setMinimumHeight(100)  # readable in a 900×600 window too (it was ~70 px there)
        self.promoted = TokenList("promotes", "Tokens whose logits its decoder direction raises most (through the "
                                  "unembedding)")
        self.suppressed = TokenList("suppresses", "Tokens whose logits its decoder direction lowers most")
        lists = QWidget()
        lists_box = QHBoxLayout(lists)
        lists_box.setContentsMargins(0, 0, 0, 0)
        lists_box.addWidget(self.promoted)
        lists_box.addWidget(self.suppressed)
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
