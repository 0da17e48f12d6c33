"""`TrainConfig`: nanoGPT train.py's knobs, under its names, with its defaults and meanings.

Why train.py's names: the people this is for already run nanoGPT; `--learning_rate=1e-3` must
mean here what it means there, and a run of ours must be comparable to one of theirs. Values are
checked once, here, with a `TrainConfigError` naming the field and the fix (as GPTConfig does).

`gradient_accumulation_steps` is GLOBAL, as in train.py: under torchrun each of the world_size
processes runs `gradient_accumulation_steps // world_size` micro-steps, so one optimizer step
always sees gradient_accumulation_steps × batch_size sequences whatever the number of processes.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from gptcore.model.config import from_known_fields

DTYPES = ("auto", "float32", "bfloat16", "float16")


class TrainConfigError(ValueError):
    """A training setting that cannot work; `field` names it, the message says what to use."""

    def __init__(self, field_name: str, message: str):
        super().__init__(f"{field_name}: {message}")
        self.field = field_name
        self.reason = message


@dataclass(frozen=True)
class TrainConfig:
    """One training run's optimisation settings (the model's shape is a GPTConfig).

    Defaults are train.py's (GPT-2 124M on OpenWebText, 8 GPUs); `cpu_recipe()` gives the small
    run nanoGPT's README suggests for a CPU. `seed` seeds the batches (data.py draws batch `it`
    from a generator seeded by (seed, it)); `device` is where the model trains (None: wherever
    the model already is). `dtype` is the autocast type of forward and backward; weights and
    optimizer stay float32. "float32" = no autocast; "auto" (default) = on CUDA train.py's choice
    (bfloat16 where supported, else float16); on a CPU bfloat16 where timing the run's model both
    ways finds it clearly faster (autocast_choice.py: 1.5-2.5x on CPUs with AMX or avx512_bf16,
    10x slower on one without; the CPU recipe's loss curve was unchanged, val 1.9829 at 500
    iterations either way), else float32; float32 on other devices.
    """

    batch_size: int = 12  # sequences per micro-step
    gradient_accumulation_steps: int = 40  # micro-steps per optimizer step, summed over all processes
    max_iters: int = 600_000
    learning_rate: float = 6e-4  # peak, reached at the end of the warmup
    min_lr: float = 6e-5  # floor of the cosine (nanoGPT: ~learning_rate / 10, per Chinchilla)
    warmup_iters: int = 2000
    lr_decay_iters: int = 600_000  # the cosine ends here; nanoGPT: ~max_iters
    decay_lr: bool = True  # False: learning_rate throughout
    weight_decay: float = 0.1  # on matrices and embeddings only (tensors of 2+ dimensions)
    beta1: float = 0.9
    beta2: float = 0.95
    grad_clip: float = 1.0  # clip the global gradient norm to this; 0 disables
    eval_interval: int = 2000
    eval_iters: int = 200  # batches per split in one estimate_loss
    seed: int = 1337
    dtype: str = "auto"
    device: str | None = None

    def __post_init__(self):
        self.validate()

    # -- construction -------------------------------------------------------------------------
    @classmethod
    def cpu_recipe(cls, **overrides) -> "TrainConfig":
        """nanoGPT README's CPU run of shakespeare_char (train.py + config/train_shakespeare_char.py
        + `--device=cpu --eval_iters=20 --block_size=64 --batch_size=12 --n_layer=4 --n_head=4
        --n_embd=128 --max_iters=2000 --lr_decay_iters=2000 --dropout=0.0`). The model's part of
        the recipe is `CPU_RECIPE_MODEL`, overrides for GPTConfig."""
        values = dict(batch_size=12, gradient_accumulation_steps=1, max_iters=2000, learning_rate=1e-3,
                      min_lr=1e-4, warmup_iters=100, lr_decay_iters=2000, beta2=0.99, eval_interval=250,
                      eval_iters=20, device="cpu")
        values.update(overrides)
        return cls(**values)

    def replace(self, **changes) -> "TrainConfig":
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict) -> "TrainConfig":
        return from_known_fields(cls, values, TrainConfigError)

    # -- the schedule -------------------------------------------------------------------------
    def lr_at(self, it: int) -> float:
        """train.py's get_lr: linear warmup to learning_rate over warmup_iters (lr·(it+1)/(warmup+1),
        so step 0 is not 0), cosine down to min_lr at lr_decay_iters, min_lr after that."""
        if not self.decay_lr:
            return self.learning_rate
        if it < self.warmup_iters:
            return self.learning_rate * (it + 1) / (self.warmup_iters + 1)
        if it > self.lr_decay_iters:
            return self.min_lr
        decay_ratio = (it - self.warmup_iters) / (self.lr_decay_iters - self.warmup_iters)
        coeff = 0.5 * (1.0 + math.cos(math.pi * decay_ratio))  # 1 -> 0
        return self.min_lr + coeff * (self.learning_rate - self.min_lr)

    def local_accumulation(self, world_size: int) -> int:
        """Micro-steps each of `world_size` processes runs (train.py's division, checked)."""
        if self.gradient_accumulation_steps % world_size:
            ok = [n for n in range(world_size, 4 * world_size + 1, world_size)]
            raise TrainConfigError(
                "gradient_accumulation_steps",
                f"{self.gradient_accumulation_steps} micro-steps cannot be shared by {world_size} processes; "
                f"use a multiple of {world_size} (e.g. {', '.join(map(str, ok))}) or run {world_size} fewer/more processes")
        return self.gradient_accumulation_steps // world_size

    @property
    def tokens_per_iter(self) -> int:
        """Sequences per optimizer step (× block_size for tokens)."""
        return self.gradient_accumulation_steps * self.batch_size

    # -- validation ---------------------------------------------------------------------------
    def validate(self) -> None:
        for name in ("batch_size", "gradient_accumulation_steps", "eval_interval", "eval_iters"):
            _int_at_least(name, getattr(self, name), 1)
        for name in ("max_iters", "warmup_iters", "lr_decay_iters", "seed"):
            _int_at_least(name, getattr(self, name), 0)
        for name in ("learning_rate", "min_lr", "weight_decay", "grad_clip"):
            _number_at_least(name, getattr(self, name), 0.0)
        if self.learning_rate <= 0:
            raise TrainConfigError("learning_rate", f"must be positive, got {self.learning_rate}; nanoGPT uses 6e-4 "
                                                    f"(GPT-2) or 1e-3 (small models)")
        if self.min_lr > self.learning_rate:
            raise TrainConfigError("min_lr", f"{self.min_lr} is above learning_rate={self.learning_rate}; the cosine "
                                             f"decays *to* min_lr, use about learning_rate / 10")
        for name in ("beta1", "beta2"):
            value = getattr(self, name)
            _number_at_least(name, value, 0.0)
            if not value < 1:
                raise TrainConfigError(name, f"{value} must be in [0, 1); nanoGPT uses beta1=0.9, beta2=0.95 (0.99 "
                                             f"for small models)")
        if not isinstance(self.decay_lr, bool):
            raise TrainConfigError("decay_lr", f"must be True or False, got {self.decay_lr!r}")
        if self.decay_lr and self.lr_decay_iters <= self.warmup_iters:
            raise TrainConfigError("lr_decay_iters", f"{self.lr_decay_iters} must be past warmup_iters="
                                                     f"{self.warmup_iters} (the cosine runs between them); "
                                                     f"set it to about max_iters={self.max_iters}")
        if self.dtype not in DTYPES:
            raise TrainConfigError("dtype", f"{self.dtype!r} is not one of {', '.join(DTYPES)}")
        if self.device is not None and not isinstance(self.device, str):
            raise TrainConfigError("device", f"must be a device name such as 'cpu' or 'cuda', got {self.device!r}")


# The model half of nanoGPT's CPU recipe, as GPTConfig overrides. bias=False is train.py's default;
# activation "gelu" is nanoGPT's nn.GELU() (exact erf), so a checkpoint of this shape is nanoGPT's.
CPU_RECIPE_MODEL = dict(n_layer=4, n_head=4, n_embd=128, block_size=64, dropout=0.0, bias=False, activation="gelu")


def _int_at_least(name: str, value, lowest: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TrainConfigError(name, f"must be a whole number, got {value!r}")
    if value < lowest:
        raise TrainConfigError(name, f"must be at least {lowest}, got {value}")


def _number_at_least(name: str, value, lowest: float) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise TrainConfigError(name, f"must be a finite number, got {value!r}")
    if value < lowest:
        raise TrainConfigError(name, f"must be at least {lowest}, got {value}")
