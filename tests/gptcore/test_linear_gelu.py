"""The MLP's first layer and its GELU in one oneDNN call (linear.py, issue 34): the same values as the
unfused path it replaces (F.gelu after the linear), and never where something reads the pre-activation
(hook_pre, a hook on c_fc, a global module hook), needs gradients, or decodes one row."""
import logging

import pytest
import torch
import torch.nn.functional as F

import gptcore.model.linear as linear
from gptcore import GPTConfig
from gptcore.model.gpt import GPT

from tests.gptcore.test_linear import REAL_OP, fresh_probe, needs_onednn  # noqa: F401 - fresh_probe: autouse, here too


class GeluSpy:
    """The real op, counting the calls that fuse a GELU; `refuse_gelu` makes those raise."""

    def __init__(self, refuse_gelu=False):
        self.fused, self.refuse_gelu = 0, refuse_gelu

    def __call__(self, x, w, b, *rest):
        if rest and rest[0] == "gelu":
            self.fused += 1
            if self.refuse_gelu:
                raise RuntimeError("unknown post-op 'gelu'")
        return REAL_OP(x, w, b, *rest)


@pytest.fixture
def spy(monkeypatch):
    s = GeluSpy()
    monkeypatch.setattr(torch.ops.mkldnn, "_linear_pointwise", s)
    return s


def _model(activation: str) -> GPT:
    cfg = GPTConfig(vocab_size=61, block_size=16, n_layer=2, n_head=2, n_embd=32, activation=activation)
    model = GPT(cfg, seed=3).eval()
    with torch.no_grad():  # MLP inputs of size ~1-3, where the two GELUs and any error show
        for block in model.blocks:
            block.mlp.c_fc.weight.normal_(0, 0.5, generator=torch.Generator().manual_seed(4))
            block.mlp.c_fc.bias.normal_(0, 0.5, generator=torch.Generator().manual_seed(5))
    return model


def _unfused_mlp(mlp, x):
    """The oracle: the linear, then torch's GELU, then the second linear (what the MLP computed before)."""
    h = F.gelu(F.linear(x, mlp.c_fc.weight, mlp.c_fc.bias), approximate=mlp.approximate)
    return F.linear(h, mlp.c_proj.weight, mlp.c_proj.bias)


@needs_onednn
@pytest.mark.parametrize("activation", ["gelu_tanh", "gelu"])
def test_the_fused_mlp_equals_the_unfused_path(spy, activation):
    mlp = _model(activation).blocks[0].mlp
    x = torch.randn(2, 9, 32, generator=torch.Generator().manual_seed(6))
    post = []
    with torch.inference_mode(), mlp.hook_post.add_hook(lambda t, hook: post.append(t.clone())):
        got = mlp(x)  # hook_post listening leaves the fusion on: it reads the GELU's output
    assert spy.fused == 2 + 1  # the probe (both GELUs), then this call
    with torch.no_grad():
        pre = F.linear(x, mlp.c_fc.weight, mlp.c_fc.bias)  # (2, 9, 128)
        assert pre.abs().max() > 2.0  # where the two GELUs part ways (by ~1e-3)
        torch.testing.assert_close(post[0], F.gelu(pre, approximate=mlp.approximate), rtol=0, atol=1e-5)
        torch.testing.assert_close(got, _unfused_mlp(mlp, x), rtol=0, atol=1e-5)


@needs_onednn
def test_whole_model_logits_fused_equal_the_hooked_unfused_forward(spy):
    """A no-op hook on every hook_pre makes every MLP take the unfused path: same logits."""
    model = _model("gelu_tanh")
    idx = torch.randint(0, 61, (2, 12), generator=torch.Generator().manual_seed(7))
    with torch.inference_mode():
        fused = model(idx)
        assert spy.fused == 2 + model.config.n_layer
        with model.hooks([(lambda n: n.endswith("mlp.hook_pre"), lambda t, hook: None)]):
            unfused = model(idx)
    assert spy.fused == 2 + model.config.n_layer  # nothing fused while hook_pre listened
    torch.testing.assert_close(fused, unfused, rtol=0, atol=1e-5)


@needs_onednn
@pytest.mark.parametrize("where", ["hook_pre", "c_fc", "global"])
def test_whoever_reads_the_pre_activation_sees_it_and_nothing_is_fused(spy, where):
    model = _model("gelu_tanh")
    mlp = model.blocks[0].mlp
    x = torch.randn(1, 5, 32, generator=torch.Generator().manual_seed(8))
    seen = []
    if where == "hook_pre":
        handle = mlp.hook_pre.add_hook(lambda t, hook: seen.append(t.clone()))
    elif where == "c_fc":
        handle = mlp.c_fc.register_forward_hook(lambda m, i, out: seen.append(out.clone()))
    else:
        handle = torch.nn.modules.module.register_module_forward_hook(
            lambda m, i, out: seen.append(out.clone()) if m is mlp.c_fc else None)
    try:
        with torch.inference_mode():
            got = mlp(x)
    finally:
        handle.remove()
    assert spy.fused == 0
    assert len(seen) == 1
    torch.testing.assert_close(seen[0], F.linear(x, mlp.c_fc.weight, mlp.c_fc.bias), rtol=0, atol=1e-5)  # before GELU
    torch.testing.assert_close(got, _unfused_mlp(mlp, x), rtol=0, atol=1e-5)


@needs_onednn
def test_gradients_and_one_row_take_the_unfused_path(spy):
    mlp = _model("gelu_tanh").blocks[0].mlp
    x = torch.randn(1, 4, 32, requires_grad=True)
    mlp(x).sum().backward()
    assert x.grad is not None and mlp.c_fc.weight.grad.abs().sum() > 0
    with torch.inference_mode():
        row = torch.randn(1, 1, 32)
        torch.testing.assert_close(mlp(row), _unfused_mlp(mlp, row), rtol=0, atol=1e-5)
    assert spy.fused == 0  # decoding keeps linear's measured one-row choice; autograd never fuses


@needs_onednn
def test_an_op_refusing_the_gelu_keeps_the_linear_fast_path_and_logs_once(monkeypatch, caplog):
    refusing = GeluSpy(refuse_gelu=True)
    monkeypatch.setattr(torch.ops.mkldnn, "_linear_pointwise", refusing)
    mlp = _model("gelu").blocks[0].mlp
    x = torch.randn(1, 6, 32)
    with caplog.at_level(logging.INFO, logger="gptcore.model.linear"), torch.inference_mode():
        torch.testing.assert_close(mlp(x), _unfused_mlp(mlp, x), rtol=0, atol=1e-5)
        torch.testing.assert_close(mlp(x), _unfused_mlp(mlp, x), rtol=0, atol=1e-5)
    assert refusing.fused == 1  # the probe's first GELU, never again
    assert [r.levelno for r in caplog.records] == [logging.WARNING]
    assert "unknown post-op 'gelu'" in caplog.records[0].getMessage()
    assert linear.onednn_linear() is refusing  # the plain linear stays on oneDNN

