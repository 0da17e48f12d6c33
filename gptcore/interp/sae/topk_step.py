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
Internally the encoder is kept as (width, d) rows so its gradient is written row by row. One
addition (issue 39), on when `revive` is set: each time the dead set is read, a dead latent's
b_enc is raised to where it would fire again (`_revive`). All of this but what the encoder reads
and what the output is compared with is `TopKCore`, which the transcoder's step shares
(circuits/train_step.py); `TopKTrainer` is the SAE's.

On any device: every tensor lives where the decoder given is. A step asks the host nothing (no
`.item()`, no boolean indexing, no bincount, whose size is read back): on a GPU the Python loop
queues steps ahead of the card. The dead set is the one exception, read every `dead_every` steps
(its size sets AuxK's shapes). What differs by device (`device_plan`): on CUDA the encoder product
and AuxK's products run in bfloat16 with float32 accumulation (as sparsify's autocast does;
weights, Adam and every other sum stay float32), and AuxK always takes its dense form (a few
tensor-core GEMMs over the dead columns beat gathering k_aux = d/2 decoder rows per token); on a
CPU float32 throughout, and the dense form only while the dead are few (measured there).
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

AUX_ALPHA = 1 / 32
DENSE_AUX = 4  # on a CPU, AuxK as dense products over the dead columns while they are at most 4 k_aux


def device_plan(device: torch.device) -> tuple[torch.dtype, float]:
    """(dtype of the encoder's and AuxK's products, the most dead latents, in multiples of k_aux,
    for which AuxK takes its dense form) on `device`."""
    if device.type == "cuda" and torch.cuda.is_bf16_supported():
        return torch.bfloat16, math.inf
    if device.type == "cuda":
        return torch.float32, math.inf
    return torch.float32, DENSE_AUX


