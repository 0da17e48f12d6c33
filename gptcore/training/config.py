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
    """A training setting that cannot work; `field` names it, the message says what to use, and
    `fix` (when there is one) is a value for `field` that works, named in the message as
    `field=fix` — so the advice, followed, clears the error (tests apply it)."""

    def __init__(self, field_name: str, message: str, fix=None):
        super().__init__(f"{field_name}: {message}")
        self.field = field_name
        self.reason = message
        self.fix = fix


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
    iterations either way), else float32; float32 on other devices. `compile` is train.py's: the
    model and its loss run under torch.compile (one graph, the cross-entropy fused in); None (the
    default) = on CUDA, where it is train.py's default and pays (nanoGPT's loop on an H200, issue
    37: 27.0 vs 36.7 ms a GPT-2 124M step), off elsewhere (on a CPU the compile took 3-4 minutes
    and saved ~5 % of the CPU recipe's step, AMD EPYC): True compiles on a CPU too, False keeps
    CUDA eager.
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
    compile: bool | None = None  # None: on CUDA only (see above)

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
        """train.py's get_lr, its branches in its order: linear warmup to learning_rate over
        warmup_iters (lr·(it+1)/(warmup+1), so step 0 is not 0), then min_lr past lr_decay_iters,
        then the cosine down to min_lr in between. So with warmup_iters ≥ lr_decay_iters the warmup
        runs whole and the lr then drops to min_lr (no cosine), as there. One point differs: at
        it == warmup_iters == lr_decay_iters train.py divides 0 by 0 (ZeroDivisionError); here the
        zero-length cosine is at its end, min_lr, as the step after it is."""
        if not self.decay_lr:
            return self.learning_rate
        if it < self.warmup_iters:
            return self.learning_rate * (it + 1) / (self.warmup_iters + 1)
        if it > self.lr_decay_iters:
            return self.min_lr
        span = self.lr_decay_iters - self.warmup_iters
        if span <= 0:  # it == warmup_iters == lr_decay_iters (see above)
            return self.min_lr
        decay_ratio = (it - self.warmup_iters) / span  # train.py's operations, in its order: the same float
        coeff = 0.5 * (1.0 + math.cos(math.pi * decay_ratio))  # 1 -> 0
        return self.min_lr + coeff * (self.learning_rate - self.min_lr)

    def local_accumulation(self, world_size: int) -> int:
        """Micro-steps each of `world_size` processes runs (train.py's division, checked)."""
        steps = self.gradient_accumulation_steps
        if steps % world_size:
            multiple = -(-steps // world_size) * world_size  # the next multiple up
            divisors = [n for n in range(1, min(steps, 64) + 1) if steps % n == 0]
            raise TrainConfigError(
                "gradient_accumulation_steps",
                f"{steps} micro-steps cannot be shared by {world_size} processes; use a multiple of {world_size} "
                f"(gradient_accumulation_steps={multiple}) or run a number of processes that divides {steps} "
                f"({', '.join(map(str, divisors))})", fix=multiple)
        return self.gradient_accumulation_steps // world_size

    def compiles_on(self, device_type: str) -> bool:
        """Whether a run on `device_type` ("cuda", "cpu", ...) compiles: `compile`, or where it is
        None, on CUDA only."""
        return self.compile if self.compile is not None else device_type == "cuda"

    @property
    def tokens_per_iter(self) -> int:
        """Sequences per optimizer step (× block_size for tokens)."""
        return self.gradient_accumulation_steps * self.batch_size

    # -- validation ---------------------------------------------------------------------------
    def validate(self) -> None:
        """Refuse only what nanoGPT's train.py cannot run either (torch's AdamW refuses a negative
        learning_rate or weight_decay and betas outside [0, 1); its loop divides by eval_interval and
        needs a batch and a micro-step; its configurator keeps decay_lr a bool). What it runs, however
        unwise, is accepted and done the same way; `warnings()` says what looks unintended."""
        for name in ("batch_size", "gradient_accumulation_steps", "eval_interval"):
            _int_at_least(name, getattr(self, name), 1)
        for name in ("max_iters", "eval_iters", "seed"):
            _int_at_least(name, getattr(self, name), 0)
        for name in ("warmup_iters", "lr_decay_iters"):
            _int_at_least(name, getattr(self, name), None)
        for name in ("learning_rate", "weight_decay"):
            _number_at_least(name, getattr(self, name), 0.0)
        for name in ("min_lr", "grad_clip"):
            _number_at_least(name, getattr(self, name), None)
        for name in ("beta1", "beta2"):
            value = getattr(self, name)
            _number_at_least(name, value, 0.0)
            if not value < 1:
                raise TrainConfigError(name, f"{value} must be in [0, 1) (torch's AdamW refuses it); nanoGPT uses "
                                             f"beta1=0.9, beta2=0.95 ({name}={_default(name)})", fix=_default(name))
        if not isinstance(self.decay_lr, bool):
            raise TrainConfigError("decay_lr", f"must be True or False, got {self.decay_lr!r} (decay_lr=True)",
                                   fix=True)
        if self.dtype not in DTYPES:
            raise TrainConfigError("dtype", f"{self.dtype!r} is not one of {', '.join(DTYPES)} (dtype=auto "
                                            f"picks the fastest)", fix="auto")
        if self.compile is not None and not isinstance(self.compile, bool):
            raise TrainConfigError("compile", f"must be True, False or None (None: on CUDA only), got "
                                              f"{self.compile!r} (compile=None)", fix=None)
        if self.device is not None and not isinstance(self.device, str):
            raise TrainConfigError("device", f"must be a device name such as 'cpu' or 'cuda', got {self.device!r} "
                                             f"(device=cpu)", fix="cpu")

    def warnings(self) -> list[str]:
        """What nanoGPT's train.py would run but probably was not meant: each a sentence that says
        what will happen and what to set instead. A run prints them and writes them into its trace."""
        said = []
        if self.decay_lr and self.lr_decay_iters <= self.warmup_iters:
            said.append(f"lr_decay_iters={self.lr_decay_iters} is not past warmup_iters={self.warmup_iters}: the lr "
                        f"warms up over {self.warmup_iters} steps, then drops to min_lr={self.min_lr:g} with no "
                        f"cosine (nanoGPT's get_lr does the same)"
                        + (f"; this run ends inside the warm-up (max_iters={self.max_iters})"
                           if self.max_iters <= self.warmup_iters else "")
                        + f"; for a warm-up then a cosine, set warmup_iters below lr_decay_iters "
                          f"(e.g. warmup_iters={max(0, min(self.lr_decay_iters, self.max_iters) // 10)})")
        if self.learning_rate == 0:
            said.append("learning_rate=0: the weights will not change (the loss is only measured)")
        if self.decay_lr and self.min_lr > self.learning_rate:
            said.append(f"min_lr={self.min_lr:g} is above learning_rate={self.learning_rate:g}: the \"decay\" raises "
                        f"the lr; nanoGPT uses min_lr ≈ learning_rate / 10 (min_lr={self.learning_rate / 10:g})")
        if self.decay_lr and self.min_lr < 0:
            said.append(f"min_lr={self.min_lr:g} is negative: late steps climb the loss instead of descending it")
        if self.grad_clip < 0:
            said.append(f"grad_clip={self.grad_clip:g} is negative: clipping to a negative norm flips the gradient "
                        f"(as torch's clip_grad_norm_ does in nanoGPT); use grad_clip=1.0, or 0 for no clipping")
        for name in ("warmup_iters", "lr_decay_iters"):
            if getattr(self, name) < 0:
                said.append(f"{name}={getattr(self, name)} is negative; nanoGPT's formula is applied as it is")
        if self.eval_iters == 0:
            said.append("eval_iters=0: evaluations average no batch, so every eval loss is NaN (as in nanoGPT); "
                        "use eval_iters=20 or more")
        return said


def _default(name: str):
    return next(f.default for f in dataclasses.fields(TrainConfig) if f.name == name)


# The model half of nanoGPT's CPU recipe, as GPTConfig overrides. bias=False is train.py's default;
# activation "gelu" is nanoGPT's nn.GELU() (exact erf), so a checkpoint of this shape is nanoGPT's.
CPU_RECIPE_MODEL = dict(n_layer=4, n_head=4, n_embd=128, block_size=64, dropout=0.0, bias=False, activation="gelu")


def _int_at_least(name: str, value, lowest: int | None) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TrainConfigError(name, f"must be a whole number, got {value!r} ({name}={_default(name)})",
                               fix=_default(name))
    if lowest is not None and value < lowest:
        raise TrainConfigError(name, f"must be at least {lowest}, got {value} ({name}={max(lowest, _default(name))})",
                               fix=max(lowest, _default(name)))


def _number_at_least(name: str, value, lowest: float | None) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise TrainConfigError(name, f"must be a finite number, got {value!r} ({name}={_default(name)})",
                               fix=_default(name))
    if lowest is not None and value < lowest:
        raise TrainConfigError(name, f"must be at least {lowest}, got {value} ({name}={_default(name)})",
                               fix=_default(name))
