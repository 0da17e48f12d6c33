"""Attention controller: prompt edits -> debounced capture in a worker -> the panel.

Rules that keep it live while typing without ever drawing the past:
- debounce + one capture in flight (controllers/live.py, the helper every live panel uses).
  The debounce is half the last capture's time, between MIN_DEBOUNCE_MS (controllers/live.py) and DEBOUNCE_MS
  (half: keys that come during a capture are absorbed by the one-run-at-a-time rule anyway):
  with prefix reuse a keystroke's capture of a short prompt takes a few tens of ms, and
  waiting 80 ms for it would be most of the latency; a slow capture (long prompt, big model)
  keeps the full 80 ms so a burst of keys costs one capture, not one per key;
- runs are submitted under one runner key with the state they are computed for
  (PanelController.submit), so anything superseded, or computed for a model or ablation no
  longer loaded, is dropped by the runner;
- the zoom needs full resolution for its layer: a capture keeps it for the selected
  layer only (bounded memory), and clicking a head in another layer of a pooled (long)
  prompt asks for one more capture.
"""
from __future__ import annotations

import logging

import numpy as np
import shiboken6
from PySide6.QtCore import QObject, Signal

from explorer.views.attention.panel import AttentionPanel
from explorer.controllers.base import PanelController
from explorer.views.attention.protocol import AttentionView
from explorer.controllers.live import LiveRequest

log = logging.getLogger("explorer.attention")

DEBOUNCE_MS = 80
THUMB_SIZE = 64
TASK_KEY = "attention"


def head_summary_text(result, layer: int, head: int) -> str:
    return (f"entropy {result.entropy[layer, head]:.2f} nats · prev-token {result.prev_token[layer, head]:.2f}"
            f" · first-token {result.first_token[layer, head]:.2f}")


