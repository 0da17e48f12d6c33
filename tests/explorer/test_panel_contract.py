"""The panel contract (controllers/base.py), for every registered panel:

- the window calls only what PanelController declares;
- one error path: a diagnosed input problem is shown in the panel (no dialog), anything else also
  opens the error dialog titled "Unexpected error"; both are logged;
- truthful views: after a model change (and, for residual, a settings change) the old data is gone
  or marked, in words the user sees.
"""
from __future__ import annotations

import logging

import pytest
from PySide6.QtCore import QSettings

from explorer.controllers.base import MODEL_CHANGED, PanelController, PanelPage
from explorer.shell.window import MainWindow
from explorer.shell.registry import PANELS
from explorer.session.core import Session

WAIT_MS = 30_000
pytestmark = pytest.mark.usefixtures("single_torch_thread")

SMALL_BUILD = dict(vocab_size=50257, block_size=48, n_layer=3, n_head=2, n_embd=32)


def _window(qtbot, session, runner, tmp_path) -> MainWindow:
    w = MainWindow(session, runner, settings=QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat))
    qtbot.addWidget(w)
    w.show()
    return w


def _quiet(qtbot, runner) -> None:
    qtbot.waitUntil(lambda: not runner.busy, timeout=WAIT_MS)


def _swap_model(window: MainWindow, **config) -> None:
    """What a Build in the Config panel does: a new model in the session, then every panel is told."""
    window.session.build({**SMALL_BUILD, **config}, "gpt2", 0)  # announced: the window and panels follow


def _kaput(*_args, **_kwargs):
    raise RuntimeError("kaput: a bug, not an input problem")


@pytest.mark.parametrize("spec", PANELS, ids=[s.name for s in PANELS])
def test_every_panel_is_a_view_plus_a_panel_controller(qtbot, window, spec):
    cls = spec.controller_class()
    assert issubclass(cls, PanelController) and cls.__name__.endswith("Controller")
    page = window.show_panel(spec.name)
    assert isinstance(page, PanelPage) and isinstance(page.controller, cls)
    assert type(page.view).__name__.endswith("Panel") and type(page.view).__module__.startswith("explorer.views.")
    qtbot.waitUntil(lambda: page.is_ready, timeout=WAIT_MS)  # every panel draws something by itself
    _quiet(qtbot, window.runner)


# --- one error path ------------------------------------------------------------------------------

def test_attention_errors_input_in_panel_bug_in_dialog(qtbot, runner, tmp_path, caplog, monkeypatch):
    window = _window(qtbot, Session.tiny(vocab_size=500), runner, tmp_path)
    page = window.show_panel("attention")
    with caplog.at_level(logging.ERROR, logger="explorer"):
        page.set_prompt("Hello world")  # 'Hello' is id 15496 >= 500
        qtbot.waitUntil(lambda: "outside this model" in page.view.status_label.text(), timeout=WAIT_MS)
        _quiet(qtbot, runner)
        assert window.error_dialog is None and not window.errors_shown
        monkeypatch.setattr(window.session.attention, "capture", _kaput)
        page.set_prompt("a b c")
        qtbot.waitUntil(lambda: window.error_dialog is not None, timeout=WAIT_MS)
    assert window.error_dialog.windowTitle() == "Unexpected error" and "kaput" in window.error_dialog.text()
    assert "kaput" in page.view.status_label.text()
    messages = [r.getMessage() for r in caplog.records]
    assert any("outside this model" in m for m in messages) and any("kaput" in m for m in messages)
    window.error_dialog.close()
    _quiet(qtbot, runner)


def test_residual_errors_input_in_panel_bug_in_dialog(qtbot, window, caplog, monkeypatch):
    page, view = _residual_page(qtbot, window, monkeypatch)
    with caplog.at_level(logging.ERROR, logger="explorer"):
        view.set_shape(2, 64, 5)  # 64 is not divisible by 5 heads: the config says how to fix it
        view.run_button.click()
        qtbot.waitUntil(lambda: "divisible" in view.status.text(), timeout=WAIT_MS)
        assert window.error_dialog is None
        view.set_shape(2, 64, 4)
        monkeypatch.setattr(window.session.residual, "norms", _kaput)
        view.run_button.click()
        qtbot.waitUntil(lambda: window.error_dialog is not None, timeout=WAIT_MS)
    assert window.error_dialog.windowTitle() == "Unexpected error" and "kaput" in view.status.text()
    assert sum("divisible" in r.getMessage() or "kaput" in r.getMessage() for r in caplog.records) >= 2
    window.error_dialog.close()
    _quiet(qtbot, window.runner)


