"""The training fast path (gptcore/training/speed.py): bfloat16 chosen only where the CPU has it,
attention kept in float32 under CPU autocast. No timing is asserted."""
from __future__ import annotations

import pytest
import torch

from gptcore import GPT, GPTConfig
from gptcore.training import TrainConfig, Trainer
from gptcore.model import cpu
from gptcore.training import speed

NANO = dict(vocab_size=23, block_size=16, n_layer=2, n_head=2, n_embd=32, bias=False, activation="gelu")


@pytest.mark.parametrize("flags, native", [({"avx512f", "avx512_bf16"}, True), ({"amx_bf16"}, True),
                                           ({"avx512f", "avx2"}, False), (set(), False)])
def test_bf16_is_chosen_only_where_the_cpu_has_it(monkeypatch, flags, native):
    monkeypatch.setattr(cpu, "cpu_flags", lambda: frozenset(flags))  # where the flags live (issue 32)
    monkeypatch.setattr(torch.backends.mkldnn, "is_available", lambda: True)
    assert speed.native_bf16("cpu") is native
    assert speed.fast_dtype("cpu") == ("bfloat16" if native else "float32")
    assert speed.fast_dtype("mps") == "float32"


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
