"""What the residual domain hands out: residual-stream curves and gradient flow.

Frozen dataclasses of numpy arrays and plain values: numpy only (tests/test_layers.py holds every
results.py to that), so panels, scripts and tests read them without the session's imports.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


# --- residual results ---
@dataclass(frozen=True)
class ResidualResult:
    curves: object  # gptcore.interp.probes.residual.Curves: numpy (S, K, P) values, x, labels, schemes, seeds
    reference: np.ndarray | None  # (P',) the loaded trained model's own curve, or None
    reference_name: str  # the model it was measured on ("" without one)
    version: int  # Session.version when measured
    elapsed_s: float  # seconds the scheme × seed sweep took


@dataclass(frozen=True)
class ReferenceCurve:
    x: np.ndarray  # (P,) layer-boundary positions of the loaded model
    y: np.ndarray  # (P,) its norms
    name: str
    version: int


@dataclass(frozen=True)
class GradientResult:
    curves: object  # gptcore.interp.probes.residual.Curves with quantity "grad-params" / "grad-stream"
    version: int
    elapsed_s: float


