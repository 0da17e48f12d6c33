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
import tempfile
from pathlib import Path

import torch

from gptcore.errors import Cancelled
from gptcore.interp.circuits.fit import fit_transcoder
from gptcore.interp.circuits.transcoder import INPUT_HOOK, OUTPUT_HOOK, CircuitError, Transcoder, check_model
from gptcore.interp.sae import harvest as sae_harvest
from gptcore.interp.sae.fit import Cancel, Progress
from gptcore.interp.sae.harvest import check_ids, eval_mode
from gptcore.interp.sae.sources import ActivationCache, check_finite

TOKENS_PER_FORWARD = 2048


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
    ActivationCaches whose files are removed when the block ends."""
    check_model(model)
    ids = check_ids(model, ids)
    L, d = model.config.n_layer, model.config.n_embd
    rows = ids.shape[0] * ids.shape[1]
    device = model.device
    if 2 * L * rows * d * 4 <= sae_harvest.room(device):
        stores = [(torch.empty(rows, d, device=device), torch.empty(rows, d, device=device))
                  for _ in range(L)]  # (S*T, d) each
        _fill(model, ids, lambda layer, side, where, block: stores[layer][side].__setitem__(where, block),
              progress, cancel)
        yield stores
        return
    with tempfile.TemporaryDirectory(dir=cache_dir, prefix="transcoder-acts-") as folder:
        caches = [tuple(ActivationCache.create(Path(folder) / f"layer{layer}_{side}.f16", rows, d)
                        for side in ("in", "out")) for layer in range(L)]
        try:
            _fill(model, ids, lambda layer, side, where, block: caches[layer][side].write(where.start, block),
                  progress, cancel)
            for pair in caches:
                for cache in pair:
                    cache.flush()
            yield caches
        finally:
            for pair in caches:
                for cache in pair:
                    cache.delete()


def _fill(model, ids, put, progress, cancel) -> None:
    """Run the model over ids a chunk at a time with hooks on every MLP's input and output;
    put(layer, side (0 in, 1 out), slice, rows (n, d)) each."""
    S, T = ids.shape
    L = model.config.n_layer
    per = max(1, TOKENS_PER_FORWARD // T)
    names = [(f"blocks.{layer}.{hook}", layer, side) for layer in range(L)
             for side, hook in enumerate((INPUT_HOOK, OUTPUT_HOOK))]
    for start in range(0, S, per):
        if cancel is not None and cancel():
            raise Cancelled("transcoder training cancelled while reading activations")
        chunk = ids[start:start + per].to(model.device)  # (b, T)
        seen = {}

        def keep(x, hp):
            seen[hp.name] = x.detach()

        with torch.no_grad(), eval_mode(model), model.hooks([(name, keep) for name, _, _ in names]):
            model(chunk, logits=None)
        where = slice(start * T, (start + len(chunk)) * T)
        for name, layer, side in names:
            block = seen[name].reshape(len(chunk) * T, -1).float()  # (b*T, d), where the model is
            check_finite(block, f"{name} on sequences {start}..{start + len(chunk) - 1}")
            put(layer, side, where, block)
        if progress is not None:
            progress(start + len(chunk), S, "reading every MLP's input and output")
