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
    with harvest_hooks(model, ids, [hook], work="SAE training", reading=f"{hook} activations", progress=progress,
                       cancel=cancel, cache_dir=cache_dir, prefix="sae-acts-") as (rows,):
        yield rows


@contextlib.contextmanager
def harvest_hooks(model, ids, hooks, *, work: str, reading: str, progress: Progress = None, cancel: Cancel = None,
                  cache_dir=None, prefix: str = "acts-", per_forward: int | None = None):
    """Yield every hook's activations on `ids`, in `hooks`' order, each as rows (S*T, d_hook), read in one
    forward per chunk of `per_forward` tokens (default TOKENS_PER_FORWARD): tensors on the model's device
    when they all fit there (`room`), else one ActivationCache each in a temporary folder, removed when
    the block ends (also on an error or a cancel). `work` and `reading` name the job in the cancel and
    progress messages ("SAE training", "blocks.0.hook_resid_post activations"). The SAE's harvest reads
    one hook; the transcoders' every MLP's input and output (circuits/harvest.py)."""
    ids = check_ids(model, ids)
    widths = hook_widths(model, hooks)
    S, T = ids.shape
    device, fill = model.device, (work, reading, per_forward or TOKENS_PER_FORWARD)
    if S * T * sum(widths) * 4 <= room(device):
        stores = [torch.empty(S * T, d, device=device) for d in widths]  # (S*T, d) each
        _fill(model, ids, hooks, lambda i, where, rows: stores[i].__setitem__(where, rows), progress, cancel, *fill)
        yield stores
        return
    with tempfile.TemporaryDirectory(dir=cache_dir, prefix=prefix) as folder:
        caches = [ActivationCache.create(Path(folder) / f"acts{i}.f16", S * T, d) for i, d in enumerate(widths)]
        try:
            _fill(model, ids, hooks, lambda i, where, rows: caches[i].write(where.start, rows), progress, cancel,
                  *fill)
            for cache in caches:
                cache.flush()
            yield caches
        finally:
            for cache in caches:
                cache.delete()


def room(device: torch.device) -> int:
    """Bytes of float32 activations a harvest keeps where the model is on `device` (beyond: the disk cache)."""
    return device_room(device) if device.type == "cuda" else MEMORY_BYTES


def _fill(model, ids, hooks, put, progress, cancel, work: str, reading: str, per_forward: int) -> None:
    """Run the model over ids a chunk of sequences at a time with every hook attached; put(i, slice, rows
    (n, d)) hook i's rows."""
    S, T = ids.shape
    per = max(1, per_forward // T)
    for start in range(0, S, per):
        if cancel is not None and cancel():
            raise Cancelled(f"{work} cancelled while reading activations")
        chunk = ids[start:start + per].to(model.device)  # (b, T)
        seen = read_hooks(model, chunk, hooks)
        where = slice(start * T, (start + len(chunk)) * T)
        for i, hook in enumerate(hooks):
            rows = seen[hook].float()  # (b*T, d), where the model is
            check_finite(rows, f"the activations of {hook} on sequences {start}..{start + len(chunk) - 1}")
            put(i, where, rows)
        if progress is not None:
            progress(start + len(chunk), S, f"reading {reading}")


def read_hooks(model, ids: torch.Tensor, hooks) -> dict[str, torch.Tensor]:
    """Each hook's activation on ids (b, T) in one forward, one row per token: {hook: (b*T, d)}."""
    seen = {}

    def keep(x, hp):
        seen[hp.name] = x.detach()

    with torch.no_grad(), eval_mode(model), model.hooks([(hook, keep) for hook in hooks]):
        model(ids, logits=None)
    return {hook: seen[hook].reshape(ids.shape[0] * ids.shape[1], -1) for hook in hooks}


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
    return hook_widths(model, [hook])[0]


def hook_widths(model, hooks) -> list[int]:
    """hook_width of each hook, from one probe forward."""
    for hook in hooks:
        check_hook_name(model, hook)
    T = min(3, model.config.block_size)
    seen = {}

    def shape_of(x, hp) -> None:  # returns nothing: the activation goes on unchanged
        seen[hp.name] = x.shape

    probe = torch.zeros(1, T, dtype=torch.long, device=model.device)
    with torch.no_grad(), eval_mode(model), model.hooks([(h, shape_of) for h in hooks]):
        model(probe, logits=None)
    widths = []
    for hook in hooks:
        shape = tuple(seen[hook])
        if hook.endswith(PER_PAIR) or shape[:2] != (1, T):
            raise SAEError(f"{hook} holds {shape} for one sequence of {T} tokens, not one vector per token "
                           "(attention scores and patterns are per pair of tokens); choose a residual, "
                           "MLP or attention-output hook")
        widths.append(int(torch.tensor(shape[2:]).prod()) if len(shape) > 2 else 1)
    return widths


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
