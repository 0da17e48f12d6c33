"""The Routes panel (issue 29) through its real controller, session and runner, on a tiny model:
the graph comes from gptcore.information_flow / flow_graph, nothing is faked."""
from __future__ import annotations

import json

import numpy as np
import pytest

from explorer.controllers.base import PanelPage
from explorer.controllers.context import PanelContext
from explorer.controllers.routes import RoutesController
from explorer.session.core import Session

WAIT_MS = 30_000
PROMPT = "When Mary and John went to the store, John gave a drink to"
pytestmark = pytest.mark.usefixtures("single_torch_thread")


def _page(qtbot, session, runner) -> PanelPage:
    page = PanelPage(PanelContext(session=session, runner=runner, window=None, prompt=None), RoutesController)
    qtbot.addWidget(page)
    page.resize(1100, 700)
    return page


def _settled(qtbot, page, runner) -> None:
    qtbot.waitUntil(lambda: page.controller.graph is not None, timeout=WAIT_MS)
    qtbot.waitUntil(lambda: not runner.busy, timeout=WAIT_MS)


@pytest.fixture
def page(qtbot, tiny_session, runner):
    p = _page(qtbot, tiny_session, runner)
    p.set_prompt(PROMPT)
    _settled(qtbot, p, runner)
    return p


def test_the_graph_is_drawn_from_the_sessions_routes(page, tiny_session):
    c, plot = page.controller, page.view.graph
    g = c.graph
    assert g.n_edges > 0 and plot.drawn_edges == g.n_edges and plot.route_edges == g.n_route > 0
    expected = tiny_session.routes.graph(c.result, 0.04, -1)  # the same shares, the same graph
    assert g.names == expected.names and np.array_equal(g.weight, expected.weight)
    assert g.position == c.result.n_tokens - 1 and g.target_text == c.result.predicted_texts[-1]
    assert g.is_attention.any() and (g.weight > 0.04).all()
    # every attention edge's heads (plus the residual of a j == i edge) make up its weight
    att = g.is_attention
    assert np.allclose(g.heads[att].sum(1) + g.residual[att], g.weight[att], atol=1e-5)
    # the route ends at the chosen token's last output
    last = f"I{c.result.n_layer - 1}_{g.position}"
    assert last in {g.names[d] for d in g.dst[g.on_route]}


def test_the_threshold_redraws_without_recomputing(qtbot, page):
    c, view = page.controller, page.view
    computed, edges = c.computed, c.graph.n_edges
    view.threshold_box.setValue(0.01)
    assert c.computed == computed and c.graph.threshold == pytest.approx(0.01)
    assert c.graph.n_edges > edges and view.graph.drawn_edges == c.graph.n_edges
    view.slider.setValue(30)  # 0.30
    assert c.computed == computed and c.graph.threshold == pytest.approx(0.30)
    assert c.graph.n_edges < edges and (c.graph.weight > 0.30).all()
    assert not c.live.in_flight and not c.timer.isActive()  # nothing was asked of the model


def test_an_ablated_heads_edges_vanish_and_the_badge_says_so(qtbot, page, tiny_session, runner):
    c = page.controller
    heads_at_0 = c.graph.heads[c.graph.node_layer[c.graph.dst] == 0]
    head = int(np.argmax(heads_at_0.sum(0)))
    assert heads_at_0[:, head].max() > 0  # the head carries something before
    before = c.computed
    tiny_session.interp.set_ablation([(0, head)])  # announced: the panel recomputes by itself
    qtbot.waitUntil(lambda: c.computed > before and c.result.version == tiny_session.version, timeout=WAIT_MS)
    qtbot.waitUntil(lambda: not runner.busy, timeout=WAIT_MS)
    layer0 = c.graph.node_layer[c.graph.dst] == 0
    assert c.graph.heads[layer0, head].max() == 0.0 and (0, head) in c.result.replaced_heads
    assert not page.view.ablation_badge.isHidden() and "1 head ablated" in page.view.ablation_badge.text()
    tiny_session.interp.clear_ablation()
    qtbot.waitUntil(lambda: c.result.version == tiny_session.version, timeout=WAIT_MS)
    qtbot.waitUntil(lambda: not runner.busy, timeout=WAIT_MS)
    assert page.view.ablation_badge.isHidden()


