"""The Circuits panel in the window (issue 38), on a real tiny model with real transcoders (trained once for
the module, then copied where each test's session looks for them): opens on the saved set's graph, a
clicked feature's contexts, Clamp for every panel (badge, Reset, the edited graph), training with
progress that reopens by itself, thresholds that re-prune, bad input said in the panel, the exports, and
a run's circuit over its kept steps."""
from __future__ import annotations

import json

import pytest

from explorer.session.circuits import store
from tests.explorer.tiny_transcoders import PROMPT, TEXT, copy_set_for, train_tiny_set

WAIT = 120_000
pytestmark = pytest.mark.usefixtures("single_torch_thread")


@pytest.fixture(scope="module")
def saved_set(tmp_path_factory):
    tset, corpus = train_tiny_set(tmp_path_factory.mktemp("circuits-panel"))
    return store.Path(tset.folder), corpus


def _open(qtbot, window, corpus=None, thresholds=None):
    window.actions["panel_circuits"].trigger()
    page = window.panel("circuits")
    c = page.controller
    if corpus is not None:
        c.corpus, c.corpus_path = "file", str(corpus)  # what Browse… sets
    if thresholds is not None:
        page.view.node_threshold.setValue(thresholds[0])
        page.view.edge_threshold.setValue(thresholds[1])
    return page


def _with_set(window, saved_set):
    folder, corpus = saved_set
    copy_set_for(window.session.info, folder)
    return corpus


def _quiet(qtbot, window):
    qtbot.waitUntil(lambda: not window.runner.busy, timeout=WAIT)


def test_ctrl_9_opens_the_saved_sets_graph_with_its_metrics(qtbot, window, saved_set):
    corpus = _with_set(window, saved_set)
    page = _open(qtbot, window, corpus)
    c, view = page.controller, page.view
    page.set_prompt(PROMPT)
    qtbot.waitUntil(lambda: c.graph is not None and c.graph.text == PROMPT, timeout=WAIT)
    _quiet(qtbot, window)
    assert window.actions["panel_circuits"].shortcut().toString() == "Ctrl+9"
    assert "variance unexplained" in view.metrics.text() and "CE loss recovered" in view.metrics.text()
    assert "corpus.txt" in view.metrics.text()  # the metrics read from beside the set say what they were measured on
    assert f"pruned to {c.graph.n_kept}" in view.info.text() and "transcoders miss" in view.info.text()
    assert view.plot.drawn_edges == len(c.graph.edge_weight) > 0
    assert view.plot.shown_ticks[-1] == (len(c.graph.tokens) - 1, "␣lazy")  # the last token is named, spaces shown
    assert window.errors_shown == []


def test_a_clicked_feature_shows_its_contexts_and_a_clamp_edits_every_panel_and_the_graph(qtbot, window, saved_set):
    corpus = _with_set(window, saved_set)
    page = _open(qtbot, window, corpus, thresholds=(1.0, 1.0))  # every node of this random model's graph
    c, view, session = page.controller, page.view, window.session
    qtbot.waitUntil(lambda: c.graph is not None, timeout=WAIT)
    _quiet(qtbot, window)
    g = c.graph
    i = max((i for i in range(g.n_kept) if g.kind[i] == 0), key=lambda i: g.influence[i])
    layer, feature = int(g.layer[i]), int(g.feature[i])
    with qtbot.waitSignal(c.detailed, timeout=WAIT):
        view.nodeSelected.emit(int(g.node_ids[i]))
    assert c.detail.feature == feature and view.detail.clamp.isEnabled()
    assert f"L{layer} #{feature}" in view.detail.title.text() and view.detail.incoming.texts()
    with qtbot.waitSignal(c.drawn, timeout=WAIT, check_params_cb=lambda graph: bool(graph.edits)):
        view.editRequested.emit(layer, feature, 5.0)
    assert session.interp.ablation.features == (((layer, feature), 5.0),)
    label = window.status_bar.ablation_label
    assert not label.isHidden() and f"L{layer} #{feature} → 5" in label.text()
    assert "edited" in view.info.text() and len(view.plot._rings.data) >= 1  # outlined, and the selection ring
    assert f"L{layer} #{feature} → 5" in view.detail.edits.plain_text()
    generation = window.panel("generation")
    assert generation.controller.stale or generation.controller.logits is None  # hidden: it catches up when shown
    selected = view.plot._selected  # the clicked node stays selected through the redraw
    assert selected >= 0 and (int(c.graph.layer[selected]), int(c.graph.feature[selected])) == (layer, feature)
    with qtbot.waitSignal(c.drawn, timeout=WAIT, check_params_cb=lambda graph: not graph.edits):
        label.linkActivated.emit("reset")
    assert not session.interp.ablation.active and label.isHidden()
    _quiet(qtbot, window)


