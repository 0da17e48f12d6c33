"""The local replacement model of one prompt, run backwards: circuit-tracer's linearisation, by hand.

Freeze, at the clean run, every attention pattern, every norm's scale (1/sigma per position) and
every transcoder's activations and error. What is left between the residual stream's sources and
its readers is linear: a norm is x -> w * centre(x) / sigma (RMSNorm: no centring), attention is
the frozen pattern times each head's OV map, and an MLP is its transcoder's skip term of the
normalised input (everything else it writes is frozen, i.e. a source). So the effect of a vector
added at one point on a reader's value elsewhere is one vector-Jacobian product, and the Jacobian
of the whole frozen model can be applied backwards to many readers at once as matrix products:
`ReverseOps` holds, per layer, the three transposed maps (norm, attention, skip) on a block of
reader gradients (P, B, C), B readers over positions 0..P-1. Positions past P are never touched:
a reader at position p depends only on positions <= p (causal attention), so a block of readers
that all sit before P needs only the first P positions (this halves the work on average). A
norm's weight and centring are folded into the matrix before it (`into_norm`), so each layer
costs its three (C, C)-sized products and one multiply by 1/sigma per position.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from gptcore.interp.sae.harvest import eval_mode


@dataclass
class CleanRun:
    """What one clean forward of a prompt leaves behind (float32, one sequence, on the model's device)."""

    resid_pre: list  # per layer (T, C): the input of ln1
    resid_mid: list  # per layer (T, C): the input of ln2
    final: torch.Tensor  # (T, C): the input of ln_final
    patterns: list  # per layer (nh, T, T)
    mlp_in: list  # per layer (T, C): ln2's output, what a transcoder reads
    mlp_out: list  # per layer (T, C): the MLP's output, what a transcoder predicts
    logits: torch.Tensor  # (vocab,) at the last position


def clean_run(model, ids: torch.Tensor) -> CleanRun:
    """One forward of `ids` (T,) with the hooks the replacement model needs."""
    L = model.config.n_layer
    names = []
    for layer in range(L):
        names += [f"blocks.{layer}.{n}" for n in ("hook_resid_pre", "hook_resid_mid", "attn.hook_pattern",
                                                   "ln2.hook_normalized", "hook_mlp_out")]
    names.append(f"blocks.{L - 1}.hook_resid_post")
    with torch.no_grad(), eval_mode(model):
        logits, cache = model.run_with_cache(ids[None].to(model.device), names_filter=names, logits="last")

    def get(name):
        return cache[name][0].float()

    return CleanRun(
        resid_pre=[get(f"blocks.{i}.hook_resid_pre") for i in range(L)],
        resid_mid=[get(f"blocks.{i}.hook_resid_mid") for i in range(L)],
        final=get(f"blocks.{L - 1}.hook_resid_post"),
        patterns=[get(f"blocks.{i}.attn.hook_pattern") for i in range(L)],
        mlp_in=[get(f"blocks.{i}.ln2.hook_normalized") for i in range(L)],
        mlp_out=[get(f"blocks.{i}.hook_mlp_out") for i in range(L)],
        logits=logits[0, -1].float())


def norm_scale(norm_module, x: torch.Tensor, centred: bool) -> torch.Tensor:
    """1/sigma (T,) of a norm at the clean run's input x (T, C), as F.layer_norm / F.rms_norm compute it."""
    if centred:
        return (x.var(-1, unbiased=False) + norm_module.eps).rsqrt()
    return (x.pow(2).mean(-1) + norm_module.eps).rsqrt()


def into_norm(W: torch.Tensor, weight: torch.Tensor, centred: bool) -> torch.Tensor:
    """W (m, C), a map whose output enters a norm's output space, folded with the norm's transpose but
    for the per-position 1/sigma: (g @ W) -> centre((g @ W) * weight) = g @ W', W' = W diag(w) (I - 11ᵀ/C).
    One matrix product then does a layer's output map, the norm's weight and its centring."""
    folded = W * weight[None, :]
    return folded - folded.mean(1, keepdim=True) if centred else folded


class ReverseOps:
    """The transposed layers of the frozen model, float32 on the model's device. States are
    position-major, (P, B, C): position p of every target in a block is one contiguous (B, C)
    matrix, so a head's frozen pattern mixes positions as one (P, P) @ (P, B·hs) product."""

    def __init__(self, model, run: CleanRun, transcoders):
        cfg = model.config
        centred = cfg.norm != "rmsnorm"
        C, nh, hs = cfg.n_embd, cfg.n_head, cfg.head_dim
        self.n_head, self.head_dim, self.group = nh, hs, nh // cfg.kv_heads
        self.inv_sigma1, self.inv_sigma2, self.W_O, self.W_V, self.pattern_T, self.skip_T = [], [], [], [], [], []
        self.ln2_weight = []
        for layer, block in enumerate(model.blocks):
            w1, w2 = block.ln1.weight.detach().float(), block.ln2.weight.detach().float()
            self.inv_sigma1.append(norm_scale(block.ln1, run.resid_pre[layer], centred))  # (T,)
            self.inv_sigma2.append(norm_scale(block.ln2, run.resid_mid[layer], centred))  # (T,)
            self.ln2_weight.append(w2)
            W_O = block.attn.c_proj.weight.detach().float()  # (C, C): out = z @ W_O.T
            self.W_O.append([W_O[:, h * hs:(h + 1) * hs].contiguous() for h in range(nh)])  # per head (C, hs)
            W_V = into_norm(block.attn.c_attn.weight.detach().float()[C + cfg.kv_dim:], w1, centred)  # (kv_dim, C)
            self.W_V.append([W_V[g * hs:(g + 1) * hs] for g in range(cfg.kv_heads)])  # per key/value head (hs, C)
            self.pattern_T.append(run.patterns[layer].transpose(1, 2).contiguous())  # (nh, key, query)
            skip = transcoders[layer].W_skip  # (C, C): m = x @ W_skip, so d x = d m @ W_skip.T
            self.skip_T.append(None if skip is None else into_norm(skip.detach().float().t(), w2, centred))
        self.centred = centred
        self.inv_sigma_final = norm_scale(model.ln_final, run.final, centred)  # (T,)
        self.final_weight = model.ln_final.weight.detach().float()

    def read_back(self, reads: torch.Tensor, weight: torch.Tensor, inv_sigma: torch.Tensor) -> torch.Tensor:
        """Readers' vectors (B, C) at a norm's output, at positions whose 1/sigma is `inv_sigma` (B,):
        the gradient at the norm's input, centre(v * w) / sigma."""
        u = reads * weight[None, :]
        if self.centred:
            u = u - u.mean(1, keepdim=True)
        return u * inv_sigma[:, None]

    def attention_back(self, layer: int, g: torch.Tensor) -> None:
        """g (P, B, C) at resid_mid -> at resid_pre, in place: g += ln1ᵀ V_backᵀ patternᵀ W_Oᵀ g."""
        P, B, C = g.shape
        hs = self.head_dim
        rows = g.view(P * B, C)
        gu = None
        pattern_T = self.pattern_T[layer][:, :P, :P]
        for h in range(self.n_head):
            gz = (rows @ self.W_O[layer][h]).view(P, B * hs)  # (query, B·hs)
            gv = (pattern_T[h] @ gz).view(P * B, hs)  # (key·B, hs)
            W_V = self.W_V[layer][h // self.group]  # (hs, C), the norm folded in
            gu = gv @ W_V if gu is None else gu.addmm_(gv, W_V)  # (P·B, C)
        g.addcmul_(gu.view(P, B, C), self.inv_sigma1[layer][:P, None, None])

    def skip_back(self, layer: int, g: torch.Tensor) -> None:
        """g (P, B, C) at resid_post -> at resid_mid, in place: g += ln2ᵀ W_skipᵀ g (the MLP's only linear
        path once its transcoder's activations and error are frozen)."""
        skip_T = self.skip_T[layer]
        if skip_T is None:
            return
        P, B, C = g.shape
        h = g.view(P * B, C) @ skip_T  # (P·B, C)
        g.addcmul_(h.view(P, B, C), self.inv_sigma2[layer][:P, None, None])