def test_generation_errors_input_in_panel_bug_in_dialog(qtbot, runner, tmp_path, caplog, monkeypatch):
    window = _window(qtbot, Session.tiny(vocab_size=500), runner, tmp_path)
    pane = window.show_panel("generation").controller
    with caplog.at_level(logging.ERROR, logger="explorer"):
        pane.view.set_prompt_text("Hello world")
        pane.refresh_logits()
        qtbot.waitUntil(lambda: "outside this model" in pane.view.chart.note.text(), timeout=WAIT_MS)
        _quiet(qtbot, runner)
        assert window.error_dialog is None
        monkeypatch.setattr(window.session.generation, "next_token", _kaput)
        pane.view.set_prompt_text("a b")
        pane.refresh_logits()
        qtbot.waitUntil(lambda: window.error_dialog is not None, timeout=WAIT_MS)
    assert window.error_dialog.windowTitle() == "Unexpected error" and "kaput" in pane.view.chart.note.text()
    assert any("outside this model" in r.getMessage() for r in caplog.records)
    assert any("kaput" in r.getMessage() for r in caplog.records)
    window.error_dialog.close()
    _quiet(qtbot, runner)


def test_config_errors_input_in_panel_bug_in_dialog(qtbot, window, caplog, monkeypatch):
    from explorer.runtime.devices import BuildRefused
    from explorer.session import models as session_models

    page = window.show_panel("config")
    view = page.view

    def refuse(_cfg, _device=None):
        raise BuildRefused("needs 9.9 GB, 1.0 GB free; pick fewer layers")

    with caplog.at_level(logging.ERROR, logger="explorer"):
        monkeypatch.setattr(session_models, "check_fits", refuse)
        view.build_button.click()
        assert "9.9 GB" in view.build_status.text() and window.error_dialog is None
        monkeypatch.setattr(session_models, "check_fits", lambda *_a, **_k: None)
        monkeypatch.setattr(window.session, "build", _kaput)
        view.build_button.click()
        qtbot.waitUntil(lambda: window.error_dialog is not None, timeout=WAIT_MS)
    assert window.error_dialog.windowTitle() == "Unexpected error" and "kaput" in view.build_status.text()
    assert any("9.9 GB" in r.getMessage() for r in caplog.records)
    window.error_dialog.close()
    _quiet(qtbot, window.runner)


# --- truthful views after a model change ----------------------------------------------------------

def test_attention_clears_the_old_models_maps_then_draws_the_new_ones(qtbot, window):
    page = window.show_panel("attention")
    page.set_prompt("Every effort moves you to the")
    qtbot.waitUntil(lambda: page.controller.result is not None, timeout=WAIT_MS)
    _quiet(qtbot, window.runner)
    assert page.view.grid._L == 2 and "/ 128 tokens" in page.view.count_label.text()
    frames = []
    page.controller.drawn.connect(frames.append)
    _swap_model(window)
    # at once, before any new result: nothing of the old model is on screen
    assert page.view.grid._L == 0 and page.view.count_label.text() == ""
    assert MODEL_CHANGED in page.view.zoom.title and page.controller.result is None
    qtbot.waitUntil(lambda: bool(frames), timeout=WAIT_MS)
    assert frames[-1].version == window.session.version and page.view.grid._L == 3
    assert "/ 48 tokens" in page.view.count_label.text()
    _quiet(qtbot, window.runner)


def _generated(qtbot, window, tokens: int):
    """The generation pane after a greedy run of `tokens` tokens, settled."""
    pane = window.show_panel("generation").controller
    qtbot.waitUntil(lambda: pane.logits is not None, timeout=WAIT_MS)
    pane.view.set_settings(max_new_tokens=tokens, temperature=0.0)
    with qtbot.waitSignal(pane.generationFinished, timeout=WAIT_MS):
        assert pane.start_generation()
    _quiet(qtbot, window.runner)
    return pane


