"""A titled list of (token, value) rows — what a feature's decoder direction promotes or suppresses —
shared by the Features and Circuits panels' details."""
from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QListWidget, QVBoxLayout, QWidget

from explorer.widgets.token_stream import visible_token


class TokenList(QWidget):
    """A titled list of (token, value) rows: what the decoder direction promotes or suppresses."""

    def __init__(self, title: str, tip: str, parent: QWidget | None = None):
        super().__init__(parent)
        self.list = QListWidget()
        self.list.setToolTip(tip)
        # narrow (900 px): each row keeps its token's start and its value, "␣Poti…  +0.01", never a scroll bar
        self.list.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.list.setTextElideMode(Qt.TextElideMode.ElideMiddle)
        heading = QLabel(f"<b>{title}</b>")
        heading.setToolTip(tip)
        box = QVBoxLayout(self)
        box.setContentsMargins(0, 0, 0, 0)
        box.setSpacing(2)
        box.addWidget(heading)
        box.addWidget(self.list, 1)

    def set_rows(self, rows) -> None:
        self.list.clear()
        self.list.addItems([f"{visible_token(str(t))}  {float(v):+.2f}" for t, v in rows])
        for i in range(self.list.count()):  # the whole row on hover, where it is elided
            self.list.item(i).setToolTip(self.list.item(i).text())

    def texts(self) -> list[str]:
        return [self.list.item(i).text() for i in range(self.list.count())]
