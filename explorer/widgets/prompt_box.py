"""The panels' prompt box, said once: a placeholder, a fixed height, Tab moves the focus on (a
tab typed by accident never lands in a prompt), and `edited(text)` on every change."""
from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QHBoxLayout, QLayout, QPlainTextEdit, QWidget


class PromptBox(QPlainTextEdit):
    edited = Signal(str)  # the whole text, after every change

    def __init__(self, placeholder: str, height: int | None = None, parent: QWidget | None = None):
        """`height` in pixels; None: three lines of this box's font."""
        super().__init__(parent)
        self.setPlaceholderText(placeholder)
        self.setTabChangesFocus(True)
        self.setFixedHeight(height if height is not None else self.fontMetrics().lineSpacing() * 3 + 14)
        self.textChanged.connect(lambda: self.edited.emit(self.toPlainText()))

    def set_text(self, text: str) -> None:
        """Show `text`; the same text again is left alone (it would announce an edit nobody made)."""
        if text != self.toPlainText():
            self.setPlainText(text)


def prompt_row(prompt: QWidget, side: QLayout) -> QHBoxLayout:
    """The prompt taking the width, `side` (counts, buttons, options) at its right."""
    row = QHBoxLayout()
    row.addWidget(prompt, 1)
    row.addLayout(side)
    return row
