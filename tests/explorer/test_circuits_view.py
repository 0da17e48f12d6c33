"""The Circuits panel's view alone (issue 38): numpy in, intent out. A hand-made graph of 2 layers and 6
positions: where its nodes stand, what its edges look like, what the pointer says, what a click asks for."""
from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtCore import QPointF, Qt

from explorer.session.circuits.results import CircuitGraph
from explorer.views.circuits.graph_plot import (CELL_ROWS, ERROR, FEATURE, LOGIT, NEGATIVE, POSITIVE, TOKEN, layout,
                                                thin_labels)
from explorer.views.circuits.panel import CircuitsPanel


def _graph(crowd: int = 6) -> CircuitGraph:
    """Tokens at 0..5; `crowd` layer-1 features and an error at the last position; one layer-0 feature at 2; two
    logits. Edges: token 2 -> L0 feature (+), L0 feature -> each L1 feature (alternating sign), L1 -> top logit."""
    T, L = 6, 2
    kind = [TOKEN] * T + [FEATURE] + [FEATURE] * crowd + [ERROR] + [LOGIT, LOGIT]
    layer = [-1] * T + [0] + [1] * crowd + [1] + [L, L]
    position = list(range(T)) + [2] + [5] * crowd + [5] + [5, 5]
    feature = [-1] * T + [7] + list(range(100, 100 + crowd)) + [-1, -1, -1]
    n = len(kind)
    labels = tuple(["a", "b", "c", "d", "e", "f", "L0 #7"] + [f"L1 #{100 + i}" for i in range(crowd)] + ["err L1"]
                   + ["'x' 60%", "'y' 30%"])
    l0 = T
    src = [2, *([l0] * crowd), *range(l0 + 1, l0 + 1 + crowd)]
    dst = [l0, *range(l0 + 1, l0 + 1 + crowd), *([n - 2] * crowd)]
    weight = [1.0, *[(0.5 if i % 2 == 0 else -0.25) for i in range(crowd)], *([0.1] * crowd)]
    return CircuitGraph(tokens=("a", "b", "c", "d", "e", "f"), n_layers=L, node_ids=np.arange(100, 100 + n),
                        kind=np.array(kind), layer=np.array(layer), position=np.array(position),
                        feature=np.array(feature), value=np.linspace(0.1, 1.0, n), influence=np.linspace(0.05, 1.0, n),
                        labels=labels, edge_src=np.array(src), edge_dst=np.array(dst), edge_weight=np.array(weight),
                        logit_tokens=("x", "y"), logit_probs=np.array([0.6, 0.3]), error_share=0.25, n_nodes=500,
                        n_features=300, node_threshold=0.8, edge_threshold=0.98, seconds=0.1, text="abcdef")


@pytest.fixture
def panel(qtbot):
    p = CircuitsPanel()
    qtbot.addWidget(p)
    p.resize(1100, 700)
    p.show()
    qtbot.waitExposed(p)
    return p


def test_the_layout_puts_tokens_below_layers_above_and_logits_on_top_and_spreads_a_crowded_cell():
    g = _graph(crowd=9)
    x, y, centres = layout(g.kind, g.layer, g.position, g.n_layers, len(g.tokens))
    assert np.all(y[g.kind == TOKEN] == 0) and np.all(y[g.kind == LOGIT] == g.n_layers + 1)
    inner = (g.kind == FEATURE) | (g.kind == ERROR)
    assert np.all(np.abs(y[inner] - (g.layer[inner] + 1)) < 0.5)  # each in its layer's row
    assert np.all(np.diff(centres) > 0)  # positions left to right
    crowd = np.flatnonzero((g.layer == 1) & inner)
    points = {(round(float(x[i]), 6), round(float(y[i]), 6)) for i in crowd}
    assert len(points) == len(crowd)  # no two nodes of a crowded cell on one spot
    assert len({round(float(v), 6) for v in y[crowd]}) == CELL_ROWS  # stacked CELL_ROWS high, then a new column
    assert centres[5] - centres[4] > centres[1] - centres[0]  # a position with features is wider than a token's
    assert x[g.kind == LOGIT][0] == pytest.approx(centres[-1]) and x[g.kind == LOGIT][1] < x[g.kind == LOGIT][0]


def test_thinned_labels_never_overlap_and_keep_the_first_asked():
    centres = np.arange(20, dtype=float)
    widths = np.full(20, 30.0)
    kept = thin_labels(centres, widths, 20.0, 19)  # 20 px a position, 30-px labels: about every other one
    assert 19 in kept and 5 < len(kept) < 20
    spans = sorted((c * 20 - 15, c * 20 + 15) for c in centres[kept])
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))


def test_edges_are_coloured_by_sign_and_nodes_sized_by_influence(panel):
    g = _graph()
    panel.set_graph(g)
    plot = panel.plot
    assert plot.drawn_edges == len(g.edge_weight)
    drawn = {sign: 0 for sign in (1, -1)}
    for (sign, _b), item in plot._buckets.items():
        xs, _ys = item.getData()
        drawn[sign] += 0 if xs is None else len(xs) // 2
        colour = item.opts["pen"].color()
        assert (colour.red(), colour.blue()) == ((POSITIVE if sign > 0 else NEGATIVE).red(),
                                                 (POSITIVE if sign > 0 else NEGATIVE).blue())
    assert drawn == {1: int((g.edge_weight >= 0).sum()), -1: int((g.edge_weight < 0).sum())}
    widest = max(((b, item) for (s, b), item in plot._buckets.items() if item.getData()[0] is not None),
                 key=lambda p: p[0])[1]
    assert widest.opts["pen"].widthF() > 3  # the strongest edge (weight 1.0) is drawn thickest
    sizes = plot._sizes
    assert sizes.argmax() == g.influence.argmax() and sizes.argmin() == g.influence.argmin()
    assert [t for _i, t in plot.shown_ticks][-1] == "f"  # the last position is always named
    assert "L1 #105" in plot.feature_labels  # the most influential feature is labelled


