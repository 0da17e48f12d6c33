"""The sampling settings as sliders whose positions can only mean valid settings.

Why sliders over integer positions mapped to values: a slider cannot hold NaN, a
negative temperature or a top-p of 0, so nonsense never reaches the engine, and each
slider's label says in words what the value does ("greedy", "off").
Top-k moves through a roughly logarithmic ladder (1, 2, … 10, 15, 20, … vocab):
the interesting values are small, yet "all of the vocabulary" must be reachable.
"""
from __future__ import annotations

import random
from typing import Callable

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QGridLayout, QHBoxLayout, QLabel, QPushButton, QSlider, QSpinBox, QWidget

MAX_SEED = 2**31 - 1
MAX_NEW_TOKENS = 1000


def top_k_ladder(vocab_size: int) -> list[int]:
    """0 (off), 1…10, then 12, 15, 20, 25, 30, 40, 50, 60, 80, 100, 120, … and the vocabulary
    itself last: about ten steps per decade, so the common values (40, 50, 200) are exact."""
    steps = [0, *range(1, min(10, vocab_size) + 1)]
    decade = 10
    while decade < vocab_size:
        for m in (1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10):
            k = round(decade * m)
            if steps[-1] < k < vocab_size:
                steps.append(k)
        decade *= 10
    if steps[-1] != vocab_size:
        steps.append(vocab_size)
    return steps


class LabelledSlider:
    """A slider over integer positions, the name on its left and the value in words on its right."""

    def __init__(self, name: str, positions: int, to_value: Callable[[int], object],
                 describe: Callable[[object], str], tooltip: str):
        self.name_label = QLabel(name)
        self.name_label.setToolTip(tooltip)
        self.slider = QSlider(Qt.Orientation.Horizontal)
        self.slider.setRange(0, positions - 1)
        self.slider.setToolTip(tooltip)
        self.value_label = QLabel()
        self.value_label.setMinimumWidth(88)
        self._to_value, self._describe = to_value, describe
        self.slider.valueChanged.connect(self._relabel)
        self._relabel()

    def value(self):
        return self._to_value(self.slider.value())

    def _relabel(self) -> None:
        self.value_label.setText(self._describe(self.value()))


