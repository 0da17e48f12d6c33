"""The same paths on every device, with the model and the kept attention state on it: HF parity,
greedy generation, attention capture and prefix reuse. CPU always; CUDA where torch sees a GPU,
marked `cuda` (`pytest -m cuda` runs those on a machine that has one).

Safe under pytest-xdist (issue 37: two of these errored with 16 workers): nothing is shared between
tests (no module-scoped model on a device), each builds its small pair itself in a fraction of a
second, and the seeds are fixed per test (tests/conftest.py)."""
from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from gptcore.model.config import GPTConfig
from gptcore.io.convert import from_hf_state_dict
from gptcore.generation.streaming import generate
from gptcore.model.gpt import GPT
from gptcore.interp.probes.attention import AttentionState, capture_attention

transformers = pytest.importorskip("transformers")

DEVICES = ["cpu", pytest.param("cuda", marks=[pytest.mark.cuda, pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA GPU (torch sees none)")])]
pytestmark = pytest.mark.parametrize("device", DEVICES)


def hf_pair(device: str):
    """HF's GPT-2 (eager attention, so it returns patterns) and ours with the same weights, on `device`."""
    torch.manual_seed(0)
    hf_cfg = transformers.GPT2Config(vocab_size=300, n_positions=64, n_embd=64, n_layer=3, n_head=4,
                                     attn_implementation="eager")
    hf = transformers.GPT2LMHeadModel(hf_cfg).eval()
    ours = from_hf_state_dict(hf.state_dict(), hf_config=hf_cfg).eval()
    return hf.to(device), ours.to(device)


def test_logits_and_patterns_match_hf(device):
    hf, ours = hf_pair(device)
    ids = torch.tensor([[5, 17, 250, 3, 3, 99, 42, 7, 1, 200, 11]], device=device)
    with torch.no_grad():
        ref = hf(ids, output_attentions=True)
        logits = ours(ids)
    assert logits.device.type == device
    torch.testing.assert_close(logits, ref.logits, atol=1e-4, rtol=1e-4)
    cap = capture_attention(ours, ids[0].tolist(), full_layers=[2])
    for layer, a in enumerate(ref.attentions):
        np.testing.assert_allclose(cap.thumbnails[layer].numpy(), a[0].cpu().numpy(), atol=1e-5)


def test_greedy_generation_equals_hf_and_cpu(device):
    hf, ours = hf_pair(device)
    prompt = [1, 2, 3, 4]
    got = [s.token for s in generate(ours, prompt, max_new_tokens=20, temperature=0)]
    with torch.no_grad():
        ref = hf.generate(torch.tensor([prompt], device=device), do_sample=False, max_new_tokens=20,
                          min_new_tokens=20, pad_token_id=0, eos_token_id=None,
                          attention_mask=torch.ones(1, 4, device=device, dtype=torch.long))
    assert got == ref[0, 4:].tolist()
    cpu_model = GPT(ours.config, init=None).eval()
    cpu_model.load_state_dict({k: v.cpu() for k, v in ours.state_dict().items()})
    assert got == [s.token for s in generate(cpu_model, prompt, max_new_tokens=20, temperature=0)]


def test_capture_equals_cpu(device):
    cfg = GPTConfig(vocab_size=97, block_size=96, n_layer=3, n_head=4, n_embd=64)
    cpu = GPT(cfg, seed=1).eval()
    gpu = GPT(cfg, seed=1).eval().to(device)
    ids = [(13 * i) % 97 for i in range(90)]
    a = capture_attention(cpu, ids, full_layers=[1], thumb_size=16)
    b = capture_attention(gpu, ids, full_layers=[1], thumb_size=16)
    for name in ("thumbnails", "entropy", "prev_token", "first_token"):
        np.testing.assert_allclose(getattr(b, name).numpy(), getattr(a, name).numpy(), atol=1e-5)
    np.testing.assert_allclose(b.full[1].numpy(), a.full[1].numpy(), atol=1e-5)
    assert b.lens.top_ids.device.type == "cpu"


def test_prefix_reuse_keeps_its_state_on_the_device_and_equals_a_fresh_capture(device):
    cfg = GPTConfig(vocab_size=97, block_size=64, n_layer=3, n_head=4, n_embd=64)
    model = GPT(cfg, seed=2).eval().to(device)
    state = AttentionState(model, full_layers=(0,), thumb_size=8)
    rng = random.Random(0)
    ids, reused = [rng.randrange(97) for _ in range(10)], 0
    for step in range(40):
        got = state.capture(ids)
        want = capture_attention(model, ids, full_layers=(0,), thumb_size=8)
        np.testing.assert_allclose(got.thumbnails.numpy(), want.thumbnails.numpy(), atol=1e-5, err_msg=f"step {step}")
        np.testing.assert_allclose(got.full[0].numpy(), want.full[0].numpy(), atol=1e-5)
        np.testing.assert_allclose(got.entropy.numpy(), want.entropy.numpy(), atol=1e-5)
        reused += got.meta["reused_tokens"]
        op = rng.choice(["append", "delete", "insert"])
        if op == "append":
            ids = ids + [rng.randrange(97) for _ in range(rng.randint(1, 9))]
        elif op == "delete" and len(ids) > 2:
            ids = ids[:-rng.randint(1, 2)]
        else:
            at = rng.randint(0, len(ids))
            ids = ids[:at] + [rng.randrange(97)] + ids[at:]
    assert reused > 0
    assert state._kv.k.device.type == device and state._sums.device.type == device
