"""The GPT module: tied head, shapes, block_size, the two attention paths, KV cache,
and the teaching variants (post-LN, no residual)."""
import pytest
import torch
import torch.nn.functional as F

from gptcore import GPTConfig, count_parameters
from gptcore.model.gpt import GPT

TINY = GPTConfig(vocab_size=97, block_size=24, n_layer=2, n_head=4, n_embd=32)


def _idx(cfg=TINY, batch=2, length=11, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, cfg.vocab_size, (batch, length), generator=gen)


@pytest.fixture(scope="module")
def model():
    return GPT(TINY, seed=0).eval()


def test_tied_head_is_the_embedding_parameter_and_follows_adamw():
    torch.manual_seed(0)
    m = GPT(TINY, seed=1)
    assert m.unembed.weight is m.embed.weight
    assert m.unembed.weight.data_ptr() == m.embed.weight.data_ptr()
    before = m.embed.weight.detach().clone()
    opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
    logits = m(_idx())
    F.cross_entropy(logits.flatten(0, 1), _idx(seed=5).flatten()).backward()
    opt.step()
    assert not torch.equal(m.embed.weight, before)  # the step really moved it
    assert m.unembed.weight is m.embed.weight
    assert torch.equal(m.unembed.weight, m.embed.weight)
    m.to(torch.float64)  # a dtype move keeps the sharing
    assert m.unembed.weight is m.embed.weight and m.dtype == torch.float64


def test_untied_head_is_separate():
    m = GPT(TINY.replace(tie_weights=False), seed=1)
    assert m.unembed.weight is not m.embed.weight
    assert m.unembed.weight.data_ptr() != m.embed.weight.data_ptr()
    opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
    m(_idx()).sum().backward()
    opt.step()
    assert not torch.equal(m.unembed.weight, m.embed.weight)
    assert m.num_parameters() == count_parameters(m.config).total


def test_forward_shapes_and_logits_modes(model):
    idx = _idx(batch=3, length=7)
    full = model(idx)
    assert full.shape == (3, 7, TINY.vocab_size) and full.dtype == torch.float32
    last = model(idx, logits="last")
    assert last.shape == (3, 1, TINY.vocab_size)
    torch.testing.assert_close(last, full[:, -1:], rtol=0, atol=1e-6)
    assert model(idx, logits=None) is None
    with pytest.raises(ValueError, match="'all', 'last' or None"):
        model(idx, logits="first")
    assert model(_idx(batch=1, length=TINY.block_size)).shape == (1, TINY.block_size, TINY.vocab_size)
    assert model.device.type == "cpu" and model.num_parameters() == count_parameters(TINY).total


def test_sequence_longer_than_block_size_is_a_clear_error(model):
    with pytest.raises(ValueError, match=r"25 tokens is longer than block_size=24.*crop"):
        model(_idx(length=TINY.block_size + 1))
    cache = model.new_kv_cache(batch=1)
    model(_idx(batch=1, length=20), kv_cache=cache)
    with pytest.raises(ValueError, match="block_size=24"):
        model(_idx(batch=1, length=5), kv_cache=cache)
    assert cache.length == 20  # the failed call did not advance the cache


def test_unbatched_ids_are_a_clear_error(model):
    with pytest.raises(ValueError, match=r"\(batch, tokens\).*idx\[None\]"):
        model(torch.tensor([1, 2, 3]))


def test_meta_build_allocates_nothing():
    with torch.device("meta"):
        m = GPT(GPTConfig.preset("gpt2-xl"), init=None)
    assert {p.device.type for p in m.parameters()} == {"meta"}
    assert m.unembed.weight is m.embed.weight


