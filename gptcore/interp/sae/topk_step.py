"""One training step of a TopK sparse autoencoder, with gradients written by hand.

Why by hand: of the (batch, width) pre-activations only k per row reach the loss, so every
gradient but the encoder's forward product is sparse. Autograd would form a dense
(batch, width) gradient and multiply it back (as many FLOPs as the forward again); here each
weight gradient is a sum of k rows per token, computed as an embedding bag over the active
(latent, token) pairs sorted by latent — one sort serves the encoder and the decoder. What is left
dense is the one product no TopK SAE can avoid, x @ W_enc, and the top-k selection.

The recipe is the published TopK one (Gao et al. 2024; EleutherAI sparsify): unit-norm decoder
rows (the gradient's component along each row removed before the step, rows renormalised after),
AuxK on dead latents (the top k_aux = d/2 of them reconstruct the main residual, weight 1/32,
scaled down while few are dead), loss = FVU (squared error over the batch's total variance), Adam.
Internally the encoder is kept as (width, d) rows so its gradient is written row by row.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

AUX_ALPHA = 1 / 32
DENSE_AUX = 4  # AuxK as dense products over the dead columns while they are at most 4 k_aux


class TopKTrainer:
    """Parameters, Adam state and the tokens since each latent last fired; `step(x)` trains on one
    batch of (already scaled) rows and returns its fraction of variance unexplained."""

    def __init__(self, decoder: torch.Tensor, b_dec: torch.Tensor, k: int, lr: float, dead_tokens: int):
        width, d = decoder.shape
        self.k, self.dead_tokens = k, dead_tokens
        self.W_dec = decoder.clone()  # (width, d), unit rows
        self.enc = decoder.clone()  # (width, d): W_enc transposed, initialised as the decoder
        self.b_enc = torch.zeros(width, dtype=decoder.dtype)  # (width,)
        self.b_dec = b_dec.clone()  # (d,)
        self.params = [self.enc, self.b_enc, self.W_dec, self.b_dec]
        self.adam = _adam(self.params, lr)
        self.since_fired = torch.zeros(width, dtype=torch.int64)  # (width,)

    @property
    def width(self) -> int:
        return self.W_dec.shape[0]

    def set_lr(self, lr: float) -> None:
        for group in self.adam.param_groups:
            group["lr"] = lr

    def dead_latents(self) -> torch.Tensor:
        return (self.since_fired > self.dead_tokens).nonzero()[:, 0]  # (n_dead,)

    @torch.no_grad()
    def step(self, x: torch.Tensor) -> float:
        sae_in = x - self.b_dec  # (B, d)
        pre = torch.addmm(self.b_enc, sae_in, self.enc.t())  # (B, width)
        vals, idx = pre.topk(self.k, dim=1, sorted=False)  # (B, k)
        total_var = (x - x.mean(0)).pow(2).sum().clamp_min(1e-12)
        part, g_vals, act = _decode_with_grad(self.W_dec, vals, idx, lambda out: out + self.b_dec - x,
                                              2 / total_var)
        err = part + self.b_dec - x  # (B, d)
        g_out = err * (2 / total_var)  # (B, d): d loss / d reconstruction
        dead = self.dead_latents()
        k_aux = min(x.shape[1] // 2, dead.numel())
        coeff = 2 * AUX_ALPHA * min(dead.numel() / (x.shape[1] // 2), 1.0) / total_var
        table, lat, g_lat, w_lat = g_out, idx, g_vals, act
        dense_aux = dead.numel() <= DENSE_AUX * k_aux
        if k_aux and not dense_aux:  # many dead: their top k_aux join the sparse gradient
            g_ehat, a_idx, a_g, a_act = self._aux_sparse(pre, dead, k_aux, err, coeff)
            table = torch.cat([g_out, g_ehat])  # (2B, d)
            lat, g_lat, w_lat = torch.cat([idx, a_idx], 1), torch.cat([g_vals, a_g], 1), torch.cat([act, a_act], 1)
        grads = _sparse_grads(lat, g_lat, w_lat, sae_in, table, self.k, self.width)  # enc, dec, b_enc
        if k_aux and dense_aux:
            self._aux_dense(pre, dead, k_aux, err, coeff, sae_in, grads)
        grad_enc, grad_dec, grad_b_enc = grads
        grad_b_dec = g_out.sum(0) - grad_b_enc @ self.enc  # (d,): decoder bias + the encoder's input shift
        grad_dec -= (grad_dec * self.W_dec).sum(1, keepdim=True) * self.W_dec  # keep rows on the sphere
        for p, g in zip(self.params, (grad_enc, grad_b_enc, grad_dec, grad_b_dec)):
            p.grad = g
        self.adam.step()
        self.W_dec /= self.W_dec.norm(dim=1, keepdim=True).clamp_min(1e-12)
        self._count_firing(idx[act > 0], x.shape[0])
        return float(err.pow(2).sum() / total_var)

    def _aux_sparse(self, pre, dead, k_aux, err, coeff):
        """AuxK with many dead latents: each row's top k_aux of them, as sparse rows. Returns
        (d aux / d e_hat (B, d), their indices, d aux / d pre, activations), each (B, k_aux) but the first."""
        vals, pos = pre.index_select(1, dead).topk(k_aux, dim=1, sorted=False)  # (B, k_aux)
        idx = dead[pos]
        e_hat, g_vals, act = _decode_with_grad(self.W_dec, vals, idx, lambda out: out + err, coeff)
        return (e_hat + err) * coeff, idx, g_vals, act

    def _aux_dense(self, pre, dead, k_aux, err, coeff, sae_in, grads) -> None:
        """AuxK with few dead latents: products over the dead columns only (B, n_dead), added into
        grads. Cheaper than B * k_aux gathered rows while n_dead <= DENSE_AUX * k_aux."""
        grad_enc, grad_dec, grad_b_enc = grads
        dead_pre = pre.index_select(1, dead)  # (B, n_dead)
        acts = dead_pre.clamp_min(0)  # (B, n_dead)
        if dead.numel() > k_aux:  # keep each row's top k_aux
            keep = torch.zeros_like(acts, dtype=torch.bool).scatter_(1, dead_pre.topk(k_aux, dim=1).indices, True)
            acts *= keep
        rows = self.W_dec.index_select(0, dead)  # (n_dead, d)
        g_ehat = (acts @ rows + err) * coeff  # (B, d)
        g_pre = (g_ehat @ rows.t()) * (acts > 0)  # (B, n_dead)
        grad_dec.index_add_(0, dead, acts.t() @ g_ehat)  # (n_dead, d)
        grad_enc.index_add_(0, dead, g_pre.t() @ sae_in)  # (n_dead, d)
        grad_b_enc.index_add_(0, dead, g_pre.sum(0))

    def _count_firing(self, fired_latents: torch.Tensor, tokens: int) -> None:
        self.since_fired += tokens
        self.since_fired[fired_latents] = 0


def _decode_with_grad(W_dec, vals, idx, residual, coeff):
    """Sum of the active decoder rows (an embedding bag) and the gradient of
    coeff * ||residual(out)||^2 with respect to the pre-activations `vals` (zero where ReLU cut).
    Returns (out (B, d), d loss / d vals (B, kk), ReLU'd activations (B, kk))."""
    act = vals.clamp_min(0).requires_grad_()  # (B, kk)
    with torch.enable_grad():
        out = F.embedding_bag(idx, W_dec, per_sample_weights=act, mode="sum")  # (B, d)
    (g_act,) = torch.autograd.grad(out, act, residual(out.detach()) * coeff)  # (B, kk)
    return out.detach(), g_act * (vals > 0), act.detach()


def _sparse_grads(lat, g_lat, w_lat, sae_in, table, k_main, width):
    """Weight gradients as sums of rows grouped by latent. lat (B, kk) latent ids; slots before
    k_main are the main top-k (their decoder gradient reads row n of `table`), later ones AuxK (row
    B + n). Encoder (width, d): sum of g * sae_in[n]; decoder (width, d): sum of activation *
    table row; b_enc (width,): sum of g."""
    B, kk = lat.shape
    flat = lat.reshape(-1)  # (B*kk,)
    order = flat.argsort(stable=True)  # a fixed summation order: deterministic
    counts = torch.bincount(flat, minlength=width)  # (width,)
    offsets = counts.cumsum(0) - counts  # (width,) start of each latent's bag
    token = order // kk  # (M,)
    dec_rows = token + B * ((order % kk) >= k_main)  # (M,)
    g_sorted = g_lat.reshape(-1)[order]  # (M,)
    grad_enc = F.embedding_bag(token, sae_in, offsets, per_sample_weights=g_sorted, mode="sum")  # (width, d)
    grad_dec = F.embedding_bag(dec_rows, table, offsets, per_sample_weights=w_lat.reshape(-1)[order],
                               mode="sum")  # (width, d)
    grad_b_enc = torch.zeros(width, dtype=g_lat.dtype).index_add_(0, flat, g_lat.reshape(-1))  # (width,)
    return grad_enc, grad_dec, grad_b_enc


def _adam(params, lr):
    """torch's fused Adam where this torch has it for these tensors (5 ms a step at GPT-2 small's
    width, against 20 for the per-tensor loop), else the default."""
    try:
        return torch.optim.Adam(params, lr=lr, fused=True)
    except (RuntimeError, TypeError):
        return torch.optim.Adam(params, lr=lr)
