"""A nanoGPT-architecture model written for the tests (from reading nanoGPT's model.py; no code
of it is imported): its module tree gives nanoGPT's state-dict key names exactly, so
`load_state_dict(strict=True)` on it is what nanoGPT's own GPT would accept, and its forward is
nanoGPT's maths: pre-LN blocks, exact erf GELU (nn.GELU()), eps 1e-5, tied head, dropout off.
Also the reference training loop of train.py (get_lr, configure_optimizers' groups, clip)."""
from __future__ import annotations

import math
from types import SimpleNamespace

import torch
import torch.nn.functional as F
from torch import nn


class _Norm(nn.Module):
    def __init__(self, width: int, bias: bool):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width))
        self.bias = nn.Parameter(torch.zeros(width)) if bias else None

    def forward(self, x):
        return F.layer_norm(x, (x.shape[-1],), self.weight, self.bias, 1e-5)


class _Attention(nn.Module):
    def __init__(self, width: int, heads: int, bias: bool):
        super().__init__()
        self.heads = heads
        self.c_attn = nn.Linear(width, 3 * width, bias=bias)
        self.c_proj = nn.Linear(width, width, bias=bias)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2)
                   for t in self.c_attn(x).split(C, dim=2))  # (B, nh, T, hs) each
        scores = q @ k.transpose(-2, -1) / math.sqrt(C // self.heads)  # (B, nh, T, T)
        future = torch.ones(T, T, dtype=torch.bool).triu(1)
        weights = scores.masked_fill(future, float("-inf")).softmax(-1)
        return self.c_proj((weights @ v).transpose(1, 2).reshape(B, T, C))  # (B, T, C)


class _Feedforward(nn.Module):
    def __init__(self, width: int, bias: bool):
        super().__init__()
        self.c_fc = nn.Linear(width, 4 * width, bias=bias)
        self.gelu = nn.GELU()  # exact: erf, not tanh
        self.c_proj = nn.Linear(4 * width, width, bias=bias)

    def forward(self, x):
        return self.c_proj(self.gelu(self.c_fc(x)))


class _Layer(nn.Module):
    def __init__(self, width: int, heads: int, bias: bool):
        super().__init__()
        self.ln_1 = _Norm(width, bias)
        self.attn = _Attention(width, heads, bias)
        self.ln_2 = _Norm(width, bias)
        self.mlp = _Feedforward(width, bias)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class NanoGPTShaped(nn.Module):
    """Takes nanoGPT's model_args (n_layer, n_head, n_embd, block_size, bias, vocab_size, dropout)."""

    def __init__(self, n_layer, n_head, n_embd, block_size, bias, vocab_size, dropout=0.0):
        super().__init__()
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(vocab_size, n_embd),
            wpe=nn.Embedding(block_size, n_embd),
            h=nn.ModuleList(_Layer(n_embd, n_head, bias) for _ in range(n_layer)),
            ln_f=_Norm(n_embd, bias),
        ))
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # tied, as nanoGPT ties them

    def forward(self, idx):
        t = self.transformer
        x = t.wte(idx) + t.wpe(torch.arange(idx.shape[1]))  # (B, T, C)
        for layer in t.h:
            x = layer(x)
        return self.lm_head(t.ln_f(x))  # (B, T, vocab)


# -- train.py's loop, as a reference ------------------------------------------------------------

def reference_lr(it, learning_rate, warmup_iters, lr_decay_iters, min_lr):
    """train.py's get_lr, restated: the reference copy (oracle) that TrainConfig.lr_at, the
    project's one lr schedule, is tested against; not used by any production code."""
    if it < warmup_iters:
        return learning_rate * (it + 1) / (warmup_iters + 1)
    if it > lr_decay_iters:
        return min_lr
    ratio = (it - warmup_iters) / (lr_decay_iters - warmup_iters)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (learning_rate - min_lr)


def reference_optimizer(model, weight_decay, learning_rate, betas):
    """configure_optimizers: every trainable named parameter; decay those with dim >= 2."""
    named = {n: p for n, p in model.named_parameters() if p.requires_grad}
    groups = [{"params": [p for p in named.values() if p.dim() >= 2], "weight_decay": weight_decay},
              {"params": [p for p in named.values() if p.dim() < 2], "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=learning_rate, betas=betas)


def reference_step(model, optimizer, it, micro_batches, tc):
    """One iteration of train.py's inner loop; returns the mean loss of its micro-batches."""
    lr = reference_lr(it, tc.learning_rate, tc.warmup_iters, tc.lr_decay_iters, tc.min_lr) if tc.decay_lr \
        else tc.learning_rate
    for group in optimizer.param_groups:
        group["lr"] = lr
    total = 0.0
    for x, y in micro_batches:
        logits = model(x)
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1), ignore_index=-1)
        loss = loss / len(micro_batches)
        loss.backward()
        total += loss.item()
    if tc.grad_clip != 0.0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), tc.grad_clip)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return total


