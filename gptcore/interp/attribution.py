"""Direct logit attribution (DLA): how much each head, each MLP, the embeddings and the
biases push the model's logit difference at the last position, through the final norm.

In a pre-LN residual model the stream entering the final norm is a sum of parts:
    x = token + position + Σ_layers (Σ_heads z_h W_O[h] + b_O) + Σ_layers mlp_out
With the final LayerNorm's scale frozen at its value on this run (the usual convention),
LN is affine in x, so the logit difference splits exactly into one number per part:
    LD = Σ_parts (part - mean(part)) · (w ⊙ u) / s  +  b_LN · u
(u = W_U[target] - W_U[contrast], w and b_LN the final norm's weight and bias, s its scale).
The parts therefore sum to the model's own logit difference (tested to 1e-4).

Everything is read from hook points (`hook_embed`, `hook_pos_embed`, `attn.hook_z`,
`hook_mlp_out`, the last block's `hook_resid_post`), so an ablation active on the model
(interventions.ablate) is reflected: DLA of the ablated model.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from gptcore.interp.targets import Ids, answer_direction, as_ids, check_answer


@dataclass(frozen=True)
class Attribution:
    """Direct effects on the logit difference (float64 on CPU). Heads exclude the attention
    output bias b_O, which goes to `bias` with the final norm's bias (see `attn_bias`)."""

    heads: torch.Tensor  # (L, nh)
    mlps: torch.Tensor  # (L,) each MLP's output, its output bias included
    embed: float  # token + position embedding
    bias: float  # every bias path: Σ attention-output biases + final-norm bias (+ head bias)
    total: float  # the model's logit difference (logit[target] without a contrast)
    attn_bias: torch.Tensor  # (L,) the attention-output bias part of `bias`, per layer
    target: int
    contrast: int | None
    position: int  # the (non-negative) position read

    @property
    def attention(self) -> torch.Tensor:
        """(L,) each attention layer's direct effect: its heads plus its output bias."""
        return self.heads.sum(dim=1) + self.attn_bias

    def parts_sum(self) -> float:
        return float(self.heads.sum() + self.mlps.sum()) + self.embed + self.bias


def check_residual_model(model, what: str) -> None:
    cfg = model.config
    if getattr(cfg, "ln_placement", "pre") != "pre" or not getattr(cfg, "residual", True):
        raise ValueError(f"{what} needs a pre-LN residual model (GPT-2's layout): with post-LN or no residual "
                         f"the stream is not a sum of per-component outputs. This model has "
                         f"ln_placement={cfg.ln_placement!r}, residual={cfg.residual}")


def frozen_norm_direction(norm, x: torch.Tensor, u: torch.Tensor) -> tuple[torch.Tensor, float]:
    """(d, c): with the norm's scale frozen at its value for the vector x (C,), the read-out
    `norm(v) · u` of any part v is `v · d`, plus `c` (the norm's bias read out) once.

    LayerNorm: d = centre(w ⊙ u) / s (centring moved onto the direction, as it is linear);
    RMSNorm (no centring): d = (w ⊙ u) / rms."""
    x = x.double()
    w = norm.weight.double()
    u = u.double()
    eps = float(getattr(norm, "eps", 1e-5))
    centred = "rms" not in type(norm).__name__.lower()
    if centred:
        scale = torch.sqrt(x.var(unbiased=False) + eps)
        d = w * u / scale
        d = d - d.mean()
    else:
        scale = torch.sqrt((x * x).mean() + eps)
        d = w * u / scale
    bias = getattr(norm, "bias", None)
    c = float(bias.double() @ u) if bias is not None else 0.0
    return d, c


def _hook_names(model) -> list[str]:
    L = model.config.n_layer
    names = ["hook_embed", f"blocks.{L - 1}.hook_resid_post"]
    if "hook_pos_embed" in model.hook_dict:  # rotary models have no learned positions
        names.append("hook_pos_embed")
    for i in range(L):
        names += [f"blocks.{i}.attn.hook_z", f"blocks.{i}.hook_mlp_out"]
    return names


@torch.no_grad()
def direct_logit_attribution(model, ids: Ids, target: int, contrast: int | None = None,
                             position: int = -1) -> Attribution:
    """DLA of `target` (minus `contrast`) at `position` (default: the last) of prompt `ids`."""
    check_residual_model(model, "direct logit attribution")
    idx = as_ids(model, ids)  # (1, T)
    target, contrast = check_answer(model, target, contrast)
    T = idx.shape[1]
    if not -T <= position < T:
        raise ValueError(f"position {position} is outside the prompt of {T} tokens")
    pos = position % T
    logits, cache = model.run_with_cache(idx[:, :pos + 1], names_filter=_hook_names(model), logits="last")
    last = logits[0, -1].double()  # (vocab,)
    total = float(last[target] - (last[contrast] if contrast is not None else 0.0))

    L = model.config.n_layer
    u, head_bias = answer_direction(model, target, contrast)
    d, ln_bias = frozen_norm_direction(model.ln_final, cache[f"blocks.{L - 1}.hook_resid_post"][0, -1], u)  # (C,)
    embed = cache["hook_embed"][0, -1].double()  # (C,)
    if "hook_pos_embed" in cache:
        embed = embed + cache["hook_pos_embed"][0, -1].double()
    heads, attn_bias, mlps = [], [], []
    for i, block in enumerate(model.blocks):
        z = cache[f"blocks.{i}.attn.hook_z"][0, -1].double()  # (nh, hs)
        nh, hs = z.shape
        W_O = block.attn.c_proj.weight.double().view(-1, nh, hs)  # (C, nh, hs): column slice per head
        through = torch.einsum("c,cnh->nh", d, W_O)  # (nh, hs): d read back through each head's W_O
        heads.append((z * through).sum(dim=-1))  # (nh,)
        b_O = block.attn.c_proj.bias
        attn_bias.append(float(b_O.double() @ d) if b_O is not None else 0.0)
        mlps.append(float(cache[f"blocks.{i}.hook_mlp_out"][0, -1].double() @ d))
    attn_bias_t = torch.tensor(attn_bias, dtype=torch.float64)
    return Attribution(
        heads=torch.stack(heads).cpu(), mlps=torch.tensor(mlps, dtype=torch.float64), embed=float(embed @ d),
        bias=float(attn_bias_t.sum()) + ln_bias + head_bias, total=total, attn_bias=attn_bias_t,
        target=target, contrast=contrast, position=pos)
