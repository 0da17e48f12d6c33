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

import logging
import os

from PySide6.QtCore import QObject, QTimer, Signal
from PySide6.QtWidgets import QFileDialog, QVBoxLayout, QWidget

from ..panels.residual_panel import ResidualPanel

log = logging.getLogger("explorer.residual")

TASK_KEY = "residual"
REFERENCE_KEY = "residual-reference"
START_SHAPE = (48, 64, 4)  # n_layer, n_embd, n_head of the first sweep


def probe_overrides(settings: dict, block_size: int) -> dict:
    """The GPTConfig fields the panel sets; block_size grows to fit the prompts."""
    return dict(n_layer=settings["n_layer"], n_embd=settings["n_embd"], n_head=settings["n_head"],
                ln_placement=settings["ln_placement"], residual=settings["residual"],
                block_size=max(block_size, settings["length"]), dropout=0.0)


def describe(settings: dict) -> str:
    arch = f"{settings['ln_placement']}-LN, {'with' if settings['residual'] else 'WITHOUT'} residual connections"
    return (f"{settings['n_layer']} layers × {settings['n_embd']} wide, {settings['n_head']} heads · {arch} · "
            f"{len(settings['seeds'])} seeds")


class ResidualController(QObject):
    dataReady = Signal()  # after the first real draw
    drawn = Signal(str, object)  # (view, the session result drawn): tests record frames

    def __init__(self, ctx, panel: ResidualPanel, parent: QObject | None = None):
        super().__init__(parent)
        self.ctx, self.panel = ctx, panel
        self.results: dict[str, object] = {}  # view -> last result drawn
        self.last_settings: dict[str, dict] = {}
        self._ready_sent = False
        panel.runRequested.connect(self.run)
        panel.cancelRequested.connect(self.cancel)
        panel.exportRequested.connect(self._export_dialog)
        panel.viewChanged.connect(self._view_changed)
        panel.modelShapeRequested.connect(self.use_model_shape)

    # -- requests --------------------------------------------------------------------------
    def use_model_shape(self) -> None:
        cfg = self.ctx.session.config
        if cfg is not None:
            self.panel.set_shape(cfg.n_layer, cfg.n_embd, cfg.n_head)

    def run(self, settings: dict | None = None) -> None:
        settings = dict(settings or self.panel.settings())
        session = self.ctx.session
        if not session.has_model:
            self.panel.set_status("waiting for a model…")
            return
        if not settings["schemes"]:
            self.panel.set_status("Tick at least one init scheme to measure.")
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
            from gptcore.probes.residual import ProbeCancelled

            results = []
            try:
                for i, kw in enumerate(runs):
                    def report(done, _total, message, offset=i * steps):
                        progress(offset + done, steps * len(runs), message)

                    if view == "norms":
                        results.append(session.residual_norms(metric=settings["metric"], progress=report,
                                                              cancel=token, with_model=(i == 0), **kw))
                    else:
                        results.append(session.gradient_flow(quantity=settings["quantity"], progress=report,
                                                             cancel=token, **kw))
            except ProbeCancelled:
                token.raise_if_cancelled()  # ends the task quietly (not an error)
                raise
            return results

        self.panel.set_busy(True)
        self.panel.set_progress(0, steps * len(runs), "starting")
        self.panel.set_status(f"Measuring {describe(settings)}…")
        self.ctx.runner.submit(TASK_KEY, work,
                               on_result=lambda r: self._on_result(view, settings, r),
                               on_error=self._on_error, on_progress=self.panel.set_progress,
                               on_finished=self._on_finished)

    def cancel(self) -> None:
        self.ctx.runner.cancel(TASK_KEY)
        self.panel.set_status("Cancelled: the curves shown are the last complete run.")

    def on_model_changed(self) -> None:
        """Re-measure the loaded model's own curve (the random-init sweep does not depend on it)."""
        self.panel.set_reference(None)
        session = self.ctx.session
        if not self.results and session.has_model and not self.ctx.runner.is_running(TASK_KEY):
            self.run()  # the first sweep was waiting for a model
            return
        settings = self.last_settings.get("norms")
        if settings is not None:
            self._measure_reference(settings)

    def _measure_reference(self, settings: dict) -> None:
        """The loaded (trained) model's own curve, measured with the sweep's settings."""
        session = self.ctx.session
        if not session.has_model or not session.info.trained:
            return
        version = session.version

        def work(token, _progress):
            token.raise_if_cancelled()
            return session.model_residual_curve(batch=settings["batch"], length=settings["length"],
                                                seed=settings["seeds"][0], metric=settings["metric"])

        def done(ref):
            if ref is not None and ref.version == self.ctx.session.version == version:
                self.panel.set_reference(ref.x, ref.y, ref.name)

        self.ctx.runner.submit(REFERENCE_KEY, work, on_result=done, on_error=self._on_error)

    def _view_changed(self, view: str) -> None:
        if view not in self.results and not self.ctx.runner.is_running(TASK_KEY):
            self.run()

    # -- results -------------------------------------------------------------------------------
    def _on_result(self, view: str, settings: dict, results: list) -> None:
        result, other = results[0], (results[1] if len(results) > 1 else None)
        curves = result.curves
        self.results[view] = result
        self.last_settings[view] = settings
        if view == "norms":
            unit = "RMS ‖x‖/√width" if curves.quantity == "rms" else "mean ‖x‖₂ per token"
            y_label, what = unit, "Residual stream norm"
        else:
            y_label = "‖∂L/∂θ_block‖" if curves.quantity == "grad-params" else "‖∂L/∂x‖ per token at block input"
            what = "Gradient of the LM loss (random targets)"
        title = f"{what} · {describe(settings)}"
        self.panel.set_curves(view, curves.x, curves.schemes, curves.values, labels=curves.labels,
                              y_label=y_label, title=title,
                              context={k: settings[k] for k in ("n_layer", "residual", "ln_placement")},
                              comparison=None if other is None else other.curves.values,
                              comparison_label=("without" if settings["residual"] else "with") + " residual connections")
        if view == "norms":
            current = result.version == self.ctx.session.version
            if result.reference is not None and current:
                x = [i / 2 for i in range(len(result.reference))]
                self.panel.set_reference(x, result.reference, result.reference_name)
            else:
                self.panel.set_reference(None)
                if not current:  # the model changed mid-sweep: its reference was measured on the old one
                    self._measure_reference(settings)
        steps = len(curves.schemes) * len(curves.seeds) * len(results)
        elapsed = sum(r.elapsed_s for r in results)
        twice = " × 2 residual settings" if other is not None else ""
        self.panel.set_status(f"{steps} runs ({len(curves.schemes)} schemes × {len(curves.seeds)} seeds{twice}, "
                              f"{curves.n_tokens} tokens each) in {elapsed:.1f} s")
        self.drawn.emit(view, result)
        if not self._ready_sent:
            self._ready_sent = True
            self.dataReady.emit()

    def _on_finished(self) -> None:
        self.panel.set_busy(False)

    def _on_error(self, exc: BaseException) -> None:
        if isinstance(exc, ValueError):  # a setting that cannot be measured: say what to change
            self.panel.set_status(f"⚠ {exc}")
            return
        window = self.ctx.window
        if window is not None:
            window.report_error("Residual measurement failed", exc)
        else:
            log.error("residual measurement failed", exc_info=(type(exc), exc, exc.__traceback__))
        self.panel.set_status(f"⚠ {type(exc).__name__}: {exc}")

    # -- export -------------------------------------------------------------------------------
    def _export_dialog(self, kind: str) -> None:
        filters = {"csv": "CSV (*.csv)", "png": "PNG image (*.png)", "svg": "SVG image (*.svg)"}
        path, _ = QFileDialog.getSaveFileName(self.panel, "Export", f"residual-{self.panel.view}.{kind}",
                                              filters[kind])
        if path:
            self.export(kind, path)

    def export(self, kind: str, path: str) -> None:
        if not path.lower().endswith("." + kind):
            path += "." + kind
        try:
            if kind == "csv":
                self.panel.export_csv(path)
            else:
                self.panel.export_image(path)
        except (OSError, ValueError) as exc:
            self.panel.set_status(f"⚠ could not export: {exc}")
            return
        self.panel.set_status(f"Saved {os.path.basename(path)}")
        if self.ctx.window is not None:
            self.ctx.window.show_message(f"Saved {path}", 5000)


class ResidualView(QWidget):
    """What the registry's factory returns: the panel plus its controller; the first sweep
    starts as soon as the widget exists (screenshot mode waits for `dataReady`)."""

    dataReady = Signal()

    def __init__(self, ctx, parent: QWidget | None = None, autorun: bool = True):
        super().__init__(parent)
        from gptcore.init import INIT_SCHEMES

        self.panel = ResidualPanel(INIT_SCHEMES)
        self.panel.set_shape(*START_SHAPE)
        self.panel.log_box.setChecked(True)  # growth is multiplicative: log y shows every scheme
        self.controller = ResidualController(ctx, self.panel, parent=self)
        self.controller.dataReady.connect(self.dataReady)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.panel)
        if autorun:
            QTimer.singleShot(0, self.controller, self.controller.run)

    @property
    def is_ready(self) -> bool:
        return bool(self.controller.results)

    def on_model_changed(self) -> None:
        self.controller.on_model_changed()
