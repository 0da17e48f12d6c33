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

Why a step is `launch` + `collect`: on CUDA the host queues work and the GPU runs it later, and
every number read back (a loss, a gradient norm, a finiteness check) makes the host wait until the
GPU has caught up, so the next step's work is not queued while this one runs. `launch` runs a
step and keeps its figures (loss, gradient norms) on the device; `collect` reads every step
launched since the last read in one transfer. A non-finite step changes nothing there either:
its finiteness is computed on the device and handed to the fused AdamW kernel, which then skips
the update (as it does for GradScaler), and every later step until the read skips too, so
`collect` can report the first bad step with the weights as they were before it, as `step` does.
`step` is launch + collect; the run's loop collects at its log steps on CUDA, every step on a CPU
(where reading costs nothing). The model and its loss run under torch.compile where the config
asks (compiled.py: train.py's default on CUDA; eager, logged once, where compiling fails).
"""
from __future__ import annotations

import contextlib
import dataclasses
import math
import time
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from gptcore.training import speed
from gptcore.training.compiled import LossOf, compile_can_fail, random_state, restore_random_state
from gptcore.training.config import TrainConfig, TrainConfigError
from gptcore.training.distributed import place
from gptcore.training.errors import NonFiniteLoss, TrainingError  # noqa: F401  (TrainingError: re-exported)
from gptcore.training.step_record import LaunchedStep, StepRecord, step_times
from gptcore.training.optimizer import (choose_fused, grad_norm_groups, make_optimizer,  # noqa: F401  (re-exported)
                                        optimizer_groups)

BatchFn = Callable[[str, int], "tuple[torch.Tensor, torch.Tensor]"]
_AUTOCAST = {"bfloat16": torch.bfloat16, "float16": torch.float16}


def lm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """nanoGPT's loss: mean cross-entropy over every position; target -1 is ignored."""
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1), ignore_index=-1)  # ()


