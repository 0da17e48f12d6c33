"""Issue 23: the Generation pane's hint ("… Ctrl+Enter generates, Esc stops.") was one line, cut
at "…Ctrl+Enter" in a 900-px window. It now wraps to the pane's width, and goes with the text."""
from __future__ import annotations

from PySide6.QtGui import QFontMetrics

from explorer.widgets.token_stream import TokenStreamView


def _inked_rows(view) -> list[int]:
    """Rows of the viewport with any pixel unlike the background."""
    image = view.viewport().grab().toImage()
    background = image.pixel(image.width() - 3, image.height() - 3)
    return [y for y in range(image.height()) if any(image.pixel(x, y) != background for x in range(0, image.width(), 2))]


def test_the_hint_wraps_in_a_narrow_pane_and_leaves_with_the_text(qtbot):
    view = TokenStreamView()
    qtbot.addWidget(view)
    view.resize(260, 140)
    view.show()
    qtbot.waitExposed(view)
    line = QFontMetrics(view.font()).lineSpacing()
    assert QFontMetrics(view.font()).horizontalAdvance(view.hint) > 2 * view.viewport().width()  # needs 3 lines
    rows = _inked_rows(view)
    assert rows and max(rows) - min(rows) > 2 * line  # three lines of hint, not one cut short
    assert "Esc stops" in view.hint
    view.setPlainText("Hello")
    rows = _inked_rows(view)
    assert rows and max(rows) - min(rows) < line  # one line of text, no hint under it
