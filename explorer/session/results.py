"""What the session hands out: frozen dataclasses of numpy arrays and plain values.

They live apart from `session.py` so that whoever only reads results (panels, controllers,
scripts, tests) never needs the session's imports: this module imports numpy and nothing
else heavy (no torch, no gptcore, no Qt; tests/test_layers.py holds it to that).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import PurePath

import numpy as np


# --- the model ---
@dataclass(frozen=True)
class RunStep:
    """Where a model's weights come from when they are a training run's kept step: a typed fact
    every view reads (banner, badge, status bar, Train, Routes), never parsed back from text."""
    root: str  # the run folder
    scheme: str  # the init scheme (a run may train several side by side)
    step: int  # the training step whose weights these are
    max_iters: int = 0  # the run's planned length (0: not known)
    schemes: int = 1  # how many schemes the run trains

    @property
    def run_name(self) -> str:
        """The run folder's own name ("2026-12-02_05-10-33")."""
        return PurePath(self.root).name

    def where(self) -> str:
        """"step 1,200 of 2,000" (+ "(gpt2 init)" when the run trains several schemes)."""
        text = f"step {self.step:,} of {self.max_iters:,}" if self.max_iters else f"step {self.step:,}"
        return f"{text} ({self.scheme} init)" if self.schemes > 1 else text


@dataclass(frozen=True)
class ModelInfo:
    name: str
    trained: bool
    source: str
    config: dict = field(default_factory=dict)  # GPTConfig.to_dict()
    device: str = "cpu"
    dtype: str = "float32"
    n_params: int = 0
    memory_bytes: int = 0
    tied: bool = True
    note: str = ""  # "" or why the model is what it is (e.g. the untrained label)
    status: str = ""  # "trained" | "untrained" | "loaded" (weights of unknown provenance); "" = from `trained`
    provenance: str = ""  # why the status is what it is
    tokenizer: str = ""  # which tokenizer reads its text, and why
    heads_note: str = ""  # "" or that the head count was given by the user (the file does not record it)
    run: RunStep | None = None  # the training run and step these weights are, if they are one

    @property
    def status_word(self) -> str:
        return self.status or ("trained" if self.trained else "untrained")

    @property
    def loaded(self) -> bool:
        return self.n_params > 0


NO_MODEL = ModelInfo(name="(no model yet)", trained=False, source="", note="loading…")


# --- attribution, ablation, patching (issue 14) ---
@dataclass(frozen=True)
class AblationState:
    """The session's ablated components; every panel's computation runs with them knocked out."""

    heads: tuple[tuple[int, int], ...] = ()
    mlps: tuple[int, ...] = ()
    mode: str = "zero"  # "zero" or "mean" (over the sample prompts' positions)
    features: tuple[tuple[int, float], ...] = ()  # (feature, value) held by the Features panel (issue 33)
    feature_source: str = ""  # which dictionary those features are of ("SAE on layer 1 …")

    @property
    def active(self) -> bool:
        return bool(self.heads or self.mlps or self.features)

    def text(self) -> str:
        """'3 heads ablated', '1 head + 2 MLPs ablated (mean)', '… · feature 12 → 5', '' when nothing is."""
        parts = []
        if self.heads:
            parts.append(f"{len(self.heads)} head{'s' if len(self.heads) != 1 else ''}")
        if self.mlps:
            parts.append(f"{len(self.mlps)} MLP{'s' if len(self.mlps) != 1 else ''}")
        words = []
        if parts:
            words.append(" + ".join(parts) + " ablated" + ("" if self.mode == "zero" else f" ({self.mode})"))
        if self.features:
            words.append(self.features_text())
        return " · ".join(words)

    def features_text(self) -> str:
        """'feature 12 ablated', 'feature 7 → 5', 'L1 #421 → 5' (a transcoder's), '3 features edited' ('' when none)."""
        if not self.features:
            return ""
        if len(self.features) == 1:
            feature, value = self.features[0]
            name = feature_name(feature)
            return f"{name} ablated" if value == 0 else f"{name} → {value:g}"
        return f"{len(self.features)} features edited"


def feature_name(feature) -> str:
    """How a held feature is named: 'feature 12' (a dictionary's index), 'L1 #421' (layer 1's transcoder
    feature 421: the Circuits panel holds (layer, index) pairs)."""
    if isinstance(feature, tuple):
        layer, index = feature
        return f"L{layer} #{index}"
    return f"feature {feature}"


NO_ABLATION = AblationState()
