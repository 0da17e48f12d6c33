"""What the training bench trains, by device: nanoGPT's CPU recipe on a CPU, GPT-2 124M on CUDA.

- "cpu": nanoGPT README's CPU run (4 layers, 4 heads, 128 wide, block 64, batch 12, lr 1e-3,
  warmup 100, cosine to 1e-4 at 2000, beta2 0.99, dropout 0, no bias, nanoGPT's exact GELU) on
  char-level text of CPython's `pydoc_data.topics` (the default corpus of `python -m gptcore.train`).
  Both sides eager unless asked (`--compile`): on a CPU the compile takes minutes (train_shakespeare_char's
  README run passes --compile=False).
- "cuda": nanoGPT's config/train_gpt2.py model (12 layers, 12 heads, 768 wide, block 1024, its
  vocabulary padded to 50304, no bias, dropout 0) at batch 12 and one micro-step (the shape issue
  37 measured), train.py's optimisation settings, bfloat16 autocast where the GPU has it (train.py's
  dtype), both sides compiled (train.py's default; `--no-compile` for the eager pair). The tokens
  are uniform random ids: the figure is the step's speed, which does not depend on what is read.
"""
from __future__ import annotations

import dataclasses

import torch

from gptcore.model.config import GPTConfig
from gptcore.model.gpt import GPT
from gptcore.training.config import CPU_RECIPE_MODEL, TrainConfig
from gptcore.training.trainer import Trainer, resolve_dtype

GPT2_124M = dict(n_layer=12, n_head=12, n_embd=768, block_size=1024, vocab_size=50304, dropout=0.0, bias=False,
                 activation="gelu")  # nanoGPT's GELU (exact), so both sides compute the same model
GPU_BATCH = 12
RANDOM_BATCHES = 8  # distinct batches the CUDA recipe cycles through


@dataclasses.dataclass
class Recipe:
    """One bench configuration: the model (GPTConfig fields; nanoGPT takes the ones it has), our
    TrainConfig (device, dtype, compile included), how nanoGPT's side runs, and the batches."""

    name: str
    description: str
    model_args: dict
    config: TrainConfig
    compile: bool  # both sides
    nanogpt_dtype: str  # train.py's dtype on that device (a CPU: float32, its ctx is a nullcontext)
    corpus: object | None = None  # data.Corpus of the CPU recipe (its val split serves --loss)

    @property
    def rows(self) -> int:
        return self.config.tokens_per_iter

    @property
    def tokens_per_iter(self) -> int:
        return self.rows * self.model_args["block_size"]

    def batches(self, count: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """`count` global batches (rows, T) each, on the CPU as a run's data loader gives them."""
        T = self.model_args["block_size"]
        if self.corpus is not None:
            return [self.corpus.batch("train", it, self.rows, T, self.config.seed) for it in range(count)]
        g = torch.Generator().manual_seed(self.config.seed)
        made = []
        for _ in range(min(count, RANDOM_BATCHES)):
            ids = torch.randint(0, self.model_args["vocab_size"], (self.rows, T + 1), generator=g)  # (rows, T + 1)
            made.append((ids[:, :-1].contiguous(), ids[:, 1:].contiguous()))  # (rows, T) each
        return [made[i % len(made)] for i in range(count)]

    def ours(self, config: TrainConfig | None = None) -> Trainer:
        """Our side, built the way gptcore.training.loop builds a run's trainer."""
        config = config or self.config
        return Trainer(GPT(GPTConfig(**self.model_args), init="gpt2", seed=config.seed), config, device=config.device)


def recipe_for(device: torch.device, dtype: str = "auto", seed: int = 1337, eval_iters: int = 40,
               compile: bool | None = None) -> Recipe:
    """The recipe of `device` ("cpu" or "cuda"), `compile` None meaning that recipe's default."""
    if device.type == "cuda":
        on = True if compile is None else compile
        cfg = TrainConfig(batch_size=GPU_BATCH, gradient_accumulation_steps=1, dtype=dtype, seed=seed,
                          eval_iters=eval_iters, device=str(device), compile=on)
        resolved = resolve_dtype(dtype, device)
        return Recipe("cuda", f"GPT-2 124M (12 layers, 12 heads, 768 wide, block 1024, vocab 50304), batch "
                              f"{GPU_BATCH}, random token ids", dict(GPT2_124M), cfg, on, resolved)
    from gptcore.training.data import load_corpus

    corpus = load_corpus()
    on = bool(compile)
    cfg = TrainConfig.cpu_recipe(dtype=dtype, eval_iters=eval_iters, seed=seed, compile=on, device=str(device))
    model_args = dict(CPU_RECIPE_MODEL, vocab_size=corpus.vocab_size)
    return Recipe("cpu", f"nanoGPT's CPU recipe ({model_args['n_layer']} layers, {model_args['n_head']} heads, "
                         f"{model_args['n_embd']} wide, block {model_args['block_size']}, batch {cfg.tokens_per_iter}), "
                         f"char-level {corpus.name} ({corpus.vocab_size} symbols)", model_args, cfg, on, "float32", corpus)
