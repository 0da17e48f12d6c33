"""Generation precision (explorer/session/precision.py, issues 28 and 34): bf16 generation from a
bf16 copy wherever streamed tokens are measured faster in bf16, a refusal with both figures where
it is measured slower, the measurement cached per machine, torch version and shape, fp32 for
everything else and while an ablation is active.

Which dtype wins on the tiny model depends on this machine, so every test here but the last gives
the session a measurement (the `measure` seam) or a cache entry: both outcomes are tested everywhere.
"""
import json

import pytest
import torch

from explorer.session import precision
from explorer.session.bf16_speed import DecodeSpeed, SpeedCache, speed_key
from explorer.session.core import Session
from explorer.session.events import SettingsChanged
from gptcore.errors import UserError

FASTER = DecodeSpeed(fp32_ms=30.0, bf16_ms=16.0, machine="Test CPU 9000", torch_version=torch.__version__)
SLOWER = DecodeSpeed(fp32_ms=20.0, bf16_ms=50.0, machine="Test CPU 9000", torch_version=torch.__version__)


class FakeMeasure:
    """Returns `speed` and counts its calls; checks it is handed the fp32 model and a bf16 copy."""

    def __init__(self, speed: DecodeSpeed):
        self.speed, self.calls = speed, 0

    def __call__(self, model, bf16_model):
        assert model.dtype == torch.float32 and bf16_model.dtype == torch.bfloat16
        self.calls += 1
        return self.speed


def measured(speed: DecodeSpeed, tmp_path, **config) -> tuple[Session, FakeMeasure]:
    session = Session.tiny(**config)
    fake = FakeMeasure(speed)
    p = session.generation.precision
    p.cache, p.measure = SpeedCache(tmp_path / "speed.json"), fake
    return session, fake


def _events(session):
    seen = []
    session.events.subscribe(seen.append)
    return seen


def test_fp32_is_the_default_and_generation_runs_the_model_itself(tmp_path):
    session, fake = measured(FASTER, tmp_path)
    p = session.generation.precision
    assert p.name == "fp32" and p.model_for(session.model) is session.model
    text, tip = p.describe("float32")
    assert text == "float32" and tip.startswith("weights and every computation in float32")
    assert "measured when it is chosen" in tip and fake.calls == 0  # nothing measured until bf16 is asked for


def test_bf16_where_measured_faster_runs_a_bf16_copy_of_the_same_weights(tmp_path):
    session, fake = measured(FASTER, tmp_path)
    seen = _events(session)
    assert session.generation.precision.set("bf16") == "bf16" and fake.calls == 1
    assert [e.what for e in seen if isinstance(e, SettingsChanged)] == ["precision"]
    copy = session.generation.precision.model_for(session.model)
    assert copy is not session.model and copy.dtype == torch.bfloat16
    assert copy.unembed.weight is copy.embed.weight  # tied as the original
    w = session.model.blocks[0].attn.c_attn.weight
    assert torch.equal(copy.blocks[0].attn.c_attn.weight, w.to(torch.bfloat16))
    assert session.generation.precision.model_for(session.model) is copy  # the copy measured is the one used
    ids = session.generation.context("The cat sat").ids
    assert len(list(session.generation.stream(ids, dict(max_new_tokens=5, temperature=0)))) == 5
    logits = session.generation.next_token("The cat sat").logits
    assert logits.dtype.name == "float32" and abs(float(logits.max())) < 1e4
    text, tip = session.generation.precision.describe("float32")
    assert text == "float32 · bf16 generation" and "computed in fp32" in tip
    assert "bf16 62.5 tok/s (16.0 ms/token), fp32 33.3 tok/s (30.0 ms/token)" in tip and "Test CPU 9000" in tip
    with torch.no_grad():
        w.mul_(0.5)  # a training step shown writes the weights in place
    fresh = session.generation.precision.model_for(session.model)
    assert fresh is not copy and torch.equal(fresh.blocks[0].attn.c_attn.weight, w.to(torch.bfloat16))
    assert fake.calls == 1  # same shape: never measured again


def test_bf16_where_measured_slower_is_refused_with_both_figures(tmp_path):
    session, fake = measured(SLOWER, tmp_path)
    seen = _events(session)
    p = session.generation.precision
    with pytest.raises(precision.Bf16Slower) as refused:
        p.set("bf16")
    message = str(refused.value)
    assert "50.0 ms in bf16 against 20.0 ms in fp32" in message and "20.0 against 50.0 tokens/s" in message
    assert "Test CPU 9000" in message and "avx512" not in message and "emulated" not in message
    assert message.count("fp32.") <= 1 and "stays fp32" not in message  # the caller says what runs instead
    assert isinstance(refused.value, UserError) and refused.value.title == "bf16 is slower here"
    assert p.name == "fp32" and seen == [] and p._copy is None  # the measured copy was let go
    with pytest.raises(precision.Bf16Slower):
        p.set("bf16")
    assert fake.calls == 1  # the second refusal read the measurement
    assert "bf16 20.0 tok/s (50.0 ms/token), fp32 50.0 tok/s (20.0 ms/token)" in p.describe("float32")[1]
    with pytest.raises(ValueError, match="choose fp32 or bf16"):
        p.set("fp16")


