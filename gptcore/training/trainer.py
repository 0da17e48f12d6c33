"""`Trainer`: one optimizer step of nanoGPT's train.py at a time, on any GPT of gptcore.

What a step does is train.py's inner loop, in its order: set the learning rate of iteration
`iter_num` (warmup, cosine, floor: TrainConfig.lr_at), run gradient_accumulation_steps
micro-batches each scaled by 1/steps (under torch.distributed this process's share of them,
gradients synchronised only on its last micro-step, as DDP's no_sync allows), clip the global
gradient norm, AdamW step (weight decay on tensors of 2+ dimensions only; a tied matrix is one
parameter, decayed once), zero the gradients, iter_num += 1.

The caller owns the loop (when to evaluate, log, save) and the data: `step(x, y)` takes the
GLOBAL batch of the iteration, (gradient_accumulation_steps × batch_size, T), and each process
takes its rows. So the batches, and therefore the run, do not depend on the number of processes.
What the loop needs to watch the run is kept after each step: `last_loss`, `last_lr`,
`last_grad_norm` (before clipping) and `last_grad_norms` (per top-level part and per block).
"""
from __future__ import annotations

import contextlib
import dataclasses
import math
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from gptcore.training import speed
from gptcore.training.config import TrainConfig, TrainConfigError
from gptcore.training.distributed import place
from gptcore.training.errors import NonFiniteLoss, TrainingError  # noqa: F401  (TrainingError: re-exported)

BatchFn = Callable[[str, int], "tuple[torch.Tensor, torch.Tensor]"]
_AUTOCAST = {"bfloat16": torch.bfloat16, "float16": torch.float16}


def lm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """nanoGPT's loss: mean cross-entropy over every position; target -1 is ignored."""
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1), ignore_index=-1)  # ()


