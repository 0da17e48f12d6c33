"""`sae_edit`: clamp or ablate features for the duration of a `with` block.

    with sae_edit(model, sae, {123: 0.0, 7: 5.0}):
        logits = model(ids)        # feature 123 ablated, feature 7 held at 5 at every token

Inside, the hook's output x becomes x + sum_i (v_i - f_i(x)) W_dec[i]: the SAE's error term
(x - x_hat) is kept, so only the named features change and an edit to nothing is the model itself
(not the SAE's reconstruction of it). A value of 0 ablates; one above the feature's maximum steers.
For a neuron dictionary W_dec[i] is the neuron's own axis, so the neuron is set. Built on the
model's hooks: they are removed on leaving, also on an exception.
"""
from __future__ import annotations

import contextlib
import math
from typing import Iterator, Mapping

import torch

from gptcore.interp.sae.dictionary import SAEError
from gptcore.interp.sae.files import check_sae_fits


@contextlib.contextmanager
def sae_edit(model, sae, edits: Mapping[int, float]) -> Iterator:
    """Hold each feature i of `sae` at edits[i] inside the block (see the module's docstring)."""
    check_sae_fits(model, sae)
    features, values = _check_edits(sae, edits)

    def edit(x: torch.Tensor, _hp) -> torch.Tensor:
        flat = x.reshape(-1, sae.d_in)  # (N, d)
        here = _weights_device(sae, flat.device)
        acts = sae.feature_acts(flat.to(here), features.to(here))  # (N, m)
        delta = (values.to(here) - acts) @ sae.directions(features.to(here))  # (N, d)
        return (flat + delta.to(flat.device, flat.dtype)).reshape(x.shape)

    with model.hooks([(sae.hook, edit)]):
        yield model


def _check_edits(sae, edits) -> tuple[torch.Tensor, torch.Tensor]:
    """(features (m,), values (m,)) from {feature: value}; SAEError naming a bad entry."""
    if not isinstance(edits, Mapping) or not edits:
        raise SAEError("edits must be a non-empty {feature index: value} mapping, e.g. {12: 0.0} to ablate "
                       "feature 12")
    features, values = [], []
    for feature, value in edits.items():
        if isinstance(feature, bool) or not isinstance(feature, int) or not 0 <= feature < sae.width:
            raise SAEError(f"feature {feature!r} does not exist: this dictionary has features 0..{sae.width - 1}")
        features.append(feature)
        values.append(edit_value(value, f"feature {feature}", SAEError))
    return torch.tensor(features), torch.tensor(values)


def edit_value(value, what: str, error: type) -> float:
    """An edit's value as a finite float, or `error` saying what `what` (e.g. "feature 12") was given.
    Shared with the transcoders' edits (circuits/edit.py)."""
    try:
        value = float(value)
    except (TypeError, ValueError):
        raise error(f"the value for {what} must be a number, got {value!r}") from None
    if not math.isfinite(value):
        raise error(f"the value for {what} must be finite, got {value}")
    return value


def _weights_device(sae, default: torch.device) -> torch.device:
    for p in sae.parameters():
        return p.device
    return default