class Trainer:
    """Trains `model` (a gptcore GPT, or any module mapping ids (B, T) to logits (B, T, V)) with
    nanoGPT's optimisation. See the module docstring for what one `step` does.

    Under an initialised torch.distributed process group the model is wrapped in DDP and each
    process runs gradient_accumulation_steps // world_size micro-steps (TrainConfigError if that
    does not divide). Weights then equal one process's up to float summation order — except a
    key bias (bias=True): its gradient is zero in exact arithmetic, and Adam scales the differing
    float noise of 1 vs N processes up to lr-sized steps (harmless: a key bias cannot change
    attention). `fused` chooses AdamW's implementation (None: `choose_fused`, timed on a CPU).
    `compiled` says whether steps run under torch.compile now (config.compile, and no failure).
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
        self.fused_choice = None  # adamw_choice.FusedChoice where a CPU timed it
        groups = optimizer_groups(self.model, train_config.weight_decay)
        if fused is None:
            fused, self.fused_choice = self._choose_fused(groups)
        self.optimizer = make_optimizer(groups, train_config, fused)
        self.iter_num = 0
        self.best_val_loss = 1e9  # train.py's starting value
        self._last: StepRecord | None = None  # the newest step read back: last_loss, last_lr, ...
        self._params = [p for p in self.model.parameters() if p.requires_grad]
        self._group_names, index = grad_norm_groups(self.model)
        self._group_index = torch.tensor(index, device=self.device)
        # "float32", "bfloat16" or "float16"; "auto" on a CPU is timed (before DDP hooks the parameters)
        self.dtype, self.dtype_choice = self._choose_dtype()
        self._loss = LossOf(self.model, _batch_loss)
        if train_config.compiles_on(self.device.type):
            self._loss.use_compile()
        self._compile_proven = False  # a compiled step has run forward and backward
        self._ddp = None
        if self.world_size > 1:
            from torch.nn.parallel import DistributedDataParallel

            ids = [self.device.index or 0] if self.device.type == "cuda" else None
            self._ddp = DistributedDataParallel(self._loss, device_ids=ids)
        dtype = _AUTOCAST.get(self.dtype)
        self._autocast = (lambda: torch.autocast(self.device.type, dtype=dtype)) if dtype else contextlib.nullcontext
        self._scaler = torch.amp.GradScaler(self.device.type, enabled=self.dtype == "float16")
        self._healthy = torch.ones((), dtype=torch.bool, device=self.device)  # no non-finite step since the last read
        self._healthy_host = True  # the same, where the host checks
        self._launched: list[LaunchedStep] = []

    def _choose_fused(self, groups: list[dict]):
        """choose_fused on this device; under torch.distributed rank 0's answer is every process's,
        so their weights stay equal to the last bit."""
        fused, choice = choose_fused(groups, self.device.type)
        if self.world_size > 1 and self.device.type == "cpu":
            import torch.distributed as dist

            flag = torch.tensor([int(fused)], dtype=torch.int32)
            dist.broadcast(flag, src=0)
            fused = bool(flag.item())
        return fused, choice

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

    @property
    def _guard_on_device(self) -> bool:
        """Where the fused kernel takes a skip flag, a non-finite step is kept out of the weights on
        the device (no wait for the GPU); elsewhere the host reads the loss before updating. Asked of
        the param groups, not the defaults: a resumed optimizer state brings its own "fused"."""
        return all(g.get("fused") for g in self.optimizer.param_groups) and not self._scaler.is_enabled()

    @property
    def compiled(self) -> bool:
        return self._loss.compiled

    @property
    def compile_failure(self) -> str | None:
        """Why torch.compile was given up (one sentence), or None."""
        return self._loss.compile_failure

    # -- the newest step read back (before any: nan, the first step's rate, nan, {}) -----------------
    @property
    def last_loss(self) -> float:
        return self._last.loss if self._last is not None else math.nan

    @property
    def last_lr(self) -> float:
        return self._last.lr if self._last is not None else self.config.lr_at(0)

    @property
    def last_grad_norm(self) -> float:  # the global norm, before clipping
        return self._last.grad_norm if self._last is not None else math.nan

    @property
    def last_grad_norms(self) -> dict[str, float]:  # per top-level part and per block
        return self._last.grad_norms if self._last is not None else {}

    @property
    def reads_every_step(self) -> bool:
        """True where reading a step's figures right away costs nothing (a CPU, or an optimizer that
        makes the host check each step anyway); False on CUDA with the device-side guard, where the
        run's loop reads them every log_interval steps instead."""
        return self.device.type == "cpu" or not self._guard_on_device

    # -- one optimizer step -------------------------------------------------------------------
    def step(self, x: torch.Tensor, y: torch.Tensor) -> float:
        """One optimizer step on the global batch (gradient_accumulation_steps × batch_size, T)
        -> the mean loss over all its micro-batches (all processes). Raises NonFiniteLoss, with
        the weights untouched, if that loss or the gradient norm is NaN/inf."""
        self.launch(x, y)
        records, error = self.collect()
        if error is not None:
            raise error
        return records[-1].loss

    def launch(self, x: torch.Tensor, y: torch.Tensor) -> None:
        """`step` without reading anything back: its figures wait on the device for `collect`.
        iter_num counts the step at once; a non-finite one is found (and iter_num set back to it)
        by `collect`, and neither it nor any step launched after it changes the weights."""
        cfg = self.config
        micro = self._my_micro_batches(x, y)
        lr = cfg.lr_at(self.iter_num)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.model.train()
        started = time.perf_counter()
        events = None
        if self.device.type == "cuda":
            events = (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
            events[0].record()
        loss_sum = self._forward_backward(micro)
        if self.world_size > 1:
            import torch.distributed as dist

            dist.all_reduce(loss_sum)  # sum over processes of (their mean) -> world_size × global mean
            loss_sum /= self.world_size
        figures = self._update_guarded(loss_sum) if self._guard_on_device else self._update_checked(loss_sum)
        self.optimizer.zero_grad(set_to_none=True)
        if events is not None:
            events[1].record()
        self._launched.append(LaunchedStep(self.iter_num, lr, figures, time.perf_counter() - started, time.time(), events))
        self.iter_num += 1

    def _forward_backward(self, micro: list) -> torch.Tensor:
        """The micro-steps' forward and backward -> their loss sum (), on the device. A compiled
        step that fails (compiled.py) is redone eagerly, from the same random state while no
        compiled step has yet succeeded, and the run stays eager."""
        if not self._loss.compiled:
            return self._micro_steps(micro)
        saved = None if self._compile_proven else random_state(self.device)
        try:
            loss_sum = self._micro_steps(micro)
        except Exception as exc:
            if not compile_can_fail(exc):
                raise
            self.optimizer.zero_grad(set_to_none=True)
            self._loss.give_up(exc)
            if saved is not None:
                restore_random_state(self.device, saved)
            return self._micro_steps(micro)
        self._compile_proven = True
        return loss_sum

    def _micro_steps(self, micro: list) -> torch.Tensor:
        forward = self._ddp if self._ddp is not None else self._loss
        loss_sum = torch.zeros((), device=self.device)
        for i, (xb, yb) in enumerate(micro):
            last = i == len(micro) - 1
            sync = contextlib.nullcontext() if (self._ddp is None or last) else self._ddp.no_sync()
            with sync:
                with self._autocast():
                    loss = forward(xb, yb) / self.local_accum  # ()
                self._scaler.scale(loss).backward()
            loss_sum += loss.detach().float()
        return loss_sum

    def _update_guarded(self, loss_sum: torch.Tensor) -> torch.Tensor:
        """Clip and update with the fused kernel told, on the device, to skip a non-finite step
        (and every one after it until `collect`). Nothing is read back."""
        figures = self._grad_figures(loss_sum)  # (2 + parts,)
        self._healthy &= torch.isfinite(figures[:2]).all()
        if self.config.grad_clip != 0.0:
            torch.nn.utils.clip_grads_with_norm_(self._params, self.config.grad_clip, figures[1])
        self.optimizer.found_inf = (~self._healthy).float()  # read by fused AdamW's step, as GradScaler sets it
        self.optimizer.step()
        return figures

    def _update_checked(self, loss_sum: torch.Tensor) -> torch.Tensor:
        """The same where the optimizer cannot skip on the device (torch's plain AdamW, or float16's
        GradScaler, which owns the skip flag): the host reads the loss and the norm before updating."""
        if not self._healthy_host or not math.isfinite(float(loss_sum)):
            self._healthy_host = False
            return torch.cat([loss_sum.reshape(1), torch.full((1 + len(self._group_names),), math.nan,
                                                              device=self.device)])
        self._scaler.unscale_(self.optimizer)
        figures = self._grad_figures(loss_sum)
        if not math.isfinite(float(figures[1])) and not self._scaler.is_enabled():  # fp16's scaler skips such steps itself
            self._healthy_host = False
            return figures
        if self.config.grad_clip != 0.0:
            torch.nn.utils.clip_grads_with_norm_(self._params, self.config.grad_clip, figures[1])
        self._scaler.step(self.optimizer)
        self._scaler.update()
        return figures

    def _grad_figures(self, loss_sum: torch.Tensor) -> torch.Tensor:
        """(loss, global gradient norm, one norm per part ("blocks.3", "embed", ...)), before
        clipping, all on the device: the global one is what clipping compares with grad_clip."""
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in self._params]
        norms = torch.stack(torch._foreach_norm(grads)).float()  # (P,)
        total = torch.linalg.vector_norm(norms)  # () = clip_grad_norm_'s total
        per_group = torch.zeros(len(self._group_names), device=norms.device).index_add_(
            0, self._group_index, norms * norms).sqrt()  # (parts,)
        return torch.cat([loss_sum.reshape(1), total[None], per_group])  # (2 + parts,)

    def collect(self) -> tuple[list[StepRecord], NonFiniteLoss | None]:
        """Read every step launched since the last read, in one transfer -> (their records in order,
        None), or, where one was non-finite, (the records before it, its NonFiniteLoss) with
        iter_num set back to it and the weights as they were before it."""
        launched, self._launched = self._launched, []
        if not launched:
            return [], None
        rows = torch.stack([s.figures for s in launched]).tolist()  # the one wait for the device
        read_at = time.time()
        seconds, finished = step_times(launched, read_at)
        records: list[StepRecord] = []
        error = None
        for s, row, dt, end in zip(launched, rows, seconds, finished):
            loss, total = row[0], row[1]
            if not math.isfinite(loss):
                error = NonFiniteLoss(s.step, loss)
            elif not math.isfinite(total) and not self._scaler.is_enabled():
                error = NonFiniteLoss(s.step, total, "gradient norm")
            if error is not None:
                break
            records.append(StepRecord(s.step, loss, s.lr, total, dict(zip(self._group_names, row[2:])), dt, end))
        if records:
            self._last = records[-1]
        if error is not None:  # the steps from it on changed nothing: the run stands before it
            self.iter_num = error.step
            self._healthy.fill_(True)
            self._healthy_host = True
        return records, error

    def _my_micro_batches(self, x: torch.Tensor, y: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
        cfg = self.config
        rows = cfg.gradient_accumulation_steps * cfg.batch_size
        if x.dim() != 2 or x.shape != y.shape or x.shape[0] != rows:
            raise TrainConfigError(
                "batch_size", f"step() takes the global batch, x and y of shape (gradient_accumulation_steps × "
                              f"batch_size = {rows}, T); got x {tuple(x.shape)}, y {tuple(y.shape)}")
        if self.device.type == "cuda" and x.device.type == "cpu":  # pinned: the copy overlaps the GPU's work
            x, y = x.pin_memory(), y.pin_memory()
        x, y = x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)
        first = self.rank * self.local_accum  # this process's micro-steps: first .. first + local_accum - 1
        return [(x[(first + i) * cfg.batch_size:(first + i + 1) * cfg.batch_size],
                 y[(first + i) * cfg.batch_size:(first + i + 1) * cfg.batch_size]) for i in range(self.local_accum)]

    # -- evaluation ---------------------------------------------------------------------------
    @torch.no_grad()
    def estimate_loss(self, batches: BatchFn) -> dict[str, float]:
        """train.py's estimate_loss: the mean loss of eval_iters batches per split, in eval mode
        (no dropout). `batches(split, k)` gives batch k (0 .. eval_iters - 1) of "train" or "val",
        (batch_size, T) each. Also lowers best_val_loss when val improves. Runs the model itself,
        eagerly: an evaluation is rare, and a compiled one would cost a second compile."""
        self.model.eval()
        out = {}
        try:
            for split in ("train", "val"):
                losses = torch.zeros(self.config.eval_iters, device=self.device)
                for k in range(self.config.eval_iters):
                    x, y = batches(split, k)
                    with self._autocast():
                        losses[k] = lm_loss(self.model(x.to(self.device)), y.to(self.device)).float()
                out[split] = float(losses.mean())  # one read per split
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


def _batch_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """lm_loss, looked up when called (so the trainer follows a replaced lm_loss, as a test does)."""
    return lm_loss(logits, targets)


def _model_device(model: nn.Module) -> torch.device:
    first = next(model.parameters(), None)
    return first.device if first is not None else torch.device("cpu")
