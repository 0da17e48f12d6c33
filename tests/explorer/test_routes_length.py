"""The Routes panel at length and its details (issue 34), through the real controller, session and
runner on tiny models: the route first from gptcore.RouteState past LONG_TOKENS with grey edges in
a window, token labels that never overlap, a threshold box that shows only what is applied, the
previous prompt's graph dimmed and named, a hint for an empty route, labelled shares, and the
run's probe prompt offered to a model that cannot read the prompt."""
from __future__ import annotations

import json

import numpy as np
import pytest
from PySide6.QtGui import QFontMetrics

from explorer.controllers.base import PanelPage
from explorer.controllers.context import PanelContext
from explorer.controllers.routes import RoutesController
from explorer.session.core import Session
from explorer.session.routes.long import LONG_TOKENS
from explorer.views.routes.ticks import thinned_ticks

WAIT_MS = 60_000
PROMPT = "When Mary and John went to the store, John gave a drink to"
LONG = " ".join(f"word{k % 37} and the cat number {k}" for k in range(40))  # ~300 GPT-2 tokens
pytestmark = pytest.mark.usefixtures("single_torch_thread")


def _page(qtbot, session, runner, w=1100, h=700) -> PanelPage:
    page = PanelPage(PanelContext(session=session, runner=runner, window=None, prompt=None), RoutesController)
    qtbot.addWidget(page)
    page.resize(w, h)
    return page


def _settled(qtbot, page, runner) -> None:
    qtbot.waitUntil(lambda: page.controller.graph is not None, timeout=WAIT_MS)
    qtbot.waitUntil(lambda: not runner.busy, timeout=WAIT_MS)


def _labels_apart(plot) -> None:
    """No two shown token labels overlap on screen (their pixel centres further apart than their
    half widths plus a gap), and the chosen position is labelled."""
    vb = plot.getPlotItem().getViewBox()
    (x0, x1), _ = vb.viewRange()
    px = vb.width() / (x1 - x0)
    metrics = QFontMetrics(plot.font())
    ticks = plot.shown_ticks
    assert ticks and plot._chosen in [i for i, _ in ticks]
    for (i, a), (j, b) in zip(ticks, ticks[1:]):
        assert (j - i) * px >= (metrics.horizontalAdvance(a) + metrics.horizontalAdvance(b)) / 2, (a, b)


@pytest.fixture
def long_page(qtbot, runner):
    session = Session.tiny(block_size=512)
    page = _page(qtbot, session, runner)
    page.set_prompt(LONG)
    _settled(qtbot, page, runner)
    qtbot.waitUntil(lambda: page.controller.graph.n_edges > page.controller.graph.n_route, timeout=WAIT_MS)  # context
    qtbot.waitUntil(lambda: not runner.busy, timeout=WAIT_MS)
    return page, session


def test_a_long_prompt_draws_the_route_and_a_window_of_grey_edges(long_page):
    from gptcore import flow_graph, information_flow

    page, session = long_page
    c, view = page.controller, page.view
    T = c.result.n_tokens
    assert T > LONG_TOKENS and c.result.rows_only and c.result.attn.shape[2] == 0  # no T x T arrays held
    full = flow_graph(information_flow(session.model, c.result.token_ids.tolist()), -1, 0.04)
    names = c.graph.names
    route = {(names[s], names[d]) for s, d in zip(c.graph.src[c.graph.on_route], c.graph.dst[c.graph.on_route])}
    assert route == {(a, b) for a, b, _ in full.route} and len(route) > 5
    lo, hi = c.graph.window
    assert lo <= T - 1 < hi and hi - lo < T
    grey = {(a, b) for a, b, _ in full.edges if lo <= int(b.split("_")[1]) < hi}
    drawn = {(names[s], names[d]) for s, d in zip(c.graph.src, c.graph.dst)}
    assert grey <= drawn and drawn - grey <= route  # the window's edges, and outside it the route only
    assert f"grey edges only for tokens {lo}–{hi - 1}: {T - (hi - lo)} of {T} not drawn" in view.count_label.text()
    (x0, x1), _ = view.graph.getPlotItem().getViewBox().viewRange()
    assert x0 == pytest.approx(lo - 0.6) and hi - 0.4 <= x1 <= hi + 0.1 * (hi - lo)  # the view opens on the window
    _labels_apart(view.graph)


def test_a_long_prompts_threshold_and_position_redraw_in_the_worker(qtbot, long_page, runner):
    page, _ = long_page
    c, view = page.controller, page.view
    computed = c.computed
    view.position_box.setValue(100)
    qtbot.waitUntil(lambda: c.graph.position == 100 and c.graph.n_edges > c.graph.n_route, timeout=WAIT_MS)
    assert c.graph.window[0] <= 100 < c.graph.window[1]
    qtbot.waitUntil(lambda: not runner.busy, timeout=WAIT_MS)
    assert c.computed == computed  # no new forward: the kept state computes the rows
    assert c.graph.target_text == c.result.predicted_texts[100]


def test_a_refused_threshold_puts_the_applied_one_back_with_the_reason(page_short):
    page = page_short
    c, view = page.controller, page.view
    view.threshold_box.setValue(0.0)
    assert view.threshold_box.value() == pytest.approx(0.04) and view.slider.value() == 4
    assert "between 0 and 1" in view.status_label.text() and c.graph.threshold == pytest.approx(0.04)


@pytest.fixture
def page_short(qtbot, tiny_session, runner):
    p = _page(qtbot, tiny_session, runner)
    p.set_prompt(PROMPT)
    _settled(qtbot, p, runner)
    return p


