"""Small builders for the panels' controls, said once: a check box with its tooltip and slot, a
titled form of rows, a note line that hides when it has nothing to say, widgets side by side, tabs
with their tooltips."""
from __future__ import annotations

from typing import Callable, Iterable

from PySide6.QtWidgets import QCheckBox, QFormLayout, QGroupBox, QHBoxLayout, QLabel, QLayout, QTabWidget, QWidget


def check_box(text: str, tip: str = "", on_toggled: Callable | None = None, checked: bool = False) -> QCheckBox:
    """A check box; `on_toggled(bool)` is connected after the initial state is set (no call for it)."""
    box = QCheckBox(text)
    box.setChecked(checked)
    box.setToolTip(tip)
    if on_toggled is not None:
        box.toggled.connect(on_toggled)
    return box


def form_group(title: str, rows: Iterable[tuple[str | None, QWidget | QLayout]]) -> QGroupBox:
    """A titled group of form rows: (label, field), or (None, a widget or layout across the row)."""
    group = QGroupBox(title)
    form = QFormLayout(group)
    for label, field in rows:
        if label is None:
            form.addRow(field)
        else:
            form.addRow(label, field)
    return group


def show_text(label: QLabel, text: str) -> None:
    """`text` in `label`, the label hidden while the text is empty."""
    label.setText(text)
    label.setVisible(bool(text))


def side_by_side(*widgets: QWidget) -> QWidget:
    """The widgets on one row, without a margin (two lists that belong together, as one tab's page)."""
    holder = QWidget()
    row = QHBoxLayout(holder)
    row.setContentsMargins(0, 0, 0, 0)
    for widget in widgets:
        row.addWidget(widget)
    return holder


def tab_pages(pages: Iterable[tuple[QWidget, str, str]]) -> QTabWidget:
    """Tabs of (page, name, tooltip), every name in view at 900 px too (no scroll buttons)."""
    tabs = QTabWidget()
    tabs.setUsesScrollButtons(False)
    for i, (page, name, tip) in enumerate(pages):
        tabs.addTab(page, name)
        tabs.setTabToolTip(i, tip)
    return tabs
