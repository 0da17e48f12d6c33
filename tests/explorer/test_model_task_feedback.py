"""Issue 23: with a bad --model the "Loading GPT-2 small" progress dialog opened over the error
dialog that explained the failure, and "Downloading GPT-2 small…" showed twice in the status bar."""
from __future__ import annotations

import pytest

pytestmark = pytest.mark.usefixtures("single_torch_thread")


def test_a_model_task_is_announced_once(qtbot, window):
    started = []
    window._run_model_task("Downloading GPT-2 small", lambda token, progress: started.append(1) or None)
    assert window.status_labels["activity"].text() == "Downloading GPT-2 small…"
    assert "Downloading GPT-2 small" not in window.statusBar().currentMessage()  # not a second time
    qtbot.waitUntil(lambda: not window.runner.busy, timeout=10000)
    assert started and window.status_labels["activity"].text() == ""


def test_the_progress_dialog_waits_while_an_error_is_open(qtbot, window, tmp_path):
    window.load_model(str(tmp_path / "no-such-model"))  # a bad --model: the error dialog opens
    qtbot.waitUntil(lambda: window.error_dialog is not None and not window.runner.busy, timeout=10000)
    window._show_progress("Loading GPT-2 small", 1, 10, "reading")
    assert window._progress is None  # nothing stacked over the explanation
    window.error_dialog.close()
    window._show_progress("Loading GPT-2 small", 2, 10, "reading")
    assert window._progress is not None and "Loading GPT-2 small" in window._progress.labelText()
    window._close_progress()