def test_bad_inputs_say_why_and_keep_the_last_good_graph(qtbot, page, runner):
    c, view = page.controller, page.view
    good = c.graph
    view.threshold_box.setValue(0.0)
    assert "between 0 and 1" in view.status_label.text() and c.graph is good
    view.threshold_box.setValue(1.0)
    assert "between 0 and 1" in view.status_label.text() and c.graph is good
    view.threshold_box.setValue(0.04)
    good = c.graph
    view.position_box.setValue(500)
    assert "outside the prompt" in view.status_label.text() and c.graph is good
    view.position_box.setValue(-1)
    good = c.graph
    page.set_prompt("Hi")  # one token
    qtbot.waitUntil(lambda: "at least 2 tokens" in view.status_label.text(), timeout=WAIT_MS)
    qtbot.waitUntil(lambda: not runner.busy, timeout=WAIT_MS)
    assert c.graph is good and view.graph.drawn_edges == good.n_edges


def test_models_without_usable_parts_are_explained(qtbot, runner):
    """A 0-layer model (GPTConfig refuses one, so its config is edited after the fact) and a post-LN
    model (its block outputs are not the sum of their parts): a message, no graph, no dialog."""
    session = Session.tiny()
    object.__setattr__(session.model.config, "n_layer", 0)
    page = _page(qtbot, session, runner)
    page.set_prompt(PROMPT)
    qtbot.waitUntil(lambda: "0 layers" in page.view.status_label.text(), timeout=WAIT_MS)
    qtbot.waitUntil(lambda: not runner.busy, timeout=WAIT_MS)
    assert page.controller.graph is None and page.is_ready
    post = _page(qtbot, Session.tiny(ln_placement="post"), runner)
    post.set_prompt(PROMPT)
    qtbot.waitUntil(lambda: "pre-LN" in post.view.status_label.text(), timeout=WAIT_MS)
    qtbot.waitUntil(lambda: not runner.busy, timeout=WAIT_MS)
    assert post.controller.graph is None


def test_a_training_step_shown_recomputes_the_routes(qtbot, page, tiny_session, runner):
    c = page.controller
    before = c.computed
    state = {k: v.clone() * 1.5 for k, v in tiny_session.model.state_dict().items()}
    tiny_session.show_training_step(state, 7)
    qtbot.waitUntil(lambda: c.computed > before and c.result.version == tiny_session.version, timeout=WAIT_MS)
    qtbot.waitUntil(lambda: not runner.busy, timeout=WAIT_MS)
    assert c.graph.version == tiny_session.version


def test_exports_write_the_graph_and_the_contributions_with_the_header(qtbot, page, tmp_path):
    c = page.controller
    for kind in ("png", "svg", "csv", "npz"):
        assert c.export(kind, str(tmp_path / f"routes.{kind}")), kind
    assert (tmp_path / "routes.png").stat().st_size > 1000
    assert "<svg" in (tmp_path / "routes.svg").read_text(encoding="utf-8")[:2000]
    lines = (tmp_path / "routes.csv").read_text(encoding="utf-8").splitlines()
    header = [line for line in lines if line.startswith("# ")]
    assert any(line.startswith("# model: tiny (test)") for line in header)
    assert "# ablation: none" in header and f"# prompt: {PROMPT}" in header
    rows = [line.split(",") for line in lines if not line.startswith("#")]
    assert rows[0][:4] == ["layer", "target", "target_token", "part"]
    # the shares of one whole sum to 1: attention parts + residual of layer 0, last position
    T = c.result.n_tokens
    whole = [float(r[-1]) for r in rows[1:] if r[0] == "0" and r[1] == str(T - 1) and r[3] in ("head", "attn_residual")]
    assert sum(whole) == pytest.approx(1.0, abs=1e-3)
    with np.load(tmp_path / "routes.npz") as z:
        assert np.array_equal(z["attn"], c.result.attn) and "model" in list(z["meta_keys"])


