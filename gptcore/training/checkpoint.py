"""Training checkpoints: nanoGPT's ckpt.pt when nanoGPT can express the model, ours otherwise.

nanoGPT's ckpt.pt (what its train.py writes and reads to resume) is a torch.save'd dict:
  model          state dict in nanoGPT's names (transformer.wte/wpe/h.N.ln_1/attn.c_attn/
                 attn.c_proj/ln_2/mlp.c_fc/mlp.c_proj/ln_f, lm_head; the tied head is saved
                 under both wte and lm_head, one shared tensor), so nanoGPT's GPT loads it strictly;
  optimizer      AdamW's state dict (our parameter order is nanoGPT's: the two resume each other);
  model_args     n_layer, n_head, n_embd, block_size, bias, vocab_size, dropout;
  iter_num, best_val_loss, config (the run's settings; here TrainConfig's fields + extras).
nanoGPT's model is GPT-2's skeleton with the exact GELU, tied head, learned positions and
LayerNorm; a model with anything else (untied, tanh GELU, RoPE, RMSNorm, SwiGLU, grouped-query,
mlp_ratio != 4, post-LN, a separate qkv_bias...) would be misread by it, so it is saved as:

"gptcore-ckpt-1" (ours): the same dict, except
  format         "gptcore-ckpt-1"
  model          state dict in gptcore's names (GPT.state_dict())
  gpt_config     GPTConfig.to_dict(): every field needed to rebuild the model
  no model_args  (so nanoGPT's train.py stops with a KeyError instead of building the wrong model).
`gptcore.load` opens both (layouts.py). Extra keys in both: rng_state (torch's CPU generator, for
dropout on resume) and train_config. Files are written to a temporary name and renamed over the
old one, so a kill or a full disk mid-save leaves the previous checkpoint whole.
"""
from __future__ import annotations

from pathlib import Path

import torch

from gptcore.io.atomic import atomic_path
from gptcore.model.config import GPTConfig
from gptcore.io.layouts import GPTCORE_CKPT as OUR_FORMAT  # layouts.py recognises it when loading
from gptcore.training.config import TrainConfig
from gptcore.training.errors import CheckpointError
NANOGPT_ARGS = ("n_layer", "n_head", "n_embd", "block_size", "bias", "vocab_size", "dropout")


def nanogpt_args(config: GPTConfig) -> dict | None:
    """nanoGPT's model_args for `config`, or None when nanoGPT's model is not this model."""
    args = {name: getattr(config, name) for name in NANOGPT_ARGS}
    return args if GPTConfig(**args, activation="gelu") == config else None


def to_nanogpt_names(state: dict) -> dict:
    """Our state dict -> nanoGPT's key names (the inverse of convert.py's table, no transposes)."""
    top = {"embed.weight": "transformer.wte.weight", "pos_embed.weight": "transformer.wpe.weight",
           "ln_final.weight": "transformer.ln_f.weight", "ln_final.bias": "transformer.ln_f.bias",
           "unembed.weight": "lm_head.weight"}
    inner = {"ln1": "ln_1", "ln2": "ln_2"}
    out = {}
    for key, tensor in state.items():
        if key in top:
            out[top[key]] = tensor
            continue
        _, index, part, *rest = key.split(".")  # blocks.N.part[.sub].weight
        out[".".join(["transformer.h", index, inner.get(part, part), *rest])] = tensor
    return out


def checkpoint_dict(trainer, **extra) -> dict:
    """What `save_checkpoint` writes, as a dict (see the module docstring)."""
    model = trainer.model
    cfg: GPTConfig = model.config
    state = model.state_dict()
    run_config = {**trainer.config.to_dict(), **cfg.to_dict(), **extra}
    common = dict(optimizer=trainer.optimizer.state_dict(), iter_num=trainer.iter_num,
                  best_val_loss=trainer.best_val_loss, config=run_config,
                  train_config=trainer.config.to_dict(), rng_state=torch.get_rng_state())
    args = nanogpt_args(cfg)
    if args is not None:
        return dict(model=to_nanogpt_names(state), model_args=args, **common)
    return dict(format=OUR_FORMAT, model=state, gpt_config=cfg.to_dict(), **common)


def save_checkpoint(path, trainer, *, corpus=None, **extra) -> Path:
    """Write `trainer`'s checkpoint to `path` atomically (temporary file, fsync, rename); with a
    `corpus`, its name/tokenizer into the config and its char vocabulary beside the file first."""
    path = Path(path)
    if corpus is not None:
        extra = {"dataset": corpus.name, "tokenizer": corpus.tokenizer, **extra}
    try:
        if corpus is not None:
            corpus.save_vocab(path.parent)
        with atomic_path(path, durable=True) as tmp, open(tmp, "wb") as f:
            torch.save(checkpoint_dict(trainer, **extra), f)
    except OSError as exc:
        kept = f"the previous {path.name} is unchanged" if path.exists() else f"no {path.name} was written"
        raise CheckpointError(f"could not write {path} ({exc.strerror or exc}); {kept}. Free disk space or "
                              f"choose another out_dir") from None
    return path


