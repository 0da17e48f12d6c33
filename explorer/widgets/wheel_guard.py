"""The mouse wheel scrolls forms; it edits a spin box or combo box only after it was clicked.

Qt's default lets a wheel turn over any spin box or combo box change its value, and even gives
the field focus as it does so: scrolling down the Config form flipped `norm` from layernorm to
rmsnorm without a word (issue 23). One application-wide event filter fixes it for every field
the app has now or adds later (panels are built lazily), instead of a subclass per widget:

- every QAbstractSpinBox and QComboBox is given Qt.StrongFocus as it is first polished (tab and
  click focus it; the wheel does not);
- a wheel event over such a field without focus never reaches it: it is handed to the nearest
  scroll area around the field (the form scrolls, as the user meant), or, with none, left
  unaccepted so that Qt passes it on to the parent.

Handing it on ourselves rather than only ignoring it: Qt propagates a wheel event to the parent
only when the window system sent it, so a synthesized one (an accessibility tool, a test) would
otherwise be lost.
"""
from __future__ import annotations

from PySide6.QtCore import QEvent, QObject, Qt
from PySide6.QtGui import QWheelEvent
from PySide6.QtWidgets import QAbstractScrollArea, QAbstractSpinBox, QApplication, QComboBox

_GUARDED = (QAbstractSpinBox, QComboBox)
_WHEEL, _POLISH = QEvent.Type.Wheel, QEvent.Type.Polish


class WheelGuard(QObject):
    """The filter itself; `install` puts one on the application."""

    def eventFilter(self, obj, event) -> bool:  # noqa: N802 - Qt's name
        kind = event.type()
        if kind == _POLISH:
            if isinstance(obj, _GUARDED):
                obj.setFocusPolicy(Qt.FocusPolicy.StrongFocus)
        elif kind == _WHEEL and isinstance(obj, _GUARDED) and not obj.hasFocus():
            area = _scroll_area_around(obj)
            if area is None:
                event.ignore()  # not accepted: QApplication passes a real wheel event on to the parent
            else:
                viewport = area.viewport()
                QApplication.sendEvent(viewport, QWheelEvent(
                    viewport.mapFromGlobal(event.globalPosition()), event.globalPosition(), event.pixelDelta(),
                    event.angleDelta(), event.buttons(), event.modifiers(), event.phase(), event.inverted()))
                event.accept()  # scrolled once, by the area: Qt must not pass it on again
            return True
        return False


def _scroll_area_around(widget) -> QAbstractScrollArea | None:
    parent = widget.parentWidget()
    while parent is not None:
        if isinstance(parent, QAbstractScrollArea) and not isinstance(parent, _GUARDED):
            return parent
        parent = parent.parentWidget()
    return None


def install(app: QApplication | None = None) -> WheelGuard:
    """Put the guard on `app` (the running QApplication by default) once; returns it."""
    app = app or QApplication.instance()
    guard = app.findChild(WheelGuard)
    if guard is None:
        guard = WheelGuard(app)  # parented: lives exactly as long as the application
        app.installEventFilter(guard)
    return guard
