"""The oneDNN fast path in gptcore.model.linear: the same logits as the plain path and as HF, and no
way for a missing, broken or changed op to take a forward down. The op is replaced through
torch.ops (where a different torch would differ), and the probe is forgotten around each test."""
import logging

import pytest
import torch
import torch.nn.functional as F

from gptcore import ConfigError, GPTConfig
import gptcore.model.linear as linear
from gptcore.io.convert import from_hf_state_dict
from gptcore.model.gpt import GPT

transformers = pytest.importorskip("transformers")

CFG = GPTConfig(vocab_size=83, block_size=16, n_layer=2, n_head=4, n_embd=32)
REAL_OP = linear._lookup_op()
needs_onednn = pytest.mark.skipif(REAL_OP is None, reason="this torch has no oneDNN linear")


@pytest.fixture(autouse=True)
def fresh_probe(monkeypatch):
    """Each test decides afresh; afterwards the real op is probed again at next use."""
    monkeypatch.delenv(linear.ENV_SWITCH, raising=False)
    linear.forget_probe()
    yield
    linear.forget_probe()


def _replace_op(monkeypatch, fn):
    monkeypatch.setattr(torch.ops.mkldnn, "_linear_pointwise", fn)


class Recorder:
    """Wraps an op (by default the real one), counts calls, and can misbehave from call n on."""

    def __init__(self, fail_from=None, wrong=False):
        self.inner = REAL_OP or (lambda x, w, b, *rest: F.linear(x, w, b))  # a torch without oneDNN: F.linear
        self.fail_from, self.wrong, self.calls, self.gelu_calls = fail_from, wrong, 0, 0

    def __call__(self, x, w, b, *rest):
        self.calls += 1
        self.gelu_calls += bool(rest) and rest[0] == "gelu"  # the MLP's first layer fused with its GELU
        if self.fail_from is not None and self.calls >= self.fail_from:
            raise RuntimeError("_linear_pointwise() takes 7 arguments, 6 given")
        out = self.inner(x, w, b, *rest)
        return out + 0.5 if self.wrong else out


@pytest.fixture(scope="module")
def twins():
    """Our GPT on a random HF GPT-2's weights, HF's logits for one batch, and that batch."""
    hf_cfg = transformers.GPT2Config(vocab_size=CFG.vocab_size, n_positions=CFG.block_size, n_embd=CFG.n_embd,
                                     n_layer=CFG.n_layer, n_head=CFG.n_head, resid_pdrop=0.0, embd_pdrop=0.0,
                                     attn_pdrop=0.0, bos_token_id=0, eos_token_id=0)
    torch.manual_seed(5)
    hf = transformers.GPT2LMHeadModel(hf_cfg).eval()
    gen = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for name, p in hf.named_parameters():  # HF's init leaves biases at 0, which would hide a lost bias
            is_ln_gain = ".ln_" in name and name.endswith("weight")
            p.copy_((1 if is_ln_gain else 0) + 0.15 * torch.randn(p.shape, generator=gen))
    ours = from_hf_state_dict(hf.state_dict(), config=CFG).eval()
    idx = torch.randint(0, CFG.vocab_size, (2, 11), generator=torch.Generator().manual_seed(7))
    with torch.no_grad():
        ref = hf(idx).logits
    assert ref.abs().max() > 1.0
    return ours, ref, idx


def _logits(model, idx):
    with torch.inference_mode():  # no autograd: where the fast path applies
        return model(idx)


@needs_onednn
def test_fast_and_plain_paths_give_hfs_logits(twins, monkeypatch):
    model, ref, idx = twins
    spy = Recorder()
    _replace_op(monkeypatch, spy)
    fast = _logits(model, idx)
    # the probe, the fused-GELU probe (both GELUs), every layer, the head: all on the fast path
    assert spy.calls == 2 + 2 + 4 * CFG.n_layer + 1
    assert spy.gelu_calls == 2 + CFG.n_layer  # each MLP's c_fc ran with its GELU fused
    assert linear.onednn_linear() is spy

    monkeypatch.setenv(linear.ENV_SWITCH, "0")
    linear.forget_probe()
    plain = _logits(model, idx)
    torch.testing.assert_close(fast, plain, rtol=0, atol=1e-5)
    torch.testing.assert_close(fast, ref, rtol=0, atol=1e-5)
    torch.testing.assert_close(plain, ref, rtol=0, atol=1e-5)


