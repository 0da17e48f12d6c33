"""Gradient flow: how much of the LM loss's gradient reaches each layer, per init scheme.

Why: a residual connection gives the backward pass an identity path, ∂x_L/∂x_l = I + …,
so the gradient reaches block 0 about as strong as block L-1. Without it the gradient is a
product of L Jacobians and shrinks (or blows up) geometrically with depth: early layers
starve. Comparing the two, under each scheme, is the lesson.

Two quantities, both read through hook points or parameters of the model itself:

- `params` (default): ‖∂L/∂θ_i‖, the norm of the gradient over all parameters of block i.
  It is what the optimiser actually applies, so "block 0 gets 10⁻⁶ of block 47's update"
  is the practical consequence, stated in the unit a user tunes (the learning rate).
- `stream`: ‖∂L/∂x_i‖ per token at `blocks.{i}.hook_resid_pre`, the backward signal
  itself as it travels down the stream (independent of each block's weight scale).

The loss is cross-entropy against uniformly random targets: at initialisation every
target is equally surprising, so the gradient measures the network's plumbing, not data.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import torch
import torch.nn.functional as F

from gptcore.model.config import GPTConfig
from gptcore.model.init import INIT_SCHEMES, init_weights
from gptcore.interp.probes.residual import (Curves, CancelFn, ProgressFn, TOKEN_SEED_SALT, as_config, blank_model, check_schemes,
                       check_seeds, prompt_batch, run_steps)

QUANTITIES = ("params", "stream")


def layer_gradients(model, idx: torch.Tensor, targets: torch.Tensor, quantity: str = "params") -> list[float]:
    """One forward + backward; the gradient norm per block (first block first)."""
    n_layer = model.config.n_layer
    stream = [0.0] * n_layer
    hooks = []
    if quantity == "stream":
        def watch(x: torch.Tensor, hook) -> None:
            i = int(hook.name.split(".")[1])

            def record(grad: torch.Tensor) -> None:  # grad (B, T, C)
                stream[i] = float(torch.linalg.vector_norm(grad.float(), dim=-1).mean())

            x.register_hook(record)

        hooks = [(f"blocks.{i}.hook_resid_pre", watch) for i in range(n_layer)]
    elif quantity != "params":
        raise ValueError(f"quantity must be one of {QUANTITIES}, got {quantity!r}")

    model.zero_grad(set_to_none=True)
    with torch.enable_grad(), model.hooks(hooks):
        logits = model(idx.to(model.device))  # (B, T, V)
        loss = F.cross_entropy(logits.flatten(0, 1).float(), targets.to(model.device).flatten())
        loss.backward()
    if quantity == "stream":
        return stream
    norms = []
    for block in model.blocks:
        squares = [p.grad.float().pow(2).sum() for p in block.parameters() if p.grad is not None]
        norms.append(float(torch.stack(squares).sum().sqrt()) if squares else 0.0)
    model.zero_grad(set_to_none=True)
    return norms


def gradient_flow(config: GPTConfig | dict, schemes: Sequence[str] = INIT_SCHEMES, seeds: Sequence[int] = (0, 1, 2),
                  batch: int = 4, length: int = 64, quantity: str = "params", tokens=None, device="cpu",
                  progress: ProgressFn | None = None, cancel: CancelFn | None = None) -> Curves:
    """Per-block gradient norms for each scheme over `seeds` (x = block index)."""
    cfg = as_config(config)
    schemes, seeds = check_schemes(schemes), check_seeds(seeds)
    if quantity not in QUANTITIES:
        raise ValueError(f"quantity must be one of {QUANTITIES}, got {quantity!r}")
    batches = {seed: prompt_batch(cfg, seed, batch, length, tokens) for seed in seeds}
    targets = {}
    for seed, b in batches.items():
        gen = torch.Generator().manual_seed((int(seed) ^ TOKEN_SEED_SALT) + 1)
        targets[seed] = torch.randint(0, cfg.vocab_size, b.shape, generator=gen)  # (B, T)
    # The head stays full-size (the softmax over the real vocabulary is part of the
    # gradient); only unused positions are dropped, as their rows never enter the graph.
    T = max(b.shape[1] for b in batches.values())
    model = blank_model(cfg.replace(block_size=T, dropout=0.0), device)

    def step(scheme: str, seed: int) -> list[float]:
        init_weights(model, scheme, seed)
        return layer_gradients(model, batches[seed], targets[seed], quantity)

    values = run_steps(schemes, seeds, step, progress, cancel, "gradient flow")
    x = np.arange(cfg.n_layer, dtype=np.float64)
    labels = tuple(f"block {i}" for i in range(cfg.n_layer))
    n_tokens = int(next(iter(batches.values())).numel())
    return Curves(schemes, seeds, x, labels, values, f"grad-{quantity}", cfg.to_dict(), n_tokens)