class SamplingControls(QWidget):
    """Temperature, top-k, top-p, repetition penalty, max new tokens and the seed."""

    changed = Signal()  # any setting that reshapes the next-token distribution moved

    def __init__(self, parent: QWidget | None = None, vocab_size: int = 50257):
        super().__init__(parent)
        self._ladder = top_k_ladder(vocab_size)
        self.temperature = LabelledSlider(
            "temperature", 201, lambda i: i / 100,
            lambda t: "0 (greedy)" if t == 0 else f"{t:.2f}",
            "Divides the logits before softmax: below 1 sharpens, above 1 flattens; 0 always takes the most likely token.")
        self.top_k = LabelledSlider(
            "top-k", len(self._ladder), lambda i: self._ladder[i],
            lambda k: "off" if k == 0 else f"{k:,}",
            "Keep only the k most likely tokens (off: keep all).")
        self.top_p = LabelledSlider(
            "top-p", 100, lambda i: (i + 1) / 100,
            lambda p: "1.00 (off)" if p >= 1 else f"{p:.2f}",
            "Nucleus sampling: keep the fewest most likely tokens whose probabilities add up to p.")
        self.repetition_penalty = LabelledSlider(
            "repetition penalty", 101, lambda i: 1 + i / 100,
            lambda r: "1.00 (off)" if r == 1 else f"{r:.2f}",
            "Tokens already in the text get their logit divided by this (multiplied when negative), as in CTRL / HF.")
        self.max_new_tokens = LabelledSlider(
            "max new tokens", MAX_NEW_TOKENS, lambda i: i + 1, lambda n: f"{n}",
            "How many tokens Generate produces at most.")
        self.seed = QSpinBox()
        self.seed.setRange(0, MAX_SEED)
        self.seed.setToolTip("Same seed, prompt and settings: the same text.")
        self.new_seed = QPushButton("New seed")
        self.new_seed.setToolTip("Pick a random seed, for a different sample.")
        self.new_seed.clicked.connect(lambda: self.seed.setValue(random.randint(0, MAX_SEED)))

        grid = QGridLayout(self)
        grid.setContentsMargins(0, 0, 0, 0)
        grid.setHorizontalSpacing(8)
        grid.setVerticalSpacing(2)
        left = (self.temperature, self.top_k, self.top_p)
        right = (self.repetition_penalty, self.max_new_tokens)
        for row, s in enumerate(left):
            grid.addWidget(s.name_label, row, 0)
            grid.addWidget(s.slider, row, 1)
            grid.addWidget(s.value_label, row, 2)
        for row, s in enumerate(right):
            grid.addWidget(s.name_label, row, 4)
            grid.addWidget(s.slider, row, 5)
            grid.addWidget(s.value_label, row, 6)
        seed_row = QHBoxLayout()
        seed_row.addWidget(self.seed, 1)
        seed_row.addWidget(self.new_seed)
        grid.addWidget(QLabel("seed"), 2, 4)
        grid.addLayout(seed_row, 2, 5, 1, 2)
        grid.setColumnMinimumWidth(3, 18)
        grid.setColumnStretch(1, 1)
        grid.setColumnStretch(5, 1)

        for s in (self.temperature, self.top_k, self.top_p, self.repetition_penalty):
            s.slider.valueChanged.connect(self.changed)
        self.set_settings(temperature=1.0, top_k=None, top_p=None, repetition_penalty=1.0, max_new_tokens=50, seed=42)

    # -- values in and out ---------------------------------------------------------------
    def settings(self) -> dict:
        """Keyword arguments for the engine: top_k / top_p are None when off."""
        top_k = self.top_k.value()
        top_p = self.top_p.value()
        return {
            "temperature": self.temperature.value(),
            "top_k": top_k or None,
            "top_p": None if top_p >= 1 else top_p,
            "repetition_penalty": self.repetition_penalty.value(),
            "max_new_tokens": self.max_new_tokens.value(),
            "seed": self.seed.value(),
        }

    def set_settings(self, **values) -> None:
        """Move the widgets to the nearest position for each given value (None = off)."""
        unknown = set(values) - {"temperature", "top_k", "top_p", "repetition_penalty", "max_new_tokens", "seed"}
        if unknown:
            raise TypeError(f"unknown setting(s): {', '.join(sorted(unknown))}")
        if "temperature" in values:
            self.temperature.slider.setValue(round(float(values["temperature"]) * 100))
        if "top_k" in values:
            k = values["top_k"] or 0
            self.top_k.slider.setValue(min(range(len(self._ladder)), key=lambda i: abs(self._ladder[i] - k)))
        if "top_p" in values:
            p = 1.0 if values["top_p"] is None else float(values["top_p"])
            self.top_p.slider.setValue(round(p * 100) - 1)
        if "repetition_penalty" in values:
            self.repetition_penalty.slider.setValue(round((float(values["repetition_penalty"]) - 1) * 100))
        if "max_new_tokens" in values:
            self.max_new_tokens.slider.setValue(int(values["max_new_tokens"]) - 1)
        if "seed" in values:
            self.seed.setValue(int(values["seed"]))

    def set_vocab_size(self, vocab_size: int) -> None:
        """A new model: top-k's ladder ends at its vocabulary; the current k is kept if it fits."""
        k = self.top_k.value()
        self._ladder = top_k_ladder(vocab_size)
        self.top_k.slider.blockSignals(True)
        self.top_k.slider.setRange(0, len(self._ladder) - 1)
        self.top_k.slider.blockSignals(False)
        self.set_settings(top_k=min(k, vocab_size))
        self.top_k._relabel()