@pytest.mark.parametrize("value", ["0", "off", " false "])
def test_switch_off_never_calls_the_op(twins, monkeypatch, value, caplog):
    model, ref, idx = twins
    spy = Recorder()
    _replace_op(monkeypatch, spy)
    monkeypatch.setenv(linear.ENV_SWITCH, value)
    with caplog.at_level(logging.INFO, logger="gptcore.model.linear"):
        torch.testing.assert_close(_logits(model, idx), ref, rtol=0, atol=1e-5)
        _logits(model, idx)
    assert spy.calls == 0 and linear.onednn_linear() is None
    assert [r.getMessage() for r in caplog.records] == ["GPTCORE_ONEDNN=0: linear layers use the plain path (F.linear)"]


def test_an_unreadable_switch_is_an_error_naming_the_variable_and_the_fix(twins, monkeypatch):
    model, _, idx = twins
    monkeypatch.setenv(linear.ENV_SWITCH, "fast please")
    with pytest.raises(ConfigError, match=r"GPTCORE_ONEDNN: 'fast please' .* set it to 0 for the plain path"):
        _logits(model, idx)


@pytest.mark.parametrize("broken,problem", [
    (Recorder(fail_from=1), "it raised RuntimeError: _linear_pointwise() takes 7 arguments"),
    (Recorder(wrong=True), "its values differ from F.linear by up to 0.5"),
    (lambda *a: None, "it returned NoneType"),
], ids=["raises", "wrong-values", "returns-none"])
def test_an_op_failing_its_probe_leaves_correct_logits_and_one_log_line(twins, monkeypatch, caplog, broken, problem):
    model, ref, idx = twins
    _replace_op(monkeypatch, broken)
    with caplog.at_level(logging.INFO, logger="gptcore.model.linear"):
        torch.testing.assert_close(_logits(model, idx), ref, rtol=0, atol=1e-5)
        torch.testing.assert_close(_logits(model, idx), ref, rtol=0, atol=1e-5)
    assert len(caplog.records) == 1 and caplog.records[0].levelno == logging.WARNING
    assert problem in caplog.records[0].getMessage() and "plain path" in caplog.records[0].getMessage()
    if isinstance(broken, Recorder):
        assert broken.calls == 1  # the probe stopped at its first failure; the model never called it
    assert linear.onednn_linear() is None


@needs_onednn
def test_an_op_that_raises_later_falls_back_for_good_with_that_calls_plain_result(twins, monkeypatch, caplog):
    model, ref, idx = twins
    # passes both probes (2 + 2 calls), serves layer 0's attention (2), then raises: first in the fused
    # linear + GELU (call 7), then in the plain linear after it (8). Each path gives up once, for good.
    flaky = Recorder(fail_from=7)
    _replace_op(monkeypatch, flaky)
    with caplog.at_level(logging.INFO, logger="gptcore.model.linear"):
        torch.testing.assert_close(_logits(model, idx), ref, rtol=0, atol=1e-5)
        torch.testing.assert_close(_logits(model, idx), ref, rtol=0, atol=1e-5)
    assert flaky.calls == 8  # never called again after each path saw it raise
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 2 and all("from now on" in m for m in messages)
    assert "fused linear + GELU" in messages[0] and "oneDNN linear" in messages[1]
    assert linear.onednn_linear() is None and linear._gelu_path.get() is None


@needs_onednn
def test_a_wrong_input_raises_torchs_error_and_keeps_the_fast_path(monkeypatch):
    spy = Recorder()
    _replace_op(monkeypatch, spy)
    layer = linear.Linear(24, 40)
    with torch.inference_mode(), pytest.raises(RuntimeError, match="shapes cannot be multiplied"):
        layer(torch.randn(3, 23))  # a caller's mistake, not the op's
    assert linear.onednn_linear() is spy


@needs_onednn
def test_a_hook_on_a_linear_layer_fires_on_the_fast_path_and_can_replace_its_output(twins, monkeypatch):
    model, ref, idx = twins
    spy = Recorder()
    _replace_op(monkeypatch, spy)
    c_attn = model.get_submodule("blocks.0.attn.c_attn")
    seen = []

    def observe(module, inputs, output):
        seen.append(output.clone())
        torch.testing.assert_close(output, F.linear(inputs[0], module.weight, module.bias), rtol=0, atol=1e-5)

    with c_attn.register_forward_hook(observe):
        torch.testing.assert_close(_logits(model, idx), ref, rtol=0, atol=1e-5)
    assert len(seen) == 1 and seen[0].shape == (2, 11, 3 * CFG.n_embd)
    assert spy.calls > 2  # the fast path was on while the hook ran

    # a pre-hook that doubles the input is applied too: c_attn(2x) = 2 c_attn(x) - b
    with c_attn.register_forward_pre_hook(lambda m, inputs: (2 * inputs[0],)), c_attn.register_forward_hook(observe):
        doubled = _logits(model, idx)
    torch.testing.assert_close(seen[1], 2 * seen[0] - c_attn.bias, rtol=0, atol=1e-5)
    assert (doubled - ref).abs().max() > 1e-2
    torch.testing.assert_close(_logits(model, idx), ref, rtol=0, atol=1e-5)  # hooks gone, logits back


