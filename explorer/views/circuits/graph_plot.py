"""The pruned attribution graph, drawn: token positions left to right, the embeddings at the bottom,
each layer's transcoder features (and its error node) a row above the last, the logits on top.

Layout. A pruned graph's features crowd at a few positions (most often the last ones, next to the
prediction) while most positions keep only their token node. So the x axis is not uniform: a position
with features or errors gets FEATURE_COL units per column of nodes it needs, a position with only its
token TOKEN_COL; several nodes in one (layer, position) cell are set in a small grid (at most CELL_ROWS
high). The logits, which all read the last position, stand side by side on the top row ending above it,
the most probable at the right. A node's size grows with its influence on the logits (square root, so a
node with a quarter of the largest influence is half as large); edges are coloured by sign (orange adds,
blue takes away) and grouped into width buckets by |weight| against the largest drawn, so a redraw is a
few setData calls (widgets/graph_edges.py, shared with the routes graph). Tokens are named on the bottom
axis, thinned so labels never overlap (the last position always named); logits above their nodes
("'u' 41%"); features beside their nodes ("L1 #421"), the most influential first, each where it overlaps
no node or label already placed and stays inside the plot.
Every node and edge says what it is on hover.

Passive: takes any object with CircuitGraph's fields (numpy arrays and plain values), emits
`nodeClicked(node id in the full graph)`.
"""
from __future__ import annotations

import math

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QPoint, QRectF, Qt, Signal
from PySide6.QtGui import QColor, QCursor, QFont, QFontMetrics
from PySide6.QtWidgets import QToolTip

from explorer.views.routes.ticks import GAP_PX, short_label
from explorer.widgets.graph_edges import draw_buckets, nearest_segment, pointer_in_pixels, segment_ends
from explorer.widgets.token_stream import visible_token

FEATURE, ERROR, TOKEN, LOGIT = 0, 1, 2, 3  # explorer/session/circuits/results.py's KIND_*
CELL_ROWS = 4  # nodes stacked in one (layer, position) cell before a new column starts
CELL_DY = 0.19  # their vertical spacing, in rows
FEATURE_COL, TOKEN_COL = 2.0, 0.3  # x units: a column of feature nodes, a position with only its token
LOGIT_DX = 2.0  # between two logit nodes
WIDTH_SHARES = (0.0, 0.1, 0.25, 0.5, 0.75)  # |weight| / the largest drawn: bucket lower bounds
WIDTHS = (0.7, 1.4, 2.4, 3.6, 5.0)  # pen width (px) per bucket
POSITIVE, NEGATIVE = QColor(230, 140, 20), QColor(37, 99, 235)
EDGE_ALPHA = (60, 100, 150, 190, 230)
NODE_STYLES = {  # kind -> (brush, symbol)
    FEATURE: (QColor("#7c3aed"), "o"), ERROR: (QColor(150, 150, 150), "d"), TOKEN: (QColor("#374151"), "s"),
    LOGIT: (QColor("#059669"), "t1"),
}
SIZE_MIN, SIZE_MAX = 6.0, 22.0  # node diameter (px) from no influence to the largest
CLAMPED_COLOUR = QColor("#dc2626")
SELECTED_COLOUR = QColor("#f59e0b")
HOVER_PX = 6.0