def test_transcoders_train_in_the_background_and_the_panel_reopens_them_by_itself(qtbot, window, tmp_path):
    from explorer.shell.registry import find_panel

    corpus = tmp_path / "corpus.txt"
    corpus.write_text(TEXT, encoding="utf-8")
    page = _open(qtbot, window)
    c, view = page.controller, page.view
    qtbot.waitUntil(lambda: "Train transcoders" in view.status.text(), timeout=WAIT)  # none yet: offered, no dialog
    assert c.graph is None and window.errors_shown == []
    progress = []
    view.set_progress = lambda done, total, text: progress.append((done, total, text))
    with qtbot.waitSignal(c.drawn, timeout=WAIT):
        view.trainRequested.emit(dict(width=64, k=4, tokens=8192, corpus="file", path=str(corpus)))
    _quiet(qtbot, window)
    assert progress[0][2].startswith("reading every MLP's input and output") and progress[-1][0] == progress[-1][1]
    assert any("layer 1" in text for _d, _t, text in progress)  # each layer's fit is reported
    folder = store.Path(c.tset.folder)
    assert (folder / "metrics.json").is_file() and (folder / "layer_1.safetensors").is_file()
    again = find_panel("circuits").build(window.ctx)  # the panel opened anew on this model (a restart)
    qtbot.addWidget(again)
    qtbot.waitUntil(lambda: again.controller.graph is not None, timeout=WAIT)
    assert again.controller.tset.folder == str(folder) and again.controller.tset.metrics == c.tset.metrics
    _quiet(qtbot, window)
    again.shutdown()


def test_thresholds_re_prune_the_kept_graph_and_bad_input_is_said_in_the_panel(qtbot, window, saved_set, monkeypatch):
    import gptcore

    corpus = _with_set(window, saved_set)
    page = _open(qtbot, window, corpus)
    c, view = page.controller, page.view
    qtbot.waitUntil(lambda: c.graph is not None, timeout=WAIT)
    _quiet(qtbot, window)
    full, calls = c.graph, []
    real = gptcore.attribution_graph
    monkeypatch.setattr(gptcore, "attribution_graph", lambda *a, **k: calls.append(1) or real(*a, **k))
    with qtbot.waitSignal(c.drawn, timeout=WAIT):
        view.node_threshold.setValue(0.3)
    assert not calls and c.graph.n_nodes == full.n_nodes and c.graph.n_kept <= full.n_kept
    assert c.graph.node_threshold == 0.3
    page.set_prompt("word " * 200)  # past the model's context (128 tokens)
    qtbot.waitUntil(lambda: "at most 128" in view.status.text(), timeout=WAIT)
    assert c.graph is None and view.plot.drawn_edges == 0 and window.errors_shown == []  # nothing half drawn
    assert "context is 128 tokens" in view.status.text()
    page.set_prompt(PROMPT)
    qtbot.waitUntil(lambda: c.graph is not None, timeout=WAIT)
    window.session.interp.set_ablation([(0, 1)])
    qtbot.waitUntil(lambda: "ablation is in force" in view.status.text(), timeout=WAIT)
    assert c.graph is None and view.plot.drawn_edges == 0 and window.errors_shown == []
    window.session.interp.clear_ablation()
    qtbot.waitUntil(lambda: c.graph is not None, timeout=WAIT)
    _quiet(qtbot, window)


