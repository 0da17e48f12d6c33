"""A signed matrix (layers × heads, layers × positions) as one image with a diverging colour
scale centred on 0: blue pushes the answer down, red pushes it up, white does nothing.

Used for the DLA head map and the four patching maps. One ImageItem created once and
updated with `setImage(..., autoLevels=False, levels=±m)`, row-major, each cell 1 × 1 in
view coordinates (x = column, y = row), so ticks, clicks and marks work in cell units.
Marks (a cross on a cell) show ablated heads, only on cells the matrix has. An empty map
shows nothing at all: no axes, no colour bar (their default ticks meant nothing).
"""
from __future__ import annotations

import math

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QRectF, Qt, Signal
from PySide6.QtGui import QFont, QFontMetrics

from explorer.widgets.plot_title import wrapping_title

DIVERGING = "CET-D1"  # blue – white – red, bundled with pyqtgraph
SEQUENTIAL = "viridis"  # 0 … 1 scores (a head census): faint scores stay readable
MARK_COLOUR = "#111827"
SELECT_COLOUR = "#22d3ee"


class _LabelAxis(pg.AxisItem):
    """Ticks at cell centres with the given labels, every k-th shown, k as small as keeps them
    apart at the axis's current length (measured: the widest label, or a line, plus a gap)."""

    GAP_PX = 4
    _labels: list[str] = []  # resizeEvent can come while AxisItem.__init__ runs
    _min_px, _step = 0, 1

    def __init__(self, orientation: str):
        super().__init__(orientation)
        self.enableAutoSIPrefix(False)
        self.setStyle(hideOverlappingLabels=False)  # thinned here; the edge labels ('H0') may pass the end a little

    def set_labels(self, labels: list[str], min_px: int = 0) -> None:
        """`min_px`: at least this many pixels per shown label."""
        self._labels, self._min_px = list(labels), min_px
        self._fit()

    def label_step(self) -> int:
        return self._step

    def _fit(self) -> None:
        labels, n = self._labels, len(self._labels)
        horizontal = self.orientation in ("top", "bottom")
        length = self.geometry().width() if horizontal else self.geometry().height()
        metrics = QFontMetrics(self.style.get("tickFont") or QFont())
        if horizontal:  # centred neighbours meet at half of each one's width
            widths = [metrics.horizontalAdvance(t) for t in labels]
            size = max(((a + b) / 2 for a, b in zip(widths, widths[1:])), default=max(widths, default=0))
        else:
            size = metrics.height()
        need = max(size + self.GAP_PX, self._min_px)
        step = max(1, math.ceil(need * n / length)) if n and length > 0 else 1
        self._step = step
        major = [(i + 0.5, text) for i, text in enumerate(labels) if i % step == 0]
        minor = [(i + 0.5, "") for i in range(n) if i % step]
        self.setTicks([major, minor])

    def resizeEvent(self, event) -> None:  # noqa: N802 - Qt override
        super().resizeEvent(event)
        self._fit()


