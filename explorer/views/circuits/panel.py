"""The Circuits panel: which transcoder features caused the model's next prediction.

Top: the transcoders — width, k, tokens, corpus, Train transcoders, Over training, Cancel, progress —
and their metrics with what each means. Then the prompt, the pruning thresholds and Export. Middle: the
pruned attribution graph (graph_plot.py) beside the clicked node (node_detail.py: Clamp / Ablate, its
edges, a feature's contexts and logits). Under the graph: its size, how much of the influence the
transcoders miss, and for a run walked over training when the circuit formed.

A passive view (explorer/views/circuits/protocol.py): numpy and plain values in, intent out;
explorer/controllers/circuits.py does the rest.
"""
from __future__ import annotations

import csv
import io
from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QDoubleSpinBox, QHBoxLayout, QLabel, QSplitter, QVBoxLayout, QWidget

from explorer.views.circuits.graph_plot import FEATURE, TOKEN, CircuitGraphPlot
from explorer.views.circuits.node_detail import NodeDetail
from explorer.views.circuits.train_form import TrainForm
from explorer.widgets.controls import show_text
from explorer.widgets.csv_meta import with_metadata
from explorer.widgets.menu_button import menu_button
from explorer.widgets.prompt_box import PromptBox
from explorer.widgets.token_stream import visible_token

ERROR_COLOUR = "#dc2626"
KIND_WORDS = ("feature", "error", "token", "logit")


def _threshold(value: float, tip: str) -> QDoubleSpinBox:
    box = QDoubleSpinBox()
    box.setRange(0.0, 1.0)
    box.setDecimals(2)
    box.setSingleStep(0.01)
    box.setValue(value)
    box.setToolTip(tip)
    box.setKeyboardTracking(False)  # a value typed digit by digit re-prunes once
    return box


