"""A plot title that wraps instead of setting its plot's minimum width.

pyqtgraph's title is a LabelItem whose minimum width is its text's width: a long title
("direct effect of each head (last column: the layer's MLP) — click to ablate") made the DLA
map wider than its widget in a 900-px window, and the colour bar beside it was drawn outside
the widget (only its title showed). This label gives way: below its text's width it wraps
onto a second line (the title row holds two lines of a 9-pt title).
"""
from __future__ import annotations

import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtGui import QTextOption


class WrappingLabel(pg.LabelItem):
    MIN_WIDTH = 40

    def __init__(self, text: str = " ", parent=None, **args):
        super().__init__(text, parent=parent, **args)
        option = QTextOption(Qt.AlignmentFlag.AlignHCenter)
        option.setWrapMode(QTextOption.WrapMode.WordWrap)
        self.item.document().setDefaultTextOption(option)

    def resizeEvent(self, ev) -> None:  # noqa: N802 - Qt override
        self.item.setTextWidth(-1)  # its natural width first: wrap only when that does not fit
        width = self.size().width()
        if 0 < width < self.item.boundingRect().width():
            self.item.setTextWidth(width)
        super().resizeEvent(ev)

    def updateMin(self) -> None:  # noqa: N802 - pyqtgraph override
        super().updateMin()
        self.setMinimumWidth(min(self.minimumWidth(), self.MIN_WIDTH))
        width, height = self._sizeHint[Qt.SizeHint.MinimumSize]
        self._sizeHint[Qt.SizeHint.MinimumSize] = (min(width, self.MIN_WIDTH), height)
        self.updateGeometry()

    def is_wrapped(self) -> bool:
        return self.item.textWidth() > 0


def wrapping_title(plot: pg.PlotItem) -> WrappingLabel:
    """Put a WrappingLabel in the title's place of `plot` (then `plot.setTitle` works as before)."""
    old = plot.titleLabel
    plot.layout.removeItem(old)
    old.hide()  # kept as the plot's hidden child: deleting scene items by hand risks a crash at exit
    label = WrappingLabel("", parent=plot, size="11pt")
    plot.layout.addItem(label, 0, 1)
    plot.titleLabel = label
    return label
