"""Residual controller: panel settings -> a scheme × seed sweep in a worker -> the panel.

Each Run is one task under one runner key, so a second Run (or a view change that needs
data) supersedes the first and its results are dropped by the runner; Cancel sets the
token, which the gptcore probe checks between (scheme, seed) steps. The loaded model's
own curve is measured on the same prompts and drawn dashed when the model is trained;
after a model swap only that curve is re-measured (one forward), not the sweep.

The panel opens on a deep, narrow model (48 × 64): the lesson is unmistakable there and
the sweep takes seconds; "Loaded model's" switches to the current model's shape.
"""
from __future__ import annotations

import os

from PySide6.QtCore import QObject, QTimer, Signal

from gptcore.model.init import INIT_SCHEMES

from explorer.views.residual.panel import ResidualPanel
from explorer.controllers.base import PanelController
from explorer.controllers.context import any_state
from explorer.views.residual.protocol import ResidualView


TASK_KEY = "residual"
REFERENCE_KEY = "residual-reference"
START_SHAPE = (48, 64, 4)  # n_layer, n_embd, n_head of the first sweep


def probe_overrides(settings: dict, block_size: int) -> dict:
    """The GPTConfig fields the panel sets; block_size grows to fit the prompts."""
    return dict(n_layer=settings["n_layer"], n_embd=settings["n_embd"], n_head=settings["n_head"],
                ln_placement=settings["ln_placement"], norm=settings.get("norm", "layernorm"),
                residual=settings["residual"],
                block_size=max(block_size, settings["length"]), dropout=0.0)


# What a result depends on, per view (the scheme ticks, band and log y only change the drawing).
_MEASURED = ("n_layer", "n_embd", "n_head", "ln_placement", "norm", "residual", "compare", "batch", "length", "seeds", "text")
MEASURED_BY_VIEW = {"norms": _MEASURED + ("metric",), "gradients": _MEASURED + ("quantity",)}
SETTING_NAMES = {"n_layer": "layers", "n_embd": "width", "n_head": "heads", "ln_placement": "LayerNorm placement", "norm": "norm",
                 "residual": "residual connections", "compare": "the dashed comparison", "batch": "batch",
                 "length": "length", "seeds": "seeds", "text": "text", "metric": "norm", "quantity": "gradient"}


def changed_settings(view: str, measured: dict, now: dict) -> list[str]:
    """The settings (by their labels) that differ between a drawn result and the controls."""
    return [SETTING_NAMES[k] for k in MEASURED_BY_VIEW[view] if measured.get(k) != now.get(k)]


def describe(settings: dict) -> str:
    norm = "RMSNorm" if settings.get("norm") == "rmsnorm" else "LN"
    arch = f"{settings['ln_placement']}-{norm}, {'with' if settings['residual'] else 'WITHOUT'} residual connections"
    return (f"{settings['n_layer']} layers × {settings['n_embd']} wide, {settings['n_head']} heads · {arch} · "
            f"{len(settings['seeds'])} seeds")


def reference_label(name: str, status_word: str) -> str:
    """The legend's name for the loaded model's own curve: "trained" only when the weights are known
    to be (a file of unknown provenance, like the book's model.pth, may hold untrained weights)."""
    return f"{name} (trained)" if status_word == "trained" else f"{name} (as loaded: training not known)"


