"""The Attribution panel inside the main window: Ctrl+5, the status bar's ablation note and its
Reset, other panels told their results are out of date, and screenshot mode."""
import pytest
from PySide6.QtGui import QImage

WAIT = 30_000


@pytest.fixture
def attribution(qtbot, window, single_torch_thread):
    window.actions["panel_attribution"].trigger()
    page = window.panel("attribution")
    assert window.current_panel_name() == "attribution"
    qtbot.waitUntil(lambda: page.controller.result is not None and page.controller.census is not None, timeout=WAIT)
    return page


def test_ctrl_5_shows_the_panel(window, attribution):
    assert window.actions["panel_attribution"].shortcut().toString() == "Ctrl+5"
    assert attribution.is_ready


def test_ablation_shows_in_the_status_bar_and_reset_restores_every_panel(qtbot, window, attribution, tiny_session):
    attention = window.show_panel("attention")  # built, then behind the Attribution tab: it must catch up
    qtbot.waitUntil(lambda: attention.controller.result is not None, timeout=WAIT)
    window.show_panel("attribution")
    label = window.status_bar.ablation_label
    assert not label.isVisible()
    for layer, head in ((0, 1), (1, 2), (1, 3)):
        with qtbot.waitSignal(attribution.controller.drawn, timeout=WAIT):
            attribution.view.heads.cellClicked.emit(layer, head)
    assert tiny_session.interp.ablation.heads == ((0, 1), (1, 2), (1, 3))
    assert label.isVisible() and label.text().startswith("3 heads ablated · ") and "Reset" in label.text()
    assert attention.controller.stale  # hidden: marked, nothing run (it replays the change when shown)
    window.show_panel("attention")  # shown: it recomputes for the ablated model
    qtbot.waitUntil(lambda: attention.controller.result is not None
                    and attention.controller.result.version == tiny_session.version, timeout=WAIT)
    assert attention.view.grid.ablated == ((0, 1), (1, 2), (1, 3))
    window.show_panel("attribution")
    with qtbot.waitSignal(attribution.controller.drawn, timeout=WAIT):
        label.linkActivated.emit("reset")
    assert not tiny_session.interp.ablation.active and not label.isVisible()
    window.show_panel("attention")
    qtbot.waitUntil(lambda: attention.controller.result is not None
                    and attention.controller.result.version == tiny_session.version, timeout=WAIT)
    assert attention.view.grid.ablated == ()


def test_an_ablation_does_not_reset_the_config_form(qtbot, window, attribution):
    config = window.panel("config")
    form = config.view.inputs["n_layer"]
    form.setValue(7)
    with qtbot.waitSignal(attribution.controller.drawn, timeout=WAIT):
        attribution.view.heads.cellClicked.emit(0, 0)
    assert form.value() == 7  # an ablation is not a new model: the user's edits stay


def test_screenshot_mode_renders_the_attribution_panel(tmp_path, hf_checkpoint, run_screenshot):
    folder = hf_checkpoint()
    out = tmp_path / "shot.png"
    proc = run_screenshot(out, "attribution", "1100x700", "--model", str(folder), "--device", "cpu")
    assert proc.returncode == 0, proc.stderr[-2000:]
    img = QImage(str(out))
    assert not img.isNull() and (img.width(), img.height()) == (1100, 700)
    colours = {img.pixel(x, y) for x in range(0, 1100, 9) for y in range(0, 700, 9)}
    assert len(colours) > 20
