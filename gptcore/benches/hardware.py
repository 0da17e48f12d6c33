"""The machine beside every figure: the CPU's relevant flags, its measured memory bandwidth, and
decode as a fraction of the floor that bandwidth sets.

Why: a ratio means nothing without its machine. The fast paths were tuned on AMD EPYC and missed
on Intel Xeon (AMX); bf16 is only fast where the CPU has avx512_bf16 or AMX. And greedy decode of
GPT-2 small reads every weight once per token (~500 MB in fp32), so no implementation decodes
faster than bandwidth ÷ weight bytes: the floor. Reporting achieved GB/s says how far from it we
are, which a ratio to transformers alone cannot (both could be slow).

Bandwidth is measured two ways, each the best of a few runs: a large tensor copy (read + write),
and a matrix-vector product over a matrix as large as GPT-2 small's weights (what decode does).
The gemv figure sets the floor.
"""
from __future__ import annotations

import time

import torch

from gptcore.model.cpu import cpu_flags, native_bf16

RELEVANT_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16")
GPT2_SMALL_WEIGHTS = 124_439_808 - 1024 * 768  # every parameter but the position table: read once per token
COPY_BYTES = 256 * 2**20


def cpu_features() -> dict:
    """Which of the flags that choose our fast paths this CPU has, and torch's own verdict."""
    flags = cpu_flags()
    return dict(cpu_flags=[f for f in RELEVANT_FLAGS if f in flags],
                cpu_capability=torch.backends.cpu.get_cpu_capability(),
                native_bf16=native_bf16("cpu"))


def flags_line(r: dict) -> str:
    """'flags: avx2 avx512f avx512_bf16 (no amx_tile, amx_bf16); torch AVX512; native bf16: yes'."""
    have = r.get("cpu_flags", [])
    missing = [f for f in RELEVANT_FLAGS if f not in have]
    return (f"flags: {' '.join(have) or 'none of ' + ', '.join(RELEVANT_FLAGS)}"
            f"{' (no ' + ', '.join(missing) + ')' if have and missing else ''}; torch {r.get('cpu_capability', '?')}; "
            f"native bf16: {'yes' if r.get('native_bf16') else 'no'}")


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _best(fn, device: torch.device, runs: int) -> float:
    fn()
    _sync(device)
    best = float("inf")
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        _sync(device)
        best = min(best, time.perf_counter() - start)
    return best


def measure_bandwidth(device, weights: int = GPT2_SMALL_WEIGHTS, copy_bytes: int = COPY_BYTES,
                      runs: int = 5) -> dict:
    """GB/s of a `copy_bytes` copy (bytes read + written) and of an fp32 gemv over `weights`
    numbers (bytes of the matrix read; MKL's or oneDNN's, whichever is faster), the best of `runs`
    each: the best is what the memory can do; load from other processes only slows a run down."""
    device = torch.device(device)
    src = torch.empty(copy_bytes // 4, dtype=torch.float32, device=device).fill_(1.0)
    dst = torch.empty_like(src)
    copy_s = _best(lambda: dst.copy_(src), device, runs)
    del src, dst
    width = 768
    matrix = torch.empty(max(1, weights // width), width, dtype=torch.float32, device=device).fill_(0.5)  # (rows, C)
    x = torch.ones(1, width, dtype=torch.float32, device=device)  # (1, C)
    with torch.inference_mode():
        gemv_s = _best(lambda: torch.nn.functional.linear(x, matrix), device, runs)  # (1, rows)
        if device.type == "cpu" and torch.backends.mkldnn.is_available():  # the faster of MKL's and oneDNN's
            try:
                op = torch.ops.mkldnn._linear_pointwise
                gemv_s = min(gemv_s, _best(lambda: op(x, matrix, None, "none", [], ""), device, runs))
            except (AttributeError, RuntimeError):
                pass
    gemv_bytes = matrix.numel() * 4
    del matrix
    return dict(bandwidth_copy_gb_s=2 * copy_bytes / copy_s / 1e9, bandwidth_gemv_gb_s=gemv_bytes / gemv_s / 1e9,
                bandwidth_gemv_mb=gemv_bytes / 2**20)


def bytes_per_token(model) -> int:
    """Weight bytes one decode step reads: every parameter once (a tied head is one tensor, read
    as the head), but not the position table, of which one row is read."""
    pos = getattr(model, "pos_embed", None)
    skip = {id(p) for p in pos.parameters()} if isinstance(pos, torch.nn.Embedding) else set()
    return sum(p.numel() * p.element_size() for p in model.parameters() if id(p) not in skip)


def decode_vs_floor(prefix: str, model, tok_s: float, bandwidth_gb_s: float) -> dict:
    """`{prefix}_gb_s` achieved and `{prefix}_of_floor`: tok/s ÷ (bandwidth ÷ bytes per token)."""
    per_token = bytes_per_token(model)
    floor_tok_s = bandwidth_gb_s * 1e9 / per_token
    return {f"{prefix}_bytes_per_token": per_token, f"{prefix}_gb_s": tok_s * per_token / 1e9,
            f"{prefix}_floor_tok_s": floor_tok_s, f"{prefix}_of_floor": tok_s / floor_tok_s}


def table_notes(r: dict) -> list[str]:
    """The bandwidth and floor lines of the bench's table (when measured)."""
    if "bandwidth_gemv_gb_s" not in r:
        return []
    lines = [f"memory bandwidth: copy {r['bandwidth_copy_gb_s']:.1f} GB/s, fp32 gemv over "
             f"{r['bandwidth_gemv_mb']:.0f} MB {r['bandwidth_gemv_gb_s']:.1f} GB/s (best runs; the gemv sets the floor)"]
    for prefix, label in (("decode", "fp32 decode"), ("bf16_decode", "bf16 decode")):
        if f"{prefix}_of_floor" in r:
            lines.append(f"{label}: {r[f'{prefix}_gb_s']:.1f} GB/s achieved "
                         f"({r[f'{prefix}_bytes_per_token'] / 1e6:.0f} MB/token), "
                         f"floor {r[f'{prefix}_floor_tok_s']:.1f} tok/s, {r[f'{prefix}_of_floor']:.2f} of it (target >= 0.7)")
    return lines


QUICK_SIZES = dict(weights=768 * 1024, copy_bytes=4 * 2**20, runs=2)  # --quick: checks it runs; means nothing
