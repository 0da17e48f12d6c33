"""Save a GPT as a Hugging Face GPT-2 folder (config.json + model.safetensors).

Why: a model trained here should open wherever GPT-2 checkpoints open — transformers'
`GPT2LMHeadModel.from_pretrained`, this app's File → Open folder, other tools — without our code.
It is convert.py's table read backwards: our names become HF's, the four Conv1D matrices per block
are transposed back to (in, out). HF's GPT-2 always has biases, so a bias-free model (nanoGPT's
bias=False) gets zero biases, which compute the same. nanoGPT's exact GELU is HF's "gelu", the
tanh approximation HF's "gelu_new". Parts HF's GPT-2 cannot express (rotary or sinusoidal
positions, RMSNorm, SwiGLU, grouped-query attention, post-LN, no residual) are refused by name
before anything is written.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch

from gptcore.io.atomic import atomic_path
from gptcore.model.config import GPTConfig
from gptcore.io.convert import CONV1D_WEIGHTS
from gptcore.errors import UserError

GPT2_EOT = 50256  # <|endoftext|>, GPT2Config's bos and eos
HF_ACTIVATION = {"gelu": "gelu", "gelu_tanh": "gelu_new"}
_HF_BLOCK = {"ln1": "ln_1", "ln2": "ln_2", "attn.c_attn": "attn.c_attn", "attn.c_proj": "attn.c_proj",
             "mlp.c_fc": "mlp.c_fc", "mlp.c_proj": "mlp.c_proj"}


class ExportError(UserError):
    title = "Cannot save as a Hugging Face GPT-2 folder"


def check_exportable(cfg: GPTConfig) -> None:
    """Raise ExportError naming each part HF's GPT2LMHeadModel has no place for."""
    problems = []
    if cfg.pos_embedding != "learned":
        problems.append(f"{cfg.pos_embedding} positions (GPT-2 learns a position table)")
    if cfg.norm != "layernorm":
        problems.append(f"{cfg.norm} (GPT-2 uses LayerNorm)")
    if cfg.mlp != "gelu" or cfg.mlp_hidden is not None and cfg.mlp_hidden != int(cfg.mlp_ratio * cfg.n_embd):
        problems.append(f"an MLP of kind {cfg.mlp!r}")
    if cfg.n_kv_head not in (None, cfg.n_head):
        problems.append(f"grouped-query attention ({cfg.n_kv_head} key/value heads)")
    if cfg.ln_placement != "pre":
        problems.append(f"{cfg.ln_placement}-LN blocks (GPT-2 is pre-LN)")
    if not cfg.residual:
        problems.append("blocks without residual connections")
    if cfg.activation not in HF_ACTIVATION:
        problems.append(f"activation {cfg.activation!r}")
    if problems:
        raise ExportError(f"Hugging Face's GPT-2 has no place for {', '.join(problems)}; save the nanoGPT/gptcore "
                          f"ckpt.pt instead (gptcore.load and this app open it)")


def hf_config(cfg: GPTConfig) -> dict:
    """GPT2Config's fields for `cfg`. bos/eos: GPT-2's <|endoftext|> (50256) when the vocabulary
    holds it, else None — GPT2Config's default 50256 outside a 65-symbol character vocabulary made
    transformers warn on every load, and such a vocabulary has no end-of-text token."""
    special = GPT2_EOT if cfg.vocab_size > GPT2_EOT else None
    return {
        "model_type": "gpt2", "architectures": ["GPT2LMHeadModel"],
        "vocab_size": cfg.vocab_size, "n_positions": cfg.block_size, "n_ctx": cfg.block_size,
        "n_embd": cfg.n_embd, "n_layer": cfg.n_layer, "n_head": cfg.n_head,
        "n_inner": int(cfg.mlp_hidden or cfg.mlp_ratio * cfg.n_embd),
        "activation_function": HF_ACTIVATION[cfg.activation], "layer_norm_epsilon": cfg.layer_norm_eps,
        "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0,
        "tie_word_embeddings": bool(cfg.tie_weights), "bos_token_id": special, "eos_token_id": special,
    }


def hf_state_dict(model) -> dict[str, torch.Tensor]:
    """Our parameters under HF GPT-2's names, Conv1D matrices transposed, zero biases where ours has none."""
    cfg: GPTConfig = model.config
    ours = {k: v.detach().float().cpu() for k, v in model.state_dict().items()}
    out = {"transformer.wte.weight": ours["embed.weight"], "transformer.wpe.weight": ours["pos_embed.weight"],
           "transformer.ln_f.weight": ours["ln_final.weight"]}
    out["transformer.ln_f.bias"] = ours.get("ln_final.bias", torch.zeros(cfg.n_embd))
    sizes = {"ln1": cfg.n_embd, "ln2": cfg.n_embd, "attn.c_attn": 3 * cfg.n_embd, "attn.c_proj": cfg.n_embd,
             "mlp.c_fc": int(cfg.mlp_hidden or cfg.mlp_ratio * cfg.n_embd), "mlp.c_proj": cfg.n_embd}
    for i in range(cfg.n_layer):
        for part, hf in _HF_BLOCK.items():
            weight = ours[f"blocks.{i}.{part}.weight"]
            if f"{part}.weight" in CONV1D_WEIGHTS:
                weight = weight.t()
            out[f"transformer.h.{i}.{hf}.weight"] = weight.contiguous()
            out[f"transformer.h.{i}.{hf}.bias"] = ours.get(f"blocks.{i}.{part}.bias", torch.zeros(sizes[part]))
    if not cfg.tie_weights:
        out["lm_head.weight"] = ours["unembed.weight"]
    return {k: v.contiguous().clone() for k, v in out.items()}


def save_hf_folder(model, folder, extra_files=()) -> Path:
    """Write `folder`/config.json and model.safetensors (and copy `extra_files`, e.g. a run's
    char_vocab.json, so this app reads the text); returns the folder."""
    import shutil

    from safetensors.torch import save_file

    check_exportable(model.config)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    weights = folder / "model.safetensors"
    with atomic_path(weights) as tmp:
        save_file(hf_state_dict(model), str(tmp), metadata={"format": "pt"})
    (folder / "config.json").write_text(json.dumps(hf_config(model.config), indent=1) + "\n", encoding="utf-8")
    for path in extra_files:
        shutil.copy2(path, folder / Path(path).name)
    return folder
