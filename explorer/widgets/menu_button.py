"""A tool button that opens a menu at once (the panels' "Export" buttons): one definition, so
every panel's button looks and behaves the same."""
from __future__ import annotations

from typing import Callable, Iterable

from PySide6.QtWidgets import QMenu, QToolButton


def menu_button(text: str, actions: Iterable[tuple[str, Callable[[], None]]]) -> QToolButton:
    """A button labelled `text` whose click pops up `actions`, (label, callback) pairs in order."""
    button = QToolButton()
    button.setText(text)
    button.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
    menu = QMenu(button)
    for label, callback in actions:
        menu.addAction(label, callback)
    button.setMenu(menu)
    return button
