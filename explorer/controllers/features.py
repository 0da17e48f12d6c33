"""Features controller (issue 33): the Features panel <-> `session.features`, through the task runner.

- A dictionary (a layer's MLP neurons, or the SAE saved for a layer and site) is measured on the
  corpus's held-out tokens in a task: the feature table, then the selected feature's contexts,
  histogram and logit effects, then the prompt's features. The prompt follows typing live
  (controllers/live.py: debounce, one run in flight).
- Training an SAE runs in the background with progress, an ETA and Cancel; it goes on behind another
  tab (a background key) and is saved beside the model or run, so choosing SAE again reopens it.
- Clamping or ablating a feature is session state like head ablation (`ctx.change_ablation`): every
  panel shows the edited model, the status bar says so and its Reset clears it.
- It follows the session's events like every panel: a model swap clears (other layers, other
  tokens), an ablation or a training step marks the table out of date and measures it again.
"""
from __future__ import annotations

import html

import numpy as np
from PySide6.QtCore import QObject, Signal

from explorer.controllers.base import PanelController
from explorer.controllers.dictionary_panel import DictionaryPanelPart
from explorer.controllers.features_dashboard import DASHBOARD_KEY, JSON_KINDS, FeatureDashboardPart
from explorer.controllers.features_training import KEYS, FeatureTraining
from explorer.session.events import ModelSwapped
from explorer.views.features.panel import FeaturesPanel
from explorer.views.features.protocol import FeaturesView

DEBOUNCE_MS = 120
DENSITY_SERIES = "density %"
METRIC_WORDS = {
    "l0": ("L0", "features active per token (the SAE keeps k)"),
    "explained_variance": ("explained variance", "share of the activations' variance the reconstruction keeps"),
    "ce_loss_recovered": ("CE loss recovered", "1 = splicing the reconstruction in costs no next-token loss, "
                                               "0 = as bad as zeroing the site"),
    "dead_fraction": ("dead", "features that never fired on the held-out text"),
}


