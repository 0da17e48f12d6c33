"""The window's model facts: the status bar (activity with its Cancel button, model name,
trained badge, device, dtype, parameters, memory) and the UNTRAINED banner above the tabs.

Both only display a ModelInfo; the window decides when (after every model swap, and every
2 s for the memory figure). gptcore and torch are imported inside the methods: the window
paints before the session (and torch) exists.
"""
from __future__ import annotations

import html

import os

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtWidgets import QLabel, QStatusBar, QToolButton, QWidget

import explorer.widgets.theme as theme
from explorer.widgets.elided_label import ElidedLabel

STATUS_KEYS = ("activity", "model", "trained", "device", "dtype", "params", "memory")
ELIDED_KEYS = ("activity", "model", "memory")  # long texts that give way in a narrow window


def rss_bytes() -> int:
    """Resident memory of this process (Linux /proc; 0 where unknown)."""
    try:
        with open("/proc/self/statm", encoding="ascii") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


class ModelStatusBar(QStatusBar):
    """One permanent label per STATUS_KEYS entry (`labels`), and a Cancel button after the
    activity note, shown while a model task runs."""

    cancelRequested = Signal()
    resetAblationRequested = Signal()  # the "Reset" link next to "3 heads ablated"

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        # Messages ("saved …", "Exported …") in a label that elides with the whole text as its
        # tooltip: QStatusBar paints its own message clipped, with no way to read the rest.
        self.message_label = ElidedLabel()
        self.message_label.setObjectName("status_message")
        self.addWidget(self.message_label, 1)
        self._message_timer = QTimer(self)
        self._message_timer.setSingleShot(True)
        self._message_timer.timeout.connect(self.clearMessage)
        self.labels: dict[str, QLabel] = {}
        for key in STATUS_KEYS:
            label = ElidedLabel() if key in ELIDED_KEYS else QLabel()
            label.setObjectName("trainedBadge" if key == "trained" else f"status_{key}")
            self.labels[key] = label
            self.addPermanentWidget(label)
            if key == "activity":
                self.cancel_button = QToolButton()
                self.cancel_button.setText("Cancel")
                self.cancel_button.setToolTip("Stop loading (the current model stays)")
                self.cancel_button.clicked.connect(self.cancelRequested)
                self.cancel_button.hide()
                self.addPermanentWidget(self.cancel_button)
        # The session's ablation (issue 14): every panel computes with it, so it is always in view.
        self.ablation_label = QLabel()
        self.ablation_label.setObjectName("status_ablation")
        self.ablation_label.setStyleSheet("color: #dc2626; font-weight: 600;")
        self.ablation_label.setTextFormat(Qt.TextFormat.RichText)
        self.ablation_label.linkActivated.connect(lambda _link: self.resetAblationRequested.emit())
        self.ablation_label.hide()
        self.addPermanentWidget(self.ablation_label)

    def showMessage(self, text: str, timeout: int = 0) -> None:  # noqa: N802 - QStatusBar's name, for every caller
        """`text` for `timeout` ms (0: until the next message), elided with a tooltip when narrow."""
        self.message_label.setText(text)
        self.message_label.setToolTip("")  # ElidedLabel shows the whole text when it is cut
        self._message_timer.stop()
        if timeout > 0:
            self._message_timer.start(timeout)
        self.messageChanged.emit(text)

    def currentMessage(self) -> str:  # noqa: N802 - QStatusBar's name
        return self.message_label.text() or super().currentMessage()

    def clearMessage(self) -> None:  # noqa: N802 - QStatusBar's name
        self._message_timer.stop()
        self.message_label.setText("")
        super().clearMessage()
        self.messageChanged.emit("")

    def set_activity(self, text: str) -> None:
        self.labels["activity"].setText(text)

    def show_starting(self) -> None:
        """No session yet (importing it means importing torch, so the window waits)."""
        for key, label in self.labels.items():
            label.setText("(no model yet)" if key == "model" else "")

    def show_model(self, info, has_model: bool) -> None:
        """Name, trained badge, device, dtype and parameter count of `info` (a ModelInfo)."""
        from gptcore.model.params import format_count

        labels = self.labels
        heads = info.config.get("n_head") if info.heads_note else None
        labels["model"].setText(f"{info.name} · {heads} heads (given)" if heads else info.name)
        labels["model"].setToolTip(f"{info.source}\n{info.heads_note}" if heads else info.source)
        if not has_model:
            labels["trained"].setText("")
        else:
            word = info.status_word
            labels["trained"].setText("UNTRAINED" if word == "untrained" else word)
            labels["trained"].setToolTip(info.provenance or {"trained": "published or trained weights",
                                                             "untrained": "random weights",
                                                             "loaded": "weights of unknown provenance"}[word])
        labels["trained"].setProperty("trained", {"trained": "true", "untrained": "false"}.get(
            info.status_word, "unknown"))
        theme.restyle(labels["trained"])
        labels["device"].setText(info.device if has_model else "")
        labels["dtype"].setText(info.dtype if has_model else "")
        labels["params"].setText(f"{format_count(info.n_params)} params" if info.n_params else "")
        labels["params"].setToolTip(f"{info.n_params:,} parameters ({'tied' if info.tied else 'untied'} head)")

    def show_precision(self, text: str, tip: str) -> None:
        """The dtype field: the weights' dtype and, in bf16 mode, that generation runs in bf16."""
        self.labels["dtype"].setText(text)
        self.labels["dtype"].setToolTip(tip)

    def show_ablation(self, text: str) -> None:
        """'3 heads ablated · Reset' (Reset a link), hidden when nothing is ablated."""
        if not text:
            self.ablation_label.hide()
            return
        self.ablation_label.setText(f"{text} · <a href='reset'>Reset</a>")
        self.ablation_label.setToolTip("Every panel computes with these components knocked out; Reset restores the model")
        self.ablation_label.show()

    def show_memory(self, info) -> None:
        """Weights of `info`, this process's resident memory, and GPU memory on CUDA."""
        from gptcore.model.params import format_bytes

        parts = []
        if info.memory_bytes:
            parts.append(f"weights {format_bytes(info.memory_bytes)}")
        rss = rss_bytes()
        if rss:
            parts.append(f"process {format_bytes(rss)}")
        if info.device.startswith("cuda"):
            import torch

            parts.append(f"GPU {format_bytes(torch.cuda.memory_allocated(info.device))}")
        self.labels["memory"].setText(" · ".join(parts))


