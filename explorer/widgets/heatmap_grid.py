"""Every layer × head attention map in ONE pyqtgraph view, plus the per-head summary
columns and the logit-lens column, all sharing the grid's rows.

Why one mosaic image: GPT-2 XL has 48 × 25 = 1200 heads; 1200 plot widgets (or even 1200
ImageItems) make every repaint crawl. Here the thumbnails (L, nh, t, t) are laid out as a
single (L·t, nh·t) array and shown by one ImageItem scaled so that each tile is 1 × 1 in
view coordinates (x = head, y = layer): ticks, clicks and the linked summary/lens columns
all work in those units whatever t is. A repaint is one numpy transpose and one
`setImage(..., autoLevels=False, levels=...)`.

The masked (future) half of each tile is covered by a grey staircase (one path for all
tiles, rebuilt only when the tile layout changes), so the causal triangle reads at a glance
and is not confused with "weight ≈ 0". Not NaN pixels: pyqtgraph finds and blanks NaNs
pixel by pixel on every new image (~8 ms for half a million of them).
"""
from __future__ import annotations

import math

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QRectF, Qt, Signal
from PySide6.QtGui import QColor, QFont, QFontMetrics, QPainterPath
from PySide6.QtWidgets import QGraphicsPathItem, QGraphicsRectItem

from explorer.widgets.formatting import format_prob
from explorer.widgets.grid_parts import (ABLATED_COLOUR, GRID_COLORMAP, LOG_FLOOR, MASKED_COLOUR, SELECT_COLOUR,  # noqa: F401
                         STATS_COLORMAP, ColumnAxis, OpaqueImageItem, causal_mask, display_levels,
                         future_mask_path, mosaic, to_display)

STATS = (("entropy", "entropy"), ("prev_token", "prev"), ("first_token", "first"), ("induction", "induct."))
COMPACT_BELOW_PX = 620  # narrower than this, the side columns slim down
STAT_PX = {False: 48, True: 28}  # a summary column's width, by compactness
LENS_PX = {False: 140, True: 120}  # the lens column: a 5-character token and its probability, even compact


def column_title(plot: pg.PlotItem, title: str, upright: bool) -> None:
    """A summary column's title: across it when the column is wide; turned upright in a narrow
    one, so that it stays the whole word (at 900 px the columns read 'H' and '1st')."""
    plot.setTitle(title, size="8pt" if upright else "9pt")
    label = plot.titleLabel
    label.setAngle(-90 if upright else 0)
    height = math.ceil(label.itemRect().height()) + 4 if upright else 30  # 30: pyqtgraph's title row
    label.setMaximumHeight(height)
    plot.layout.setRowFixedHeight(0, height)