def test_over_training_reads_the_routes_from_the_run_trace(qtbot, runner, tmp_path):
    from explorer.session.routes.over_training import routes_over_training

    session = Session.tiny()
    from explorer.session.results import RunStep

    session.adopt(session.model, name="run model", source=f"training run {tmp_path} (gpt2)",
                  provenance=f"weights of step 200 of the training run in {tmp_path}",
                  run=RunStep(root=str(tmp_path), scheme="gpt2", step=200, max_iters=200))
    records = [{"kind": "start", "time": 0.0, "step": 0},
               {"kind": "probe", "time": 1.0, "step": 100, "scheme": "gpt2",
                "routes": {"prompt": "ab ab", "edges": [["X0_1", "A0_3", 0.2], ["I0_3", "A1_4", 0.1]]}},
               {"kind": "probe", "time": 2.0, "step": 200, "scheme": "gpt2",
                "routes": {"prompt": "ab ab", "edges": [["X0_1", "A0_3", 0.3], ["I0_2", "A1_4", 0.6]]}}]
    (tmp_path / "trace.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    from gptcore.training.run import RUN_FORMAT

    (tmp_path / "run.json").write_text(json.dumps({"format": RUN_FORMAT, "schemes": ["gpt2"], "model_config": {},
                                                   "train_config": {"max_iters": 200}, "corpus": {}, "tokenizer": {}}))
    over = routes_over_training(session.info, session.training.follower_for, top=5)
    assert list(over.steps) == [100, 200]
    assert np.allclose(over.series["X0_1 → A0_3"], [0.2, 0.3])
    assert np.isnan(over.series["I0_2 → A1_4"][0]) and list(over.series)[0] == "I0_2 → A1_4"  # strongest first
    page = _page(qtbot, session, runner)
    page.set_prompt(PROMPT)
    _settled(qtbot, page, runner)
    chart = page.view.training_chart
    assert page.view.tabs.isTabEnabled(1) and page.view.tabs.currentWidget() is chart
    assert set(chart.series_names) == set(over.series)
    assert chart.marker.value() == 200  # the step shown


def test_a_clicked_node_shows_what_its_block_writes(qtbot, page, tiny_session, runner):
    from gptcore import block_logit_effect

    c, view = page.controller, page.view
    node = next(k for k, name in enumerate(c.graph.names) if name.startswith("A1_"))
    view.graph.nodeClicked.emit(node)  # what a click on that node's dot emits
    qtbot.waitUntil(lambda: "promotes" in view.detail.text(), timeout=WAIT_MS)
    qtbot.waitUntil(lambda: not runner.busy, timeout=WAIT_MS)
    expected = block_logit_effect(tiny_session.model, c.result.token_ids.tolist(), c.graph.names[node], k=6)
    top = tiny_session.token_strings([int(expected.promoted_ids[0])])[0]
    assert "layer 1 attention" in view.detail.text() and f"{expected.promoted_logits[0]:+.2f}" in view.detail.text()
    assert repr(top.replace(" ", "␣"))[1:-1] in view.detail.text() or repr(top)[1:-1] in view.detail.text()


def test_removing_a_selected_edge_shows_the_measured_change_beside_its_weight(qtbot, page, tiny_session, runner):
    from gptcore import remove_edge_effect

    c, view = page.controller, page.view
    g = c.graph
    assert not view.remove_button.isEnabled()
    edge = int(np.argmax(np.where(g.is_attention, g.heads.max(1), -1)))  # the strongest head part drawn
    assert g.heads[edge].max() > 0
    view.graph.edgeClicked.emit(edge)
    assert view.remove_button.isEnabled()
    view.remove_button.click()
    qtbot.waitUntil(lambda: "Δ log p" in view.test_label.text(), timeout=WAIT_MS)
    qtbot.waitUntil(lambda: not runner.busy, timeout=WAIT_MS)
    head = int(np.argmax(g.heads[edge]))
    layer, j, i = int(g.node_layer[g.dst[edge]]), int(g.node_pos[g.src[edge]]), int(g.node_pos[g.dst[edge]])
    delta = remove_edge_effect(tiny_session.model, c.result.token_ids.tolist(), layer, head, j, i, g.target_id)
    text = view.test_label.text()
    assert f"L{layer} H{head}" in text and f"{g.heads[edge, head]:.3f}" in text and f"{delta:+.3f}" in text


def test_the_head_ranking_compares_route_shares_with_removal(qtbot, page, tiny_session, runner):
    c, view = page.controller, page.view
    view.rank_button.click()
    qtbot.waitUntil(lambda: "Spearman" in view.rank_label.text(), timeout=WAIT_MS)
    qtbot.waitUntil(lambda: not runner.busy, timeout=WAIT_MS)
    rows = view.table.row_texts()
    n = c.result.n_layer * c.result.n_head
    assert len(rows) == n
    shares = [float(r[1]) for r in rows]
    assert shares == sorted(shares, reverse=True) and sorted(int(r[2]) for r in rows) == list(range(1, n + 1))
    ranking = tiny_session.routes.head_ranking(c.result, -1)
    from explorer.session.routes.domain import spearman

    assert ranking.spearman == pytest.approx(spearman(ranking.route, -ranking.effect))
    rho = "undefined" if np.isnan(ranking.spearman) else f"{ranking.spearman:+.2f}"
    assert rho in view.rank_label.text()


def test_the_bench_measures_the_routes_keystroke_beside_attentions():
    """`python -m explorer.bench` gains the routes keystroke and the threshold move (values not asserted:
    a shared machine moves them)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1")
    done = subprocess.run([sys.executable, "-m", "explorer.benches.live", "--shape", "tiny", "--edits", "1",
                           "--tokens", "32", "--new-tokens", "0", "--no-recompute", "--json"],
                          cwd=Path(__file__).resolve().parents[2], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    attention, routes = json.loads(done.stdout.strip().splitlines()[-1])
    assert attention["tokens"] == routes["routes_tokens"] == 32
    assert routes["routes_keystroke_ms"] > 0 and routes["threshold_ms"] > 0 and routes["routes_edges"] > 0
    assert routes["routes_vs_attention"] == pytest.approx(routes["routes_keystroke_ms"] / attention["keystroke_ms"], rel=0.02)


def test_typing_recomputes_and_hovering_an_edge_shows_its_heads(qtbot, page, runner):
    c, view = page.controller, page.view
    page.show()
    view.prompt.setPlainText(PROMPT + " Mary")  # an edit: debounced, then computed
    qtbot.waitUntil(lambda: c.result is not None and c.result.text == PROMPT + " Mary", timeout=WAIT_MS)
    qtbot.waitUntil(lambda: not runner.busy, timeout=WAIT_MS)
    g = c.graph
    e = int(np.argmax(np.where(g.is_attention & (g.node_pos[g.src] != g.node_pos[g.dst]), g.heads.max(1), -1)))
    plot = view.graph
    x0, y0 = plot._xy0[e]
    x1, y1 = plot._xy1[e]
    from PySide6.QtCore import QPointF

    scene_pos = plot.getPlotItem().getViewBox().mapViewToScene(QPointF((x0 + x1) / 2, (y0 + y1) / 2))
    hit = plot.edge_at(scene_pos)
    assert hit >= 0 and np.allclose(plot._xy0[hit], plot._xy0[e]) and np.allclose(plot._xy1[hit], plot._xy1[e])
    plot.scene().sigMouseMoved.emit(scene_pos)  # what moving the pointer there sends
    head = int(np.argmax(g.heads[e]))
    assert f"H{head} {g.heads[e, head]:.3f}" in view.readout.text() and "attention" in view.readout.text()