def test_the_pointer_says_what_a_node_and_an_edge_are_and_a_click_asks_for_the_node(qtbot, panel):
    g = _graph()
    panel.set_graph(g)
    plot = panel.plot
    vb = plot.getPlotItem().getViewBox()
    token = int(np.flatnonzero(g.kind == TOKEN)[2])
    at_node = vb.mapViewToScene(QPointF(plot._x[token], plot._y[token]))
    assert plot.text_at(at_node) == "token @2 ('c')"
    a, b = plot._xy0[0], plot._xy1[0]  # edge 0: token 2 -> L0 #7, weight +1
    middle = vb.mapViewToScene(QPointF((a[0] + b[0]) / 2, (a[1] + b[1]) / 2))
    assert plot.text_at(middle) == "tok 'c' @2 → L0 #7 @2: weight +1"
    feature = int(np.flatnonzero(g.kind == FEATURE)[0])
    with qtbot.waitSignal(panel.nodeSelected) as sent:
        plot._nodes.sigClicked.emit(plot._nodes, [p for p in plot._nodes.points() if p.data() == feature], None)
    assert sent.args == [int(g.node_ids[feature])] and plot._selected == feature


def test_the_node_detail_clamps_the_feature_shown_and_an_edge_row_selects_its_node(qtbot, panel):
    g = _graph()
    panel.set_graph(g, clamped=[(1, 100)])
    assert len(panel.plot._rings.data) == 1  # the clamped feature is outlined
    detail = panel.detail
    assert not detail.clamp.isEnabled()  # nothing picked yet
    panel.set_node("L1 #100 @5", (1, 100), [(["a", "b"], np.array([0.0, 2.0]))], [("x", 1.5)], [("y", -1.0)],
                   [("L0 #7 @2", 0.5, 6)], [("logit 'x' 60%", 0.1, 15), ("L1 #3 @1", -0.01, -1)])
    assert detail.clamp.isEnabled() and "b" in detail.contexts.toPlainText()
    detail.value.setValue(3.5)
    with qtbot.waitSignal(panel.editRequested) as sent:
        detail.clamp.click()
    assert sent.args == [1, 100, 3.5]
    with qtbot.waitSignal(panel.editRequested) as sent:
        detail.ablate.click()
    assert sent.args == [1, 100, 0.0]
    assert detail.outgoing.texts()[1].endswith("(pruned)")
    with qtbot.waitSignal(panel.nodeSelected) as sent:
        detail.incoming.list.itemClicked.emit(detail.incoming.list.item(0))
    assert sent.args == [int(g.node_ids[6])] and panel.plot._selected == 6
    with qtbot.assertNotEmitted(panel.nodeSelected):  # a pruned node is not drawn: nothing to select
        detail.outgoing.list.itemClicked.emit(detail.outgoing.list.item(1))
    panel.set_node("token @2 ('c')", None, [], [], [], [], [])
    assert not detail.clamp.isEnabled() and not detail.tabs.isTabEnabled(1)


def test_clearing_leaves_nothing_half_drawn_and_the_edges_export_with_their_header(qtbot, panel, tmp_path):
    g = _graph()
    panel.set_graph(g)
    panel.set_graph_info("500 nodes")
    path = tmp_path / "edges.csv"
    assert panel.export_edges_csv(str(path), {"model": "m (trained)", "features": "transcoders"})
    lines = path.read_text(encoding="utf-8").splitlines()
    assert lines[:2] == ["# model: m (trained)", "# features: transcoders"]
    assert lines[2].startswith("weight,source_kind") and len(lines) == 3 + len(g.edge_weight)
    assert lines[3].startswith("1,token,-1,2,,c,feature,0,2,7,L0 #7")  # the strongest edge first
    panel.clear_graph("cleared because the model changed")
    assert panel.plot.drawn_edges == 0 and not panel.plot._nodes.data.size and panel.plot.feature_labels == []
    assert panel.info.isHidden() and "model changed" in panel.detail.title.text()
    assert not panel.export_edges_csv(str(tmp_path / "none.csv"), {})


def test_the_train_form_says_what_was_asked_and_locks_while_training(qtbot, panel):
    form = panel.form
    form.width_box.setValue(256)
    form.k_box.setValue(8)
    with qtbot.waitSignal(panel.trainRequested) as sent:
        form.train.click()
    assert sent.args[0] == {"width": 256, "k": 8, "tokens": 2_000_000, "corpus": "builtin", "path": ""}
    assert form.walk.isHidden()
    panel.set_walk_available(True)
    panel.set_corpus_choices(True, "")
    assert form.walk.isVisible() and form.corpus.currentData() == "run"  # a run's model reads its own data
    panel.set_training(True)
    assert not form.train.isEnabled() and not form.walk.isEnabled() and form.cancel.isEnabled()
    with qtbot.waitSignal(panel.cancelRequested):
        form.cancel.click()
    panel.set_training(False)
    with qtbot.waitSignal(panel.walkRequested) as sent:
        form.walk.click()
    assert sent.args == [2_000_000]
    with qtbot.waitSignal(panel.thresholdsChanged) as sent:
        panel.node_threshold.setValue(0.5)
    assert sent.args == [0.5, 0.98]
    with qtbot.assertNotEmitted(panel.nodeSelected):  # a click on an empty plot asks for nothing
        qtbot.mouseClick(panel.plot.viewport(), Qt.MouseButton.LeftButton)
