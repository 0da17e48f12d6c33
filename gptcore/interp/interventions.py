"""Ablation: knock out heads and MLPs for the duration of a `with` block.

    with ablate(model, heads=[(9, 6), (9, 9)], mode="mean", reference=batch):
        logits = model(ids)            # the model without those two heads

Built on hook points only: a head is replaced in its layer's `attn.hook_z` (B, T, nh, hs),
an MLP in its block's `hook_mlp_out`. No weight is touched, and the hooks are removed on
leaving (also on an exception), so the model afterwards is exactly the model before.

Modes (what a knocked-out component outputs instead):
- "zero": nothing;
- "mean": its mean over every position of reference prompts (a (B, T) batch or a list of
  prompts of any lengths): a "typical" output that carries no information about this prompt;
- "resample": its output on a reference prompt, position by position (the prompt may be
  longer than the one run; it may not be shorter).
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, Sequence

import torch

from gptcore.interp.targets import Ids, as_ids

MODES = ("zero", "mean", "resample")


@dataclass(frozen=True)
class Ablation:
    """A validated set of components to knock out (hashable: a session can keep it as state)."""

    heads: tuple[tuple[int, int], ...] = ()
    mlps: tuple[int, ...] = ()
    mode: str = "zero"

    def __bool__(self) -> bool:
        return bool(self.heads or self.mlps)

    def describe(self) -> str:
        parts = []
        if self.heads:
            parts.append(f"{len(self.heads)} head{'s' * (len(self.heads) != 1)}")
        if self.mlps:
            parts.append(f"{len(self.mlps)} MLP{'s' * (len(self.mlps) != 1)}")
        return " + ".join(parts) + f" ablated ({self.mode})" if parts else "nothing ablated"


def make_ablation(model, heads: Iterable[Sequence[int]] = (), mlps: Iterable[int] = (), mode: str = "zero") -> Ablation:
    """Check layer/head indices and the mode against the model; sort and deduplicate."""
    cfg = model.config
    if mode not in MODES:
        raise ValueError(f"ablation mode must be one of {', '.join(MODES)}; got {mode!r}")
    clean_heads = set()
    for item in heads:
        try:
            layer, head = (int(v) for v in item)
        except (TypeError, ValueError):
            raise ValueError(f"a head is a (layer, head) pair of ints, got {item!r}") from None
        if not 0 <= layer < cfg.n_layer or not 0 <= head < cfg.n_head:
            raise ValueError(f"head ({layer}, {head}) does not exist: this model has {cfg.n_layer} layers "
                             f"(0..{cfg.n_layer - 1}) of {cfg.n_head} heads (0..{cfg.n_head - 1})")
        clean_heads.add((layer, head))
    clean_mlps = set()
    for layer in mlps:
        if isinstance(layer, bool) or not isinstance(layer, int) or not 0 <= layer < cfg.n_layer:
            raise ValueError(f"MLP layer {layer!r} does not exist: this model has layers 0..{cfg.n_layer - 1}")
        clean_mlps.add(layer)
    return Ablation(tuple(sorted(clean_heads)), tuple(sorted(clean_mlps)), mode)


def _reference_prompts(model, reference) -> list[torch.Tensor]:
    """A prompt, a (B, T) batch or a list of prompts (any lengths) -> list of (1, T_i) ids."""
    if isinstance(reference, torch.Tensor) and reference.dim() == 2:
        return [as_ids(model, row, "reference prompt") for row in reference]
    if not isinstance(reference, torch.Tensor) and len(reference) and not isinstance(reference[0], int):
        return [as_ids(model, r, "reference prompt") for r in reference]
    return [as_ids(model, reference, "reference prompt")]


def _hook_name(kind: str, layer: int) -> str:
    return f"blocks.{layer}.attn.hook_z" if kind == "head" else f"blocks.{layer}.hook_mlp_out"


@torch.no_grad()
def _reference_values(model, spec: Ablation, reference) -> dict[str, torch.Tensor]:
    """hook name -> what the ablated slots receive: (T_ref, nh, hs) / (T_ref, C) for resample,
    the mean over the batch and positions for mean. Computed on the model as it is (with any
    outer ablation active), before our own hooks are attached."""
    if reference is None:
        raise ValueError(f"{spec.mode} ablation needs a reference: a prompt (list of token ids) or a (B, T) batch")
    prompts = _reference_prompts(model, reference)
    names = sorted({_hook_name("head", l) for l, _ in spec.heads} | {_hook_name("mlp", l) for l in spec.mlps})
    if spec.mode == "resample":
        if len(prompts) != 1:
            raise ValueError(f"resample ablation takes one reference prompt, got {len(prompts)}")
        _, cache = model.run_with_cache(prompts[0], names_filter=names, logits=None)
        return {n: a[0] for n, a in cache.items()}  # (T_ref, nh, hs) / (T_ref, C)
    sums: dict[str, torch.Tensor] = {}
    count = 0
    for ids in prompts:  # prompts of different lengths: every position of every prompt weighs the same
        _, cache = model.run_with_cache(ids, names_filter=names, logits=None)
        for n, a in cache.items():
            sums[n] = sums.get(n, 0) + a.double().sum(dim=(0, 1))
        count += ids.shape[1]
    return {n: (total / count).float() for n, total in sums.items()}  # (nh, hs) / (C,)


def ablation_hooks(model, spec: Ablation, reference=None) -> list[tuple[str, Callable]]:
    """The (hook name, fn) pairs that carry out `spec`; for `model.hooks(...)`."""
    if not spec:
        return []
    values = _reference_values(model, spec, reference) if spec.mode != "zero" else {}
    by_layer: dict[int, list[int]] = {}
    for layer, head in spec.heads:
        by_layer.setdefault(layer, []).append(head)

    def replacement(name: str, T: int, like: torch.Tensor) -> torch.Tensor | float:
        if spec.mode == "zero":
            return 0.0
        v = values[name]
        if spec.mode == "mean":
            return v.to(like.dtype)
        if v.shape[0] < T:
            raise ValueError(f"resample ablation: the reference prompt has {v.shape[0]} tokens, fewer than the "
                             f"{T} being run; use a reference at least as long")
        return v[:T].to(like.dtype)  # (T, ...)

    hooks = []
    for layer, heads in by_layer.items():
        name = _hook_name("head", layer)
        idx = torch.tensor(heads)

        def knock_heads(z, hook, name=name, idx=idx):  # z (B, T, nh, hs)
            z = z.clone()
            r = replacement(name, z.shape[1], z)
            z[:, :, idx] = r if isinstance(r, float) else r[..., idx.to(r.device), :]
            return z

        hooks.append((name, knock_heads))
    for layer in spec.mlps:
        name = _hook_name("mlp", layer)

        def knock_mlp(out, hook, name=name):  # out (B, T, C)
            r = replacement(name, out.shape[1], out)
            return torch.zeros_like(out) if isinstance(r, float) else r.expand_as(out).clone()

        hooks.append((name, knock_mlp))
    return hooks


@contextlib.contextmanager
def ablate(model, heads: Iterable[Sequence[int]] = (), mlps: Iterable[int] = (), mode: str = "zero",
           reference: Ids | Sequence[Ids] | None = None) -> Iterator[Ablation]:
    """Run the `with` block on `model` with these heads and MLPs knocked out (see module doc).
    Yields the validated `Ablation`. Nested uses compose."""
    spec = make_ablation(model, heads, mlps, mode)
    with model.hooks(ablation_hooks(model, spec, reference)):
        yield spec