class AttentionController(PanelController[AttentionView]):
    """Connects an AttentionPanel to ctx.session through ctx.runner (see module docstring)."""

    drawn = Signal(object)  # the AttentionResult just drawn (tests record every frame)
    view_class = AttentionPanel
    task_keys = (TASK_KEY, "attention-census")

    def __init__(self, ctx, view: AttentionView, parent: QObject | None = None,
                 debounce_ms: int = DEBOUNCE_MS, thumb_size: int = THUMB_SIZE):
        super().__init__(ctx, view, parent)
        panel = view
        self.thumb_size = thumb_size
        self.debounce_ms = debounce_ms  # the longest wait; shorter while captures are cheap
        self.result = None  # the AttentionResult on screen
        self.selected: tuple[int, int] | None = None
        self._census_asked = False  # the head census for the state on screen is drawn or on its way
        self.live = LiveRequest(self._start_capture, debounce_ms, parent=self)
        self.timer = self.live.timer  # tests wait on it
        panel.promptChanged.connect(lambda _text: self.live.poke())
        panel.bosToggled.connect(lambda _on: self.request())
        panel.headSelected.connect(self.select_head)
        panel.ablateToggled.connect(self.toggle_ablation)
        panel.exportRequested.connect(self._export_dialog)
        panel.set_prompt_text(_default_prompt())  # --prompt arrives through set_prompt (PanelPage)

    # -- the panel contract ------------------------------------------------------------------
    def set_prompt(self, text: str) -> None:
        if text == self.view.prompt_text():
            return  # already shown or on its way (the edit that set it started the debounce)
        self.view.set_prompt_text(text)
        self.request()  # no need to wait for the debounce: this is not typing

    @property
    def is_ready(self) -> bool:
        """True once real data was drawn (screenshot mode may connect after dataReady fired)."""
        return self.result is not None

    def invalidate(self, event) -> None:
        """The maps, lens, chips, zoom and hover line belong to the old state: off screen."""
        self.result = None
        self._census_asked = False
        self.view.clear_results(event.reason)

    def refresh(self) -> None:
        self.request()

    # -- requests --------------------------------------------------------------------------
    @property
    def _in_flight(self) -> bool:
        return self.live.in_flight

    def request(self) -> None:
        """Compute for the panel's current text now, or right after the run in flight."""
        self.live.now()

    def _start_capture(self, done) -> bool:
        session = self.ctx.session
        if not session.has_model:
            self.view.set_status("waiting for a model…")
            return False
        text = self.view.prompt_text()
        layer = self.selected[0] if self.selected else 0
        bos = self.view.prepend_bos()
        thumb = self.thumb_size

        def work(token, _progress):
            token.raise_if_cancelled()
            return session.attention.capture(text, full_layers=(layer,), thumb_size=thumb, prepend_bos=bos)

        self.view.set_status("computing…")
        return self.submit(TASK_KEY, work, on_result=self._on_result, on_error=self._on_error, on_finished=done) > 0

    def select_head(self, layer: int, head: int) -> None:
        self.selected = (layer, head)
        if self.result is not None and layer < self.result.n_layer and head < self.result.n_head:
            self._show_selected()
            if not self.result.has_full(layer):
                self.request()

    def _show_census(self) -> None:
        """The induction column: the session's head census for this model and ablation,
        computed once per state in the background (repeated random tokens, ~1 s for GPT-2 small)."""
        if self._census_asked:
            return
        self._census_asked = True
        session = self.ctx.session

        def work(token, _progress):
            token.raise_if_cancelled()
            return session.interp.census()

        def show(census) -> None:
            # It may arrive after the view closed (nothing waits for it): then there is nothing to draw.
            if shiboken6.isValid(self.view):
                self.view.set_census(census.induction)

        self.view.set_census(None)
        self.submit("attention-census", work, on_result=show, on_error=self._on_error)

    def toggle_ablation(self, layer: int, head: int) -> None:
        """Shift+click: ablate (or restore) a head for every panel; the session announces it
        (AblationChanged) and every panel, this one included, follows."""
        self.ctx.change_ablation(lambda session: session.interp.toggle_head(layer, head), on_error=self._on_error)

    def on_model_changed(self, event) -> None:
        """The session holds a new model: forget the old picture's shape, clear it, recompute."""
        if self.selected and self.ctx.session.config is not None:
            cfg = self.ctx.session.config
            if self.selected[0] >= cfg.n_layer or self.selected[1] >= cfg.n_head:
                self.selected = None
        super().on_model_changed(event)

    # -- results (GUI thread) ------------------------------------------------------------
    def _on_result(self, result) -> None:
        self.result = result
        self.live.follow_work(result.forward_s * 1000)
        self.view.set_attention(result)
        self.view.set_ablated(self.ctx.session.interp.ablation.heads)
        self._show_census()
        if result.n_tokens:
            if self.selected is None or self.selected[0] >= result.n_layer or self.selected[1] >= result.n_head:
                flat = int(np.argmax(result.prev_token))  # open on the clearest head type there is
                self.selected = divmod(flat, result.n_head)
            self._show_selected()
            if not result.has_full(self.selected[0]):
                self.live.again_after()  # the zoom's "full resolution coming…": ask for it when this run ends
        self.view.set_status(f"{result.n_tokens} tokens · capture {result.forward_s * 1000:.0f} ms")
        self.drawn.emit(result)
        self.mark_ready()

    def _show_selected(self) -> None:
        r, (layer, head) = self.result, self.selected
        if not r.n_tokens:
            return
        summary = head_summary_text(r, layer, head)
        if r.has_full(layer):
            self.view.show_head(layer, head, r.pattern(layer, head), summary)
        else:
            self.view.show_head(layer, head, r.thumbnails[layer, head], summary,
                                 pooled_note=f"pooled to {r.thumbnails.shape[-1]} bins — full resolution coming…")

    def _on_error(self, exc: BaseException) -> None:
        """The last good picture (same model, an earlier text) stays under the error; a model
        swap has already cleared anything older (invalidate)."""
        self.view.set_error(self.report_error(exc, "Attention failed").inline)

    # -- export ----------------------------------------------------------------------------
    def export_npz(self, path: str) -> None:
        """Everything on screen as arrays: thumbnails, full layers, head stats, lens, tokens."""
        r = self.result
        if r is None:
            raise ValueError("nothing to export yet: type a prompt first")
        arrays = dict(
            text=np.array(r.text), tokens=np.array(r.tokens, dtype=str), token_ids=r.token_ids,
            cropped=np.array(r.cropped), thumbnails=r.thumbnails, bin_edges=r.bin_edges,
            entropy=r.entropy, prev_token=r.prev_token, first_token=r.first_token,
            lens_ids=r.lens_ids, lens_probs=r.lens_probs, lens_tokens=np.array(r.lens_tokens, dtype=str),
            model=np.array(getattr(self.ctx.session.info, "name", "")),
        )
        if r.exact:
            arrays["patterns"] = r.thumbnails  # (L, nh, T, T): the full patterns of every head
        else:
            for layer, pattern in r.full.items():
                arrays[f"layer{layer}_full"] = pattern
        np.savez_compressed(path, **arrays)

    def _export_dialog(self, kind: str) -> None:
        suggested = {"grid-png": "attention-grid.png", "head-png": "attention-head.png", "npz": "attention-capture.npz"}
        write = {"grid-png": self.view.export_grid_png, "head-png": self.view.export_head_png, "npz": self.export_npz}
        self.export_with_dialog(suggested[kind], write[kind], self.view.set_error)


def _default_prompt() -> str:
    try:
        from explorer.widgets.theme import sample_prompts

        prompts = sample_prompts()
    except (OSError, ImportError, ModuleNotFoundError):
        prompts = ()
    return prompts[0] if prompts else "The quick brown fox jumps over the lazy dog because the dog"
