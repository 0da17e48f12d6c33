"""Panels compute only when seen (issue 32): a change marks every hidden panel stale and starts no
task of theirs; the panel in front recomputes; a hidden panel catches up when shown, its last result
kept on screen until the new one lands."""
from __future__ import annotations

import pytest

from explorer.shell.registry import PANELS

WAIT = 60_000
pytestmark = pytest.mark.usefixtures("single_torch_thread")

# Each panel's runner keys (what its controller submits under).
KEYS = {spec.name: set(spec.controller_class().task_keys) for spec in PANELS}


def _quiet(qtbot, window) -> None:
    qtbot.waitUntil(lambda: not window.runner.busy, timeout=WAIT)


def _build_all(qtbot, window) -> None:
    for spec in PANELS:
        page = window.show_panel(spec.name)
        qtbot.waitUntil(lambda page=page: page.is_ready, timeout=WAIT)
        _quiet(qtbot, window)


def _record(window) -> list[str]:
    keys: list[str] = []
    window.runner.submitted.connect(keys.append)
    return keys


def test_an_ablation_starts_no_task_of_a_hidden_panel_and_each_catches_up_when_shown(qtbot, window):
    _build_all(qtbot, window)
    window.show_panel("attention")
    _quiet(qtbot, window)
    keys = _record(window)
    window.ctx.change_ablation(lambda session: session.interp.toggle_head(0, 1), on_error=print)
    _quiet(qtbot, window)
    hidden = set().union(*(KEYS[name] for name in KEYS if name != "attention")) - {"ablation"}  # the change itself
    assert "attention" in keys, keys  # the panel in front recomputed
    assert not hidden & set(keys), f"hidden panels started {sorted(hidden & set(keys))}"
    stale = {name for name in KEYS if window.panel(name).controller.stale}
    assert stale >= {"attribution", "generation", "routes", "residual"}, stale
    assert "attention" not in stale

    attribution = window.panel("attribution")
    drawn_before = attribution.view.heads.values.copy()  # the last result, still on screen
    keys.clear()
    window.show_panel("attribution")
    assert attribution.view.heads.values.shape == drawn_before.shape  # kept while it recomputes
    assert "ablation changed" in attribution.view.status_label.text() or "computing" in attribution.view.status_label.text()
    session = window.session
    qtbot.waitUntil(lambda: attribution.controller.result.version == session.version, timeout=WAIT)
    assert "attribution" in keys and not attribution.controller.stale
    assert attribution.view.heads.drawn_marks() == [(0, 1)]  # the ablated head, on the new map


def test_a_model_swap_behind_the_config_tab_costs_only_the_config_panel(qtbot, window):
    _build_all(qtbot, window)
    window.show_panel("config")
    _quiet(qtbot, window)
    keys = _record(window)
    window.session.build(dict(vocab_size=50257, block_size=32, n_layer=1, n_head=2, n_embd=16), "gpt2", 0)
    _quiet(qtbot, window)
    computing = set().union(*(KEYS[name] for name in KEYS if name != "config"))
    assert not computing & set(keys), keys
    generation = window.show_panel("generation")
    qtbot.waitUntil(lambda: generation.controller.logits is not None
                    and generation.controller.logits.version == window.session.version, timeout=WAIT)


def test_a_panel_built_behind_another_tab_starts_nothing_until_shown(qtbot, window):
    window.show_panel("attention")
    _quiet(qtbot, window)
    keys = _record(window)
    page = window.panel("attribution")  # built, but not in front
    qtbot.wait(50)
    _quiet(qtbot, window)
    assert not KEYS["attribution"] & set(keys), keys
    assert page.controller.result is None
    window.show_panel("attribution")
    qtbot.waitUntil(lambda: page.controller.result is not None, timeout=WAIT)
