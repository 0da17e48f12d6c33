"""State-dict conversion from the checkpoint layouts people have (HF GPT-2, nanoGPT, HF Llama/Qwen2).

One fixed renaming table; HF's Conv1D stores its weight as (in, out), so four matrices per
block are transposed. nanoGPT uses nn.Linear and needs no transposes. Tensors are never
copied here beyond the transposes' views: loading fills the model with `assign=True`.
"""
from __future__ import annotations

import re
from itertools import accumulate
from typing import Mapping

import torch

from gptcore.model.config import GPTConfig
from gptcore.errors import UserError

# HF GPT-2 (also nanoGPT's) inner name -> ours. Applied to the part after the prefix.
_TOP_LEVEL = {
    "wte.weight": "embed.weight",
    "wpe.weight": "pos_embed.weight",
    "ln_f.weight": "ln_final.weight",
    "ln_f.bias": "ln_final.bias",
}
_IN_BLOCK = {
    "ln_1": "ln1",
    "ln_2": "ln2",
    "attn.c_attn": "attn.c_attn",
    "attn.c_proj": "attn.c_proj",
    "mlp.c_fc": "mlp.c_fc",
    "mlp.c_proj": "mlp.c_proj",
}
CONV1D_WEIGHTS = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")
# Buffers that older HF checkpoints carry (the causal mask); not parameters of ours.
_IGNORED = re.compile(r"(^|\.)attn\.(bias|masked_bias)$")
_BLOCK = re.compile(r"^h\.(\d+)\.(.+)\.(weight|bias)$")
_PREFIXES = ("_orig_mod.", "module.", "transformer.")
# Our own parameter names (a saved `GPT.state_dict()`) pass through unchanged.
_OURS = re.compile(
    r"^((embed|pos_embed|unembed)\.weight|ln_final\.(weight|bias)"
    r"|blocks\.\d+\.(ln1|ln2|attn\.c_attn|attn\.c_proj|mlp\.c_fc|mlp\.c_gate|mlp\.c_proj)\.(weight|bias))$"
)


class ConversionError(UserError):
    """Keys or shapes that cannot be a GPT-2 checkpoint; the message lists them."""

    title = "Not a checkpoint this app can read"


def strip_prefixes(key: str) -> str:
    changed = True
    while changed:
        changed = False
        for prefix in _PREFIXES:
            if key.startswith(prefix):
                key, changed = key[len(prefix):], True
    return key


def rename_key(key: str) -> str | None:
    """Our name for a checkpoint key, or None for buffers we do not keep."""
    bare = strip_prefixes(key)
    if _IGNORED.search(bare):
        return None
    if bare == "lm_head.weight":
        return "unembed.weight"
    if _OURS.match(bare):
        return bare
    if bare in _TOP_LEVEL:
        return _TOP_LEVEL[bare]
    match = _BLOCK.match(bare)
    if match and match.group(2) in _IN_BLOCK:
        index, inner, kind = match.groups()
        return f"blocks.{index}.{_IN_BLOCK[inner]}.{kind}"
    return "?" + key  # unknown: reported as unexpected by the caller


def convert_state_dict(state: Mapping[str, torch.Tensor], *, conv1d: bool) -> tuple[dict[str, torch.Tensor], list[str]]:
    """Rename (and for HF, transpose) -> (our state dict, unexpected original keys)."""
    out: dict[str, torch.Tensor] = {}
    unexpected: list[str] = []
    for key, tensor in state.items():
        name = rename_key(key)
        if name is None:
            continue
        if name.startswith("?"):
            unexpected.append(key)
            continue
        if conv1d and name.endswith(CONV1D_WEIGHTS):
            tensor = tensor.t()
        out[name] = tensor
    return out, unexpected


