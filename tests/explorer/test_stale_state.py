"""Every piece of on-screen state is owned: for every panel, drive the window as a user would
— show data → swap the model (a GPT-2-style model → a 2-layer one → a Llama-style one) →
ablate → change a session setting — and after each step assert on the texts and items the
user sees. Each assertion names a stale text seen before issue 20 (hover lines, a hard-coded
"settings changed (e.g. an ablation)" reason, GPT-2 tokens in the Attribution pickers,
"computing…" next to an error, "648/648 patches" over empty maps, "Built custom…" under a
loaded model, "generation: 5.7 tokens/s" after a build, ablation crosses on empty charts,
axes on empty charts)."""
from __future__ import annotations

import pytest

from explorer.views.attribution.panel import Pick
from explorer.shell.registry import PANELS
from explorer.session.events import MODEL_CHANGED

WAIT_MS = 60_000
pytestmark = pytest.mark.usefixtures("single_torch_thread")

TWO_LAYER = dict(vocab_size=50257, block_size=64, n_layer=2, n_head=2, n_embd=32)
LLAMA_STYLE = dict(vocab_size=50257, block_size=64, n_layer=3, n_head=4, n_kv_head=2, n_embd=32,
                   pos_embedding="rope", norm="rmsnorm", mlp="swiglu", bias=False)


def _quiet(qtbot, window) -> None:
    qtbot.waitUntil(lambda: not window.runner.busy, timeout=WAIT_MS)


def _activity(window) -> str:
    return window.status_bar.labels["activity"].text()


# --- per panel: what "showing data" means, and what must hold after each event ------------------

def _show_attention(qtbot, window, page) -> None:
    c = page.controller
    qtbot.waitUntil(lambda: c.result is not None, timeout=WAIT_MS)
    _quiet(qtbot, window)
    page.view.grid.hoverText.emit("L1 H3 query tokens 5–6 … entropy 3.74")  # the mouse over a tile
    assert "entropy 3.74" in page.view.readout.text()


def _show_generation(qtbot, window, page) -> None:
    c = page.controller
    qtbot.waitUntil(lambda: c.logits is not None, timeout=WAIT_MS)
    page.view.set_settings(max_new_tokens=4, temperature=0.0)
    with qtbot.waitSignal(c.generationFinished, timeout=WAIT_MS):
        assert c.start_generation()
    _quiet(qtbot, window)
    assert "tokens/s" in _activity(window)  # the run's speed, in the status bar


def _show_attribution(qtbot, window, page) -> None:
    c, view = page.controller, page.view
    qtbot.waitUntil(lambda: c.result is not None, timeout=WAIT_MS)
    _quiet(qtbot, window)
    with qtbot.waitSignal(c.patched, timeout=WAIT_MS):
        view.run_button.click()
    _quiet(qtbot, window)
    assert view.progress.text().endswith("patches") and view.patch_maps["heads"].values.size
    top = [t.text for t in c.result.top]
    assert set(top) <= set(view.target.entries())


def _show_config(qtbot, window, page) -> None:
    view = page.view
    view.inputs["n_layer"].setValue(2)
    view.inputs["n_embd"].setValue(32)
    view.inputs["n_head"].setValue(2)
    with qtbot.waitSignal(window.modelChanged, timeout=WAIT_MS):
        view.build_button.click()
    qtbot.waitUntil(lambda: view.build_status.text().startswith("Built"), timeout=WAIT_MS)
    _quiet(qtbot, window)


def _show_residual(qtbot, window, page) -> None:
    qtbot.waitUntil(lambda: page.is_ready, timeout=WAIT_MS)
    _quiet(qtbot, window)


def _show_routes(qtbot, window, page) -> None:
    c, view = page.controller, page.view
    qtbot.waitUntil(lambda: c.graph is not None, timeout=WAIT_MS)
    _quiet(qtbot, window)
    assert "tokens" in view.status_label.text() and "→ predicts" in view.target_label.text()


def _show_train(qtbot, window, page) -> None:
    """A run followed and its latest step shown in the session (the Train panel's own texts)."""
    from tests.explorer.test_train_panel import _fake_run

    import tempfile
    from pathlib import Path

    c = page.controller
    run = Path(tempfile.mkdtemp(prefix="stale-state-")) / "run"
    _fake_run(run)
    window.open_run(str(run))
    qtbot.waitUntil(lambda: c.shown is not None and c.shown[2] == 20, timeout=WAIT_MS)
    _quiet(qtbot, window)
    assert "step 20 shown" in page.view.step_label.text()
    assert window.session.info.run is not None and window.session.info.run.step == 20


