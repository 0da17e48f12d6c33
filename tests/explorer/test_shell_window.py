"""Main window: status bar, panels, menus, settings, errors (dialog + log line), failed loads."""
from __future__ import annotations

import logging
import logging.handlers
import sys

import pytest
from PySide6.QtCore import QSettings, QTimer

from explorer import app as app_module
from explorer.shell.window import MainWindow
from explorer.shell.registry import PANELS
from explorer.runtime.workers import MODEL_TASK


def _settings(tmp_path) -> QSettings:
    return QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)


@pytest.fixture
def log_file():
    """The app's real logging setup (file under the temporary XDG_STATE_HOME of conftest)."""
    path = app_module.setup_logging()
    yield path
    app_module.teardown_logging()


def test_status_bar_describes_the_model(window, tiny_session):
    labels = window.status_labels
    info = tiny_session.info
    assert labels["model"].text() == "tiny (test)"
    assert labels["trained"].text() == "UNTRAINED" and labels["trained"].property("trained") == "false"
    assert labels["device"].text() == "cpu" and labels["dtype"].text() == "float32"
    assert labels["params"].toolTip().startswith(f"{info.n_params:,} parameters")
    assert "weights" in labels["memory"].text()
    assert window.banner.isVisible() and "UNTRAINED" in window.banner.text()


def test_every_registered_panel_opens_from_its_tab(qtbot, window):
    assert [window.tabs.tabText(i) for i in range(window.tabs.count())] == [p.title for p in PANELS]
    for spec in PANELS:
        window.actions[f"panel_{spec.name}"].trigger()  # View menu (with its shortcut)
        assert window.current_panel_name() == spec.name
        assert window.panel(spec.name, create=False) is not None
        assert window.actions[f"panel_{spec.name}"].shortcut().toString() == spec.shortcut
    window.close()  # panels may still compute for the tiny model: closing cancels their work
    qtbot.waitUntil(lambda: not window.runner.busy, timeout=60000)


def test_menus_have_shortcuts_and_about_names_versions(window):
    import torch

    for key in ("load_gpt2", "open_file", "open_folder", "new_model", "quit", "about"):
        assert not window.actions[key].shortcut().isEmpty(), key
    text = window.about_text()
    assert f"torch {torch.__version__}" in text and "Qt " in text and "device: cpu" in text


def test_new_model_from_config_focuses_the_config_form(window):
    window.show_panel("residual")
    window.actions["new_model"].trigger()
    assert window.current_panel_name() == "config"


def test_window_remembers_geometry_and_panel(qtbot, tiny_session, runner, tmp_path):
    first = MainWindow(tiny_session, runner, settings=_settings(tmp_path))
    qtbot.addWidget(first)
    first.show()
    first.resize(700, 500)  # within the offscreen screen (800×600)
    first.show_panel("generation")
    first.close()
    second = MainWindow(tiny_session, runner, settings=_settings(tmp_path))
    qtbot.addWidget(second)
    assert second.current_panel_name() == "generation"
    assert (second.width(), second.height()) == (700, 500)


def test_window_paints_before_any_session_exists(qtbot, runner, tmp_path):
    w = MainWindow(None, runner, settings=_settings(tmp_path))
    qtbot.addWidget(w)
    w.show()
    assert w.panel("config") is None  # nothing to show yet, and nothing crashes
    assert w.status_labels["model"].text() == "(no model yet)"
    w.load_model("gpt2")  # a menu action before the session exists: a message, not a crash
    assert "starting" in w.statusBar().currentMessage().lower()


def test_fault_nothing_lost_after_a_failed_load(qtbot, window, tiny_session, tmp_path):
    config_view = window.show_panel("config").view
    config_view.inputs["n_layer"].setValue(7)  # the user's unsaved edit
    edited = config_view.values()
    bad = tmp_path / "broken.safetensors"
    bad.write_bytes(b"\x00\x01garbage")
    model, info, version = tiny_session.model, tiny_session.info, tiny_session.version
    window.load_model(str(bad))
    qtbot.waitUntil(lambda: window.error_dialog is not None, timeout=30000)
    qtbot.waitUntil(lambda: not window.runner.busy, timeout=30000)
    assert "broken.safetensors" in window.error_dialog.text()
    assert "is still loaded" in window.error_dialog.text()
    assert tiny_session.model is model and tiny_session.info is info and tiny_session.version == version
    assert window.status_labels["model"].text() == "tiny (test)"
    assert config_view.values() == edited
    window.error_dialog.close()


def test_fault_exception_in_a_worker_gives_dialog_and_log_line(qtbot, window, log_file):
    def broken(token, progress):
        raise RuntimeError("worker exploded on purpose")

    window.runner.submit("probe", broken)
    qtbot.waitUntil(lambda: window.error_dialog is not None, timeout=10000)
    assert "worker exploded on purpose" in window.error_dialog.text()
    assert "probe failed" in window.errors_shown[-1][0] or window.errors_shown[-1][0] == "Unexpected error"
    for handler in logging.getLogger("explorer").handlers:
        handler.flush()
    logged = log_file.read_text(encoding="utf-8")
    assert "worker exploded on purpose" in logged and "Traceback" in logged
    ticks = []
    QTimer.singleShot(0, lambda: ticks.append(1))  # the event loop still runs
    qtbot.waitUntil(lambda: ticks == [1], timeout=5000)
    window.error_dialog.close()


