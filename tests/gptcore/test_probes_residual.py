"""Residual-norm and gradient-flow probes (gptcore/probes/residual.py, gradients.py)."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from gptcore.model.config import GPTConfig
from gptcore.model.init import INIT_SCHEMES
from gptcore.model.gpt import GPT
from gptcore.interp.probes.gradients import gradient_flow, layer_gradients
from gptcore.interp.probes.residual import (ProbeCancelled, boundary_hooks, model_residual_norms, residual_norms,
                                     stream_norms)

TINY = GPTConfig(vocab_size=500, block_size=32, n_layer=2, n_head=4, n_embd=64)
DEEP = GPTConfig(vocab_size=500, block_size=32, n_layer=48, n_head=4, n_embd=64)  # deep but narrow: fast


@pytest.fixture(autouse=True)
def one_thread():
    """These models are tiny: a second OpenMP thread only adds spin-waiting (badly so on a
    shared machine), so run them on one and restore the setting afterwards."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_curves_have_one_point_per_layer_boundary():
    r = residual_norms(TINY, schemes=("gpt2", "kaiming-normal"), seeds=(0, 1), batch=2, length=8)
    assert r.values.shape == (2, 2, 2 * TINY.n_layer + 1)
    assert r.labels == ("embed", "block 0 mid", "block 0 out", "block 1 mid", "block 1 out")
    assert list(r.x) == [0.0, 0.5, 1.0, 1.5, 2.0]
    assert np.all(r.low <= r.mean) and np.all(r.mean <= r.high) and np.all(r.std >= 0)
    with pytest.raises(ValueError):
        r.values[0, 0, 0] = 1.0  # read-only: safe to share between threads and views


def test_stream_norms_equal_norms_of_the_cached_activations():
    """Oracle: the same hook points read with run_with_cache and reduced by hand."""
    model = GPT(TINY, init="xavier-normal", seed=3).eval()
    idx = torch.randint(0, TINY.vocab_size, (3, 10), generator=torch.Generator().manual_seed(1))
    got = stream_norms(model, idx, "l2")
    _, cache = model.run_with_cache(idx, names_filter=boundary_hooks(TINY.n_layer))
    want = [cache[n].norm(dim=-1).mean().item() for n in boundary_hooks(TINY.n_layer)]
    np.testing.assert_allclose(got, want, rtol=1e-5)
    embed = (model.embed(idx) + model.pos_embed(torch.arange(10))).norm(dim=-1).mean().item()
    assert got[0] == pytest.approx(embed, rel=1e-5)
    rms = stream_norms(model, idx, "rms")
    np.testing.assert_allclose(rms, np.asarray(want) / math.sqrt(TINY.n_embd), rtol=1e-5)
    np.testing.assert_allclose(model_residual_norms(model, tokens=idx.numpy()), want, rtol=1e-5)


def test_post_ln_placement_reaches_the_model():
    """Post-LN ends every sub-block with a LayerNorm (weight 1, bias 0 at init), so the
    stream's RMS there is 1; pre-LN's is not."""
    post = residual_norms(TINY.replace(ln_placement="post"), schemes=("gpt2-unscaled",), seeds=(0,),
                          batch=2, length=8, metric="rms")
    np.testing.assert_allclose(post.mean[0, 1:], 1.0, atol=0.01)  # eps=1e-5 vs a small variance
    pre = residual_norms(TINY, schemes=("gpt2-unscaled",), seeds=(0,), batch=2, length=8, metric="rms")
    assert np.all(np.abs(pre.mean[0, 1:] - 1.0) > 0.5)


def test_gpt2_scaling_keeps_a_deep_stream_smaller_than_unscaled():
    r = residual_norms(DEEP, schemes=INIT_SCHEMES, seeds=(0, 1), batch=2, length=16)
    print("\n48 layers × 64 wide, mean L2 norm per token (2 seeds):")
    for s, m, lo, hi in zip(r.schemes, r.mean, r.low, r.high):
        print(f"  {s:16s} embed {m[0]:8.3f}  final {m[-1]:9.3f} [{lo[-1]:.3f}, {hi[-1]:.3f}]  growth ×{m[-1] / m[0]:.1f}")
    gpt2, unscaled = r.curve("gpt2"), r.curve("gpt2-unscaled")
    assert gpt2[0] == pytest.approx(unscaled[0])  # same embedding draw: the difference is the blocks'
    assert r.high[r.schemes.index("gpt2"), -1] < r.low[r.schemes.index("gpt2-unscaled"), -1]
    assert unscaled[-1] / unscaled[0] > 3 * (gpt2[-1] / gpt2[0])


