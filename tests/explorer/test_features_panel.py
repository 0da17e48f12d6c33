"""The Features panel in the window (issue 33): opens on a layer's neurons, shows a feature's contexts and
the prompt's features, clamps a feature for every panel (badge and Reset), trains an SAE in the background
with progress, and exports its table with the metadata header."""
from __future__ import annotations

import pytest

WAIT = 120_000
pytestmark = pytest.mark.usefixtures("single_torch_thread")
TEXT = "the quick brown fox jumps over the lazy dog while the cat sleeps on the warm mat " * 60


@pytest.fixture
def features(qtbot, window, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    window.actions["panel_features"].trigger()
    page = window.panel("features")
    c = page.controller
    path = tmp_path / "corpus.txt"
    path.write_text(TEXT, encoding="utf-8")
    c.corpus, c.corpus_path = "file", str(path)  # what Browse… sets: a small corpus keeps the test quick
    c.refresh()
    qtbot.waitUntil(lambda: c.table is not None and c.detail is not None and c.table.corpus == "corpus.txt",
                    timeout=WAIT)
    qtbot.waitUntil(lambda: not window.runner.busy, timeout=WAIT)
    return page


def test_ctrl_8_opens_a_layers_neurons_with_a_feature_and_the_prompts_chips(qtbot, window, features):
    c, view = features.controller, features.view
    assert window.actions["panel_features"].shortcut().toString() == "Ctrl+8"
    assert c.table.source.kind == "neurons" and len(c.table.ids) == window.session.config.d_mlp
    assert view.table.model.rowCount() == len(c.table.ids)
    assert c.detail.feature == view.selected_feature() and c.detail.contexts
    qtbot.waitUntil(lambda: c.prompt_result is not None, timeout=WAIT)
    assert c.prompt_result.selected == c.detail.feature
    view.tokenClicked.emit(0)  # the first chip: its strongest features, listed
    first = c.prompt_result.tokens[0]
    listed = view.prompt.token_features.text()
    assert repr(first).strip("'") in listed or first.strip() in listed, listed
    assert str(int(c.prompt_result.top_ids[0][0])) in listed
    other = int((c.detail.feature + 1) % len(c.table.ids))
    with qtbot.waitSignal(c.detailed, timeout=WAIT):
        view.featureSelected.emit(other)
    assert c.detail.feature == other


def test_clamping_a_feature_edits_the_model_for_every_panel_and_reset_clears_it(qtbot, window, features):
    c, view, session = features.controller, features.view, window.session
    feature = c.detail.feature
    with qtbot.waitSignal(c.drawn, timeout=WAIT):  # the table is measured again on the edited model
        view.editRequested.emit(feature, 4.0)
    assert session.interp.ablation.features == ((feature, 4.0),)
    label = window.status_bar.ablation_label
    assert not label.isHidden() and f"feature {feature} → 4" in label.text()
    assert f"feature {feature} → 4" in view.detail.edit_bar.edits.plain_text()
    generation = window.panel("generation")
    assert generation.controller.stale or generation.controller.logits is None  # hidden: it catches up when shown
    label.linkActivated.emit("reset")
    qtbot.waitUntil(lambda: not session.interp.ablation.active, timeout=WAIT)
    qtbot.waitUntil(lambda: not window.runner.busy, timeout=WAIT)
    assert label.isHidden()


def test_an_sae_trains_in_the_background_and_is_reopened_from_where_it_was_saved(qtbot, window, features):
    c, view = features.controller, features.view
    progress = []
    view.set_progress = lambda done, total, text: progress.append((done, total, text))
    with qtbot.waitSignal(c.drawn, timeout=WAIT):
        view.trainRequested.emit(dict(layer=1, site="resid", width=64, k=4, tokens=16_384, corpus="file",
                                      path=c.corpus_path))
    assert c.table.source.kind == "sae" and c.table.metrics["l0"] == pytest.approx(4.0)
    assert "explained variance" in view.metrics.text() and "CE loss recovered" in view.metrics.text()
    assert progress[0][2] == "reading activations…" and progress[-1][0] == progress[-1][1]  # it reached its end
    folder = c.table.source.folder
    view.dictionaryRequested.emit("neurons", 1, "mlp")
    qtbot.waitUntil(lambda: c.table.source.kind == "neurons", timeout=WAIT)
    view.dictionaryRequested.emit("sae", 1, "resid")  # chosen again: the saved one, not a new training
    qtbot.waitUntil(lambda: c.table.source.kind == "sae", timeout=WAIT)
    assert c.table.source.folder == folder
    from explorer.shell.registry import find_panel

    again = find_panel("features").build(window.ctx)  # the panel opened anew on this model (a restart)
    qtbot.addWidget(again)
    assert again.controller.wanted == ("sae", 1, "resid")  # it reopens the saved SAE by itself
    qtbot.waitUntil(lambda: again.controller.table is not None, timeout=WAIT)
    assert again.controller.table.source.folder == folder
    qtbot.waitUntil(lambda: not window.runner.busy, timeout=WAIT)
    again.shutdown()


def test_the_table_exports_with_the_model_and_corpus_header(qtbot, window, features, tmp_path):
    c = features.controller
    path = tmp_path / "features.csv"
    assert c.export("table-csv", str(path))
    lines = path.read_text(encoding="utf-8").splitlines()
    header = [line for line in lines if line.startswith("#")]
    assert any(line.startswith("# model:") for line in header) and any("corpus.txt" in line for line in header)
    rows = [line for line in lines if not line.startswith("#")]
    assert rows[0].startswith("feature,") and len(rows) == 1 + len(c.table.ids)


def test_asking_for_an_sae_that_was_never_trained_says_how_to_get_one(qtbot, window, features):
    c, view = features.controller, features.view
    view.dictionaryRequested.emit("sae", 0, "mlp")
    qtbot.waitUntil(lambda: "Train SAE" in view.status.text(), timeout=WAIT)
    assert window.errors_shown == []  # an input problem, said in the panel: no dialog


def test_an_sae_trained_on_a_runs_step_walks_the_kept_steps_and_charts_the_feature_over_training(
        qtbot, window, tmp_path, monkeypatch):
    from tests.explorer.test_session_features import _char_run

    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    root = tmp_path / "run"
    _char_run(root)
    window.open_run(str(root))  # its latest step becomes every panel's model (issue 32)
    qtbot.waitUntil(lambda: window.session.info.run is not None and window.session.info.run.step == 20, timeout=WAIT)
    window.actions["panel_features"].trigger()
    page = window.panel("features")
    c, view = page.controller, page.view
    qtbot.waitUntil(lambda: c.table is not None, timeout=WAIT)
    with qtbot.waitSignal(c.detailed, timeout=WAIT, check_params_cb=lambda d: "formed at step" in view.detail.title.text()):
        view.trainRequested.emit(dict(layer=0, site="resid", width=32, k=4, tokens=8192, corpus="run", path=""))
    assert "its token over training:" in view.detail.title.text()
    chart = view.detail.training_chart
    assert view.detail.tabs.isTabEnabled(1) and chart.series_names == ["density %", "max activation"]
    steps, values = chart.curve_data("density %")
    assert list(steps) == [0, 10, 20] and chart.marker_step("density %") == 20  # the step on screen
    # the table's own density at the step shown (the same sample, the model itself), in the table's percent
    assert values[-1] == pytest.approx(100 * c.table.density[c.detail.feature], abs=1e-6)
    # the default prompt has characters this model lacks: the run's own text is put in its place, and read
    qtbot.waitUntil(lambda: c.prompt_result is not None, timeout=WAIT)
    assert set(view.prompt_text()) <= set("\n abc") and view.prompt_text() == c.prompt_result.text
    qtbot.waitUntil(lambda: not window.runner.busy, timeout=WAIT)
    # both the training and the walk ended: the form is back, the progress line gone
    assert view.source.train.isEnabled() and not view.source.cancel.isEnabled() and view.source.progress_row.isHidden()


@pytest.mark.qt  # the controller imports Qt
def test_a_features_token_history_names_each_change_with_its_step():
    import types

    import numpy as np

    from explorer.controllers.features import token_history

    over = types.SimpleNamespace(steps=np.array([0, 10, 20]), labels=(("a", ""), ("a", "c"), ("x", "c")))
    assert token_history(over, 0) == "'a' (0) → 'x' (20)"
    assert token_history(over, 1) == "none (0) → 'c' (10)"


def test_cancel_stops_the_walk_over_training_as_well_as_the_training(features, monkeypatch):
    """Cancel is enabled while the walk over a run's steps runs after an SAE's training: it must name the
    walk's task too, or it would do nothing then (it named only the training's)."""
    from explorer.controllers.features_training import KEYS

    c, view = features.controller, features.view
    asked = []
    monkeypatch.setattr(c.ctx.runner, "cancel", lambda key: asked.append(key))
    view.cancelRequested.emit()
    assert set(asked) == {KEYS["train"], KEYS["over"]}