def test_the_cache_file_is_read_instead_of_measuring_again(tmp_path):
    first, fake = measured(FASTER, tmp_path)
    first.generation.precision.set("bf16")
    assert fake.calls == 1
    stored = json.loads((tmp_path / "speed.json").read_text())
    key = speed_key(first.model.config, first.model.device)
    assert stored[key]["bf16_ms"] == 16.0 and stored[key]["fp32_ms"] == 30.0
    again, fake_again = measured(SLOWER, tmp_path)  # a new session (a new app start), same file
    assert again.generation.precision.set("bf16") == "bf16"  # FASTER from the file, not SLOWER measured
    assert fake_again.calls == 0


def test_another_torch_version_in_the_cache_measures_again(tmp_path):
    session, fake = measured(SLOWER, tmp_path)
    key = speed_key(session.model.config, session.model.device)
    stale = key.replace(f"torch {torch.__version__}", "torch 1.0.0")
    assert stale != key
    (tmp_path / "speed.json").write_text(json.dumps({stale: dict(FASTER.to_json(), torch="1.0.0")}))
    with pytest.raises(precision.Bf16Slower):
        session.generation.precision.set("bf16")
    assert fake.calls == 1
    assert set(json.loads((tmp_path / "speed.json").read_text())) == {stale, key}


def test_a_cached_one_step_figure_is_measured_again_as_a_stream(tmp_path):
    """Before issue 39 an entry held one decode step's times; they promised more than streaming gives."""
    session, fake = measured(SLOWER, tmp_path)
    key = speed_key(session.model.config, session.model.device)
    (tmp_path / "speed.json").write_text(json.dumps({key: dict(fp32_ms=30.0, bf16_ms=16.0, machine="Test CPU 9000",
                                                               torch=torch.__version__)}))
    with pytest.raises(precision.Bf16Slower):
        session.generation.precision.set("bf16")  # not FASTER from the old entry: SLOWER, streamed now
    assert fake.calls == 1
    stored = json.loads((tmp_path / "speed.json").read_text())[key]
    assert stored["measures"] == "stream" and stored["bf16_ms"] == 50.0


def test_an_unreadable_cache_file_costs_only_a_new_measurement(tmp_path):
    session, fake = measured(FASTER, tmp_path)
    (tmp_path / "speed.json").write_text("{not json")
    assert session.generation.precision.set("bf16") == "bf16" and fake.calls == 1
    key = speed_key(session.model.config, session.model.device)
    assert json.loads((tmp_path / "speed.json").read_text())[key]["bf16_ms"] == 16.0  # written afresh


def test_another_shape_is_measured_and_a_slower_one_generates_in_fp32(tmp_path):
    session, fake = measured(FASTER, tmp_path)
    p = session.generation.precision
    p.set("bf16")
    wide = Session.tiny(n_embd=128)
    key = speed_key(wide.model.config, wide.model.device)
    assert key != speed_key(session.model.config, session.model.device)
    p.cache.put(key, SLOWER)  # as if measured for the wider shape
    assert p.model_for(wide.model) is wide.model  # bf16 chosen, but slower for this one: fp32
    assert fake.calls == 1


def test_an_ablation_runs_generation_in_fp32(tmp_path):
    session, _ = measured(FASTER, tmp_path)
    session.generation.precision.set("bf16")
    session.interp.set_ablation(heads=[(0, 1)])
    assert session.generation.precision.model_for(session.model) is session.model
    assert session.generation.precision.describe("float32")[0].endswith("(fp32 while ablated)")


def test_the_bf16_copy_of_a_modern_model_computes_what_it_does(tmp_path):
    session, _ = measured(FASTER, tmp_path, pos_embedding="rope", norm="rmsnorm", mlp="swiglu", n_kv_head=2,
                          bias=False)
    session.generation.precision.set("bf16")
    copy = session.generation.precision.model_for(session.model)
    ids = torch.as_tensor(session.generation.context("The cat sat on the mat").ids)[None]  # (1, T)
    with torch.inference_mode():
        want = session.model(ids, logits="last")[0, -1]  # (V,)
        got = copy(ids, logits="last")[0, -1].float()
    assert copy.dtype == torch.bfloat16 and torch.isfinite(got).all()
    assert float((got - want).abs().max()) < 0.05 * float(want.abs().max()) + 0.05


def test_the_real_measurement_decides_and_is_remembered(tmp_path):
    """No fake: whichever wins here, set() either takes bf16 or refuses with the figures measured."""
    session = Session.tiny()
    p = session.generation.precision
    p.cache = SpeedCache(tmp_path / "speed.json")
    try:
        p.set("bf16")
    except precision.Bf16Slower as exc:
        assert "ms in bf16 against" in str(exc)
    speed = p.known_speed()
    assert speed is not None and speed.fp32_ms > 0 and speed.bf16_ms > 0
    assert p.name == ("bf16" if speed.bf16_faster else "fp32")
    # what the menu and the status bar say about it are facts of this model: tokens streamed, bytes held
    from gptcore.generation.decode_timing import STREAM_TOKENS
    from gptcore.model.packed_bf16 import packed_bytes

    unique = {t.data_ptr(): t for t in list(session.model.parameters()) + list(session.model.buffers())}
    weights = 2 * sum(t.numel() for t in unique.values())  # every fp32 number once (tied head too), as bf16
    assert speed.tokens == STREAM_TOKENS and speed.copy_bytes - speed.packed_bytes == weights
    if p._copy is not None:  # bf16 won: the copy measured is the one kept, with its packed layers
        assert speed.packed_bytes == packed_bytes(p._copy[1])
    tip = p.describe("float32")[1]
    assert f"Streaming {STREAM_TOKENS} tokens" in tip and f"{speed.copy_bytes / 2 ** 20:,.0f} MiB" in tip