def _count_sdpa(monkeypatch):
    calls = []
    real = F.scaled_dot_product_attention

    def counting(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(F, "scaled_dot_product_attention", counting)
    return calls


@pytest.mark.parametrize("hook_name", ["hook_pattern", "hook_attn_scores"])
def test_fused_and_explicit_paths_agree_and_switch_by_themselves(model, monkeypatch, hook_name):
    idx = _idx()
    sdpa = _count_sdpa(monkeypatch)
    fused = model(idx)
    assert len(sdpa) == TINY.n_layer  # nobody listens: the fused kernel in every layer
    sdpa.clear()
    seen = []
    with model.hooks([(lambda n: n.endswith(hook_name), lambda t, hook: seen.append(hook.name))]):
        explicit = model(idx)
    assert sdpa == []  # a listener: the explicit path everywhere, the fused kernel never
    assert seen == [f"blocks.{i}.attn.{hook_name}" for i in range(TINY.n_layer)]
    torch.testing.assert_close(explicit, fused, rtol=0, atol=1e-5)
    sdpa.clear()
    model(idx)  # hooks gone: back to the fused path
    assert len(sdpa) == TINY.n_layer


def test_other_hooks_keep_the_fused_path(model, monkeypatch):
    sdpa = _count_sdpa(monkeypatch)
    _, cache = model.run_with_cache(_idx(), names_filter=lambda n: "pattern" not in n and "scores" not in n)
    assert len(sdpa) == TINY.n_layer and "blocks.0.attn.hook_z" in cache


def test_patterns_are_causal_probability_rows(model):
    idx = _idx(batch=2, length=9)
    _, cache = model.run_with_cache(idx, names_filter=lambda n: n.endswith("hook_pattern"))
    assert len(cache) == TINY.n_layer
    upper = torch.triu(torch.ones(9, 9, dtype=torch.bool), diagonal=1)
    for pattern in cache.values():
        assert pattern.shape == (2, TINY.n_head, 9, 9)
        torch.testing.assert_close(pattern.sum(-1), torch.ones(2, TINY.n_head, 9), rtol=0, atol=1e-6)
        assert torch.all(pattern[..., upper] == 0)
        assert torch.all(pattern >= 0)
        assert torch.all(pattern[..., 0, 0] == 1)  # the first token can only see itself
        assert pattern[..., ~upper].min() > 0  # real softmax: every allowed key gets weight


def _incremental(model, idx, chunks, listen=False):
    """Logits for idx fed through the KV cache in chunks of the given sizes."""
    cache = model.new_kv_cache(batch=idx.shape[0])
    out, start = [], 0
    hooks = [(lambda n: n.endswith("hook_pattern"), lambda t, h: None)] if listen else []
    with model.hooks(hooks):
        for size in chunks:
            out.append(model(idx[:, start:start + size], kv_cache=cache))
            start += size
            assert cache.length == start
    return torch.cat(out, dim=1)


@pytest.mark.parametrize("listen", [False, True], ids=["fused", "explicit"])
def test_kv_cached_logits_equal_full_forward(model, listen):
    idx = _idx(batch=2, length=14)
    full = model(idx)
    # a prefix, single tokens, a multi-token chunk after a cached prefix, a single again
    got = _incremental(model, idx, [5, 1, 1, 4, 1, 2], listen=listen)
    torch.testing.assert_close(got, full, rtol=0, atol=1e-4)


def test_kv_cache_pattern_has_the_past_as_keys(model):
    idx = _idx(batch=1, length=8)
    cache = model.new_kv_cache()
    model(idx[:, :5], kv_cache=cache)
    _, got = model.run_with_cache(idx[:, 5:], kv_cache=cache, names_filter="blocks.1.attn.hook_pattern")
    _, ref = model.run_with_cache(idx, names_filter="blocks.1.attn.hook_pattern")
    pattern = got["blocks.1.attn.hook_pattern"]
    assert pattern.shape == (1, TINY.n_head, 3, 8)
    torch.testing.assert_close(pattern, ref["blocks.1.attn.hook_pattern"][:, :, 5:], rtol=0, atol=1e-5)


def test_kv_cache_reset_and_reuse(model):
    idx = _idx(batch=1, length=6)
    cache = model.new_kv_cache()
    first = model(idx, kv_cache=cache)
    cache.reset()
    assert cache.length == 0
    torch.testing.assert_close(model(idx, kv_cache=cache), first, rtol=0, atol=0)
    assert cache.k.shape == (TINY.n_layer, 1, TINY.n_head, TINY.block_size, TINY.head_dim)


def test_post_ln_and_no_residual_variants(model):
    idx = _idx()
    default = model(idx)
    post = GPT(TINY.replace(ln_placement="post"), seed=0).eval()
    plain = GPT(TINY.replace(residual=False), seed=0).eval()
    # Same seed and shapes: the very same weights, so any difference is the wiring.
    for other in (post, plain):
        for (name, a), (_, b) in zip(model.named_parameters(), other.named_parameters()):
            assert torch.equal(a, b), name
        logits = other(idx)
        assert logits.shape == default.shape and torch.isfinite(logits).all()
        assert (logits - default).abs().max() > 1e-3

    _, c = post.run_with_cache(idx, names_filter=lambda n: n.startswith("blocks.0.") and "attn." not in n)
    ln1 = post.blocks[0].ln1
    # post-LN: resid_mid = LN1(resid_pre + attn_out) (no LN before attention)
    expected = F.layer_norm(c["blocks.0.hook_resid_pre"] + c["blocks.0.hook_attn_out"], (32,), ln1.weight, ln1.bias)
    torch.testing.assert_close(c["blocks.0.hook_resid_mid"], expected, rtol=0, atol=1e-5)
    _, c = plain.run_with_cache(idx, names_filter=lambda n: n.startswith("blocks.0."))
    torch.testing.assert_close(c["blocks.0.hook_resid_mid"], c["blocks.0.hook_attn_out"], rtol=0, atol=0)
    torch.testing.assert_close(c["blocks.0.hook_resid_post"], c["blocks.0.hook_mlp_out"], rtol=0, atol=0)


def test_gelu_is_gpt2s_tanh_approximation(model):
    _, c = model.run_with_cache(_idx(), names_filter=["blocks.0.mlp.hook_pre", "blocks.0.mlp.hook_post"])
    pre = c["blocks.0.mlp.hook_pre"]
    gelu_new = 0.5 * pre * (1 + torch.tanh((2 / torch.pi) ** 0.5 * (pre + 0.044715 * pre**3)))
    torch.testing.assert_close(c["blocks.0.mlp.hook_post"], gelu_new, rtol=0, atol=1e-6)


def test_dropout_is_active_only_in_training():
    m = GPT(TINY.replace(dropout=0.5), seed=0)
    idx = _idx()
    m.train()
    assert not torch.equal(m(idx), m(idx))
    m.eval()
    assert torch.equal(m(idx), m(idx))


def test_apply_linear_fast_path_equals_the_module_and_yields_to_autograd_and_hooks():
    """gptcore's Linear serves CPU fp32 inference through oneDNN: same numbers as F.linear (3-D and
    non-contiguous inputs, non-contiguous weights as loaded from HF's Conv1D layout); with
    autograd it is nn.Linear's forward (gradients flow), and hooks on the layer fire."""
    from gptcore.model.linear import Linear, apply_linear

    torch.manual_seed(0)
    layer = Linear(24, 40)
    x = torch.randn(2, 7, 24)
    with torch.inference_mode():
        fast = apply_linear(layer, x)
        strided = apply_linear(layer, x.transpose(0, 1).contiguous().transpose(0, 1))
    torch.testing.assert_close(fast, F.linear(x, layer.weight, layer.bias).detach(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(strided, fast, rtol=1e-5, atol=1e-5)
    conv1d_layout = Linear(24, 40)
    with torch.no_grad():
        conv1d_layout.weight = torch.nn.Parameter(layer.weight.detach().t().contiguous().t())  # a transposed view
        conv1d_layout.bias.copy_(layer.bias)
        torch.testing.assert_close(apply_linear(conv1d_layout, x), fast, rtol=1e-5, atol=1e-5)

    out = apply_linear(layer, x)  # grad mode: the module, so backward works
    out.sum().backward()
    assert layer.weight.grad is not None and layer.weight.grad.abs().sum() > 0

    seen = []
    handle = layer.register_forward_hook(lambda m, i, o: seen.append(o.shape))
    try:
        with torch.inference_mode():
            apply_linear(layer, x)
    finally:
        handle.remove()
    assert seen == [torch.Size([2, 7, 40])]