class HeatmapGrid(pg.GraphicsLayoutWidget):
    """Passive view. In: `set_data`, `set_log`, `select`, `set_ablated`. Out:
    `headSelected(layer, head)` on click or arrow keys, `ablateToggled(layer, head)` on
    Shift+click, `hoverText(str)` describing what is under the mouse."""

    headSelected = Signal(int, int)
    ablateToggled = Signal(int, int)
    hoverText = Signal(str)
    _built = False

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setFocusPolicy(Qt.FocusPolicy.StrongFocus)
        self.ci.layout.setSpacing(4)
        self._L = self._nh = self._t = 0
        self._thumbs = np.zeros((0, 0, 0, 0), np.float32)
        self._mosaic = np.zeros((0, 0), np.float32)
        self._bin_labels: list[str] = []
        self._stats: dict[str, np.ndarray] = {}
        self._census: np.ndarray | None = None  # (L, nh) induction scores of the head census
        self._lens: tuple = ((), np.zeros(0))
        self._log = False
        self._compact = False
        self.lens_label_step = 1
        self.selected: tuple[int, int] | None = None

        self._build_grid_plot()
        self.colorbar = pg.ColorBarItem(values=display_levels(False), colorMap=pg.colormap.get(GRID_COLORMAP),
                                        label="attention weight", interactive=False, width=12)
        self.colorbar.setImageItem(self.image)
        self.addItem(self.colorbar, row=0, col=1)

        self._build_stat_columns()
        self._build_lens_column()

        self.scene().sigMouseClicked.connect(self._on_click)
        self.scene().sigMouseMoved.connect(self._on_move)
        self._built = True
        self.plot.vb.sigRangeChanged.connect(lambda *_: self._fit_lens_texts())  # a resize, the aspect lock

    def _build_grid_plot(self) -> None:
        """The tiles' plot: layer and head axes, the grey backdrop and staircase of the masked half,
        the tile separators, the selection frame and the ablation crosses, in drawing order."""
        self.left_axis = ColumnAxis("left", "L")
        self.top_axis = ColumnAxis("top", "H")
        self.plot = self.addPlot(row=0, col=0, axisItems={"left": self.left_axis, "top": self.top_axis})
        self._plain(self.plot)
        self.plot.showAxis("top")
        self.plot.hideAxis("bottom")
        self.plot.setLabel("left", "layer")
        self.plot.setLabel("top", "head")
        self.plot.setAspectLocked(True)  # square tiles: a pattern reads the same in every cell
        self.backdrop = QGraphicsRectItem()  # seen through the NaN (future) half of each tile
        self.backdrop.setBrush(QColor(MASKED_COLOUR))
        self.backdrop.setPen(pg.mkPen(None))
        self.backdrop.setZValue(-1)
        self.plot.addItem(self.backdrop)
        self.image = OpaqueImageItem(axisOrder="row-major")
        self.plot.addItem(self.image)
        self.future = QGraphicsPathItem()  # grey over every tile's masked half
        self.future.setBrush(QColor(MASKED_COLOUR))
        self.future.setPen(pg.mkPen(None))
        self.future.setZValue(0.5)
        self.plot.addItem(self.future)
        self._future_for = None  # (L, nh, t) the path was built for
        self.separators = pg.PlotCurveItem(connect="pairs", pen=pg.mkPen(QColor(128, 128, 128, 140), width=1))
        self.separators.setZValue(1)
        self.plot.addItem(self.separators)
        self.selection = QGraphicsRectItem()
        self.selection.setPen(pg.mkPen(SELECT_COLOUR, width=2.5, cosmetic=True))
        self.selection.setZValue(10)
        self.selection.hide()
        self.plot.addItem(self.selection)
        # Ablated heads (session state): a cross over the tile, drawn above the image.
        self.ablated_marks = pg.ScatterPlotItem(symbol="x", size=14, pen=pg.mkPen(ABLATED_COLOUR, width=2),
                                                brush=pg.mkBrush(ABLATED_COLOUR))
        self.ablated_marks.setZValue(11)
        self.plot.addItem(self.ablated_marks)
        self.ablated: tuple[tuple[int, int], ...] = ()

    def _build_stat_columns(self) -> None:
        """One narrow image per head statistic, its rows linked to the grid's."""
        self.stat_plots, self.stat_images = {}, {}
        for col, (key, title) in enumerate(STATS, start=2):
            plot = self.addPlot(row=0, col=col)
            self._plain(plot)
            plot.hideAxis("left")
            plot.hideAxis("bottom")
            column_title(plot, title, upright=False)
            plot.setYLink(self.plot)
            plot.setFixedWidth(STAT_PX[False])
            plot.invertY(True)
            img = pg.ImageItem(axisOrder="row-major")
            img.setColorMap(pg.colormap.get(STATS_COLORMAP))
            plot.addItem(img)
            self.stat_plots[key], self.stat_images[key] = plot, img

    def _build_lens_column(self) -> None:
        """The logit lens: a bar and a label per layer, rows linked to the grid's."""
        self.lens_plot = self.addPlot(row=0, col=len(STATS) + 2)
        self._plain(self.lens_plot)
        self.lens_plot.hideAxis("left")
        self.lens_plot.hideAxis("bottom")
        self.lens_plot.setTitle("logit lens", size="9pt")
        self.lens_plot.setYLink(self.plot)
        self.lens_plot.setFixedWidth(LENS_PX[False])
        self.lens_plot.invertY(True)
        self.lens_plot.setXRange(0, 1, padding=0.02)
        self.lens_bars = pg.BarGraphItem(x0=[], y=[], height=0.72, width=[], brush=QColor(34, 211, 238, 90),
                                         pen=pg.mkPen(None))
        self.lens_plot.addItem(self.lens_bars)
        self.lens_texts: list[pg.TextItem] = []

    @staticmethod
    def _plain(plot: pg.PlotItem) -> None:
        plot.setMenuEnabled(False)
        plot.hideButtons()
        plot.setMouseEnabled(x=False, y=False)
        plot.invertY(True)  # layer 0 on top; query rows run down each tile

    # -- data in ---------------------------------------------------------------------------
    def set_data(self, thumbnails: np.ndarray, bin_labels: list[str], stats: dict[str, np.ndarray],
                 lens_tokens: list[str], lens_probs: np.ndarray) -> None:
        """thumbnails (L, nh, t, t); bin_labels: t labels of the tile rows/columns; stats:
        {'entropy'|'prev_token'|'first_token': (L, nh)}; lens: one token and prob per layer."""
        L, nh, t, _ = thumbnails.shape
        reshaped = (L, nh) != (self._L, self._nh)
        self._L, self._nh, self._t = L, nh, t
        self._thumbs, self._bin_labels, self._stats = thumbnails, list(bin_labels), stats
        self._mosaic = mosaic(thumbnails) if t else np.zeros((L, nh), np.float32) * np.nan
        if (L, nh, t) != self._future_for:
            self._future_for = (L, nh, t)
            self.future.setPath(future_mask_path(L, nh, t))
        self._redraw_image()
        self.image.setRect(QRectF(0, 0, max(nh, 1), max(L, 1)))
        self.backdrop.setRect(QRectF(0, 0, nh, L))
        if reshaped:
            self.left_axis.set_count(L)
            self.top_axis.set_count(nh)
            xs = [v for h in range(1, nh) for v in (h, h)]
            ys = [v for _h in range(1, nh) for v in (0, L)]
            for layer in range(1, L):
                xs += [0, nh]
                ys += [layer, layer]
            self.separators.setData(np.array(xs, float), np.array(ys, float))
            self.plot.vb.setRange(xRange=(0, nh), yRange=(0, L), padding=0)
            if self.selected and (self.selected[0] >= L or self.selected[1] >= nh):
                self.selected = None
                self.selection.hide()
        for key, _title in STATS:
            if key == "induction":
                self.set_census(self._census)
                continue
            values = stats.get(key, np.zeros((L, nh)))
            top = max(math.log(max(t, 2)), 1e-6) if key == "entropy" else 1.0
            self.stat_images[key].setImage(values.astype(np.float32), autoLevels=False, levels=(0.0, top))
            self.stat_images[key].setRect(QRectF(0, 0, max(nh, 1), max(L, 1)))
            self.stat_plots[key].setXRange(0, max(nh, 1), padding=0)
        self._set_lens(list(lens_tokens), np.asarray(lens_probs, dtype=float))

    def _set_lens(self, tokens: list[str], probs: np.ndarray) -> None:
        from explorer.widgets.token_stream import visible_token

        self._lens = (tokens, probs)
        ys = np.arange(len(tokens)) + 0.5
        self.lens_bars.setOpts(x0=np.zeros(len(tokens)), y=ys, width=probs, height=0.72)
        while len(self.lens_texts) < len(tokens):
            item = pg.TextItem(anchor=(0, 0.5), color=pg.getConfigOption("foreground"))
            self.lens_plot.addItem(item)
            self.lens_texts.append(item)
        chars = 7 if self._compact else 12
        metrics = QFontMetrics(QFont())
        room = LENS_PX[self._compact] - 12  # the column's width less the text's offset and margins
        for i, item in enumerate(self.lens_texts):
            if i < len(tokens):
                label = visible_token(tokens[i])
                label = label if len(label) <= chars else label[:chars - 1] + "…"
                prob = format_prob(probs[i])  # the number is never cut: the token gives way ('Incr… 0.022%')
                label = metrics.elidedText(label, Qt.TextElideMode.ElideRight,
                                           room - metrics.horizontalAdvance(f"  {prob}"))
                text = f"{label}  {prob}"
                if getattr(item, "shown_text", None) != text:  # re-laying out a text item costs ~1 ms
                    item.setText(text)
                    item.shown_text = text
                    item.setPos(0.02, ys[i])
        self._fit_lens_texts()

    def _fit_lens_texts(self) -> None:
        """Show every k-th lens label, k such that labels never overlap at the rows' current height
        (the bars stay for every layer; hovering a row names its token)."""
        n = len(self._lens[0])
        vb = self.plot.vb  # a row's pixels on screen (aspect-locked tiles leave the view taller than the rows)
        row_px = 1.0 / vb.viewPixelSize()[1] if n and vb.width() > 1 and vb.height() > 1 else 0
        line = QFontMetrics(QFont()).height()
        step = 1 if row_px >= line or row_px <= 0 else math.ceil(line / row_px)
        self.lens_label_step = step
        for i, item in enumerate(self.lens_texts):
            item.setVisible(i < n and i % step == 0)

    def _set_compact(self, compact: bool) -> None:
        """Narrow grid: slimmer statistics and lens columns, so the tiles keep most of the width."""
        if compact == self._compact:
            return
        self._compact = compact
        for key, title in STATS:
            plot = self.stat_plots[key]
            plot.setFixedWidth(STAT_PX[compact])
            column_title(plot, title, upright=compact)
        self.lens_plot.setFixedWidth(LENS_PX[compact])
        self._set_lens(*self._lens)

    def resizeEvent(self, event) -> None:  # noqa: N802 - Qt override
        super().resizeEvent(event)
        if self._built:  # Qt resizes the widget while __init__ is still building it
            self._set_compact(self.width() < COMPACT_BELOW_PX)
            self._fit_lens_texts()

    def set_log(self, log: bool) -> None:
        if log == self._log:
            return
        self._log = log
        self.colorbar.setLevels(values=display_levels(log))
        self.colorbar.setLabel("left", "log₁₀ attention weight" if log else "attention weight")
        self._redraw_image()

    @property
    def log(self) -> bool:
        return self._log

    def clear_data(self) -> None:
        """Nothing drawn: no tiles, statistics, lens or selection (the data belonged to another model).
        Not `clear`: GraphicsLayoutWidget's instance attribute of that name empties the layout itself."""
        self._L = self._nh = self._t = 0
        self._thumbs, self._bin_labels, self._stats = np.zeros((0, 0, 0, 0), np.float32), [], {}
        self._mosaic = np.zeros((0, 0), np.float32)
        self.image.clear()
        self.future.setPath(QPainterPath())
        self._future_for = None
        for image in self.stat_images.values():
            image.clear()
        self._census = None
        self.set_ablated(())
        self.separators.setData([], [])
        self.left_axis.set_count(0)
        self.top_axis.set_count(0)
        self.selected = None
        self.selection.hide()
        self._set_lens([], np.zeros(0))

    def _redraw_image(self) -> None:
        levels = self.colorbar.levels() if self._mosaic.size else display_levels(self._log)
        self.image.setImage(to_display(self._mosaic, self._log), autoLevels=False, levels=levels)

    def displayed_tile(self, layer: int, head: int) -> np.ndarray:
        """The (t, t) weights drawn for one head, NaN where the grey mask covers it: what tests check."""
        t = self._t
        tile = self._mosaic[layer * t:(layer + 1) * t, head * t:(head + 1) * t]
        return np.where(causal_mask(t), tile, np.nan) if t else tile

    def set_census(self, induction: np.ndarray | None) -> None:
        """The head census's induction score per head (L, nh), as the last summary column
        (blank until it arrives, or when it is for another shape)."""
        self._census = induction
        L, nh = self._L, self._nh
        if not (L and nh):  # a cleared grid (the model changed): nothing to put it next to
            return
        values = induction if induction is not None and induction.shape == (L, nh) else np.full((L, nh), np.nan)
        self.stat_images["induction"].setImage(np.asarray(values, np.float32), autoLevels=False, levels=(0.0, 1.0))
        self.stat_images["induction"].setRect(QRectF(0, 0, max(nh, 1), max(L, 1)))
        self.stat_plots["induction"].setXRange(0, max(nh, 1), padding=0)
        if "induction" in self._stats or induction is not None:
            self._stats = {**self._stats, "induction": values}

    def set_ablated(self, heads) -> None:
        """Mark these (layer, head) tiles as ablated (a red cross)."""
        self.ablated = tuple((int(l), int(h)) for l, h in heads)
        self.ablated_marks.setData(x=[h + 0.5 for _, h in self.ablated], y=[l + 0.5 for l, _ in self.ablated])

    # -- selection -----------------------------------------------------------------------
    def select(self, layer: int, head: int, emit: bool = False) -> None:
        if not (0 <= layer < self._L and 0 <= head < self._nh):
            return
        self.selected = (layer, head)
        self.selection.setRect(QRectF(head, layer, 1, 1))
        self.selection.show()
        if emit:
            self.headSelected.emit(layer, head)

    def keyPressEvent(self, event) -> None:  # noqa: N802 - Qt override
        moves = {Qt.Key.Key_Left: (0, -1), Qt.Key.Key_Right: (0, 1),
                 Qt.Key.Key_Up: (-1, 0), Qt.Key.Key_Down: (1, 0)}
        if event.key() in moves and self._L:
            dl, dh = moves[event.key()]
            layer, head = self.selected or (0, 0)
            if self.selected is not None:
                layer = min(max(layer + dl, 0), self._L - 1)
                head = min(max(head + dh, 0), self._nh - 1)
            self.select(layer, head, emit=True)
            event.accept()
            return
        super().keyPressEvent(event)

    def _cell_at(self, scene_pos) -> tuple[int, int, float, float] | None:
        if not self.plot.sceneBoundingRect().contains(scene_pos) or not self._L:
            return None
        p = self.plot.vb.mapSceneToView(scene_pos)
        head, layer = math.floor(p.x()), math.floor(p.y())
        if not (0 <= layer < self._L and 0 <= head < self._nh):
            return None
        return layer, head, p.y() - layer, p.x() - head

    def _on_click(self, event) -> None:
        cell = self._cell_at(event.scenePos())
        if cell is not None and event.button() == Qt.MouseButton.LeftButton:
            self.setFocus()
            if event.modifiers() & Qt.KeyboardModifier.ShiftModifier:
                self.ablateToggled.emit(cell[0], cell[1])
                return
            self.select(cell[0], cell[1], emit=True)

    def _on_move(self, scene_pos) -> None:
        cell = self._cell_at(scene_pos)
        if cell is None or not self._t:
            return
        layer, head, fy, fx = cell
        q, k = min(int(fy * self._t), self._t - 1), min(int(fx * self._t), self._t - 1)
        text = f"L{layer} H{head}" + (" (ablated)" if (layer, head) in self.ablated else "")
        stats = "  ".join(f"{title} {self._stats[key][layer, head]:.2f}" for key, title in STATS
                          if key in self._stats and self._stats[key].shape == (self._L, self._nh))
        if k <= q:
            weight = self._thumbs[layer, head, q, k]
            text += f"   query {self._bin_labels[q]} → key {self._bin_labels[k]}: {weight:.3f}"
        else:
            text += f"   query {self._bin_labels[q]} cannot see key {self._bin_labels[k]} (future)"
        self.hoverText.emit(f"{text}   │ {stats}")
