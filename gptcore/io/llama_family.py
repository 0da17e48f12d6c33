"""Hugging Face Llama-family folders (`LlamaForCausalLM`: SmolLM2, TinyLlama; `Qwen2ForCausalLM`):
what their config.json says, as a GPTConfig with the modern parts switched on.

Only what the model computes exactly is accepted. A setting that would change the maths in a way
the GPT here does not implement (scaled or partial rotary angles, sliding-window attention, another
activation, extra biases, a head size that is not width / heads) is refused with a LoadError naming
the setting and what is supported: a model that loads must give the original's logits, so nothing
is ever loaded approximately. The weights' renaming table is `convert.convert_llama_state_dict`.
"""
from __future__ import annotations

from pathlib import Path

from gptcore.io.checkpoints import LoadError
from gptcore.model.config import ConfigError, GPTConfig

# model_type -> the one architecture (the causal-LM head) loaded for it
LLAMA_FAMILY = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM"}
_REQUIRED = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
             "max_position_embeddings")
_SUPPORTED = ("supported: LlamaForCausalLM and Qwen2ForCausalLM with SiLU (SwiGLU) MLPs, plain rotary "
              "positions (rope_type 'default'), full causal attention, and Qwen2's q/k/v biases")


def is_llama_family(hf: dict) -> bool:
    return hf.get("model_type") in LLAMA_FAMILY


def config_from_llama_json(path: Path, hf: dict) -> tuple[GPTConfig, list[str]]:
    """GPTConfig for a Llama/Qwen2 config.json, or a LoadError naming what cannot be loaded exactly."""
    model_type = hf["model_type"]

    def refuse(setting: str, why: str) -> LoadError:
        return LoadError(f"{path}: {setting} {why}; this explorer does not implement it exactly and never "
                         f"loads a model approximately ({_SUPPORTED})")

    architectures = hf.get("architectures") or [LLAMA_FAMILY[model_type]]
    if LLAMA_FAMILY[model_type] not in architectures:
        raise refuse(f"architectures {architectures}", f"has no {LLAMA_FAMILY[model_type]} (the causal language "
                                                       f"model head)")
    missing = [k for k in _REQUIRED if isinstance(hf.get(k), bool) or not isinstance(hf.get(k), int)]
    if missing:
        raise LoadError(f"{path} lacks {', '.join(missing)} (or they are not whole numbers); "
                        f"fix the file or re-download the model")
    act = hf.get("hidden_act", "silu")
    if act != "silu":
        raise refuse(f"hidden_act={act!r}", "is not 'silu'")
    theta = _rope_theta(hf, refuse)
    for flag in ("attention_bias", "mlp_bias"):
        if hf.get(flag):
            raise refuse(f"{flag}=true", "adds biases Llama does not have")
    if hf.get("use_sliding_window"):
        raise refuse("use_sliding_window=true", "(sliding-window attention) limits what each token sees")
    layer_types = hf.get("layer_types") or []
    other_layers = sorted({t for t in layer_types if t != "full_attention"})
    if other_layers:
        raise refuse(f"layer_types {other_layers}", "are not full causal attention")
    heads, width = hf["num_attention_heads"], hf["hidden_size"]
    head_dim = hf.get("head_dim")
    if head_dim is not None and heads and head_dim * heads != width:
        raise refuse(f"head_dim={head_dim}", f"differs from hidden_size / num_attention_heads = {width}/{heads}")
    kv_heads = hf.get("num_key_value_heads") or heads
    try:
        config = GPTConfig(
            vocab_size=hf["vocab_size"],
            block_size=hf["max_position_embeddings"],
            n_layer=hf["num_hidden_layers"],
            n_head=heads,
            n_embd=width,
            n_kv_head=None if kv_heads == heads else kv_heads,
            bias=False,
            qkv_bias=model_type == "qwen2",  # Qwen2: biases on q/k/v only
            tie_weights=bool(hf.get("tie_word_embeddings", False)),  # both classes default to untied
            layer_norm_eps=hf.get("rms_norm_eps", 1e-6),
            pos_embedding="rope",
            rope_theta=theta,
            norm="rmsnorm",
            mlp="swiglu",
            mlp_hidden=hf["intermediate_size"],
        )
    except (ConfigError, TypeError, ValueError) as exc:
        raise LoadError(f"{path} describes a model that cannot be built: {exc}") from None
    return config, []


def _rope_theta(hf: dict, refuse) -> float:
    """The rotary base, from transformers 5's `rope_parameters` or 4's `rope_theta`/`rope_scaling`;
    any scaling (linear, dynamic, yarn, llama3, longrope…) or partial rotation is refused."""
    theta = hf.get("rope_theta", 10000.0)
    for field in ("rope_scaling", "rope_parameters"):
        params = hf.get(field)
        if params is None:
            continue
        if not isinstance(params, dict):
            raise refuse(f"{field}={params!r}", "is not an object")
        kind = params.get("rope_type", params.get("type", "default"))
        if kind != "default":
            raise refuse(f"{field} type {kind!r}", "scales the rotary angles")
        theta = params.get("rope_theta", theta)
        if params.get("partial_rotary_factor", 1.0) != 1.0:
            raise refuse(f"partial_rotary_factor={params['partial_rotary_factor']}", "rotates part of each head")
    if hf.get("partial_rotary_factor", 1.0) != 1.0:
        raise refuse(f"partial_rotary_factor={hf['partial_rotary_factor']}", "rotates part of each head")
    return theta
