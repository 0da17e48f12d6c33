"""The bench names its machine and measures decode against the memory-bandwidth floor
(gptcore/benches/hardware.py, issue 28). No timing is asserted."""
import math

import torch

from gptcore.benches import hardware
from gptcore.model.config import GPTConfig
from gptcore.model.gpt import GPT


def test_cpu_features_list_only_the_flags_that_choose_fast_paths():
    r = hardware.cpu_features()
    assert set(r["cpu_flags"]) <= set(hardware.RELEVANT_FLAGS)
    assert r["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    line = hardware.flags_line(dict(cpu_flags=["avx2", "avx512f", "avx512_bf16"], cpu_capability="AVX512",
                                    native_bf16=True))
    assert line == "flags: avx2 avx512f avx512_bf16 (no amx_tile, amx_bf16); torch AVX512; native bf16: yes"
    assert "native bf16: no" in hardware.flags_line(dict(cpu_flags=[], cpu_capability="DEFAULT", native_bf16=False))


def test_bandwidth_is_measured_both_ways():
    r = hardware.measure_bandwidth("cpu", **hardware.QUICK_SIZES)
    for key in ("bandwidth_copy_gb_s", "bandwidth_gemv_gb_s"):
        assert math.isfinite(r[key]) and r[key] > 0
    assert r["bandwidth_gemv_mb"] == (768 * 1024 // 768) * 768 * 4 / 2**20


def test_bytes_per_token_count_the_tied_head_once_and_skip_the_position_table():
    cfg = GPTConfig(vocab_size=100, block_size=32, n_layer=2, n_head=2, n_embd=16)
    model = GPT(cfg)
    total = sum(p.numel() for p in model.parameters())  # tied: embed == unembed, counted once
    assert hardware.bytes_per_token(model) == 4 * (total - 32 * 16)
    assert hardware.bytes_per_token(model.to(torch.bfloat16)) == 2 * (total - 32 * 16)
    r = hardware.decode_vs_floor("decode", model.float(), tok_s=10.0, bandwidth_gb_s=1.0)
    assert math.isclose(r["decode_of_floor"], 10.0 / (1e9 / r["decode_bytes_per_token"]))
    assert math.isclose(r["decode_gb_s"], 10.0 * r["decode_bytes_per_token"] / 1e9)
    notes = hardware.table_notes(dict(bandwidth_copy_gb_s=20.0, bandwidth_gemv_gb_s=10.0, bandwidth_gemv_mb=470.0, **r))
    assert "fp32 gemv over 470 MB 10.0 GB/s" in notes[0] and "of it (target >= 0.7)" in notes[1]
