"""`train_sae`: read one hook point's activations on token ids, then `fit_sae` on them.

The harvest runs the model in eval mode without the head (`logits=None`: only the hook is wanted),
a few thousand tokens per forward, and stores the rows as float32 where the model is when they fit
there (a CUDA card: `sources.DEVICE_SHARE` of its free memory; else `MEMORY_BYTES`), else in an
fp16 `ActivationCache` on disk (GPT-2 small at 2M tokens: 3 GB on disk, one batch in RAM), removed
when training ends. The SAE trains on the model's device either way (the cache sends each batch).
Also here: the checks every SAE entry point shares (the hook exists, gives one vector per token,
and its width).
"""
from __future__ import annotations

import contextlib
import tempfile
from pathlib import Path

import torch

from gptcore.errors import Cancelled
from gptcore.interp.sae.dictionary import SAE, SAEError
from gptcore.interp.sae.fit import Cancel, Progress, fit_sae
from gptcore.interp.sae.sources import ActivationCache, check_finite, device_room

MEMORY_BYTES = 1 << 30  # activations up to 1 GiB (float32) stay in RAM; beyond, an fp16 file on disk
TOKENS_PER_FORWARD = 2048  # per harvest forward: GPT-2 small's working memory stays ~100 MB
PER_PAIR = ("hook_pattern", "hook_attn_scores")  # (batch, head, query, key): not one row per token


def train_sae(model, ids, hook: str, *, width: int, k: int, tokens: int, seed: int = 0,
              progress: Progress = None, cancel: Cancel = None, batch: int = 4096, lr: float | None = None,
              cache_dir=None) -> SAE:
    """An SAE for `hook` trained on the model's activations at it over `ids` (sequences, T), on the
    model's device (and returned there). progress(done, total, message) reports the harvest
    (sequences) and then the training (tokens)."""
    with harvest(model, ids, hook, progress=progress, cancel=cancel, cache_dir=cache_dir) as rows:
        return fit_sae(rows, width=width, k=k, tokens=tokens, seed=seed, progress=progress, cancel=cancel,
                       batch=batch, lr=lr, hook=hook, device=model.device)


@contextlib.contextmanager
def harvest(model, ids, hook: str, *, progress: Progress = None, cancel: Cancel = None, cache_dir=None):
    """Yield the hook's activations on `ids` as rows (S*T, d): a tensor on the model's device, or an
    ActivationCache whose files are removed when the block ends (also on an error or a cancel)."""
    ids = check_ids(model, ids)
    d = hook_width(model, hook)
    S, T = ids.shape
    device = model.device
    if S * T * d * 4 <= room(device):
        store = torch.empty(S * T, d, device=device)  # (S*T, d)
        _fill(model, ids, hook, store.__setitem__, progress, cancel)
        yield store
        return
    with tempfile.TemporaryDirectory(dir=cache_dir, prefix="sae-acts-") as folder:
        cache = ActivationCache.create(Path(folder) / "acts.f16", S * T, d)
        try:
            _fill(model, ids, hook, lambda where, rows: cache.write(where.start, rows), progress, cancel)
            cache.flush()
            yield cache
        finally:
            cache.delete()


def room(device: torch.device) -> int:
    """Bytes of float32 activations a harvest keeps where the model is on `device` (beyond: the disk cache)."""
    return device_room(device) if device.type == "cuda" else MEMORY_BYTES


