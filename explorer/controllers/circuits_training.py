"""The Circuits panel's training half (split from controllers/circuits.py along this seam): transcoders
trained in the background with progress, an ETA and Cancel, the corpus file chosen, and — for a model
from a training run — the set walked over the run's kept steps, then when the prompt's circuit formed.

A mixin of CircuitsController, which provides `view`, `ctx`, `submit`, `report_error`, `graph`, `tset`,
`_show_set` and `_show_formation`, and through DictionaryPanelPart (controllers/dictionary_panel.py, what
it shares with the Features panel) the corpus, `_start_training`, `_progress` and `_training_ended`;
nothing here is used alone.
"""
from __future__ import annotations

import html

KEYS = dict(set="circuits-set", graph="circuits", node="circuits-node", train="circuits-train",
            walk="circuits-walk", formed="circuits-formed", readable="circuits-readable-prompt")
METRIC_WORDS = {  # key -> (name, meaning)
    "fvu": ("variance unexplained", "share of each layer's MLP-output variance the transcoder misses (0 is perfect)"),
    "l0": ("L0", "features active per token in each layer (TopK keeps at most k)"),
    "dead_fraction": ("dead", "share of each layer's features that never fired on the held-out text"),
}


class CircuitsTraining:
    def train(self, settings: dict) -> None:
        session = self.ctx.session
        width, k, tokens = int(settings["width"]), int(settings["k"]), int(settings["tokens"])
        corpus, path = self._take_corpus(settings)
        self._start_training(1, "reading every MLP's input and output…")
        self.submit(KEYS["train"], lambda token, progress: session.circuits.train(
            width=width, k=k, tokens=tokens, corpus=corpus, path=path, progress=progress, cancel=token),
            still_current=self.ctx.model_now(), on_result=lambda tset: self._trained(tset, tokens),
            on_error=self._train_failed, on_progress=self._progress, on_finished=self._training_ended)

    def _trained(self, tset, tokens: int) -> None:
        self.ctx.show_message(f"transcoders saved in {tset.folder}", 8000)
        self._show_set(tset)
        if self.ctx.session.info.run is not None and not tset.walked:
            self.walk(tokens)  # a run's model: the same set walked over its kept steps

    def walk(self, tokens: int) -> None:
        session = self.ctx.session
        self._start_training(1, "over training: fitting the run's other kept steps…")
        self.submit(KEYS["walk"], lambda token, progress: session.circuits.walk(int(tokens), progress, token),
                    still_current=self.ctx.model_now(), on_result=self._walked, on_error=self._train_failed,
                    on_progress=self._progress, on_finished=self._training_ended)

    def _walked(self, folders: dict) -> None:
        self.ctx.show_message(f"over training: a set for each of {len(folders)} kept steps, saved beside the run", 8000)
        self.formation = None
        self._ask_formation()

    def _train_failed(self, exc: BaseException) -> None:
        self.view.set_error(self.report_error(exc, "Transcoders not trained").inline)

    def _ask_formation(self) -> None:
        session, graph = self.ctx.session, self.graph
        if graph is None or session.info.run is None or self.tset is None:
            return
        if self.formation is not None and self.formation.text == graph.text:
            return
        text, (node_t, edge_t) = graph.text, self.view.thresholds()
        self.submit(KEYS["formed"], lambda token, progress: session.circuits.formation(
            text, node_t, edge_t, progress=progress, cancel=token), on_result=self._show_formation,
            on_error=lambda exc: self.report_error(exc, "Circuit over training"))


def metrics_html(tset) -> str:
    """The set's metrics, each with what it means (per layer where it is per layer)."""
    m = tset.metrics
    head = f"<b>{html.escape(tset.describe())}</b>"
    if not m:
        return (f"{head}: metrics not measured yet (they are measured on the model without edits: Reset the "
                f"ablation to measure them)")
    parts = []
    for key, (name, meaning) in METRIC_WORDS.items():
        values = m.get(key) or []
        shown = " · ".join("–" if v is None else (f"{v:.0%}" if key == "dead_fraction" else f"{v:.3g}")
                           for v in values)
        parts.append(f"<span title='{html.escape(meaning)}'><b>{name}</b> {shown}</span>")
    recovered = m.get("ce_loss_recovered")
    if recovered is not None:
        meaning = ("1 = replacing every MLP by its transcoder (no error term) costs no next-token loss, 0 = as bad as "
                   "zeroing every MLP")
        parts.append(f"<span title='{html.escape(meaning)}'><b>CE loss recovered</b> {recovered:.3g} "
                     f"({m['ce_clean']:.3g} → {m['ce_replaced']:.3g} nats; {m['ce_zero']:.3g} with the MLPs "
                     f"zeroed)</span>")
    return (f"{head} · " + " · ".join(parts) + f" <span style='color:#8c8c8c'>(per layer; on {m.get('tokens', 0):,} "
            f"held-out tokens of {html.escape(tset.measured_on)})</span>")
