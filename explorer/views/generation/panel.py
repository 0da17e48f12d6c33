"""The generation pane: prompt, sampling sliders, the streamed text and the live
next-token distribution.

Passive view (no torch, no model): the controller feeds it with `set_distribution`,
`start_stream`/`append_token` and `set_running`, and listens to its intent signals
(`promptChanged`, `settingsChanged`, `generateRequested`, `stopRequested`).
"""
from __future__ import annotations

import numpy as np
from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QKeySequence, QShortcut
from PySide6.QtWidgets import (
    QHBoxLayout, QLabel, QPushButton, QSplitter, QVBoxLayout, QWidget,
)

from explorer.widgets.controls import show_text
from explorer.widgets.distribution_chart import DistributionChart
from explorer.widgets.prompt_box import PromptBox, prompt_row
from explorer.views.generation.sampling_controls import SamplingControls
from explorer.widgets.token_stream import ProbabilityLegend, StreamToken, TokenStreamView


class GenerationPanel(QWidget):
    promptChanged = Signal(str)
    settingsChanged = Signal()  # a setting that reshapes the distribution moved
    generateRequested = Signal()
    stopRequested = Signal()

    def __init__(self, parent: QWidget | None = None, vocab_size: int = 50257):
        super().__init__(parent)
        top = self._build_prompt_row()
        self.prompt_note = QLabel("")
        self.prompt_note.setWordWrap(True)
        self.prompt_note.setStyleSheet("color: #b8860b;")
        self.prompt_note.hide()
        self.controls = SamplingControls(vocab_size=vocab_size)
        self.controls.changed.connect(self.settingsChanged)
        splitter = self._build_text_and_chart()
        self._install_shortcuts()

        layout = QVBoxLayout(self)
        layout.addLayout(top)
        layout.addWidget(self.prompt_note)
        layout.addWidget(self.controls)
        layout.addWidget(splitter, 1)

    # -- construction ------------------------------------------------------------------------
    def _build_prompt_row(self) -> QHBoxLayout:
        self.prompt = PromptBox("Prompt (empty: the model starts from its start token)")  # three lines high
        self.prompt.edited.connect(self.promptChanged)
        self.generate_button = QPushButton("Generate")
        self.generate_button.setToolTip("Generate a continuation (Ctrl+Enter)")
        self.generate_button.setDefault(True)
        self.stop_button = QPushButton("Stop")
        self.stop_button.setToolTip("Stop after the current token (Esc)")
        self.stop_button.setEnabled(False)
        self.generate_button.clicked.connect(self.generateRequested)
        self.stop_button.clicked.connect(self.stopRequested)
        buttons = QVBoxLayout()
        buttons.addWidget(self.generate_button)
        buttons.addWidget(self.stop_button)
        buttons.addStretch(1)
        return prompt_row(self.prompt, buttons)

    def _build_text_and_chart(self) -> QSplitter:
        """The generated text (its title, status line, tokens and colour key) beside the distribution."""
        self.stream = TokenStreamView()
        self.stream_status = QLabel("")
        self.stream_status.setWordWrap(True)  # "… written by <model>, the previous model" must not widen the pane
        self.chart = DistributionChart()
        text_side = QWidget()
        text_layout = QVBoxLayout(text_side)
        text_layout.setContentsMargins(0, 0, 10, 0)  # keep the status clear of the chart's caption
        title = QLabel("<b>Generated text</b> <span style='color:#8c8c8c'>(hover a token for the "
                       "candidates it beat)</span>")
        title.setWordWrap(True)
        text_layout.addWidget(title)
        text_layout.addWidget(self.stream_status)
        text_layout.addWidget(self.stream, 1)
        text_layout.addWidget(ProbabilityLegend())
        splitter = QSplitter(Qt.Orientation.Horizontal)
        splitter.addWidget(text_side)
        splitter.addWidget(self.chart)
        splitter.setStretchFactor(0, 5)
        splitter.setStretchFactor(1, 4)
        splitter.setChildrenCollapsible(False)
        return splitter

    def _install_shortcuts(self) -> None:
        """Ctrl+Enter generates from anywhere in the pane (the prompt box included); Esc stops."""
        shortcuts = [(QKeySequence("Ctrl+Return"), self._request_generate),
                     (QKeySequence("Ctrl+Enter"), self._request_generate),
                     (QKeySequence(Qt.Key.Key_Escape), self._request_stop)]
        for keys, slot in shortcuts:
            shortcut = QShortcut(keys, self)
            shortcut.setContext(Qt.ShortcutContext.WidgetWithChildrenShortcut)
            shortcut.activated.connect(slot)

    # -- intents -------------------------------------------------------------------------
    def _request_generate(self) -> None:
        if self.generate_button.isEnabled():
            self.generateRequested.emit()

    def _request_stop(self) -> None:
        if self.stop_button.isEnabled():
            self.stopRequested.emit()

    # -- state in --------------------------------------------------------------------------
    def prompt_text(self) -> str:
        return self.prompt.toPlainText()

    def set_prompt_text(self, text: str) -> None:
        self.prompt.set_text(text)

    def set_prompt_placeholder(self, text: str) -> None:
        self.prompt.setPlaceholderText(text)

    def generated_text(self) -> str:
        """The text generated so far (the prompt's echo excluded)."""
        return self.stream.generated_text()

    def settings(self) -> dict:
        return self.controls.settings()

    def set_settings(self, **values) -> None:
        self.controls.set_settings(**values)

    def set_vocab_size(self, vocab_size: int) -> None:
        self.controls.set_vocab_size(vocab_size)

    def set_prompt_note(self, text: str) -> None:
        """A line under the prompt (cropping, empty prompt); hidden when empty."""
        show_text(self.prompt_note, text)

    def set_running(self, running: bool) -> None:
        self.generate_button.setEnabled(not running)
        self.stop_button.setEnabled(running)

    def set_distribution(self, labels: list[str], probs: np.ndarray, model_probs: np.ndarray, *,
                         caption: str = "", note: str = "") -> None:
        self.chart.set_distribution(labels, probs, model_probs, caption=caption, note=note)

    def start_stream(self, prompt_text: str, note: str = "") -> None:
        self.stream.start(prompt_text, note)
        self.stream_status.setText("")

    def append_token(self, text: str, prob: float, alternatives) -> None:
        self.stream.append_token(StreamToken(text, float(prob), tuple(alternatives)))

    def set_stream_status(self, text: str) -> None:
        self.stream_status.setText(text)
