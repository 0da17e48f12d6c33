"""A bf16 model says what its fp32 model says at least as often as transformers' own bf16 GPT-2
on the same weights, and its attention patterns are fp32 (issue 28)."""
import torch

from gptcore.benches import bf16
from gptcore.benches.hf_compare import _hf_pair

SHAPE = dict(vocab_size=2000, n_positions=128, n_layer=4, n_head=4, n_embd=128)


def test_bf16_top1_agreement_is_at_least_transformers_bf16():
    _, hf, ours = _hf_pair(SHAPE, torch.device("cpu"))
    ids = bf16.fixed_prompts(SHAPE["vocab_size"])  # (8, 32): 256 next-token predictions
    r = bf16.agreement(ours, hf, ids)
    assert r["bf16_positions"] == 256
    assert r["bf16_fp32_sides_agree"] == 1.0  # the two fp32 models are the same model
    assert r["bf16_top1_agreement"] >= r["bf16_top1_agreement_ref"]
    assert r["bf16_top1_agreement"] >= 0.9  # random weights: near-ties, yet bf16 rarely flips one


def test_bf16_patterns_are_fp32_rows_close_to_fp32s():
    _, _, ours = _hf_pair(SHAPE, torch.device("cpu"))
    ids = bf16.fixed_prompts(SHAPE["vocab_size"], n=1)
    r = bf16.differences(ours, ids)
    assert r["bf16_pattern_dtype"] == "torch.float32"  # computed in fp32 from bf16 q and k
    assert 0 < r["bf16_pattern_max_abs_diff"] < 1e-2
    assert 0 < r["bf16_logit_max_abs_diff"] < 0.05 * max(1.0, r["bf16_logit_range"])
    model = ours.to(torch.bfloat16)
    with torch.inference_mode():
        _, cache = model.run_with_cache(ids, names_filter=lambda n: n.endswith("hook_pattern"), logits=None)
    rows = cache["blocks.0.attn.hook_pattern"].sum(-1)  # (1, nh, T)
    assert torch.allclose(rows, torch.ones_like(rows), atol=1e-6)  # a bf16 softmax would be ~1e-2 off