def test_generation_says_which_model_wrote_the_text_and_drops_the_old_bars(qtbot, window):
    pane = _generated(qtbot, window, 4)
    old_name = window.session.info.name
    _swap_model(window)
    status = pane.view.stream_status.text()
    assert f"written by {old_name}, the previous model" in status and "press Generate" in status
    assert pane.view.chart.bar_labels() == [] and MODEL_CHANGED in pane.view.chart.note.text()
    qtbot.waitUntil(lambda: pane.logits is not None and pane.logits.version == window.session.version,
                    timeout=WAIT_MS)
    assert pane.view.chart.bar_labels()  # recomputed for the new model
    _quiet(qtbot, window.runner)


def _residual_page(qtbot, window, monkeypatch):
    """The residual panel after its own first sweep (on a small shape), settled: nothing running."""
    from explorer.controllers import residual as residual_controller

    monkeypatch.setattr(residual_controller, "START_SHAPE", (2, 32, 2))
    page = window.show_panel("residual")
    qtbot.waitUntil(lambda: page.is_ready, timeout=WAIT_MS)
    _quiet(qtbot, window.runner)
    page.view.seeds_box.setValue(1)
    page.view.length_box.setValue(8)
    return page, page.view


def test_residual_marks_its_plot_when_a_measured_setting_changes(qtbot, window, monkeypatch):
    page, view = _residual_page(qtbot, window, monkeypatch)
    with qtbot.waitSignal(page.controller.drawn, timeout=WAIT_MS):
        view.run_button.click()
    assert view.stale_reason() == ""
    view.log_box.setChecked(not view.log_box.isChecked())  # drawing only: applies at once, nothing stale
    assert view.stale_reason() == ""
    view.ln_box.setCurrentIndex(1)  # post-LN: the plot shown is the pre-LN run
    assert "LayerNorm placement changed" in view.stale_reason() and "press Run" in view.stale_reason()
    norms_status = view.status.text()
    with qtbot.waitSignal(page.controller.drawn, timeout=WAIT_MS) as drawn:
        view.set_view("gradients")  # no data yet: runs with the new settings
    # What the re-run changed (never its timing text, which can read the same twice):
    # the gradients view was measured post-LN while the norms plot stays the pre-LN run.
    measured = page.controller.last_settings
    assert drawn.args[0] == "gradients" and measured["gradients"]["ln_placement"] == "post"
    assert measured["norms"]["ln_placement"] == "pre"
    assert view.stale_reason() == "" and view.status.text() == page.controller.statuses["gradients"]
    view.set_view("norms")  # back: the pre-LN plot, its own status, still marked
    assert view.status.text() == norms_status and "LayerNorm placement" in view.stale_reason()
    view.ln_box.setCurrentIndex(0)  # back to what was measured: the mark goes
    assert view.stale_reason() == ""
    _quiet(qtbot, window.runner)


def test_residual_marks_its_plot_when_the_model_gives_its_models_other_parts(qtbot, window, monkeypatch):
    page, view = _residual_page(qtbot, window, monkeypatch)
    with qtbot.waitSignal(page.controller.drawn, timeout=WAIT_MS):
        view.run_button.click()
    _swap_model(window, vocab_size=1000)  # the sweep's random models take the loaded model's vocabulary
    assert "the loaded model changed" in view.stale_reason()
    _quiet(qtbot, window.runner)


def test_config_shows_the_new_models_config_after_a_change(qtbot, window):
    page = window.show_panel("config")
    _swap_model(window)
    assert page.view.values()["n_layer"] == 3 and page.view.values()["block_size"] == 48
    assert window.session.info.name in page.view.loaded_label.text()
    _quiet(qtbot, window.runner)


def test_generation_text_after_a_settings_change_is_marked_without_blaming_the_model(qtbot, window):
    pane = _generated(qtbot, window, 3)
    window.session.interp.set_ablation([(0, 0)])  # announced as AblationChanged: every panel follows
    status = pane.view.stream_status.text()
    assert "written before the ablation changed (now 1 head ablated)" in status, status
    assert "previous model" not in status and "model changed" not in status, status
    qtbot.waitUntil(lambda: pane.view.chart.bar_labels() != [], timeout=WAIT_MS)  # recomputed
    _quiet(qtbot, window.runner)
