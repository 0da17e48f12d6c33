"""The routes graph drawn layer by layer: tokens across, layers up, edge width = weight.

Layout (the LLM Transparency Tool's, after Ferrando & Voita 2024): row 0 holds the input
tokens (X0_j); layer l adds a row for the residual after attention (A{l}_i, y = 2l+1) and one
for the residual after the block (I{l}_i, y = 2l+2), with the MLP (M{l}_i) a small node between
them, a little to the right. Attention edges run from I{l-1}_j (or X0_j) up to A{l}_i.

Edges are grouped by width into a fixed set of curves, created once (explorer/widgets/graph_edges.py
says why: a 32-token GPT-2 graph has thousands of candidate edges, redrawn on every threshold drag).

Passive: takes numpy arrays (any object with RouteGraph's fields), emits what the pointer did.
"""
from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QColor, QFontMetrics

from explorer.views.routes.ticks import short_label, thinned_ticks
from explorer.widgets.graph_edges import draw_buckets, nearest_segment, pointer_in_pixels, segment_ends
from explorer.widgets.token_stream import visible_token

KIND_X, KIND_A, KIND_M, KIND_I = 0, 1, 2, 3
M_OFFSET = 0.32  # the MLP node sits this far right of its position, half a row up
WIDTH_EDGES = (0.0, 0.08, 0.16, 0.3, 0.5, 0.75)  # weight bucket lower bounds
WIDTHS = (0.8, 1.6, 2.6, 3.8, 5.2, 7.0)  # pen width (px) per bucket
ROUTE_COLOUR = QColor("#2563eb")  # the route to the chosen token
OTHER_COLOUR = QColor(140, 140, 140, 110)  # edges above the threshold, off the route
SELECTED_COLOUR = QColor("#dc2626")
NODE_STYLES = {  # style -> (colour, size px, symbol); drawn in this order
    "used": (QColor(150, 150, 150, 150), 5, "o"), "used-mlp": (QColor(150, 150, 150, 150), 5, "s"),
    "route-token": ("#4b5563", 9, "o"), "route-attn": ("#0072B2", 9, "o"), "route-mlp": ("#E69F00", 8, "s"),
}
HOVER_PX = 6.0  # an edge within this many pixels of the pointer is hovered


