"""The parameter readout (passive view): total, the tied/untied and non-embedding figures,
memory, a component table and a share-of-parameters chart.

Apart from the config form because it is a view of its own: it shows one `ParamReadout`
(plain numbers, computed and formatted by the controller) and never reads the form.
"""
from __future__ import annotations

from dataclasses import dataclass

import pyqtgraph as pg
from PySide6.QtCore import QSize, Qt
from PySide6.QtWidgets import (QGridLayout, QHeaderView, QLabel, QSizePolicy, QSplitter, QTableWidget,
                               QTableWidgetItem, QVBoxLayout, QWidget)


@dataclass(frozen=True)
class ComponentRow:
    name: str
    per_block: int  # 0 outside the blocks
    total: int
    in_blocks: bool


# A component that holds no parameters says why: a tied head is the token embedding, sinusoidal
# or rotary positions are computed (no table). Not "tied" for anything else.
_ZERO_ROW_NAMES = {"output head": "output head (tied: shares the token embedding)",
                   "position embedding": "position embedding (computed: no table)"}
_ZERO_BAR_TEXTS = {"output head": " 0 (tied)", "position embedding": " 0 (computed, no table)"}


@dataclass(frozen=True)
class ParamReadout:
    """Everything the readout shows, as plain values (the controller computes and formats)."""

    total: int
    total_text: str  # e.g. "124.44M"
    tied: bool
    tied_total: int
    untied_total: int
    tie_saving: int
    vocab_size: int
    n_embd: int
    n_layer: int
    per_block: int
    non_embedding: int  # nanoGPT: total minus the position table
    kaplan_non_embedding: int  # Kaplan et al.: total minus both embedding tables
    components: tuple[ComponentRow, ...]
    memory: tuple[tuple[str, str], ...]  # (what, formatted bytes)
    parts: str = ""  # the parts in one line ("rotary positions, RMSNorm, SwiGLU MLP 1,536, …")
    differences: tuple[str, ...] = ()  # each modern option's effect on the count, with its number


class _FitTable(QTableWidget):
    """Asks for the height of all its rows, so the total row is not hidden when there is room."""

    def sizeHint(self) -> QSize:
        hint = super().sizeHint()
        rows = sum(self.rowHeight(i) for i in range(self.rowCount()))
        return QSize(hint.width(), self.horizontalHeader().height() + rows + 2 * self.frameWidth())


CHART_AXIS_PX = 56  # the chart's bottom axis with its title, and margins


class _FitChart(pg.PlotWidget):
    """Asks for the height of its bars (its minimum), not a default 480 px: in the Config panel's
    scroll area a taller hint made the readout scroll in a 1280×820 window."""

    def sizeHint(self) -> QSize:  # noqa: N802 - Qt override
        return QSize(super().sizeHint().width(), self.minimumHeight())


