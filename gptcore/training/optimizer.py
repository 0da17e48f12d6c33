"""nanoGPT's AdamW for the Trainer: configure_optimizers' two parameter groups (decay on tensors
of 2+ dimensions, none on biases and norm gains), torch's fused kernel where it is the faster one,
and the parts of the model whose gradient norms a run's trace records.
"""
from __future__ import annotations

import torch
from torch import nn

from gptcore.training.config import TrainConfig


def optimizer_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """nanoGPT's configure_optimizers split: 2+-dimensional tensors (matrices, embeddings) decay,
    the rest (biases, norm gains) do not. named_parameters() yields a shared tensor once, so a
    tied embedding/head is decayed once, under its first name."""
    params = [p for _, p in model.named_parameters() if p.requires_grad]
    return [{"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
            {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]


def make_optimizer(groups: list[dict], cfg: TrainConfig, fused: bool) -> torch.optim.AdamW:
    """AdamW over `groups` (`optimizer_groups`); `fused` chooses torch's fused kernel (`choose_fused`).
    The fused kernel is the same update in one pass over the parameters instead of a dozen;
    `fused=False` is torch's default kernel, train.py's on a CPU, bitwise; the two differ in the
    last float bits only."""
    extra = {"fused": True} if fused else {}
    return torch.optim.AdamW(groups, lr=cfg.learning_rate, betas=(cfg.beta1, cfg.beta2), **extra)


def choose_fused(groups: list[dict], device_type: str):
    """(fused?, adamw_choice.FusedChoice or None): on CUDA the fused kernel (nanoGPT's choice), on
    a CPU whichever one step of these parameters runs faster here (timed once, cached), else torch's default."""
    if device_type == "cuda":
        return True, None
    if device_type == "cpu":
        from gptcore.training.adamw_choice import choose_cpu_fused

        choice = choose_cpu_fused(groups)
        return choice.fused, choice
    return False, None


def grad_norm_groups(model: nn.Module) -> tuple[list[str], list[int]]:
    """(group names, group index of each trainable parameter): "embed", "pos_embed", "blocks.0",
    ..., "ln_final", "unembed" (absent when tied: it is the embedding)."""
    names: list[str] = []
    index: list[int] = []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        parts = name.split(".")
        group = ".".join(parts[:2]) if parts[0] == "blocks" else parts[0]
        if group not in names:
            names.append(group)
        index.append(names.index(group))
    return names, index
