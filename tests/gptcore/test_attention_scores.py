"""The explicit attention path (hook_attn_scores / hook_pattern listening) scales and masks its
scores in place with a mask built directly (issue 34): same scores and pattern as the oracle here,
also for a second chunk run against a KV cache (queries at positions past..past+T-1)."""
import math

import pytest
import torch

from gptcore import GPT, GPTConfig
from gptcore.model.gpt import _causal_mask, _future_mask

CFG = GPTConfig(vocab_size=53, block_size=24, n_layer=2, n_head=3, n_embd=24)


@pytest.mark.parametrize("T,S,past", [(1, 1, 0), (6, 6, 0), (3, 9, 6), (5, 12, 7), (1, 10, 9)])
def test_future_mask_is_the_causal_masks_negation(T, S, past):
    assert torch.equal(_future_mask(T, S, past, "cpu"), ~_causal_mask(T, S, past, "cpu"))
    q = torch.arange(past, past + T)[:, None]
    assert torch.equal(_future_mask(T, S, past, "cpu"), torch.arange(S)[None, :] > q)  # the oracle


def _oracle(q: torch.Tensor, k: torch.Tensor, past: int):
    """q (B, T, nh, hs), k (B, S, nh, hs) -> masked scores and softmax, as the textbook writes them."""
    B, T, nh, hs = q.shape
    S = k.shape[1]
    scores = torch.einsum("bthd,bshd->bhts", q, k) / math.sqrt(hs)  # (B, nh, T, S)
    future = torch.arange(S)[None, :] > torch.arange(past, past + T)[:, None]  # (T, S)
    scores = scores.masked_fill(future, float("-inf"))
    return scores, torch.softmax(scores, dim=-1)


def test_scores_and_pattern_match_the_oracle_with_and_without_a_kv_cache():
    model = GPT(CFG, seed=2).eval()
    idx = torch.randint(0, CFG.vocab_size, (2, 11), generator=torch.Generator().manual_seed(3))
    names = ["blocks.1.attn.hook_q", "blocks.1.attn.hook_k", "blocks.1.attn.hook_attn_scores",
             "blocks.1.attn.hook_pattern"]
    with torch.inference_mode():
        _, full = model.run_with_cache(idx, names_filter=names)
        cache = model.new_kv_cache(batch=2)
        model(idx[:, :7], kv_cache=cache)
        _, tail = model.run_with_cache(idx[:, 7:], names_filter=names, kv_cache=cache)  # queries 7..10
    q, k = full["blocks.1.attn.hook_q"], full["blocks.1.attn.hook_k"]
    scores, pattern = _oracle(q, k, past=0)
    torch.testing.assert_close(full["blocks.1.attn.hook_attn_scores"], scores, rtol=0, atol=1e-5)
    torch.testing.assert_close(full["blocks.1.attn.hook_pattern"], pattern, rtol=0, atol=1e-6)
    assert torch.isneginf(full["blocks.1.attn.hook_attn_scores"][0, 0, 0, 1])

    scores, pattern = _oracle(q[:, 7:], k, past=7)
    torch.testing.assert_close(tail["blocks.1.attn.hook_attn_scores"], scores, rtol=0, atol=1e-5)
    torch.testing.assert_close(tail["blocks.1.attn.hook_pattern"], pattern, rtol=0, atol=1e-6)
    assert tail["blocks.1.attn.hook_pattern"].shape == (2, CFG.n_head, 4, 11)
    assert tail["blocks.1.attn.hook_pattern"][0, 0, 0, 8:].abs().max() == 0  # query 7 never sees keys 8..10