def node_xy(kind: np.ndarray, layer: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Plot coordinates of nodes given as (kind, layer, position) arrays."""
    kind, layer, pos = (np.asarray(a) for a in (kind, layer, pos))
    x = pos.astype(float) + np.where(kind == KIND_M, M_OFFSET, 0.0)
    y = np.select([kind == KIND_X, kind == KIND_A, kind == KIND_M], [0.0, 2 * layer + 1.0, 2 * layer + 1.5],
                  2 * layer + 2.0)
    return x, y


def row_ticks(n_layer: int) -> list[tuple[float, str]]:
    ticks = [(0.0, "tokens")]
    for layer in range(n_layer):
        ticks += [(2 * layer + 1.0, f"L{layer} attn"), (2 * layer + 2.0, f"L{layer} out")]
    return ticks


class RouteGraphPlot(pg.PlotWidget):
    """Nodes as a scatter, edges as width buckets; `edgeHovered(index or -1)`, `edgeClicked(index)`,
    `nodeClicked(index)` in the graph's own numbering."""

    edgeHovered = Signal(int)
    edgeClicked = Signal(int)
    nodeClicked = Signal(int)

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setMenuEnabled(False)
        self.hideButtons()
        self.getPlotItem().setMouseEnabled(x=True, y=True)
        self.showGrid(x=False, y=True, alpha=0.12)
        self._buckets = {}
        for on_route in (False, True):  # off-route first: the route is drawn on top
            for b, width in enumerate(WIDTHS):
                colour = ROUTE_COLOUR if on_route else OTHER_COLOUR
                item = pg.PlotCurveItem(pen=pg.mkPen(colour, width=width, cap=Qt.PenCapStyle.RoundCap),
                                        antialias=on_route)  # off-route lines are many and grey: fast beats smooth
                self.addItem(item)
                self._buckets[(on_route, b)] = item
        self._selected = pg.PlotCurveItem(pen=pg.mkPen(SELECTED_COLOUR, width=4))
        self.addItem(self._selected)
        self._node_layers = {}  # one scatter per node style: uniform brushes keep setData fast
        for style, (colour, size, symbol) in NODE_STYLES.items():
            item = pg.ScatterPlotItem(pxMode=True, brush=pg.mkBrush(colour), size=size, symbol=symbol, pen=None)
            item.sigClicked.connect(self._on_node_clicked)
            self.addItem(item)
            self._node_layers[style] = item
        self.scene().sigMouseMoved.connect(self._on_mouse_moved)
        self.scene().sigMouseClicked.connect(self._on_scene_clicked)
        self._xy0 = self._xy1 = np.zeros((0, 2))
        self._hovered = -1
        self._node_hit = False
        self._ticks_for = None  # (tokens, n_layer) the axis ticks were set for
        self._labels: list[str] = []  # every token's label (shown thinned: ticks.py)
        self._chosen: int | None = None
        self.getPlotItem().getViewBox().sigXRangeChanged.connect(lambda *_: self._thin_ticks())
        # thinning keeps labels apart; pyqtgraph's own rule would drop a first or last label (the chosen
        # token is often the last) whose text reaches past the axis ends
        self.getAxis("bottom").setStyle(hideOverlappingLabels=False)
        self.shown_ticks: list[tuple[int, str]] = []  # the token labels on the axis now (tests read them)
        self.drawn_edges = 0  # edges drawn now (tests read it)
        self.route_edges = 0

    # -- data in ----------------------------------------------------------------------------------
    def set_graph(self, graph, tokens, n_layer: int, *, reset_view: bool = False) -> None:
        """Draw `graph` (RouteGraph-shaped): every edge above its threshold, the route in colour."""
        x, y = node_xy(graph.node_kind, graph.node_layer, graph.node_pos)
        src, dst, w = np.asarray(graph.src), np.asarray(graph.dst), np.asarray(graph.weight, dtype=float)
        self._xy0, self._xy1 = segment_ends(x, y, src, dst)
        bucket = np.clip(np.searchsorted(WIDTH_EDGES, w, side="right") - 1, 0, len(WIDTHS) - 1)
        route = np.asarray(graph.on_route, dtype=bool)
        draw_buckets(self._buckets, self._xy0, self._xy1, route, bucket)  # keyed (on the route, width bucket)
        self._draw_nodes(graph, x, y, src, dst, route)
        self.drawn_edges, self.route_edges = int(len(src)), int(route.sum())
        self.select_edge(-1)
        self._hovered = -1
        T = len(tokens)
        if (tuple(tokens), n_layer) != self._ticks_for:  # re-laying out the axes costs more than the edges
            self._ticks_for = (tuple(tokens), n_layer)
            self._labels = [short_label(visible_token(t)) for t in tokens]
            self.getAxis("left").setTicks([row_ticks(n_layer)])
        self._chosen = int(graph.position)
        window = getattr(graph, "window", None)
        if reset_view:
            lo, hi = window if window is not None else (0, T)
            right = 0.6 + 0.04 * (hi - lo)  # room for the last (often the chosen) token's label
            self.setXRange(lo - 0.6, max(hi - 1 + right, lo + 0.6), padding=0)
            self.setYRange(-0.5, 2 * n_layer + 0.5, padding=0)
        self._thin_ticks()

    def _thin_ticks(self) -> None:
        """Label every n-th visible token so that no two labels overlap (the chosen one always)."""
        if not getattr(self, "_labels", None):  # resizeEvent comes during the base class's __init__
            return
        (x0, x1), _ = self.getPlotItem().getViewBox().viewRange()
        metrics = QFontMetrics(self.getAxis("bottom").style.get("tickFont") or self.font())
        ticks = thinned_ticks(self._labels, x0, x1, self.getPlotItem().getViewBox().width(), self._chosen,
                              metrics.horizontalAdvance)
        self.getAxis("bottom").setTicks([ticks])
        self.shown_ticks = ticks

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        self._thin_ticks()

    def _draw_nodes(self, graph, x, y, src, dst, route) -> None:
        """Nodes on the route in their kind's colour, other nodes with an edge grey, the rest faint."""
        kind = np.asarray(graph.node_kind)
        used = np.zeros(len(x), dtype=bool)
        used[src] = used[dst] = True
        on_route = np.zeros(len(x), dtype=bool)
        on_route[src[route]] = on_route[dst[route]] = True
        masks = {"route-token": on_route & ((kind == KIND_X) | (kind == KIND_I)), "route-attn": on_route & (kind == KIND_A),
                 "route-mlp": on_route & (kind == KIND_M), "used": used & ~on_route & (kind != KIND_M),
                 "used-mlp": used & ~on_route & (kind == KIND_M)}
        for style, item in self._node_layers.items():
            keep = np.flatnonzero(masks[style])
            item.setData(x=x[keep], y=y[keep], data=keep)

    def clear_graph(self) -> None:
        for item in self._buckets.values():
            item.setData([], [])
        self._selected.setData([], [])
        for item in self._node_layers.values():
            item.setData([])
        self._xy0 = self._xy1 = np.zeros((0, 2))
        self.drawn_edges = self.route_edges = 0
        self.getAxis("bottom").setTicks([[]])
        self._ticks_for, self._labels, self._chosen, self.shown_ticks = None, [], None, []

    def select_edge(self, index: int) -> None:
        """Outline edge `index` (-1: none)."""
        if 0 <= index < len(self._xy0):
            self._selected.setData([self._xy0[index, 0], self._xy1[index, 0]], [self._xy0[index, 1], self._xy1[index, 1]])
        else:
            self._selected.setData([], [])

    # -- pointer ----------------------------------------------------------------------------------
    def edge_at(self, scene_pos) -> int:
        """The edge nearest the pointer within HOVER_PX pixels, or -1."""
        if not len(self._xy0) or not self.sceneBoundingRect().contains(scene_pos):
            return -1
        best, distance = nearest_segment(self._xy0, self._xy1, *pointer_in_pixels(self, scene_pos))
        return best if distance <= HOVER_PX else -1

    def _on_mouse_moved(self, scene_pos) -> None:
        index = self.edge_at(scene_pos)
        if index != self._hovered:
            self._hovered = index
            self.edgeHovered.emit(index)

    def _on_node_clicked(self, _item, points, _event=None) -> None:
        if len(points):
            self._node_hit = True
            self.nodeClicked.emit(int(points[0].data()))

    def _on_scene_clicked(self, event) -> None:
        if self._node_hit:  # the scatter took this click
            self._node_hit = False
            return
        if event.button() != Qt.MouseButton.LeftButton:
            return
        index = self.edge_at(event.scenePos())
        if index >= 0:
            self.edgeClicked.emit(index)