def _show_features(qtbot, window, page) -> None:
    c = page.controller
    qtbot.waitUntil(lambda: c.table is not None and c.detail is not None, timeout=WAIT_MS)
    _quiet(qtbot, window)
    assert "held-out tokens" in page.view.status.text()


def _show_circuits(qtbot, window, page) -> None:
    """Transcoders trained in the panel on a small text, then the prompt's graph."""
    import tempfile
    from pathlib import Path

    c = page.controller
    corpus = Path(tempfile.mkdtemp(prefix="stale-circuits-")) / "corpus.txt"
    corpus.write_text("the quick brown fox jumps over the lazy dog while the cat sleeps " * 80, encoding="utf-8")
    qtbot.waitUntil(lambda: "Train transcoders" in page.view.status.text(), timeout=WAIT_MS)  # none yet: offered
    with qtbot.waitSignal(c.drawn, timeout=WAIT_MS):
        page.view.trainRequested.emit(dict(width=64, k=4, tokens=8192, corpus="file", path=str(corpus)))
    _quiet(qtbot, window)
    assert c.graph.n_kept > 0 and "transcoders miss" in page.view.info.text()
    assert "variance unexplained" in page.view.metrics.text()


SHOW = {"circuits": _show_circuits, "features": _show_features, "attention": _show_attention, "generation": _show_generation, "attribution": _show_attribution,
        "config": _show_config, "residual": _show_residual, "routes": _show_routes, "train": _show_train}


def test_every_panel_of_the_registry_has_its_own_scenario():
    """A new panel is not done until this file says what it shows and what must hold after each event."""
    missing = [spec.name for spec in PANELS if spec.name not in SHOW]
    assert not missing, f"add a scenario (what it shows, what must hold after each event) for {missing}"


def _after_swap(window, page, name: str, old_model: str) -> None:
    """Right after the session announced another model, before anything was recomputed."""
    view = page.view
    assert "tokens/s" not in _activity(window)  # the old model's generation speed is gone
    assert window.status_bar.ablation_label.isHidden()
    if name == "attention":
        assert view.readout.text().strip() == ""  # the hover line named a head of the old picture
        assert MODEL_CHANGED in view.zoom.title
    elif name == "generation":
        status = view.stream_status.text()
        assert f"written by {old_model}, the previous model" in status, status
        assert "settings" not in status and "ablation" not in status, status
        chart = view.chart
        assert chart.bar_labels() == [] and not chart.plot.getAxis("bottom").isVisible()  # no "0 0 0 0 10.0%"
    elif name == "attribution":
        assert view.target.entries() == [Pick.TOP1]  # the old model's tokens are gone
        assert view.contrast.currentText() == view.contrast.itemText(0)  # back to the model's own top-2
        assert view.progress.text() == ""  # not "N/N patches" over empty maps
        assert not view.bars.plot.getAxis("left").isVisible()  # no ±0.2 axis around no bars
        for chart in view.patch_maps.values():
            assert chart.values.size == 0 and chart.drawn_marks() == []
            assert not chart.frame_shown()  # no ±0.4 colour bar and axes around nothing
    elif name == "config":
        assert not view.build_status.text().startswith("Built"), view.build_status.text()
        assert window.session.info.name in view.loaded_label.text()
    elif name == "residual":
        assert not any(old_model in n for n in view.curve_names())  # the old model's own curve is gone
    elif name == "routes":
        assert MODEL_CHANGED in view.detail.text() and view.target_label.text() == ""
        assert page.controller.graph is None  # the old prompt's graph is off screen
    elif name == "features":
        assert page.controller.table is None and page.view.table.model.rowCount() == 0  # the old model's features
    elif name == "circuits":  # the old model's graph, metrics and transcoders are gone
        c = page.controller
        assert c.graph is None and c.tset is None and view.plot.drawn_edges == 0 and view.info.text() == ""
        assert view.metrics.text() == "" and MODEL_CHANGED in view.status.text()
    elif name == "train":
        assert "another model is loaded" in view.step_label.text()  # not "step 20 shown" any more
        assert window.banner.isHidden() or "Training run" not in window.banner.text()


