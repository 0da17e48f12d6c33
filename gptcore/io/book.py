"""The checkpoints of *Build a Large Language Model (From Scratch)*'s `GPTModel`.

Readers of the book save `torch.save(model.state_dict(), "model.pth")`, or, to resume training,
`{"model_state_dict": ..., "optimizer_state_dict": ...}`. Its GPTModel is GPT-2 under other
names, so one renaming table turns it into ours:

    tok_emb / pos_emb                       -> embed / pos_embed
    trf_blocks.{i}.norm1|norm2.scale|shift   -> blocks.{i}.ln1|ln2.weight|bias
    trf_blocks.{i}.att.W_query|W_key|W_value -> blocks.{i}.attn.c_attn (fused: q, k, v stacked)
    trf_blocks.{i}.att.out_proj              -> blocks.{i}.attn.c_proj
    trf_blocks.{i}.ff.layers.0|2             -> blocks.{i}.mlp.c_fc|c_proj
    final_norm.scale|shift / out_head        -> ln_final.weight|bias / unembed

All its layers are nn.Linear, laid out as ours, so nothing is transposed; the three separate
query/key/value matrices are stacked into c_attn in that order (the order our attention splits
them in). Each block's causal `att.mask` buffer is dropped: our attention builds its own mask.
The head count is in no tensor shape, so layouts.py finds it as it does for a lone safetensors file.
"""
from __future__ import annotations

import re
from typing import Mapping

import torch

from gptcore.io.convert import strip_prefixes

_TOP_LEVEL = {
    "tok_emb.weight": "embed.weight",
    "pos_emb.weight": "pos_embed.weight",
    "final_norm.scale": "ln_final.weight",
    "final_norm.shift": "ln_final.bias",
    "out_head.weight": "unembed.weight",
}
_IN_BLOCK = {
    "norm1.scale": "ln1.weight",
    "norm1.shift": "ln1.bias",
    "norm2.scale": "ln2.weight",
    "norm2.shift": "ln2.bias",
    "att.out_proj.weight": "attn.c_proj.weight",
    "att.out_proj.bias": "attn.c_proj.bias",
    "ff.layers.0.weight": "mlp.c_fc.weight",
    "ff.layers.0.bias": "mlp.c_fc.bias",
    "ff.layers.2.weight": "mlp.c_proj.weight",
    "ff.layers.2.bias": "mlp.c_proj.bias",
}
_QKV = ("W_query", "W_key", "W_value")
_BLOCK = re.compile(r"^trf_blocks\.(\d+)\.(.+)$")
_QKV_PART = re.compile(r"^att\.(W_query|W_key|W_value)\.(weight|bias)$")
_MASK = "att.mask"

FORMAT = "the book's GPTModel"


def is_book_state(state: Mapping) -> bool:
    """Does this state dict come from the book's GPTModel? (its embedding names are unique to it)"""
    return any(isinstance(k, str) and strip_prefixes(k) in ("tok_emb.weight", "trf_blocks.0.att.W_query.weight")
               for k in state)


def book_to_ours(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Our names for the book's tensors. Keys it does not know stay as they are, so that the
    check against the model lists them as unexpected instead of dropping them silently."""
    out: dict[str, torch.Tensor] = {}
    qkv: dict[tuple[str, str], dict[str, torch.Tensor]] = {}  # (block, weight|bias) -> {W_query: t, ...}
    for key, tensor in state.items():
        bare = strip_prefixes(key)
        if bare in _TOP_LEVEL:
            out[_TOP_LEVEL[bare]] = tensor
            continue
        match = _BLOCK.match(bare)
        if match is None:
            out[key] = tensor
            continue
        index, inner = match.groups()
        part = _QKV_PART.match(inner)
        if inner == _MASK:
            continue
        if part is not None:
            qkv.setdefault((index, part.group(2)), {})[part.group(1)] = tensor
        elif inner in _IN_BLOCK:
            out[f"blocks.{index}.{_IN_BLOCK[inner]}"] = tensor
        else:
            out[key] = tensor
    for (index, kind), parts in qkv.items():
        if set(parts) != set(_QKV):  # a damaged file: keep what is there, named, for the error
            out.update({f"trf_blocks.{index}.att.{name}.{kind}": t for name, t in parts.items()})
            continue
        try:
            out[f"blocks.{index}.attn.c_attn.{kind}"] = torch.cat([parts[n] for n in _QKV], dim=0)  # (3C, C) or (3C,)
        except RuntimeError:  # shapes that do not stack: keep them apart, named, for the error
            out.update({f"trf_blocks.{index}.att.{name}.{kind}": t for name, t in parts.items()})
    return out
