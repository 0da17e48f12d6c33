"""Asks for the head count of a checkpoint that does not record it (the book's model.pth).

No tensor shape holds the count, and a wrong one changes every output (a 4-head model opened
as 1 head: logits 0.148 away), so the app asks instead of guessing (gptcore.io.head_count). The
choices are the counts that divide the width, likeliest first; the book's defaults are named
because the book's readers are who saves such files. Non-modal (`open()`), so the window and
its tests keep running; `chosen(n_head)` or `rejected` answers.
"""
from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QComboBox, QDialog, QDialogButtonBox, QFormLayout, QLabel, QVBoxLayout, QWidget

BOOK_HINT = ("The book's GPT_CONFIG_124M uses 12 heads at width 768 (64 per head); GPT-2 and nanoGPT's "
             "presets also use 64 per head.")


class HeadCountDialog(QDialog):
    chosen = Signal(int)

    def __init__(self, path: str, n_embd: int, choices: list[int], parent: QWidget | None = None):
        super().__init__(parent)
        self.setWindowTitle("How many attention heads?")
        self.setObjectName("headCountDialog")
        self.choices = [int(n) for n in choices]
        intro = QLabel(
            f"<b>{Path(path).name}</b> does not record how many attention heads its model has: no tensor "
            f"shape holds the count, and a wrong one changes every output. Choose the count the model was "
            f"trained with (the <code>n_heads</code> of its config).")
        intro.setWordWrap(True)
        hint = QLabel(f"{BOOK_HINT}<br>Next time, give it up front: <code>--n-head N</code><br>"
                      f"or put a config.json with <code>n_head</code> next to the file.")
        hint.setWordWrap(True)
        hint.setObjectName("readoutNote")
        self.combo = QComboBox()
        for n in self.choices:
            self.combo.addItem(f"{n} heads × {n_embd // n} wide" if n > 1 else f"1 head × {n_embd} wide", n)
        form = QFormLayout()
        form.addRow(f"width {n_embd} as", self.combo)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        buttons.button(QDialogButtonBox.StandardButton.Ok).setText("Load")
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(intro)
        layout.addLayout(form)
        layout.addWidget(hint)
        layout.addStretch(1)  # any height to spare goes above the buttons, not between the rows
        layout.addWidget(buttons)
        self.setMinimumWidth(460)

    def choose(self, n_head: int) -> None:
        """Select `n_head` (one of the choices) in the list."""
        self.combo.setCurrentIndex(self.choices.index(int(n_head)))

    def accept(self) -> None:
        super().accept()
        self.chosen.emit(int(self.combo.currentData()))
