"""A clear "coming soon" page for a panel whose issue is not done yet (never a crash)."""
from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QVBoxLayout, QWidget


class PlaceholderPanel(QWidget):
    def __init__(self, title: str, what: str, issue: str = "", parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("placeholderPanel")
        layout = QVBoxLayout(self)
        heading = QLabel(f"<h2>{title}</h2>")
        heading.setAlignment(Qt.AlignmentFlag.AlignCenter)
        body = QLabel(f"{what}<br><br><i>This panel is not built yet{f' ({issue})' if issue else ''}.</i>")
        body.setWordWrap(True)
        body.setAlignment(Qt.AlignmentFlag.AlignCenter)
        body.setObjectName("placeholderText")
        layout.addStretch(1)
        layout.addWidget(heading)
        layout.addWidget(body)
        layout.addStretch(2)
        self.message = body  # tests read what it says
