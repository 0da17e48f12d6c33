"""Attention controller: prompt edits -> debounced capture in a worker -> the panel.

Rules that keep it live while typing without ever drawing the past:
- each edit restarts a single-shot QTimer (DEBOUNCE_MS); only its timeout computes;
- at most one capture runs at a time: an edit (or head click, BOS toggle, model swap)
  during a run marks the state dirty and ONE new run starts when it finishes, so a fast
  typist never queues a backlog of forwards on two cores;
- runs are submitted under one runner key, so anything superseded is dropped by the
  runner, and a result computed for an older `session.version` (model swapped meanwhile)
  is dropped here;
- the zoom needs full resolution for its layer: a capture keeps it for the selected
  layer only (bounded memory), and clicking a head in another layer of a pooled (long)
  prompt asks for one more capture.
"""
from __future__ import annotations

import logging

import numpy as np
import shiboken6
from PySide6.QtCore import QObject, QTimer, Signal
from PySide6.QtWidgets import QFileDialog, QVBoxLayout, QWidget

from ..errors import raised_by_our_code
from ..panels.attention_panel import AttentionPanel

log = logging.getLogger("explorer.attention")

DEBOUNCE_MS = 80
THUMB_SIZE = 64
TASK_KEY = "attention"


def head_summary_text(result, layer: int, head: int) -> str:
    return (f"entropy {result.entropy[layer, head]:.2f} nats · prev-token {result.prev_token[layer, head]:.2f}"
            f" · first-token {result.first_token[layer, head]:.2f}")


