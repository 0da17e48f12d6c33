"""Llama-family folders: a tiny `LlamaForCausalLM` / `Qwen2ForCausalLM` with random weights, saved by
transformers itself, loaded with `gptcore.load(folder)`: logits, attention patterns and hidden states
equal HF eager to 1e-4, greedy generation with our KV cache equals HF `generate` token for token,
and every setting we do not implement exactly is refused by name.

HF's own init leaves norms at 1 and biases at 0, which would hide a wrong mapping, so every
parameter is re-drawn at random before saving.
"""
import json

import pytest
import torch

from gptcore import load
from gptcore.io.checkpoints import LoadError
from gptcore.generation.streaming import generate

transformers = pytest.importorskip("transformers")

SHAPE = dict(vocab_size=97, hidden_size=48, intermediate_size=80, num_hidden_layers=2,
             num_attention_heads=6, max_position_embeddings=40, rms_norm_eps=1e-6,
             bos_token_id=0, eos_token_id=1, pad_token_id=0, attn_implementation="eager")
CASES = [
    # id, HF class names, config overrides
    ("llama-gqa-tied", "Llama", dict(num_key_value_heads=2, tie_word_embeddings=True, rope_theta=500.0)),
    ("llama-mha-untied", "Llama", dict(num_key_value_heads=6, tie_word_embeddings=False)),
    ("llama-mqa-untied", "Llama", dict(num_key_value_heads=1, tie_word_embeddings=False, rope_theta=100000.0)),
    ("qwen2-gqa-untied", "Qwen2", dict(num_key_value_heads=3, tie_word_embeddings=False)),
    ("qwen2-gqa-tied", "Qwen2", dict(num_key_value_heads=2, tie_word_embeddings=True)),
]


def _hf_model(family: str, overrides: dict, seed: int = 0):
    config_cls = getattr(transformers, f"{family}Config")
    model_cls = getattr(transformers, f"{family}ForCausalLM")
    config = config_cls(**SHAPE, **overrides)
    torch.manual_seed(seed)
    hf = model_cls(config).eval()
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in hf.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1 + 0.3 * torch.randn(p.shape, generator=gen))
            else:  # big enough that the attention patterns are far from uniform
                p.copy_(0.2 * torch.randn(p.shape, generator=gen))
    return hf


@pytest.fixture(scope="module", params=CASES, ids=[c[0] for c in CASES])
def pair(request, tmp_path_factory):
    name, family, overrides = request.param
    hf = _hf_model(family, overrides)
    folder = tmp_path_factory.mktemp(name)
    hf.save_pretrained(folder)
    ours, info = load(folder, device="cpu")
    return hf, ours, info, overrides


def test_config_maps_every_field(pair):
    hf, ours, info, overrides = pair
    c, h = ours.config, hf.config
    assert (c.pos_embedding, c.norm, c.mlp, c.bias) == ("rope", "rmsnorm", "swiglu", False)
    assert (c.n_layer, c.n_head, c.n_embd, c.kv_heads, c.d_mlp, c.block_size, c.vocab_size) == (
        h.num_hidden_layers, h.num_attention_heads, h.hidden_size, h.num_key_value_heads, h.intermediate_size,
        h.max_position_embeddings, h.vocab_size)
    assert c.tie_weights == overrides["tie_word_embeddings"] == info.tied
    assert c.use_qkv_bias == (h.model_type == "qwen2")
    assert c.rope_theta == overrides.get("rope_theta", 10000.0)
    assert info.n_params == hf.num_parameters() == ours.num_parameters()
    # grouped-query: the cache keeps the key/value heads only
    assert ours.new_kv_cache(1).k.shape[2] == h.num_key_value_heads


def test_logits_patterns_and_hidden_states_equal_hf_eager(pair):
    hf, ours, _, _ = pair
    ids = torch.randint(0, SHAPE["vocab_size"], (2, 17), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        ref = hf(ids, output_attentions=True, output_hidden_states=True)
        logits, cache = ours.run_with_cache(ids, names_filter=lambda n: n.endswith(("hook_pattern", "hook_resid_pre")))
    assert ref.logits.abs().max() > 1  # not a degenerate comparison
    torch.testing.assert_close(logits, ref.logits, atol=1e-4, rtol=0)
    for i, attn in enumerate(ref.attentions):  # (B, n_head, T, T): every query head, GQA included
        assert attn[0].std() > 0.05  # patterns far from uniform
        torch.testing.assert_close(cache[f"blocks.{i}.attn.hook_pattern"], attn, atol=1e-4, rtol=0)
        torch.testing.assert_close(cache[f"blocks.{i}.hook_resid_pre"], ref.hidden_states[i], atol=1e-4, rtol=0)


def test_greedy_generation_with_kv_cache_equals_hf_generate(pair):
    hf, ours, _, _ = pair
    prompt = [5, 17, 42, 8, 77]
    n = 30  # prompt + n stays inside max_position_embeddings: HF has no sliding window
    config = transformers.GenerationConfig(do_sample=False, max_new_tokens=n, min_new_tokens=0, eos_token_id=None,
                                           pad_token_id=0, use_cache=True)
    hf.generation_config.eos_token_id = None  # the saved config's eos would stop HF early
    with torch.no_grad():
        ref = hf.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                          generation_config=config)[0, len(prompt):].tolist()
    mine = [step.token for step in generate(ours, prompt, max_new_tokens=n, temperature=0)]
    assert len(ref) == n and len(set(ref)) > 3  # a sequence, not one token repeated
    assert mine == ref


