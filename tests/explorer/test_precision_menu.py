"""View ▸ Generation precision and the status bar's dtype field (issues 28 and 34); --dtype parses.

The measurement is given to the session (its `measure` seam), so both outcomes are tested
whichever dtype wins on this machine."""
import pytest
import torch

from explorer import app as app_module
from explorer.session.bf16_speed import DecodeSpeed
from explorer.shell.precision_menu import PRECISION_TASK

FASTER = DecodeSpeed(fp32_ms=30.0, bf16_ms=16.1, machine="Test CPU 9000", torch_version=torch.__version__, tokens=12,
                     copy_bytes=475 << 20, packed_bytes=238 << 20)
SLOWER = DecodeSpeed(fp32_ms=20.0, bf16_ms=50.0, machine="Test CPU 9000", torch_version=torch.__version__)


def _measures(session, speed: DecodeSpeed) -> list:
    calls = []
    session.generation.precision.measure = lambda model, bf16_model: calls.append(1) or speed
    return calls


def _close(qtbot, window):
    window.close()
    qtbot.waitUntil(lambda: not window.runner.busy, timeout=60000)


def test_dtype_flag_defaults_to_fp32_and_takes_bf16():
    assert app_module.parse_args([]).dtype == "fp32"
    assert app_module.parse_args(["--dtype", "bf16"]).dtype == "bf16"
    with pytest.raises(SystemExit):
        app_module.parse_args(["--dtype", "fp16"])


def test_bf16_measured_faster_is_taken_and_its_speeds_shown(qtbot, window, tiny_session):
    calls = _measures(tiny_session, FASTER)
    actions = window.precision_actions
    assert actions["fp32"].isChecked() and window.status_labels["dtype"].text() == "float32"
    assert "measured when chosen" in actions["bf16"].text()
    actions["bf16"].trigger()
    qtbot.waitUntil(lambda: window.status_labels["dtype"].text() == "float32 · bf16 generation", timeout=30000)
    assert tiny_session.generation.precision.name == "bf16" and actions["bf16"].isChecked() and calls == [1]
    assert actions["bf16"].text() == "bf16 generation (streams 62 tok/s; fp32 33 tok/s; +475 MiB)"
    tip = actions["bf16"].toolTip()
    assert "16.1 ms/token" in tip and "Test CPU 9000" in tip
    assert tip.startswith("Streaming 12 tokens through generation's loop")  # what the figure is: not one step
    assert "the bf16 copy holds 475 MiB beside the fp32 weights (237 MiB of weights + 238 MiB packed" in tip
    tip = window.status_labels["dtype"].toolTip()
    assert "computed in fp32" in tip and "bf16 62.1 tok/s (16.1 ms/token), fp32 33.3 tok/s (30.0 ms/token)" in tip
    actions["fp32"].trigger()
    qtbot.waitUntil(lambda: window.status_labels["dtype"].text() == "float32", timeout=30000)
    assert "bf16 62.1 tok/s" in window.status_labels["dtype"].toolTip()  # still told what bf16 would give
    assert not window.errors_shown
    _close(qtbot, window)


def test_bf16_measured_slower_is_refused_once_with_its_figures(qtbot, window, tiny_session):
    _measures(tiny_session, SLOWER)
    window.precision_actions["bf16"].trigger()
    qtbot.waitUntil(lambda: bool(window.errors_shown), timeout=30000)
    title, message = window.errors_shown[-1]
    assert title == "bf16 is slower here"  # a refused choice, not "Input not usable"
    assert "50.0 ms in bf16 against 20.0 ms in fp32" in message and "Test CPU 9000" in message
    assert message.count("fp32.") == 1 and message.count("Generation stays fp32.") == 1
    assert "emulated" not in message and "avx512" not in message
    assert window.status_bar.currentMessage().startswith("bf16 is slower here: bf16 is not used")
    assert tiny_session.generation.precision.name == "fp32"
    assert window.precision_actions["fp32"].isChecked() and window.status_labels["dtype"].text() == "float32"
    assert window.precision_actions["bf16"].text() == "bf16 generation — slower here (streams 20 tok/s; fp32 50 tok/s)"
    _close(qtbot, window)


def test_dtype_bf16_at_start_is_asked_for_once_a_model_is_loaded(qtbot, window, tiny_session):
    """--dtype bf16 (start()): chosen at the first model change with a model, where it is measured
    on that model; refused here with the figures and what runs instead, said once."""
    calls = _measures(tiny_session, SLOWER)
    window._choose_precision_once_loaded("bf16")
    assert calls == []  # nothing before a model change
    window.modelChanged.emit()
    qtbot.waitUntil(lambda: bool(window.errors_shown), timeout=30000)
    title, message = window.errors_shown[-1]
    assert title == "bf16 is slower here" and message.count("Generation runs in fp32.") == 1
    assert "stays fp32" not in message and calls == [1]
    qtbot.waitUntil(lambda: not window.runner.is_running(PRECISION_TASK), timeout=30000)
    window.modelChanged.emit()  # later model changes do not ask again: no task submitted
    assert not window.runner.is_running(PRECISION_TASK) and len(window.errors_shown) == 1
    _close(qtbot, window)


def test_a_model_of_another_shape_is_measured_and_falls_back_to_fp32_where_slower(qtbot, window, tiny_session):
    """bf16 chosen for one model; a swap to a wider one (measured slower for it) measures the new
    shape on the compute thread and the status bar says generation runs fp32, with the figures."""
    widths = []

    def measure(model, bf16_model):
        widths.append(model.config.n_embd)
        return FASTER if model.config.n_embd == 64 else SLOWER

    tiny_session.generation.precision.measure = measure
    window.precision_actions["bf16"].trigger()
    qtbot.waitUntil(lambda: window.status_labels["dtype"].text() == "float32 · bf16 generation", timeout=30000)
    tiny_session.build(dict(tiny_session.config.to_dict(), n_embd=96), seed=1)  # the window follows its event
    qtbot.waitUntil(lambda: "bf16 slower here" in window.status_labels["dtype"].text(), timeout=30000)
    assert widths == [64, 96] and tiny_session.generation.precision.name == "bf16"
    assert window.status_labels["dtype"].text() == "float32 · fp32 generation (bf16 slower here)"
    assert "bf16 20.0 tok/s (50.0 ms/token), fp32 50.0 tok/s (20.0 ms/token)" in window.status_labels["dtype"].toolTip()
    assert window.precision_actions["bf16"].text().startswith("bf16 generation — slower here")
    assert tiny_session.generation.precision.model_for(tiny_session.model) is tiny_session.model
    assert not window.errors_shown
    _close(qtbot, window)