class AttentionController(QObject):
    """Connects an AttentionPanel to ctx.session through ctx.runner (see module docstring)."""

    drawn = Signal(object)  # the AttentionResult just drawn (tests record every frame)
    dataReady = Signal()  # after the first real draw

    def __init__(self, ctx, panel: AttentionPanel, parent: QObject | None = None,
                 debounce_ms: int = DEBOUNCE_MS, thumb_size: int = THUMB_SIZE):
        super().__init__(parent)
        self.ctx, self.panel, self.thumb_size = ctx, panel, thumb_size
        self.result = None  # the AttentionResult on screen
        self.selected: tuple[int, int] | None = None
        self._in_flight = False
        self._dirty = False
        self._ready_sent = False
        self._census_version = -1  # the version whose head census is on the grid (or on its way)
        self.timer = QTimer(self)
        self.timer.setSingleShot(True)
        self.timer.setInterval(debounce_ms)
        self.timer.timeout.connect(self.request)
        panel.promptChanged.connect(lambda _text: self.timer.start())
        panel.bosToggled.connect(lambda _on: self.request())
        panel.headSelected.connect(self.select_head)
        panel.ablateToggled.connect(self.toggle_ablation)
        panel.exportRequested.connect(self._export_dialog)

    # -- requests --------------------------------------------------------------------------
    def request(self) -> None:
        """Compute for the panel's current text now, or right after the run in flight."""
        self.timer.stop()
        if self._in_flight:
            self._dirty = True
            return
        session = self.ctx.session
        if not session.has_model:
            self.panel.set_status("waiting for a model…")
            return
        text = self.panel.prompt_text()
        layer = self.selected[0] if self.selected else 0
        bos = self.panel.bos_box.isChecked()
        thumb = self.thumb_size

        def work(token, _progress):
            token.raise_if_cancelled()
            return session.attention(text, full_layers=(layer,), thumb_size=thumb, prepend_bos=bos)

        self._in_flight = True
        self.panel.set_status("computing…")
        self.ctx.runner.submit(TASK_KEY, work, on_result=self._on_result, on_error=self._on_error,
                               on_finished=self._on_finished)

    def select_head(self, layer: int, head: int) -> None:
        self.selected = (layer, head)
        if self.result is not None and layer < self.result.n_layer and head < self.result.n_head:
            self._show_selected()
            if not self.result.has_full(layer):
                self.request()

    def _show_census(self, version: int) -> None:
        """The induction column: the session's head census for this model and ablation,
        computed once per version in the background (repeated random tokens, ~1 s for GPT-2 small)."""
        if self._census_version == version:
            return
        self._census_version = version
        session = self.ctx.session

        def work(token, _progress):
            token.raise_if_cancelled()
            return session.head_census()

        def show(census) -> None:
            # It may arrive after the view closed (nothing waits for it): then there is nothing to draw.
            if census.version == session.version and shiboken6.isValid(self.panel):
                self.panel.set_census(census.induction)

        self.panel.set_census(None)
        self.ctx.runner.submit("attention-census", work, on_result=show, on_error=self._on_error)

    def toggle_ablation(self, layer: int, head: int) -> None:
        """Shift+click: ablate (or restore) a head for every panel; the window then tells
        every panel, this one included, to recompute (the session's version moved)."""
        session = self.ctx.session
        if not session.has_model:
            return

        def work(token, _progress):
            return session.toggle_head(layer, head)

        def done(_state) -> None:
            window = self.ctx.window
            if window is not None and hasattr(window, "notify_model_changed"):
                window.notify_model_changed()
            else:
                self.on_model_changed()

        self.ctx.runner.submit("ablation", work, on_result=done, on_error=self._on_error)

    def on_model_changed(self) -> None:
        """The session holds a new model (or a new ablation): forget the old picture's shape and recompute."""
        if self.selected and self.ctx.session.config is not None:
            cfg = self.ctx.session.config
            if self.selected[0] >= cfg.n_layer or self.selected[1] >= cfg.n_head:
                self.selected = None
        self.request()

    # -- results (GUI thread) ------------------------------------------------------------
    def _on_result(self, result) -> None:
        if result.version != self.ctx.session.version:
            log.debug("dropped attention computed for model version %d", result.version)
            self._dirty = True  # the swap's own request may have been absorbed by this run
            return
        self.result = result
        self.panel.set_attention(result)
        self.panel.set_ablated(self.ctx.session.ablation.heads)
        self._show_census(result.version)
        if result.n_tokens:
            if self.selected is None or self.selected[0] >= result.n_layer or self.selected[1] >= result.n_head:
                flat = int(np.argmax(result.prev_token))  # open on the clearest head type there is
                self.selected = divmod(flat, result.n_head)
            self._show_selected()
        self.panel.set_status(f"{result.n_tokens} tokens · capture {result.forward_s * 1000:.0f} ms")
        self.drawn.emit(result)
        if not self._ready_sent:
            self._ready_sent = True
            self.dataReady.emit()

    def _show_selected(self) -> None:
        r, (layer, head) = self.result, self.selected
        if not r.n_tokens:
            return
        summary = head_summary_text(r, layer, head)
        if r.has_full(layer):
            self.panel.show_head(layer, head, r.pattern(layer, head), summary)
        else:
            self.panel.show_head(layer, head, r.thumbnails[layer, head], summary,
                                 pooled_note=f"pooled to {r.thumbnails.shape[-1]} bins — full resolution coming…")

    def _on_error(self, exc: BaseException) -> None:
        message = str(exc) or type(exc).__name__
        self.panel.set_error(message)
        # Input problems we diagnosed (our own ValueErrors) stay in the panel; anything else is a bug: dialog.
        if not (isinstance(exc, ValueError) and raised_by_our_code(exc)):
            window = self.ctx.window
            if window is not None and hasattr(window, "report_error"):
                window.report_error("Attention failed", exc)
            else:
                log.error("attention failed", exc_info=(type(exc), exc, exc.__traceback__))

    def _on_finished(self) -> None:
        self._in_flight = False
        if self._dirty:
            self._dirty = False
            self.request()

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
        for layer, pattern in r.full.items():
            arrays[f"layer{layer}_full"] = pattern
        np.savez_compressed(path, **arrays)

    def _export_dialog(self, kind: str) -> None:
        filters = {"grid-png": "PNG image (*.png)", "head-png": "PNG image (*.png)", "npz": "NumPy archive (*.npz)"}
        suggested = {"grid-png": "attention-grid.png", "head-png": "attention-head.png", "npz": "attention.npz"}
        path, _ = QFileDialog.getSaveFileName(self.panel, "Export", suggested[kind], filters[kind])
        if not path:
            return
        try:
            if kind == "npz":
                self.export_npz(path)
            elif not (self.panel.export_grid_png(path) if kind == "grid-png" else self.panel.export_head_png(path)):
                raise OSError(f"could not write {path}; pick a folder you can write to")
        except (OSError, ValueError) as exc:
            self.panel.set_error(str(exc))
            return
        window = self.ctx.window
        if window is not None and hasattr(window, "show_message"):
            window.show_message(f"Exported {path}", 5000)


class AttentionView(QWidget):
    """What the registry's factory returns: the panel plus its controller."""

    dataReady = Signal()

    def __init__(self, ctx, parent: QWidget | None = None, debounce_ms: int = DEBOUNCE_MS):
        super().__init__(parent)
        self.panel = AttentionPanel()
        self.controller = AttentionController(ctx, self.panel, parent=self, debounce_ms=debounce_ms)
        self.controller.dataReady.connect(self.dataReady)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.panel)
        self.panel.set_prompt_text(ctx.prompt if ctx.prompt is not None else _default_prompt())

    @property
    def is_ready(self) -> bool:
        """True once real data was drawn (screenshot mode may connect after dataReady fired)."""
        return self.controller.result is not None

    def set_prompt(self, text: str) -> None:
        if text == self.panel.prompt_text():
            return  # already shown or on its way (the edit that set it started the debounce)
        self.panel.set_prompt_text(text)
        self.controller.request()  # no need to wait for the debounce: this is not typing

    def on_model_changed(self) -> None:
        self.controller.on_model_changed()


def _default_prompt() -> str:
    try:
        from ..theme import sample_prompts

        prompts = sample_prompts()
    except (OSError, ImportError, ModuleNotFoundError):
        prompts = ()
    return prompts[0] if prompts else "The quick brown fox jumps over the lazy dog because the dog"
