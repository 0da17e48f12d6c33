"""Activation patching: which components carry the difference between two prompts?

Run a clean prompt ("When Mary and John went to the store, John gave a drink to") and a
corrupted one of the same length (names swapped). Then rerun the corrupted prompt with ONE
component's activation taken from the clean run, and see how much of the clean answer
comes back. Each cell of a map is

    (LD_patched − LD_corrupt) / (LD_clean − LD_corrupt)

1 = that component alone restores the clean logit difference, 0 = it does nothing.

Why it is fast (GPT-2 small, 15 tokens, 144 heads: see `bench.py`'s patch_heads_ratio):
- nothing before the patched layer changes, so a patch at layer l starts from the
  corrupted run's cached `hook_resid_pre` of layer l and runs blocks l..L-1 only;
- all patches of one layer share a batched forward (one row per patch);
- the logit difference needs two rows of the unembedding, not the whole head;
- a position before the first token where the prompts differ holds the same activations in
  both runs (attention is causal), so its cells are 0 without running anything, and its keys
  and values are computed once (a KV cache) instead of in every patched run.

Built on hook points only (`attn.hook_z`, `hook_attn_out`, `hook_mlp_out`,
`hook_resid_pre`, the last `hook_resid_post`), so an active ablation composes with it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from gptcore.interp.attribution import check_residual_model
from gptcore.errors import Cancelled
from gptcore.interp.targets import Ids, as_ids, check_answer, logit_difference

Progress = Callable[[int, int], None]  # (cells done, cells in all)
Cancel = Callable[[], bool]  # True -> stop at the next batch
DEFAULT_BATCH_TOKENS = 4096  # rows × tokens per forward: bounds memory for long prompts


class PatchingCancelled(Cancelled):
    """Raised between batches when `cancel()` returned True."""


@dataclass(frozen=True)
class PatchResult:
    """One patching map. `scores` is (n_layer, n_head) for heads, (n_layer, T) otherwise."""

    kind: str  # "heads", "resid", "attn" or "mlp"
    scores: torch.Tensor  # float32 on CPU: the normalised cells
    patched_ld: torch.Tensor  # same shape: the raw logit difference of each patched run
    ld_clean: float
    ld_corrupt: float


# kind -> (hook name pattern or None for the residual itself, the dimension that a cell indexes)
_KINDS = {
    "heads": ("blocks.{}.attn.hook_z", 2),  # (B, T, nh, hs): one head, every position
    "resid": (None, 1),  # block input (B, T, C): one position
    "attn": ("blocks.{}.hook_attn_out", 1),
    "mlp": ("blocks.{}.hook_mlp_out", 1),
}


class _Runs:
    """The clean and corrupted runs, cached once for every map computed from them."""

    @torch.no_grad()
    def __init__(self, model, clean: Ids, corrupt: Ids, target: int, contrast: int | None, kinds: list[str]):
        check_residual_model(model, "activation patching")
        self.model = model
        c = as_ids(model, clean, "clean prompt")
        k = as_ids(model, corrupt, "corrupted prompt")
        if c.shape[1] != k.shape[1]:
            raise ValueError(f"the clean prompt is {c.shape[1]} tokens long and the corrupted prompt "
                             f"{k.shape[1]}; patching swaps activations position by position, so both "
                             f"need the same number of tokens — edit one of them")
        self.target, self.contrast = check_answer(model, target, contrast)
        L = model.config.n_layer
        self.T = c.shape[1]
        differs = (c[0] != k[0]).nonzero()
        # Positions before the first differing token hold the same activations in both runs
        # (attention is causal), so patching one of them restores nothing: no forward needed.
        self.first_diff = int(differs[0]) if len(differs) else self.T
        self.corrupt_ids = k
        self.start = 0  # patched runs compute positions start..T-1 (see use_shared_prefix)
        self.prefix_cache = None
        self._rotary = None  # (cos, sin) for positions start..T-1, rotary models only
        self.last = f"blocks.{L - 1}.hook_resid_post"
        names = {f"blocks.{i}.hook_resid_pre" for i in range(L)} | {self.last}
        for kind in kinds:
            pattern, _ = _KINDS[kind]
            if pattern is not None:
                names |= {pattern.format(i) for i in range(L)}
        _, self.clean = model.run_with_cache(c, names_filter=sorted(names), logits=None)
        _, self.corrupt = model.run_with_cache(k, names_filter=sorted(names), logits=None)
        self.ld_clean = float(self._ld(self.clean[self.last][:, -1])[0])
        self.ld_corrupt = float(self._ld(self.corrupt[self.last][:, -1])[0])
        for what, value in (("clean", self.ld_clean), ("corrupted", self.ld_corrupt)):
            if not torch.isfinite(torch.tensor(value)):
                raise ValueError(f"the model's output on the {what} prompt is not finite (NaN/Inf); "
                                 f"patching cannot be computed — check the model's weights")
        if abs(self.ld_clean - self.ld_corrupt) < 1e-6 * max(1.0, abs(self.ld_clean)):
            raise ValueError(f"the clean and corrupted prompts give the same logit difference "
                             f"({self.ld_clean:.4g}): there is nothing for a patch to restore — use a "
                             f"corrupted prompt that changes the answer")

    def _ld(self, final_resid: torch.Tensor) -> torch.Tensor:
        return logit_difference(self.model, final_resid, self.target, self.contrast)  # (N,)

    def source(self, kind: str, layer: int) -> tuple[str, torch.Tensor]:
        """The hook name a cell of `kind` at `layer` patches, and the clean activation (T, ...)."""
        pattern, _ = _KINDS[kind]
        name = f"blocks.{layer}.hook_resid_pre" if pattern is None else pattern.format(layer)
        return name, self.clean[name][0]

    @torch.no_grad()
    def use_shared_prefix(self, rows: int) -> None:
        """Compute the tokens before the first difference once, for every patched run.

        They are the same in the clean, corrupted and every patched run (causal attention),
        so their keys and values go into a KV cache of `rows` rows once, and each patched
        run computes only the positions from the first difference on: the IOI prompts
        differ at token 9 of 14, a third of the bench's 15 tokens are shared. Skipped when
        hooks are attached to the model (an ablation may depend on absolute positions,
        which a run that starts mid-prompt would shift), or when little is shared."""
        model, d = self.model, self.first_diff
        if d < 2 or d >= self.T or any(hp.active for hp in model.hook_dict.values()):
            return
        from gptcore.model.gpt import KVCache

        cache = KVCache(model.config.replace(block_size=self.T), rows, model.device, model.dtype)
        model(self.corrupt_ids[:, :d].expand(rows, d), kv_cache=cache, logits=None)  # cache.length = d
        self.prefix_cache, self.start, self._rotary = cache, d, None

    @torch.no_grad()
    def run_layer(self, kind: str, layer: int, cells: list[int]) -> torch.Tensor:
        """Patched LD (len(cells),): row r patches cell cells[r] of `kind` in `layer`."""
        _, dim = _KINDS[kind]
        name, clean = self.source(kind, layer)
        s = self.start
        clean = clean[s:]  # (T - s, ...): positions from `start` on
        rows = torch.arange(len(cells))
        idx = torch.tensor(cells) - (s if dim == 1 else 0)
        x = self.corrupt[f"blocks.{layer}.hook_resid_pre"][:, s:].expand(len(cells), -1, -1).clone()  # (N, T-s, C)

        def patch(act: torch.Tensor, hook=None) -> torch.Tensor:
            if hook is not None:
                act = act.clone()
            if dim == 1:  # positions: act (N, T, C), clean (T, C)
                act[rows, idx] = clean[idx]
            else:  # heads: act (N, T, nh, hs), clean (T, nh, hs)
                act[rows, :, idx] = clean[:, idx].transpose(0, 1)  # (N, T, hs)
            return act

        hooks = []
        if kind == "resid":
            x = patch(x)
        else:
            hooks.append((name, patch))
        rotary = self.rotary()
        with self.model.hooks(hooks):
            for block in self.model.blocks[layer:]:
                x = block(x, self.prefix_cache, rotary)  # (N, T-s, C)
        return self._ld(x[:, -1]).float().cpu()  # (N,)

    def rotary(self):
        """Rotary models: the (cos, sin) of positions start..T-1 that GPT.forward hands every
        block (a run that starts at a block must hand them over itself); None otherwise."""
        model = self.model
        if getattr(model.config, "pos_embedding", "learned") != "rope":
            return None
        if self._rotary is None:
            pos = torch.arange(self.start, self.T, device=model.device)  # (T - start,)
            self._rotary = model.pos_embed(pos, model.dtype)
        return self._rotary

    def map(self, kind: str, progress: Progress | None, cancel: Cancel | None, done: int, total: int,
            batch_tokens: int) -> tuple[PatchResult, int]:
        cfg = self.model.config
        width = cfg.n_head if kind == "heads" else self.T
        per_batch = max(1, batch_tokens // self.T)
        patched = torch.full((cfg.n_layer, width), self.ld_corrupt)
        first = 0 if kind == "heads" else self.first_diff  # earlier positions: patched == corrupt
        done += cfg.n_layer * first
        for layer in range(cfg.n_layer):
            for start in range(first, width, per_batch):
                if cancel is not None and cancel():
                    raise PatchingCancelled(f"patching cancelled after {done} of {total} patches")
                cells = list(range(start, min(width, start + per_batch)))
                patched[layer, cells] = self.run_layer(kind, layer, cells)
                done += len(cells)
                if progress is not None:
                    progress(done, total)
        scores = (patched - self.ld_corrupt) / (self.ld_clean - self.ld_corrupt)
        return PatchResult(kind, scores, patched, self.ld_clean, self.ld_corrupt), done


@torch.no_grad()
def _maps(model, clean, corrupt, target, contrast, kinds, progress, cancel, batch_tokens) -> list[PatchResult]:
    runs = _Runs(model, clean, corrupt, target, contrast, kinds)
    cfg = model.config
    widest = max(cfg.n_head if k == "heads" else runs.T for k in kinds)
    runs.use_shared_prefix(min(widest, max(1, batch_tokens // runs.T)))
    total = sum(cfg.n_layer * (cfg.n_head if k == "heads" else runs.T) for k in kinds)
    results, done = [], 0
    for kind in kinds:
        result, done = runs.map(kind, progress, cancel, done, total, batch_tokens)
        results.append(result)
    return results


def patch_heads(model, clean: Ids, corrupt: Ids, target: int, contrast: int | None = None, *,
                progress: Progress | None = None, cancel: Cancel | None = None,
                batch_tokens: int = DEFAULT_BATCH_TOKENS) -> PatchResult:
    """Patch each head's output (`hook_z`, all positions) from clean into corrupt: (n_layer, n_head)."""
    return _maps(model, clean, corrupt, target, contrast, ["heads"], progress, cancel, batch_tokens)[0]


