"""The Features panel's training half (split from controllers/features.py along this seam): an SAE
trained in the background with progress, an ETA and Cancel, the corpus file chosen, and — for a model
from a training run — the same SAE walked back over the run's kept steps (features over training).

A mixin of FeaturesController, which provides `view`, `ctx`, `submit`, `_show_table`, `_show_detail`,
`_table_failed`, `detail` and `wanted`, and through DictionaryPanelPart (controllers/dictionary_panel.py,
what it shares with the Circuits panel) the corpus, `_start_training`, `_progress` and `_training_ended`;
nothing here is used alone.
"""
from __future__ import annotations

KEYS = dict(table="features", detail="features-detail", prompt="features-prompt", train="features-train",
            over="features-over-training", readable="features-readable-prompt", saved_over="features-saved-over")


class FeatureTraining:
    # -- training ---------------------------------------------------------------------------------------
    def train(self, settings: dict) -> None:
        session = self.ctx.session
        layer, site = int(settings["layer"]), settings["site"]
        width, k, tokens = int(settings["width"]), int(settings["k"]), int(settings["tokens"])
        self._train_tokens = tokens
        corpus, path = self._take_corpus(settings)
        self.wanted = ("sae", layer, site)
        self._start_training(tokens, "reading activations…")
        # An edit made meanwhile (Clamp, an ablation) does not undo it: it trains on the model itself. Its
        # table is for the weights it started on (another step or model: the result is dropped, the SAE kept).
        model, run = session.model, session.info.run
        self.submit(KEYS["train"], lambda token, progress: session.features.train(
            layer, site, width=width, k=k, tokens=tokens, corpus=corpus, path=path, progress=progress, cancel=token),
            still_current=lambda: session.model is model and session.info.run == run,
            on_result=self._trained, on_error=self._table_failed, on_progress=self._progress,
            on_finished=self._training_ended)

    def _trained(self, table) -> None:
        self._show_table(table)
        self.ctx.show_message(f"SAE saved in {table.source.folder}", 8000)
        if self.ctx.session.info.run is not None:  # a run's model: the same SAE, walked over its kept steps
            self.walk_run(table.source.folder, self._train_tokens)

    def walk_run(self, folder: str, tokens: int) -> None:
        """Features over training from the SAE in `folder` (left as trained): one aligned SAE per other
        kept step, in the background with progress. It belongs to the run, not to a state of it: an
        edit or another step shown meanwhile does not drop it."""
        session = self.ctx.session
        run = session.info.run
        self._start_training(1, "features over training: the SAE you trained stays; fitting the other kept steps…")
        self.submit(KEYS["over"], lambda token, progress: session.features.over_training(
            folder, tokens=tokens, progress=progress, cancel=token),
            still_current=lambda: session.info.run is not None and session.info.run.root == run.root,
            on_result=self._walked, on_error=self._table_failed, on_progress=self._progress,
            on_finished=self._training_ended)

    def _walked(self, over) -> None:
        self.ctx.show_message(f"features over training: {len(over.steps)} steps; the other steps' SAEs saved beside "
                              f"the run", 8000)
        self._show_over_training_now()

    def _ask_saved_over_training(self) -> None:
        """A run's SAE shown without its walk in memory (a new session): the series saved beside the run,
        or measured from the steps' saved SAEs, in the background."""
        table, session = self.table, self.ctx.session
        if table is None or table.source.kind != "sae" or session.info.run is None or self._over() is not None:
            return
        self.submit(KEYS["saved_over"], lambda token, progress: session.features.saved_over_training(progress, token),
                    on_result=lambda over: over is not None and self._show_over_training_now())

    def _show_over_training_now(self) -> None:
        """The walk's series arrived: the feature on screen gets its chart and its 'formed at' title."""
        if self.detail is not None:
            self._show_detail(self.detail)