def test_a_one_token_prompt_dims_the_previous_graph_and_names_it(qtbot, page_short, runner):
    c, view = page_short.controller, page_short.view
    assert not view.stale and view.graph.opacity() == 1.0
    view.prompt.setPlainText("Hi")
    qtbot.waitUntil(lambda: "at least 2 tokens" in view.status_label.text(), timeout=WAIT_MS)
    qtbot.waitUntil(lambda: not runner.busy, timeout=WAIT_MS)
    assert view.stale and view.graph.opacity() < 0.5
    assert "previous prompt" in view.target_label.text() and "When Mary" in view.target_label.text()
    assert "predicts" not in view.target_label.text()
    view.prompt.setPlainText(PROMPT + " her")
    qtbot.waitUntil(lambda: c.result.text == PROMPT + " her", timeout=WAIT_MS)
    qtbot.waitUntil(lambda: not runner.busy, timeout=WAIT_MS)
    assert not view.stale and view.graph.opacity() == 1.0 and "predicts" in view.target_label.text()


def test_an_empty_route_says_which_threshold_shows_it(page_short):
    c, view = page_short.controller, page_short.view
    view.threshold_box.setValue(0.99)
    assert c.graph.n_route == 0
    text = view.count_label.text()
    assert "nothing on the route above 0.99" in text
    below = c.graph.route_below
    assert 0 < below < 0.99 and f"below {below:.2f}" in text
    view.threshold_box.setValue(below - 0.01)  # the hint holds: below it the route shows
    assert c.graph.n_route > 0 and c.graph.is_attention[c.graph.on_route].any()


@pytest.mark.parametrize("size, n_tokens", [((900, 600), 14), ((900, 600), 40), ((1400, 900), 27),
                                            ((1400, 900), 120)])
def test_token_labels_never_overlap(qtbot, tiny_session, runner, size, n_tokens, tmp_path):
    page = _page(qtbot, tiny_session, runner, *size)
    page.show()
    page.set_prompt(" ".join(["the quick brown fox jumps"] * 30)[: n_tokens * 4])
    _settled(qtbot, page, runner)
    _labels_apart(page.view.graph)
    assert page.grab().save(str(tmp_path / f"routes-{size[0]}-{n_tokens}.png"))


def test_thinned_ticks_keep_the_chosen_token_and_a_readable_gap():
    labels = [f"t{k}" for k in range(100)]
    ticks = thinned_ticks(labels, -0.5, 99.5, 500, 37, lambda s: 7.0 * len(s))
    shown = [i for i, _ in ticks]
    assert 37 in shown and len(shown) < 40 and all(b - a >= 4 for a, b in zip(shown, shown[1:]))
    assert thinned_ticks(labels, -0.5, 9.5, 500, 3, lambda s: 7.0 * len(s)) == [(k, f"t{k}") for k in range(10)]


def test_the_edge_test_names_both_shares(qtbot, page_short, runner):
    c, view = page_short.controller, page_short.view
    g = c.graph
    edge = int(np.argmax(np.where(g.is_attention, g.heads.max(1), -1)))
    view.graph.edgeClicked.emit(edge)
    assert "after the threshold" in view.detail.text()
    view.remove_button.click()
    qtbot.waitUntil(lambda: "Δ log p" in view.test_label.text(), timeout=WAIT_MS)
    qtbot.waitUntil(lambda: not runner.busy, timeout=WAIT_MS)
    head = int(np.argmax(g.heads[edge]))
    layer, j, i = int(g.node_layer[g.dst[edge]]), int(g.node_pos[g.src[edge]]), int(g.node_pos[g.dst[edge]])
    raw = float(c.result.attn[layer, i, j, head])
    text = view.test_label.text()
    assert f"weight {g.heads[edge, head]:.3f} after the threshold" in text and f"raw share {raw:.3f}" in text
    assert view.table.HEADERS[1] == "raw share"


def test_a_run_model_that_cannot_read_the_prompt_is_offered_its_probe_prompt(qtbot, runner, tmp_path):
    from gptcore.io.char_tokenizer import CharTokenizer
    from gptcore.training.run import RUN_FORMAT

    from explorer.session.results import RunStep

    chars = sorted(set("abc ."))
    session = Session.tiny(vocab_size=len(chars))
    session.adopt(session.model, name="run model", source=f"training run {tmp_path} (gpt2)",
                  tokenizer=CharTokenizer(chars), tokenizer_name="char",
                  run=RunStep(root=str(tmp_path), scheme="gpt2", step=100, max_iters=100))
    (tmp_path / "run.json").write_text(json.dumps({"format": RUN_FORMAT, "schemes": ["gpt2"], "model_config": {},
                                                   "train_config": {"max_iters": 100}, "corpus": {}, "tokenizer": {}}))
    probe = {"kind": "probe", "time": 1.0, "step": 100, "scheme": "gpt2",
             "routes": {"prompt": "ab cab. abc", "edges": [["X0_1", "A0_3", 0.2]]}}
    (tmp_path / "trace.jsonl").write_text(json.dumps({"kind": "start", "time": 0.0, "step": 0}) + "\n"
                                          + json.dumps(probe) + "\n", encoding="utf-8")
    page = _page(qtbot, session, runner)
    view = page.view
    qtbot.waitUntil(lambda: not view.offer_button.isHidden(), timeout=WAIT_MS)  # the Mary/John default
    assert "'ab cab. abc'" in view.offer_button.text() and "not in this model's" in view.status_label.text()
    view.offer_button.click()
    _settled(qtbot, page, runner)
    assert page.controller.result.text == "ab cab. abc" and view.offer_button.isHidden()