def test_cached_steps_keep_rotary_positions(pair):
    """Token-by-token through the cache gives the full forward's logits at every position, and
    the rotated keys in the cache are the full forward's: rotary angles follow the cache length."""
    _, ours, _, _ = pair
    ids = torch.randint(0, SHAPE["vocab_size"], (1, 12), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        full = ours(ids)
        cache = ours.new_kv_cache(1)
        first = ours(ids[:, :4], kv_cache=cache)  # a prefix, then one token at a time
        steps = [first] + [ours(ids[:, t:t + 1], kv_cache=cache) for t in range(4, 12)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=0)
    _, ref = ours.run_with_cache(ids, names_filter="blocks.1.attn.hook_rot_k")
    torch.testing.assert_close(cache.k[1, 0, :, :12], ref["blocks.1.attn.hook_rot_k"][0].transpose(0, 1), atol=1e-5, rtol=0)


def test_generation_past_the_context_rebuilds_rotary_positions(tmp_path):
    """Past max_position_embeddings our window slides (generation.py): the cache is rebuilt from
    the newest tokens, whose rotary positions restart at 0. Every step's token must be the argmax
    of a fresh forward on exactly the tokens the window holds at that step."""
    shape = {**SHAPE, "max_position_embeddings": 12}
    torch.manual_seed(1)
    hf = transformers.LlamaForCausalLM(transformers.LlamaConfig(**shape, num_key_value_heads=2))
    with torch.no_grad():
        for p in hf.parameters():
            p.normal_(0, 0.2)
    hf.save_pretrained(tmp_path)
    ours, _ = load(tmp_path, device="cpu")
    block, shift, prompt = 12, 5, [3, 9, 27, 81]
    steps = list(generate(ours, prompt, max_new_tokens=25, temperature=0, window_shift=shift))
    history = prompt + [s.token for s in steps]
    seen, slides = len(prompt), 0  # tokens in the window when step i is chosen
    with torch.no_grad():
        for i, step in enumerate(steps):
            if i:
                if seen + 1 > block:
                    seen, slides = block - shift, slides + 1
                else:
                    seen += 1
            context = history[:len(prompt) + i][-seen:]
            logits = ours(torch.tensor([context]))[0, -1]  # (V,)
            assert step.token == int(logits.argmax()), i
    assert slides >= 2


# -- refusals: anything not implemented exactly ----------------------------------------------------

def _saved_llama(tmp_path, **overrides):
    config = transformers.LlamaConfig(**SHAPE, num_key_value_heads=2)
    torch.manual_seed(0)
    transformers.LlamaForCausalLM(config).save_pretrained(tmp_path)
    path = tmp_path / "config.json"
    values = json.loads(path.read_text())
    for key, value in overrides.items():
        if value is None:
            values.pop(key, None)
        else:
            values[key] = value
    path.write_text(json.dumps(values))
    return tmp_path


REFUSED = [
    (dict(rope_scaling={"rope_type": "linear", "factor": 2.0}), ["rope_scaling type 'linear'", "rope_type 'default'"]),
    (dict(rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0}), ["rope_parameters type 'llama3'"]),
    (dict(rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5}),
     ["partial_rotary_factor=0.5"]),
    (dict(hidden_act="gelu"), ["hidden_act='gelu'", "SiLU"]),
    (dict(attention_bias=True), ["attention_bias=true"]),
    (dict(mlp_bias=True), ["mlp_bias=true"]),
    (dict(head_dim=16), ["head_dim=16", "48/6"]),
    (dict(architectures=["LlamaForSequenceClassification"]), ["LlamaForSequenceClassification", "LlamaForCausalLM"]),
    (dict(model_type="qwen2", architectures=["Qwen2ForCausalLM"], use_sliding_window=True, sliding_window=8),
     ["use_sliding_window=true", "full causal attention"]),
    (dict(model_type="qwen2", architectures=["Qwen2ForCausalLM"], layer_types=["full_attention", "sliding_attention"]),
     ["layer_types ['sliding_attention']"]),
    (dict(model_type="mistral", architectures=["MistralForCausalLM"]), ["model_type 'mistral' is not supported", "qwen2"]),
    (dict(num_key_value_heads=4), ["n_kv_head", "not divisible"]),
]


@pytest.mark.parametrize("overrides,words", REFUSED, ids=[next(iter(o)) + str(i) for i, (o, _) in enumerate(REFUSED)])
def test_settings_not_implemented_exactly_are_refused_by_name(tmp_path, overrides, words):
    folder = _saved_llama(tmp_path, **overrides)
    with pytest.raises(LoadError) as raised:
        load(folder, device="cpu")
    for word in words:
        assert word in str(raised.value), (word, str(raised.value))


def test_missing_projection_is_named(tmp_path):
    from safetensors.torch import load_file, save_file

    folder = _saved_llama(tmp_path)
    state = load_file(folder / "model.safetensors")
    del state["model.layers.1.self_attn.k_proj.weight"]
    save_file(state, folder / "model.safetensors")
    with pytest.raises(LoadError) as raised:
        load(folder, device="cpu")
    message = str(raised.value)
    assert "missing keys: blocks.1.attn.c_attn.weight" in message
    assert "model.layers.1.self_attn.q_proj.weight" in message  # its orphaned siblings are named too