class TopKCore:
    """What a TopK SAE's and a TopK transcoder's training steps share, on the decoder's device:
    parameters (encoder rows enc (width, d_in), b_enc, unit decoder rows W_dec (width, d_out), b_dec,
    then any `extra`), fused Adam, the tokens since each latent last fired, the dead set (read every
    `dead_every` steps: `begin`), AuxK in its sparse or dense form, the hand-written sparse gradients
    (`topk_gradients`), and the update with its bookkeeping and revival (`finish`). A subclass's step
    says what the encoder reads and what the decoder's output is compared with."""

    def __init__(self, enc: torch.Tensor, b_enc: torch.Tensor, decoder: torch.Tensor, b_dec: torch.Tensor,
                 k: int, lr: float, dead_tokens: int, *, extra: tuple = (), dead_every: int = 1,
                 compute_dtype: torch.dtype | None = None):
        width = decoder.shape[0]
        device = decoder.device
        self.k, self.dead_tokens, self.dead_every = k, dead_tokens, max(1, int(dead_every))
        planned_dtype, self.dense_aux_limit = device_plan(device)
        self.compute_dtype = compute_dtype or planned_dtype
        self.W_dec = decoder.clone()  # (width, d_out), unit rows
        self.enc = enc.to(device, decoder.dtype).clone()  # (width, d_in): W_enc transposed
        self.b_enc = b_enc.to(device, decoder.dtype).clone()  # (width,)
        self.b_dec = b_dec.to(device, decoder.dtype).clone()  # (d_out,)
        self.params = [self.enc, self.b_enc, self.W_dec, self.b_dec, *extra]
        self.adam = _adam(self.params, lr)
        self.since_fired = torch.zeros(width, dtype=torch.int64, device=device)  # (width,)
        self.dead = torch.zeros(0, dtype=torch.int64, device=device)  # (n_dead,) what AuxK uses
        self.steps = 0
        self.revive = False  # raise dead latents' b_enc when the dead set is read (the fits turn it on)

    @property
    def width(self) -> int:
        return self.W_dec.shape[0]

    def set_lr(self, lr: float) -> None:
        for group in self.adam.param_groups:
            group["lr"] = lr

    def dead_latents(self) -> torch.Tensor:
        return (self.since_fired > self.dead_tokens).nonzero()[:, 0]  # (n_dead,)

    def refresh_dead(self) -> None:
        """Read the dead set now (a host sync on a GPU); `begin` does it every `dead_every` steps."""
        self.dead = self.dead_latents()

    def begin(self) -> bool:
        """Start a step: the dead set read if it is due (returns whether it was)."""
        refreshed = self.steps % self.dead_every == 0
        if refreshed:
            self.refresh_dead()
        self.steps += 1
        return refreshed

    def topk_gradients(self, enc_in: torch.Tensor, residual, total_var: torch.Tensor):
        """One batch's forward and the gradients of FVU + AuxK. enc_in (B, d_in): what the encoder reads;
        residual(out) (B, d_out): the reconstruction minus the target given the features' sum `out`;
        total_var: the target's total variance. Returns (pre (B, width) in the compute dtype, the top-k
        values and indices (B, k), their ReLU'd activations, err = residual(features' sum) (B, d_out),
        d loss / d reconstruction (B, d_out), then the gradients of enc, b_enc and W_dec, the last
        tangent to its unit rows)."""
        dt = self.compute_dtype
        pre = torch.addmm(self.b_enc.to(dt), enc_in.to(dt), self.enc.to(dt).t())  # (B, width) in dt
        vals, idx = pre.topk(self.k, dim=1, sorted=False)  # (B, k)
        part, g_vals, act = _decode_with_grad(self.W_dec, vals.float(), idx, residual, 2 / total_var)
        err = residual(part)  # (B, d_out)
        g_out = err * (2 / total_var)  # (B, d_out): d loss / d reconstruction
        dead, k_aux_full = self.dead, err.shape[1] // 2
        k_aux = min(k_aux_full, dead.numel())
        coeff = 2 * AUX_ALPHA * min(dead.numel() / k_aux_full, 1.0) / total_var
        table, lat, g_lat, w_lat = g_out, idx, g_vals, act
        dense_aux = dead.numel() <= self.dense_aux_limit * k_aux
        if k_aux and not dense_aux:  # many dead: their top k_aux join the sparse gradient
            g_ehat, a_idx, a_g, a_act = self._aux_sparse(pre, dead, k_aux, err, coeff)
            table = torch.cat([g_out, g_ehat])  # (2B, d_out)
            lat, g_lat, w_lat = torch.cat([idx, a_idx], 1), torch.cat([g_vals, a_g], 1), torch.cat([act, a_act], 1)
        grads = _sparse_grads(lat, g_lat, w_lat, enc_in, table, self.k, self.width)  # enc, dec, b_enc
        if k_aux and dense_aux:
            self._aux_dense(pre, dead, k_aux, err, coeff, enc_in, grads)
        grad_enc, grad_dec, grad_b_enc = grads
        grad_dec -= (grad_dec * self.W_dec).sum(1, keepdim=True) * self.W_dec  # keep rows on the sphere
        return pre, vals, idx, act, err, g_out, grad_enc, grad_b_enc, grad_dec

    def finish(self, grads, pre: torch.Tensor, vals: torch.Tensor, idx: torch.Tensor, act: torch.Tensor,
               refreshed: bool) -> None:
        """The Adam step on `grads` (in self.params' order), decoder rows back to unit norm, the firing
        counted, and (when the dead set was read this step and `revive` is on) the dead revived."""
        for p, g in zip(self.params, grads):
            p.grad = g
        self.adam.step()
        self.W_dec /= self.W_dec.norm(dim=1, keepdim=True).clamp_min(1e-12)
        self._count_firing(idx, act, idx.shape[0])
        if refreshed and self.revive and self.dead.numel():
            self._revive(pre, vals, self.dead)

    def _revive(self, pre: torch.Tensor, vals: torch.Tensor, dead: torch.Tensor) -> None:
        """Raise each dead latent's b_enc just enough that, on this batch, it would have made the top
        k of its share k/width of the rows (the margin to each row's k-th value, at that quantile).
        Why: a latent that stopped firing gets no gradient from the loss, and AuxK alone brought few
        back in a short run (issue 39: 28 % of latents silent on 8,192 held-out tokens). Its
        direction is kept; if it has no use it stops firing again. Off (the fits) while the learning
        rate decays, so every latent alive at the end earned it."""
        B = pre.shape[0]
        margin = vals.float().min(1, keepdim=True).values - pre.index_select(1, dead).float()  # (B, n_dead)
        rank = max(1, round(B * self.k / self.width))
        self.b_enc.index_add_(0, dead, margin.kthvalue(rank, dim=0).values)

    def _aux_sparse(self, pre, dead, k_aux, err, coeff):
        """AuxK with many dead latents: each row's top k_aux of them, as sparse rows. Returns
        (d aux / d e_hat (B, d_out), their indices, d aux / d pre, activations), each (B, k_aux) but the first."""
        vals, pos = pre.index_select(1, dead).topk(k_aux, dim=1, sorted=False)  # (B, k_aux)
        idx = dead[pos]
        e_hat, g_vals, act = _decode_with_grad(self.W_dec, vals.float(), idx, lambda out: out + err, coeff)
        return (e_hat + err) * coeff, idx, g_vals, act

    def _aux_dense(self, pre, dead, k_aux, err, coeff, enc_in, grads) -> None:
        """AuxK as products over the dead columns only (B, n_dead), added into grads. On a CPU
        cheaper than B * k_aux gathered rows while n_dead <= DENSE_AUX * k_aux; on a GPU always."""
        grad_enc, grad_dec, grad_b_enc = grads
        dt = self.compute_dtype
        dead_pre = pre.index_select(1, dead)  # (B, n_dead)
        acts = dead_pre.float().clamp_min(0)  # (B, n_dead)
        if dead.numel() > k_aux:  # keep each row's top k_aux
            top = dead_pre.topk(k_aux, dim=1, sorted=False).indices  # (B, k_aux): as the sparse form picks
            keep = torch.zeros_like(acts, dtype=torch.bool).scatter_(1, top, True)
            acts *= keep
        rows = self.W_dec.index_select(0, dead)  # (n_dead, d_out)
        g_ehat = (_mm(acts, rows, dt) + err) * coeff  # (B, d_out)
        g_pre = _mm(g_ehat, rows.t(), dt) * (acts > 0)  # (B, n_dead)
        grad_dec.index_add_(0, dead, _mm(acts.t(), g_ehat, dt))  # (n_dead, d_out)
        grad_enc.index_add_(0, dead, _mm(g_pre.t(), enc_in, dt))  # (n_dead, d_in)
        grad_b_enc.index_add_(0, dead, g_pre.sum(0))

    def _count_firing(self, idx: torch.Tensor, act: torch.Tensor, tokens: int) -> None:
        """since_fired += tokens, then 0 for every latent with an activation > 0 in idx (B, k)."""
        width = self.width
        slots = torch.where(act > 0, idx, width).reshape(-1)  # a ReLU-cut slot lands on the spare entry
        fired = torch.zeros(width + 1, dtype=torch.bool, device=idx.device).index_fill_(0, slots, True)
        self.since_fired.add_(tokens).masked_fill_(fired[:width], 0)


