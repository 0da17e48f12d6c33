"""View ▸ Generation precision and the status bar's dtype field (issue 28); --dtype parses."""
import pytest

from explorer import app as app_module
from explorer.session import precision
from gptcore.training.speed import native_bf16


def test_dtype_flag_defaults_to_fp32_and_takes_bf16():
    assert app_module.parse_args([]).dtype == "fp32"
    assert app_module.parse_args(["--dtype", "bf16"]).dtype == "bf16"
    with pytest.raises(SystemExit):
        app_module.parse_args(["--dtype", "fp16"])


@pytest.mark.skipif(not native_bf16("cpu"), reason="bf16 is offered only with native bf16")
def test_choosing_bf16_shows_in_the_status_bar_and_back(qtbot, window, tiny_session):
    actions = window.precision_actions
    assert actions["fp32"].isChecked() and window.status_labels["dtype"].text() == "float32"
    actions["bf16"].trigger()
    qtbot.waitUntil(lambda: window.status_labels["dtype"].text() == "float32 · bf16 generation", timeout=30000)
    assert tiny_session.generation.precision.name == "bf16" and actions["bf16"].isChecked()
    assert "computed in fp32" in window.status_labels["dtype"].toolTip()
    actions["fp32"].trigger()
    qtbot.waitUntil(lambda: window.status_labels["dtype"].text() == "float32", timeout=30000)
    window.close()
    qtbot.waitUntil(lambda: not window.runner.busy, timeout=60000)


def test_bf16_where_it_would_be_emulated_is_refused_aloud(qtbot, window, tiny_session, monkeypatch):
    monkeypatch.setattr(precision, "native_bf16", lambda device: False)
    window.precision_actions["bf16"].trigger()
    qtbot.waitUntil(lambda: bool(window.errors_shown), timeout=30000)
    title, message = window.errors_shown[-1]
    assert "emulated" in message and "slower than fp32" in message
    assert tiny_session.generation.precision.name == "fp32"
    assert window.precision_actions["fp32"].isChecked() and window.status_labels["dtype"].text() == "float32"
    window.close()
    qtbot.waitUntil(lambda: not window.runner.busy, timeout=60000)
