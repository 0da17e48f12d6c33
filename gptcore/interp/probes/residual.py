"""Residual-stream norms layer by layer, under each initialisation scheme.

Why this exists: GPT-2 draws the two projections that write into the residual stream
(attention `c_proj`, MLP `c_proj`) with std 0.02/sqrt(2·n_layer). Each block *adds* its
output to the stream, so with unscaled weights the stream's variance grows by about the
same amount per block and its norm grows like sqrt(depth); the scaling keeps the sum of
all 2·n_layer additions O(1). Measuring the norm at every layer boundary, for every
scheme, over a few seeds, shows that growth directly.

The numbers are read through the model's hook points (`blocks.0.hook_resid_pre`, then each
block's `hook_resid_mid` and `hook_resid_post`), never by a second forward implementation,
so LN placement and residual on/off (`GPTConfig` options the model itself uses) show up
exactly as the model computes them. Each hook reduces its activation to one number on the
spot: nothing of size (B, T, C) is kept, and the attention pattern is never materialised.

One model is allocated per measurement (on the meta device, then `to_empty`) and
re-initialised in place for every (scheme, seed) step, so nothing is initialised twice.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np
import torch

from gptcore.model.config import ConfigError, GPTConfig
from gptcore.errors import Cancelled
from gptcore.model.init import INIT_SCHEMES, init_weights

METRICS = ("l2", "rms")
ProgressFn = Callable[[int, int, str], None]  # (steps done, steps in all, message)
CancelFn = Callable[[], bool]  # True once the user asked to stop
TOKEN_SEED_SALT = 0x5EED  # random prompts use a stream of their own, apart from the weights'


class ProbeCancelled(Cancelled):
    """Raised between two steps when `cancel()` returned True; the partial work is dropped."""


@dataclass(frozen=True)
class Curves:
    """One curve per scheme, measured over K seeds: `values[s, k, p]` for point p.

    `x` places the points on a layer axis (0 = embedding output, i + 0.5 = block i's
    resid_mid, i + 1 = block i's resid_post; block indices for per-layer gradients).
    Arrays are read-only so a result can be shared between threads and views.
    """

    schemes: tuple[str, ...]
    seeds: tuple[int, ...]
    x: np.ndarray  # (P,)
    labels: tuple[str, ...]  # (P,)
    values: np.ndarray  # (S, K, P)
    quantity: str  # "l2", "rms", "grad-params" or "grad-stream"
    config: dict = field(default_factory=dict)
    n_tokens: int = 0

    def __post_init__(self):
        for arr in (self.x, self.values):
            arr.flags.writeable = False

    @property
    def mean(self) -> np.ndarray:  # (S, P)
        return self.values.mean(axis=1)

    @property
    def std(self) -> np.ndarray:  # (S, P); 0 with a single seed
        return self.values.std(axis=1)

    @property
    def low(self) -> np.ndarray:  # (S, P) min over seeds
        return self.values.min(axis=1)

    @property
    def high(self) -> np.ndarray:  # (S, P) max over seeds
        return self.values.max(axis=1)

    def curve(self, scheme: str) -> np.ndarray:
        return self.mean[self.schemes.index(scheme)]


# -- shared pieces (the gradient probe uses them too) -------------------------------------
def as_config(config: GPTConfig | dict) -> GPTConfig:
    return config if isinstance(config, GPTConfig) else GPTConfig.from_dict(dict(config))


def check_schemes(schemes: Sequence[str]) -> tuple[str, ...]:
    schemes = tuple(schemes)
    if not schemes:
        raise ValueError("no init scheme selected; pick at least one of " + ", ".join(INIT_SCHEMES))
    for s in schemes:
        if s not in INIT_SCHEMES:
            raise ValueError(f"unknown init scheme {s!r}; choose among {', '.join(INIT_SCHEMES)}")
    return schemes


def check_seeds(seeds: Sequence[int]) -> tuple[int, ...]:
    seeds = tuple(int(s) for s in seeds)
    if not seeds:
        raise ValueError("no seed given; use e.g. seeds=(0, 1, 2) for a mean and a spread")
    return seeds


def prompt_batch(cfg: GPTConfig, seed: int, batch: int, length: int, tokens=None) -> torch.Tensor:
    """The (B, T) ids of one step: the user's tokens, or uniform random ids drawn from a
    generator seeded by `seed` (so the same seed gives the same prompts for every scheme)."""
    if tokens is not None:
        idx = torch.as_tensor(np.asarray(tokens), dtype=torch.long)
        if idx.ndim == 1:
            idx = idx[None]
        if idx.ndim != 2 or idx.numel() == 0:
            raise ValueError("tokens must be a non-empty (batch, length) array of ids")
        if int(idx.min()) < 0 or int(idx.max()) >= cfg.vocab_size:
            raise ValueError(f"token ids must lie in [0, {cfg.vocab_size}); got {int(idx.min())}..{int(idx.max())}")
    else:
        if batch < 1 or length < 1:
            raise ValueError(f"batch and length must be at least 1, got batch={batch}, length={length}")
        gen = torch.Generator().manual_seed(int(seed) ^ TOKEN_SEED_SALT)
        idx = torch.randint(0, cfg.vocab_size, (batch, length), generator=gen)  # (B, T)
    if idx.shape[1] > cfg.block_size:
        raise ConfigError("block_size", f"prompts of {idx.shape[1]} tokens exceed block_size={cfg.block_size}; "
                          "shorten them or raise block_size")
    return idx


def blank_model(cfg: GPTConfig, device):
    """A GPT in uninitialised memory (`GPT.empty`): every step calls `init_weights` anyway,
    so drawing default weights first would be wasted work."""
    from gptcore.model.gpt import GPT

    return GPT.empty(cfg, device=torch.device(device)).eval()


def run_steps(schemes, seeds, step: Callable[[str, int], list[float]], progress: ProgressFn | None,
              cancel: CancelFn | None, what: str) -> np.ndarray:
    """Call `step(scheme, seed)` for every pair, checking `cancel` before each one, and
    stack the results as (S, K, P). Each (scheme, seed) is one progress step."""
    total = len(schemes) * len(seeds)
    rows: list[list[list[float]]] = []
    done = 0
    for scheme in schemes:
        per_seed = []
        for seed in seeds:
            if cancel is not None and cancel():
                raise ProbeCancelled(f"{what} cancelled after {done} of {total} steps")
            per_seed.append(step(scheme, seed))
            done += 1
            if progress is not None:
                progress(done, total, f"{what}: {scheme}, seed {seed}")
        rows.append(per_seed)
    return np.asarray(rows, dtype=np.float64)  # (S, K, P)


# -- the residual-norm probe ---------------------------------------------------------------
def boundary_hooks(n_layer: int) -> list[str]:
    """Hook names of the layer boundaries, in stream order (2·n_layer + 1 of them)."""
    names = ["blocks.0.hook_resid_pre"]  # = hook_embed + hook_pos_embed (dropout off)
    for i in range(n_layer):
        names += [f"blocks.{i}.hook_resid_mid", f"blocks.{i}.hook_resid_post"]
    return names


def boundary_axis(n_layer: int) -> tuple[np.ndarray, tuple[str, ...]]:
    x = np.arange(2 * n_layer + 1, dtype=np.float64) / 2.0  # 0, 0.5, 1, ...
    labels = ["embed"]
    for i in range(n_layer):
        labels += [f"block {i} mid", f"block {i} out"]
    return x, tuple(labels)


def stream_norms(model, idx: torch.Tensor, metric: str = "l2") -> list[float]:
    """Mean per-token norm of the residual stream at every boundary, in one forward pass.

    `l2` is ‖x‖₂ averaged over tokens; `rms` divides it by sqrt(n_embd), which makes
    widths comparable (LayerNorm output has RMS 1 whatever the width).
    """
    if metric not in METRICS:
        raise ValueError(f"metric must be one of {METRICS}, got {metric!r}")
    names = boundary_hooks(model.config.n_layer)
    slot = {name: i for i, name in enumerate(names)}
    scale = 1.0 / math.sqrt(model.config.n_embd) if metric == "rms" else 1.0
    out = torch.zeros(len(names), dtype=torch.float64)

    def reduce(x: torch.Tensor, hook) -> None:
        per_token = torch.linalg.vector_norm(x.float(), dim=-1)  # (B, T)
        out[slot[hook.name]] = per_token.mean().double() * scale

    with torch.inference_mode(), model.hooks([(n, reduce) for n in names]):
        model(idx.to(model.device), logits=None)  # the head is not needed: skip it
    return out.tolist()


def residual_norms(config: GPTConfig | dict, schemes: Sequence[str] = INIT_SCHEMES, seeds: Sequence[int] = (0, 1, 2),
                   batch: int = 4, length: int = 64, metric: str = "l2", tokens=None, device="cpu",
                   progress: ProgressFn | None = None, cancel: CancelFn | None = None) -> Curves:
    """Residual norms at every layer boundary for each scheme, over `seeds`.

    A cheap trick that changes no statistic: every scheme draws embedding rows i.i.d., and
    the norm probe never runs the head, so the measured model holds only the embedding rows
    the batch uses (its ids renumbered 0..U-1) and only `length` positions. That saves
    drawing 38 M numbers per step at GPT-2-small shape; the blocks are exactly `config`'s.
    """
    cfg = as_config(config)
    schemes, seeds = check_schemes(schemes), check_seeds(seeds)
    if metric not in METRICS:
        raise ValueError(f"metric must be one of {METRICS}, got {metric!r}")
    batches = {seed: prompt_batch(cfg, seed, batch, length, tokens) for seed in seeds}
    compact = {seed: _renumber(b) for seed, b in batches.items()}  # ids -> 0..U-1, per seed
    B, T = next(iter(batches.values())).shape
    # The table's size depends on the request only (never on which ids a seed drew), so a
    # seed's weights, and so its curve, are the same whatever the other seeds are.
    rows = min(cfg.vocab_size, B * T)
    model = blank_model(cfg.replace(vocab_size=rows, block_size=T, dropout=0.0), device)

    def step(scheme: str, seed: int) -> list[float]:
        init_weights(model, scheme, seed)
        return stream_norms(model, compact[seed], metric)

    values = run_steps(schemes, seeds, step, progress, cancel, "residual norms")
    x, labels = boundary_axis(cfg.n_layer)
    n_tokens = int(next(iter(batches.values())).numel())
    return Curves(schemes, seeds, x, labels, values, metric, cfg.to_dict(), n_tokens)


def _renumber(idx: torch.Tensor) -> torch.Tensor:
    """Map the ids of a batch onto 0..U-1 (same id, same row), keeping the (B, T) shape."""
    used = torch.unique(idx)  # (U,) sorted
    return torch.searchsorted(used, idx)  # (B, T)


def model_residual_norms(model, tokens=None, batch: int = 4, length: int = 64, seed: int = 0,
                         metric: str = "l2") -> np.ndarray:
    """The same curve for an existing (e.g. pretrained) model, on its own weights."""
    was_training = model.training
    model.eval()
    try:
        idx = prompt_batch(model.config, seed, batch, min(length, model.config.block_size), tokens)
        return np.asarray(stream_norms(model, idx, metric), dtype=np.float64)  # (P,)
    finally:
        model.train(was_training)