class FeaturesController(FeatureTraining, FeatureDashboardPart, DictionaryPanelPart, PanelController[FeaturesView]):
    drawn = Signal(object)  # the FeatureTable just drawn (tests)
    detailed = Signal(object)  # the FeatureDetail just drawn
    dashboarded = Signal(object)  # the FeatureDashboard just drawn
    view_class = FeaturesPanel
    task_keys = tuple(KEYS.values()) + (DASHBOARD_KEY,)
    training_keys = (KEYS["train"], KEYS["over"])
    background_keys = training_keys  # trainings the user started go on behind another tab
    browse_title = "A UTF-8 text file for the features"

    def __init__(self, ctx, view: FeaturesView, parent: QObject | None = None, debounce_ms: int = DEBOUNCE_MS):
        super().__init__(ctx, view, parent)
        self.table = None  # the FeatureTable on screen
        self.detail = None
        self.prompt_result = None
        self.selected: int | None = None  # the feature asked for last (its detail may be on its way)
        self._offered = False  # a readable prompt was put in place of one the model cannot encode
        self.wanted = ("neurons", 0, "resid")  # (kind, layer, site) asked for last
        self._train_tokens = 0
        # Cancel stops whichever runs: the SAE's training, or the walk over the run's steps that follows it
        self._set_up_shared(self._start_prompt, debounce_ms)
        for signal, slot in ((view.dictionaryRequested, self.use), (view.featureSelected, self.select),
                             (view.tokenClicked, self.show_token), (view.contextChanged, self._context_changed)):
            signal.connect(slot)
        self._show_model()
        self._reopen_saved()
        self.refresh()

    # -- the contract (set_prompt: DictionaryPanelPart) ------------------------------------------------
    @property
    def is_ready(self) -> bool:
        return self._ready_sent

    def invalidate(self, event) -> None:
        if isinstance(event, ModelSwapped):
            self.table = self.detail = self.prompt_result = self.selected = self.dashboard = None
            self._offered = False
            self.view.clear_results(event.reason)
            self.wanted = ("neurons", 0, "resid")  # the new model's own saved SAE, else its neurons
            self._show_model()
            self._reopen_saved()
        else:
            self.view.set_status(event.reason)
        self.view.set_edits(self.ctx.session.interp.ablation.features_text())

    def refresh(self) -> None:
        kind, layer, site = self.wanted
        self.use(kind, layer, site)

    def _reopen_saved(self) -> None:
        """An SAE saved for this model (this step of a run) earlier is what the panel opens on."""
        session = self.ctx.session
        saved = session.features.saved() if session is not None and session.has_model else None
        if saved is not None:
            self.wanted = ("sae", *saved)
            self.view.set_source(*self.wanted)

    def _show_model(self) -> None:
        session = self.ctx.session
        if session is None or not session.has_model:
            return
        n_layer = session.config.n_layer
        self.view.set_layers(n_layer)
        kind, layer, site = self.wanted
        self.wanted = (kind, min(layer, n_layer - 1) if layer else n_layer // 2, site)
        self.view.set_source(*self.wanted)
        self._offer_corpora()

    # -- the table --------------------------------------------------------------------------------------
    def use(self, kind: str, layer: int, site: str) -> None:
        self.wanted = (kind, int(layer), site)
        session, corpus, path = self.ctx.session, self.corpus, self.corpus_path
        if not session.has_model:
            return
        self.view.set_status(f"measuring {kind} of layer {layer} on the held-out text…")
        self.submit(KEYS["table"], lambda token, _p: session.features.use(kind, int(layer), site, corpus=corpus,
                                                                         path=path, cancel=token),
                    on_result=self._show_table, on_error=self._table_failed)

    def _show_table(self, table) -> None:
        before, self.table = self.table, table
        self.view.set_source(table.source.kind, table.source.layer, table.source.site)
        self.view.set_table(table.ids, table.density, table.max_act, table.logit_effect, list(table.labels))
        self._show_density(table)
        self.view.set_metrics(metrics_html(table))
        self.view.set_status(f"{table.source.describe()} · {table.tokens:,} held-out tokens of {table.corpus}")
        self.view.set_edits(self.ctx.session.interp.ablation.features_text())
        self.drawn.emit(table)
        # The same feature stays selected only in the same dictionary (or one the walk aligned with it):
        # neuron 83 and SAE feature 83 have nothing in common.
        same = before is not None and before.source.lineage == table.source.lineage
        selected = self.selected if same else None
        self.select(selected if selected is not None and selected < len(table.ids) else _busiest(table))
        self._ask_saved_over_training()  # ready once the feature and the prompt's chips are drawn (_show_prompt)

    def _table_failed(self, exc: BaseException) -> None:
        self.view.set_error(self.report_error(exc, "Features not measured").inline)
        self.mark_ready()  # the reason there is no table is on screen

    # -- one feature and the prompt --------------------------------------------------------------------
    def select(self, feature: int) -> None:
        if self.table is None:
            return
        session, self.selected = self.ctx.session, int(feature)
        self.submit(KEYS["detail"], lambda token, _p: session.features.detail(int(feature)),
                    on_result=self._show_detail, on_error=self._detail_failed)
        self._ask_dashboard(int(feature))
        self.live.now()  # the prompt's chips follow the selected feature

    def _show_detail(self, detail) -> None:
        self.detail = detail
        title, over = detail.title, self._over()
        if over is not None and detail.feature < over.formed.size:
            if over.formed[detail.feature] >= 0:
                title += f" · formed at step {int(over.formed[detail.feature]):,}"
            title += f" · its token over training: {token_history(over, detail.feature)}"
        self.view.set_feature(detail.feature, title, list(detail.contexts), detail.hist_edges,
                              detail.hist_counts, list(detail.promoted), list(detail.suppressed))
        self._show_over_training(detail.feature)
        self.detailed.emit(detail)

    def _over(self):
        table = self.table
        if table is None or table.source.kind != "sae":
            return None
        return self.ctx.session.features.over_training_of(table.source.layer, table.source.site,
                                                          table.source.width, table.source.k)

    def _show_over_training(self, feature: int) -> None:
        """Density in % like the table's, measured on the table's own held-out sample (the same tokens,
        on the model itself): at the step shown the two read alike, but for a feature edit in force."""
        over, run = self._over(), self.ctx.session.info.run
        if over is None or feature >= over.width:
            self.view.set_over_training(np.zeros(0), {}, None)
            return
        self.view.set_over_training(over.steps, {DENSITY_SERIES: 100 * over.density[:, feature],
                                                 "max activation": over.max_act[:, feature]},
                                    run.step if run is not None else None)

    def _detail_failed(self, exc: BaseException) -> None:
        self.view.clear_feature(self.report_error(exc, "Feature not shown").inline)
        self.mark_ready()

    def _start_prompt(self, done) -> bool:
        if self.table is None:
            return False
        session, text, feature = self.ctx.session, self.view.prompt_text(), self.selected
        lineage = self.table.source.lineage
        return self.submit(KEYS["prompt"], lambda token, _p: session.features.prompt(text, feature, lineage),
                           on_result=self._show_prompt, on_error=self._prompt_failed, on_finished=done) > 0

    def _show_prompt(self, result) -> None:
        self.prompt_result = result
        self.view.set_prompt_activations(list(result.tokens), result.selected_acts)
        self.mark_ready()  # the table, its first feature and the prompt's chips: what a screenshot shows

    def _prompt_failed(self, exc: BaseException) -> None:
        self.view.set_prompt_activations([], None)
        self.view.set_error(self.report_error(exc, "Prompt features").inline)
        if isinstance(exc, ValueError) and self.table is not None and not self._offered:
            self._offered = True  # a run's character model and the default prompt: its own text instead, once
            session = self.ctx.session
            self.submit(KEYS["readable"], lambda token, _p: session.features.readable_prompt(),
                        on_result=self.set_prompt, on_error=lambda _exc: self.mark_ready())
        else:
            self.mark_ready()  # the reason is on screen (a readable prompt offered is ready when it is read)

    def show_token(self, position: int) -> None:
        r, table = self.prompt_result, self.table
        if r is None or table is None or not 0 <= position < len(r.tokens):
            return
        features = [(int(f), float(a), table.labels[int(f)]) for f, a in zip(r.top_ids[position], r.top_acts[position])
                    if a > 0]
        self.view.set_token_features(position, r.tokens[position], features)

    # -- editing (session state) -------------------------------------------------------------------------
    def edit(self, feature: int, value: float) -> None:
        state = self.ctx.session.interp.ablation
        source = self.table.source.describe() if self.table is not None else ""
        # Edits held for another dictionary (another SAE, or the Circuits panel's transcoders) are replaced,
        # not merged: the session holds one dictionary's edits at a time, and their indices mean other features.
        held = dict(state.features) if state.feature_source == source else {}
        held[int(feature)] = float(value)
        self.ctx.change_ablation(lambda session: session.features.edit(held), on_error=self._edit_failed)

    # -- export -----------------------------------------------------------------------------------------
    def export_meta(self) -> dict:
        info, state = self.ctx.session.info, self.ctx.session.interp.ablation
        meta = {"model": f"{info.name} ({info.status_word})", "ablation": state.text() or "none"}
        if self.table is not None:
            meta.update({"features": self.table.source.describe(), "hook": self.table.source.hook,
                         "corpus": f"{self.table.tokens:,} held-out tokens of {self.table.corpus}"})
        return meta

    def _writer(self, kind: str):
        def write(path: str):
            if self.table is None:
                raise ValueError("nothing to export yet: wait for the feature table")
            if kind in JSON_KINDS:
                return self._json_writer(kind)(path)
            if kind == "table-csv":
                return self.view.export_table_csv(path, self.export_meta())
            return self.view.export_contexts_csv(path, self.export_meta())

        return write

    def _export_dialog(self, kind: str) -> None:
        name = ("features.csv" if kind == "table-csv" else self._json_name(kind) if kind in JSON_KINDS
                else "feature-contexts.csv")
        self.export_with_dialog(name, self._writer(kind), self.view.set_error)


def metrics_html(table) -> str:
    """The SAE's metrics, each with what it means; for neurons, what they are and their dead share."""
    if table.source.kind == "neurons":
        return (f"<b>{html.escape(table.source.describe())}</b>: each neuron is a feature; "
                f"{table.dead_fraction:.0%} never fired on the held-out text.")
    if not table.metrics:
        return f"<b>{html.escape(table.source.describe())}</b>: no metrics saved beside it."
    parts = []
    for key, (name, meaning) in METRIC_WORDS.items():
        value = table.metrics.get(key)
        if value is not None:
            shown = f"{value:.1%}" if key == "dead_fraction" else f"{value:.3g}"
            parts.append(f"<span title='{html.escape(meaning)}'><b>{name}</b> {shown}</span>")
    on = f" <span style='color:#8c8c8c'>(on {html.escape(table.metrics_on)})</span>" if table.metrics_on else ""
    return " · ".join(parts) + on + ("<br><i>An SAE is a reconstruction with an error term: features explain part "
                                     "of the activations, not all of them.</i>")


def token_history(over, feature: int) -> str:
    """"'e' (0) → 'q' (500)": the token the feature fires on most, each time it changes over the steps."""
    parts, last = [], None
    for step, labels in zip(over.steps, over.labels):
        label = labels[feature] if feature < len(labels) else ""
        if label != last:
            parts.append(f"{label!r} ({int(step):,})" if label else f"none ({int(step):,})")
            last = label
    return " → ".join(parts)


def _busiest(table) -> int:
    """The feature to open on: the most active one that is not dense (fires on under half the tokens)."""
    score = np.where(table.density < 0.5, table.max_act, -1.0)
    return int(np.argmax(score)) if score.size else 0
