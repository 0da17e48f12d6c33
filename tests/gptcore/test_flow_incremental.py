"""FlowState (routes while typing) equals a fresh information_flow after every edit."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from gptcore import GPT, GPTConfig, FlowState, ablate, information_flow
from tests.gptcore.test_flow import llama_style


def gpt2_style(seed=0):
    model = GPT(GPTConfig(vocab_size=97, block_size=32, n_layer=3, n_head=4, n_embd=32), seed=seed).eval()
    gen = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.15 * torch.randn(p.shape, generator=gen))
    return model


# typing at the end, backspace, an edit in the middle, the same prompt again, a shorter one, a new one
SCRIPT = [[5, 17, 3, 40], [5, 17, 3, 40, 42], [5, 17, 3, 40, 42, 8, 61], [5, 17, 3, 40, 42, 8],
          [5, 17, 9, 40, 42, 8], [5, 17, 9, 40, 42, 8], [5, 17], [70, 11, 5, 17, 3, 40, 42, 8, 61, 23, 1, 2]]


@pytest.mark.parametrize("make", [gpt2_style, llama_style], ids=["gpt2", "llama"])
def test_every_edit_gives_a_fresh_flows_shares_and_logits(make):
    model = make()
    state = FlowState(model)
    for ids in SCRIPT:
        got = state.flow(ids, logits=True)
        fresh = information_flow(model, ids, logits=True)
        for name in ("attn", "attn_residual", "mlp", "mlp_residual"):
            np.testing.assert_allclose(getattr(got, name), getattr(fresh, name), atol=1e-5, err_msg=f"{ids} {name}")
        assert got.logits_from < len(ids) and (ids is not SCRIPT[0] or got.logits_from == 0)
        torch.testing.assert_close(got.logits, fresh.logits[got.logits_from:], atol=1e-5, rtol=0)
        assert got.tokens.tolist() == ids


def test_typing_at_the_end_recomputes_only_the_new_rows():
    model = gpt2_style()
    state = FlowState(model)
    state.flow([5, 17, 3, 40])
    assert state.flow([5, 17, 3, 40, 42, 8], logits=True).logits_from == 4
    assert state.flow([5, 17, 3, 40, 42], logits=True).logits_from == 4  # backspace: the last row again
    assert state.flow([6, 17, 3], logits=True).logits_from == 0  # the first token changed


def test_inside_an_ablation_the_state_matches_the_ablated_fresh_flow():
    """A caller drops the state when the interventions change; within one, reuse stays exact."""
    model = gpt2_style()
    with ablate(model, heads=[(1, 2)]):
        state = FlowState(model)
        for ids in SCRIPT[:4]:
            got = state.flow(ids)
            fresh = information_flow(model, ids)
            np.testing.assert_allclose(got.attn, fresh.attn, atol=1e-5)
            assert (1, 2) in got.replaced_heads and got.replaced_heads == fresh.replaced_heads