@needs_onednn
def test_the_fast_path_steps_aside_for_autograd():
    layer = linear.Linear(24, 40)
    out = layer(torch.randn(2, 7, 24))
    out.sum().backward()
    assert layer.weight.grad is not None and layer.weight.grad.abs().sum() > 0 and layer.bias.grad is not None


def test_every_linear_layer_of_the_model_is_ours():
    """A plain nn.Linear would silently lose the fast path (e.g. after a merge)."""
    model = GPT(GPTConfig(vocab_size=50, block_size=8, n_layer=2, n_head=2, n_embd=16, tie_weights=False))
    layers = [name for name, m in model.named_modules() if isinstance(m, torch.nn.Linear)]
    assert len(layers) == 2 * 4 + 1
    assert all(type(model.get_submodule(name)) is linear.Linear for name in layers)


@needs_onednn
def test_probing_leaves_the_global_random_stream_alone():
    torch.manual_seed(11)
    expected = torch.rand(3)
    torch.manual_seed(11)
    assert linear.onednn_linear() is not None
    torch.testing.assert_close(torch.rand(3), expected, rtol=0, atol=0)


@needs_onednn
def test_one_row_against_a_transposed_weight_takes_f_linear(monkeypatch):
    """Decoding against HF's Conv1D weights loaded in place (transposed views): oneDNN is slow
    there, so the plain path runs; a contiguous weight or several rows keep the fast path."""
    recorder = Recorder()
    _replace_op(monkeypatch, recorder)
    monkeypatch.setattr("gptcore.model.row_choice.measure", lambda op: (1.0, 2.0))  # oneDNN the faster here
    assert linear.onednn_linear() is not None  # probed (two calls), then counted from zero
    recorder.calls = 0
    layer = linear.Linear(24, 40)
    with torch.no_grad():
        layer.weight = torch.nn.Parameter(layer.weight.t().contiguous().t(), requires_grad=False)  # (40, 24) view
    x = torch.randn(1, 1, 24)
    with torch.inference_mode():
        got = layer(x)
        assert recorder.calls == 0
        assert torch.allclose(got, F.linear(x, layer.weight, layer.bias), atol=1e-6)
        layer(torch.randn(1, 5, 24))  # a prompt's rows
        assert recorder.calls == 1
        layer.weight = torch.nn.Parameter(layer.weight.contiguous(), requires_grad=False)
        layer(x)
        assert recorder.calls == 2


@needs_onednn
@pytest.mark.parametrize("times, one_row_calls", [((2.0, 1.0), 0), ((1.0, 2.0), 1)])
def test_one_row_takes_the_library_measured_faster(monkeypatch, times, one_row_calls):
    """One row: oneDNN only where it measured faster than F.linear on this machine (row_choice.py);
    a prompt's rows keep oneDNN either way. Same product on both paths."""
    recorder = Recorder()
    _replace_op(monkeypatch, recorder)
    monkeypatch.setattr("gptcore.model.row_choice.measure", lambda op: times)
    layer = linear.Linear(24, 40)
    x = torch.randn(1, 1, 24)
    with torch.inference_mode():
        assert linear.onednn_linear() is not None
        recorder.calls = 0
        got = layer(x)
        assert recorder.calls == one_row_calls
        assert torch.allclose(got, F.linear(x, layer.weight, layer.bias), atol=1e-5)
        layer(torch.randn(1, 3, 24))
        assert recorder.calls == one_row_calls + 1


@needs_onednn
def test_measuring_the_one_row_choice_leaves_the_global_random_stream_alone():
    from gptcore.model import row_choice

    torch.manual_seed(11)
    expected = torch.rand(3)
    torch.manual_seed(11)
    onednn_s, plain_s = row_choice.measure(linear.onednn_linear(), rows=64, width=32, copies=2, rounds=2)
    assert onednn_s > 0 and plain_s > 0
    assert torch.equal(torch.rand(3), expected)
