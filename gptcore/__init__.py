"""gptcore: a complete GPT-2-class model with hook points, and the science computed on it.

Pure PyTorch, no Qt. Names are resolved lazily so that `import gptcore` (and the
`count` command) stay fast: torch is imported only when a model-facing name is used.
"""
from __future__ import annotations

import importlib

from gptcore.model.config import ConfigError, GPTConfig, PRESETS
from gptcore.model.params import ParamCount, count_parameters

_LAZY = {
    "GPT": "model.gpt",
    "KVCache": "model.gpt",
    "HookPoint": "model.hooks",
    "INIT_SCHEMES": "model.init",
    "init_weights": "model.init",
    "gpt2_tokenizer": "io.tokenizer",
    "GPT2Tokenizer": "io.tokenizer",
    "TokenizerError": "io.tokenizer",
    "load": "io.loading",
    "LoadError": "io.loading",
    "LoadInfo": "io.loading",
    "load_tokenizer": "io.loading",
    "preset_name": "model.config",
    "default_device": "io.loading",
    "from_hf_state_dict": "io.convert",
    "generate": "generation.streaming",
    "GenerationStep": "generation.streaming",
    "GenerationError": "generation.sampling",
    "check_settings": "generation.sampling",
    "next_token_distribution": "generation.sampling",
    "is_hub_cached": "io.loading",
    "resolve_device": "io.loading",
    "LoadCancelled": "io.loading",
    "HUB_IDS": "io.loading",
    "direct_logit_attribution": "interp.attribution",
    "ablate": "interp.interventions",
    "patch_heads": "interp.patching",
    "patch_residual": "interp.patching",
    "patch_attn_mlp": "interp.patching",
    "head_census": "interp.probes.census",
    "information_flow": "interp.flow",
    "FlowContributions": "interp.flow",
    "FlowError": "interp.flow",
    "FlowState": "interp.flow_incremental",
    "flow_graph": "interp.flow_graph",
    "flow_route": "interp.flow_route",
    "RouteState": "interp.flow_route",
    "FlowGraph": "interp.flow_graph",
    "remove_edge_effect": "interp.flow_effects",
    "block_logit_effect": "interp.flow_effects",
    "BlockLogitEffect": "interp.flow_effects",
    "SAE": "interp.sae.dictionary",
    "SAEError": "interp.sae.dictionary",
    "NeuronDictionary": "interp.sae.dictionary",
    "neuron_dictionary": "interp.sae.dictionary",
    "fit_sae": "interp.sae.fit",
    "ActivationCache": "interp.sae.sources",
    "train_sae": "interp.sae.harvest",
    "sae_metrics": "interp.sae.metrics",
    "SAEMetrics": "interp.sae.metrics",
    "sae_edit": "interp.sae.edit",
    "save_sae": "interp.sae.files",
    "load_sae": "interp.sae.files",
    "check_sae_fits": "interp.sae.files",
    "Transcoder": "interp.circuits.transcoder",
    "CircuitError": "interp.circuits.transcoder",
    "UnsupportedModel": "interp.circuits.transcoder",
    "TranscodersDoNotFit": "interp.circuits.transcoder",
    "PromptTooLong": "interp.circuits.transcoder",
    "check_transcoders_fit": "interp.circuits.transcoder",
    "fit_transcoder": "interp.circuits.fit",
    "train_transcoders": "interp.circuits.harvest",
    "transcoder_metrics": "interp.circuits.metrics",
    "TranscoderMetrics": "interp.circuits.metrics",
    "attribution_graph": "interp.circuits.graph",
    "AttributionGraph": "interp.circuits.graph_result",
    "prune_graph": "interp.circuits.prune",
    "PrunedGraph": "interp.circuits.prune",
    "node_influence": "interp.circuits.prune",
    "cumulative_influence": "interp.circuits.prune",
    "save_transcoders": "interp.circuits.files",
    "load_transcoders": "interp.circuits.files",
    "graph_json": "interp.circuits.export",
    "save_graph_json": "interp.circuits.export",
    "transcoder_edit": "interp.circuits.edit",
    "edited_transcoders": "interp.circuits.edit",
}

__all__ = ["ConfigError", "GPTConfig", "PRESETS", "ParamCount", "count_parameters", *_LAZY]


def __getattr__(name: str):
    if name in _LAZY:
        module = importlib.import_module(f".{_LAZY[name]}", __name__)
        return getattr(module, name)
    raise AttributeError(f"module 'gptcore' has no attribute {name!r}")