class ParamReadoutView(QWidget):
    """Shows a ParamReadout; `set_readout(r)` redraws every part from it."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        column = QVBoxLayout(self)
        column.setContentsMargins(6, 0, 0, 0)
        self.total_label = QLabel("")
        self.total_label.setObjectName("readoutBig")
        self.total_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        column.addWidget(self.total_label)

        column.addLayout(self._build_figures())
        self.parts_label = QLabel("")
        self.parts_label.setObjectName("readoutNote")
        self.parts_label.setWordWrap(True)
        self.parts_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        column.addWidget(self.parts_label)

        self.memory_label = QLabel("")
        self.memory_label.setWordWrap(True)
        self.memory_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        column.addWidget(self.memory_label)

        column.addWidget(self._build_table_and_chart(), 1)

    def _build_figures(self) -> QGridLayout:
        """Tied and untied totals, their difference and the two non-embedding counts, each with a note."""
        figures = QGridLayout()
        figures.setHorizontalSpacing(18)
        self.figure_labels: dict[str, QLabel] = {}
        rows = (("tied", "tied head"), ("untied", "untied head"), ("difference", "difference"),
                ("nanogpt", "non-embedding (nanoGPT)"), ("kaplan", "non-embedding (Kaplan)"))
        for r, (key, title) in enumerate(rows):
            name = QLabel(title)
            value = QLabel("")
            value.setAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
            value.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
            note = QLabel("")
            note.setObjectName("readoutNote")
            note.setWordWrap(True)
            figures.addWidget(name, r, 0)
            figures.addWidget(value, r, 1)
            figures.addWidget(note, r, 2)
            self.figure_labels[key] = value
            self.figure_labels[key + "_note"] = note
        figures.setColumnStretch(2, 1)
        return figures

    def _build_table_and_chart(self) -> QSplitter:
        """The per-component table over the share chart; the table keeps its rows, the chart takes the rest."""
        lower = QSplitter(Qt.Orientation.Vertical)
        self.table = _FitTable(0, 4)
        self.table.setHorizontalHeaderLabels(["component", "per block", "total", "share"])
        self.table.verticalHeader().hide()
        self.table.verticalHeader().setDefaultSectionSize(self.fontMetrics().height() + 6)
        self.table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        self.table.setSelectionMode(QTableWidget.SelectionMode.NoSelection)
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        for col in (1, 2, 3):
            header.setSectionResizeMode(col, QHeaderView.ResizeMode.ResizeToContents)
        self.table.setMinimumHeight(5 * (self.fontMetrics().height() + 6) + 4)  # the header and four rows
        lower.addWidget(self.table)
        self.chart = _FitChart()
        self.chart.setMenuEnabled(False)
        self.chart.setMouseEnabled(x=False, y=False)
        self.chart.hideButtons()
        self.chart.setLabel("bottom", "share of all parameters (%)")
        self.chart.setMinimumHeight(140)
        self.chart.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Expanding)
        self.bars = pg.BarGraphItem(x0=[], y=[], height=0.7, width=[], brushes=[])
        self.chart.addItem(self.bars)
        self._bar_texts: list[pg.TextItem] = []
        lower.addWidget(self.chart)
        lower.setStretchFactor(0, 0)  # the table gets its full height when there is room ...
        lower.setStretchFactor(1, 1)  # ... and the chart takes the rest
        return lower


    def set_readout(self, r: ParamReadout) -> None:
        self.total_label.setText(f"{r.total_text} parameters  ({r.total:,})")
        fig = self.figure_labels
        fig["tied"].setText(f"{r.tied_total:,}")
        fig["untied"].setText(f"{r.untied_total:,}")
        fig["tied_note"].setText("← this config" if r.tied else "")
        fig["untied_note"].setText("" if r.tied else "← this config")
        fig["difference"].setText(f"{r.tie_saving:,}")
        fig["difference_note"].setText(f"= vocab_size {r.vocab_size:,} × n_embd {r.n_embd:,} (the output head)")
        fig["nanogpt"].setText(f"{r.non_embedding:,}")
        fig["nanogpt_note"].setText("excludes the position-embedding table only; the token embedding stays in")
        fig["kaplan"].setText(f"{r.kaplan_non_embedding:,}")
        fig["kaplan_note"].setText("excludes both embedding tables (and an untied head)")
        lines = [f"<b>parts</b> &nbsp; {r.parts}"] if r.parts else []
        lines += [f"&nbsp;&nbsp;• {line}" for line in r.differences]
        self.parts_label.setText("<br>".join(lines))
        self.parts_label.setVisible(bool(lines))
        self.memory_label.setText("<b>memory</b> &nbsp; " + " &nbsp;·&nbsp; ".join(
            f"{what}: <b>{size}</b>" for what, size in r.memory))
        self._fill_table(r)
        self._fill_chart(r)

    def _fill_table(self, r: ParamReadout) -> None:
        rows = list(r.components) + [ComponentRow(f"total ({r.n_layer} blocks)", r.per_block, r.total, True)]
        self.table.setRowCount(len(rows))
        for i, c in enumerate(rows):
            share = 100.0 * c.total / r.total if r.total else 0.0
            name = _ZERO_ROW_NAMES.get(c.name, c.name) if c.total == 0 else c.name
            cells = (name, f"{c.per_block:,}" if c.in_blocks else "–", f"{c.total:,}", f"{share:.1f}%")
            for j, text in enumerate(cells):
                item = QTableWidgetItem(text)
                if j:
                    item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
                if i == len(rows) - 1:
                    font = item.font()
                    font.setBold(True)
                    item.setFont(font)
                self.table.setItem(i, j, item)
        self.table.updateGeometry()  # its size hint (every row) changed

    def _fill_chart(self, r: ParamReadout) -> None:
        comps = [c for c in r.components]
        n = len(comps)
        shares = [100.0 * c.total / r.total if r.total else 0.0 for c in comps]
        ys = list(range(n - 1, -1, -1))  # first component at the top
        colours = [(74, 123, 208) if c.in_blocks else (225, 140, 60) for c in comps]
        self.bars.setOpts(x0=[0] * n, y=ys, width=shares, height=0.7, brushes=[pg.mkBrush(*c) for c in colours])
        self.chart.getAxis("left").setTicks([[(y, c.name) for y, c in zip(ys, comps)]])
        for item in self._bar_texts:
            self.chart.removeItem(item)
        self._bar_texts = []
        for y, c, share in zip(ys, comps, shares):
            text = pg.TextItem(f" {c.total:,}" if c.total else _ZERO_BAR_TEXTS.get(c.name, " 0"), anchor=(0, 0.5),
                               color=pg.getConfigOption("foreground"))
            text.setPos(share, y)
            self.chart.addItem(text)
            self._bar_texts.append(text)
        self.chart.setXRange(0, max(shares + [1.0]) * 1.35, padding=0)
        self.chart.setYRange(-0.6, n - 0.4, padding=0)
        # a line of text per bar (below that the names overlapped, 900×600); the Config panel scrolls instead
        self.chart.setMinimumHeight(n * (self.fontMetrics().height() + 2) + CHART_AXIS_PX)