def optimizer_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """nanoGPT's configure_optimizers split: 2+-dimensional tensors (matrices, embeddings) decay,
    the rest (biases, norm gains) do not. named_parameters() yields a shared tensor once, so a
    tied embedding/head is decayed once, under its first name."""
    params = [p for _, p in model.named_parameters() if p.requires_grad]
    return [{"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
            {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]


def make_optimizer(model: nn.Module, cfg: TrainConfig, device_type: str, fused: bool | None = None) -> torch.optim.AdamW:
    """AdamW over `optimizer_groups`. `fused=None` takes torch's fused kernel wherever it has one
    (CUDA, as nanoGPT does, and the CPU): the same update in one pass over the parameters instead
    of a dozen (CPU recipe, 0.8M parameters, 1 thread: 15.9 -> 4.0 ms a step, with the for-loop
    kernel nanoGPT gets on a CPU). `fused=False` is torch's default kernel, train.py's on a CPU,
    bitwise; the two differ in the last float bits only."""
    if fused is None:
        fused = device_type in _FUSED_ADAMW_DEVICES
    extra = {"fused": True} if fused else {}
    return torch.optim.AdamW(optimizer_groups(model, cfg.weight_decay), lr=cfg.learning_rate,
                             betas=(cfg.beta1, cfg.beta2), **extra)


_FUSED_ADAMW_DEVICES = ("cuda", "cpu")


def grad_norm_groups(model: nn.Module) -> tuple[list[str], list[int]]:
    """(group names, group index of each trainable parameter): "embed", "pos_embed", "blocks.0",
    ..., "ln_final", "unembed" (absent when tied: it is the embedding)."""
    names: list[str] = []
    index: list[int] = []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        parts = name.split(".")
        group = ".".join(parts[:2]) if parts[0] == "blocks" else parts[0]
        if group not in names:
            names.append(group)
        index.append(names.index(group))
    return names, index


class Trainer:
    """Trains `model` (a gptcore GPT, or any module mapping ids (B, T) to logits (B, T, V)) with
    nanoGPT's optimisation. See the module docstring for what one `step` does.

    Under an initialised torch.distributed process group the model is wrapped in DDP and each
    process runs gradient_accumulation_steps // world_size micro-steps (TrainConfigError if that
    does not divide). Weights then equal one process's up to float summation order — except a
    key bias (bias=True): its gradient is zero in exact arithmetic, and Adam scales the differing
    float noise of 1 vs N processes up to lr-sized steps (harmless: a key bias cannot change
    attention). `fused` chooses AdamW's implementation (None: torch's fused kernel where there is one).
    Under DDP call `save` on rank 0 only.
    """

    def __init__(self, model: nn.Module, train_config: TrainConfig, *, device=None, fused: bool | None = None):
        self.config = train_config
        self.device = torch.device(device or train_config.device or _model_device(model))
        self.model = model.to(self.device)
        if hasattr(self.model, "tie_weights"):
            self.model.tie_weights()  # .to() keeps sharing, but a model moved by hand may not
        self.model.train()
        where = place(launched=False)  # alone unless a process group is up (torchrun's or mp.spawn's)
        self.world_size, self.rank = where.world_size, where.rank
        self.local_accum = train_config.local_accumulation(self.world_size)
        self.optimizer = make_optimizer(self.model, train_config, self.device.type, fused)
        self.iter_num = 0
        self.best_val_loss = 1e9  # train.py's starting value
        self.last_loss = math.nan
        self.last_lr = train_config.lr_at(0)
        self.last_grad_norm = math.nan
        self.last_grad_norms: dict[str, float] = {}
        self._params = [p for p in self.model.parameters() if p.requires_grad]
        self._group_names, index = grad_norm_groups(self.model)
        self._group_index = torch.tensor(index, device=self.device)
        # "float32", "bfloat16" or "float16"; "auto" on a CPU is timed (before DDP hooks the parameters)
        self.dtype, self.dtype_choice = self._choose_dtype()
        self._ddp = None
        if self.world_size > 1:
            from torch.nn.parallel import DistributedDataParallel

            ids = [self.device.index or 0] if self.device.type == "cuda" else None
            self._ddp = DistributedDataParallel(self.model, device_ids=ids)
        dtype = _AUTOCAST.get(self.dtype)
        self._autocast = (lambda: torch.autocast(self.device.type, dtype=dtype)) if dtype else contextlib.nullcontext
        self._scaler = torch.amp.GradScaler(self.device.type, enabled=self.dtype == "float16")

    def _choose_dtype(self):
        """(dtype, autocast_choice.AutocastChoice or None): "auto" on a CPU is decided by timing this
        model both ways (cached per machine and shape); under torch.distributed rank 0's answer is
        every process's, so they all compute alike. Anything else: resolve_dtype."""
        if self.config.dtype != "auto" or self.device.type != "cpu":
            return resolve_dtype(self.config.dtype, self.device), None
        from gptcore.training.autocast_choice import choose_cpu_autocast

        choice = choose_cpu_autocast(self.model, self.config.batch_size)
        if self.world_size > 1:
            import torch.distributed as dist

            flag = torch.tensor([choice.dtype == "bfloat16"], dtype=torch.int32)
            dist.broadcast(flag, src=0)
            if bool(flag.item()) != (choice.dtype == "bfloat16"):
                choice = dataclasses.replace(choice, dtype="bfloat16" if flag.item() else "float32",
                                             source=f"{choice.source}; rank 0's choice")
        return choice.dtype, choice

    # -- one optimizer step -------------------------------------------------------------------
    def step(self, x: torch.Tensor, y: torch.Tensor) -> float:
        """One optimizer step on the global batch (gradient_accumulation_steps × batch_size, T)
        -> the mean loss over all its micro-batches (all processes). Raises NonFiniteLoss, with
        the weights untouched, if that loss or the gradient norm is NaN/inf."""
        cfg = self.config
        micro = self._my_micro_batches(x, y)
        lr = cfg.lr_at(self.iter_num)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.model.train()
        forward = self._ddp if self._ddp is not None else self.model
        loss_sum = torch.zeros((), device=self.device)
        for i, (xb, yb) in enumerate(micro):
            last = i == len(micro) - 1
            sync = contextlib.nullcontext() if (self._ddp is None or last) else self._ddp.no_sync()
            with sync:
                with self._autocast():
                    loss = lm_loss(forward(xb), yb) / self.local_accum  # ()
                self._scaler.scale(loss).backward()
            loss_sum += loss.detach().float()
        if self.world_size > 1:
            import torch.distributed as dist

            dist.all_reduce(loss_sum)  # sum over processes of (their mean) -> world_size × global mean
            loss_sum /= self.world_size
        mean_loss = float(loss_sum)
        if not math.isfinite(mean_loss):
            self.optimizer.zero_grad(set_to_none=True)
            raise NonFiniteLoss(self.iter_num, mean_loss)
        self._scaler.unscale_(self.optimizer)
        total = self._measure_grads()
        if not math.isfinite(total) and not self._scaler.is_enabled():  # fp16's scaler skips such steps itself
            self.optimizer.zero_grad(set_to_none=True)
            raise NonFiniteLoss(self.iter_num, total, "gradient norm")
        if cfg.grad_clip != 0.0:
            torch.nn.utils.clip_grads_with_norm_(self._params, cfg.grad_clip, self._total_norm)
        self._scaler.step(self.optimizer)
        self._scaler.update()
        self.optimizer.zero_grad(set_to_none=True)
        self.last_loss, self.last_lr = mean_loss, lr
        self.iter_num += 1
        return mean_loss

    def _my_micro_batches(self, x: torch.Tensor, y: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
        cfg = self.config
        rows = cfg.gradient_accumulation_steps * cfg.batch_size
        if x.dim() != 2 or x.shape != y.shape or x.shape[0] != rows:
            raise TrainConfigError(
                "batch_size", f"step() takes the global batch, x and y of shape (gradient_accumulation_steps × "
                              f"batch_size = {rows}, T); got x {tuple(x.shape)}, y {tuple(y.shape)}")
        x, y = x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)
        first = self.rank * self.local_accum  # this process's micro-steps: first .. first + local_accum - 1
        return [(x[(first + i) * cfg.batch_size:(first + i + 1) * cfg.batch_size],
                 y[(first + i) * cfg.batch_size:(first + i + 1) * cfg.batch_size]) for i in range(self.local_accum)]

    def _measure_grads(self) -> float:
        """Gradient norms before clipping: the global one (what clip compares with grad_clip) and
        one per part ("blocks.3", "embed", ...), in one pass over the gradients and one sync."""
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in self._params]
        norms = torch.stack(torch._foreach_norm(grads)).float()  # (P,)
        self._total_norm = torch.linalg.vector_norm(norms)  # () = clip_grad_norm_'s total
        per_group = torch.zeros(len(self._group_names), device=norms.device).index_add_(
            0, self._group_index, norms * norms).sqrt()  # (groups,)
        values = torch.cat([self._total_norm[None], per_group]).tolist()
        self.last_grad_norm = values[0]
        self.last_grad_norms = dict(zip(self._group_names, values[1:]))
        return values[0]

    # -- evaluation ---------------------------------------------------------------------------
    @torch.no_grad()
    def estimate_loss(self, batches: BatchFn) -> dict[str, float]:
        """train.py's estimate_loss: the mean loss of eval_iters batches per split, in eval mode
        (no dropout). `batches(split, k)` gives batch k (0 .. eval_iters - 1) of "train" or "val",
        (batch_size, T) each. Also lowers best_val_loss when val improves."""
        self.model.eval()
        out = {}
        try:
            for split in ("train", "val"):
                losses = torch.zeros(self.config.eval_iters)
                for k in range(self.config.eval_iters):
                    x, y = batches(split, k)
                    with self._autocast():
                        losses[k] = lm_loss(self.model(x.to(self.device)), y.to(self.device)).float()
                out[split] = float(losses.mean())
        finally:
            self.model.train()
        self.best_val_loss = min(self.best_val_loss, out["val"])
        return out

    # -- checkpoints --------------------------------------------------------------------------
    def save(self, path, *, corpus=None, **extra) -> None:
        """Write a checkpoint (checkpoint.py: nanoGPT's ckpt.pt when nanoGPT can express the model,
        our format otherwise), atomically: a kill mid-save leaves the previous file whole. With
        `corpus` (data.Corpus) its name and tokenizer go into the checkpoint's config and a char
        vocabulary into char_vocab.json beside it. `extra`: plain values (str, numbers, bool,
        None, lists and dicts of them) added to the checkpoint's config. Under DDP: rank 0 only."""
        from gptcore.training.checkpoint import save_checkpoint

        save_checkpoint(path, self, corpus=corpus, **extra)

    @classmethod
    def from_checkpoint(cls, path, train_config: TrainConfig, *, corpus=None, device=None,
                        fused: bool | None = None) -> "Trainer":
        """Resume: the model, the optimizer state, iter_num and best_val_loss of `path` (a ckpt.pt
        or its folder). With `corpus`, data that would not mean the same ids to this model (another
        vocabulary size, tokenizer or character set) is refused with a DataError first."""
        from gptcore.training.checkpoint import resume_trainer

        return resume_trainer(cls, path, train_config, corpus=corpus, device=device, fused=fused)


def resolve_dtype(dtype: str, device: torch.device) -> str:
    """TrainConfig.dtype with "auto" decided where no timing is needed: on CUDA train.py's choice
    (bfloat16 where supported, else float16), float32 on other devices. ("auto" on a CPU is timed:
    Trainer._choose_dtype, autocast_choice.py.)"""
    if dtype != "auto":
        return dtype
    if device.type == "cuda":
        return "bfloat16" if speed.native_bf16("cuda") else "float16"
    return "float32"


def _model_device(model: nn.Module) -> torch.device:
    first = next(model.parameters(), None)
    return first.device if first is not None else torch.device("cpu")
