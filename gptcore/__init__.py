"""gptcore: a complete GPT-2-class model with hook points, and the science computed on it.

Pure PyTorch, no Qt. Names are resolved lazily so that `import gptcore` (and the
`count` command) stay fast: torch is imported only when a model-facing name is used.
"""
from __future__ import annotations

import importlib

from .config import ConfigError, GPTConfig, PRESETS
from .params import ParamCount, count_parameters

_LAZY = {
    "GPT": "model",
    "KVCache": "model",
    "HookPoint": "hooks",
    "INIT_SCHEMES": "init",
    "init_weights": "init",
    "gpt2_tokenizer": "tokenizer",
    "GPT2Tokenizer": "tokenizer",
    "TokenizerError": "tokenizer",
    "load": "loading",
    "LoadError": "loading",
    "LoadInfo": "loading",
    "load_tokenizer": "loading",
    "preset_name": "config",
    "default_device": "loading",
    "from_hf_state_dict": "convert",
    "generate": "generation",
    "GenerationStep": "generation",
    "GenerationError": "sampling",
    "check_settings": "sampling",
    "next_token_distribution": "sampling",
    "is_hub_cached": "loading",
    "resolve_device": "loading",
    "LoadCancelled": "loading",
    "HUB_IDS": "loading",
    "direct_logit_attribution": "attribution",
    "ablate": "interventions",
    "patch_heads": "patching",
    "patch_residual": "patching",
    "patch_attn_mlp": "patching",
    "head_census": "probes.census",
}

__all__ = ["ConfigError", "GPTConfig", "PRESETS", "ParamCount", "count_parameters", *_LAZY]


def __getattr__(name: str):
    if name in _LAZY:
        module = importlib.import_module(f".{_LAZY[name]}", __name__)
        return getattr(module, name)
    raise AttributeError(f"module 'gptcore' has no attribute {name!r}")
