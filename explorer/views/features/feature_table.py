"""The Features panel's list of features: id, density, max activation, logit effect, label.

A model over the numpy columns (not one QTableWidgetItem per cell) that sorts and filters with
numpy: an SAE of width 6144 is 30,000 cells, and Qt's proxy sort would call back into Python
for every comparison. Sorting is on the numbers, never their text (feature 10 after 9), NaN last.
"""
from __future__ import annotations

import csv
import io

import numpy as np
from PySide6.QtCore import QAbstractTableModel, QEvent, QItemSelectionModel, QModelIndex, QObject, QSize, Qt, Signal
from PySide6.QtWidgets import QAbstractItemView, QHeaderView, QLineEdit, QTableView, QVBoxLayout, QWidget

from explorer.widgets.formatting import format_prob

COLUMNS = ("id", "density", "max", "logit", "label")
TIPS = ("The feature's index in its dictionary (a neuron's index in the MLP, an SAE latent's in the SAE)",
        "Share of the corpus's tokens on which the feature fires (activation above zero)",
        "The largest activation seen on the corpus",
        "Logit effect: how strongly its decoder direction moves the logits through the unembedding",
        "A short description: the token it fires on most")
WIDTH_PX = 330
ALIGN_RIGHT = Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter


def _number(value: float, fmt: str) -> str:
    return "—" if not np.isfinite(value) else format(value, fmt)


class FeatureModel(QAbstractTableModel):
    """Rows are features; `order` holds which feature each shown row is (sorted, filtered)."""

    def __init__(self, parent: QObject | None = None):
        super().__init__(parent)
        self.ids = np.zeros(0, np.int64)
        self.columns: list[np.ndarray] = [np.zeros(0)] * 3  # density, max act, logit effect
        self.labels: list[str] = []
        self.order = np.zeros(0, np.int64)
        self.sort_key = (0, Qt.SortOrder.AscendingOrder)
        self.filter_text = ""

    def set_data(self, ids, density, max_act, logit_effect, labels) -> None:
        n = len(ids)
        cols = [np.asarray(c, dtype=float).reshape(-1) for c in (density, max_act, logit_effect)]
        if any(len(c) != n for c in cols) or len(labels) != n:
            raise ValueError(f"feature table columns differ in length: ids {n}, density {len(cols[0])}, "
                             f"max act {len(cols[1])}, logit effect {len(cols[2])}, labels {len(labels)}")
        self.beginResetModel()
        self.ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        self.columns, self.labels = cols, [str(s) for s in labels]
        self.order = self._arranged()
        self.endResetModel()

    # -- Qt model -------------------------------------------------------------------------------------
    def rowCount(self, parent=QModelIndex()) -> int:  # noqa: N802
        return 0 if parent.isValid() else len(self.order)

    def columnCount(self, parent=QModelIndex()) -> int:  # noqa: N802
        return 0 if parent.isValid() else len(COLUMNS)

    def headerData(self, section, orientation, role=Qt.ItemDataRole.DisplayRole):  # noqa: N802
        if orientation != Qt.Orientation.Horizontal:
            return None
        if role == Qt.ItemDataRole.DisplayRole:
            return COLUMNS[section]
        if role == Qt.ItemDataRole.ToolTipRole:
            return TIPS[section]
        return None

    def data(self, index: QModelIndex, role=Qt.ItemDataRole.DisplayRole):
        if not index.isValid():
            return None
        row, col = int(self.order[index.row()]), index.column()
        if role == Qt.ItemDataRole.DisplayRole:
            return self.cell_text(row, col)
        if role == Qt.ItemDataRole.TextAlignmentRole and col < 4:
            return ALIGN_RIGHT
        if role == Qt.ItemDataRole.ToolTipRole and col == 4:
            return self.labels[row]
        return None

    def cell_text(self, row: int, col: int) -> str:
        """What cell (feature row `row` of the data, column `col`) shows."""
        if col == 0:
            return str(int(self.ids[row]))
        if col == 4:
            return self.labels[row]
        value = float(self.columns[col - 1][row])
        if col == 1:
            return format_prob(value) if np.isfinite(value) else "—"
        return _number(value, ".3g" if col == 2 else "+.2g")  # fits the column: +0.011, +0.74, +12

    def sort(self, column: int, order=Qt.SortOrder.AscendingOrder) -> None:
        self.layoutAboutToBeChanged.emit()
        self.sort_key = (column, order)
        self.order = self._arranged()
        self.layoutChanged.emit()

    def set_filter(self, text: str) -> None:
        self.beginResetModel()
        self.filter_text = text.strip()
        self.order = self._arranged()
        self.endResetModel()

    # -- numpy ----------------------------------------------------------------------------------------
    def _arranged(self) -> np.ndarray:
        """Data rows that pass the filter, in the sort order: NaN last either way, ties by id."""
        column, order = self.sort_key
        down = order == Qt.SortOrder.DescendingOrder
        if column == 4:
            rows = np.array(sorted(range(len(self.ids)), key=lambda r: self.labels[r].lower(), reverse=down),
                            dtype=np.int64)
        elif column == 0:
            rows = np.argsort(-self.ids if down else self.ids, kind="stable")
        else:
            values = self.columns[column - 1]
            missing = np.isnan(values)
            filled = np.where(missing, 0.0, values)
            rows = np.lexsort((self.ids, -filled if down else filled, missing))
        rows = np.asarray(rows, dtype=np.int64)
        return rows[self._passes(rows)] if self.filter_text else rows

    def _passes(self, rows: np.ndarray) -> np.ndarray:
        """Filter: a number matches that id exactly or as the start of an id; any text matches labels."""
        text = self.filter_text.lower()
        id_text = text.lstrip("#")
        ids_match = (np.array([str(int(self.ids[r])).startswith(id_text) for r in rows], bool)
                     if id_text.isdigit() else np.zeros(len(rows), bool))
        labels_match = np.array([text in self.labels[r].lower() for r in rows], bool)
        return ids_match | labels_match

    def row_of(self, feature: int) -> int:
        """The shown row of `feature`, -1 when it is not shown."""
        hits = np.flatnonzero(self.ids[self.order] == feature) if len(self.order) else []
        return int(hits[0]) if len(hits) else -1

    def feature_at(self, row: int) -> int:
        return int(self.ids[self.order[row]])

    def csv_text(self) -> str:
        """The shown rows in the shown order, numbers at full precision."""
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(["feature", "density_fraction", "max_activation", "logit_effect", "label"])
        for r in self.order:
            d, m, e = (float(c[r]) for c in self.columns)
            writer.writerow([int(self.ids[r]), f"{d:.6g}", f"{m:.6g}", f"{e:.6g}", self.labels[r]])
        return out.getvalue()


