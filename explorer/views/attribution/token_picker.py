"""The Attribution panel's token pickers (target, contrast): special entries, then the model's
top tokens, or a token typed. Split from panel.py: one widget with its own protocol (`Pick`).
"""
from __future__ import annotations

import enum

import numpy as np
from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QComboBox

from explorer.widgets.token_stream import format_prob, visible_token


class Pick(enum.Enum):
    """The pickers' special entries: what they mean travels as the member, the label only shows.
    (A label used as protocol broke when a token's text happened to equal it, and on rewording.)"""

    TOP1 = "(model's top-1)"
    TOP2 = "(model's top-2)"
    NONE = "(none: plain logit)"

    @property
    def label(self) -> str:
        return self.value


def token_label(text: str) -> str:
    return visible_token(text) if text else "∅"


class TokenPicker(QComboBox):
    """An editable token picker: special entries first, then the model's top tokens; emits
    `picked(object)`: a `Pick` for a special entry, else the raw token text.

    Tokens are listed as the chips show them (" creed" as "␣creed": a combo box would show a
    leading space as nothing) and keep their raw text in the item's UserRole; what the user
    types is read back the same way (`_raw`)."""

    picked = Signal(object)  # Pick | str

    def __init__(self, specials: tuple[str, ...]):
        super().__init__()
        self.setEditable(True)
        self.setInsertPolicy(QComboBox.InsertPolicy.NoInsert)
        self.setMinimumContentsLength(14)
        self._specials = specials
        for special in specials:
            self.addItem(special.label, special)
        self.activated.connect(lambda index: self.picked.emit(self.itemData(index)))
        self.lineEdit().returnPressed.connect(lambda: self.picked.emit(self.choice()))

    def set_top(self, tokens: list[str], probs: np.ndarray) -> None:
        current = self.currentText()
        self.blockSignals(True)
        while self.count() > len(self._specials):
            self.removeItem(self.count() - 1)
        for token, p in zip(tokens, probs):
            self.addItem(self._shown(token), token)
            self.setItemData(self.count() - 1, f"{token_label(token)}  {format_prob(float(p))}",
                             Qt.ItemDataRole.ToolTipRole)
        self.setEditText(current)
        self.blockSignals(False)

    def show_choice(self, text: str) -> None:
        self.blockSignals(True)
        self.setEditText(self._shown(text))
        self.blockSignals(False)

    def choice(self) -> str:
        """The raw text of what the box shows (a listed entry's token, or what was typed)."""
        return self._raw(self.currentText())

    def reset(self) -> None:
        """Only the special entries, the first one chosen: the tokens listed belonged to another model."""
        self.set_top([], np.zeros(0))
        self.show_choice(self._specials[0])

    def entries(self) -> list[str]:
        """The raw texts listed, specials first."""
        return [self.itemData(i) for i in range(self.count())]

    def _shown(self, text) -> str:
        return text.label if isinstance(text, Pick) else token_label(text)

    def _raw(self, shown: str) -> str:
        index = self.findText(shown, Qt.MatchFlag.MatchExactly)
        if index >= 0:
            return self.itemData(index)
        return shown.replace("␣", " ").replace("↵", "\n").replace("→", "\t")  # typed: the chips' marks read back