def patch_residual(model, clean: Ids, corrupt: Ids, target: int, contrast: int | None = None, *,
                   progress: Progress | None = None, cancel: Cancel | None = None,
                   batch_tokens: int = DEFAULT_BATCH_TOKENS) -> PatchResult:
    """Patch each block's input `hook_resid_pre` at one position: (n_layer, T)."""
    return _maps(model, clean, corrupt, target, contrast, ["resid"], progress, cancel, batch_tokens)[0]


def patch_attn_mlp(model, clean: Ids, corrupt: Ids, target: int, contrast: int | None = None, *,
                   progress: Progress | None = None, cancel: Cancel | None = None,
                   batch_tokens: int = DEFAULT_BATCH_TOKENS) -> tuple[PatchResult, PatchResult]:
    """Patch each attention layer's and each MLP's output at one position: two (n_layer, T) maps."""
    attn, mlp = _maps(model, clean, corrupt, target, contrast, ["attn", "mlp"], progress, cancel, batch_tokens)
    return attn, mlp


def patch_all(model, clean: Ids, corrupt: Ids, target: int, contrast: int | None = None, *,
              progress: Progress | None = None, cancel: Cancel | None = None,
              batch_tokens: int = DEFAULT_BATCH_TOKENS) -> dict[str, PatchResult]:
    """Every map at once ("resid", "attn", "mlp", "heads"), the two base runs shared and one
    progress count over all of them: what the explorer's Run button does."""
    kinds = ["resid", "attn", "mlp", "heads"]
    return dict(zip(kinds, _maps(model, clean, corrupt, target, contrast, kinds, progress, cancel, batch_tokens)))


