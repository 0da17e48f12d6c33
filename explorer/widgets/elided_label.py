"""A one-line label that gives way in a narrow window (status lines, hover read-outs)."""
from __future__ import annotations

from PySide6.QtCore import QEvent, Qt
from PySide6.QtGui import QPainter, QTextDocumentFragment
from PySide6.QtWidgets import QLabel, QSizePolicy, QToolTip, QWidget


class ElidedLabel(QLabel):
    """A one-line label that may shrink below its text: it then ends in '…' and its tooltip
    starts with the full text. Why: a plain label's text sets its window's minimum width (the
    status bar's labels made a 900-pixel window grow to 1,033)."""

    MIN_WIDTH = 48

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Preferred)

    def event(self, event) -> bool:  # noqa: N802 - Qt override
        """On hover, an elided label's tooltip starts with its whole text (decided now, not when
        painted, so it is right after every resize and every new text)."""
        if event.type() == QEvent.Type.ToolTip and self.is_elided():
            tip = self.toolTip()
            QToolTip.showText(event.globalPos(), f"{self.plain_text()}\n{tip}" if tip else self.plain_text(), self)
            return True
        return super().event(event)

    def minimumSizeHint(self):  # noqa: N802 - Qt override
        hint = super().minimumSizeHint()
        hint.setWidth(min(hint.width(), self.MIN_WIDTH))
        return hint

    def plain_text(self) -> str:
        """The text without markup (a rich-text label is elided as the words it shows)."""
        text = self.text()
        return QTextDocumentFragment.fromHtml(text).toPlainText() if "<" in text and ">" in text else text

    def is_elided(self) -> bool:
        return self.fontMetrics().horizontalAdvance(self.plain_text()) > self.contentsRect().width()

    def paintEvent(self, event) -> None:  # noqa: N802 - Qt override
        if not self.is_elided():
            super().paintEvent(event)
            return
        painter = QPainter(self)
        rect = self.contentsRect()
        plain = self.plain_text()
        elided = self.fontMetrics().elidedText(plain, Qt.TextElideMode.ElideRight, rect.width())
        painter.drawText(rect, int(Qt.AlignmentFlag.AlignVCenter | Qt.AlignmentFlag.AlignLeft), elided)
