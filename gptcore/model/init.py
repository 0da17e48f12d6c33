"""Weight-initialisation schemes, by name.

The residual panel compares them, so each is defined exactly (the tests check every
family's standard deviation against these definitions):

- gpt2             every Linear weight N(0, 0.02); the two projections that write into the
                   residual stream (attention `c_proj`, MLP `c_proj`) N(0, 0.02/sqrt(2·n_layer)),
                   so the stream's variance stays O(1) however deep the model. Embeddings N(0, 0.02).
- gpt2-unscaled    the same without the residual scaling (what "0.02 everywhere" gives).
- pytorch-default  what a freshly constructed torch module gets: Linear weights and biases
                   U(-1/sqrt(fan_in), 1/sqrt(fan_in)); Embedding N(0, 1).
- xavier-uniform   Linear weights U(-a, a), a = sqrt(6 / (fan_in + fan_out)).
- xavier-normal    Linear weights N(0, 2 / (fan_in + fan_out)).
- kaiming-normal   Linear weights N(0, 2 / fan_in) (He et al., fan-in mode).

Outside pytorch-default, biases are 0 and embeddings N(0, 0.02); LayerNorms are always 1/0 and
RMSNorms 1 (they have no bias). The modern parts need no scheme of their own: SwiGLU's gate and up
projections (`c_gate`, `c_fc`) are ordinary Linears, and its down projection is `mlp.c_proj`, so
GPT-2's residual scaling lands on it as on GELU's; sinusoidal and rotary positions hold no weights.
Numbers are drawn on the CPU from a generator seeded with `seed`, then copied to the
model's device: the same seed gives the same weights on any device.
"""
from __future__ import annotations

import math

import torch
from torch import nn

from gptcore.errors import Cancelled
from gptcore.model.norms import LayerNorm, RMSNorm

# our norms and torch's own (a model built from nn modules) get the same treatment
NORM_TYPES = (LayerNorm, RMSNorm, nn.LayerNorm, getattr(nn, "RMSNorm", ()))

GPT2_STD = 0.02
INIT_SCHEMES = ("gpt2", "gpt2-unscaled", "pytorch-default", "xavier-uniform", "xavier-normal", "kaiming-normal")
RESIDUAL_PROJECTIONS = ("attn.c_proj", "mlp.c_proj")


def is_residual_projection(module_name: str) -> bool:
    return module_name.endswith(RESIDUAL_PROJECTIONS)


def linear_weight_std(scheme: str, fan_in: int, fan_out: int, n_layer: int, residual_proj: bool) -> float:
    """The standard deviation a scheme gives a Linear weight (uniform ones: a/sqrt(3))."""
    if scheme == "gpt2":
        return GPT2_STD / math.sqrt(2 * n_layer) if residual_proj else GPT2_STD
    if scheme == "gpt2-unscaled":
        return GPT2_STD
    if scheme == "pytorch-default":
        return 1.0 / math.sqrt(fan_in) / math.sqrt(3)
    if scheme == "xavier-uniform":
        return math.sqrt(6.0 / (fan_in + fan_out)) / math.sqrt(3)
    if scheme == "xavier-normal":
        return math.sqrt(2.0 / (fan_in + fan_out))
    if scheme == "kaiming-normal":
        return math.sqrt(2.0 / fan_in)
    raise ValueError(f"unknown init scheme {scheme!r}; choose one of {', '.join(INIT_SCHEMES)}")


def _fill(param: torch.Tensor, sample: torch.Tensor) -> None:
    with torch.no_grad():
        param.copy_(sample.to(device=param.device, dtype=param.dtype))


def _draw(param: torch.Tensor, gen: torch.Generator, *, std: float = 0.0, bound: float | None = None) -> None:
    """Fill with N(0, std²) or U(-bound, bound); in place when the parameter is a CPU
    float32 tensor (no second copy of a large matrix), through a CPU sample otherwise."""
    with torch.no_grad():
        target = param if (param.device.type == "cpu" and param.dtype == torch.float32) else torch.empty(param.shape)
        if bound is not None:
            target.uniform_(-bound, bound, generator=gen)
        else:
            target.normal_(0.0, std, generator=gen)
        if target is not param:
            _fill(param, target)


class InitCancelled(Cancelled, RuntimeError):
    """`cancel()` turned true between two modules: the model is half drawn, throw it away."""


def init_weights(model: nn.Module, scheme: str = "gpt2", seed: int | None = None, *,
                 progress=None, cancel=None) -> nn.Module:
    """Re-initialise every parameter of `model` in place; same seed → identical weights.

    `progress(done, total, message)` is told after each module with weights (counted in
    parameters, so a huge embedding weighs what it costs); `cancel()` is asked there too, and
    raises InitCancelled. Why: drawing gpt2-xl's 1.5 B numbers takes ~40 s on a laptop CPU,
    which a user must be able to watch and to stop."""
    if scheme not in INIT_SCHEMES:
        raise ValueError(f"unknown init scheme {scheme!r}; choose one of {', '.join(INIT_SCHEMES)}")
    gen = torch.Generator()
    gen.manual_seed(int(seed) if seed is not None else int(torch.seed() % (2**63)))
    n_layer = getattr(getattr(model, "config", None), "n_layer", 1)
    uniform = scheme in ("pytorch-default", "xavier-uniform")
    done: set[int] = set()  # a tied matrix is initialised once, by its first owner
    total = sum(p.numel() for p in model.parameters())
    drawn = 0

    for name, module in model.named_modules():
        own = [p for p in module.parameters(recurse=False) if id(p) not in done]
        if cancel is not None and own and cancel():
            raise InitCancelled("initialisation cancelled")
        if isinstance(module, nn.Linear):
            if id(module.weight) not in done:
                fan_out, fan_in = module.weight.shape
                std = linear_weight_std(scheme, fan_in, fan_out, n_layer, is_residual_projection(name))
                if uniform:
                    _draw(module.weight, gen, bound=std * math.sqrt(3))
                else:
                    _draw(module.weight, gen, std=std)
                done.add(id(module.weight))
            if module.bias is not None:
                if scheme == "pytorch-default":
                    bound = 1.0 / math.sqrt(module.weight.shape[1])
                    _draw(module.bias, gen, bound=bound)
                else:
                    _fill(module.bias, torch.zeros(module.bias.shape))
        elif isinstance(module, nn.Embedding):
            if id(module.weight) in done:
                continue
            std = 1.0 if scheme == "pytorch-default" else GPT2_STD
            _draw(module.weight, gen, std=std)
            done.add(id(module.weight))
        elif isinstance(module, NORM_TYPES) and getattr(module, "weight", None) is not None:
            _fill(module.weight, torch.ones(module.weight.shape))
            if getattr(module, "bias", None) is not None:
                _fill(module.bias, torch.zeros(module.bias.shape))
        if own and progress is not None:
            drawn += sum(p.numel() for p in own)
            progress(min(drawn, total), total, f"initialising {name} ({scheme})")
    return model