def infer_config(state: Mapping[str, torch.Tensor], n_head: int | None = None, **overrides) -> GPTConfig:
    """A GPTConfig from tensor shapes alone. The head count is not in any shape, so it
    comes from `n_head`, else the GPT-2 preset with that width, else 64-wide heads."""
    ours, _ = convert_state_dict(state, conv1d=False)
    if "embed.weight" not in ours or "pos_embed.weight" not in ours:
        raise ConversionError("no token/position embedding (wte/wpe) found: not a GPT-2 checkpoint")
    vocab, d = ours["embed.weight"].shape
    block = ours["pos_embed.weight"].shape[0]
    layers = 1 + max((int(k.split(".")[1]) for k in ours if k.startswith("blocks.")), default=-1)
    fc = ours.get("blocks.0.mlp.c_fc.weight")
    d_mlp = 4 * d if fc is None else (fc.shape[0] if fc.shape[1] == d else fc.shape[1])  # (d_mlp, d) or (d, d_mlp)
    if n_head is None:
        by_width = {768: 12, 1024: 16, 1280: 20, 1600: 25}
        n_head = by_width.get(d, max(1, d // 64))
    has_bias = "blocks.0.attn.c_proj.bias" in ours if layers else "ln_final.bias" in ours
    qkv_bias = "blocks.0.attn.c_attn.bias" in ours if layers else None
    values = dict(
        vocab_size=vocab, block_size=block, n_layer=layers, n_head=n_head, n_embd=d,
        bias=has_bias, qkv_bias=None if qkv_bias == has_bias else qkv_bias,
        tie_weights=_head_is_tied(ours), mlp_ratio=d_mlp / d,
    )
    values.update(overrides)
    return GPTConfig(**values)


def _head_is_tied(ours: Mapping[str, torch.Tensor]) -> bool:
    """No head saved, or a head that is the embedding (same storage or same values)."""
    head, embed = ours.get("unembed.weight"), ours["embed.weight"]
    if head is None:
        return True
    if head.shape != embed.shape:
        return False
    return head.data_ptr() == embed.data_ptr() or bool(torch.equal(head, embed))


def config_from_hf(hf_config) -> GPTConfig:
    """GPTConfig from a transformers GPT2Config (or its dict)."""
    get = hf_config.get if isinstance(hf_config, dict) else lambda k, default=None: getattr(hf_config, k, default)
    n_embd = get("n_embd")
    n_inner = get("n_inner") or 4 * n_embd
    return GPTConfig(
        vocab_size=get("vocab_size"),
        block_size=get("n_positions"),
        n_layer=get("n_layer"),
        n_head=get("n_head"),
        n_embd=n_embd,
        mlp_ratio=n_inner / n_embd,
        tie_weights=bool(get("tie_word_embeddings", True)),
        layer_norm_eps=get("layer_norm_epsilon", 1e-5),
    )


def check_against(model_state: Mapping[str, torch.Tensor], ours: Mapping[str, torch.Tensor], unexpected: list[str], tied: bool) -> None:
    """Raise ConversionError listing every missing key, extra key and shape mismatch."""
    expected = set(model_state)
    if tied:
        expected.discard("unembed.weight")
    given = set(ours)
    if tied and "unembed.weight" in given:
        given.discard("unembed.weight")  # a saved copy of the tied head is harmless
    problems = []
    missing = sorted(expected - given)
    extra = sorted(given - expected) + unexpected
    if missing:
        problems.append(f"missing keys: {', '.join(missing[:12])}{' …' if len(missing) > 12 else ''}")
    if extra:
        problems.append(f"unexpected keys: {', '.join(extra[:12])}{' …' if len(extra) > 12 else ''}")
    for key in sorted(expected & given):
        want, got = tuple(model_state[key].shape), tuple(ours[key].shape)
        if want != got:
            problems.append(f"shape mismatch for {key}: checkpoint {got}, model {want}")
    if problems:
        raise ConversionError("; ".join(problems))


def from_hf_state_dict(state: Mapping[str, torch.Tensor], config: GPTConfig | None = None, hf_config=None):
    """Our GPT holding the weights of an HF `GPT2LMHeadModel` state dict (no init spent)."""
    from gptcore.model.gpt import GPT

    if config is None:
        config = config_from_hf(hf_config) if hf_config is not None else infer_config(state)
    ours, unexpected = convert_state_dict(state, conv1d=True)
    model = GPT.empty(config)
    check_against(model.state_dict(), ours, unexpected, config.tie_weights)
    if config.tie_weights:
        ours.pop("unembed.weight", None)
    model.load_state_dict({k: v.contiguous() for k, v in ours.items()}, strict=False, assign=True)
    model.tie_weights()
    return model


# -- HF Llama family (LlamaForCausalLM, Qwen2ForCausalLM) ------------------------------------------
# nn.Linear everywhere (no transposes). Their separate q/k/v_proj are stacked, in that order, into
# our one c_attn (queries, then the key heads, then the value heads), which is how CausalSelfAttention
# splits it; Qwen2's q/k/v biases are stacked the same way.
LLAMA_TOP_LEVEL = {
    "model.embed_tokens.weight": "embed.weight",
    "model.norm.weight": "ln_final.weight",
    "lm_head.weight": "unembed.weight",
}
LLAMA_IN_BLOCK = {
    "input_layernorm": "ln1",
    "post_attention_layernorm": "ln2",
    "self_attn.o_proj": "attn.c_proj",
    "mlp.gate_proj": "mlp.c_gate",
    "mlp.up_proj": "mlp.c_fc",
    "mlp.down_proj": "mlp.c_proj",
}
LLAMA_QKV = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj")
_LLAMA_BLOCK = re.compile(r"^model\.layers\.(\d+)\.(.+)\.(weight|bias)$")
_LLAMA_IGNORED = re.compile(r"(^|\.)rotary_emb\.inv_freq$")  # a buffer older checkpoints saved


def convert_llama_state_dict(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Our names for a Llama-family state dict. A key it does not know (or a q/k/v projection
    whose siblings are missing) keeps its own name, so the loader reports it as unexpected
    and the c_attn it should have filled as missing."""
    out: dict[str, torch.Tensor] = {}
    qkv_parts: dict[tuple[str, str], dict[str, tuple[str, torch.Tensor]]] = {}
    for key, tensor in state.items():
        if _LLAMA_IGNORED.search(key):
            continue
        if key in LLAMA_TOP_LEVEL:
            out[LLAMA_TOP_LEVEL[key]] = tensor
            continue
        match = _LLAMA_BLOCK.match(key)
        if match and match.group(2) in LLAMA_IN_BLOCK:
            index, inner, kind = match.groups()
            out[f"blocks.{index}.{LLAMA_IN_BLOCK[inner]}.{kind}"] = tensor
        elif match and match.group(2) in LLAMA_QKV:
            index, inner, kind = match.groups()
            qkv_parts.setdefault((index, kind), {})[inner] = (key, tensor)
        else:
            out[key] = tensor
    complete = {group: [parts[name][1] for name in LLAMA_QKV] for group, parts in qkv_parts.items()
                if len(parts) == len(LLAMA_QKV) and len({t.shape[1:] for _, t in parts.values()}) == 1}
    stacked = _stack_rows_each(list(complete.values()))  # (C + 2·nkv·hs[, C]) each
    for ((index, kind), _), tensor in zip(complete.items(), stacked):
        out[f"blocks.{index}.attn.c_attn.{kind}"] = tensor
    for group, parts in qkv_parts.items():
        if group not in complete:
            out.update(dict(parts.values()))
    return out


def _stack_rows_each(groups: list[list[torch.Tensor]]) -> list[torch.Tensor]:
    """`torch.cat(parts, dim=0)` for each group, copied by numpy into one fresh buffer when every
    part is a contiguous CPU tensor and each group has one dtype. Why numpy: on a busy machine
    torch's copy wakes its whole thread pool for each call (SmolLM2's 30 layers of mapped q/k/v,
    2.2 MB each: torch.cat 58 ms a layer, numpy 2 ms). Why one buffer: first touching 66 MB of
    fresh 4 KB pages cost ~16,000 page faults (~45 ms, a third of the whole load); one buffer
    can take 2 MB pages (`_fresh_cpu_bytes`), ~360 faults. Bytes are copied, so any dtype works."""
    simple = all(p.device.type == "cpu" and p.is_contiguous() and p.dtype == parts[0].dtype
                 and p.shape[1:] == parts[0].shape[1:] for parts in groups for p in parts)
    if not simple:
        return [torch.cat(parts, dim=0) for parts in groups]
    import numpy as np

    sizes = [sum(p.nbytes for p in parts) for parts in groups]
    padded = [-(-size // _ALIGN) * _ALIGN for size in sizes]
    starts = [0, *accumulate(padded)][:len(groups)]  # each group starts 64-byte aligned
    buffer = _fresh_cpu_bytes(sum(padded))
    out = []
    for parts, start, size in zip(groups, starts, sizes):
        dst = buffer[start:start + size]
        np.concatenate([p.reshape(-1).view(torch.uint8).numpy() for p in parts], out=dst.numpy())  # bytes in order
        out.append(dst.view(parts[0].dtype).reshape(-1, *parts[0].shape[1:]))
    return out


_ALIGN = 64  # bytes: any dtype's view of a group starts aligned, whatever the groups before it held


def _fresh_cpu_bytes(nbytes: int) -> torch.Tensor:
    """`torch.empty(nbytes, dtype=uint8)`, but on Linux an anonymous mapping marked for transparent
    huge pages (THP "madvise" mode, the common default, gives them only to regions that ask), so
    filling it faults once per 2 MB rather than once per 4 KB. Anywhere that is unavailable, or
    for a small buffer, the plain allocation."""
    import mmap

    hugepage = getattr(mmap, "MADV_HUGEPAGE", None)
    if hugepage is None or nbytes < (4 << 20):
        return torch.empty(nbytes, dtype=torch.uint8)
    try:
        region = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        region.madvise(hugepage)
    except (OSError, ValueError, AttributeError):
        return torch.empty(nbytes, dtype=torch.uint8)
    return torch.frombuffer(region, dtype=torch.uint8)  # the tensor keeps the mapping alive
