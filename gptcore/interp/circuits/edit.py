"""`transcoder_edit`: clamp or ablate transcoder features for the duration of a `with` block, and
`edited_transcoders`: the same edit as the attribution graph sees it.

    with transcoder_edit(model, transcoders, {(1, 421): 0.0, (0, 7): 5.0}):
        logits = model(ids)        # layer 1's feature 421 ablated, layer 0's feature 7 held at 5, every token

Inside, the MLP output of block L becomes `y + Σ_i (v_i − f_i(x)) · W_dec[i]`, with x the MLP's input
(`blocks.L.ln2.hook_normalized`) and f_i(x) the transcoder's activation of feature i there (0 where
TopK left it out). The MLP itself and the transcoder's error (y minus its prediction) are kept, so only
the named features change, and an edit to a feature's own value changes nothing — as `sae_edit` does
for an SAE. A value of 0 ablates; one above the feature's usual activations steers.

Why a second function for the graph: an attribution graph freezes each transcoder's activations at
the clean run. Run under `transcoder_edit`, the model's MLP outputs carry the edit, but the
transcoders would still read the feature's own activation, and its error node would absorb the
difference. `edited_transcoders` returns transcoders whose activations are the edited ones (the
feature at v on every token, the other k−1 chosen as before), so the graph of the edited model shows
the clamped feature at its value and the same error nodes as the model without the edit at that layer.
"""
from __future__ import annotations

import contextlib
import copy
from typing import Iterator, Mapping

import torch

from gptcore.interp.circuits.transcoder import CircuitError, Transcoder, check_transcoders_fit
from gptcore.interp.sae.edit import edit_value


@contextlib.contextmanager
def transcoder_edit(model, transcoders, edits: Mapping[tuple[int, int], float]) -> Iterator:
    """Hold each feature (layer, index) of `transcoders` (one per layer) at edits[(layer, index)] inside
    the block (see the module docstring). Hooks are removed on leaving, also on an exception."""
    transcoders = check_transcoders_fit(model, transcoders)
    by_layer = _check_edits(transcoders, edits)
    inputs: dict[int, torch.Tensor] = {}

    def keep(x: torch.Tensor, hp) -> None:
        inputs[int(hp.name.split(".")[1])] = x

    def edit(y: torch.Tensor, hp) -> torch.Tensor:
        layer = int(hp.name.split(".")[1])
        t, (features, values) = transcoders[layer], by_layer[layer]
        x = inputs.pop(layer).reshape(-1, t.d_in)  # (N, d)
        here = t.W_enc.device
        acts = t.feature_acts(x.to(here), features.to(here))  # (N, m)
        delta = (values.to(here) - acts) @ t.W_dec[features.to(here)]  # (N, d)
        return y + delta.to(y.device, y.dtype).reshape(y.shape)

    hooks = []
    for layer in by_layer:
        hooks += [(transcoders[layer].input_hook, keep), (transcoders[layer].output_hook, edit)]
    with model.hooks(hooks):
        yield model


def edited_transcoders(transcoders, edits: Mapping[tuple[int, int], float]) -> list[Transcoder]:
    """The transcoders with the edited layers replaced by copies whose activations carry the edit
    (ClampedTranscoder); the others are the same objects. Made for `attribution_graph` under
    `transcoder_edit`."""
    transcoders = list(transcoders)
    by_layer = _check_edits(transcoders, edits)
    out = list(transcoders)
    for layer, (features, values) in by_layer.items():
        out[layer] = ClampedTranscoder(transcoders[layer], dict(zip(features.tolist(), values.tolist())))
    return out


class ClampedTranscoder(Transcoder):
    """A copy of a transcoder whose `encode` sets each clamped feature to its value on every token;
    every other feature is what the original gives (the same top-k choice). Its prediction is the
    original's plus Σ (v_i − f_i) W_dec[i]: what `transcoder_edit` adds to the MLP's output."""

    def __init__(self, original: Transcoder, clamps: dict[int, float]):
        super().__init__(original.d_in, original.width, original.k, original.layer, skip=original.skip,
                         d_out=original.d_out, dtype=original.W_enc.dtype)
        self.load_state_dict(original.state_dict())
        self.to(original.W_enc.device)
        self.metadata = {**copy.deepcopy(original.metadata), "clamped": {str(f): v for f, v in clamps.items()}}
        self.clamps = dict(clamps)

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        acts = super().encode(x)  # (..., width)
        for feature, value in self.clamps.items():
            acts[..., feature] = value
        return acts

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.decode(self.encode(x), x)


def _check_edits(transcoders, edits) -> dict[int, tuple[torch.Tensor, torch.Tensor]]:
    """{layer: (features (m,), values (m,))} from {(layer, feature): value}; CircuitError naming a bad entry."""
    if not isinstance(edits, Mapping) or not edits:
        raise CircuitError("edits must be a non-empty {(layer, feature): value} mapping, e.g. {(1, 421): 0.0} to "
                           "ablate layer 1's feature 421")
    n_layer = len(transcoders)
    by_layer: dict[int, tuple[list, list]] = {}
    for key, value in edits.items():
        if (not isinstance(key, tuple) or len(key) != 2
                or any(isinstance(v, bool) or not isinstance(v, int) for v in key)):
            raise CircuitError(f"an edit's key must be (layer, feature), two whole numbers; got {key!r}")
        layer, feature = key
        if not 0 <= layer < n_layer:
            raise CircuitError(f"layer {layer} does not exist: these transcoders cover layers 0..{n_layer - 1}")
        width = transcoders[layer].width
        if not 0 <= feature < width:
            raise CircuitError(f"feature {feature} does not exist: layer {layer}'s transcoder has features "
                               f"0..{width - 1}")
        features, values = by_layer.setdefault(layer, ([], []))
        features.append(feature)
        values.append(edit_value(value, f"layer {layer}'s feature {feature}", CircuitError))
    return {layer: (torch.tensor(f), torch.tensor(v)) for layer, (f, v) in sorted(by_layer.items())}
