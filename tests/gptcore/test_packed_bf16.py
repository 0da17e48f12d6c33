"""bf16 decoding's fast path (gptcore/model/packed_bf16.py, issue 28): one row through a weight
packed once for oneDNN, proven against F.linear (the slow path it replaces) and against the whole
model's decode with the fast path off."""
import pytest
import torch
import torch.nn.functional as F

from gptcore.generation.streaming import generate
from gptcore.model import linear, packed_bf16
from gptcore.model.config import GPTConfig
from gptcore.model.gpt import GPT
from gptcore.model.linear import Linear
from gptcore.model.cpu import native_bf16

needs_native = pytest.mark.skipif(not native_bf16("cpu"), reason="the packed path is only taken with native bf16")


@pytest.fixture
def fresh_probe(monkeypatch):
    monkeypatch.delenv(linear.ENV_SWITCH, raising=False)
    packed_bf16.forget_probe()
    yield
    packed_bf16.forget_probe()


@needs_native
def test_one_bf16_row_equals_f_linear_and_follows_the_weight(fresh_probe):
    torch.manual_seed(0)
    layer = Linear(96, 160).to(torch.bfloat16)
    x = torch.randn(1, 1, 96).to(torch.bfloat16)  # (B, T, C): one row, as decoding feeds
    with torch.inference_mode():
        got = layer(x)  # (1, 1, 160)
    assert packed_bf16.available() and layer in packed_bf16._packed  # the fast path ran
    with torch.no_grad():
        want = F.linear(x, layer.weight, layer.bias)
        exact = F.linear(x.float(), layer.weight.float(), layer.bias.float())
    assert got.dtype == torch.bfloat16 and got.shape == want.shape
    assert float((got.float() - want.float()).abs().max()) <= 2 ** -7 * float(want.float().abs().max())
    assert float((got.float() - exact).abs().max()) <= 2 ** -7 * float(exact.abs().max())
    with torch.no_grad():
        layer.weight.mul_(-1)  # written in place: the packed copy must not be reused
    with torch.inference_mode():
        flipped = layer(x)
        assert torch.allclose(flipped.float(), F.linear(x, layer.weight, layer.bias).float(), atol=2e-2)
    assert not torch.allclose(flipped.float(), got.float(), atol=1e-1)


@needs_native
def test_prompts_and_gradients_keep_f_linear(fresh_probe):
    layer = Linear(32, 48).to(torch.bfloat16)
    rows = torch.randn(1, 5, 32).to(torch.bfloat16)  # a prompt's rows: F.linear
    with torch.inference_mode():
        assert torch.equal(layer(rows), F.linear(rows, layer.weight, layer.bias))
    assert layer not in packed_bf16._packed
    assert layer(rows[:, :1]).requires_grad  # autograd wanted: the plain path


def test_switched_off_by_the_environment(fresh_probe, monkeypatch):
    monkeypatch.setenv(linear.ENV_SWITCH, "0")
    assert packed_bf16.available() is False


def test_no_native_bf16_means_no_packed_path(fresh_probe, monkeypatch):
    monkeypatch.setattr("gptcore.model.cpu.native_bf16", lambda device_type="cpu": False)
    assert packed_bf16.available() is False
    layer = Linear(16, 8).to(torch.bfloat16)
    x = torch.randn(1, 16).to(torch.bfloat16)
    with torch.inference_mode():
        assert torch.equal(layer(x), F.linear(x, layer.weight, layer.bias))


@needs_native
def test_bf16_decode_with_the_fast_path_gives_the_slow_paths_tokens(fresh_probe, monkeypatch):
    cfg = GPTConfig(vocab_size=300, block_size=64, n_layer=2, n_head=4, n_embd=64)
    model = GPT(cfg, seed=3).eval().to(torch.bfloat16)
    prompt = [5, 17, 101, 42]
    fast = [s.token for s in generate(model, prompt, max_new_tokens=20, temperature=0)]
    assert any(isinstance(k, Linear) for k in packed_bf16._packed.keys())
    monkeypatch.setenv(linear.ENV_SWITCH, "0")
    packed_bf16.forget_probe()
    slow = [s.token for s in generate(model, prompt, max_new_tokens=20, temperature=0)]
    assert fast == slow
