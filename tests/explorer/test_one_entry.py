"""One entry point each: the prompt (--prompt reaches a panel once, through set_prompt) and
ablation changes (every click and the status bar's Reset go through ctx.change_ablation)."""
from __future__ import annotations

import pytest
from PySide6.QtCore import QSettings

from explorer.main_window import MainWindow

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
    qtbot.waitUntil(lambda: window.session.ablation.heads == ((0, 1),), timeout=WAIT_MS)
    attribution = window.show_panel("attribution")
    attribution.view.heads.cellClicked.emit(1, 2)
    qtbot.waitUntil(lambda: window.session.ablation.heads == ((0, 1), (1, 2)), timeout=WAIT_MS)
    window.status_bar.ablation_label.linkActivated.emit("reset")
    qtbot.waitUntil(lambda: not window.session.ablation.active, timeout=WAIT_MS)
    assert len(calls) == 3
    qtbot.waitUntil(lambda: not window.runner.busy, timeout=WAIT_MS)