def read_checkpoint(path) -> tuple[dict, GPTConfig, dict]:
    """(the checkpoint dict, its GPTConfig, its model state in our names), read safely
    (torch.load(weights_only=True): nothing in the file can run)."""
    from gptcore.io.checkpoints import LoadError, read_torch
    from gptcore.model.config import ConfigError
    from gptcore.io.convert import convert_state_dict

    path = Path(path)
    if path.is_dir():
        path = path / "ckpt.pt"
    try:
        ckpt = read_torch(path) if path.exists() else None
    except LoadError as exc:
        raise CheckpointError(str(exc)) from None
    if ckpt is None:
        raise CheckpointError(f"{path}: no such checkpoint; resume from a ckpt.pt a run wrote, or start a new run")
    if not isinstance(ckpt, dict) or "model" not in ckpt or "optimizer" not in ckpt:
        raise CheckpointError(f"{path} is not a training checkpoint (no model and optimizer state); "
                              f"only a ckpt.pt written by this trainer or nanoGPT's train.py can be resumed")
    try:
        if ckpt.get("format") == OUR_FORMAT:
            config = GPTConfig.from_dict(dict(ckpt["gpt_config"]))
        else:
            config = GPTConfig(**{k: ckpt["model_args"][k] for k in NANOGPT_ARGS}, activation="gelu")
    except (ConfigError, KeyError, TypeError) as exc:
        raise CheckpointError(f"{path}: its model description cannot build a model ({exc}); the file is "
                              f"damaged or from another program") from None
    state, unexpected = convert_state_dict(ckpt["model"], conv1d=False)
    if unexpected:
        raise CheckpointError(f"{path}: unexpected weights {', '.join(unexpected[:5])}; not a GPT checkpoint")
    return ckpt, config, state


def check_corpus(path, ckpt: dict, config: GPTConfig, corpus) -> None:
    """DataError unless `corpus` gives ids the checkpoint's model reads as it was trained to: a
    vocabulary that fits, the same tokenizer (if the checkpoint recorded one) and, for
    characters, the same character per id (char_vocab.json beside the checkpoint)."""
    from gptcore.training.data import DataError, read_saved_vocab

    path = Path(path)
    folder = path if path.is_dir() else path.parent
    what = f"the checkpoint {path}"
    saved_config = ckpt.get("config") if isinstance(ckpt.get("config"), dict) else {}
    tokenizer = saved_config.get("tokenizer")
    if isinstance(tokenizer, str) and tokenizer != corpus.tokenizer:
        raise DataError(f"{what} was trained with the {tokenizer} tokenizer ({saved_config.get('dataset', '?')}), "
                        f"but {corpus.name} is {corpus.tokenizer}; resume on data tokenized the same way")
    corpus.check_vocab(config.vocab_size, read_saved_vocab(folder), what)


def resume_trainer(cls, path, train_config: TrainConfig, *, corpus=None, device=None, fused=None):
    """A `cls` (Trainer) with the model, optimizer, iter_num and best_val_loss saved at `path`;
    with `corpus`, refuses data the model would read differently (see check_corpus)."""
    from gptcore.model.gpt import GPT

    ckpt, config, state = read_checkpoint(path)
    if corpus is not None:
        check_corpus(path, ckpt, config, corpus)
    model = GPT.empty(config, device="cpu")
    if config.tie_weights:
        state.pop("unembed.weight", None)
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [k for k in missing if not (config.tie_weights and k == "unembed.weight")]
    if missing or unexpected:
        raise CheckpointError(f"{path}: weights do not fit its own model description (missing {missing[:3]}, "
                              f"unexpected {unexpected[:3]}); the file is damaged")
    model.tie_weights()
    trainer = cls(model, train_config, device=device, fused=fused)
    try:
        trainer.optimizer.load_state_dict(ckpt["optimizer"])
    except (ValueError, KeyError) as exc:
        raise CheckpointError(f"{path}: its optimizer state does not fit the model ({exc}); "
                              f"resume with the model it was saved with") from None
    trainer.iter_num = int(ckpt.get("iter_num", 0))
    trainer.best_val_loss = float(ckpt.get("best_val_loss", 1e9))
    rng = ckpt.get("rng_state")
    if isinstance(rng, torch.Tensor) and rng.dtype == torch.uint8:
        torch.set_rng_state(rng)
    return trainer