def layout(kind: np.ndarray, layer: np.ndarray, position: np.ndarray, n_layers: int, n_pos: int
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(x, y) of each node and the x of each position's centre (n_pos,) (see the module docstring)."""
    kind, layer, position = (np.asarray(a) for a in (kind, layer, position))
    y = np.where(kind == TOKEN, 0.0, np.where(kind == LOGIT, n_layers + 1.0, layer + 1.0))
    inner = np.flatnonzero((kind == FEATURE) | (kind == ERROR))
    cells: dict[tuple[int, int], list[int]] = {}
    for i in inner:
        cells.setdefault((int(layer[i]), int(position[i])), []).append(int(i))
    columns = np.zeros(max(n_pos, 1))
    for (_layer, pos), members in cells.items():
        columns[pos] = max(columns[pos], math.ceil(len(members) / CELL_ROWS))
    widths = np.where(columns > 0, columns * FEATURE_COL, TOKEN_COL)
    centres = np.cumsum(widths) - widths / 2
    x = centres[np.clip(position, 0, len(centres) - 1)].astype(float)
    for members in cells.values():
        m = len(members)
        rows = min(m, CELL_ROWS)
        cols = math.ceil(m / rows)
        for j, i in enumerate(members):
            c, r = divmod(j, rows)
            x[i] += (c - (cols - 1) / 2) * FEATURE_COL
            y[i] += ((rows - 1) / 2 - r) * CELL_DY
    logits = np.flatnonzero(kind == LOGIT)
    if len(logits):  # side by side, ending above the last position, the most probable (first) at the right
        x[logits] = centres[-1] - np.arange(len(logits), dtype=float) * LOGIT_DX
    return x, y, centres[:n_pos]


def thin_labels(centres: np.ndarray, widths_px: np.ndarray, px_per_unit: float, first: int) -> list[int]:
    """Indices of the labels to draw, centred at `centres` (units) with widths in pixels: `first` always,
    then from the right every one that keeps GAP_PX from those already kept."""
    kept: list[tuple[float, float]] = []
    out = []
    for i in [first] + [j for j in range(len(centres) - 1, -1, -1) if j != first]:
        c = centres[i] * px_per_unit
        lo, hi = c - widths_px[i] / 2 - GAP_PX / 2, c + widths_px[i] / 2 + GAP_PX / 2
        if all(hi <= a or lo >= b for a, b in kept):
            kept.append((lo, hi))
            out.append(i)
    return sorted(out)


def row_ticks(n_layers: int) -> list[tuple[float, str]]:
    return [(0.0, "tokens")] + [(layer + 1.0, f"L{layer}") for layer in range(n_layers)] + [(n_layers + 1.0, "logits")]


class CircuitGraphPlot(pg.PlotWidget):
    nodeClicked = Signal(int)  # the node's index in the full graph

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setMenuEnabled(False)
        self.hideButtons()
        self.showGrid(x=False, y=True, alpha=0.1)
        self.getAxis("bottom").setStyle(hideOverlappingLabels=False)
        self._buckets = {}
        for sign in (1, -1):
            for b, width in enumerate(WIDTHS):
                colour = QColor(POSITIVE if sign > 0 else NEGATIVE)
                colour.setAlpha(EDGE_ALPHA[b])
                item = pg.PlotCurveItem(pen=pg.mkPen(colour, width=width, cap=Qt.PenCapStyle.RoundCap), antialias=True)
                self.addItem(item)
                self._buckets[(sign, b)] = item
        self._rings = pg.ScatterPlotItem(pxMode=True, brush=None, symbol="o")
        self.addItem(self._rings)
        self._nodes = pg.ScatterPlotItem(pxMode=True, pen=pg.mkPen(255, 255, 255, 160, width=0.8))
        self._nodes.sigClicked.connect(self._on_node_clicked)
        self.addItem(self._nodes)
        self._texts: list[pg.TextItem] = []
        self.scene().sigMouseMoved.connect(self._on_mouse_moved)
        self.getPlotItem().getViewBox().sigRangeChanged.connect(lambda *_: self._relabel())
        self._graph = None
        self._x = self._y = self._sizes = self._centres = np.zeros(0)
        self._xy0 = self._xy1 = np.zeros((0, 2))
        self._edges = (np.zeros(0, int), np.zeros(0, int), np.zeros(0))
        self._long: list[str] = []
        self._token_labels: list[str] = []
        self._clamped: set = set()
        self._selected = -1  # kept index
        self.shown_ticks: list[tuple[int, str]] = []  # tests read these
        self.feature_labels: list[str] = []
        self.hover_text = ""
        self.drawn_edges = 0

    # -- data in ----------------------------------------------------------------------------------
    def set_graph(self, graph, clamped=()) -> None:
        """Draw `graph` (CircuitGraph-shaped); `clamped`: (layer, feature) pairs held, outlined in red."""
        self._graph, self._clamped = graph, {tuple(c) for c in clamped}
        kind = np.asarray(graph.kind)
        T = len(graph.tokens)
        self._x, self._y, self._centres = layout(kind, graph.layer, graph.position, graph.n_layers, T)
        influence = np.clip(np.asarray(graph.influence, dtype=float), 0.0, None)
        top = influence.max() if influence.size and influence.max() > 0 else 1.0
        self._sizes = SIZE_MIN + (SIZE_MAX - SIZE_MIN) * np.sqrt(influence / top)
        self._long = [self._long_label(i) for i in range(len(kind))]
        self._draw_edges(np.asarray(graph.edge_src), np.asarray(graph.edge_dst), np.asarray(graph.edge_weight, float))
        self._draw_nodes()
        self._token_labels = [short_label(visible_token(t)) for t in graph.tokens]
        self.getAxis("left").setTicks([row_ticks(graph.n_layers)])
        right = float(self._centres[-1]) + FEATURE_COL if T else 1.0
        left = min(-TOKEN_COL, float(self._x.min()) - FEATURE_COL / 2) if len(self._x) else -TOKEN_COL
        box = self.getPlotItem().getViewBox()
        before = box.viewRange()
        self.setRange(xRange=(left, right + 0.12 * (right - left)),  # room for the last labels
                      yRange=(-0.6, graph.n_layers + 1.7), padding=0)
        if box.viewRange() == before:  # a new range relabels through sigRangeChanged; the same one does not
            self._relabel()

    def set_clamped(self, clamped) -> None:
        self._clamped = {tuple(c) for c in clamped}
        if self._graph is not None:
            self._draw_nodes()

    def select(self, kept_index: int) -> None:
        """Ring node `kept_index` (-1: none)."""
        self._selected = int(kept_index)
        if self._graph is not None:
            self._draw_nodes()

    def clear_graph(self) -> None:
        for item in self._buckets.values():
            item.setData([], [])
        self._nodes.setData([])
        self._rings.setData([])
        for text in self._texts:
            self.removeItem(text)
        self._texts, self.feature_labels = [], []
        self._graph, self._selected = None, -1
        self._xy0 = self._xy1 = np.zeros((0, 2))
        self._token_labels, self.shown_ticks, self.drawn_edges = [], [], 0
        self.getAxis("bottom").setTicks([[]])
        self.getAxis("left").setTicks([[]])

    # -- drawing ----------------------------------------------------------------------------------
    def _draw_edges(self, src, dst, weight) -> None:
        self._xy0, self._xy1 = segment_ends(self._x, self._y, src, dst)
        self._edges = (src, dst, weight)
        top = np.abs(weight).max() if len(weight) else 1.0
        share = np.abs(weight) / (top if top > 0 else 1.0)
        bucket = np.clip(np.searchsorted(WIDTH_SHARES, share, side="right") - 1, 0, len(WIDTHS) - 1)
        draw_buckets(self._buckets, self._xy0, self._xy1, np.where(weight >= 0, 1, -1), bucket)  # keyed (sign, bucket)
        self.drawn_edges = int(len(src))

    def _draw_nodes(self) -> None:
        g = self._graph
        kind = np.asarray(g.kind)
        order = np.argsort(self._sizes)[::-1]  # large first: small nodes stay clickable on top
        spots = [{"pos": (self._x[i], self._y[i]), "size": self._sizes[i], "symbol": NODE_STYLES[int(kind[i])][1],
                  "brush": pg.mkBrush(NODE_STYLES[int(kind[i])][0]), "data": int(i)} for i in order]
        self._nodes.setData(spots)
        rings = []
        for i in range(len(kind)):
            key = (int(g.layer[i]), int(g.feature[i]))
            if kind[i] == FEATURE and key in self._clamped:
                rings.append({"pos": (self._x[i], self._y[i]), "size": self._sizes[i] + 7,
                              "pen": pg.mkPen(CLAMPED_COLOUR, width=2.2), "brush": None})
            if i == self._selected:
                rings.append({"pos": (self._x[i], self._y[i]), "size": self._sizes[i] + 11,
                              "pen": pg.mkPen(SELECTED_COLOUR, width=2.5), "brush": None})
        self._rings.setData(rings)

    def _relabel(self) -> None:
        """Token ticks and node labels for the pixels the plot has now (called on every resize and range)."""
        if getattr(self, "_graph", None) is None:
            return
        self._thin_ticks()
        self._draw_texts()

    def _units_per_px(self) -> tuple[float, float]:
        px, py = self.getPlotItem().getViewBox().viewPixelSize()
        return max(px, 1e-9), max(py, 1e-9)

    def _draw_texts(self) -> None:
        for text in self._texts:
            self.removeItem(text)
        self._texts, self.feature_labels = [], []
        g = self._graph
        kind = np.asarray(g.kind)
        font = self._label_font()
        metrics = QFontMetrics(font)
        ux, uy = self._units_per_px()
        placed = [QRectF(self._x[i] / ux - self._sizes[i] / 2, self._y[i] / uy - self._sizes[i] / 2, self._sizes[i],
                         self._sizes[i]) for i in range(len(kind))]  # in pixels (x right, y up): nodes, then labels

        def place(i: int, text: str, dx_px: float, dy_px: float, anchor_x: float) -> bool:
            """Keep the label whose anchor point is `anchor_x` of its width (0 left, 0.5 centre, 1 right)
            at (dx, dy) pixels from node i, if it overlaps nothing placed."""
            w, h = metrics.horizontalAdvance(text) + 2, metrics.height()
            x, y = self._x[i] / ux + dx_px - anchor_x * w, self._y[i] / uy + dy_px - h / 2
            rect = QRectF(x, y, w, h)
            if rect.left() < x_lo or rect.right() > x_hi or any(rect.intersects(r) for r in placed):
                return False
            placed.append(rect)
            return True

        (x0, x1), _y = self.getPlotItem().getViewBox().viewRange()
        x_lo, x_hi = x0 / ux, x1 / ux  # a label must stay inside the plot, not run off its edge
        line = metrics.height()
        for i in np.flatnonzero(kind == LOGIT):  # above their nodes, the most probable first; a second line if crowded
            text = str(g.labels[i])
            for up in (self._sizes[i] / 2 + 2, self._sizes[i] / 2 + 2 + line):
                if place(i, text, 0, up + line / 2, 0.5):
                    self._add_text(i, text, (0.5, 1.0), "#047857", dy_px=up, font=font)
                    break
        features = np.flatnonzero(kind == FEATURE)
        for i in features[np.argsort(-np.asarray(g.influence)[features], kind="stable")]:
            text, gap = str(g.labels[i]), self._sizes[i] / 2 + 2
            for dx, anchor in ((gap, (0.0, 0.5)), (-gap, (1.0, 0.5))):  # its right, else its left
                if place(i, text, dx, 0, anchor[0]):
                    self._add_text(i, text, anchor, "#5b21b6", dx_px=dx, font=font)
                    self.feature_labels.append(text)
                    break

    def _label_font(self) -> QFont:
        font = QFont(self.font())
        font.setPointSizeF(max(7.0, font.pointSizeF() * 0.85))
        return font

    def _add_text(self, i: int, text: str, anchor, colour: str, *, dx_px: float = 0.0, dy_px: float = 0.0,
                  font=None) -> None:
        item = pg.TextItem(text, color=colour, anchor=anchor)
        item.setFont(font or self._label_font())
        ux, uy = self._units_per_px()
        item.setPos(float(self._x[i] + dx_px * ux), float(self._y[i] + dy_px * uy))
        self.addItem(item)
        self._texts.append(item)

    def _thin_ticks(self) -> None:
        if not getattr(self, "_token_labels", None):
            return
        metrics = QFontMetrics(self.getAxis("bottom").style.get("tickFont") or self.font())
        widths = np.array([metrics.horizontalAdvance(t) for t in self._token_labels], dtype=float)
        ux, _uy = self._units_per_px()
        keep = thin_labels(self._centres, widths, 1.0 / ux, len(self._token_labels) - 1)
        ticks = [(float(self._centres[i]), self._token_labels[i]) for i in keep]
        self.getAxis("bottom").setTicks([ticks])
        self.shown_ticks = [(i, self._token_labels[i]) for i in keep]

    def resizeEvent(self, event) -> None:  # noqa: N802
        super().resizeEvent(event)
        self._relabel()

    # -- pointer ----------------------------------------------------------------------------------
    def _long_label(self, i: int) -> str:
        g = self._graph
        kind = int(g.kind[i])
        value = float(g.value[i])
        where = f"@{int(g.position[i])} ({visible_token(g.tokens[int(g.position[i])])!r})"
        if kind == FEATURE:
            return f"{g.labels[i]} {where} · activation {value:.3g} · influence {float(g.influence[i]):.3g}"
        if kind == ERROR:
            return f"error of layer {int(g.layer[i])}'s transcoder {where} · norm {value:.3g}"
        if kind == TOKEN:
            return f"token {where}"
        return f"logit {str(g.labels[i])}"

    def text_at(self, scene_pos) -> str:
        """What is under the pointer: a node's description, else an edge's ends and weight, else ''."""
        if self._graph is None or not self.sceneBoundingRect().contains(scene_pos):
            return ""
        q, scale = pointer_in_pixels(self, scene_pos)
        nodes = np.stack([self._x, self._y], axis=1) * scale
        if len(nodes):
            d = np.hypot(*(nodes - q).T)
            best = int(np.argmin(d))
            if d[best] <= self._sizes[best] / 2 + 2:
                return self._long[best]
        if not len(self._xy0):
            return ""
        best, distance = nearest_segment(self._xy0, self._xy1, q, scale)
        return self.edge_text(best) if distance <= HOVER_PX else ""

    def edge_text(self, e: int) -> str:
        src, dst, weight = self._edges
        g = self._graph

        def short(i):
            i = int(i)
            if int(g.kind[i]) == TOKEN:
                return f"tok {visible_token(g.tokens[int(g.position[i])])!r} @{int(g.position[i])}"
            if int(g.kind[i]) == LOGIT:
                return f"logit {str(g.labels[i])}"
            return f"{g.labels[i]} @{int(g.position[i])}"

        return f"{short(src[e])} → {short(dst[e])}: weight {float(weight[e]):+.3g}"

    def _on_mouse_moved(self, scene_pos) -> None:
        text = self.text_at(scene_pos)
        if text != self.hover_text:
            self.hover_text = text
            if text:
                QToolTip.showText(QCursor.pos() + QPoint(12, 12), text, self)
            else:
                QToolTip.hideText()

    def _on_node_clicked(self, _item, points, _event=None) -> None:
        if len(points) and self._graph is not None:
            i = int(points[0].data())
            self.select(i)
            self.nodeClicked.emit(int(self._graph.node_ids[i]))