def _settled(qtbot, window, page, name: str) -> None:
    """After the recomputation landed: data for the current state, no leftover progress text."""
    _quiet(qtbot, window)
    c, view = page.controller, page.view
    if name == "attention":
        qtbot.waitUntil(lambda: c.result is not None and c.result.version == window.session.version, timeout=WAIT_MS)
        assert f"{c.result.n_tokens} tokens · capture" in view.status_label.text() and view.grid.displayed_tile(0, 0).size and len(c.result.entropy) == window.session.config.n_layer
    elif name == "attribution":
        qtbot.waitUntil(lambda: c.result is not None and c.result.version == window.session.version, timeout=WAIT_MS)
        assert "computing" not in view.status_label.text()
        assert set(t.text for t in c.result.top) <= set(view.target.entries())
        assert view.heads.values.shape == (window.session.config.n_layer, window.session.config.n_head + 1)
    elif name == "generation":
        qtbot.waitUntil(lambda: c.logits is not None and c.logits.version == window.session.version, timeout=WAIT_MS)
        assert view.chart.bar_labels() and view.chart.plot.getAxis("bottom").isVisible()
    elif name == "features":
        qtbot.waitUntil(lambda: c.table is not None and c.table.version == window.session.version
                        and c.detail is not None and c.detail.version == window.session.version, timeout=WAIT_MS)
        assert len(c.table.ids) == window.session.config.d_mlp or c.table.source.kind == "sae"
        assert "measuring" not in view.status.text()
    elif name == "routes":
        qtbot.waitUntil(lambda: c.result is not None and c.result.version == window.session.version, timeout=WAIT_MS)
        assert "computing" not in view.status_label.text() and "→ predicts" in view.target_label.text()
    elif name == "circuits":  # the new model has no transcoders: said, and training offered; nothing drawn
        qtbot.waitUntil(lambda: "Train transcoders" in view.status.text(), timeout=WAIT_MS)
        assert c.graph is None and view.plot.drawn_edges == 0 and "out of date" not in view.status.text()


def _after_ablation(window, page, name: str) -> None:
    view = page.view
    label = window.status_bar.ablation_label
    assert not label.isHidden() and label.text().startswith("1 head ablated")
    if name == "generation":
        status = view.stream_status.text()
        assert "written before the ablation changed (now 1 head ablated)" in status, status
        assert "previous model" not in status and "model changed" not in status, status
    elif name == "attribution":
        assert view.ablation_label.text().startswith("1 head ablated")
        for chart in view.patch_maps.values():  # no patching run on this model: no crosses on empty maps
            assert chart.drawn_marks() == []
    elif name == "config":
        assert window.session.info.name in view.loaded_label.text()  # an ablation is not a new model
    elif name == "routes":
        assert "ablation changed" in view.rank_label.text()  # the old ranking is marked: rank again
    elif name == "circuits":
        assert "ablation changed" in view.status.text()


def _after_ablation_settled(qtbot, window, page, name: str) -> None:
    _settled(qtbot, window, page, name)
    if name == "attribution":
        assert page.view.heads.drawn_marks() == [(0, 1)]  # the cross is on the drawn map, where it belongs
    elif name == "attention":
        assert page.view.grid.ablated == ((0, 1),)
    elif name == "routes":
        assert page.view.ablation_badge.text().startswith("1 head ablated")


def _after_setting(window, page, name: str) -> None:
    view = page.view
    if name == "attention":
        assert "the sampling rule changed" in view.zoom.title and view.readout.text().strip() == ""
    elif name == "attribution":
        assert all(chart.drawn_marks() == [] for chart in view.patch_maps.values())
    elif name == "generation":
        assert "the sampling rule changed" in view.chart.note.text()


@pytest.mark.parametrize("name", [spec.name for spec in PANELS])
def test_every_panel_shows_only_current_state_through_swaps_ablation_and_settings(qtbot, window, name):
    session = window.session
    page = window.show_panel(name)
    SHOW[name](qtbot, window, page)

    for shape, model_name in ((TWO_LAYER, "two-layer"), (LLAMA_STYLE, "llama-style")):
        old_model = session.info.name
        session.build(shape, "gpt2", 0, name=model_name)  # announced: the window and every panel follow
        _after_swap(window, page, name, old_model)
        _settled(qtbot, window, page, name)
        if name == "generation":  # a text of this model, for the next swap to relabel
            _show_generation(qtbot, window, page)

    session.interp.set_ablation([(0, 1)])
    _after_ablation(window, page, name)
    _after_ablation_settled(qtbot, window, page, name)

    session.settings_changed("the sampling rule")
    _after_setting(window, page, name)
    _settled(qtbot, window, page, name)
    assert window.errors_shown == []