def test_the_graph_exports_as_circuit_tracer_json_and_its_kept_edges_as_csv(qtbot, window, saved_set, tmp_path):
    corpus = _with_set(window, saved_set)
    page = _open(qtbot, window, corpus)
    c = page.controller
    qtbot.waitUntil(lambda: c.graph is not None, timeout=WAIT)
    _quiet(qtbot, window)
    assert c.export("graph-json", str(tmp_path / "viewer" / "my-circuit.json"))
    data = json.loads((tmp_path / "viewer" / "my-circuit.json").read_text(encoding="utf-8"))
    assert data["metadata"]["slug"] == "my-circuit" and data["metadata"]["prompt"] == c.graph.text
    assert len(data["links"]) == len(c.graph.edge_weight)  # the same pruning as drawn
    index = json.loads((tmp_path / "viewer" / "graph-metadata.json").read_text(encoding="utf-8"))
    assert [g["slug"] for g in index["graphs"]] == ["my-circuit"]
    assert c.export("edges-csv", str(tmp_path / "edges.csv"))
    lines = (tmp_path / "edges.csv").read_text(encoding="utf-8").splitlines()
    header = [line for line in lines if line.startswith("#")]
    assert any(line.startswith("# model:") for line in header) and any(line.startswith("# features:") for line in header)
    assert any(line.startswith("# prompt:") for line in header)
    assert len([line for line in lines if not line.startswith("#")]) == 1 + len(c.graph.edge_weight)


def test_a_runs_circuit_over_its_kept_steps_and_the_step_shown_opens_its_own_set(qtbot, window, tmp_path):
    from tests.explorer.test_session_features import _char_run

    root = tmp_path / "run"
    _char_run(root)
    window.open_run(str(root))
    session = window.session
    qtbot.waitUntil(lambda: session.info.run is not None and session.info.run.step == 20, timeout=WAIT)
    page = _open(qtbot, window, thresholds=(1.0, 1.0))
    c, view = page.controller, page.view
    page.set_prompt("abc cab ba ac")
    qtbot.waitUntil(lambda: "Train transcoders" in view.status.text(), timeout=WAIT)
    assert view.form.corpus.currentData() == "run"  # a run's model trains on its own data
    with qtbot.waitSignal(c.formed, timeout=WAIT):  # trained, then walked over the kept steps, then measured
        view.trainRequested.emit(dict(width=32, k=4, tokens=8192, corpus="run", path=""))
    assert list(c.formation.steps) == [0, 10, 20]
    assert f"formed at step {c.formation.formed_step:,}" in view.info.text()
    assert sorted(p.name for p in (root / "transcoders").iterdir() if p.is_dir()) == [
        "gpt2-step000000-w32-k4-walk", "gpt2-step000010-w32-k4-walk", "gpt2-step000020-w32-k4"]
    _quiet(qtbot, window)
    follower = session.training.follower_for(root)
    session.training.show_step(follower, "gpt2", 10)  # what the Train panel's slider does
    qtbot.waitUntil(lambda: c.graph is not None and c.graph.step == 10 and c.tset is not None and c.tset.walked,
                    timeout=WAIT)
    assert c.tset.folder.endswith("gpt2-step000010-w32-k4-walk")
    assert "walked from a neighbouring step" in view.metrics.text() and "variance unexplained" in view.metrics.text()
    _quiet(qtbot, window)


def test_the_training_eta_reads_in_minutes_and_hours(monkeypatch):
    """A GPT-2-small set on a laptop's CPU takes most of an hour: "about 3258 s left" said it badly."""
    import types

    from explorer.controllers import dictionary_panel
    from explorer.controllers.dictionary_panel import DictionaryPanelPart

    shown = []
    part = object.__new__(DictionaryPanelPart)
    part.view = types.SimpleNamespace(set_progress=lambda done, total, text: shown.append(text))
    part._started = 100.0
    monkeypatch.setattr(dictionary_panel.time, "monotonic", lambda: 130.0)  # 30 s for the first 1 % of the work
    part._progress(1, 100, "layer 0: variance unexplained 0.187")
    part._progress(50, 100, "layer 6")
    part._progress(100, 100, "layer 11")  # done: no estimate
    assert shown == ["layer 0: variance unexplained 0.187 · about 49 min 30 s left", "layer 6 · about 30 s left",
                     "layer 11"]
