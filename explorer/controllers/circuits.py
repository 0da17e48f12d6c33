"""Circuits controller (issue 38): the Circuits panel <-> `session.circuits`, through the task runner.

- The set of transcoders saved for the model shown (for a run, the step shown) is opened by itself
  (`use`: its metrics read or measured once), then the prompt's graph follows typing live
  (controllers/live.py: debounce, one run in flight); a moved threshold re-prunes the graph kept in
  the session (no new graph).
- Without transcoders, or with a set that does not fit, a prompt past the limit, a model the graph
  cannot linearise, or a head ablation in force, the graph is cleared and the reason is said in the
  panel (with Train transcoders offered): nothing half drawn, no traceback.
- Training (and, for a run's model, the walk over its kept steps that follows it) runs in the
  background with progress, an ETA and Cancel, behind other tabs too (background keys).
- A clicked node shows its edges and, for a feature, its contexts and logits; Clamp / Ablate is session
  state like a head ablation (`ctx.change_ablation`), so every panel shows the edited model.
- Events like every panel: a model swap clears; an ablation, a setting or another training step marks
  the graph out of date and recomputes it (another step: with that step's set).
"""
from __future__ import annotations

import html

from PySide6.QtCore import QObject, Signal

from explorer.controllers.base import PanelController
from explorer.controllers.circuits_training import KEYS, CircuitsTraining, metrics_html
from explorer.controllers.dictionary_panel import DictionaryPanelPart
from explorer.session.circuits.store import NoTranscoders, UnreadablePrompt
from explorer.session.events import ModelSwapped
from explorer.views.circuits.panel import CircuitsPanel
from explorer.views.circuits.protocol import CircuitsView

DEBOUNCE_MS = 150


