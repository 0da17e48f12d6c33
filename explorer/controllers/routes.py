"""Routes controller: prompt edits -> information-flow contributions in a worker -> the graph.

- Live while typing: debounce + one run in flight (controllers/live.py), submitted through
  PanelController.submit (the one stale rule: a result for a model, ablation or step no longer
  shown is dropped by the runner).
- The contributions of the last prompt are kept; the threshold and the chosen position re-draw
  through `session.routes.graph` (gptcore.flow_graph, no forward) on the GUI thread.
- Bad input (one token, a 0-layer model, a position past the prompt, a threshold outside (0, 1))
  is said in the panel; the last good graph stays.
- It follows the session's events like every panel: a model swap clears, an ablation or a
  training step shown (the Train panel's scrubber) marks the graph out of date and recomputes.
"""
from __future__ import annotations

import logging

import numpy as np
from PySide6.QtCore import QObject, Signal

from explorer.controllers.base import PanelController
from explorer.views.routes.protocol import RoutesView
from explorer.controllers.live import LiveRequest
from explorer.session.events import ModelSwapped
from explorer.session.routes.long import LONG_TOKENS
from explorer.views.routes.panel import RoutesPanel

log = logging.getLogger("explorer.routes")

DEBOUNCE_MS = 80
TASK_KEY = "routes"
DEFAULT_PROMPT = "When Mary and John went to the store, John gave a drink to"


