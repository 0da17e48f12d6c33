"""The attention panel: prompt + token chips on top, the layers × heads grid (with summary
and logit-lens columns) on the left, the selected head large on the right.

A passive view: data comes in through `set_attention` / `show_head` (any object with
AttentionResult's numpy fields; this module never imports torch or the session), and
the user's intent goes out as signals (`promptChanged`, `headSelected`, `bosToggled`,
`exportRequested`). The controller (explorer/controllers/attention.py) does the rest.
"""
from __future__ import annotations

import numpy as np
from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QFont
from PySide6.QtWidgets import (
    QHBoxLayout, QLabel, QSplitter, QVBoxLayout, QWidget,
)

from explorer.views.attention.head_zoom import HeadZoom
from explorer.widgets.heatmap_grid import HeatmapGrid
from explorer.widgets.controls import check_box
from explorer.widgets.menu_button import menu_button
from explorer.widgets.prompt_box import PromptBox, prompt_row
from explorer.widgets.token_chips import TokenChips
from explorer.widgets.token_stream import visible_token


def bin_labels(tokens: list[str], edges: np.ndarray) -> list[str]:
    """Labels of the thumbnail rows: the token itself, or 'tokens a–b' for a pooled bin."""
    labels = []
    for lo, hi in zip(edges[:-1], edges[1:]):
        lo, hi = int(lo), int(hi)
        labels.append(f"{lo} {visible_token(tokens[lo])}" if hi - lo == 1 else f"tokens {lo}–{hi - 1}")
    return labels


STATUS_MAX_PX = 360


