"""Themes: a disabled control must look disabled in both looks (drawn, then measured)."""
from __future__ import annotations

import numpy as np
import pyqtgraph as pg
import pytest
from PySide6.QtGui import QImage
from PySide6.QtWidgets import QCheckBox, QComboBox, QPushButton, QSpinBox

import explorer.widgets.theme as theme


@pytest.fixture
def themed(qapp):
    """Yields apply_theme; puts the app's style, palette, stylesheet and plot colours back after."""
    saved = (qapp.style().name(), qapp.palette(), qapp.styleSheet(),
             pg.getConfigOption("background"), pg.getConfigOption("foreground"))
    yield lambda look: theme.apply_theme(qapp, look)
    style, palette, sheet, background, foreground = saved
    qapp.setStyle(style)
    qapp.setPalette(palette)
    qapp.setStyleSheet(sheet)
    pg.setConfigOptions(background=background, foreground=foreground)


def _combo() -> QComboBox:
    box = QComboBox()
    box.addItem("min–max over seeds")
    return box


def _text_contrast(widget, dark: bool) -> float:
    """How far the widget's text stands out from its background: the lightest pixel (dark
    look) or the darkest (light look) against the median pixel, in grey levels."""
    widget.resize(160, 30)
    image = widget.grab().toImage().convertToFormat(QImage.Format.Format_RGB32)
    pixels = np.frombuffer(image.constBits(), np.uint8).reshape(image.height(), image.bytesPerLine() // 4, 4)
    grey = pixels[:, :image.width(), :3].mean(axis=2)  # (H, W)
    background = float(np.median(grey))
    return float(grey.max()) - background if dark else background - float(grey.min())


@pytest.mark.parametrize("look", ["dark", "light"])
@pytest.mark.parametrize("make", [lambda: QPushButton("Cancel"), _combo, QSpinBox, lambda: QCheckBox("log y")],
                         ids=["button", "combo", "spinbox", "checkbox"])
def test_disabled_controls_are_drawn_greyed_out(qtbot, themed, look, make):
    themed(look)
    enabled, disabled = make(), make()
    disabled.setEnabled(False)
    for w in (enabled, disabled):
        qtbot.addWidget(w)
    live, greyed = _text_contrast(enabled, look == "dark"), _text_contrast(disabled, look == "dark")
    assert live > 40, f"the enabled control's text is barely visible ({live:.0f} grey levels)"
    assert greyed < 0.6 * live, f"disabled text stands out {greyed:.0f} grey levels vs {live:.0f} when enabled"
