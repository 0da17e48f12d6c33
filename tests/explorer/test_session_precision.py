"""Generation precision (explorer/session/precision.py, issue 28): bf16 generation from a bf16
copy where the CPU computes bf16 natively, a clear refusal where it would be emulated, fp32 for
everything else and while an ablation is active."""
import pytest
import torch

from explorer.session import precision
from explorer.session.core import Session
from explorer.session.events import SettingsChanged
from gptcore.training.speed import native_bf16


@pytest.fixture
def session():
    return Session.tiny()


def _events(session):
    seen = []
    session.events.subscribe(seen.append)
    return seen


def test_fp32_is_the_default_and_generation_runs_the_model_itself(session):
    p = session.generation.precision
    assert p.name == "fp32" and p.model_for(session.model) is session.model
    assert p.describe("float32") == ("float32", "weights and every computation in float32")


@pytest.mark.skipif(not native_bf16("cpu"), reason="bf16 is offered only with native bf16")
def test_bf16_generation_runs_a_bf16_copy_of_the_same_weights(session):
    seen = _events(session)
    assert session.generation.precision.set("bf16") == "bf16"
    assert [e.what for e in seen if isinstance(e, SettingsChanged)] == ["precision"]
    copy = session.generation.precision.model_for(session.model)
    assert copy is not session.model and copy.dtype == torch.bfloat16
    assert copy.unembed.weight is copy.embed.weight  # tied as the original
    w = session.model.blocks[0].attn.c_attn.weight
    assert torch.equal(copy.blocks[0].attn.c_attn.weight, w.to(torch.bfloat16))
    assert session.generation.precision.model_for(session.model) is copy  # made once
    ids = session.generation.context("The cat sat").ids
    tokens = list(session.generation.stream(ids, dict(max_new_tokens=5, temperature=0)))
    assert len(tokens) == 5
    logits = session.generation.next_token("The cat sat").logits
    assert logits.dtype.name == "float32" and abs(float(logits.max())) < 1e4
    text, tip = session.generation.precision.describe("float32")
    assert text == "float32 · bf16 generation" and "computed in fp32" in tip
    with torch.no_grad():
        w.mul_(0.5)  # a training step shown writes the weights in place
    fresh = session.generation.precision.model_for(session.model)
    assert fresh is not copy and torch.equal(fresh.blocks[0].attn.c_attn.weight, w.to(torch.bfloat16))


@pytest.mark.skipif(not native_bf16("cpu"), reason="bf16 is offered only with native bf16")
def test_an_ablation_runs_generation_in_fp32(session):
    session.generation.precision.set("bf16")
    session.interp.set_ablation(heads=[(0, 1)])
    assert session.generation.precision.model_for(session.model) is session.model
    assert session.generation.precision.describe("float32")[0].endswith("(fp32 while ablated)")


def test_bf16_is_refused_where_it_would_be_emulated(session, monkeypatch):
    monkeypatch.setattr(precision, "native_bf16", lambda device: False)
    seen = _events(session)
    with pytest.raises(precision.EmulatedBf16, match="emulated in software and run slower than fp32"):
        session.generation.precision.set("bf16")
    assert session.generation.precision.name == "fp32" and seen == []
    with pytest.raises(ValueError, match="choose fp32 or bf16"):
        session.generation.precision.set("fp16")


@pytest.mark.skipif(not native_bf16("cpu"), reason="bf16 is offered only with native bf16")
def test_the_bf16_copy_of_a_modern_model_computes_what_it_does():
    session = Session.tiny(pos_embedding="rope", norm="rmsnorm", mlp="swiglu", n_kv_head=2, bias=False)
    session.generation.precision.set("bf16")
    copy = session.generation.precision.model_for(session.model)
    ids = torch.as_tensor(session.generation.context("The cat sat on the mat").ids)[None]  # (1, T)
    with torch.inference_mode():
        want = session.model(ids, logits="last")[0, -1]  # (V,)
        got = copy(ids, logits="last")[0, -1].float()
    assert copy.dtype == torch.bfloat16 and torch.isfinite(got).all()
    assert float((got - want).abs().max()) < 0.05 * float(want.abs().max()) + 0.05
