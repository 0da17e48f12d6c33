"""The Routes panel: which tokens, through which heads and MLPs, the information for a prediction
flowed along (information-flow routes, Ferrando & Voita 2024), drawn from one forward pass.

Prompt on top; the graph (tokens across, layers up, edge width = weight, the route to the chosen
token in colour) on the left; on the right what the pointer found (an edge's per-head split, a
node's promoted/suppressed tokens), the "Test by removing it" check of a selected edge, the head
ranking (route weight vs measured removal effect) and, for a model from a run folder, the routes'
weights over training.

A passive view: data in through setters (RoutesResult/RouteGraph-shaped objects: numpy and
strings; no torch, no session), intent out as signals. explorer/controllers/routes.py does the rest.
"""
from __future__ import annotations

import numpy as np
from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QDoubleSpinBox, QHBoxLayout, QLabel, QMenu, QPlainTextEdit, QPushButton, QSizePolicy, QSlider, QSpinBox,
    QSplitter,
    QTabWidget, QToolButton, QVBoxLayout, QWidget,
)

from explorer.views.routes.graph_item import KIND_A, KIND_I, KIND_M, KIND_X, RouteGraphPlot
from explorer.views.routes.side_parts import OverTrainingChart, RankingTable
from explorer.widgets.csv_meta import with_metadata
from explorer.widgets.token_stream import visible_token

RANK_HINT = "For each head into the chosen position: its route share beside the measured effect of removing it."
DETAIL_HINT = "Hover an edge for its heads; click a node for what it writes; click an edge to select it."
SLIDER_STEPS = 100  # the slider moves in hundredths; the spin box takes any value


