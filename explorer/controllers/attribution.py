"""Attribution controller: the Attribution panel <-> the session, through the task runner.

- DLA follows the prompt, target and contrast live, with the attention panel's rules
  (controllers/live.py: debounce, one run in flight); every request carries the state it is
  computed for, and the runner drops a result whose model or ablation is gone.
- Ablation is session state: a click toggles a head or an MLP in the session (on a worker:
  mean ablation runs the sample prompts); the session announces it (AblationChanged), so
  EVERY panel, this one included, recomputes with the ablated model.
- Patching runs under its own key with progress and Cancel; a model swap stops it (the
  session raises a message); clicking a cell asks for that cell's patched distribution.
- The head census is computed once per model/ablation state, when this panel is built
  and after each change.
"""
from __future__ import annotations

import logging

import shiboken6
from PySide6.QtCore import QObject, Signal

from explorer.views.attribution.panel import AttributionPanel, Pick
from explorer.controllers.context import ABLATION_TASK
from explorer.session.events import ModelSwapped
from explorer.controllers.base import PanelController
from explorer.views.attribution.protocol import AttributionView
from explorer.controllers.live import LiveRequest

log = logging.getLogger("explorer.attribution")

DEBOUNCE_MS = 120
DEFAULT_PROMPT = "When Mary and John went to the store, John gave a drink to"
DEFAULT_CORRUPT = "When Mary and John went to the store, Mary gave a drink to"
KEYS = dict(dla="attribution", patch="patching", cell="patched-cell", census="census", ablation=ABLATION_TASK)


