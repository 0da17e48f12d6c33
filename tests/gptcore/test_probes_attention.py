"""Attention capture and logit lens, checked against HF GPT-2 (eager attention) on the same
weights and against plain numpy re-computations of pooling and head statistics."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from gptcore.model.config import GPTConfig
from gptcore.io.convert import from_hf_state_dict
from gptcore.model.gpt import GPT
from gptcore.interp.probes.attention import (
    capture_attention,
    capture_bytes,
    crop_to_block,
    pool_pattern,
    pooling_edges,
    pooling_width,
)
from gptcore.interp.probes.lens import logit_lens


@pytest.fixture(scope="module")
def hf_pair():
    """A tiny HF GPT-2 with eager attention and our GPT holding the same weights."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    hf_cfg = transformers.GPT2Config(
        vocab_size=300, n_positions=40, n_embd=32, n_layer=3, n_head=4, attn_implementation="eager"
    )
    hf = transformers.GPT2LMHeadModel(hf_cfg).eval()
    ours = from_hf_state_dict(hf.state_dict(), hf_config=hf_cfg).eval()
    return hf, ours


def _hf_attentions(hf, ids):
    with torch.no_grad():
        out = hf(torch.tensor([ids]), output_attentions=True)
    return [a[0].numpy() for a in out.attentions], out.logits[0].numpy()  # L × (nh, T, T), (T, V)


def test_patterns_equal_hf_eager_attentions(hf_pair):
    hf, ours = hf_pair
    ids = [5, 17, 250, 3, 3, 99, 42, 7, 1, 200, 11]
    expected, _ = _hf_attentions(hf, ids)
    cap = capture_attention(ours, ids, full_layers=[1], thumb_size=64)
    assert cap.exact and cap.thumbnails.shape == (3, 4, 11, 11)
    for layer in range(3):
        np.testing.assert_allclose(cap.thumbnails[layer].numpy(), expected[layer], atol=1e-5)
    np.testing.assert_allclose(cap.full[1].numpy(), expected[1], atol=1e-5)
    assert set(cap.full) == {1}


def test_head_summary_matches_numpy_on_hf_patterns(hf_pair):
    hf, ours = hf_pair
    ids = list(range(10, 30))
    expected, _ = _hf_attentions(hf, ids)
    cap = capture_attention(ours, ids)
    for layer, a in enumerate(expected):  # (nh, T, T)
        q = a[:, 1:]  # queries 1..T-1
        with np.errstate(divide="ignore", invalid="ignore"):
            ent = -np.nansum(np.where(q > 0, q * np.log(q), 0.0), axis=-1).mean(-1)
        prev = np.array([[a[h, t, t - 1] for t in range(1, len(ids))] for h in range(4)]).mean(-1)
        first = a[:, 1:, 0].mean(-1)
        np.testing.assert_allclose(cap.entropy[layer].numpy(), ent, atol=1e-4)
        np.testing.assert_allclose(cap.prev_token[layer].numpy(), prev, atol=1e-5)
        np.testing.assert_allclose(cap.first_token[layer].numpy(), first, atol=1e-5)


def test_lens_last_layer_is_the_models_prediction(hf_pair):
    hf, ours = hf_pair
    ids = [1, 2, 3, 4, 5, 6, 7]
    _, logits = _hf_attentions(hf, ids)
    cap = capture_attention(ours, ids, lens_top_k=3)
    probs = torch.softmax(torch.tensor(logits[-1]), -1)
    top = probs.topk(3)
    assert cap.lens.top_ids[-1].tolist() == top.indices.tolist()
    np.testing.assert_allclose(cap.lens.top_probs[-1].numpy(), top.values.numpy(), atol=1e-5)


def test_lens_middle_layer_from_cached_residual(hf_pair):
    _, ours = hf_pair
    ids = [9, 8, 7, 6]
    _, cache = ours.run_with_cache(torch.tensor([ids]), names_filter="blocks.0.hook_resid_post")
    x = cache["blocks.0.hook_resid_post"][0, -1]  # (C,)
    probs = torch.softmax(ours.unembed(ours.ln_final(x)), -1)
    cap = capture_attention(ours, ids, lens_top_k=1)
    assert cap.lens.top_ids[0, 0].item() == probs.argmax().item()
    assert cap.lens.top_probs[0, 0].item() == pytest.approx(probs.max().item(), abs=1e-6)


def test_capture_leaves_the_fused_path_on(hf_pair):
    _, ours = hf_pair
    capture_attention(ours, [1, 2, 3])
    assert not any(block.attn.wants_pattern for block in ours.blocks)


def _numpy_pool(a, edges):
    t = len(edges) - 1
    out = np.zeros((a.shape[0], t, t))
    for i in range(t):
        for j in range(t):
            block = a[:, edges[i]:edges[i + 1], edges[j]:edges[j + 1]]
            out[:, i, j] = block.sum(-1).mean(-1)
    return out


def test_pooling_edges_are_power_of_two_bins_that_only_grow_or_merge():
    assert pooling_edges(5, 8).tolist() == [0, 1, 2, 3, 4, 5]  # fits: no pooling
    assert pooling_edges(9, 8).tolist() == [0, 2, 4, 6, 8, 9]  # width 2, last bin shorter
    assert pooling_edges(16, 8).tolist() == [0, 2, 4, 6, 8, 10, 12, 14, 16]
    assert pooling_edges(17, 8).tolist() == [0, 4, 8, 12, 16, 17]  # width doubled: pairs merged
    for T in range(1, 300):
        edges = pooling_edges(T, 16)
        w = pooling_width(T, 16)
        assert len(edges) - 1 <= 16 and (w == 1 or len(edges) - 1 > 8)  # between t/2 and t bins
        assert edges[-1] == T and all(int(e) % w == 0 for e in edges[:-1])