class RoutesPanel(QWidget):
    promptChanged = Signal(str)
    thresholdChanged = Signal(float)
    positionChanged = Signal(int)  # -1: the last token
    nodeClicked = Signal(int)  # node index of the graph on screen
    removeRequested = Signal(int)  # "Test by removing it" on the selected edge
    rankRequested = Signal()
    exportRequested = Signal(str)  # "png" | "svg" | "csv" | "npz"

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self._graph = None
        self._tokens: list[str] = []
        self._selected = -1
        self.stale = False  # the graph belongs to an earlier prompt (set_stale)

        self.prompt = QPlainTextEdit()
        self.prompt.setPlaceholderText("Type a prompt: the routes to the predicted token update as you type.")
        self.prompt.setTabChangesFocus(True)
        self.prompt.setFixedHeight(56)
        self.prompt.textChanged.connect(lambda: self.promptChanged.emit(self.prompt.toPlainText()))
        # Below the controls, one line across the panel each (issue 39: in a column beside the prompt a
        # 1,000-token prompt's text wrapped to 6 lines and pushed the controls down): what the route
        # explains, then the graph's counts beside the computation's status.
        self.target_label = _info_label()
        self.count_label = _info_label()
        self.status_label = _info_label(Qt.AlignmentFlag.AlignRight)
        self.ablation_badge = QLabel("")
        self.ablation_badge.setObjectName("routesAblation")
        self.ablation_badge.setStyleSheet("color: #dc2626; font-weight: 600;")
        self.ablation_badge.hide()
        top = QHBoxLayout()
        top.addWidget(self.prompt, 1)
        top.addWidget(self.ablation_badge, 0, Qt.AlignmentFlag.AlignTop)
        info = QHBoxLayout()
        info.addWidget(self.count_label, 3)
        info.addWidget(self.status_label, 2)
        self.offer_button = QPushButton("")  # "Use this model's probe prompt: …" (offer_prompt)
        self.offer_button.hide()
        self.offer_button.clicked.connect(lambda: self.set_prompt_text(self._offer))
        self._offer = ""

        layout = QVBoxLayout(self)
        layout.addLayout(top)
        layout.addWidget(self.offer_button, 0, Qt.AlignmentFlag.AlignLeft)
        layout.addLayout(self._controls())
        layout.addWidget(self.target_label)
        layout.addLayout(info)
        splitter = QSplitter(Qt.Orientation.Horizontal)
        self.graph = RouteGraphPlot()
        splitter.addWidget(self.graph)
        splitter.addWidget(self._side())
        splitter.setStretchFactor(0, 3)
        splitter.setStretchFactor(1, 2)
        self.splitter = splitter
        layout.addWidget(splitter, 1)
        self.readout = QLabel(" ")
        self.readout.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        layout.addWidget(self.readout)

        self.graph.edgeHovered.connect(self._on_hover)
        self.graph.edgeClicked.connect(self._on_edge_clicked)
        self.graph.nodeClicked.connect(self.nodeClicked)

    def _controls(self) -> QHBoxLayout:
        self.slider = QSlider(Qt.Orientation.Horizontal)
        self.slider.setRange(1, SLIDER_STEPS - 1)
        self.slider.setValue(4)
        self.slider.setToolTip("Shares at or below the threshold are dropped and the rest renormalised; "
                               "moving it redraws without recomputing")
        self.threshold_box = QDoubleSpinBox()
        self.threshold_box.setRange(0.0, 1.0)
        self.threshold_box.setDecimals(3)
        self.threshold_box.setSingleStep(0.01)
        self.threshold_box.setValue(0.04)
        self.slider.valueChanged.connect(lambda v: self.threshold_box.setValue(v / SLIDER_STEPS))
        self.threshold_box.valueChanged.connect(self._on_threshold)
        self.position_box = QSpinBox()
        self.position_box.setRange(-1, 100_000)
        self.position_box.setSpecialValueText("last")
        self.position_box.setValue(-1)
        self.position_box.setToolTip("The position whose next-token prediction the route explains")
        self.position_box.valueChanged.connect(self.positionChanged)
        self.export_button = QToolButton()
        self.export_button.setText("Export")
        self.export_button.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        menu = QMenu(self.export_button)
        for text, kind in (("Graph as PNG…", "png"), ("Graph as SVG…", "svg"),
                           ("Contributions as CSV…", "csv"), ("Contributions as .npz…", "npz")):
            menu.addAction(text, lambda kind=kind: self.exportRequested.emit(kind))
        self.export_button.setMenu(menu)
        row = QHBoxLayout()
        row.addWidget(QLabel("threshold"))
        row.addWidget(self.slider, 1)
        row.addWidget(self.threshold_box)
        row.addSpacing(12)
        row.addWidget(QLabel("route to token"))
        row.addWidget(self.position_box)
        row.addStretch(1)
        row.addWidget(self.export_button)
        return row

    def _side(self) -> QWidget:
        pane = QWidget()
        box = QVBoxLayout(pane)
        box.setContentsMargins(4, 0, 0, 0)
        self.detail = QLabel(DETAIL_HINT)
        self.detail.setWordWrap(True)
        self.detail.setTextFormat(Qt.TextFormat.RichText)
        self.detail.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.remove_button = QPushButton("Test by removing it")
        self.remove_button.setEnabled(False)
        self.remove_button.setToolTip("Re-run the model without the selected edge's strongest head reading that "
                                      "token into that position; shows the change in the chosen token's log-prob")
        self.remove_button.clicked.connect(lambda: self.removeRequested.emit(self._selected))
        self.test_label = QLabel("")
        self.test_label.setWordWrap(True)
        self.rank_button = QPushButton("Rank heads by removal")
        self.rank_button.setToolTip("For every head into the chosen position, remove the part it reads most "
                                    "(two forwards per head) and compare the measured effect with its route share")
        self.rank_button.clicked.connect(self.rankRequested)
        self.rank_label = QLabel(RANK_HINT)
        self.rank_label.setWordWrap(True)
        self.table = RankingTable()
        self.training_chart = OverTrainingChart()
        self.training_chart.hide()
        box.addWidget(self.detail)
        box.addWidget(self.remove_button)
        box.addWidget(self.test_label)
        ranking = QWidget()
        rank_box = QVBoxLayout(ranking)
        rank_box.setContentsMargins(2, 2, 2, 2)
        rank_box.addWidget(self.rank_button)
        rank_box.addWidget(self.rank_label)
        rank_box.addWidget(self.table, 1)
        self.tabs = QTabWidget()  # one tall part at a time: both fit a 900×600 window
        self.tabs.addTab(ranking, "Heads: route vs removal")
        self.tabs.addTab(self.training_chart, "Over training")
        self.tabs.setTabEnabled(1, False)
        self.tabs.setTabToolTip(1, "Shown for a model from a training run whose probes kept routes")
        box.addWidget(self.tabs, 1)
        return pane

    # -- data in ------------------------------------------------------------------------------------
    def prompt_text(self) -> str:
        return self.prompt.toPlainText()

    def set_prompt_text(self, text: str) -> None:
        if text != self.prompt.toPlainText():
            self.prompt.setPlainText(text)

    def threshold(self) -> float:
        return float(self.threshold_box.value())

    def position(self) -> int:
        return int(self.position_box.value())

    def set_threshold(self, value: float) -> None:
        """Show `value` (the threshold drawn) without asking for a redraw."""
        for w, v in ((self.threshold_box, float(value)), (self.slider, int(round(float(value) * SLIDER_STEPS)))):
            w.blockSignals(True)
            w.setValue(v)
            w.blockSignals(False)

    def set_position(self, value: int) -> None:
        self.position_box.blockSignals(True)
        self.position_box.setValue(int(value))
        self.position_box.blockSignals(False)

    def set_stale(self, prompt: str) -> None:
        """The graph on screen belongs to `prompt`, not to the text now in the box: dimmed and said."""
        self.graph.setOpacity(0.3)
        shown = prompt if len(prompt) <= 40 else prompt[:39] + "…"
        self.target_label.setText(f"<span style='color:#6b7280'>dimmed: the graph of the previous prompt "
                                  f"{shown!r}</span>")
        self.stale = True

    def offer_prompt(self, text: str) -> None:
        """A prompt this model can read (its run's probe prompt), offered on a button; '' hides it."""
        self._offer = text
        shown = text if len(text) <= 50 else text[:49] + "…"
        self.offer_button.setText(f"Use this model's training-run probe prompt: {shown!r}")
        self.offer_button.setVisible(bool(text))

    def set_graph(self, result, graph, *, new_prompt: bool = True) -> None:
        """Draw `graph` (RouteGraph-shaped) of `result` (RoutesResult-shaped)."""
        first = self._graph is None or len(self._tokens) != len(result.tokens)
        self._graph, self._tokens = graph, list(result.tokens)
        self.graph.set_graph(graph, self._tokens, result.n_layer, reset_view=first or new_prompt)
        self._selected = -1
        self.remove_button.setEnabled(False)
        if not self.table.rowCount():  # an "out of date" line belonged to the graph this one replaces
            self.rank_label.setText(RANK_HINT)
        self.graph.setOpacity(1.0)
        self.stale = False
        self.count_label.setText(count_text(graph, len(self._tokens)))
        pos = graph.position
        self.target_label.setText(f"after {visible_token(self._tokens[pos])!r} (position {pos}) → predicts "
                                  f"{visible_token(graph.target_text)!r} (p = {graph.target_prob:.2f})")

    def clear_results(self, reason: str) -> None:
        self._graph, self._tokens, self._selected = None, [], -1
        self.graph.clear_graph()
        self.graph.setOpacity(1.0)
        self.stale = False
        self.table.clear_rows()
        self.count_label.setText("")
        self.target_label.setText("")
        self.detail.setText(reason)
        self.test_label.setText("")
        self.rank_label.setText("")
        self.readout.setText(" ")
        self.remove_button.setEnabled(False)
        self.set_status(reason)

    def set_ablation_badge(self, text: str) -> None:
        """'2 heads ablated' (their edges are gone from the graph), hidden when nothing is."""
        self.ablation_badge.setText(text)
        self.ablation_badge.setToolTip("The routes are computed on the ablated model: an ablated head carries "
                                       "nothing, so its edges vanish")
        self.ablation_badge.setVisible(bool(text))

    def set_block_effect(self, title: str, promoted, suppressed) -> None:
        """What a clicked node writes, read through the unembedding: [(token, logit)] both ways."""
        up = ", ".join(f"{visible_token(t)!r} {v:+.2f}" for t, v in promoted)
        down = ", ".join(f"{visible_token(t)!r} {v:+.2f}" for t, v in suppressed)
        self.detail.setText(f"<b>{title}</b><br>promotes: {up}<br>suppresses: {down}")

    def set_detail(self, text: str) -> None:
        self.detail.setText(text or DETAIL_HINT)

    def set_edge_test(self, text: str) -> None:
        self.test_label.setText(text)

    def set_ranking(self, labels, route, effect, text: str) -> None:
        """The ranked heads (empty: none ranked for what is on screen) and the line above them."""
        self.table.set_rows(labels, route, effect)
        self.rank_label.setText(text)
        if len(labels):
            self.tabs.setCurrentIndex(0)

    def set_ranking_text(self, text: str) -> None:
        self.rank_label.setText(text)

    def set_over_training(self, steps, series: dict, marker_step) -> None:
        """The strongest routes' weights over a run's probes; hidden without any."""
        self.tabs.setTabEnabled(1, bool(series))
        if not series:
            self.training_chart.hide()
            return
        self.training_chart.set_series(steps, series, marker_step)
        self.training_chart.show()
        if not self.table.rowCount():  # nothing ranked yet: the chart is the news
            self.tabs.setCurrentIndex(1)

    def set_status(self, text: str) -> None:
        self.status_label.setText(text)

    def set_error(self, text: str) -> None:
        self.status_label.setText(f"<span style='color:#dc2626'>{text}</span>")

    # -- export (the controller picked the path) ------------------------------------------------------
    def export_image(self, path: str) -> bool:
        """The graph as PNG or SVG (by suffix); SVG through Qt's generator (pyqtgraph's fails on Qt 6)."""
        if not path.lower().endswith(".svg"):
            return self.graph.grab().save(path)
        from PySide6.QtCore import QRect, QSize
        from PySide6.QtGui import QPainter
        from PySide6.QtSvg import QSvgGenerator

        size = self.graph.size()
        generator = QSvgGenerator()
        generator.setFileName(path)
        generator.setSize(QSize(size.width(), size.height()))
        generator.setViewBox(QRect(0, 0, size.width(), size.height()))
        generator.setResolution(self.graph.logicalDpiX())
        generator.setTitle("information-flow routes")
        painter = QPainter(generator)
        try:
            self.graph.render(painter)
        finally:
            painter.end()
        return True

    @staticmethod
    def write_csv(path: str, csv_text: str, meta: dict) -> bool:
        with open(path, "w", encoding="utf-8", newline="") as f:
            f.write(with_metadata(csv_text, meta))
        return True

    # -- internal ------------------------------------------------------------------------------------
    def _on_threshold(self, value: float) -> None:
        steps = int(round(value * SLIDER_STEPS))
        if 1 <= steps < SLIDER_STEPS and self.slider.value() != steps:
            self.slider.blockSignals(True)
            self.slider.setValue(steps)
            self.slider.blockSignals(False)
        self.thresholdChanged.emit(float(value))

    def _on_hover(self, index: int) -> None:
        self.readout.setText(self.edge_text(index) if index >= 0 else " ")

    def _on_edge_clicked(self, index: int) -> None:
        self._selected = index
        self.graph.select_edge(index)
        g = self._graph
        attention = g is not None and 0 <= index < g.n_edges and bool(g.is_attention[index])
        self.remove_button.setEnabled(attention)
        self.detail.setText(self.edge_text(index) if index >= 0 else "")
        self.test_label.setText("" if attention else "Only attention edges (a head reading a token) can be removed.")

    def node_text(self, node: int) -> str:
        g = self._graph
        kind, layer, pos = int(g.node_kind[node]), int(g.node_layer[node]), int(g.node_pos[node])
        tok = visible_token(self._tokens[pos]) if pos < len(self._tokens) else "?"
        what = {KIND_X: "input token", KIND_A: f"layer {layer} after attention", KIND_M: f"layer {layer} MLP",
                KIND_I: f"layer {layer} output"}[kind]
        return f"{what} at {tok!r} ({pos})"

    def edge_text(self, index: int) -> str:
        """'L2 attention: ' the' (5) ← ' cat' (3): 0.231 — H5 0.140 · H0 0.061', or an MLP edge."""
        g = self._graph
        if g is None or not 0 <= index < g.n_edges:
            return ""
        s, d, w = int(g.src[index]), int(g.dst[index]), float(g.weight[index])
        text = f"{self.node_text(d)} ← {self.node_text(s)}: {w:.3f}"
        if g.is_attention[index]:
            heads = np.asarray(g.heads[index], float)
            order = [h for h in np.argsort(-heads) if heads[h] > 0][:6]
            split = "after the threshold: " + " · ".join(f"H{h} {heads[h]:.3f}" for h in order)
            residual = float(g.residual[index])
            if residual > 0:
                split += f" · residual {residual:.3f}"
            text += f" — {split}" if split else ""
        return text


def _info_label(align=Qt.AlignmentFlag.AlignLeft) -> QLabel:
    """A line of text that wraps in the width it is given and never widens the panel."""
    label = QLabel("")
    label.setWordWrap(True)
    label.setAlignment(align | Qt.AlignmentFlag.AlignTop)
    label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
    return label


def count_text(graph, n_tokens: int) -> str:
    """'120 edges above 0.04 · 46 on the route', what a window leaves out, and for an empty route
    the threshold that would show it."""
    text = f"{graph.n_edges} edges above {graph.threshold:g} · {graph.n_route} on the route"
    window = getattr(graph, "window", None)
    if window is not None:
        lo, hi = window
        text += f" · grey edges only for tokens {lo}–{hi - 1}: {n_tokens - (hi - lo)} of {n_tokens} not drawn"
    below = getattr(graph, "route_below", float("nan"))
    if graph.n_route == 0:
        hint = f"below {below:.2f}" if np.isfinite(below) and below > 0 else "lower"
        text += f"<br><b>nothing on the route above {graph.threshold:g}: set the threshold {hint} to see it</b>"
    return text
