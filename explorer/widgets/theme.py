"""Look and feel from the `resources` package: stylesheet, icons, sample prompts.

Files are read through importlib.resources, so they are found the same way in a
checkout and in an installed wheel (no paths relative to this file).
"""
from __future__ import annotations

import functools
from importlib import resources

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QGuiApplication, QIcon, QPalette, QPixmap

RESOURCES = "resources"


def read_text(name: str) -> str:
    return resources.files(RESOURCES).joinpath(name).read_text(encoding="utf-8")


def read_bytes(name: str) -> bytes:
    return resources.files(RESOURCES).joinpath(name).read_bytes()


@functools.lru_cache(maxsize=1)
def sample_prompts() -> tuple[str, ...]:
    lines = read_text("sample_prompts.txt").splitlines()
    return tuple(line for line in lines if line.strip() and not line.startswith("#"))


def icon(name: str) -> QIcon:
    """An SVG icon from resources/icons (rendered by Qt's svg image plugin)."""
    pixmap = QPixmap()
    pixmap.loadFromData(read_bytes(f"icons/{name}.svg"), "SVG")
    return QIcon(pixmap)


def is_dark(app: QGuiApplication | None = None) -> bool:
    """Follow the system: Qt's colour-scheme hint where the platform gives one, else the palette."""
    app = app or QGuiApplication.instance()
    scheme = app.styleHints().colorScheme()
    if scheme == Qt.ColorScheme.Dark:
        return True
    if scheme == Qt.ColorScheme.Light:
        return False
    return app.palette().color(QPalette.ColorRole.Window).lightness() < 128


def _dark_palette() -> QPalette:
    p = QPalette()
    colours = {
        QPalette.ColorRole.Window: "#2b2d31", QPalette.ColorRole.WindowText: "#e6e6e6",
        QPalette.ColorRole.Base: "#1f2024", QPalette.ColorRole.AlternateBase: "#2b2d31",
        QPalette.ColorRole.Text: "#e6e6e6", QPalette.ColorRole.Button: "#34363c",
        QPalette.ColorRole.ButtonText: "#e6e6e6", QPalette.ColorRole.Highlight: "#3d6fb6",
        QPalette.ColorRole.HighlightedText: "#ffffff", QPalette.ColorRole.ToolTipBase: "#34363c",
        QPalette.ColorRole.ToolTipText: "#e6e6e6", QPalette.ColorRole.Link: "#8ab4f8",
        QPalette.ColorRole.PlaceholderText: "#8a8f98", QPalette.ColorRole.Mid: "#4a4f57",
    }
    for role, colour in colours.items():
        p.setColor(role, QColor(colour))
    return p


def apply_theme(app: QGuiApplication, force: str | None = None) -> str:
    """Install the light or dark stylesheet and matching pyqtgraph colours; returns which.

    `force` ("light"/"dark") overrides the system, with a matching Fusion palette (used for
    `--theme` and for screenshots of both looks)."""
    import pyqtgraph as pg

    if force in ("light", "dark"):
        app.setStyle("Fusion")
        app.setPalette(_dark_palette() if force == "dark" else app.style().standardPalette())
    dark = force == "dark" or (force not in ("light", "dark") and is_dark(app))
    app.setStyleSheet(read_text("style_dark.qss" if dark else "style_light.qss"))
    palette = app.palette()
    pg.setConfigOptions(
        background=palette.color(QPalette.ColorRole.Base),
        foreground=palette.color(QPalette.ColorRole.Text),
        antialias=True,
    )
    return "dark" if dark else "light"


def restyle(widget) -> None:
    """Re-apply the stylesheet after a dynamic property (e.g. `invalid`) changed."""
    style = widget.style()
    style.unpolish(widget)
    style.polish(widget)
    widget.update()