class ResidualController(PanelController[ResidualView]):
    drawn = Signal(str, object)  # (view, the session result drawn): tests record frames
    task_keys = (TASK_KEY, REFERENCE_KEY)
    background_keys = (TASK_KEY,)  # a sweep the user started goes on behind another tab

    view_class = ResidualPanel
    view_args = (INIT_SCHEMES,)

    def __init__(self, ctx, view: ResidualView, parent: QObject | None = None, autorun: bool = True):
        super().__init__(ctx, view, parent)
        panel = view
        view.set_shape(*START_SHAPE)
        view.set_log_y(True)  # growth is multiplicative: log y shows every scheme
        self.results: dict[str, object] = {}  # view -> last result drawn
        self.last_settings: dict[str, dict] = {}
        self.probe_bases: dict[str, dict] = {}  # view -> the model-derived config the sweep ran on
        self.statuses: dict[str, str] = {}  # view -> its status line (the view shown says its own)
        self.reference = None  # the loaded model's own curve on screen (a ReferenceCurve), if any
        self._running_view: str | None = None  # the view the sweep in flight measures
        panel.runRequested.connect(self.run)
        panel.cancelRequested.connect(self.cancel)
        panel.exportRequested.connect(self._export_dialog)
        panel.viewChanged.connect(self._view_changed)
        panel.modelShapeRequested.connect(self.use_model_shape)
        panel.measurementEdited.connect(self.update_stale_mark)
        if autorun:
            QTimer.singleShot(0, self, self.run)  # the first sweep starts as soon as the panel exists

    @property
    def is_ready(self) -> bool:
        return bool(self.results)

    def _set_status(self, view: str, text: str) -> None:
        self.statuses[view] = text
        if view == self.view.current_view:
            self.view.set_status(text)

    def update_stale_mark(self) -> None:
        """Say when the plot shown was measured with other settings or on another model's parts."""
        view = self.view.current_view
        measured = self.last_settings.get(view)
        if measured is None:
            self.view.set_stale(None)
            return
        reasons = []
        changed = changed_settings(view, measured, self.view.settings())
        if changed:
            reasons.append(f"{', '.join(changed)} changed since this run")
        session = self.ctx.session
        if session.has_model and self.probe_bases.get(view) not in (None, self._probe_base(measured)):
            reasons.append("the loaded model changed (its vocabulary and parts shape these random models)")
        self.view.set_stale("; ".join(reasons) + " — press Run to measure again." if reasons else None)

    # -- requests --------------------------------------------------------------------------
    def use_model_shape(self) -> None:
        cfg = self.ctx.session.config
        if cfg is not None:
            self.view.set_shape(cfg.n_layer, cfg.n_embd, cfg.n_head)

    def run(self, settings: dict | None = None) -> None:
        settings = dict(settings or self.view.settings())
        session = self.ctx.session
        if not session.has_model:
            self.view.set_status("waiting for a model…")
            return
        if not settings["schemes"]:
            self.view.set_status("Tick at least one init scheme to measure.")
            return
        view = settings["view"]
        tokens = None
        if settings["text"].strip():
            ids = session.encode(settings["text"])[: settings["length"]]
            tokens = [ids]
        overrides = probe_overrides(settings, session.config.block_size)
        common = dict(config=overrides, schemes=settings["schemes"], seeds=settings["seeds"],
                      batch=settings["batch"], length=settings["length"], tokens=tokens)

        runs = [common]
        if settings.get("compare"):  # the other residual setting, drawn dashed
            runs.append(dict(common, config=dict(overrides, residual=not settings["residual"])))
        steps = len(settings["schemes"]) * len(settings["seeds"])

        def work(token, progress):
            from gptcore.interp.probes.residual import ProbeCancelled

            results = []
            try:
                for i, kw in enumerate(runs):
                    def report(done, _total, message, offset=i * steps):
                        progress(offset + done, steps * len(runs), message)

                    if view == "norms":  # the loaded model's own curve is its own task (_measure_reference)
                        results.append(session.residual.norms(metric=settings["metric"], progress=report,
                                                              cancel=token, with_model=False, **kw))
                    else:
                        results.append(session.residual.gradients(quantity=settings["quantity"], progress=report,
                                                             cancel=token, **kw))
            except ProbeCancelled:
                token.raise_if_cancelled()  # ends the task quietly (not an error)
                raise
            return results

        try:
            base = self._probe_base(settings)
        except ValueError as exc:  # a shape no model can have (width not divisible by heads…)
            self._on_error(exc)
            return
        self.view.set_busy(True)
        self._running_view = view
        self.view.set_progress(0, steps * len(runs), "starting")
        self._set_status(view, f"Measuring {describe(settings)}…")
        # The random-init sweep does not depend on the loaded model (any_state), so a swap mid-sweep
        # keeps it; the loaded model's own curve is measured after it, under the one stale rule.
        self.submit(TASK_KEY, work, still_current=any_state,
                    on_result=lambda r: self._on_result(view, settings, r, base),
                    on_error=self._on_error, on_progress=self.view.set_progress, on_finished=self._on_finished)

    def _probe_base(self, settings: dict) -> dict:
        """The config the sweep's random models get from the loaded one (vocabulary, parts)."""
        session = self.ctx.session
        if not session.has_model:
            return {}
        return session.residual.probe_config(probe_overrides(settings, session.config.block_size)).to_dict()

    def cancel(self) -> None:
        self.ctx.runner.cancel(TASK_KEY)
        self._set_status(self.view.current_view, "Cancelled: the curves shown are the last complete run.")

    def invalidate(self, event) -> None:
        """The trained model's dashed curve belongs to the old model: off. The random-init sweep
        stays if the new model gives it the same parts; otherwise it is marked (update_stale_mark)."""
        self.view.set_reference(None)
        self.reference = None
        self.update_stale_mark()

    def refresh(self) -> None:
        """Re-measure the loaded model's own curve; run the first sweep if it was waiting."""
        session = self.ctx.session
        if not self.results and session.has_model and not self.ctx.runner.is_running(TASK_KEY):
            self.run()
            return
        settings = self.last_settings.get("norms")
        if settings is not None:
            self._measure_reference(settings)

    def _measure_reference(self, settings: dict) -> None:
        """The loaded (trained) model's own curve, measured with the sweep's settings."""
        session = self.ctx.session
        if not session.has_model or session.info.status_word == "untrained":
            return

        text = settings.get("text", "").strip()
        tokens = [session.encode(text)[: settings["length"]]] if text else None

        def work(token, _progress):
            token.raise_if_cancelled()
            return session.residual.model_curve(batch=settings["batch"], length=settings["length"],
                                                seed=settings["seeds"][0], metric=settings["metric"], tokens=tokens)

        def done(ref):  # only called while the model it was measured on is loaded (the one stale rule)
            self.reference = ref
            if ref is not None:
                self.view.set_reference(ref.x, ref.y, reference_label(ref.name, session.info.status_word))

        self.submit(REFERENCE_KEY, work, on_result=done, on_error=self._on_error)

    def _view_changed(self, view: str) -> None:
        self.view.set_status(self.statuses.get(view, ""))
        self.update_stale_mark()
        if view not in self.results and not self.ctx.runner.is_running(TASK_KEY):
            self.run()

    # -- results -------------------------------------------------------------------------------
    def _on_result(self, view: str, settings: dict, results: list, base: dict | None = None) -> None:
        """The sweep (random-init models) stays valid across a model swap; the loaded model's own
        curve is measured next, for the model loaded now (`_measure_reference`)."""
        result, other = results[0], (results[1] if len(results) > 1 else None)
        curves = result.curves
        self.results[view] = result
        self.last_settings[view] = settings
        self.probe_bases[view] = base or {}
        if view == "norms":
            unit = "RMS ‖x‖/√width" if curves.quantity == "rms" else "mean ‖x‖₂ per token"
            y_label, what = unit, "Residual stream norm"
        else:
            y_label = "‖∂L/∂θ_block‖" if curves.quantity == "grad-params" else "‖∂L/∂x‖ per token at block input"
            what = "Gradient of the LM loss (random targets)"
        title = f"{what} · {describe(settings)}"
        self.view.set_curves(view, curves.x, curves.schemes, curves.values, labels=curves.labels,
                              y_label=y_label, title=title,
                              context={k: settings[k] for k in ("n_layer", "residual", "ln_placement")},
                              comparison=None if other is None else other.curves.values,
                              comparison_label=("without" if settings["residual"] else "with") + " residual connections")
        if view == "norms":
            self.view.set_reference(None)
            self._measure_reference(settings)
        steps = len(curves.schemes) * len(curves.seeds) * len(results)
        elapsed = sum(r.elapsed_s for r in results)
        twice = " × 2 residual settings" if other is not None else ""
        self._set_status(view, f"{steps} runs ({len(curves.schemes)} schemes × {len(curves.seeds)} seeds{twice}, "
                               f"{curves.n_tokens} tokens each) in {elapsed:.1f} s")
        self.update_stale_mark()
        self.drawn.emit(view, result)
        self.mark_ready()

    def _on_finished(self) -> None:
        """A sweep ended. If the user switched to a view with no data while it ran (the switch
        does not start a second sweep meanwhile), that view's first sweep starts now."""
        self.view.set_busy(False)
        ran, self._running_view = self._running_view, None
        current = self.view.current_view
        if ran is not None and ran != current and current not in self.results and self.ctx.session.has_model:
            self.run()

    def _on_error(self, exc: BaseException) -> None:
        text = self.report_error(exc, "Residual measurement failed").inline
        self._set_status(self.view.current_view, f"⚠ {text}")

    # -- export -------------------------------------------------------------------------------
    def _export_dialog(self, kind: str) -> None:
        self.export_with_dialog(f"residual-{self.view.current_view}.{kind}", self._writer(kind),
                                self._export_failed)

    def export(self, kind: str, path: str) -> None:
        if not path.lower().endswith("." + kind):
            path += "." + kind
        self.export_to(path, self._writer(kind), self._export_failed)

    def _writer(self, kind: str):
        def write(path: str) -> None:
            if not path.lower().endswith("." + kind):
                path += "." + kind
            self.view.export_csv(path) if kind == "csv" else self.view.export_image(path)
            self.view.set_status(f"Saved {os.path.basename(path)}")

        return write

    def _export_failed(self, text: str) -> None:
        self.view.set_status(f"⚠ could not export: {text}")