class ValueHeatmap(pg.GraphicsLayoutWidget):
    """Passive view. In: `set_matrix`, `set_marks`, `select`. Out: `cellClicked(row, col)`,
    `hoverText(str)`."""

    cellClicked = Signal(int, int)
    hoverText = Signal(str)

    def __init__(self, title: str = "", value_label: str = "value", parent=None, signed: bool = True):
        """`signed` False: values from 0 up on a sequential scale (0 … scale), not ± on a diverging one."""
        super().__init__(parent)
        self._signed = signed
        self._values = np.zeros((0, 0))
        self._rows: list[str] = []
        self._cols: list[str] = []
        self._value_label = value_label
        self._col_px = 56
        self._marks: list[tuple[int, int]] = []  # asked for; drawn where the matrix has the cell
        self.left_axis = _LabelAxis("left")
        self.bottom_axis = _LabelAxis("bottom")
        self.plot = self.addPlot(row=0, col=0, axisItems={"left": self.left_axis, "bottom": self.bottom_axis})
        self.plot.setMenuEnabled(False)
        self.plot.hideButtons()
        self.plot.setMouseEnabled(x=False, y=False)
        self.plot.invertY(True)  # layer 0 on top, as in the attention grid
        wrapping_title(self.plot)  # a long title wraps, never pushing the colour bar out of the widget
        if title:
            self.plot.setTitle(title, size="9pt")
        self.image = pg.ImageItem(axisOrder="row-major")
        self.plot.addItem(self.image)
        self.marks = pg.ScatterPlotItem(symbol="x", size=11, pen=pg.mkPen(MARK_COLOUR, width=1.5),
                                        brush=pg.mkBrush(MARK_COLOUR))
        self.marks.setZValue(5)
        self.plot.addItem(self.marks)
        self.selection = pg.QtWidgets.QGraphicsRectItem()
        self.selection.setPen(pg.mkPen(SELECT_COLOUR, width=2.5, cosmetic=True))
        self.selection.setZValue(10)
        self.selection.hide()
        self.plot.addItem(self.selection)
        self.colorbar = pg.ColorBarItem(values=(-1.0 if signed else 0.0, 1.0),
                                        colorMap=pg.colormap.get(DIVERGING if signed else SEQUENTIAL), label=value_label,
                                        interactive=False, width=12)
        self.colorbar.setImageItem(self.image)
        self.addItem(self.colorbar, row=0, col=1)
        self.scene().sigMouseClicked.connect(self._on_click)
        self.scene().sigMouseMoved.connect(self._on_move)
        self._show_frame(False)

    def _show_frame(self, shown: bool) -> None:
        """Axes and colour bar only around a matrix: on an empty map they are noise."""
        for side in ("left", "bottom"):
            self.plot.showAxis(side, shown)
        # Faded, not hidden: a hidden ColorBarItem crashes the process at exit (PySide6 6.11, pyqtgraph 0.14).
        self.colorbar.setOpacity(1.0 if shown else 0.0)

    def frame_shown(self) -> bool:
        """Whether axes and colour bar are on screen (only around a matrix)."""
        return self.plot.getAxis("bottom").isVisible() and self.colorbar.opacity() > 0

    # -- data in -----------------------------------------------------------------------
    def set_matrix(self, values: np.ndarray, row_labels: list[str], col_labels: list[str],
                   scale: float | None = None, col_px: int = 56) -> None:
        """values (R, C); colour range ±scale (default: ±max |value|, never 0); column
        labels thinned to about one per `col_px` pixels."""
        self._col_px = col_px
        values = np.asarray(values, dtype=np.float64)
        R, C = values.shape
        self._values, self._rows, self._cols = values, list(row_labels), list(col_labels)
        finite = values[np.isfinite(values)]
        m = scale if scale is not None else (float(np.abs(finite).max()) if finite.size else 1.0)
        m = m if m > 0 else 1.0
        low = -m if self._signed else 0.0
        self.colorbar.setLevels(values=(low, m))
        self.image.setImage(values.astype(np.float32), autoLevels=False, levels=(low, m))
        self.image.setRect(QRectF(0, 0, max(C, 1), max(R, 1)))
        self._apply_labels()
        self.plot.vb.setRange(xRange=(0, max(C, 1)), yRange=(0, max(R, 1)), padding=0)
        self._show_frame(bool(R and C))
        self._draw_marks()

    def _apply_labels(self) -> None:
        """The axes thin them to what fits (again on every resize): a column label per `col_px` pixels
        at least, a row label per 16 px."""
        self.left_axis.set_labels(self._rows, min_px=16)
        self.bottom_axis.set_labels(self._cols, min_px=self._col_px)

    def set_marks(self, cells) -> None:
        """A cross on each (row, col) in `cells` (e.g. the ablated heads) that the matrix has:
        kept and drawn when a matrix arrives, never on an empty map."""
        self._marks = [(int(r), int(c)) for r, c in cells]
        self._draw_marks()

    def _draw_marks(self) -> None:
        R, C = self._values.shape
        cells = [(r, c) for r, c in self._marks if 0 <= r < R and 0 <= c < C]
        self.marks.setData(x=[c + 0.5 for _, c in cells], y=[r + 0.5 for r, _ in cells])

    def drawn_marks(self) -> list[tuple[int, int]]:
        """The (row, col) cells crossed on screen (what tests check)."""
        xs, ys = self.marks.getData()
        return [(int(y), int(x)) for x, y in zip(xs, ys)]

    def clear_data(self) -> None:
        """Nothing drawn (not `clear`: GraphicsLayoutWidget's attribute of that name empties the layout)."""
        self._values, self._rows, self._cols = np.zeros((0, 0)), [], []
        self.image.clear()
        self.left_axis.set_labels([])
        self.bottom_axis.set_labels([])
        self._draw_marks()  # none on an empty map; the asked-for marks come back with the next matrix
        self.selection.hide()
        self._show_frame(False)

    @property
    def values(self) -> np.ndarray:
        return self._values

    @property
    def labels(self) -> tuple[list[str], list[str]]:
        return self._rows, self._cols

    def select(self, row: int, col: int) -> None:
        self.selection.setRect(QRectF(col, row, 1, 1))
        self.selection.show()

    # -- export ----------------------------------------------------------------------------
    def export_png(self, path: str) -> bool:
        return self.grab().save(path)

    def csv_text(self) -> str:
        """The matrix with its labels: a header of column labels, one line per row."""
        import csv
        import io

        out = io.StringIO()
        writer = csv.writer(out)
        unique = len(set(self._cols)) == len(self._cols)  # a token may appear twice: then name columns by position too
        writer.writerow([""] + (self._cols if unique else [f"{i} {c}" for i, c in enumerate(self._cols)]))
        for label, row in zip(self._rows, self._values):
            writer.writerow([label] + [f"{v:.6g}" for v in row])
        return out.getvalue()

    # -- mouse -------------------------------------------------------------------------------
    def _cell_at(self, scene_pos) -> tuple[int, int] | None:
        R, C = self._values.shape
        if not R or not self.plot.sceneBoundingRect().contains(scene_pos):
            return None
        p = self.plot.vb.mapSceneToView(scene_pos)
        row, col = math.floor(p.y()), math.floor(p.x())
        return (row, col) if 0 <= row < R and 0 <= col < C else None

    def _on_click(self, event) -> None:
        cell = self._cell_at(event.scenePos())
        if cell is not None and event.button() == Qt.MouseButton.LeftButton:
            self.select(*cell)
            self.cellClicked.emit(*cell)

    def _on_move(self, scene_pos) -> None:
        cell = self._cell_at(scene_pos)
        if cell is not None:
            r, c = cell
            self.hoverText.emit(f"{self._rows[r]} · {self._cols[c]} (column {c}): {self._value_label} "
                                f"{self._values[r, c]:+.4f}")

    def cell_centre(self, row: int, col: int):
        """Scene position of a cell's centre (tests click there)."""
        return self.plot.vb.mapViewToScene(pg.Point(col + 0.5, row + 0.5))