@torch.no_grad()
def patched_logits(model, clean: Ids, corrupt: Ids, kind: str, layer: int, index: int) -> torch.Tensor:
    """The corrupted run with ONE cell patched: next-token logits (vocab,) at the last position
    (for showing the patched distribution of a clicked cell)."""
    if kind not in _KINDS:
        raise ValueError(f"kind must be one of {', '.join(_KINDS)}, got {kind!r}")
    c = as_ids(model, clean, "clean prompt")
    k = as_ids(model, corrupt, "corrupted prompt")
    if c.shape[1] != k.shape[1]:
        raise ValueError(f"the clean prompt is {c.shape[1]} tokens long and the corrupted prompt {k.shape[1]}; "
                         f"they need the same number of tokens")
    cfg = model.config
    width = cfg.n_head if kind == "heads" else c.shape[1]
    if not 0 <= layer < cfg.n_layer or not 0 <= index < width:
        raise ValueError(f"cell ({layer}, {index}) is outside the {kind} map ({cfg.n_layer} × {width})")
    pattern, dim = _KINDS[kind]
    name = f"blocks.{layer}.hook_resid_pre" if pattern is None else pattern.format(layer)
    _, cache = model.run_with_cache(c, names_filter=[name], logits=None)
    clean_act = cache[name]

    def patch(act, hook):
        act = act.clone()
        if dim == 1:
            act[:, index] = clean_act[:, index]
        else:
            act[:, :, index] = clean_act[:, :, index]
        return act

    with model.hooks([(name, patch)]):
        return model(k, logits="last")[0, -1]  # (vocab,)
