"""Reference parity: our GPT on an HF GPT2LMHeadModel's weights gives HF's logits, every
attention pattern and every hidden state (eager attention, fp32, 1e-5).

HF's own init sets every bias to 0 and every LayerNorm to 1/0, which would hide a wrong
bias; so all HF parameters are re-drawn at random first. HF GPT-2 has no bias switch: a
config of ours without (some) biases is compared with HF whose matching biases are 0.
"""
import pytest
import torch

from gptcore import GPTConfig
from gptcore.io.convert import config_from_hf, convert_state_dict, from_hf_state_dict, infer_config

transformers = pytest.importorskip("transformers")

CASES = [
    # id, GPTConfig kwargs (bias / qkv_bias / tie vary; shapes differ per case)
    ("bias-tied", dict(vocab_size=83, block_size=20, n_layer=2, n_head=4, n_embd=32)),
    ("bias-untied-mlp3", dict(vocab_size=50, block_size=12, n_layer=3, n_head=2, n_embd=24,
                              mlp_ratio=3, tie_weights=False, layer_norm_eps=1e-6)),
    ("nobias-tied", dict(vocab_size=71, block_size=16, n_layer=2, n_head=3, n_embd=36, bias=False)),
    ("nobias-untied", dict(vocab_size=40, block_size=10, n_layer=1, n_head=1, n_embd=16, bias=False,
                           tie_weights=False)),
    ("no-qkv-bias", dict(vocab_size=64, block_size=16, n_layer=2, n_head=2, n_embd=32, qkv_bias=False)),
]


def _hf_twin(cfg: GPTConfig, seed: int):
    """An HF GPT-2 of cfg's shape with every parameter random, and the biases cfg lacks at 0."""
    hf_cfg = transformers.GPT2Config(
        vocab_size=cfg.vocab_size, n_positions=cfg.block_size, n_embd=cfg.n_embd, n_layer=cfg.n_layer,
        n_head=cfg.n_head, n_inner=cfg.d_mlp, layer_norm_epsilon=cfg.layer_norm_eps,
        tie_word_embeddings=cfg.tie_weights, attn_implementation="eager",
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0,
    )
    torch.manual_seed(seed)
    hf = transformers.GPT2LMHeadModel(hf_cfg).eval()
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in hf.named_parameters():
            if ".ln_" in name and name.endswith("weight"):
                p.copy_(1 + 0.2 * torch.randn(p.shape, generator=gen))
            else:  # big enough that the attention patterns are far from uniform
                p.copy_(0.15 * torch.randn(p.shape, generator=gen))
            is_qkv_bias = name.endswith("attn.c_attn.bias")
            if name.endswith("bias") and not (cfg.use_qkv_bias if is_qkv_bias else cfg.bias):
                p.zero_()
    assert (hf.lm_head.weight is hf.transformer.wte.weight) == cfg.tie_weights
    return hf


def _our_state(hf, cfg: GPTConfig) -> dict:
    """HF's state dict minus the bias tensors cfg does not have."""
    state = {}
    for key, value in hf.state_dict().items():
        if key.endswith("bias"):
            qkv = key.endswith("attn.c_attn.bias")
            if not (cfg.use_qkv_bias if qkv else cfg.bias):
                assert torch.all(value == 0)
                continue
        state[key] = value
    return state


