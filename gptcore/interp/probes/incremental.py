"""Attention capture that reuses the unchanged prefix of the previous prompt.

Typing changes the last token or two, yet a fresh capture reruns the whole prompt. Causal
attention makes everything about positions 0..P-1 depend on tokens 0..P-1 only, so when a
new prompt shares its first P tokens with the last one, this state keeps, from the last run:
- each layer's keys and values (a `KVCache`, cut back to the common prefix);
- pooled key sums per query bin, at a "fine" width f (a power of two, half the thumbnail's
  width or equal to it), so the thumbnail of any later length is these sums, merged pairwise
  when the bins double (see capture.py's pooling rule), divided by the rows per bin;
- per row: attention entropy, weight on the previous token and on the first token;
- the full-resolution rows of the requested layers.
The forward then runs only for the suffix, from the start of the fine bin holding the first
changed token (at most f - 1 unchanged rows are redone, so bins are only ever whole).

Results equal a fresh capture of the new prompt up to float32 rounding (tested on random edit
scripts). Memory (float32, besides the model): keys and values L·2·nh·block·hs; pooled sums
L·nh·(2t)²; row stats 3·L·nh·block; full rows per kept layer nh·T². GPT-2 small: 75 + 9.4 +
1.8 MB (+ 48 MB per full layer at T=1000); XL: 629 + 79 + 15 MB (+ 100 MB per full layer).

Past block_size the prompt is cropped with slack (`crop_step`, see capture.crop_to_block): the
window's start moves only every `crop_step` tokens, so keys typed in between append to an
unchanged window and reuse its prefix like any other keystroke.

The state serves one model and one set of settings (`matches`); the session drops it on a
model swap, a settings change or an intervention. Not thread-safe: run it under the lock that
guards the model.

On a GPU the forward is launch-bound at typing lengths: each layer's fold (pooling, row stats, a
dozen small kernels) would be launched as the layer passes. There the hooks only keep each layer's
pattern and last residual, and all layers are folded at once after the forward, as long as the
kept patterns stay under FOLD_AT_ONCE_BYTES (a dozen kernels in all instead of a dozen per layer;
issue 37); the results come back in one transfer. On the CPU each layer is folded while its pattern
is still in cache, as before. Both give the same numbers (tests/gptcore/test_probes_device.py).
"""
from __future__ import annotations

from typing import Iterable, Sequence

import torch

from gptcore.interp.probes.capture import (AttentionCapture, DEFAULT_THUMB_SIZE, bin_sum, check_capture_args, crop_to_block,
                      head_scores, pooling_edges, pooling_width, row_stats)
from gptcore.interp.probes.lens import logit_lens


FOLD_AT_ONCE_BYTES = 64 << 20  # patterns kept to fold all layers after the forward, at most (float32)