def test_without_residual_connections_the_first_block_starves_of_gradient():
    """GPT-2 scheme, pre-LN, 48 blocks × 64 wide. Without shortcuts each block's output is a
    c_proj scaled by 1/sqrt(2·48) and nothing is added back: the stream shrinks block after
    block until it falls under LayerNorm's eps (LN can no longer rescale it), and the
    gradient dies with the signal. With shortcuts the identity path carries it down.
    (At GPT-2 width the no-shortcut stream stays above eps and LN keeps the ratio near
    that of the residual model: this is a property of narrow, scaled, LN'd stacks.)"""
    kw = dict(schemes=("gpt2",), seeds=(0, 1), batch=2, length=16)
    with_res = gradient_flow(DEEP, **kw).mean[0]
    without = gradient_flow(DEEP.replace(residual=False), **kw).mean[0]
    r_with, r_without = with_res[0] / with_res[-1], without[0] / without[-1]
    print(f"\n‖∂L/∂θ_block0‖ / ‖∂L/∂θ_block47‖: with residuals {r_with:.3g}, without {r_without:.3g}")
    assert r_without < 1e-3
    assert 0.1 < r_with < 10


def test_stream_gradient_matches_autograd_on_a_replaced_activation():
    """Oracle: make block 1's input a leaf tensor (through the hook) and read its .grad."""
    model = GPT(TINY, init="gpt2", seed=0)
    gen = torch.Generator().manual_seed(0)
    idx = torch.randint(0, TINY.vocab_size, (2, 8), generator=gen)
    targets = torch.randint(0, TINY.vocab_size, (2, 8), generator=gen)
    got = layer_gradients(model, idx, targets, "stream")
    leaf = {}

    def swap(x, hook):
        leaf["x"] = x.detach().requires_grad_()
        return leaf["x"]

    with model.hooks([("blocks.1.hook_resid_pre", swap)]):
        logits = model(idx)
        torch.nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten()).backward()
    assert got[1] == pytest.approx(leaf["x"].grad.norm(dim=-1).mean().item(), rel=1e-5)
    params = layer_gradients(model, idx, targets, "params")
    assert len(params) == TINY.n_layer and all(p > 0 for p in params)


@pytest.mark.parametrize("probe", [residual_norms, gradient_flow])
def test_deterministic_for_a_seed(probe):
    kw = dict(schemes=("gpt2", "pytorch-default"), batch=2, length=8)
    a, b = probe(TINY, seeds=(4, 5), **kw), probe(TINY, seeds=(4, 5), **kw)
    np.testing.assert_array_equal(a.values, b.values)
    c = probe(TINY, seeds=(6, 5), **kw)
    assert not np.array_equal(a.values[:, 0], c.values[:, 0])
    np.testing.assert_array_equal(a.values[:, 1], c.values[:, 1])  # a seed's result is its own


@pytest.mark.parametrize("probe", [residual_norms, gradient_flow])
def test_cancel_stops_within_one_step(probe):
    seen, flag = [], []

    def progress(done, total, message):
        seen.append((done, total))
        if done == 2:
            flag.append(True)  # the user presses Cancel during step 2's report

    with pytest.raises(ProbeCancelled, match="after 2 of 6"):
        probe(TINY, schemes=("gpt2", "gpt2-unscaled", "xavier-normal"), seeds=(0, 1), batch=1, length=4,
              progress=progress, cancel=lambda: bool(flag))
    assert seen == [(1, 6), (2, 6)]


def test_given_tokens_are_used_and_checked():
    tokens = np.array([[1, 2, 3, 4], [5, 6, 7, 8]])
    a = residual_norms(TINY, schemes=("gpt2",), seeds=(0,), tokens=tokens)
    b = residual_norms(TINY, schemes=("gpt2",), seeds=(0,), tokens=tokens[:, ::-1].copy())
    assert a.n_tokens == 8 and not np.array_equal(a.values, b.values)
    with pytest.raises(ValueError, match=r"\[0, 500\)"):
        residual_norms(TINY, schemes=("gpt2",), seeds=(0,), tokens=[[1, 999]])


@pytest.mark.parametrize("kwargs, message", [
    (dict(schemes=("gpt3",)), "unknown init scheme 'gpt3'"),
    (dict(schemes=()), "no init scheme selected"),
    (dict(seeds=()), "no seed given"),
    (dict(metric="l1"), "metric must be one of"),
    (dict(length=64), "exceed block_size=32"),
])
def test_bad_requests_say_what_to_change(kwargs, message):
    with pytest.raises(ValueError, match=message):
        residual_norms(TINY, **{"batch": 1, "length": 4, **kwargs})
