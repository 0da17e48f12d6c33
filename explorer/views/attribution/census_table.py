"""Head census as a sortable table: every head's previous-token and duplicate-token score
(TransformerLens's head-detector definition), induction on repeats of varied length and
offset, position-copy (attention at one fixed offset, whatever the tokens: the shortcut a
fixed-length census mistakes for induction), and whether it is ablated.

Numbers are stored as numbers (Qt's DisplayRole with a float), so sorting is numeric;
double-clicking a row asks to ablate (or restore) that head.
"""
from __future__ import annotations

import csv
import io

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QAbstractItemView, QHeaderView, QTableWidget, QTableWidgetItem

COLUMNS = ("layer", "head", "previous-token", "duplicate-token", "induction", "position-copy", "ablated")
ABLATED = COLUMNS.index("ablated")


class CensusTable(QTableWidget):
    """Passive view: `set_census(rows, ablated)` in; `headToggled(layer, head)` out."""

    headToggled = Signal(int, int)

    def __init__(self, parent=None):
        super().__init__(0, len(COLUMNS), parent)
        self.setHorizontalHeaderLabels(list(COLUMNS))
        self.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.setSortingEnabled(True)
        self.verticalHeader().hide()
        self.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.setToolTip("Previous- and duplicate-token: TransformerLens's head detector on random tokens repeated "
                        "twice (a perfect duplicate head scores ≈ 0.5: only the second half has targets). "
                        "Induction: attention on what followed the earlier copy, on segments repeated at a different "
                        "length and distance in every row (1.0 = perfect; a head attending by position scores "
                        "≤ 0.125). Position-copy: the most attention a head pays at one fixed offset on random "
                        "tokens without repeats (the offset is in the cell's tooltip). Double-click a row to ablate "
                        "that head.")
        self.horizontalHeader().setSortIndicator(0, Qt.SortOrder.AscendingOrder)  # layer order until a click
        self.cellDoubleClicked.connect(self._on_double_click)
        self._rows: list[tuple[int, int, float, float, float, float, int]] = []

    def set_census(self, rows, ablated=()) -> None:
        """rows: (layer, head, previous, duplicate, induction, position copy, its offset) per head;
        ablated: (layer, head) pairs."""
        ablated = set(ablated)
        self._rows = list(rows)
        sort_column = self.horizontalHeader().sortIndicatorSection()
        order = self.horizontalHeader().sortIndicatorOrder()
        self.setSortingEnabled(False)  # filling a sorted table reorders rows under our feet
        self.setRowCount(len(self._rows))
        for r, (layer, head, prev, dup, ind, pos, offset) in enumerate(self._rows):
            for c, value in enumerate((layer, head, prev, dup, ind, pos)):
                item = QTableWidgetItem()
                item.setData(Qt.ItemDataRole.DisplayRole, round(float(value), 3) if c >= 2 else int(value))
                self.setItem(r, c, item)
            self.item(r, ABLATED - 1).setToolTip(f"attends {offset} tokens back (key i−{offset})")
            self.setItem(r, ABLATED, QTableWidgetItem("ablated" if (layer, head) in ablated else ""))
        self.setSortingEnabled(True)
        self.sortItems(sort_column, order)

    def clear_data(self) -> None:
        self._rows = []
        self.setRowCount(0)

    def set_ablated(self, ablated) -> None:
        ablated = set(ablated)
        for r in range(self.rowCount()):
            key = (int(self.item(r, 0).data(Qt.ItemDataRole.DisplayRole)), int(self.item(r, 1).data(Qt.ItemDataRole.DisplayRole)))
            self.item(r, ABLATED).setText("ablated" if key in ablated else "")

    def head_at(self, row: int) -> tuple[int, int]:
        return (int(self.item(row, 0).data(Qt.ItemDataRole.DisplayRole)),
                int(self.item(row, 1).data(Qt.ItemDataRole.DisplayRole)))

    def _on_double_click(self, row: int, _col: int) -> None:
        self.headToggled.emit(*self.head_at(row))

    def export_png(self, path: str) -> bool:
        return self.grab().save(path)

    def csv_text(self) -> str:
        out = io.StringIO()
        writer = csv.writer(out)
        writer.writerow(["layer", "head", "previous_token", "duplicate_token", "induction", "position_copy",
                         "position_offset", "ablated"])
        ablated = {self.head_at(r) for r in range(self.rowCount()) if self.item(r, ABLATED).text()}
        for layer, head, prev, dup, ind, pos, offset in self._rows:
            writer.writerow([layer, head, f"{prev:.6g}", f"{dup:.6g}", f"{ind:.6g}", f"{pos:.6g}", offset,
                             "yes" if (layer, head) in ablated else ""])
        return out.getvalue()
