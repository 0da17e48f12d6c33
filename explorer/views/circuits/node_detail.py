"""The clicked node: what it is, Clamp / Ablate for a feature (with the edits in force and Reset), and in
tabs its top contexts on held-out text (shaded as the Features panel shades them), the tokens its decoder
row promotes and suppresses, and its strongest incoming and outgoing edges — a listed node that is in the
drawn graph is one click away."""
from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QPalette
from PySide6.QtWidgets import QLabel, QListWidgetItem, QTabWidget, QTextBrowser, QVBoxLayout, QWidget

from explorer.views.features.contexts import contexts_html
from explorer.widgets.controls import side_by_side, tab_pages
from explorer.widgets.feature_edits import FeatureEditRow
from explorer.widgets.token_list import TokenList

PICK_HINT = "Click a node of the graph: a feature shows what it reads and writes, every node its strongest edges."


class EdgeList(TokenList):
    """A titled list of (node, weight) rows; a row whose node is drawn says so and can be clicked."""

    nodeRequested = Signal(int)  # the node's index among the drawn (kept) nodes

    def __init__(self, title: str, tip: str, parent: QWidget | None = None):
        super().__init__(title, tip, parent)
        self.list.itemClicked.connect(self._clicked)

    def set_rows(self, rows) -> None:
        """`rows`: (label, weight, kept index or -1), strongest first."""
        self.list.clear()
        for label, weight, kept in rows:
            item = QListWidgetItem(f"{float(weight):+.3g}  {label}" + ("" if kept >= 0 else "  (pruned)"))
            item.setData(Qt.ItemDataRole.UserRole, int(kept))
            item.setToolTip(item.text() + ("\nclick: select it in the graph" if kept >= 0 else
                                           "\nleft out of the drawn graph by the pruning"))
            if kept < 0:
                item.setForeground(self.palette().color(QPalette.ColorRole.PlaceholderText))
            self.list.addItem(item)

    def _clicked(self, item: QListWidgetItem) -> None:
        kept = int(item.data(Qt.ItemDataRole.UserRole))
        if kept >= 0:
            self.nodeRequested.emit(kept)


class NodeEditBar(FeatureEditRow):
    """Clamp / Ablate for the transcoder feature shown, keyed (layer, index)."""

    editRequested = Signal(int, int, float)  # layer, feature, value (0 ablates)

    def __init__(self, parent: QWidget | None = None):
        super().__init__("The activation to hold the feature at on every token; above its usual values it steers",
                         "Hold this transcoder feature at the value on every token, everywhere in the app (the "
                         "transcoder's error is kept: only this feature changes); the graph is then the edited model's",
                         "Set this feature to 0 on every token, everywhere in the app", parent)


class NodeDetail(QWidget):
    """Passive: `set_node`, `clear_node`, `set_edits` in; edit intents and node requests out."""

    editRequested = Signal(int, int, float)  # layer, feature, value (0 ablates)
    resetEditsRequested = Signal()
    nodeRequested = Signal(int)  # kept index of a node listed among the edges

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.feature: tuple[int, int] | None = None  # (layer, index) of the feature shown
        self.title = QLabel(PICK_HINT)
        self.title.setWordWrap(True)
        self.title.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.edit_bar = bar = NodeEditBar()
        self.value, self.clamp, self.ablate, self.edits, self.reset = bar.value, bar.clamp, bar.ablate, bar.edits, bar.reset
        bar.editRequested.connect(self.editRequested)
        bar.resetEditsRequested.connect(self.resetEditsRequested)
        self.tabs = self._tabs()
        box = QVBoxLayout(self)
        box.setContentsMargins(4, 0, 0, 0)
        box.addWidget(self.title)
        box.addWidget(bar)
        box.addWidget(self.tabs, 1)
        self.clear_node(PICK_HINT)
        self.set_edits("")

    def _tabs(self) -> QTabWidget:
        """Edges (strongest in and out), Contexts (where the feature fires), Logits (what it writes)."""
        self.contexts = QTextBrowser()
        self.contexts.setLineWrapMode(QTextBrowser.LineWrapMode.NoWrap)
        self.promoted = TokenList("promotes", "Tokens whose logits its decoder row raises most (through the final "
                                  "norm's gain and the unembedding)")
        self.suppressed = TokenList("suppresses", "Tokens whose logits its decoder row lowers most")
        self.incoming = EdgeList("from", "The node's strongest incoming edges in the whole graph: how much each source "
                                 "moves it (its direct effect)")
        self.outgoing = EdgeList("into", "The node's strongest outgoing edges in the whole graph")
        for edges in (self.incoming, self.outgoing):
            edges.nodeRequested.connect(self.nodeRequested)
        return tab_pages([
            (side_by_side(self.incoming, self.outgoing), "Edges", "The strongest edges into and out of the node"),
            (self.contexts, "Contexts", "Where the feature fires on held-out text: its strongest contexts"),
            (side_by_side(self.promoted, self.suppressed), "Logits", "What the feature's decoder row writes, read "
                                                                     "through the unembedding")])

    def set_node(self, title: str, feature: tuple[int, int] | None, contexts: list, promoted: list, suppressed: list,
                 incoming: list, outgoing: list) -> None:
        self.feature = None if feature is None else (int(feature[0]), int(feature[1]))
        self.title.setText(title)
        base = self.contexts.palette().color(QPalette.ColorRole.Base)
        self.contexts.setHtml(contexts_html(contexts, (base.red(), base.green(), base.blue())) if feature else
                              "<p style='color:#8c8c8c'>Only a transcoder feature has contexts.</p>")
        self.promoted.set_rows(promoted)
        self.suppressed.set_rows(suppressed)
        self.incoming.set_rows(incoming)
        self.outgoing.set_rows(outgoing)
        for i in (1, 2):
            self.tabs.setTabEnabled(i, feature is not None)
        if feature is None and self.tabs.currentIndex() != 0:
            self.tabs.setCurrentIndex(0)
        self._enable_edit()

    def clear_node(self, reason: str) -> None:
        self.feature = None
        self.title.setText(reason or PICK_HINT)
        self.contexts.clear()
        for rows in (self.promoted, self.suppressed, self.incoming, self.outgoing):
            rows.set_rows([])
        self._enable_edit()

    def set_edits(self, text: str) -> None:
        self.edit_bar.set_edits(text)

    def _enable_edit(self) -> None:
        self.edit_bar.set_feature(self.feature)
