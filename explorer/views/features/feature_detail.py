"""The selected feature: its title, Clamp / Ablate and the edits in force, its top-activating
contexts (or, for a run, its density and maximum over training), its activation histogram, and
the tokens its decoder direction promotes and suppresses through the unembedding."""
from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QPalette
from PySide6.QtWidgets import (
    QDoubleSpinBox, QHBoxLayout, QLabel, QListWidget, QPushButton, QSplitter, QTabWidget, QTextBrowser,
    QVBoxLayout, QWidget,
)

from explorer.views.features.charts import ActivationHistogram, OverTrainingChart
from explorer.views.features.contexts import contexts_csv, contexts_html
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

    def texts(self) -> list[str]:
        return [self.list.item(i).text() for i in range(self.list.count())]


class FeatureDetail(QWidget):
    """Passive: `set_feature`, `clear_feature`, `set_over_training` in; the edit bar's signals out."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.feature: int | None = None
        self.contexts: list = []
        self.title = QLabel(PICK_HINT)
        self.title.setWordWrap(True)
        self.title.setTextFormat(Qt.TextFormat.RichText)
        self.title.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.edit_bar = EditBar()
        self.context_view = QTextBrowser()
        self.context_view.setLineWrapMode(QTextBrowser.LineWrapMode.NoWrap)
        self.context_view.setOpenLinks(False)
        self.context_view.setToolTip("The corpus's windows where this feature is strongest, strongest first; "
                                     "the number is the window's peak activation, shades scale with activation")
        self.training_chart = OverTrainingChart()
        self.tabs = QTabWidget()
        self.tabs.addTab(self.context_view, "Top contexts")
        self.tabs.addTab(self.training_chart, "Over training")
        self.tabs.setTabEnabled(1, False)
        self.tabs.setTabToolTip(1, "For a model from a training run with SAEs fitted along its kept steps")
        self.histogram = ActivationHistogram()
        self.histogram.setMinimumHeight(90)  # readable in a 900×600 window too
        self.promoted = TokenList("promotes", "Tokens whose logits its decoder direction raises most (through the "
                                  "unembedding)")
        self.suppressed = TokenList("suppresses", "Tokens whose logits its decoder direction lowers most")
        lists = QHBoxLayout()
        lists.setContentsMargins(0, 0, 0, 0)
        lists.addWidget(self.promoted)
        lists.addWidget(self.suppressed)
        column = QWidget()  # the histogram over the two token lists, beside the contexts
        column_box = QVBoxLayout(column)
        column_box.setContentsMargins(0, 0, 0, 0)
        column_box.addWidget(self.histogram, 3)
        column_box.addLayout(lists, 2)
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
        base = self.context_view.palette().color(QPalette.ColorRole.Base)
        # checked before anything on screen changes
        html = contexts_html(list(contexts), (base.red(), base.green(), base.blue()))
        self.histogram.set_histogram(hist_edges, hist_counts)
        self.feature, self.contexts = int(feature), list(contexts)
        self.title.setText(title)
        self.context_view.setHtml(html)
        self.promoted.set_rows(promoted)
        self.suppressed.set_rows(suppressed)
        self.edit_bar.set_feature(self.feature)
        if not self.tabs.isTabEnabled(1):
            self.tabs.setCurrentIndex(0)

    def clear_feature(self, reason: str) -> None:
        self.feature, self.contexts = None, []
        self.title.setText(reason or PICK_HINT)
        self.context_view.clear()
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

    def contexts_csv(self) -> str:
        return contexts_csv(self.feature, self.contexts)
