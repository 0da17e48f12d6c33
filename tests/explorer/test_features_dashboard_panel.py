"""The feature dashboard in the window (issue 39): the density histogram of every feature, the example
groups and nearest features of the selected one (a neighbour's click selects it), the context width
asked again, and the JSON exports holding what the panel shows."""
from __future__ import annotations

import json
import re

import numpy as np
import pytest

from explorer.widgets.token_stream import visible_token

WAIT = 120_000
pytestmark = pytest.mark.usefixtures("single_torch_thread")
TEXT = "the quick brown fox jumps over the lazy dog while the cat sleeps on the warm mat " * 60


@pytest.fixture
def features(qtbot, window, tmp_path):
    window.actions["panel_features"].trigger()
    page = window.panel("features")
    c = page.controller
    path = tmp_path / "corpus.txt"
    path.write_text(TEXT, encoding="utf-8")
    c.corpus, c.corpus_path = "file", str(path)
    c.refresh()
    qtbot.waitUntil(lambda: c.table is not None and c.table.corpus == "corpus.txt" and c.dashboard is not None
                    and c.detail is not None and c.dashboard.feature == c.detail.feature, timeout=WAIT)
    qtbot.waitUntil(lambda: not window.runner.busy, timeout=WAIT)
    return page


def test_every_features_density_is_charted_with_dead_and_dense_counted(qtbot, features):
    c, view = features.controller, features.view
    density = c.table.density
    chart = view.density
    assert chart.counts.sum() + chart.dead == len(density)
    assert chart.dead == int((density == 0).sum()) and chart.dense == int((density > 0.1).sum())
    caption = chart.caption.text()
    assert f"{len(density):,} features" in caption and f"{chart.dead:,} dead" in caption
    assert f"{chart.dense:,} dense" in caption
    f = c.detail.feature
    assert chart.marker_position() == pytest.approx(np.log10(density[f]))  # the selected feature's place


def test_the_selected_features_groups_and_neighbours_are_shown_and_a_neighbour_selects(qtbot, features):
    c, view = features.controller, features.view
    d = c.dashboard
    shown = view.detail.context_view.toPlainText()
    for group in d.groups:
        assert group.name in shown
        for e in group.examples:  # each example's tokens, as the line shows them
            assert "".join(visible_token(t) for t in e.tokens) in shown
    rows = view.detail.neighbours.rows()
    assert [int(r[0]) for r in rows] == list(d.neighbour_ids)
    assert [float(r[1]) for r in rows] == pytest.approx(list(d.neighbour_cosines), abs=5e-4)
    other = int(d.neighbour_ids[0])
    view.detail.tabs.setCurrentIndex(2)
    with qtbot.waitSignal(c.dashboarded, timeout=WAIT, check_params_cb=lambda x: x.feature == other):
        view.detail.neighbours.table.cellClicked.emit(0, 0)  # a click on the nearest one
    qtbot.waitUntil(lambda: c.detail.feature == other, timeout=WAIT)
    assert view.selected_feature() == other and view.detail.tabs.currentIndex() == 2  # still browsing neighbours
    qtbot.waitUntil(lambda: not features.controller.ctx.runner.busy, timeout=WAIT)


def test_a_wider_context_asks_for_the_same_examples_with_more_tokens(qtbot, features):
    c, view = features.controller, features.view
    narrow = c.dashboard
    with qtbot.waitSignal(c.dashboarded, timeout=WAIT, check_params_cb=lambda x: x.before == 20):
        view.detail.examples.before.setValue(20)
    wide = c.dashboard
    assert (wide.feature, wide.before, wide.after) == (narrow.feature, 20, 3)
    assert [[e.row for e in g.examples] for g in wide.groups] == [[e.row for e in g.examples] for g in narrow.groups]
    assert sum(len(e.tokens) for g in wide.groups for e in g.examples) > sum(
        len(e.tokens) for g in narrow.groups for e in g.examples)
    qtbot.waitUntil(lambda: not features.controller.ctx.runner.busy, timeout=WAIT)


def _shown_token_rows(token_list) -> list[tuple[str, float]]:
    """(token as shown, value) of each row of a promotes/suppresses list: '␣the  +2.50'."""
    out = []
    for text in token_list.texts():
        token, value = text.rsplit("  ", 1)
        out.append((token, float(value)))
    return out


def test_the_json_exports_hold_what_the_panel_shows(qtbot, features, tmp_path):
    c, view = features.controller, features.view
    f = c.detail.feature
    path = tmp_path / "dash.json"
    assert c.export("saedashboard-json", str(path))
    batch = json.loads(path.read_text(encoding="utf-8"))
    (feature,) = batch["features"]
    assert feature["feature_index"] == f == view.selected_feature()
    promoted = _shown_token_rows(view.detail.promoted)
    assert [visible_token(t) for t in feature["pos_str"]] == [t for t, _v in promoted] and len(promoted) == 20
    assert feature["pos_values"] == pytest.approx([v for _t, v in promoted], abs=0.005 + 1e-9)
    suppressed = _shown_token_rows(view.detail.suppressed)
    assert [visible_token(t) for t in feature["neg_str"]] == [t for t, _v in suppressed]
    assert feature["neg_values"] == pytest.approx([v for _t, v in suppressed], abs=0.005 + 1e-9)
    model = view.table.model
    row = model.row_of(f)
    shown_density = model.cell_text(int(model.order[row]), 1)  # '12.3%' in the table
    assert f"{100 * feature['frac_nonzero']:.1f}%" == shown_density or shown_density.startswith(
        f"{100 * feature['frac_nonzero']:.2g}")
    text = view.detail.context_view.toPlainText()
    lines = [line for line in text.splitlines() if "│" in line]
    assert len(lines) == len(feature["activations"])  # every example line is in the file, in order
    for line, act in zip(lines, feature["activations"]):
        number, tokens = line.split("│", 1)
        assert tokens.strip() == "".join(visible_token(t) for t in act["tokens"]).strip()
        assert float(number) == pytest.approx(act["values"][act["qualifying_token_index"]], abs=0.005 + 1e-9)
    assert np.array_equal(feature["freq_hist_data_bar_heights"], view.detail.histogram.counts)
    assert batch["metadata"]["corpus"].endswith("corpus.txt")

    path = tmp_path / "np.json"
    assert c.export("neuronpedia-json", str(path))
    row = json.loads(path.read_text(encoding="utf-8"))
    neighbours = view.detail.neighbours.rows()
    assert row["topkCosSimIndices"] == [f] + [int(r[0]) for r in neighbours]
    assert row["topkCosSimValues"][1:] == pytest.approx([float(r[1]) for r in neighbours], abs=5e-4)
    assert re.fullmatch(r"\d+-mlp-neurons", row["layer"]) and row["index"] == str(f)
