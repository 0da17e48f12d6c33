"""The training fast path: "auto" on a CPU is decided by timing the model both ways
(gptcore/training/autocast_choice.py), cached per machine and shape, never by the CPU's flags;
attention kept in float32 under CPU autocast. No timing is asserted: fake timings decide, and the
real timer is checked for what it leaves behind."""
from __future__ import annotations

import json

import pytest
import torch

from gptcore import GPT, GPTConfig
from gptcore.training import TrainConfig, Trainer
from gptcore.model import cpu
from gptcore.training import autocast_choice, speed
from gptcore.training.autocast_choice import choose_cpu_autocast

NANO = dict(vocab_size=23, block_size=16, n_layer=2, n_head=2, n_embd=32, bias=False, activation="gelu")


def _never(model, batch_size):
    raise AssertionError("measured although the answer was known")


@pytest.mark.parametrize("flags", [{"avx512f", "avx512_bf16", "amx_bf16"}, set()])
@pytest.mark.parametrize("bf16_ms, fp32_ms, chosen", [(34.0, 47.0, "bfloat16"), (704.0, 70.0, "float32"),
                                                      (46.0, 47.0, "float32")])  # a 2 % gain is noise: fp32
def test_auto_follows_the_timing_whatever_the_flags_say(monkeypatch, tmp_path, flags, bf16_ms, fp32_ms, chosen):
    monkeypatch.setattr(cpu, "cpu_flags", lambda: frozenset(flags))  # where the flags live (issue 32)
    model = GPT(GPTConfig(**NANO), seed=0)
    choice = choose_cpu_autocast(model, 4, cache=tmp_path / "c.json", measure=lambda m, b: (bf16_ms, fp32_ms))
    assert (choice.dtype, choice.source) == (chosen, "measured")
    short = "bf16" if chosen == "bfloat16" else "fp32"
    assert choice.describe().startswith(f"autocast bf16: {bf16_ms:.1f} ms/iter vs fp32 {fp32_ms:.1f} ms/iter → {short}")


def test_the_timing_is_cached_per_machine_and_shape(tmp_path):
    cache = tmp_path / "gptcore" / "speed.json"
    model = GPT(GPTConfig(**NANO), seed=0)
    first = choose_cpu_autocast(model, 4, cache=cache, measure=lambda m, b: (30.0, 50.0))
    again = choose_cpu_autocast(model, 4, cache=cache, measure=_never)
    assert (again.dtype, again.bf16_ms, again.fp32_ms, again.source) == ("bfloat16", 30.0, 50.0, "cached")
    assert first.dtype == again.dtype
    stored = json.loads(cache.read_text())["machines"]
    (machine,) = stored
    assert autocast_choice.cpu_model() in machine and torch.__version__ in machine
    assert list(stored[machine]) == ["L2 H2 d32 T16 V23 B4"]
    wider = GPT(GPTConfig(**{**NANO, "n_embd": 64}), seed=0)  # another shape is timed anew
    assert choose_cpu_autocast(wider, 4, cache=cache, measure=lambda m, b: (90.0, 50.0)).dtype == "float32"
    assert choose_cpu_autocast(model, 8, cache=cache, measure=lambda m, b: (90.0, 50.0)).source == "measured"
    cache.write_text("{not json")  # a damaged cache is measured again and rewritten
    assert choose_cpu_autocast(model, 4, cache=cache, measure=lambda m, b: (90.0, 50.0)).source == "measured"
    assert choose_cpu_autocast(model, 4, cache=cache, measure=_never).dtype == "float32"


def test_the_real_timer_leaves_the_model_and_the_random_state_as_they_were():
    model = GPT(GPTConfig(**{**NANO, "dropout": 0.1}), seed=0)
    model.train()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    state = torch.get_rng_state()
    bf16_ms, fp32_ms = autocast_choice.time_both(model, 2, reps=1)
    assert bf16_ms > 0 and fp32_ms > 0
    assert torch.equal(torch.get_rng_state(), state)  # dropout's draws were put back
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())
    assert all(p.grad is None for p in model.parameters())


