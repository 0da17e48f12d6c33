"""Issue 23: scrolling the Config form with the mouse wheel changed `norm` (layernorm → rmsnorm)
and the parameter count without a word. With explorer.widgets.wheel_guard installed (as app.main does),
a wheel turn over a field that was never clicked edits nothing and scrolls the form instead;
after a click the wheel edits the field as before."""
from __future__ import annotations

import pytest
from PySide6.QtCore import QPoint, QPointF, Qt
from PySide6.QtGui import QWheelEvent
from PySide6.QtWidgets import QAbstractSpinBox, QApplication, QComboBox

import explorer.widgets.wheel_guard as wheel_guard
from explorer.controllers.base import PanelPage
from explorer.controllers.config import ConfigController


@pytest.fixture
def page(qtbot, panel_context, qapp):
    wheel_guard.install(qapp)
    p = PanelPage(panel_context, ConfigController)
    qtbot.addWidget(p)
    p.resize(700, 260)  # short: the form scrolls
    p.show()
    qtbot.waitExposed(p)
    p.activateWindow()
    return p


def wheel(widget, steps: int = -1) -> None:
    """One notch (120 = 15°) down per step, delivered as Qt delivers a real wheel turn."""
    centre = QPointF(widget.rect().center())
    glob = QPointF(widget.mapToGlobal(widget.rect().center()))
    event = QWheelEvent(centre, glob, QPoint(0, 0), QPoint(0, 120 * steps), Qt.MouseButton.NoButton,
                        Qt.KeyboardModifier.NoModifier, Qt.ScrollPhase.NoScrollPhase, False)
    QApplication.sendEvent(widget, event)


def form_scroll(page):
    return page.view.form_scroll.verticalScrollBar()  # the form's own (the readout scrolls too)


def test_wheel_over_unclicked_fields_scrolls_the_form_and_edits_nothing(page, qtbot):
    view = page.view
    norm, n_layer = view.inputs["norm"], view.inputs["n_layer"]
    before, count = view.values(), view.total_label.text()
    bar = form_scroll(page)
    assert bar.maximum() > 0  # the form really is taller than its view
    for field in (norm, n_layer, view.preset, view.seed):
        assert field.focusPolicy() == Qt.FocusPolicy.StrongFocus
        assert not field.hasFocus()
        wheel(field, -2)
        assert not field.hasFocus()  # the wheel no longer focuses a field either
    assert view.values() == before and view.total_label.text() == count
    assert bar.value() > 0  # the turns went to the scroll area: the form scrolled


def test_after_a_click_the_wheel_edits_the_field(page, qtbot):
    view = page.view
    n_layer, norm = view.inputs["n_layer"], view.inputs["norm"]
    start = n_layer.value()
    n_layer.ensurePolished()
    qtbot.mouseClick(n_layer.lineEdit(), Qt.MouseButton.LeftButton)
    qtbot.waitUntil(n_layer.hasFocus, timeout=2000)
    wheel(n_layer, +1)
    assert n_layer.value() == start + 1
    first = norm.currentIndex()
    norm.setFocus(Qt.FocusReason.MouseFocusReason)  # a click on a combo opens its popup; focus is what counts
    qtbot.waitUntil(norm.hasFocus, timeout=2000)
    wheel(norm, -1)
    assert norm.currentIndex() == first + 1
    assert view.values()["norm"] == norm.currentText()


def test_every_spin_box_and_combo_of_the_app_is_guarded(qtbot, qapp):
    """Any field made later (panels are built lazily) is guarded the moment Qt polishes it."""
    from PySide6.QtWidgets import QSpinBox, QWidget

    wheel_guard.install(qapp)
    assert wheel_guard.install(qapp) is qapp.findChild(wheel_guard.WheelGuard)  # installed once
    host = QWidget()
    qtbot.addWidget(host)
    spin, combo = QSpinBox(host), QComboBox(host)
    combo.addItems(["a", "b"])
    host.show()
    qtbot.waitExposed(host)
    for field in (spin, combo):
        assert isinstance(field, (QAbstractSpinBox, QComboBox))
        assert field.focusPolicy() == Qt.FocusPolicy.StrongFocus
    wheel(spin, +3)
    wheel(combo, -1)
    assert (spin.value(), combo.currentIndex()) == (0, 0)
