"""The Attribution panel: "why this token?" for the prompt typed on top.

- Attribution tab: direct logit attribution of target vs contrast per layer (attention and
  MLP bars) and per head (a layer × head map with one more column for each layer's MLP);
  clicking a head or an MLP cell ablates it (again: restores it).
- Patching tab: a corrupted prompt of the same length; Run computes the residual,
  attention-output, MLP-output and head patching maps (progress, Cancel); clicking a cell
  shows the corrupted prompt's next-token distribution with that one cell patched.
- Head census tab: every head's previous-token, duplicate-token, induction and position-copy score.

A passive view (numpy in through `set_*`, intent out through signals); the controller
(explorer/controllers/attribution.py) talks to the session.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (QComboBox, QFrame, QGridLayout, QHBoxLayout, QLabel,
                               QProgressBar, QPushButton, QScrollArea, QSplitter, QTabWidget, QVBoxLayout,
                               QWidget)

from explorer.views.attribution.census_table import CensusTable
from explorer.widgets.csv_meta import with_metadata
from explorer.widgets.distribution_chart import DistributionChart
from explorer.widgets.elided_label import ElidedLabel
from explorer.views.attribution.layer_bars import LayerBars
from explorer.views.attribution.token_picker import Pick, TokenPicker, token_label
from explorer.widgets.menu_button import menu_button
from explorer.widgets.prompt_box import PromptBox
from explorer.widgets.value_heatmap import ValueHeatmap


PATCH_KINDS = (("resid", "residual stream (block input)"), ("attn", "attention output"),
               ("mlp", "MLP output"), ("heads", "each head (all positions)"))
PATCH_MAP_MIN = (220, 190)  # px: 12 layers' rows stay apart, the axes and colour bar keep their ticks
EXPORTS = (("bars", "DLA per layer"), ("heads", "DLA per head"), ("resid", "patching: residual"),
           ("attn", "patching: attention"), ("mlp", "patching: MLP"), ("pheads", "patching: heads"),
           ("census", "head census"))


class AttributionPanel(QWidget):
    promptChanged = Signal(str)
    targetPicked = Signal(object)  # raw token text, or Pick.TOP1
    contrastPicked = Signal(object)  # raw token text, Pick.TOP2 or Pick.NONE
    modeChanged = Signal(str)  # "zero" | "mean"
    resetRequested = Signal()
    headToggled = Signal(int, int)
    mlpToggled = Signal(int)
    runRequested = Signal(str)  # the corrupted prompt
    cancelRequested = Signal()
    cellClicked = Signal(str, int, int)  # kind, layer, index (position or head)
    exportRequested = Signal(str, str)  # chart key, "csv" | "png"

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self._n_head = 0
        self._tokens: list[str] = []
        self._build_prompt()
        pickers = self._build_pickers_row()  # before the tabs: their hover read-outs go to its status label
        self.census = CensusTable()
        self.census.headToggled.connect(self.headToggled)
        self.tabs = QTabWidget()
        self.tabs.addTab(self._build_attribution_tab(), "Attribution")
        self.tabs.addTab(self._build_patching_tab(), "Patching")
        self.tabs.addTab(self.census, "Head census")

        layout = QVBoxLayout(self)
        layout.addWidget(self.prompt)
        layout.addLayout(pickers)
        layout.addWidget(self.message)
        layout.addWidget(self.tabs, 1)

    # -- construction ------------------------------------------------------------------------
    def _build_prompt(self) -> None:
        self.prompt = PromptBox("Type a prompt: which heads and MLPs push the model towards its next token?", 52)
        self.prompt.edited.connect(self.promptChanged)
        self.message = QLabel("")
        self.message.setWordWrap(True)
        self.message.setTextFormat(Qt.TextFormat.RichText)

    def _build_pickers_row(self) -> QHBoxLayout:
        """Target, contrast, ablation mode and state, the hover read-out, Export."""
        self.target = TokenPicker((Pick.TOP1,))
        self.target.setToolTip("The token to explain: pick one of the model's top tokens or type one "
                               "(mind the leading space: ' Mary') and press Enter")
        self.target.picked.connect(self.targetPicked)
        self.contrast = TokenPicker((Pick.TOP2, Pick.NONE))
        self.contrast.setToolTip("Attribute logit(target) − logit(contrast); '(none)' attributes the target's logit")
        self.contrast.picked.connect(self.contrastPicked)
        self.mode = QComboBox()
        self.mode.addItems(["zero", "mean"])
        self.mode.setToolTip("What an ablated head or MLP outputs: nothing (zero), or its mean over the sample "
                             "prompts' positions (mean). The ablation applies to every panel.")
        self.mode.currentTextChanged.connect(self.modeChanged)
        self.ablation_label = ElidedLabel()
        self.ablation_label.setText("nothing ablated")
        self.reset_button = QPushButton("Reset ablation")
        self.reset_button.setEnabled(False)
        self.reset_button.clicked.connect(self.resetRequested)
        self.export_button = menu_button("Export", [
            (f"{title} as {fmt.upper()}…", lambda k=key, f=fmt: self.exportRequested.emit(k, f))
            for key, title in EXPORTS for fmt in ("csv", "png")])
        self.status_label = ElidedLabel()  # hover read-outs are long: elided, never widening the window
        self.status_label.setTextFormat(Qt.TextFormat.RichText)
        pickers = QHBoxLayout()
        for label, widget in (("target", self.target), ("minus", self.contrast), ("ablate as", self.mode)):
            pickers.addWidget(QLabel(label))
            pickers.addWidget(widget)
        pickers.addWidget(self.ablation_label)
        pickers.addWidget(self.reset_button)
        pickers.addWidget(self.status_label, 1)
        pickers.addWidget(self.export_button)
        return pickers

    def _build_attribution_tab(self) -> QSplitter:
        self.bars = LayerBars()
        self.heads = ValueHeatmap("direct effect of each head (last column: the layer's MLP) — click to ablate",
                                  value_label="logit difference")
        self.heads.cellClicked.connect(self._on_head_cell)
        self.heads.hoverText.connect(self.status_label.setText)
        attribution = QSplitter(Qt.Orientation.Horizontal)
        attribution.addWidget(self.bars)
        attribution.addWidget(self.heads)
        attribution.setSizes([420, 620])
        return attribution

    def _build_patching_tab(self) -> QSplitter:
        """The corrupted prompt and Run on the left over the four maps (they scroll when short); the
        patched distribution on the right."""
        patch_left = QWidget()
        left = QVBoxLayout(patch_left)
        left.setContentsMargins(0, 0, 0, 0)
        left.addLayout(self._build_patch_run_row())
        self.progress = QProgressBar()
        self.progress.setTextVisible(True)
        self.progress.setRange(0, 1)
        self.progress.setValue(0)
        left.addWidget(self.progress)
        self.patch_message = QLabel("")
        self.patch_message.setWordWrap(True)
        self.patch_message.setTextFormat(Qt.TextFormat.RichText)
        left.addWidget(self.patch_message)
        self.maps_scroll = QScrollArea()
        self.maps_scroll.setWidget(self._build_patch_maps())
        self.maps_scroll.setWidgetResizable(True)
        self.maps_scroll.setFrameShape(QFrame.Shape.NoFrame)
        left.addWidget(self.maps_scroll, 1)
        self.patched = DistributionChart(rows=10)
        self.patched.legend.setText("<span style='color:#8c8c8c'>⬚</span> corrupted run &nbsp; filled: with the "
                                    "clicked cell patched from the clean run")
        self.patched.caption.setText("Click a cell: the corrupted prompt's next token with that cell patched")
        patching = QSplitter(Qt.Orientation.Horizontal)
        patching.addWidget(patch_left)
        patching.addWidget(self.patched)
        patching.setSizes([760, 300])
        return patching

    def _build_patch_run_row(self) -> QHBoxLayout:
        self.corrupt = PromptBox("Corrupted prompt of the same length (e.g. swap the names), then Run", 44)
        self.run_button = QPushButton("Run patching")
        self.run_button.clicked.connect(lambda: self.runRequested.emit(self.corrupt.toPlainText()))
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setEnabled(False)
        self.cancel_button.clicked.connect(self.cancelRequested)
        run_row = QHBoxLayout()
        run_row.addWidget(self.corrupt, 1)
        buttons = QVBoxLayout()
        buttons.addWidget(self.run_button)
        buttons.addWidget(self.cancel_button)
        run_row.addLayout(buttons)
        return run_row

    def _build_patch_maps(self) -> QWidget:
        self.patch_maps: dict[str, ValueHeatmap] = {}
        maps_box = QWidget()
        maps = QGridLayout(maps_box)
        maps.setContentsMargins(0, 0, 0, 0)
        for i, (kind, title) in enumerate(PATCH_KINDS):
            view = ValueHeatmap(title, value_label="restored")
            view.setMinimumSize(*PATCH_MAP_MIN)  # readable rows; below that the maps scroll
            view.cellClicked.connect(lambda r, c, kind=kind: self.cellClicked.emit(kind, r, c))
            view.hoverText.connect(self.status_label.setText)
            self.patch_maps[kind] = view
            maps.addWidget(view, i // 2, i % 2)
        return maps_box

    # -- data in ---------------------------------------------------------------------------
    def prompt_text(self) -> str:
        return self.prompt.toPlainText()

    def set_corrupt_text(self, text: str) -> None:
        self.corrupt.setPlainText(text)

    def ablation_mode(self) -> str:
        """What an ablated component outputs: "zero" or "mean"."""
        return self.mode.currentText()

    def set_prompt_text(self, text: str) -> None:
        self.prompt.setPlainText(text)

    def set_attribution(self, r) -> None:
        """r: an AttributionResult (its numpy fields and token choices)."""
        self._n_head = r.n_head
        self._tokens = list(r.tokens)
        target = f"logit({token_label(r.target.text)})"
        if r.contrast is not None:
            target += f" − logit({token_label(r.contrast.text)})"
        parts = (f"<b>{target} = {r.total:+.3f}</b> = attention {float(r.attn.sum()):+.3f} + MLPs "
                 f"{float(r.mlps.sum()):+.3f} + embeddings {r.embed:+.3f} + biases {r.bias:+.3f}")
        if r.ablation.active:
            parts += f" &nbsp; <i>({r.ablation.text()})</i>"
        self.bars.set_parts(r.attn, r.mlps, r.embed, r.bias, caption=parts)
        values = np.concatenate([r.heads, r.mlps[:, None]], axis=1)  # (L, nh + 1)
        # Colours scaled to the heads (MLPs are often larger and would wash them out; theirs saturate).
        scale = float(np.abs(r.heads).max()) if r.heads.size and np.isfinite(r.heads).all() else None
        self.heads.set_matrix(values, [f"L{l}" for l in range(r.n_layer)], [f"H{h}" for h in range(r.n_head)] + ["MLP"],
                              scale=scale or None, col_px=30)
        self.set_ablation_marks(r.ablation.heads, r.ablation.mlps)
        self.target.set_top([t.text for t in r.top], r.top_probs)
        self.contrast.set_top([t.text for t in r.top], r.top_probs)
        self.target.show_choice(r.target.text)
        self.contrast.show_choice(r.contrast.text if r.contrast is not None else Pick.NONE)

    def clear_results(self, reason: str) -> None:
        """Nothing drawn but `reason`: what was on screen belonged to another model (its
        tokens in the pickers, its patching count in the progress bar too)."""
        self.target.reset()
        self.contrast.reset()
        self.progress.setRange(0, 1)
        self.progress.setValue(0)
        self.progress.setFormat("")
        self.bars.clear_data(reason)
        self.heads.clear_data()
        for view in self.patch_maps.values():
            view.clear_data()
        self.patched.set_distribution([], [], [], caption="Click a cell: the corrupted prompt's next token with "
                                                            "that cell patched")
        self.census.clear_data()
        self.set_patch_message("")
        self.set_status(reason)

    def set_ablation(self, heads, mlps, text: str, mode: str) -> None:
        self.ablation_label.setText(text or "nothing ablated")
        self.reset_button.setEnabled(bool(heads or mlps))
        self.mode.blockSignals(True)
        self.mode.setCurrentText(mode)
        self.mode.blockSignals(False)
        self.set_ablation_marks(heads, mlps)
        self.census.set_ablated(heads)

    def set_ablation_marks(self, heads, mlps) -> None:
        self.heads.set_marks(list(heads) + [(l, self._n_head) for l in mlps])
        self.patch_maps["heads"].set_marks(list(heads))

    def set_patching(self, r) -> None:
        """r: a PatchingResult."""
        L = r.heads.shape[0]
        rows = [f"L{l}" for l in range(L)]
        positions = [token_label(t) for t in r.tokens]  # the position is in the hover text and the CSV
        for kind, _title in PATCH_KINDS:
            cols = [f"H{h}" for h in range(r.heads.shape[1])] if kind == "heads" else positions
            self.patch_maps[kind].set_matrix(r.map(kind), rows, cols, scale=1.0, col_px=30 if kind == "heads" else 56)
        self.set_ablation_marks(r.ablation.heads, r.ablation.mlps)
        self.patch_message.setText(
            f"clean LD {r.ld_clean:+.3f}, corrupted LD {r.ld_corrupt:+.3f}; each cell: (patched − corrupted) / "
            f"(clean − corrupted), 1 = that activation alone restores the clean answer · {r.elapsed_s:.1f} s")

    def set_patched_distribution(self, d) -> None:
        self.patched.set_distribution(list(d.strings), d.probs, d.corrupt_probs,
                                      caption=f"Corrupted prompt, {d.label} patched from the clean run")

    def set_census(self, rows, ablated=()) -> None:
        self.census.set_census(rows, ablated)

    def set_running(self, running: bool) -> None:
        self.run_button.setEnabled(not running)
        self.cancel_button.setEnabled(running)
        if running:
            self.progress.setRange(0, 0)  # busy until the first count arrives

    def set_progress(self, done: int, total: int) -> None:
        self.progress.setRange(0, max(total, 1))
        self.progress.setValue(done)
        self.progress.setFormat(f"{done}/{total} patches")

    def set_patch_message(self, text: str, error: bool = False) -> None:
        self.patch_message.setText(f"<span style='color:#dc2626'>{text}</span>" if error else text)

    def set_status(self, text: str) -> None:
        self.status_label.setText(text)

    def set_message(self, text: str, error: bool = True) -> None:
        self.message.setText(f"<span style='color:#dc2626'>{text}</span>" if error and text else text)

    # -- export (the controller picks the path) ----------------------------------------------
    def export(self, key: str, fmt: str, path: str, meta: dict | None = None) -> bool:
        """Write one view as PNG, or CSV with `meta` (model, ablation, target…) as `# key: value` lines on top."""
        views = {"bars": self.bars, "heads": self.heads, "resid": self.patch_maps["resid"],
                 "attn": self.patch_maps["attn"], "mlp": self.patch_maps["mlp"], "pheads": self.patch_maps["heads"],
                 "census": self.census}
        view = views[key]
        if fmt == "png":
            return view.export_png(path)
        Path(path).write_text(with_metadata(view.csv_text(), meta), encoding="utf-8")
        return True

    # -- internal ----------------------------------------------------------------------------
    def _on_head_cell(self, layer: int, col: int) -> None:
        if col == self._n_head:
            self.mlpToggled.emit(layer)
        else:
            self.headToggled.emit(layer, col)