def test_an_explicit_dtype_is_obeyed_without_timing(monkeypatch):
    monkeypatch.setattr(autocast_choice, "time_both", _never)
    model = GPT(GPTConfig(**NANO), seed=0)
    for dtype in ("float32", "bfloat16"):
        trainer = Trainer(model, TrainConfig(batch_size=2, gradient_accumulation_steps=1, dtype=dtype, device="cpu"))
        assert trainer.dtype == dtype and trainer.dtype_choice is None


def test_attention_stays_float32_under_cpu_autocast():
    model = GPT(GPTConfig(**NANO), seed=0)
    idx = torch.randint(0, 23, (3, 16), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        reference = model(idx)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits, cache = model.run_with_cache(idx, names_filter=lambda n: n.endswith("hook_z"))
    assert all(z.dtype == torch.float32 for z in cache.values())  # the fused kernel ran in float32
    assert logits.dtype == torch.bfloat16  # ... and the matrix products around it in bfloat16
    torch.testing.assert_close(logits.float(), reference, atol=0.1, rtol=0)


def test_bf16_training_steps_follow_float32_ones():
    """A few bf16 autocast steps land near the float32 ones (the loss curve is the bench's --loss)."""
    cfg = TrainConfig(batch_size=4, gradient_accumulation_steps=1, max_iters=20, learning_rate=3e-3, min_lr=3e-4,
                      warmup_iters=2, lr_decay_iters=20, device="cpu")
    g = torch.Generator().manual_seed(2)
    data = torch.randint(0, 23, (4, 17), generator=g)
    x, y = data[:, :-1], data[:, 1:]
    losses = {}
    for dtype in ("float32", "bfloat16"):
        trainer = Trainer(GPT(GPTConfig(**NANO), seed=0), cfg.replace(dtype=dtype))
        losses[dtype] = [trainer.step(x, y) for _ in range(20)]
    assert losses["float32"][-1] < losses["float32"][0] - 0.5  # it learns the batch
    for a, b in zip(losses["float32"], losses["bfloat16"]):
        assert b == pytest.approx(a, abs=0.05)


def test_a_first_forward_under_autocast_keeps_the_onednn_inference_path():
    """Linear's oneDNN path stands aside under CPU autocast; before, its one-time probe ran there,
    compared a float32 result with autocast's bfloat16 one and switched the path off for good."""
    import gptcore.model.linear as linear

    if linear._lookup_op() is None:
        pytest.skip("this torch has no oneDNN linear")
    model = GPT(GPTConfig(**NANO), seed=0)
    linear.forget_probe()
    try:
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
            model(torch.zeros(1, 4, dtype=torch.long))
        with torch.no_grad():
            model(torch.zeros(1, 4, dtype=torch.long))
        assert linear.onednn_linear() is not None
    finally:
        linear.forget_probe()


def test_a_run_records_the_timings_that_chose_its_dtype(tmp_path, capsys):
    from gptcore.train import main
    from gptcore.training.run import RunFolder
    from gptcore.training.trace import read_trace

    text = tmp_path / "t.txt"
    text.write_text("the cat sat on the mat. " * 200, encoding="utf-8")
    out = tmp_path / "run"
    assert main([f"--data={text}", f"--out_dir={out}", "--n_layer=1", "--n_head=2", "--n_embd=16", "--block_size=16",
                 "--batch_size=2", "--eval_iters=1", "--max_iters=2", "--probe_interval=0", "--warmup_iters=1",
                 "--lr_decay_iters=2", "--device=cpu"]) == 0  # dtype: auto
    meta = RunFolder(out).read_meta()
    timed = meta["autocast"]
    assert timed["bf16_ms"] > 0 and timed["fp32_ms"] > 0 and timed["source"] in ("measured", "cached")
    faster = timed["bf16_ms"] < autocast_choice.MARGIN * timed["fp32_ms"]
    assert meta["dtype"] == timed["dtype"] == ("bfloat16" if faster else "float32")
    said = [r["text"] for r in read_trace(out / "trace.jsonl") if r["kind"] == "message"]
    short = "bf16" if faster else "fp32"
    assert any(t.startswith("autocast bf16: ") and f"ms/iter → {short}" in t for t in said)
    assert f"ms/iter → {short}" in capsys.readouterr().out