class AttributionController(PanelController[AttributionView]):
    drawn = Signal(object)  # the AttributionResult just drawn
    patched = Signal(object)  # the PatchingResult just drawn
    censusDrawn = Signal(object)
    view_class = AttributionPanel
    task_keys = tuple(KEYS.values())
    background_keys = (KEYS["patch"],)  # a patching run the user started goes on behind another tab

    def __init__(self, ctx, view: AttributionView, parent: QObject | None = None, debounce_ms: int = DEBOUNCE_MS):
        super().__init__(ctx, view, parent)
        self.result = None  # AttributionResult on screen
        self.patch_result = None  # PatchingResult on screen
        self.census = None
        self.target: int | None = None  # None: the model's top-1
        self.contrast: int | None | str = "auto"  # "auto": top-2; None: no contrast
        self._patch_answered = True
        self.live = LiveRequest(self._start_dla, debounce_ms, parent=self)
        self.timer = self.live.timer
        view.promptChanged.connect(lambda _text: self.live.poke())
        view.targetPicked.connect(self.pick_target)
        view.contrastPicked.connect(self.pick_contrast)
        view.headToggled.connect(lambda layer, head: self._change_ablation("head", layer, head))
        view.mlpToggled.connect(lambda layer: self._change_ablation("mlp", layer))
        view.modeChanged.connect(lambda mode: self._change_ablation("mode", mode))
        view.resetRequested.connect(lambda: self._change_ablation("reset"))
        view.runRequested.connect(self.run_patching)
        view.cancelRequested.connect(lambda: self.ctx.runner.cancel(KEYS["patch"]))
        view.cellClicked.connect(self.show_cell)
        view.exportRequested.connect(self._export_dialog)
        view.set_corrupt_text(DEFAULT_CORRUPT)
        view.set_prompt_text(DEFAULT_PROMPT)  # --prompt arrives through set_prompt (PanelPage)
        self._show_ablation()
        self.request_census()

    # -- the panel contract ------------------------------------------------------------------
    @property
    def is_ready(self) -> bool:
        return self.result is not None

    def set_prompt(self, text: str) -> None:
        if text == self.view.prompt_text():
            return
        self.view.set_prompt_text(text)
        self.request()

    def invalidate(self, event) -> None:
        """A new model: its shape may differ, so the maps go; a new ablation: what is drawn is
        marked out of date until the recomputation lands (patching waits for Run)."""
        reason = event.reason
        self.view.set_status(reason)
        if isinstance(event, ModelSwapped):
            self.result = self.patch_result = self.census = None
            self.view.clear_results(reason)
        elif self.patch_result is not None:
            self.view.set_patch_message(f"{reason}: these maps are from before; Run again", error=True)

    def refresh(self) -> None:
        self.request()
        self.request_census()

    @property
    def session(self):
        return self.ctx.session

    # -- DLA ---------------------------------------------------------------------------------
    def request(self) -> None:
        """DLA for the panel's prompt now, or right after the run in flight."""
        self.live.now()

    def _start_dla(self, done) -> bool:
        session = self.session
        if not session.has_model:
            self.view.set_status("waiting for a model…")
            return False
        text, target, contrast = self.view.prompt_text(), self.target, self.contrast

        def work(token, _progress):
            token.raise_if_cancelled()
            return session.interp.attribution(text, target, contrast)

        self.view.set_status("computing…")
        self.view.set_message("")  # a new question: the last complaint no longer applies
        return self.submit(KEYS["dla"], work, on_result=self._on_result, on_error=self._on_error,
                           on_finished=done) > 0

    def _on_result(self, result) -> None:
        self.result = result
        self.view.set_attribution(result)
        self.view.set_status(f"{len(result.tokens)} tokens · {result.elapsed_s * 1000:.0f} ms")
        self.drawn.emit(result)
        self.mark_ready()

    def _on_error(self, exc: BaseException) -> None:
        self.view.set_status("")  # not "computing…" next to the error: nothing is
        self._show_error("Attribution failed", exc)

    def _show_error(self, title: str, exc: BaseException, patching: bool = False) -> None:
        """The one error path: an input problem stays in the panel; a bug also opens the dialog."""
        message = self.report_error(exc, title).inline
        if patching:
            self.view.set_patch_message(message, error=True)
        else:
            self.view.set_message(message)

    # -- target and contrast -------------------------------------------------------------------
    def _resolve(self, text: str) -> int | None:
        try:
            return self.session.interp.resolve_token(text).id
        except ValueError as exc:
            self.view.set_message(str(exc))
            return None

    def pick_target(self, text) -> None:
        """`text`: a token's raw text, or Pick.TOP1 (the model's own top-1)."""
        if text is Pick.TOP1:
            self.target = None
        else:
            token = self._resolve(text)
            if token is None:
                return
            if token == self.contrast:
                self.view.set_message(f"target and contrast are the same token ({text!r}); pick another contrast")
                return
            self.target = token
        self.request()

    def pick_contrast(self, text) -> None:
        """`text`: a token's raw text, Pick.TOP2 (the model's runner-up) or Pick.NONE (a plain logit)."""
        if text is Pick.TOP2:
            self.contrast = "auto"
        elif text is Pick.NONE or text == "":
            self.contrast = None
        else:
            token = self._resolve(text)
            if token is None:
                return
            current_target = self.target if self.target is not None else (self.result.target.id if self.result else None)
            if token == current_target:
                self.view.set_message(f"target and contrast are the same token ({text!r}); pick another contrast")
                return
            self.contrast = token
        self.request()

    # -- ablation (session state) -------------------------------------------------------------
    def _change_ablation(self, what: str, *args) -> None:
        mode = self.view.ablation_mode()

        def work(session):
            if what == "head":
                return session.interp.toggle_head(args[0], args[1], mode)
            if what == "mlp":
                return session.interp.toggle_mlp(args[0], mode)
            if what == "mode":
                state = session.interp.ablation
                return session.interp.set_ablation(state.heads, state.mlps, args[0]) if state.active else state
            return session.interp.clear_ablation()

        # The session announces the change (AblationChanged): every panel, this one included, follows.
        self.ctx.change_ablation(work, on_error=lambda exc: (self._show_error("Ablation failed", exc),
                                                             self._show_ablation()))

    def _show_ablation(self) -> None:
        state = self.session.interp.ablation
        self.view.set_ablation(state.heads, state.mlps, state.text(), state.mode)

    # -- patching ------------------------------------------------------------------------------
    def run_patching(self, corrupt_text: str) -> None:
        session, result = self.session, self.result
        if result is None:  # none yet, or cleared by a change it was computed before
            self.view.set_patch_message("wait for the attribution of the clean prompt to finish, then Run", error=True)
            return
        clean_text = result.text
        target = result.target.id
        contrast = result.contrast.id if result.contrast is not None else None

        def work(token, progress):
            return session.interp.patching(clean_text, corrupt_text, target, contrast, progress=progress, cancel=token)

        self.view.set_running(True)
        self.view.set_patch_message("patching…")
        self._patch_answered = False  # stays False when the run ends by Cancel (no result, no error)
        self.submit(KEYS["patch"], work, on_result=self._on_patched, on_error=self._on_patch_error,
                    on_progress=lambda done, total, _msg: self.view.set_progress(done, total),
                    on_finished=self._patching_finished, on_dropped=self._patch_outdated)

    def _patch_outdated(self) -> None:
        """The run ended after the model or the ablation changed: its maps answer another question."""
        self._patch_answered = True
        self.view.set_patch_message("the model or the ablation changed during the run; Run again", error=True)

    def _on_patch_error(self, exc: BaseException) -> None:
        self._patch_answered = True
        self._show_error("Patching failed", exc, patching=True)

    def _on_patched(self, result) -> None:
        self._patch_answered = True
        self.patch_result = result
        self.view.set_patching(result)
        self.patched.emit(result)

    def _patching_finished(self) -> None:
        self.view.set_running(False)
        if not self._patch_answered:
            self.view.set_patch_message("cancelled; the maps shown (if any) are from the previous run")

    def show_cell(self, kind: str, layer: int, index: int) -> None:
        r = self.patch_result
        if r is None:
            return
        session = self.session

        def work(token, _progress):
            token.raise_if_cancelled()
            return session.interp.patched_distribution(r.clean_text, r.corrupt_text, kind, layer, index)

        self.submit(KEYS["cell"], work, on_result=self.view.set_patched_distribution,
                    on_error=lambda exc: self._show_error("Patched distribution failed", exc, patching=True))

    # -- census ----------------------------------------------------------------------------------
    def request_census(self) -> None:
        session = self.session
        if not session.has_model:
            return

        def work(token, _progress):
            token.raise_if_cancelled()
            return session.interp.census()

        self.submit(KEYS["census"], work, on_result=self._on_census,
                    on_error=lambda exc: self._show_error("Head census failed", exc))

    def _on_census(self, census) -> None:
        if not shiboken6.isValid(self.view):
            return  # the view closed while it was computed
        self.census = census
        self.view.set_census(census.rows(), self.session.interp.ablation.heads)
        self.censusDrawn.emit(census)

    # -- model swaps and ablation changes ---------------------------------------------------------
    def on_model_changed(self, event) -> None:
        """A new model (its ablation is cleared): the picked target and contrast go back to
        the model's own top-1/top-2 (an id names another token under another tokenizer, and the
        pickers list the new model's tokens once it answers); then clear and recompute."""
        self.target, self.contrast = None, "auto"
        self._show_ablation()
        super().on_model_changed(event)

    def on_settings_changed(self, event) -> None:
        """The ablation changed (here, in another panel, or the status bar's Reset): mark, then recompute."""
        self._show_ablation()
        super().on_settings_changed(event)

    # -- export ----------------------------------------------------------------------------------
    def _export_dialog(self, key: str, fmt: str) -> None:
        self.export_with_dialog(f"attribution-{key}.{fmt}", self._writer(key, fmt), self.view.set_message)

    def export(self, key: str, fmt: str, path: str) -> None:
        self.export_to(path, self._writer(key, fmt), self.view.set_message)

    def _writer(self, key: str, fmt: str):
        return lambda path: self.view.export(key, fmt, path, self.export_meta(key))

    def export_meta(self, key: str) -> dict:
        """What a CSV of view `key` was computed from: the model, the ablation in force, and
        (except the census, which needs neither) the prompt, target and contrast."""
        info, state = self.session.info, self.session.interp.ablation
        parts = [f"L{layer}H{head}" for layer, head in sorted(state.heads)] + [f"L{m} MLP" for m in sorted(state.mlps)]
        meta = {"model": f"{info.name} ({info.status_word})",
                "ablation": f"{', '.join(parts)} ({state.mode} ablation)" if parts else "none"}
        patched = key in ("resid", "attn", "mlp", "pheads")
        r = self.patch_result if patched else self.result
        if key != "census" and r is not None:
            meta["prompt" if not patched else "clean prompt"] = r.clean_text if patched else r.text
            if patched:
                meta["corrupted prompt"] = r.corrupt_text
            meta["target"] = repr(r.target.text)
            meta["contrast"] = repr(r.contrast.text) if r.contrast is not None else "none (the target's own logit)"
        return meta