class AttentionPanel(QWidget):
    promptChanged = Signal(str)
    headSelected = Signal(int, int)
    ablateToggled = Signal(int, int)  # Shift+click on a tile: ablate / restore that head (session-wide)
    bosToggled = Signal(bool)
    exportRequested = Signal(str)  # "grid-png" | "head-png" | "npz"

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self._tokens: list[str] = []
        self._zoom_row: np.ndarray | None = None  # the zoomed head's pattern, for chip tints
        top = self._build_prompt_row()
        self.chips = TokenChips()
        self.crop_note = QLabel()
        self.crop_note.setObjectName("cropNote")
        self.crop_note.setStyleSheet("color: #ea580c; font-weight: 600;")
        self.crop_note.setWordWrap(True)
        self.crop_note.hide()
        splitter = self._build_grid_and_zoom()
        self.readout = QLabel(" ")
        mono = QFont("monospace")
        mono.setStyleHint(QFont.StyleHint.Monospace)
        self.readout.setFont(mono)
        self.readout.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)

        layout = QVBoxLayout(self)
        layout.addLayout(top)
        layout.addWidget(self.chips)
        layout.addWidget(self.crop_note)
        layout.addWidget(splitter, 1)
        layout.addWidget(self.readout)
        self.grid.hoverText.connect(self.readout.setText)
        self.zoom.hoverText.connect(self.readout.setText)
        self.zoom.queryHovered.connect(self._tint_chips)

    # -- construction ------------------------------------------------------------------------
    def _build_prompt_row(self) -> QHBoxLayout:
        """The prompt box, and beside it the token count, the status line and the options."""
        self.prompt = PromptBox("Type a prompt: every layer's and head's attention updates as you type.", 64)
        self.prompt.edited.connect(self.promptChanged)
        self.count_label = QLabel("0 tokens")
        self.count_label.setAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        self.status_label = QLabel("")
        self.status_label.setAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        self.status_label.setWordWrap(True)  # a long error grows downwards, never squeezes the prompt box
        self.status_label.setMaximumWidth(STATUS_MAX_PX)
        self.log_box = check_box("log scale", "Colour by log₁₀ weight (1e-4 … 1) to see small weights", self._on_log)
        self.bos_box = check_box("prepend <|endoftext|>", "Start the sequence with GPT-2's BOS token, as "
                                 "TransformerLens does by default", self.bosToggled)
        self.export_button = menu_button("Export", [
            (text, lambda kind=kind: self.exportRequested.emit(kind))
            for text, kind in (("Grid as PNG…", "grid-png"), ("Selected head as PNG…", "head-png"),
                               ("Captured arrays as .npz (pooled maps, head stats, lens)…", "npz"))])
        side = QVBoxLayout()
        side.addWidget(self.count_label)
        side.addWidget(self.status_label)
        opts = QHBoxLayout()
        opts.addWidget(self.log_box)
        opts.addWidget(self.bos_box)
        opts.addWidget(self.export_button)
        side.addLayout(opts)
        return prompt_row(self.prompt, side)

    def _build_grid_and_zoom(self) -> QSplitter:
        self.grid = HeatmapGrid()
        self.zoom = HeadZoom()
        splitter = QSplitter(Qt.Orientation.Horizontal)
        splitter.addWidget(self.grid)
        splitter.addWidget(self.zoom)
        splitter.setStretchFactor(0, 3)
        splitter.setStretchFactor(1, 2)
        self.splitter = splitter
        self.grid.headSelected.connect(self.headSelected)
        self.grid.ablateToggled.connect(self.ablateToggled)
        return splitter

    # -- data in ---------------------------------------------------------------------------
    def prompt_text(self) -> str:
        return self.prompt.toPlainText()

    def set_prompt_text(self, text: str) -> None:
        self.prompt.set_text(text)

    def set_attention(self, result) -> None:
        """Draw every head of `result` (AttentionResult-shaped: numpy arrays and strings)."""
        self.readout.setText(" ")  # a hover line read the previous numbers
        self._tokens = list(result.tokens)
        self.chips.set_tokens(self._tokens)
        T = len(self._tokens)
        crop = f"  ({result.cropped} cropped)" if result.cropped else ""
        self.count_label.setText(f"{T} / {result.block_size} tokens{crop}")
        if result.cropped:
            self.crop_note.setText(crop_note_text(result, T - int(result.bos_added)))
            self.crop_note.show()
        else:
            self.crop_note.hide()
        stats = {"entropy": result.entropy, "prev_token": result.prev_token, "first_token": result.first_token}
        lens_tokens = [row[0] if len(row) else "" for row in result.lens_tokens]
        lens_probs = result.lens_probs[:, 0] if result.lens_probs.shape[1] else np.zeros(result.n_layer)
        labels = bin_labels(self._tokens, result.bin_edges) if T else []
        self.grid.set_data(result.thumbnails, labels, stats, lens_tokens if T else [], lens_probs if T else np.zeros(0))
        if not T:
            self.zoom.clear_head("Type a prompt above to see attention.")
            self.chips.set_weights(None)

    def show_head(self, layer: int, head: int, pattern: np.ndarray, summary: str, *, pooled_note: str = "") -> None:
        """The selected head large; `pattern` (T, T) full resolution (or pooled, with a note)."""
        self.grid.select(layer, head)
        labels = self._tokens if pattern.shape[0] == len(self._tokens) else [f"bin {i}" for i in range(pattern.shape[0])]
        title = f"Layer {layer} · Head {head}<br><small>{summary}</small>"  # two lines: fits a narrow zoom
        if pooled_note:
            title += f"<br><small>{pooled_note}</small>"
        levels = self.grid.colorbar.levels()
        self.zoom.set_head(pattern, labels, title, levels)
        self._zoom_row = pattern if pattern.shape[0] == len(self._tokens) else None
        self._tint_chips(-1)

    def prepend_bos(self) -> bool:
        """Whether the user asked for <|endoftext|> in front of the prompt."""
        return self.bos_box.isChecked()

    def clear_results(self, reason: str) -> None:
        """Nothing drawn but `reason`: what was on screen belonged to another model."""
        self._tokens, self._zoom_row = [], None
        self.chips.set_tokens([])
        self.chips.set_weights(None)
        self.count_label.setText("")
        self.crop_note.hide()
        self.readout.setText(" ")  # "L2 H11 … entropy 3.74" named a head of the old picture
        self.grid.clear_data()
        self.zoom.clear_head(reason)
        self.set_status(reason)

    def set_ablated(self, heads) -> None:
        """The session's ablated heads, marked on the grid."""
        self.grid.set_ablated(heads)

    def set_census(self, induction) -> None:
        """The head census's induction scores (L, nh) as the grid's last summary column."""
        self.grid.set_census(induction)

    def set_status(self, text: str) -> None:
        self.status_label.setText(text)

    def set_error(self, text: str) -> None:
        self.status_label.setText(f"<span style='color:#dc2626'>{text}</span>")

    # -- export (called by the controller after it picked a path) ------------------------
    def export_grid_png(self, path: str) -> bool:
        return self.grid.grab().save(path)

    def export_head_png(self, path: str) -> bool:
        return self.zoom.grab().save(path)

    # -- internal -----------------------------------------------------------------------
    def _on_log(self, log: bool) -> None:
        self.grid.set_log(log)
        self.zoom.set_log(log, self.grid.colorbar.levels())

    def _tint_chips(self, query: int) -> None:
        """Tint the chips by where `query` looks in the zoomed head (the last token if -1)."""
        if self._zoom_row is None or not len(self._zoom_row):
            return
        q = query if query >= 0 else len(self._zoom_row) - 1
        self.chips.set_weights(self._zoom_row[q], focus=q)


def crop_note_text(result, shown: int) -> str:
    """What the window shows of an over-long prompt, and why it may be shorter than block_size:
    the start moves on by whole steps (crop with slack), so the keys typed next reuse it."""
    text = (f"The prompt is {result.total_tokens:,} tokens but this model reads at most {result.block_size:,}: "
            f"showing tokens {result.cropped + 1:,}–{result.total_tokens:,} (the last {shown:,}); "
            f"the first {result.cropped:,} were cropped.")
    step = result.crop_step
    if step > 1:
        text += (f" The window moves on {step:,} tokens at a time, so the next keys you type reuse "
                 f"its start instead of recomputing all {shown:,}.")
    return text
