"""The modern parts inside GPT's blocks, each against an oracle of its own: sinusoidal positions
against the paper's formula, RMSNorm against its definition, grouped-query attention against the
same model with its key/value heads copied out to every query head, and the hook names and shapes
every part adds. (Rotary, RMSNorm and SwiGLU together are checked against HF Llama/Qwen2 in
test_llama_parity.py.)"""
import math

import pytest
import torch

from gptcore import GPTConfig
from gptcore.model.gpt import GPT, RMSNorm

BASE = dict(vocab_size=50, block_size=24, n_layer=2, n_head=4, n_embd=32)


def _model(seed=0, **overrides):
    torch.manual_seed(seed)
    model = GPT(GPTConfig(**BASE, **overrides), seed=seed).eval()
    with torch.no_grad():  # norms away from 1 so that a wrong norm shows
        for name, p in model.named_parameters():
            if name.endswith(("ln1.weight", "ln2.weight", "ln_final.weight")):
                p.copy_(1 + 0.3 * torch.randn(p.shape))
            else:
                p.mul_(5)
    return model


def _ids(T=11, seed=1):
    return torch.randint(0, BASE["vocab_size"], (2, T), generator=torch.Generator().manual_seed(seed))


def test_sinusoidal_positions_follow_the_paper_and_hold_no_parameters():
    model = _model(pos_embedding="sinusoidal")
    assert not any("pos_embed" in name for name, _ in model.named_parameters())
    _, cache = model.run_with_cache(_ids(), names_filter="hook_pos_embed")
    table = cache["hook_pos_embed"][0]  # (T, C)
    C = BASE["n_embd"]
    for p in (0, 1, 7, 10):
        for i in (0, 3, 15):
            angle = p / 10000 ** (2 * i / C)
            assert table[p, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-6)
            assert table[p, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-6)


def test_rmsnorm_is_its_definition():
    norm = RMSNorm(8, eps=1e-6)
    with torch.no_grad():
        norm.weight.copy_(torch.linspace(0.5, 2, 8))
    x = torch.randn(3, 5, 8) * 4 + 1
    expected = x / torch.sqrt((x ** 2).mean(-1, keepdim=True) + 1e-6) * norm.weight
    torch.testing.assert_close(norm(x), expected, atol=1e-5, rtol=1e-5)
    assert [n for n, _ in norm.named_parameters()] == ["weight"]  # never a bias


@pytest.mark.parametrize("pos", ["learned", "rope"])
def test_grouped_query_equals_multi_head_with_shared_kv_heads(pos):
    """Oracle: copy each K/V head out to the query heads of its group; an ordinary multi-head
    model holding those weights must give the same logits, patterns and z."""
    gqa = _model(n_kv_head=2, pos_embedding=pos)
    mha = GPT(GPTConfig(**BASE, pos_embedding=pos), init=None)
    state = dict(gqa.state_dict())
    C, hs, group = BASE["n_embd"], BASE["n_embd"] // BASE["n_head"], 2
    for i in range(BASE["n_layer"]):
        w = state[f"blocks.{i}.attn.c_attn.weight"]  # (C + 2·2·hs, C)
        q, k, v = w.split((C, 2 * hs, 2 * hs))
        k = k.view(2, hs, C).repeat_interleave(group, dim=0).reshape(C, C)
        v = v.view(2, hs, C).repeat_interleave(group, dim=0).reshape(C, C)
        state[f"blocks.{i}.attn.c_attn.weight"] = torch.cat((q, k, v))
        b = state[f"blocks.{i}.attn.c_attn.bias"]
        qb, kb, vb = b.split((C, 2 * hs, 2 * hs))
        state[f"blocks.{i}.attn.c_attn.bias"] = torch.cat(
            (qb, kb.view(2, hs).repeat_interleave(group, 0).flatten(), vb.view(2, hs).repeat_interleave(group, 0).flatten()))
    mha.load_state_dict(state)
    mha.eval()
    ids = _ids()
    keep = lambda n: n.endswith(("hook_pattern", "hook_z"))  # noqa: E731
    with torch.no_grad():
        fused = gqa(ids)  # SDPA with enable_gqa: no pattern asked for
        logits, cache = gqa.run_with_cache(ids, names_filter=keep)  # explicit path
        ref_logits, ref = mha.run_with_cache(ids, names_filter=keep)
    torch.testing.assert_close(fused, ref_logits, atol=1e-4, rtol=0)
    torch.testing.assert_close(logits, ref_logits, atol=1e-4, rtol=0)
    for name in ref:
        torch.testing.assert_close(cache[name], ref[name], atol=1e-5, rtol=0)