class RoutesController(PanelController[RoutesView]):
    """Connects a RoutesPanel to ctx.session.routes through ctx.runner (see module docstring)."""

    drawn = Signal(object)  # the RouteGraph just drawn (tests and the bench record every frame)
    view_class = RoutesPanel
    task_keys = (TASK_KEY, "routes-graph", "routes-node", "routes-edge", "routes-rank", "routes-training")
    background_keys = ("routes-rank",)  # a ranking the user started (L × H × 2 forwards) goes on when hidden

    def __init__(self, ctx, view: RoutesView, parent: QObject | None = None, debounce_ms: int = DEBOUNCE_MS):
        super().__init__(ctx, view, parent)
        panel = view
        self.result = None  # the RoutesResult whose graph is on screen
        self.graph = None  # the RouteGraph on screen
        self.computed = 0  # contributions computed (tests: a threshold move must not add one)
        self._training_asked = False
        self._ranking = False  # a head ranking is in flight
        self._applied = (0.04, -1)  # the threshold and position box value of the graph on screen
        self.live = LiveRequest(self._start, debounce_ms, parent=self)
        self.timer = self.live.timer
        panel.promptChanged.connect(lambda _text: self.live.poke())
        panel.thresholdChanged.connect(lambda _t: self.redraw())
        panel.positionChanged.connect(lambda _p: self.redraw())
        panel.nodeClicked.connect(self.show_node)
        panel.removeRequested.connect(self.test_edge)
        panel.rankRequested.connect(self.rank_heads)
        panel.exportRequested.connect(self._export_dialog)
        panel.set_prompt_text(DEFAULT_PROMPT)

    # -- the panel contract -------------------------------------------------------------------------
    def set_prompt(self, text: str) -> None:
        if text == self.view.prompt_text():
            return
        self.view.set_prompt_text(text)
        self.request()

    @property
    def is_ready(self) -> bool:
        return self._ready_sent

    def invalidate(self, event) -> None:
        """A model swap clears (other shape, other tokens); anything else marks the graph out of date
        until the recompute it triggers is drawn (an edge test or ranking of the old state goes)."""
        self._training_asked = False
        if isinstance(event, ModelSwapped):
            self.result = self.graph = None
            self.view.clear_results(event.reason)
            return
        self.view.set_edge_test("")
        self.view.set_detail("")  # a node's tokens or an edge's heads of the old weights
        self.view.set_ranking([], [], [], f"{event.reason}; rank again for the new numbers")
        self.view.set_status(event.reason)

    def refresh(self) -> None:
        self.request()

    def request(self) -> None:
        self.live.now()

    # -- contributions (worker) ---------------------------------------------------------------------
    def _start(self, done) -> bool:
        session = self.ctx.session
        if not session.has_model:
            self.view.set_status("waiting for a model…")
            return False
        text = self.view.prompt_text()
        if self._ranking:  # it ranks the graph this run replaces, and would hold the compute thread for it
            self.ctx.runner.cancel("routes-rank")
            self._ranking = False
            self.view.set_ranking_text("ranking stopped: the routes are being recomputed; press Rank again")

        def work(token, _progress):
            token.raise_if_cancelled()
            return session.routes.compute(text)

        self.view.set_status("computing routes…")
        if not self.submit(TASK_KEY, work, on_result=self._on_result, on_error=self._on_error, on_finished=done):
            return False
        self._ask_training()
        return True

    def _on_result(self, result) -> None:
        self.computed += 1
        self.live.follow_work(result.elapsed_s * 1000)  # as attention's: half the last computation
        new_prompt = self.result is None or self.result.text != result.text
        self.view.offer_prompt("")
        if result.rows_only:  # a long prompt: its graphs compute their rows in the worker
            self.result = result
            self.view.set_ablation_badge(result.ablation.text())
            self._graph_task(result, new_prompt=new_prompt)
            return
        if self._draw(result, new_prompt=new_prompt):
            self.result = result
            self.view.set_ablation_badge(result.ablation.text())
            crop = f" ({result.cropped} cropped)" if result.cropped else ""
            self.view.set_status(f"{result.n_tokens} tokens{crop} · routes {result.elapsed_s * 1000:.0f} ms")
        self.mark_ready()

    def _draw(self, result, *, new_prompt: bool = False) -> bool:
        """The graph of `result` at the view's threshold and position; False (and the message) when
        either is refused, the last good graph staying."""
        try:
            graph = self.ctx.session.routes.graph(result, self.view.threshold(), self.view.position())
        except ValueError as exc:
            self._refused(exc)
            return False
        self._show(result, graph, new_prompt)
        return True

    def _show(self, result, graph, new_prompt: bool) -> None:
        self.graph = graph
        self._applied = (graph.threshold, self.view.position())
        self.view.set_graph(result, graph, new_prompt=new_prompt)
        self.drawn.emit(graph)

    def _refused(self, exc: BaseException) -> None:
        """A threshold or position the graph cannot take: said, and the boxes back at what is drawn
        (a box never shows a value that is not applied)."""
        self.view.set_error(self.report_error(exc, "Routes not drawn").inline)
        self.view.set_threshold(self._applied[0])
        self.view.set_position(self._applied[1])

    def redraw(self) -> None:
        """Threshold or position moved: the kept contributions, a new graph, no forward."""
        if self.result is None:
            return
        if self.result.rows_only:
            self._graph_task(self.result)
        elif self._draw(self.result):
            self.view.set_status(f"{self.result.n_tokens} tokens · threshold {self.graph.threshold:g}")

    # -- a long prompt's graph (worker): the route first, then the window's grey edges ---------------
    def _graph_task(self, result, *, new_prompt: bool = False, window: bool = False) -> None:
        session, threshold, position = self.ctx.session, self.view.threshold(), self.view.position()

        def work(token, _progress):
            return session.routes.graph(result, threshold, position, window=window, cancel=token)

        def show(graph) -> None:
            if result is not self.result:
                return  # another prompt was computed meanwhile
            self._show(result, graph, new_prompt)
            crop = f" ({result.cropped} cropped)" if result.cropped else ""
            more = "" if window else " · grey context edges next…"
            self.view.set_status(f"{result.n_tokens} tokens{crop} · route {result.elapsed_s * 1000:.0f} ms{more}")
            self.mark_ready()
            if not window:
                self._graph_task(result, window=True)

        def failed(exc) -> None:
            self._refused(exc)
            self.mark_ready()

        self.submit("routes-graph", work, on_result=show, on_error=failed)

    def _on_error(self, exc: BaseException) -> None:
        """The last good graph (same model) stays under the message, dimmed and named as the previous
        prompt's when the text changed; an unreadable prompt gets the run's probe prompt offered."""
        self.view.set_error(self.report_error(exc, "Routes failed").inline)
        self.view.offer_prompt(getattr(exc, "offer", None) or "")
        if self.result is not None and self.result.text != self.view.prompt_text():
            self.view.set_stale(self.result.text)
        self.mark_ready()  # the reason there is no graph is drawn

    # -- node, edge, ranking (worker) ---------------------------------------------------------------
    def show_node(self, node: int) -> None:
        graph, result = self.graph, self.result
        if graph is None or not 0 <= node < len(graph.names):
            return
        name = graph.names[node]
        session = self.ctx.session
        self.view.set_detail(f"{name}: reading what it writes…")
        self.submit("routes-node", lambda token, _p: session.routes.block_effect(result, name),
                    on_result=lambda e: self.view.set_block_effect(e.title, e.promoted, e.suppressed),
                    on_error=self._on_error)

    def test_edge(self, edge: int) -> None:
        graph, result = self.graph, self.result
        if graph is None:
            return
        session = self.ctx.session
        self.view.set_edge_test("removing it and re-running…")

        def show(t) -> None:
            tok = result.tokens
            self.view.set_edge_test(
                f"L{t.layer} H{t.head} reading {tok[t.source]!r} ({t.source}) into {tok[t.target]!r} ({t.target}): "
                f"weight {t.route_weight:.3f} after the threshold (raw share {t.share:.3f}, as ranked) · "
                f"removing it: Δ log p({t.token_text!r}) = {t.delta_logprob:+.3f}")

        self.submit("routes-edge", lambda token, _p: session.routes.remove_edge(result, graph, edge),
                    on_result=show, on_error=lambda exc: self.view.set_edge_test(
                        self.report_error(exc, "Edge test failed").inline))

    def rank_heads(self) -> None:
        if self.result is None or self.graph is None:
            return
        result, position, session = self.result, self.graph.position, self.ctx.session
        n = result.n_layer * result.n_head
        self.view.set_ranking_text(f"removing each of {n} heads at position {position}…")

        def work(token, _progress):
            return session.routes.head_ranking(result, position, cancel=token)

        def show(r) -> None:
            rho = "undefined (constant)" if np.isnan(r.spearman) else f"{r.spearman:+.2f}"
            self.view.set_ranking(r.labels, r.route, r.effect,
                                  f"into position {r.position} (→ {r.token_text!r}): Spearman ρ = {rho} "
                                  f"({len(r.labels)} heads, {r.elapsed_s:.1f} s)")

        def finished() -> None:
            self._ranking = False

        self._ranking = True
        self.submit("routes-rank", work, on_result=show, on_finished=finished,
                    on_error=lambda exc: self.view.set_ranking_text(self.report_error(exc, "Ranking failed").inline))

    def _ask_training(self) -> None:
        """The routes over the run the model comes from (read once per state from its trace)."""
        if self._training_asked:
            return
        self._training_asked = True
        session = self.ctx.session
        run = session.info.run  # the typed fact: which run and step the weights are (None: not a run's)
        step = run.step if run is not None else None

        def show(over) -> None:
            if over is None:
                self.view.set_over_training([], {}, None)
            else:
                self.view.set_over_training(over.steps, over.series, step)

        self.submit("routes-training", lambda token, _p: session.routes.over_training(), on_result=show,
                    on_error=self._on_error)

    # -- export ------------------------------------------------------------------------------------
    def export_meta(self) -> dict:
        info, state, r, g = self.ctx.session.info, self.ctx.session.interp.ablation, self.result, self.graph
        parts = [f"L{layer}H{head}" for layer, head in sorted(state.heads)] + [f"L{m} MLP" for m in sorted(state.mlps)]
        meta = {"model": f"{info.name} ({info.status_word})",
                "ablation": f"{', '.join(parts)} ({state.mode} ablation)" if parts else "none"}
        if r is not None and g is not None:
            meta.update({"prompt": r.text, "position": g.position, "chosen token": repr(g.target_text),
                         "threshold": g.threshold, "method": "information-flow routes (Ferrando & Voita 2024), "
                                                             "value bias counted once"})
        return meta

    def export(self, kind: str, path: str) -> bool:
        return self.export_to(path, self._writer(kind), self.view.set_error)

    def _writer(self, kind: str):
        from explorer.session.routes.export import contributions_csv, save_npz

        def write(path: str):
            if self.result is None:
                raise ValueError("nothing to export yet: type a prompt of at least 2 tokens first")
            if self.result.rows_only and kind in ("csv", "npz"):
                raise ValueError(f"at {self.result.n_tokens} tokens only the rows on the route are computed (the "
                                 f"whole T × T contributions take minutes and GBs); export the graph as PNG/SVG, or "
                                 f"shorten the prompt to {LONG_TOKENS} tokens or fewer for the contributions")
            if kind in ("png", "svg"):
                return self.view.export_image(path)
            if kind == "csv":
                return self.view.write_csv(path, contributions_csv(self.result), self.export_meta())
            save_npz(path, self.result, self.export_meta())
            return True

        return write

    def _export_dialog(self, kind: str) -> None:
        name = {"png": "routes.png", "svg": "routes.svg", "csv": "routes-contributions.csv",
                "npz": "routes-contributions.npz"}[kind]
        self.export_with_dialog(name, self._writer(kind), self.view.set_error)