class FeatureTable(QWidget):
    """A filter box over the sortable table. Out: `featureSelected(id)` when the user selects a row
    (not when `select_feature` does). Up/Down in the filter box move the table's selection."""

    featureSelected = Signal(int)

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.filter = QLineEdit()
        self.filter.setPlaceholderText("Filter by id or label (Ctrl+F)")
        self.filter.setClearButtonEnabled(True)
        self.filter.textChanged.connect(self._on_filter)
        self.filter.installEventFilter(self)
        self.model = FeatureModel(self)
        self.view = QTableView()
        self.view.setModel(self.model)
        self.view.setSortingEnabled(True)
        self.view.horizontalHeader().setSortIndicator(0, Qt.SortOrder.AscendingOrder)
        self.view.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.view.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.view.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.view.setAlternatingRowColors(True)
        self.view.verticalHeader().hide()
        self.view.verticalHeader().setDefaultSectionSize(self.fontMetrics().height() + 6)
        header = self.view.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
        header.setStretchLastSection(True)
        header.resizeSection(4, 60)  # the stretched label column may shrink to this, not to Qt's 100
        for col, sample in enumerate(("0000", "0.0031%", "00.00", "+0.000")):  # fixed: no scan of 6,144 rows
            text = max(sample, COLUMNS[col], key=self.fontMetrics().horizontalAdvance)
            header.resizeSection(col, self.fontMetrics().horizontalAdvance(text) + 18)
        self.view.selectionModel().currentRowChanged.connect(self._on_current)
        self.model.layoutChanged.connect(self._keep_selection)
        self._selected: int | None = None
        self._quiet = False
        box = QVBoxLayout(self)
        box.setContentsMargins(0, 0, 0, 0)
        box.addWidget(self.filter)
        box.addWidget(self.view, 1)

    def sizeHint(self) -> QSize:  # noqa: N802 - every column readable, the label's too
        return QSize(WIDTH_PX, 400)

    def set_table(self, ids, density, max_act, logit_effect, labels) -> None:
        """New rows; the selected feature stays selected when it is among them (no signal), else none is."""
        self.model.set_data(ids, density, max_act, logit_effect, labels)
        if self._selected is not None and not np.any(self.model.ids == self._selected):
            self._selected = None
        self._keep_selection()

    def clear(self) -> None:
        self.model.set_data([], [], [], [], [])
        self._selected = None

    def selected(self) -> int | None:
        return self._selected

    def select_feature(self, feature: int | None) -> None:
        """Select `feature`'s row without announcing it (the controller already knows)."""
        self._selected = None if feature is None else int(feature)
        self._keep_selection()

    def _keep_selection(self) -> None:
        row = -1 if self._selected is None else self.model.row_of(self._selected)
        self._quiet = True
        try:
            if row < 0:
                self.view.selectionModel().clearSelection()
                self.view.selectionModel().setCurrentIndex(QModelIndex(), QItemSelectionModel.SelectionFlag.Clear)
            else:
                index = self.model.index(row, 0)
                self.view.selectionModel().setCurrentIndex(
                    index, QItemSelectionModel.SelectionFlag.ClearAndSelect
                    | QItemSelectionModel.SelectionFlag.Rows)
                self.view.scrollTo(index)
        finally:
            self._quiet = False

    def _on_current(self, current: QModelIndex, _previous: QModelIndex) -> None:
        if self._quiet or not current.isValid():
            return
        feature = self.model.feature_at(current.row())
        if feature != self._selected:
            self._selected = feature
            self.featureSelected.emit(feature)

    def _on_filter(self, text: str) -> None:
        self.model.set_filter(text)
        self._keep_selection()

    def eventFilter(self, watched, event) -> bool:  # noqa: N802 - Up/Down/Enter in the filter move the table
        if watched is self.filter and event.type() == QEvent.Type.KeyPress:
            if event.key() in (Qt.Key.Key_Up, Qt.Key.Key_Down) and self.model.rowCount():
                current = self.view.currentIndex().row()
                step = -1 if event.key() == Qt.Key.Key_Up else 1
                row = min(max(current + step, 0), self.model.rowCount() - 1) if current >= 0 else 0
                self.view.setCurrentIndex(self.model.index(row, 0))
                return True
        return super().eventFilter(watched, event)
