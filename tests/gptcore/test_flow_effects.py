"""From routes to causes (issue 29): removing one attention part equals a manual hook-based
removal of that part's vector from the attention output; a node's logit effect equals its vector
through the final norm and unembedding."""
import numpy as np
import pytest
import torch

import gptcore
from gptcore import GPT, GPTConfig
from gptcore.interp.flow import FlowError

IDS = [5, 17, 3, 40, 42, 8, 61, 23, 70, 11, 5, 17]
CONFIGS = {
    "gpt2": dict(),
    "llama-style": dict(pos_embedding="rope", norm="rmsnorm", mlp="swiglu", n_kv_head=2, bias=False),
}


def model_of(name):
    cfg = GPTConfig(vocab_size=97, block_size=32, n_layer=3, n_head=4, n_embd=32, **CONFIGS[name])
    model = GPT(cfg, seed=0).eval()
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=gen))
    return model


@torch.no_grad()
def manual_removal(model, layer, head, source, target, token):
    """The part's vector A^h[i,j] · (W_O^h v_j) built from a cache, subtracted from hook_attn_out."""
    pre = f"blocks.{layer}.attn."
    _, cache = model.run_with_cache(torch.tensor([IDS]), names_filter=[pre + "hook_pattern", pre + "hook_v"], logits=None)
    hs, group = model.config.head_dim, model.config.n_head // model.config.kv_heads
    a = cache[pre + "hook_pattern"][0, head, target, source]
    v = cache[pre + "hook_v"][0, source, head // group]  # (hs,)
    part = a * (model.blocks[layer].attn.c_proj.weight[:, head * hs:(head + 1) * hs] @ v)  # (C,)

    def remove(out, hook):
        out = out.clone()
        out[0, target] -= part
        return out

    before = torch.log_softmax(model(torch.tensor([IDS]))[0, -1].double(), -1)[token]
    with model.hooks([(f"blocks.{layer}.hook_attn_out", remove)]):
        after = torch.log_softmax(model(torch.tensor([IDS]))[0, -1].double(), -1)[token]
    return float(after - before)


@pytest.mark.parametrize("name", CONFIGS)
@pytest.mark.parametrize("layer, head, source, target", [(1, 0, 0, 11), (1, 3, 10, 11), (2, 1, 11, 11), (2, 0, 0, 5)])
def test_removing_an_edge_equals_a_manual_hook(name, layer, head, source, target):
    model = model_of(name)
    token = 42
    got = gptcore.remove_edge_effect(model, IDS, layer, head, source, target, token)
    want = manual_removal(model, layer, head, source, target, token)
    assert got == pytest.approx(want, abs=1e-5)
    if layer == 2 and target != len(IDS) - 1:
        assert got == 0.0  # the last layer at another position reaches no later position
    else:
        assert abs(want) > 1e-4  # the removal changes the prediction: the oracle has teeth


def test_removing_an_edge_refuses_a_future_source_and_a_missing_head():
    model = model_of("gpt2")
    with pytest.raises(FlowError, match="comes after"):
        gptcore.remove_edge_effect(model, IDS, 0, 0, 5, 3, 1)
    with pytest.raises(FlowError, match="does not exist"):
        gptcore.remove_edge_effect(model, IDS, 3, 0, 0, 3, 1)


@torch.no_grad()
@pytest.mark.parametrize("name", CONFIGS)
def test_block_logit_effect_reads_the_node_through_the_unembedding(name):
    model = model_of(name)
    last = len(IDS) - 1
    top = gptcore.block_logit_effect(model, IDS, f"I2_{last}", k=5)  # the lens after the last block ...
    logits = model(torch.tensor([IDS]))[0, -1]
    np.testing.assert_array_equal(top.promoted_ids, logits.topk(5).indices.numpy())  # ... is the prediction
    np.testing.assert_array_equal(top.suppressed_ids, logits.topk(5, largest=False).indices.numpy())
    _, cache = model.run_with_cache(torch.tensor([IDS]), names_filter=["blocks.1.hook_mlp_out"], logits=None)
    want = model.unembed(model.ln_final(cache["blocks.1.hook_mlp_out"][0, 4]))
    got = gptcore.block_logit_effect(model, IDS, "M1_4", k=3)
    np.testing.assert_allclose(got.promoted_logits, want.topk(3).values.numpy(), atol=1e-5)
    with pytest.raises(FlowError, match="not in this graph"):
        gptcore.block_logit_effect(model, IDS, "A3_0")
    with pytest.raises(FlowError, match="not a route node"):
        gptcore.block_logit_effect(model, IDS, "Q1_0")