@pytest.mark.parametrize("T,t", [(37, 8), (64, 16), (20, 19), (5, 1)])
def test_pooling_matches_loop_and_keeps_rows_and_causality(T, t):
    g = torch.Generator().manual_seed(T)
    scores = torch.randn(3, T, T, generator=g)
    scores = scores.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), 1), float("-inf"))
    p = torch.softmax(scores, -1)
    edges = pooling_edges(T, t)
    assert edges[0] == 0 and edges[-1] == T and bool((edges[1:] > edges[:-1]).all())
    pooled = pool_pattern(p, edges)
    np.testing.assert_allclose(pooled.numpy(), _numpy_pool(p.numpy(), edges.numpy()), atol=1e-5)
    np.testing.assert_allclose(pooled.sum(-1).numpy(), 1.0, atol=1e-5)
    assert (torch.triu(pooled, 1) == 0).all()


def test_long_prompt_is_cropped_from_the_left(hf_pair):
    _, ours = hf_pair
    ids = [(7 * i) % 300 for i in range(55)]  # block_size is 40
    cap = capture_attention(ours, ids, thumb_size=8, full_layers=[2])
    assert cap.cropped == 15 and cap.token_ids == ids[15:]
    again = capture_attention(ours, ids[15:], full_layers=[2])
    torch.testing.assert_close(cap.full[2], again.full[2])
    assert cap.thumbnails.shape == (3, 4, 5, 5)  # 40 tokens in bins of 8 (the power of two giving <= 8 bins)
    assert cap.bin_edges.tolist() == [0, 8, 16, 24, 32, 40]
    np.testing.assert_allclose(cap.thumbnails.sum(-1).numpy(), 1.0, atol=1e-5)
    assert (torch.triu(cap.thumbnails, 1) == 0).all()
    with pytest.raises(KeyError, match="full_layers"):
        cap.pattern(0, 0)
    torch.testing.assert_close(cap.pattern(2, 1), again.full[2][1])


def test_bos_is_prepended_inside_block_size():
    ids, cropped = crop_to_block(list(range(10)), 6, bos=99)
    assert ids == [99, 5, 6, 7, 8, 9] and cropped == 5


def test_empty_prompt_gives_empty_capture(hf_pair):
    _, ours = hf_pair
    cap = capture_attention(ours, [])
    assert cap.n_tokens == 0 and cap.lens is None and cap.thumbnails.shape == (3, 4, 0, 0)


def test_single_token_prompt(hf_pair):
    _, ours = hf_pair
    cap = capture_attention(ours, [42])
    assert cap.thumbnails.shape == (3, 4, 1, 1) and torch.all(cap.thumbnails == 1)
    assert torch.all(cap.first_token == 1) and torch.all(cap.prev_token == 0)


def test_bad_inputs_are_named(hf_pair):
    _, ours = hf_pair
    with pytest.raises(ValueError, match="vocab_size=300"):
        capture_attention(ours, [1, 5000])
    with pytest.raises(ValueError, match="layer 3 does not exist"):
        capture_attention(ours, [1, 2], full_layers=[3])
    with pytest.raises(ValueError, match="thumb_size"):
        capture_attention(ours, [1, 2], thumb_size=0)
    with pytest.raises(ValueError, match="resid must be"):
        logit_lens(ours, torch.zeros(3, 5))


def test_xl_shaped_capture_at_block_size_stays_bounded():
    """GPT-2 XL's attention shape (25 heads, 1024 positions) on a few thin layers: the capture
    keeps thumbnails plus one full layer, far below the ~5 GB a full XL capture would need."""
    cfg = GPTConfig(vocab_size=100, block_size=1024, n_layer=2, n_head=25, n_embd=50)
    model = GPT(cfg, seed=0).eval()
    ids = [i % 100 for i in range(1024)]
    cap = capture_attention(model, ids, full_layers=[1], thumb_size=64)
    kept = cap.thumbnails.nbytes + sum(v.nbytes for v in cap.full.values())
    assert kept <= capture_bytes(2, 25, 1024, 64, 1)
    assert cap.thumbnails.shape == (2, 25, 64, 64) and cap.full[1].shape == (25, 1024, 1024)
    np.testing.assert_allclose(cap.thumbnails.sum(-1).numpy(), 1.0, atol=1e-4)
    np.testing.assert_allclose(cap.full[1].sum(-1).numpy(), 1.0, atol=1e-4)
    xl_bytes = capture_bytes(48, 25, 1024, 64, 1)
    assert xl_bytes < 512 * 2**20
    assert 4 * 48 * 25 * 1024 * 1024 > 8 * xl_bytes  # what the bound saves


def test_lens_fast_head_equals_the_module_and_respects_hooks(hf_pair):
    """The lens's few-row unembedding (oneDNN on CPU) gives the module's numbers, and a hook
    someone put on the head still sees the lens run (the plain module path is taken then)."""
    from gptcore.interp.probes.lens import _unembed_rows

    _, ours = hf_pair
    x = torch.randn(3, 32, generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        expected = ours.unembed(x)
        torch.testing.assert_close(_unembed_rows(ours, x), expected, rtol=1e-5, atol=1e-5)
        seen = []
        handle = ours.unembed.register_forward_hook(lambda _m, _i, out: seen.append(out.shape))
        try:
            logit_lens(ours, x)
        finally:
            handle.remove()
    assert seen == [torch.Size([3, 300])]