def fine_width(T: int, t: int) -> int:
    """The width a fresh state keeps its pooled sums at: half the thumbnail's (1 at most t)."""
    return max(1, pooling_width(T, t) // 2)


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


class AttentionState:
    """The previous run's reusable parts; `capture(ids)` runs only what changed.

    `keep=False` makes a one-shot capture (no key/value cache kept): what `capture_attention`
    uses, so a fresh capture and an incremental one share every line that shapes a result."""

    def __init__(self, model, *, full_layers: Iterable[int] = (), thumb_size: int = DEFAULT_THUMB_SIZE,
                 lens_top_k: int = 5, bos: int | None = None, keep: bool = True, crop_step: int = 1):
        cfg = model.config
        self.model, self.keep = model, keep
        self.full_layers = check_capture_args(cfg, [], full_layers, thumb_size)
        self.thumb_size, self.lens_top_k, self.bos = int(thumb_size), int(lens_top_k), bos
        self.crop_step = max(1, int(crop_step))
        self.ids: list[int] = []  # what the cached parts describe (model input: cropped, BOS first)
        self.fine = 1
        self._kv = None  # KVCache, made on first keep=True run
        self._sums = None  # (L, nh, 2t, 2t) pooled key sums per fine query bin
        self._rows = None  # (3, L, nh, block) entropy, prev-token, first-token per query row
        self._full: dict[int, torch.Tensor] = {}  # layer -> (nh, cap, cap) full rows

    def matches(self, model, *, full_layers=(), thumb_size=DEFAULT_THUMB_SIZE, lens_top_k=5, bos=None,
                crop_step=1) -> bool:
        """True when this state was built for the same model and settings."""
        return (model is self.model and sorted({int(x) for x in full_layers}) == self.full_layers
                and int(thumb_size) == self.thumb_size and int(lens_top_k) == self.lens_top_k and bos == self.bos
                and max(1, int(crop_step)) == self.crop_step)

    def reset(self) -> None:
        self.ids = []
        if self._kv is not None:
            self._kv.reset()

    def nbytes(self) -> int:
        """Bytes this state holds on its device (the key/value cache included)."""
        tensors = [self._sums, self._rows, *self._full.values()]
        if self._kv is not None:
            tensors += [self._kv.k, self._kv.v]
        return sum(t.numel() * t.element_size() for t in tensors if t is not None)

    # -- the capture -------------------------------------------------------------------
    def capture(self, ids: Sequence[int]) -> AttentionCapture:
        cfg = self.model.config
        ids, cropped = crop_to_block(ids, cfg.block_size, self.bos, self.crop_step)
        check_capture_args(cfg, ids, (), self.thumb_size)
        T, L, nh = len(ids), cfg.n_layer, cfg.n_head
        if T == 0:
            self.reset()
            t0 = torch.zeros(L, nh, 0, 0)
            z = torch.zeros(L, nh)
            return AttentionCapture(ids, cropped, t0, pooling_edges(0, 1), {}, z, z.clone(), z.clone(), None,
                                    self.bos is not None, meta=dict(reused_tokens=0, computed_tokens=0))
        start = self._plan(ids)
        try:
            resid_last = self._run(ids, start)
        except BaseException:
            self.reset()  # a half-written cache must never be reused
            raise
        self.ids = list(ids) if self.keep else []
        lens = logit_lens(self.model, resid_last, k=self.lens_top_k)
        return self._result(ids, cropped, lens, start)

    def _plan(self, ids: list[int]) -> int:
        """Pick the first row to recompute and bring the kept sums to the width it needs."""
        T, t = len(ids), self.thumb_size
        self._allocate(T)
        reuse = common_prefix(self.ids, ids) if self.keep else 0
        reuse = min(reuse, T - 1)  # the last row is always run: the logit lens reads it
        fine = self.fine
        if reuse == 0 or fine > pooling_width(T, t):  # nothing to keep, or bins too wide to split
            fine, reuse = fine_width(T, t), 0
        while -(-T // fine) > 2 * t:  # the prompt outgrew the kept sums: merge bins pairwise
            fine *= 2
        start = reuse // fine * fine  # whole fine bins only
        # Bins from `start` on are assigned whole by the run (not added to), so stale sums there
        # need no clearing; merging first keeps the bins below `start` at the run's width.
        while self.fine < fine and start:
            self._merge_pairs()
        self.fine = fine
        if self._kv is not None:
            self._kv.length = start
        return start

    def _allocate(self, T: int) -> None:
        cfg, model = self.model.config, self.model
        L, nh, t2 = cfg.n_layer, cfg.n_head, 2 * self.thumb_size
        dev = model.device
        if self._sums is None:
            self._sums = torch.zeros(L, nh, t2, t2, device=dev)
            self._rows = torch.zeros(3, L, nh, cfg.block_size, device=dev)
        if self.keep and self._kv is None:
            self._kv = model.new_kv_cache()
        for layer in self.full_layers:
            buf = self._full.get(layer)
            if buf is None or buf.shape[-1] < T:
                cap = min(cfg.block_size, max(T, 2 * (0 if buf is None else buf.shape[-1]), 64))
                grown = torch.zeros(nh, cap, cap, device=dev)
                if buf is not None:
                    n = buf.shape[-1]
                    grown[:, :n, :n] = buf
                self._full[layer] = grown

    def _merge_pairs(self) -> None:
        """Double the fine width: bin i of the new sums = bins 2i and 2i+1 of the old, both ways."""
        s = self._sums
        L, nh, m, _ = s.shape
        merged = s.view(L, nh, m // 2, 2, m // 2, 2).sum((3, 5))  # (L, nh, m/2, m/2)
        s.zero_()
        s[:, :, :m // 2, :m // 2] = merged
        self.fine *= 2

    def _run(self, ids: list[int], start: int) -> torch.Tensor:
        """Forward ids[start:] against the kept keys/values, folding each new pattern row in; returns
        the residual stream after each block at the last position (L, C)."""
        model, cfg = self.model, self.model.config
        T, L = len(ids), cfg.n_layer
        at_once = _fold_at_once(model.device, L * cfg.n_head * (T - start) * T * 4)
        patterns: list = [None] * L  # (nh, n, T) per layer, when folded after the forward
        resids: list = [None] * L  # (C,) per layer

        def on_pattern(layer: int):
            def hook(pattern: torch.Tensor, _hook) -> None:
                if at_once:
                    patterns[layer] = pattern[0]  # (nh, n, T): rows start..T-1
                else:
                    self._fold(layer, pattern[0][None], start, T)

            return hook

        def on_resid(layer: int):
            def hook(x: torch.Tensor, _hook) -> None:
                resids[layer] = x[0, -1]  # (C,)

            return hook

        fwd_hooks = []
        for layer in range(L):
            fwd_hooks.append((f"blocks.{layer}.attn.hook_pattern", on_pattern(layer)))
            fwd_hooks.append((f"blocks.{layer}.hook_resid_post", on_resid(layer)))
        idx = torch.tensor([ids[start:]], dtype=torch.long, device=model.device)  # (1, T - start)
        kv = self._kv if self.keep else None
        with torch.inference_mode(), model.hooks(fwd_hooks):
            model(idx, kv_cache=kv, logits=None)
            if at_once:
                self._fold(0, torch.stack(patterns), start, T)  # (L, nh, n, T)
            return torch.stack(resids).float()  # (L, C)

    def _fold(self, first: int, p: torch.Tensor, start: int, T: int) -> None:
        """Fold pattern rows start..T-1 of layers first.. into the kept sums, row stats and full rows;
        p (k, nh, n, T) holds k layers' rows."""
        f, k = self.fine, p.shape[0]
        p = p.float()
        layers = slice(first, first + k)
        keys = bin_sum(p, f, dim=3)  # (k, nh, n, ceil(T/f))
        pooled = bin_sum(keys, f, dim=2)  # (k, nh, ceil(n/f), ceil(T/f))
        q0, nq, nk = start // f, pooled.shape[2], pooled.shape[3]
        self._sums[layers, :, q0:q0 + nq, :nk] = pooled
        self._sums[layers, :, q0:q0 + nq, nk:] = 0
        ent, prev, first_token = row_stats(p, start)  # 3 × (k, nh, n)
        self._rows[:, layers, :, start:T] = torch.stack((ent, prev, first_token))
        for layer, rows in self._full.items():
            if first <= layer < first + k:
                rows[:, start:T, :T] = p[layer - first]

    def _result(self, ids: list[int], cropped: int, lens, start: int) -> AttentionCapture:
        T, t, f = len(ids), self.thumb_size, self.fine
        edges = pooling_edges(T, t)
        w = pooling_width(T, t)
        nf = -(-T // f)
        sums = self._sums[:, :, :nf, :nf]  # (L, nh, nf, nf)
        sums = bin_sum(bin_sum(sums, w // f, dim=2), w // f, dim=3)  # (L, nh, nb, nb)
        counts = (edges[1:] - edges[:-1]).to(device=sums.device, dtype=torch.float32)  # (nb,)
        exact = w == 1
        kept_full = [] if exact else [self._full[layer][:, :T, :T] for layer in self.full_layers]
        thumbs, entropy, prev, first, *full = _to_cpu(sums / counts[:, None], *head_scores(*self._rows, T),
                                                      *kept_full)
        full = {layer: thumbs[layer] if exact else full.pop(0) for layer in self.full_layers}
        return AttentionCapture(ids, cropped, thumbs, edges, full, entropy, prev, first, lens, self.bos is not None,
                                meta=dict(reused_tokens=start, computed_tokens=T - start))


def _fold_at_once(device: torch.device, pattern_bytes: int) -> bool:
    """Fold every layer after the forward (an accelerator, patterns within FOLD_AT_ONCE_BYTES) rather
    than each as it passes; one place, so a test can take either route on the CPU."""
    return device.type != "cpu" and pattern_bytes <= FOLD_AT_ONCE_BYTES


def _to_cpu(*xs: torch.Tensor) -> list[torch.Tensor]:
    """CPU copies the state will not write into later (`.cpu()` of a CPU tensor is itself); from
    another device in one transfer, not one wait each."""
    if all(x.device.type == "cpu" for x in xs):
        return [x.to("cpu", copy=True) for x in xs]
    return in_one_transfer(*xs)


def in_one_transfer(*xs: torch.Tensor) -> list[torch.Tensor]:
    """Copies on the CPU of same-dtype tensors, brought over as one flat buffer (side by side)."""
    flat = torch.cat([x.reshape(-1) for x in xs]).cpu()  # the one host synchronisation
    return [part.view(x.shape) for part, x in zip(flat.split([x.numel() for x in xs]), xs)]
