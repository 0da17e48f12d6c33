"""`train_transcoders`: every MLP's input and output on token ids, read in one forward per chunk, then
`fit_transcoder` layer by layer.

Why one forward for all layers: reading layer by layer would run the model L times over the same
text; here each chunk runs once with hooks on every `ln2.hook_normalized` and `hook_mlp_out`. The
rows are kept as float32 in memory while all 2·L of them fit in the SAE harvest's MEMORY_BYTES,
else one fp16 ActivationCache per layer and side on disk, removed when training ends (also on an
error or a cancel).
"""
from __future__ import annotations

import contextlib

from gptcore.interp.circuits.fit import fit_transcoder
from gptcore.interp.circuits.transcoder import INPUT_HOOK, OUTPUT_HOOK, CircuitError, Transcoder, check_model
from gptcore.interp.sae.fit import Cancel, Progress
from gptcore.interp.sae.harvest import harvest_hooks

TOKENS_PER_FORWARD = 2048  # per forward of the harvest (the SAE harvest's figure)


def train_transcoders(model, ids, *, width: int, k: int, tokens: int, seed: int = 0, skip: bool = True,
                      progress: Progress = None, cancel: Cancel = None, batch: int = 4096, lr: float | None = None,
                      init: list[Transcoder] | None = None, cache_dir=None) -> list[Transcoder]:
    """One transcoder per block, trained on the model's MLP inputs and outputs over `ids` (sequences,
    T), `tokens` rows each, on the model's device (and returned there). `init`: the previous
    transcoders, one per layer, to warm-start from (as the SAEs are walked over a run's kept steps). progress(done, total, message) reports the read
    (sequences), then the training (tokens over every layer)."""
    check_model(model)
    n_layer = model.config.n_layer
    if init is not None and (len(init) != n_layer or any(not isinstance(t, Transcoder) for t in init)):
        raise CircuitError(f"init must be the {n_layer} transcoders of a previous training of this model (one "
                           f"per layer), got {len(init) if hasattr(init, '__len__') else type(init).__name__}")
    out = []
    with harvest_mlps(model, ids, progress=progress, cancel=cancel, cache_dir=cache_dir) as pairs:
        per_layer = (tokens // batch) * batch if tokens >= batch else tokens
        for layer, (inputs, targets) in enumerate(pairs):
            def layer_progress(done, total, message, offset=layer * per_layer):
                progress(offset + done, n_layer * total, message)

            out.append(fit_transcoder(inputs, targets, width=width, k=k, tokens=tokens, seed=seed, skip=skip,
                                      layer=layer, progress=layer_progress if progress else None, cancel=cancel,
                                      batch=batch, lr=lr, init=None if init is None else init[layer],
                                      device=model.device))
    return out


@contextlib.contextmanager
def harvest_mlps(model, ids, *, progress: Progress = None, cancel: Cancel = None, cache_dir=None):
    """Yield [(inputs (S*T, d), outputs (S*T, d))] per layer: tensors on the model's device, or
    ActivationCaches whose files are removed when the block ends (the SAE harvest's `harvest_hooks`)."""
    check_model(model)
    hooks = [f"blocks.{layer}.{hook}" for layer in range(model.config.n_layer) for hook in (INPUT_HOOK, OUTPUT_HOOK)]
    with harvest_hooks(model, ids, hooks, work="transcoder training", reading="every MLP's input and output",
                       progress=progress, cancel=cancel, cache_dir=cache_dir, prefix="transcoder-acts-",
                       per_forward=TOKENS_PER_FORWARD) as stores:
        yield list(zip(stores[0::2], stores[1::2]))