@pytest.mark.qt_no_exception_capture
def test_fault_exception_in_a_slot_gives_dialog_and_log_line(qtbot, window, log_file, monkeypatch):
    monkeypatch.setattr(sys, "excepthook", sys.excepthook)  # restored after the test
    app_module.install_exception_hook(lambda: window)

    def bad_slot():
        raise ValueError("slot exploded on purpose")

    QTimer.singleShot(0, bad_slot)
    qtbot.waitUntil(lambda: window.error_dialog is not None, timeout=10000)
    assert "slot exploded on purpose" in window.error_dialog.text()
    for handler in logging.getLogger("explorer").handlers:
        handler.flush()
    assert "slot exploded on purpose" in log_file.read_text(encoding="utf-8")
    window.show_panel("config").view.inputs["n_layer"].setValue(3)  # still usable
    assert window.show_panel("config").view.values()["n_layer"] == 3
    window.error_dialog.close()


def test_fault_log_file_is_in_the_user_log_dir_and_rotates(log_file, tmp_path_factory):
    import os

    assert log_file.parent == app_module.log_dir()
    assert str(log_file).startswith(os.environ["XDG_STATE_HOME"])  # platformdirs' user log dir
    handler = next(h for h in logging.getLogger("explorer").handlers
                   if isinstance(h, logging.handlers.RotatingFileHandler))
    assert handler.maxBytes == app_module.LOG_MAX_BYTES and handler.backupCount == app_module.LOG_BACKUPS
    line = "x" * 1000
    for _ in range(app_module.LOG_MAX_BYTES // 1000 + 50):
        logging.getLogger("explorer.test").info(line)
    handler.flush()
    assert log_file.stat().st_size <= app_module.LOG_MAX_BYTES
    assert log_file.with_name(log_file.name + ".1").exists()


def test_model_task_progress_and_cancel_button(qtbot, window):
    import threading

    release = threading.Event()

    def slow_load(token, progress):
        progress(1, 4, "reading")
        while not token.cancelled:
            release.wait(0.01)
        token.raise_if_cancelled()

    window._run_model_task("Loading test", slow_load)
    assert window.cancel_button.isVisible()
    qtbot.waitUntil(lambda: window._progress is not None, timeout=5000)
    window.cancel_button.click()
    qtbot.waitUntil(lambda: not window.runner.is_running(MODEL_TASK), timeout=5000)
    assert window._progress is None and not window.cancel_button.isVisible()
    assert window.error_dialog is None  # cancelling is not an error


def test_fault_cuda_oom_in_a_forward_suggests_cpu_or_a_smaller_model(qtbot, window, tiny_session, monkeypatch):
    import torch

    def oom(*args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 7.79 GiB total)")

    monkeypatch.setattr(tiny_session.model, "forward", oom)

    def forward(token, progress):
        with tiny_session.lock, torch.inference_mode():
            return tiny_session.model(torch.tensor([[1, 2, 3]]))

    window.runner.submit("attention", forward)
    qtbot.waitUntil(lambda: window.error_dialog is not None, timeout=10000)
    assert window.error_dialog.windowTitle() == "Out of GPU memory"
    assert "--device cpu" in window.error_dialog.text() and "smaller model" in window.error_dialog.text()
    assert window.session.model is tiny_session.model and window.isVisible()
    window.error_dialog.close()


# --- error titles: our own ValueErrors are input problems, others stay unexpected -----------------------

def test_a_value_error_raised_by_our_code_gets_an_input_title():
    from explorer.controllers.errors import explain
    from explorer.session.core import Session

    with pytest.raises(ValueError) as ours:
        Session.tiny(vocab_size=500).check_token_ids([15496])  # 'Hello', beyond a 500-token vocabulary
    expl = explain(ours.value)
    assert expl.title == "Input not usable"
    assert "vocab_size=500" in expl.message and not expl.message.startswith("ValueError")

    with pytest.raises(ValueError) as inside_numpy:
        import numpy as np

        np.zeros(3).reshape(2)
    assert explain(inside_numpy.value).title == "Unexpected error"  # a library's ValueError is a bug of ours
    with pytest.raises(ValueError) as elsewhere:
        raise ValueError("raised outside gptcore and explorer")
    assert explain(elsewhere.value).title == "Unexpected error"
    assert explain(ValueError("no traceback: origin unknown")).title == "Unexpected error"


def test_fault_out_of_vocabulary_generation_is_an_input_problem_shown_in_the_pane(qtbot, runner, tmp_path, caplog):
    """The one error rule: a diagnosed input problem is shown where it happened (no dialog) and logged."""
    from explorer.session.core import Session

    window = MainWindow(Session.tiny(vocab_size=500), runner, settings=_settings(tmp_path))
    qtbot.addWidget(window)
    window.show()
    pane = window.show_panel("generation").controller
    pane.view.set_prompt_text("Hello world")  # 'Hello' is id 15496
    with caplog.at_level("ERROR", logger="explorer"):
        with qtbot.waitSignal(pane.generationFinished, timeout=30000) as finished:
            assert pane.start_generation()
        qtbot.waitUntil(lambda: not runner.busy, timeout=30000)
    assert finished.args == ["error"]
    status = pane.view.stream_status.text()
    assert "outside this model" in status and "vocab_size=500" in status
    assert window.error_dialog is None and not window.errors_shown
    assert any("outside this model" in r.getMessage() for r in caplog.records)


def test_size_option_sets_the_interactive_window_over_the_saved_geometry(qtbot, tiny_session, runner, tmp_path):
    from explorer.app import apply_size, parse_args

    saved = _settings(tmp_path)
    first = MainWindow(tiny_session, runner, settings=saved)
    qtbot.addWidget(first)
    first.resize(1280, 820)
    first.save_settings()
    first.close()
    window = MainWindow(tiny_session, runner, settings=saved)  # restores 1280×820
    qtbot.addWidget(window)
    apply_size(window, parse_args(["--size", "900x600"]))  # interactive: no --screenshot
    assert (window.width(), window.height()) == (900, 600)
    assert parse_args([]).size_wh is None  # without --size the saved geometry stays