class CircuitsPanel(QWidget):
    trainRequested = Signal(dict)
    walkRequested = Signal(int)
    cancelRequested = Signal()
    browseRequested = Signal()
    promptChanged = Signal(str)
    thresholdsChanged = Signal(float, float)
    nodeSelected = Signal(int)  # node index in the full graph
    editRequested = Signal(int, int, float)  # layer, feature, value
    resetEditsRequested = Signal()
    exportRequested = Signal(str)  # "graph-json" | "edges-csv" | "png"

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.form = TrainForm()
        self.metrics = QLabel("")
        self.metrics.setWordWrap(True)
        self.metrics.setTextFormat(Qt.TextFormat.RichText)
        self.prompt = PromptBox("Type a prompt: the graph explains the model's prediction of the token after it",
                                height=self.fontMetrics().lineSpacing() * 2 + 14)
        self.node_threshold = _threshold(0.8, "Keep the nodes that together carry this share of the influence on the "
                                              "logits (circuit-tracer's node threshold)")
        self.edge_threshold = _threshold(0.98, "Keep the edges that together carry this share of the kept nodes' "
                                               "influence (circuit-tracer's edge threshold)")
        self.export_button = menu_button("Export", [
            ("Graph as circuit-tracer JSON…", lambda: self.exportRequested.emit("graph-json")),
            ("Kept edges as CSV…", lambda: self.exportRequested.emit("edges-csv")),
            ("Graph as PNG…", lambda: self.exportRequested.emit("png"))])
        side = QHBoxLayout()
        side.addWidget(QLabel("nodes"))
        side.addWidget(self.node_threshold)
        side.addWidget(QLabel("edges"))
        side.addWidget(self.edge_threshold)
        side.addWidget(self.export_button)
        prompt_line = QHBoxLayout()
        prompt_line.addWidget(self.prompt, 1)
        prompt_line.addLayout(side)
        self.status = QLabel("")
        self.status.setWordWrap(True)
        self.status.setTextFormat(Qt.TextFormat.RichText)
        self.plot = CircuitGraphPlot()
        self.plot.setMinimumSize(360, 200)
        self.detail = NodeDetail()
        self.detail.setMinimumWidth(260)
        self.sides = QSplitter(Qt.Orientation.Horizontal)
        self.sides.addWidget(self.plot)
        self.sides.addWidget(self.detail)
        self.sides.setStretchFactor(0, 3)
        self.sides.setStretchFactor(1, 2)
        self.sides.setChildrenCollapsible(False)
        self.info = QLabel("")
        self.info.setWordWrap(True)
        self.info.setTextFormat(Qt.TextFormat.RichText)
        layout = QVBoxLayout(self)
        layout.addWidget(self.form)
        layout.addWidget(self.metrics)
        layout.addLayout(prompt_line)
        layout.addWidget(self.status)
        layout.addWidget(self.sides, 1)
        layout.addWidget(self.info)
        self._graph = None
        for name in ("trainRequested", "walkRequested", "cancelRequested", "browseRequested"):
            getattr(self.form, name).connect(getattr(self, name))
        self.prompt.edited.connect(self.promptChanged)
        for box in (self.node_threshold, self.edge_threshold):
            box.valueChanged.connect(lambda _v: self.thresholdsChanged.emit(*self.thresholds()))
        self.plot.nodeClicked.connect(self.nodeSelected)
        self.detail.editRequested.connect(self.editRequested)
        self.detail.resetEditsRequested.connect(self.resetEditsRequested)
        self.detail.nodeRequested.connect(self._node_requested)
        for label in (self.metrics, self.status, self.info):
            show_text(label, "")

    # -- the transcoders ------------------------------------------------------------------------------
    def set_corpus_choices(self, run_available: bool, file_path: str) -> None:
        self.form.set_corpus_choices(run_available, file_path)

    def set_walk_available(self, available: bool) -> None:
        self.form.set_walk_available(available)

    def set_training(self, running: bool) -> None:
        self.form.set_training(running)

    def set_progress(self, done: int, total: int, text: str) -> None:
        self.form.set_progress(done, total, text)

    def set_metrics(self, html: str) -> None:
        show_text(self.metrics, html)

    # -- lines of text ----------------------------------------------------------------------------------
    def set_status(self, text: str) -> None:
        show_text(self.status, text)

    def set_error(self, text: str) -> None:
        show_text(self.status, f"<span style='color:{ERROR_COLOUR}'>{text}</span>" if text else "")

    def set_graph_info(self, html: str) -> None:
        show_text(self.info, html)

    # -- the prompt and thresholds ------------------------------------------------------------------------
    def prompt_text(self) -> str:
        return self.prompt.toPlainText()

    def set_prompt_text(self, text: str) -> None:
        self.prompt.set_text(text)

    def thresholds(self) -> tuple[float, float]:
        return float(self.node_threshold.value()), float(self.edge_threshold.value())

    # -- the graph -------------------------------------------------------------------------------------
    def set_graph(self, graph, clamped=()) -> None:
        """Draw `graph` (CircuitGraph-shaped: numpy arrays of the kept nodes and edges); `clamped`:
        (layer, feature) pairs held, outlined. The node shown stays selected when it is still drawn."""
        self._graph = graph
        self.plot.set_graph(graph, clamped)

    def clear_graph(self, reason: str) -> None:
        """Nothing half drawn: the graph, the node and the lines under it go, `reason` says why."""
        self._graph = None
        self.plot.clear_graph()
        self.detail.clear_node(reason)
        self.set_graph_info("")

    def select_node(self, kept_index: int) -> None:
        """Ring a drawn node (-1: none), emitting nothing."""
        self.plot.select(kept_index)

    def set_node(self, title: str, feature, contexts: list, promoted: list, suppressed: list, incoming: list,
                 outgoing: list) -> None:
        """The clicked node; `feature` (layer, index) for a transcoder feature, else None."""
        self.detail.set_node(title, feature, contexts, promoted, suppressed, incoming, outgoing)

    def clear_node(self, reason: str) -> None:
        self.detail.clear_node(reason)
        self.plot.select(-1)

    def set_edits(self, text: str, clamped) -> None:
        """The feature edits in force, in words ('' for none), and the (layer, feature) pairs to outline."""
        self.detail.set_edits(text)
        self.plot.set_clamped(clamped)

    # -- export (the controller picked the path) --------------------------------------------------------------
    def export_edges_csv(self, path: str, meta: dict) -> bool:
        """One row per kept edge (source, target, weight and each end's kind, layer, position, feature);
        False when no graph is drawn. An unwritable path raises OSError."""
        g = self._graph
        if g is None:
            return False
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        ends = ("kind", "layer", "position", "feature", "label")
        writer.writerow(["weight", *(f"source_{e}" for e in ends), *(f"target_{e}" for e in ends)])
        order = sorted(range(len(g.edge_weight)), key=lambda e: -abs(float(g.edge_weight[e])))
        for e in order:
            writer.writerow([f"{float(g.edge_weight[e]):.6g}", *self._end(g, int(g.edge_src[e])),
                             *self._end(g, int(g.edge_dst[e]))])
        Path(path).write_text(with_metadata(out.getvalue(), meta), encoding="utf-8")
        return True

    def export_image(self, path: str) -> bool:
        if self._graph is None:
            return False
        return bool(self.plot.grab().save(path))

    # -- internal ----------------------------------------------------------------------------------------
    @staticmethod
    def _end(g, i: int) -> list:
        kind = int(g.kind[i])
        label = visible_token(g.tokens[int(g.position[i])]) if kind == TOKEN else str(g.labels[i])
        return [KIND_WORDS[kind], int(g.layer[i]), int(g.position[i]), int(g.feature[i]) if kind == FEATURE else "",
                label]

    def _node_requested(self, kept_index: int) -> None:
        if self._graph is not None and 0 <= kept_index < len(self._graph.node_ids):
            self.plot.select(kept_index)
            self.nodeSelected.emit(int(self._graph.node_ids[kept_index]))