class CircuitsController(CircuitsTraining, DictionaryPanelPart, PanelController[CircuitsView]):
    drawn = Signal(object)  # the CircuitGraph just drawn (tests)
    detailed = Signal(object)  # the NodeDetail just drawn
    formed = Signal(object)  # the CircuitFormation just said
    view_class = CircuitsPanel
    task_keys = tuple(KEYS.values())
    training_keys = (KEYS["train"], KEYS["walk"])
    background_keys = training_keys  # trainings the user started go on behind another tab
    browse_title = "A UTF-8 text file for the transcoders"

    def __init__(self, ctx, view: CircuitsView, parent: QObject | None = None, debounce_ms: int = DEBOUNCE_MS):
        super().__init__(ctx, view, parent)
        self.tset = None  # the TranscoderSet in use
        self.graph = None  # the CircuitGraph on screen
        self.detail = None
        self.formation = None
        self.selected: int | None = None  # node index asked for last
        self._selected_key = None  # (kind, layer, position, feature) of it: found again in the next graph
        self._offered = False
        self._set_up_shared(self._start_graph, debounce_ms)
        view.walkRequested.connect(self.walk)
        view.nodeSelected.connect(self.select)
        view.thresholdsChanged.connect(lambda _n, _e: self.live.now())
        self._show_model()
        self.refresh()

    # -- the contract (set_prompt: DictionaryPanelPart) ------------------------------------------------
    def invalidate(self, event) -> None:
        if isinstance(event, ModelSwapped):
            self.tset = self.graph = self.detail = self.formation = self.selected = None
            self._offered = False
            self.view.clear_graph(event.reason)
            self.view.set_metrics("")
            self.view.set_status(event.reason)
            self._show_model()
        else:
            self.view.set_status(event.reason)  # the graph stays, marked, until the new one lands
        self._show_edits()

    def refresh(self) -> None:
        session = self.ctx.session
        if session is None or not session.has_model:
            return
        corpus, path = self.corpus, self.corpus_path
        self.submit(KEYS["set"], lambda token, _p: session.circuits.use(corpus, path, cancel=token),
                    on_result=self._show_set, on_error=self._set_failed)

    def _show_model(self) -> None:
        session = self.ctx.session
        if session is None or not session.has_model:
            return
        self._offer_corpora()
        self.view.set_walk_available(False)

    # -- the transcoders ----------------------------------------------------------------------------------
    def _show_set(self, tset) -> None:
        self.tset = tset
        self.view.set_metrics(metrics_html(tset))
        self.view.set_walk_available(self.ctx.session.info.run is not None and not tset.walked)
        self.live.now()

    def _set_failed(self, exc: BaseException) -> None:
        self.tset = self.graph = None
        self.view.set_metrics("")
        self.view.clear_graph("")
        self.view.set_walk_available(False)
        words = self.report_error(exc, "Circuits not available").inline
        if isinstance(exc, NoTranscoders):  # not a fault: what to do next (Train transcoders is right above)
            self.view.set_status(words)
        else:
            self.view.set_error(words)
        self.mark_ready()  # the reason there is no graph is on screen

    # -- the graph -------------------------------------------------------------------------------------
    def _start_graph(self, done) -> bool:
        if self.tset is None:
            return False
        session, text = self.ctx.session, self.view.prompt_text()
        node_t, edge_t = self.view.thresholds()
        self.view.set_status("computing the graph…")
        return self.submit(KEYS["graph"], lambda token, _p: session.circuits.graph(text, node_t, edge_t),
                           on_result=self._show_graph, on_error=self._graph_failed, on_finished=done) > 0

    def _show_graph(self, graph) -> None:
        self.graph = graph
        self.live.follow_work(graph.seconds * 1000)  # wait out a pause shorter than the graph it would start
        self.view.set_graph(graph, self._clamped())
        self.view.set_status("")
        self.view.set_graph_info(graph_info_html(graph, self.formation))
        again = _find(graph, self._selected_key)  # the node shown, if this graph has it too
        if again >= 0:
            self.view.select_node(again)
            self.select(int(graph.node_ids[again]))
        else:
            self.selected = self.detail = self._selected_key = None
            self.view.clear_node("")
        self.drawn.emit(graph)
        self.mark_ready()
        self._ask_formation()

    def _graph_failed(self, exc: BaseException) -> None:
        self.graph = self.detail = None
        expl = self.report_error(exc, "No graph")
        self.view.clear_graph("")
        self.view.set_error(expl.inline)
        self.mark_ready()
        if isinstance(exc, UnreadablePrompt) and not self._offered and self.tset is not None:
            self._offered = True  # a run's character model and a prompt in another alphabet: its own text, once
            session, corpus, path = self.ctx.session, self.corpus, self.corpus_path
            self.submit(KEYS["readable"], lambda token, _p: session.circuits.readable_prompt(corpus, path),
                        on_result=self.set_prompt)

    def _show_formation(self, formation) -> None:
        if formation is None:
            return
        self.formation = formation
        if self.graph is not None:
            self.view.set_graph_info(graph_info_html(self.graph, formation))
        self.formed.emit(formation)

    # -- one node --------------------------------------------------------------------------------------
    def select(self, node: int) -> None:
        session, self.selected = self.ctx.session, int(node)
        self._selected_key = _key_of(self.graph, int(node))
        corpus, path = self.corpus, self.corpus_path
        self.submit(KEYS["node"], lambda token, _p: session.circuits.node(int(node), corpus, path),
                    on_result=self._show_node, on_error=self._node_failed)

    def _show_node(self, detail) -> None:
        self.detail = detail
        feature = (detail.layer, detail.feature) if detail.kind == "feature" else None
        self.view.set_node(detail.title, feature, list(detail.contexts), list(detail.promoted),
                           list(detail.suppressed), list(detail.incoming), list(detail.outgoing))
        self.detailed.emit(detail)

    def _node_failed(self, exc: BaseException) -> None:
        self.view.clear_node(self.report_error(exc, "Node not shown").inline)

    # -- editing (session state) -------------------------------------------------------------------------
    def edit(self, layer: int, feature: int, value: float) -> None:
        held = dict(self._held()) if self._own_edits() else {}
        held[(int(layer), int(feature))] = float(value)
        self.ctx.change_ablation(lambda session: session.circuits.edit(held), on_error=self._edit_failed)

    def _held(self) -> tuple:
        return self.ctx.session.interp.ablation.features

    def _own_edits(self) -> bool:
        return self.ctx.session.circuits.own_edits_held()

    def _clamped(self) -> list:
        return [key for key, _v in self._held()] if self._own_edits() else []

    def _show_edits(self) -> None:
        self.view.set_edits(self.ctx.session.interp.ablation.features_text(), self._clamped())

    # -- export -------------------------------------------------------------------------------------------
    def export_meta(self) -> dict:
        info, state = self.ctx.session.info, self.ctx.session.interp.ablation
        meta = {"model": f"{info.name} ({info.status_word})", "ablation": state.text() or "none"}
        if self.tset is not None:
            meta["features"] = f"{self.tset.describe()} in {self.tset.folder}"
        if self.graph is not None:
            g = self.graph
            meta.update({"prompt": g.text, "pruning": f"node threshold {g.node_threshold:g}, edge threshold "
                                                      f"{g.edge_threshold:g}: {g.n_kept} of {g.n_nodes:,} nodes kept",
                         "weight": "the direct effect of the source on the target (a feature's pre-activation, or "
                                   "the last position's logit minus the mean logit) under frozen attention and norms"})
        return meta

    def _writer(self, kind: str):
        session = self.ctx.session

        def write(path: str):
            if self.graph is None:
                raise ValueError("nothing to export yet: wait for the graph")
            if kind == "graph-json":
                node_t, edge_t = self.graph.node_threshold, self.graph.edge_threshold
                return session.circuits.export_json(path, node_t, edge_t) is not None
            if kind == "png":
                return self.view.export_image(path)
            return self.view.export_edges_csv(path, self.export_meta())

        return write

    def _export_dialog(self, kind: str) -> None:
        name = {"graph-json": "circuit.json", "edges-csv": "circuit-edges.csv", "png": "circuit.png"}[kind]
        self.export_with_dialog(name, self._writer(kind), self.view.set_error)