# train.py's settings (its globals, which it records as checkpoint['config']), with its defaults on
# a machine without CUDA (dtype 'float16' there: bf16 is only its choice where CUDA supports it).
TRAIN_PY_DEFAULTS = dict(
    out_dir="out", eval_interval=2000, log_interval=1, eval_iters=200, eval_only=False, always_save_checkpoint=True,
    init_from="scratch", wandb_log=False, wandb_project="owt", wandb_run_name="gpt2", dataset="openwebtext",
    gradient_accumulation_steps=5 * 8, batch_size=12, block_size=1024, n_layer=12, n_head=12, n_embd=768,
    dropout=0.0, bias=False, learning_rate=6e-4, max_iters=600000, weight_decay=1e-1, beta1=0.9, beta2=0.95,
    grad_clip=1.0, decay_lr=True, warmup_iters=2000, lr_decay_iters=600000, min_lr=6e-5, backend="nccl",
    device="cuda", dtype="float16", compile=True)


def train_py_settings(**overrides) -> SimpleNamespace:
    """train.py's globals after its configurator applied `overrides` (no check of ours involved)."""
    unknown = set(overrides) - set(TRAIN_PY_DEFAULTS)
    assert not unknown, f"not train.py settings: {unknown}"
    return SimpleNamespace(**{**TRAIN_PY_DEFAULTS, **overrides})


def train_py_run(out_dir, settings: SimpleNamespace, model_args: dict, batches, eval_batches, seed: int = 7):
    """train.py's loop on one process (no DDP, no compile, CPU), from scratch: its order of lr, eval,
    checkpoint (`iter_num > 0` and val improved or always_save_checkpoint), eval_only, the step, and
    `iter_num > max_iters` as its stop. `batches(it)` is iteration it's global batch
    (gradient_accumulation_steps × batch_size rows), `eval_batches(split, k)` estimate_loss's k-th.
    Writes out_dir/ckpt.pt as train.py does; returns the iter_num of the last one written (or None)."""
    from pathlib import Path

    torch.manual_seed(seed)
    model = NanoGPTShaped(**model_args)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(0, 0.02)
    optimizer = reference_optimizer(model, settings.weight_decay, settings.learning_rate,
                                    (settings.beta1, settings.beta2))
    iter_num, best_val_loss, saved = 0, 1e9, None
    while True:
        if iter_num % settings.eval_interval == 0:
            val = _estimate_val(model, settings.eval_iters, eval_batches)
            if val < best_val_loss or settings.always_save_checkpoint:
                best_val_loss = val
                if iter_num > 0:
                    Path(out_dir).mkdir(parents=True, exist_ok=True)
                    weights = {("_orig_mod." if settings.compile else "") + k: v for k, v in model.state_dict().items()}
                    torch.save({"model": weights, "optimizer": optimizer.state_dict(),
                                "model_args": model_args, "iter_num": iter_num, "best_val_loss": best_val_loss,
                                "config": {**vars(settings), "out_dir": str(out_dir)}}, Path(out_dir) / "ckpt.pt")
                    saved = iter_num
        if iter_num == 0 and settings.eval_only:
            break
        x, y = batches(iter_num)
        b = settings.batch_size
        micro = [(x[i * b:(i + 1) * b], y[i * b:(i + 1) * b]) for i in range(settings.gradient_accumulation_steps)]
        reference_step(model, optimizer, iter_num, micro, settings)
        iter_num += 1
        if iter_num > settings.max_iters:
            break
    return saved


@torch.no_grad()
def _estimate_val(model, eval_iters, eval_batches) -> torch.Tensor:
    """estimate_loss()['val']: the mean of eval_iters batch losses (NaN for none, as torch's mean)."""
    model.eval()
    losses = torch.zeros(eval_iters)
    for k in range(eval_iters):
        x, y = eval_batches("val", k)
        logits = model(x)
        losses[k] = F.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1), ignore_index=-1)
    model.train()
    return losses.mean()  # a 0-d tensor, as train.py keeps best_val_loss