@pytest.mark.parametrize("case,kwargs", CASES, ids=[c for c, _ in CASES])
def test_logits_patterns_and_hidden_states_match_hf(case, kwargs):
    cfg = GPTConfig(**kwargs)
    hf = _hf_twin(cfg, seed=len(case))
    ours = from_hf_state_dict(_our_state(hf, cfg), config=cfg).eval()
    assert (ours.unembed.weight is ours.embed.weight) == cfg.tie_weights
    assert ours.num_parameters() == sum(p.numel() for p in ours.parameters())

    idx = torch.randint(0, cfg.vocab_size, (2, cfg.block_size), generator=torch.Generator().manual_seed(7))
    with torch.no_grad():
        ref = hf(idx, output_attentions=True, output_hidden_states=True)
        logits, cache = ours.run_with_cache(idx)

    assert ref.logits.abs().max() > 1.0  # the comparison is not between near-zero numbers
    torch.testing.assert_close(logits, ref.logits, rtol=0, atol=1e-5)

    assert len(ref.attentions) == cfg.n_layer
    for i, pattern in enumerate(ref.attentions):
        ours_pattern = cache[f"blocks.{i}.attn.hook_pattern"]
        assert ours_pattern.max() > 0.9  # sharp patterns: a wrong scale would show
        torch.testing.assert_close(ours_pattern, pattern, rtol=0, atol=1e-5)

    assert len(ref.hidden_states) == cfg.n_layer + 1
    for i in range(cfg.n_layer):
        torch.testing.assert_close(cache[f"blocks.{i}.hook_resid_pre"], ref.hidden_states[i], rtol=0, atol=1e-5)
    torch.testing.assert_close(cache["ln_final.hook_normalized"], ref.hidden_states[-1], rtol=0, atol=1e-5)

    # the fused path (nobody asks for patterns) gives the same logits
    with torch.no_grad():
        torch.testing.assert_close(ours(idx), ref.logits, rtol=0, atol=1e-5)


@pytest.mark.parametrize("case,kwargs", CASES, ids=[c for c, _ in CASES])
def test_infer_config_recovers_the_config(case, kwargs):
    cfg = GPTConfig(**kwargs)
    hf = _hf_twin(cfg, seed=1)
    state = _our_state(hf, cfg)
    inferred = infer_config(state, n_head=cfg.n_head, layer_norm_eps=cfg.layer_norm_eps)
    assert inferred == cfg
    assert from_hf_state_dict(state).config.replace(n_head=cfg.n_head, layer_norm_eps=cfg.layer_norm_eps) == cfg
    if cfg.bias and cfg.use_qkv_bias:  # HF configs describe only the full-bias model
        assert config_from_hf(hf.config) == cfg
        assert config_from_hf(hf.config.to_dict()) == cfg


def test_infer_config_head_count_defaults_for_gpt2_widths():
    with torch.device("meta"):
        state = {"wte.weight": torch.empty(50257, 1024), "wpe.weight": torch.empty(1024, 1024),
                 "h.0.mlp.c_fc.weight": torch.empty(1024, 4096), "h.0.attn.c_proj.bias": torch.empty(1024)}
    cfg = infer_config(state)
    assert (cfg.n_head, cfg.n_layer, cfg.d_mlp, cfg.bias, cfg.use_qkv_bias) == (16, 1, 4096, True, False)
    assert infer_config(state, n_head=8).n_head == 8
    state["h.0.mlp.c_fc.weight"] = torch.empty(2048, 1024, device="meta")  # nanoGPT's Linear layout
    assert infer_config(state).d_mlp == 2048


def test_conv1d_weights_are_transposed_and_buffers_dropped():
    cfg = GPTConfig(vocab_size=30, block_size=8, n_layer=1, n_head=2, n_embd=8, mlp_ratio=2)
    hf = _hf_twin(cfg, seed=2)
    state = dict(hf.state_dict())
    state["transformer.h.0.attn.bias"] = torch.ones(1, 1, 8, 8)  # old checkpoints' mask buffer
    ours, unexpected = convert_state_dict(state, conv1d=True)
    assert unexpected == [] and "blocks.0.attn.bias" not in ours
    assert ours["blocks.0.mlp.c_fc.weight"].shape == (16, 8)
    assert torch.equal(ours["blocks.0.mlp.c_fc.weight"], state["transformer.h.0.mlp.c_fc.weight"].t())
    assert torch.equal(ours["blocks.0.attn.c_attn.bias"], state["transformer.h.0.attn.c_attn.bias"])