class TopKTrainer(TopKCore):
    """A TopK SAE's trainer; `step(x)` trains on one batch of (already scaled) rows and returns its
    fraction of variance unexplained as a 0-dim tensor (read it with float() when it is wanted: on a
    GPU that waits for the step). The encoder starts as the decoder's rows, b_enc at 0.
    `dead_every`: steps between readings of the dead set; `compute_dtype`: the products' dtype
    (default `device_plan`'s)."""

    def __init__(self, decoder: torch.Tensor, b_dec: torch.Tensor, k: int, lr: float, dead_tokens: int, *,
                 dead_every: int = 1, compute_dtype: torch.dtype | None = None):
        b_enc = torch.zeros(decoder.shape[0], dtype=decoder.dtype, device=decoder.device)  # (width,)
        super().__init__(decoder, b_enc, decoder, b_dec, k, lr, dead_tokens, dead_every=dead_every,
                         compute_dtype=compute_dtype)

    @torch.no_grad()
    def step(self, x: torch.Tensor) -> torch.Tensor:
        refreshed = self.begin()
        sae_in = x - self.b_dec  # (B, d)
        total_var = (x - x.mean(0)).pow(2).sum().clamp_min(1e-12)
        pre, vals, idx, act, err, g_out, grad_enc, grad_b_enc, grad_dec = self.topk_gradients(
            sae_in, lambda out: out + self.b_dec - x, total_var)
        grad_b_dec = g_out.sum(0) - grad_b_enc @ self.enc  # (d,): decoder bias + the encoder's input shift
        self.finish((grad_enc, grad_b_enc, grad_dec, grad_b_dec), pre, vals, idx, act, refreshed)
        return err.pow(2).sum() / total_var


def _mm(a: torch.Tensor, b: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """a @ b with its inputs in `dtype` (accumulated in float32 by the GEMM), as float32."""
    return (a.to(dtype) @ b.to(dtype)).float()


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
    table row; b_enc (width,): sum of g. Each bag is summed in a fixed order (a stable sort, then
    embedding bags' forward, which adds a bag's rows in turn: no atomics), so a seed gives the same
    bits on every run; the bags' starts come from a search of the sorted ids, not a bincount (whose
    output size a GPU would have to send back to the host)."""
    B, kk = lat.shape
    flat = lat.reshape(-1)  # (B*kk,)
    sorted_lat, order = flat.sort(stable=True)  # (M,) each
    offsets = torch.searchsorted(sorted_lat, torch.arange(width, device=flat.device))  # (width,) bag starts
    token = order // kk  # (M,)
    dec_rows = token + B * ((order % kk) >= k_main)  # (M,)
    g_sorted = g_lat.reshape(-1)[order]  # (M,)
    grad_enc = F.embedding_bag(token, sae_in, offsets, per_sample_weights=g_sorted, mode="sum")  # (width, d)
    grad_dec = F.embedding_bag(dec_rows, table, offsets, per_sample_weights=w_lat.reshape(-1)[order],
                               mode="sum")  # (width, d)
    ones = torch.ones(1, 1, dtype=g_lat.dtype, device=flat.device)
    grad_b_enc = F.embedding_bag(torch.zeros_like(order), ones, offsets, per_sample_weights=g_sorted,
                                 mode="sum")[:, 0]  # (width,)
    return grad_enc, grad_dec, grad_b_enc


def _adam(params, lr):
    """torch's fused Adam where this torch has it for these tensors (CPU: 5 ms a step at GPT-2
    small's width, against 20 for the per-tensor loop; CUDA: one kernel for every tensor), else
    the default."""
    try:
        return torch.optim.Adam(params, lr=lr, fused=True)
    except (RuntimeError, TypeError):
        return torch.optim.Adam(params, lr=lr)