def test_hook_names_and_shapes_of_the_modern_parts():
    model = _model(n_kv_head=2, pos_embedding="rope", norm="rmsnorm", mlp="swiglu", mlp_hidden=40)
    names = model.hook_names
    assert "hook_pos_embed" not in names  # rotary adds nothing to the stream
    for i in range(BASE["n_layer"]):
        for leaf in ("attn.hook_rot_q", "attn.hook_rot_k", "mlp.hook_pre_linear", "ln1.hook_normalized"):
            assert f"blocks.{i}.{leaf}" in names
    B, T, nh, nkv, hs = 2, 11, 4, 2, 8
    _, cache = model.run_with_cache(_ids(T))
    expected = {
        "attn.hook_q": (B, T, nh, hs), "attn.hook_rot_q": (B, T, nh, hs),
        "attn.hook_k": (B, T, nkv, hs), "attn.hook_rot_k": (B, T, nkv, hs), "attn.hook_v": (B, T, nkv, hs),
        "attn.hook_attn_scores": (B, nh, T, T), "attn.hook_pattern": (B, nh, T, T), "attn.hook_z": (B, T, nh, hs),
        "mlp.hook_pre": (B, T, 40), "mlp.hook_pre_linear": (B, T, 40), "mlp.hook_post": (B, T, 40),
    }
    for leaf, shape in expected.items():
        assert tuple(cache[f"blocks.1.{leaf}"].shape) == shape, leaf
    # rotation keeps each pair's length: |rot_q| == |q| per head
    torch.testing.assert_close(cache["blocks.0.attn.hook_rot_q"].norm(dim=-1), cache["blocks.0.attn.hook_q"].norm(dim=-1))
    # SwiGLU: post = SiLU(gate) * up
    post = torch.nn.functional.silu(cache["blocks.0.mlp.hook_pre"]) * cache["blocks.0.mlp.hook_pre_linear"]
    torch.testing.assert_close(cache["blocks.0.mlp.hook_post"], post)
    # the GPT-2 config keeps exactly its hook list: no rotary hooks, no pre_linear
    gpt2_names = GPT(GPTConfig(**BASE)).hook_names
    assert "hook_pos_embed" in gpt2_names and not any("rot_" in n or "pre_linear" in n for n in gpt2_names)


@pytest.mark.parametrize("overrides", [dict(pos_embedding="sinusoidal"), dict(pos_embedding="rope", n_kv_head=1),
                                       dict(pos_embedding="rope", norm="rmsnorm", mlp="swiglu", ln_placement="post")])
def test_kv_cache_steps_equal_the_full_forward(overrides):
    model = _model(**overrides)
    ids = _ids(T=15)
    with torch.no_grad():
        full = model(ids)
        cache = model.new_kv_cache(2)
        assert cache.k.shape[2] == model.config.kv_heads
        parts = [model(ids[:, :6], kv_cache=cache), model(ids[:, 6:9], kv_cache=cache)]  # a chunk with a mask
        parts += [model(ids[:, t:t + 1], kv_cache=cache) for t in range(9, 15)]
    torch.testing.assert_close(torch.cat(parts, dim=1), full, atol=1e-4, rtol=0)


def test_probes_work_on_the_modern_parts():
    """The residual and gradient probes and the attention capture take any config. Oracle for the
    residual: post-norm RMSNorm (weight 1 at init) leaves every sub-block's output with RMS 1
    exactly (up to eps), as post-LN LayerNorm does."""
    from gptcore.interp.probes.attention import capture_attention
    from gptcore.interp.probes.gradients import gradient_flow
    from gptcore.interp.probes.residual import residual_norms

    modern = GPTConfig(**BASE, n_kv_head=2, pos_embedding="rope", norm="rmsnorm", mlp="swiglu", mlp_hidden=48, bias=False)
    post = residual_norms(modern.replace(ln_placement="post"), schemes=("gpt2",), seeds=(0,), batch=2, length=8,
                          metric="rms")
    assert post.mean[0, 1:] == pytest.approx(1.0, abs=0.02)  # eps=1e-5 against a small first mean square
    flow = gradient_flow(modern, schemes=("gpt2", "kaiming-normal"), seeds=(0,), batch=2, length=8)
    assert flow.values.shape[-1] == BASE["n_layer"] and (flow.values > 0).all()
    model = _model(**{k: v for k, v in modern.to_dict().items() if k not in BASE})
    ids = _ids(T=9)[0].tolist()
    capture = capture_attention(model, ids, full_layers=[1])
    _, cache = model.run_with_cache(torch.tensor([ids]), names_filter="blocks.1.attn.hook_pattern")
    assert capture.thumbnails.shape[:2] == (BASE["n_layer"], BASE["n_head"])  # every query head
    torch.testing.assert_close(capture.full[1], cache["blocks.1.attn.hook_pattern"][0], atol=1e-6, rtol=0)