class UntrainedBanner(QLabel):
    """Above the tabs: while the loaded model is untrained, what it is, with links to real weights
    (`linkActivated` gives "load-gpt2" or "open"); while it is a training run's step, which run and
    step every panel shows (read from the typed fact `info.run`, at every step, trained or not)."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("untrainedBanner")
        self.setWordWrap(True)
        self.setTextFormat(Qt.TextFormat.RichText)
        self.hide()

    def show_for(self, info, has_model: bool) -> None:
        run = info.run if has_model else None
        if run is not None:
            self._show_run(info, run)
            return
        if not (has_model and info.status_word == "untrained"):
            self.hide()
            return
        from explorer.session.models import UNTRAINED_HOW_TO

        what = (info.note.split(UNTRAINED_HOW_TO)[0].replace("UNTRAINED — ", "").strip().rstrip(".")
                or "freshly initialised weights: its outputs are noise")
        self._style("untrained")
        self.setText(
            f"<b>UNTRAINED model</b> — {what}. &nbsp;<a href='load-gpt2'>Load GPT-2 small…</a> · "
            f"<a href='open'>Open checkpoint…</a> · or start with <code>gpt-explorer --model PATH</code>")
        self.setToolTip(info.note)
        self.show()

    def _show_run(self, info, run) -> None:
        untrained = info.status_word == "untrained"
        weights = ("<b>UNTRAINED</b>: the freshly initialised weights, before the first step" if untrained
                   else "the weights as trained up to that step")
        self._style("untrained" if untrained else "run")
        self.setText(f"<b>Training run {html.escape(run.run_name)}</b> — {html.escape(run.where())}: {weights}. "
                     f"Every panel shows this step; the Train panel's slider moves it.")
        self.setToolTip(f"{run.root}\n{info.provenance}")
        self.show()

    def _style(self, kind: str) -> None:
        if self.property("kind") != kind:
            self.setProperty("kind", kind)
            theme.restyle(self)