def _fill(model, ids, hook, put, progress, cancel) -> None:
    """Run the model over ids a chunk of sequences at a time; put(slice, rows (n, d)) the hook's rows."""
    S, T = ids.shape
    per = max(1, TOKENS_PER_FORWARD // T)
    for start in range(0, S, per):
        if cancel is not None and cancel():
            raise Cancelled("SAE training cancelled while reading activations")
        chunk = ids[start:start + per].to(model.device)  # (b, T)
        rows = read_hook(model, chunk, hook).float()  # (b*T, d), where the model is
        check_finite(rows, f"the activations of {hook} on sequences {start}..{start + len(chunk) - 1}")
        put(slice(start * T, (start + len(chunk)) * T), rows)
        if progress is not None:
            progress(start + len(chunk), S, f"reading {hook} activations")


def read_hook(model, ids: torch.Tensor, hook: str) -> torch.Tensor:
    """The hook's activation on ids (b, T), one row per token: (b*T, d)."""
    seen = []

    def keep(x, _hp):
        seen.append(x.detach())

    with torch.no_grad(), eval_mode(model), model.hooks([(hook, keep)]):
        model(ids, logits=None)
    x = seen[0]
    return x.reshape(ids.shape[0] * ids.shape[1], -1)


@contextlib.contextmanager
def eval_mode(model):
    """Dropout off for the block; the model's own mode restored after."""
    was = model.training
    model.eval()
    try:
        yield model
    finally:
        model.train(was)


def hook_width(model, hook: str) -> int:
    """How many numbers the hook carries per token (a probe forward of a few tokens); SAEError for
    an unknown hook (listing the valid ones) or one that is not one vector per token."""
    check_hook_name(model, hook)
    T = min(3, model.config.block_size)
    seen = []
    probe = torch.zeros(1, T, dtype=torch.long, device=model.device)
    with torch.no_grad(), eval_mode(model), model.hooks([(hook, lambda x, _hp: seen.append(x.shape))]):
        model(probe, logits=None)
    shape = tuple(seen[0])
    if hook.endswith(PER_PAIR) or shape[:2] != (1, T):
        raise SAEError(f"{hook} holds {shape} for one sequence of {T} tokens, not one vector per token "
                       "(attention scores and patterns are per pair of tokens); choose a residual, "
                       "MLP or attention-output hook")
    return int(torch.tensor(shape[2:]).prod()) if len(shape) > 2 else 1


def check_hook_name(model, hook) -> None:
    if not isinstance(hook, str) or hook not in model.hook_dict:
        raise SAEError(f"no hook point named {hook!r}; this model has: {describe_hooks(model.hook_names)}")


def describe_hooks(names: list[str]) -> str:
    """The hook names, with a block's names written once as blocks.{i}.… (i = 0..n-1)."""
    shown, layers = [], set()
    for name in names:
        parts = name.split(".")
        if parts[0] == "blocks" and len(parts) > 2:
            layers.add(int(parts[1]))
            generic = "blocks.{i}." + ".".join(parts[2:])
            if generic not in shown:
                shown.append(generic)
        else:
            shown.append(name)
    tail = f" (i = 0..{max(layers)})" if layers else ""
    return ", ".join(shown) + tail


def check_ids(model, ids) -> torch.Tensor:
    """ids as a (sequences, T) long tensor that fits the model, else SAEError naming the fix."""
    if not isinstance(ids, torch.Tensor):
        ids = torch.as_tensor(ids)
    if ids.dim() != 2 or ids.shape[0] < 1 or ids.shape[1] < 2 or ids.is_floating_point():
        raise SAEError(f"token ids must be a (sequences, tokens) integer tensor with at least 2 tokens per "
                       f"sequence, got {tuple(ids.shape)} {ids.dtype}")
    cfg = model.config
    if ids.shape[1] > cfg.block_size:
        raise SAEError(f"sequences of {ids.shape[1]} tokens are longer than the model's block_size "
                       f"{cfg.block_size}; cut them into pieces of at most {cfg.block_size} tokens")
    if int(ids.min()) < 0 or int(ids.max()) >= cfg.vocab_size:
        raise SAEError(f"token ids must lie in 0..{cfg.vocab_size - 1} (the model's vocabulary), got "
                       f"{int(ids.min())}..{int(ids.max())}: were they made by this model's tokenizer?")
    return ids.long()