def _key_of(graph, node: int):
    """(kind, layer, position, feature) of node `node` (full-graph index) if it is drawn, else None."""
    if graph is None:
        return None
    hits = [i for i, n in enumerate(graph.node_ids) if int(n) == node]
    if not hits:
        return None
    i = hits[0]
    return int(graph.kind[i]), int(graph.layer[i]), int(graph.position[i]), int(graph.feature[i])


def _find(graph, key) -> int:
    """The kept index of the node `key` names in `graph`, or -1."""
    if key is None:
        return -1
    for i in range(len(graph.node_ids)):
        if (int(graph.kind[i]), int(graph.layer[i]), int(graph.position[i]), int(graph.feature[i])) == key:
            return i
    return -1


def graph_info_html(graph, formation=None) -> str:
    """The graph's size, the error nodes' share of the influence, and when the circuit formed (a run)."""
    parts = [f"{graph.n_nodes:,} nodes ({graph.n_features:,} active features) pruned to {graph.n_kept} · "
             f"{len(graph.edge_weight)} edges",
             f"<span title='the error nodes&#39; share of the influence the MLPs carry on the logits (errors over "
             f"features and errors together): what the transcoders leave unexplained'><b>the transcoders miss "
             f"{graph.error_share:.0%} of the influence</b></span>",
             f"{graph.seconds:.2f} s"]
    if graph.edits:
        parts.append(f"<span style='color:#dc2626'>edited: {len(graph.edits)} feature(s) held</span>")
    if graph.note:
        parts.append(f"<span style='color:#b45309'>{html.escape(graph.note)}</span>")
    text = " · ".join(parts)
    if formation is not None and formation.text == graph.text:
        if formation.formed_step is None:
            text += "<br>over training: no feature carries the top logit at the last kept step"
        else:
            text += (f"<br><b>the circuit for this prompt formed at step {formation.formed_step:,}</b>: its last link "
                     f"{html.escape(formation.link)} reached {formation.share:.0%} of its final weight "
                     f"({formation.final_weight:.3g}) then and stayed there")
    return text
