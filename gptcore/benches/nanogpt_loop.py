"""The reference side of the training bench: nanoGPT's own model.py, loaded from a file, trained
by train.py's loop as written out here.

Why load a file instead of importing a package: nanoGPT is not a dependency (it is a repository,
not a package); the bench takes its model.py from `--nanogpt PATH` or, by default, from the
project's shared reference copy beside the checkout. The loop is train.py's, read from train.py
(no code of it imported): the lr of train.py's `get_lr` (linear warmup lr·(it+1)/(warmup+1), cosine
to min_lr, min_lr after lr_decay_iters) taken from `TrainConfig.lr_at`, the project's one schedule (a
test pins it to a restated get_lr, tests/gptcore/nanogpt_oracle.reference_lr), `configure_optimizers` (nanoGPT's own: decay on 2+-dim tensors, fused only
on CUDA), one forward/backward per micro-step scaled by 1/accumulation, `clip_grad_norm_`,
`optimizer.step()`, `zero_grad(set_to_none=True)`, and `loss.item()` for the log line. On a CPU
train.py runs float32 (its autocast context is a nullcontext there) and its GradScaler is
disabled; on CUDA it autocasts (bfloat16 where supported) and compiles the model.
"""
from __future__ import annotations

import contextlib
import importlib.util
import io
from pathlib import Path

import torch

MODEL_KEYS = ("block_size", "vocab_size", "n_layer", "n_head", "n_embd", "dropout", "bias")


def default_nanogpt_path() -> Path:
    """../shared/reference/nanogpt_model.py relative to the checkout holding gptcore/."""
    return Path(__file__).resolve().parents[2].parent / "shared" / "reference" / "nanogpt_model.py"


def load_nanogpt(path) -> object:
    """nanoGPT's model.py as a module (named nanogpt_model, not registered in sys.modules)."""
    spec = importlib.util.spec_from_file_location("nanogpt_model", str(path))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class NanoGPTLoop:
    """nanoGPT's GPT with its optimizer, stepped as train.py steps it. `model_args` are nanoGPT
    GPTConfig fields; `cfg` a TrainConfig (train.py's names). Seeded as train.py seeds: the
    model's initial weights come from torch.manual_seed(cfg.seed) just before it is built.

    On `device` as train.py sets it up there: the model moved to it, configure_optimizers told its
    type (fused AdamW on CUDA), `torch.compile(model)` when `compile` (train.py's default, True),
    autocast to `dtype` on CUDA (train.py's ctx; a nullcontext on a CPU, which runs float32), a
    GradScaler for float16 only, batches pinned and copied without waiting (its get_batch). The
    loss is read (`loss.item()`, a wait for the device) at iterations that are multiples of
    `log_interval`, as train.py's log line reads it; `step` returns it there, None elsewhere."""

    def __init__(self, module, model_args: dict, cfg, device="cpu", compile: bool = False, dtype: str = "float32",
                 log_interval: int = 1):
        self.cfg = cfg
        self.device = torch.device(device)
        self.log_interval = log_interval
        torch.manual_seed(cfg.seed)
        with contextlib.redirect_stdout(io.StringIO()):  # it prints its parameter count and groups
            self.model = module.GPT(module.GPTConfig(**{k: model_args[k] for k in MODEL_KEYS})).to(self.device)
            self.optimizer = self.model.configure_optimizers(cfg.weight_decay, cfg.learning_rate,
                                                             (cfg.beta1, cfg.beta2), self.device.type)
        self.model.train()
        self.raw_model = self.model
        if compile:
            self.model = torch.compile(self.model)
        cuda = self.device.type == "cuda"
        ptdtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]
        self.ctx = torch.autocast(self.device.type, dtype=ptdtype) if cuda else contextlib.nullcontext()
        self.scaler = torch.amp.GradScaler(self.device.type, enabled=cuda and dtype == "float16")
        self.iter_num = 0

    def step(self, x: torch.Tensor, y: torch.Tensor) -> float | None:
        """One iteration of train.py's loop on the global batch (accumulation × batch_size, T)."""
        cfg = self.cfg
        lr = cfg.lr_at(self.iter_num)  # train.py: get_lr(iter_num) if decay_lr else learning_rate
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        x, y = self._to_device(x), self._to_device(y)
        steps, B = cfg.gradient_accumulation_steps, cfg.batch_size
        for micro in range(steps):
            with self.ctx:
                _, loss = self.model(x[micro * B:(micro + 1) * B], y[micro * B:(micro + 1) * B])
                loss = loss / steps
            self.scaler.scale(loss).backward()
        if cfg.grad_clip != 0.0:
            self.scaler.unscale_(self.optimizer)
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), cfg.grad_clip)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)
        logged = self.iter_num % self.log_interval == 0
        self.iter_num += 1
        return loss.item() * steps if logged else None  # train.py's lossf: the last micro-step's loss, unscaled

    def _to_device(self, t: torch.Tensor) -> torch.Tensor:
        if self.device.type == "cuda":
            return t.pin_memory().to(self.device, non_blocking=True)
        return t.to(self.device)

    @torch.no_grad()
    def val_loss(self, batches) -> float:
        """Mean loss over `batches` [(x, y), ...] in eval mode (train.py's estimate_loss, one split)."""
        self.model.eval()
        try:
            return float(torch.stack([self.model(self._to_device(x), self._to_device(y))[1]
                                      for x, y in batches]).mean())
        finally:
            self.model.train()
