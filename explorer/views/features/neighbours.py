"""The selected feature's nearest features (issue 39): the dictionary's other features whose decoder
(write) directions point most the same way, by cosine, with their labels; clicking one selects it.
Near-duplicates and feature splitting show up here (two latents for one token, one for each context)."""
from __future__ import annotations

import numpy as np
from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QAbstractItemView, QHeaderView, QLabel, QTableWidget, QTableWidgetItem, QVBoxLayout, QWidget

from explorer.widgets.token_stream import visible_token

HEADERS = ("feature", "cosine", "label")
ALIGN_RIGHT = Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter


class NeighbourList(QWidget):
    """Passive: `set_neighbours(ids, cosines, labels)` in; `featureClicked(id)` out."""

    featureClicked = Signal(int)

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.ids = np.zeros(0, np.int64)
        self.note = QLabel("Features whose decoder directions are nearest this one's (cosine); click one to select it.")
        self.note.setWordWrap(True)
        self.note.setStyleSheet("color: #8c8c8c;")
        self.table = QTableWidget(0, len(HEADERS))
        self.table.setHorizontalHeaderLabels(list(HEADERS))
        self.table.verticalHeader().hide()
        self.table.verticalHeader().setDefaultSectionSize(self.fontMetrics().height() + 6)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(1, QHeaderView.ResizeMode.ResizeToContents)
        header.setStretchLastSection(True)
        self.table.cellClicked.connect(lambda row, _col: self._pick(row))
        self.table.cellActivated.connect(lambda row, _col: self._pick(row))
        box = QVBoxLayout(self)
        box.setContentsMargins(0, 2, 0, 0)
        box.setSpacing(2)
        box.addWidget(self.note)
        box.addWidget(self.table, 1)

    def set_neighbours(self, ids, cosines, labels) -> None:
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        cosines = np.asarray(cosines, dtype=float).reshape(-1)
        if len(cosines) != len(ids) or len(labels) != len(ids):
            raise ValueError(f"{len(ids)} neighbours need as many cosines and labels, got {len(cosines)} and {len(labels)}")
        self.ids = ids
        self.table.setRowCount(len(ids))
        for row, (feature, cos, label) in enumerate(zip(ids, cosines, labels)):
            cells = (QTableWidgetItem(str(int(feature))), QTableWidgetItem(f"{cos:+.3f}"),
                     QTableWidgetItem(visible_token(str(label)) if label else "—"))
            for col, cell in enumerate(cells):
                if col < 2:
                    cell.setTextAlignment(ALIGN_RIGHT)
                self.table.setItem(row, col, cell)

    def clear(self) -> None:
        self.set_neighbours([], [], [])

    def rows(self) -> list[tuple[str, str, str]]:
        """What each row shows: (feature, cosine, label) texts."""
        return [tuple(self.table.item(r, c).text() for c in range(len(HEADERS))) for r in range(self.table.rowCount())]

    def _pick(self, row: int) -> None:
        if 0 <= row < len(self.ids):
            self.featureClicked.emit(int(self.ids[row]))
