"""One entry point each: the prompt (--prompt reaches a panel once, through set_prompt) and
ablation changes (every click and the status bar's Reset go through ctx.change_ablation)."""
from __future__ import annotations

import pytest
from PySide6.QtCore import QSettings

from explorer.shell.window import MainWindow

WAIT_MS = 30_000
pytestmark = pytest.mark.usefixtures("single_torch_thread")


def test_the_prompt_reaches_a_panel_once_and_nothing_else_is_computed(qtbot, tiny_session, runner, tmp_path):
    w = MainWindow(tiny_session, runner, settings=QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat),
                   prompt="Hello there", panel="attention")
    qtbot.addWidget(w)
    w.show()
    page = w.panel("attention")
    texts = []
    page.controller.drawn.connect(lambda r: texts.append(r.text))
    qtbot.waitUntil(lambda: page.controller.result is not None and not runner.busy, timeout=WAIT_MS)
    assert page.view.prompt_text() == "Hello there"
    assert set(texts) == {"Hello there"}  # never a capture of the default prompt first


def test_every_ablation_change_goes_through_the_one_entry_point(qtbot, window, monkeypatch):
    calls = []
    real = window.ctx.change_ablation
    monkeypatch.setattr(window.ctx, "change_ablation", lambda change, on_error: (calls.append(1),
                                                                                 real(change, on_error)))
    attention = window.show_panel("attention")
    qtbot.waitUntil(lambda: attention.controller.result is not None, timeout=WAIT_MS)
    attention.controller.toggle_ablation(0, 1)
    qtbot.waitUntil(lambda: window.session.interp.ablation.heads == ((0, 1),), timeout=WAIT_MS)
    attribution = window.show_panel("attribution")
    attribution.view.heads.cellClicked.emit(1, 2)
    qtbot.waitUntil(lambda: window.session.interp.ablation.heads == ((0, 1), (1, 2)), timeout=WAIT_MS)
    window.status_bar.ablation_label.linkActivated.emit("reset")
    qtbot.waitUntil(lambda: not window.session.interp.ablation.active, timeout=WAIT_MS)
    assert len(calls) == 3
    qtbot.waitUntil(lambda: not window.runner.busy, timeout=WAIT_MS)


def test_every_panel_exports_through_one_entry_point(qtbot, window, tmp_path, monkeypatch):
    """Attention, Attribution and Residual write files the same way: the folder last used, the
    error in the panel, "Exported PATH" in the status bar."""
    from PySide6.QtWidgets import QFileDialog

    asked = []
    target = {}
    monkeypatch.setattr(QFileDialog, "getSaveFileName",
                        staticmethod(lambda parent, title, start, filt: (asked.append((start, filt)) or target["path"], filt)))
    attention = window.show_panel("attention")
    qtbot.waitUntil(lambda: attention.controller.result is not None, timeout=WAIT_MS)
    target["path"] = str(tmp_path / "grid.png")
    attention.controller._export_dialog("grid-png")
    assert (tmp_path / "grid.png").stat().st_size > 1000
    assert asked[-1][0].endswith("attention-grid.png") and asked[-1][1] == "PNG image (*.png)"
    assert window.statusBar().currentMessage() == f"Exported {tmp_path / 'grid.png'}"
    attribution = window.show_panel("attribution")
    qtbot.waitUntil(lambda: attribution.controller.result is not None, timeout=WAIT_MS)
    target["path"] = str(tmp_path / "no-such-folder" / "bars.csv")
    attribution.controller._export_dialog("bars", "csv")
    assert "no-such-folder" in attribution.view.message.text() and window.error_dialog is None
    assert asked[-1][0].endswith("attribution-bars.csv") and asked[-1][1] == "CSV (*.csv)"
    qtbot.waitUntil(lambda: not window.runner.busy, timeout=WAIT_MS)
