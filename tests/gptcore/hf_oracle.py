"""The reference for attribution and patching: HF's GPT2LMHeadModel with forward hooks of
its own (no gptcore model code; the random-weights builder is shared with gptcore.benches.tl_check), on random weights saved with `save_pretrained`; our model is
loaded from that folder with `gptcore.load`, the way a user would load a real checkpoint.

HF's init leaves LayerNorms at 1/0 and biases at 0, which would hide a wrong bias or norm
term, so every parameter is re-drawn at random first.
"""
from __future__ import annotations

import contextlib

import torch

from gptcore.benches.tl_check import random_hf_gpt2

transformers = __import__("transformers")

SHAPE = dict(vocab_size=101, n_positions=32, n_embd=48, n_layer=3, n_head=4)


def random_hf(seed: int = 0, **overrides):
    return random_hf_gpt2(transformers, {**SHAPE, **overrides}, seed, eot=0)


def saved_pair(tmp_path, seed: int = 0, **overrides):
    """(hf, ours): the same random weights, ours loaded from HF's saved folder."""
    from gptcore import load

    hf = random_hf(seed, **overrides)
    folder = tmp_path / f"hf-{seed}"
    hf.save_pretrained(folder)
    ours, _ = load(str(folder), device="cpu")
    return hf, ours


def hf_ld(logits: torch.Tensor, target: int, contrast: int | None) -> torch.Tensor:
    last = logits[:, -1]  # (B, vocab)
    return last[:, target] - (last[:, contrast] if contrast is not None else 0.0)


@contextlib.contextmanager
def hooked(handles_from):
    handles = list(handles_from)
    try:
        yield
    finally:
        for h in handles:
            h.remove()


def capture(hf, ids: torch.Tensor) -> dict:
    """One HF run: each block's input, each c_proj input (the heads side by side), each
    attention and MLP output, the embeddings, the final-norm input, and the logits."""
    got: dict = {}
    t = hf.transformer

    def keep(key, pre=False, first=False):
        if pre:
            return lambda mod, args, kwargs: got.__setitem__(key, (args[0] if args else kwargs["hidden_states"]).detach().clone())
        return lambda mod, args, out: got.__setitem__(key, (out[0] if first else out).detach().clone())

    handles = [t.wte.register_forward_hook(keep("wte")), t.wpe.register_forward_hook(keep("wpe")),
               t.ln_f.register_forward_pre_hook(keep("final", pre=True), with_kwargs=True)]
    for i, block in enumerate(t.h):
        handles += [block.register_forward_pre_hook(keep(f"resid{i}", pre=True), with_kwargs=True),
                    block.attn.c_proj.register_forward_pre_hook(keep(f"z{i}", pre=True), with_kwargs=True),
                    block.attn.register_forward_hook(keep(f"attn{i}", first=True)),
                    block.mlp.register_forward_hook(keep(f"mlp{i}"))]
    with hooked(handles), torch.no_grad():
        got["logits"] = hf(ids).logits
    return got


def patched_ld(hf, clean_acts: dict, corrupt: torch.Tensor, kind: str, layer: int, index: int,
               target: int, contrast: int | None) -> float:
    """One naive patched run of HF's model: the reference for one cell of a patching map."""
    block = hf.transformer.h[layer]
    hs = hf.config.n_embd // hf.config.n_head

    def replace(act, clean):
        act = act.clone()
        if kind == "heads":
            act[:, :, index * hs:(index + 1) * hs] = clean[:, :, index * hs:(index + 1) * hs]
        else:
            act[:, index] = clean[:, index]
        return act

    if kind == "heads":
        h = block.attn.c_proj.register_forward_pre_hook(
            lambda mod, args: (replace(args[0], clean_acts[f"z{layer}"]),))
    elif kind == "resid":
        def pre(mod, args, kwargs):
            if args:
                return (replace(args[0], clean_acts[f"resid{layer}"]), *args[1:]), kwargs
            return args, {**kwargs, "hidden_states": replace(kwargs["hidden_states"], clean_acts[f"resid{layer}"])}
        h = block.register_forward_pre_hook(pre, with_kwargs=True)
    elif kind == "attn":
        h = block.attn.register_forward_hook(lambda mod, args, out: (replace(out[0], clean_acts[f"attn{layer}"]), *out[1:]))
    else:
        h = block.mlp.register_forward_hook(lambda mod, args, out: replace(out, clean_acts[f"mlp{layer}"]))
    with hooked([h]), torch.no_grad():
        return float(hf_ld(hf(corrupt).logits, target, contrast)[0])
