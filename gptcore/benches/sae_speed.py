"""The SAE training step against EleutherAI sparsify's, and the peak memory each side adds.

Both sides train a TopK SAE (d 768, k 32: GPT-2 small's residual stream; width 6,144 on a CPU,
24,576 on a GPU, as issue 37 measured) on the same batches of 4,096 rows, on the same device.
Ours is `TopKTrainer.step` (what `fit_sae` runs each step); sparsify's is its training step as its
Trainer runs it: `SparseCoder.forward` (its own bfloat16 autocast on CUDA) with AuxK on the dead
latents, backward of fvu + auxk/32, the decoder gradient's parallel component removed, Adam
(torch's, lr as its trainer sets it), zero_grad, decoder rows renormalised; on CUDA under the
float32 matmul precision "high" its Trainer sets (restored after each of its steps). Both get the
same dead-latent mask (held fixed, so AuxK costs the same on both sides every step), `dead` of
the width.

The sides alternate step by step (benches/timing.py; on a GPU each timed step ends with a
device sync) so load from other processes on a shared machine falls on both. Peak extra memory:
on a CPU the resident set's peak while a side steps, above what the process held before (freed
memory handed back to the OS first), sampled every millisecond from /proc/self/statm (Linux); on
a GPU the allocator's peak above what was allocated before.
sparsify must be importable (`pip install eai-sparsify` in the interpreter that runs the bench;
it is no dependency of this project); without it ours is timed alone.
"""
from __future__ import annotations

import os
import threading
import time

import torch

from gptcore.benches.timing import timed, timed_pair
from gptcore.interp.sae.topk_step import TopKTrainer

TARGET_RATIO = 1.25
WIDTH = {"cpu": 6144, "cuda": 24576}  # default width per device type


def make_batches(d: int, n: int, batch: int, seed: int = 0) -> list[torch.Tensor]:
    """`n` batches (batch, d) of sparse sums of random unit directions, at mean norm sqrt(d)."""
    gen = torch.Generator().manual_seed(seed)
    dirs = torch.randn(4 * d, d, generator=gen)
    dirs /= dirs.norm(dim=1, keepdim=True)
    out = []
    for _ in range(n):
        codes = torch.rand(batch, 4 * d, generator=gen).relu_().pow_(8)  # (batch, 4d): mostly near 0
        x = codes @ dirs + 0.05 * torch.randn(batch, d, generator=gen)  # (batch, d)
        out.append(x * (d ** 0.5 / x.norm(dim=1).mean()))
    return out


def dead_mask(width: int, fraction: float, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed + 1)
    return torch.rand(width, generator=gen) < fraction  # (width,)


def ours_step(d: int, width: int, k: int, dead: torch.Tensor, lr: float, device=torch.device("cpu")):
    """A closure running one of our steps per call, over the batches in turn, dead set `dead`."""
    gen = torch.Generator().manual_seed(0)
    dec = torch.randn(width, d, generator=gen)
    dec /= dec.norm(dim=1, keepdim=True)
    trainer = TopKTrainer(dec.to(device), torch.zeros(d), k, lr, dead_tokens=1 << 40, dead_every=1 << 40)
    trainer.since_fired[dead.to(device)] = 1 << 41  # the same latents dead at every step:
    trainer.refresh_dead()  # read once, never again (dead_every), as sparsify's mask is given

    def step(x):
        trainer.step(x)

    return step


def sparsify_step(d: int, width: int, k: int, dead: torch.Tensor, lr: float, device=torch.device("cpu")):
    """The same for sparsify's SparseCoder, or None when sparsify is not installed."""
    try:
        from sparsify import SparseCoder, SparseCoderConfig
    except ImportError:
        return None
    torch.manual_seed(0)
    sae = SparseCoder(d, SparseCoderConfig(num_latents=width, k=k), device=device)
    adam = torch.optim.Adam(sae.parameters(), lr=lr)
    dead = dead.to(device)

    def step(x):
        before = torch.get_float32_matmul_precision()
        if device.type == "cuda":
            torch.set_float32_matmul_precision("high")  # as sparsify's Trainer.fit sets it
        try:
            sae.set_decoder_norm_to_unit_norm()
            out = sae(x, dead_mask=dead)
            (out.fvu + out.auxk_loss / 32).backward()
            sae.remove_gradient_parallel_to_decoder_directions()
            adam.step()
            adam.zero_grad()
        finally:
            torch.set_float32_matmul_precision(before)

    return step


def cycling(step, batches):
    """A no-argument closure: each call steps on the next batch."""
    state = {"i": 0}

    def run():
        step(batches[state["i"] % len(batches)])
        state["i"] += 1

    return run


def rss_bytes() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        return 0


def release_freed_memory() -> None:
    """Hand memory the process freed back to the OS (glibc's malloc_trim), so that a later peak is
    measured from a low base; without it, memory freed earlier (a model trained before) is
    reused unseen and the peak reads too low. A no-op where there is no glibc."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def peak_extra_bytes(fn, calls: int = 2) -> int:
    """The resident set's peak above its level before, while `fn` runs `calls` times."""
    release_freed_memory()
    base = rss_bytes()
    peak = [base]
    done = threading.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], rss_bytes())
            time.sleep(0.001)

    watcher = threading.Thread(target=sample, daemon=True)
    watcher.start()
    try:
        for _ in range(calls):
            fn()
    finally:
        done.set()
        watcher.join()
    return max(0, peak[0] - base)


def peak_device_bytes(fn, device: torch.device, calls: int = 2) -> int:
    """A GPU allocator's peak above what it held before, while `fn` runs `calls` times."""
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    base = torch.cuda.memory_allocated(device)
    for _ in range(calls):
        fn()
    torch.cuda.synchronize(device)
    return max(0, torch.cuda.max_memory_allocated(device) - base)


def peak_bytes(fn, device: torch.device) -> int:
    return peak_device_bytes(fn, device) if device.type == "cuda" else peak_extra_bytes(fn)


def speed(d=768, width=None, k=32, batch=4096, runs=8, dead=0.1, say=print, device="cpu") -> dict:
    """Tokens/s of both steps at the given shape on `device`, their ratio, and peak extra memory."""
    device = torch.device(device)
    width = width or WIDTH.get(device.type, WIDTH["cuda"])
    lr = 2e-4 / (width / 2**14) ** 0.5
    batches = [b.to(device) for b in make_batches(d, 4, batch)]
    mask = dead_mask(width, dead)
    ours = cycling(ours_step(d, width, k, mask, lr, device), batches)
    ref_step = sparsify_step(d, width, k, mask, lr, device)
    out = {"sae_device": str(device), "sae_d": d, "sae_width": width, "sae_k": k, "sae_batch": batch,
           "sae_dead_fraction": dead}
    say(f"SAE training step on {device}, d {d}, width {width}, k {k}, batch {batch}, {mask.sum()} latents dead (AuxK):")
    if ref_step is None:
        t_ours, _ = timed(ours, runs, device)
        say(f"  ours {batch / t_ours:,.0f} tokens/s ({t_ours * 1e3:.1f} ms/step); sparsify not importable "
            "(pip install eai-sparsify in this interpreter for the ratio)")
    else:
        ref = cycling(ref_step, batches)
        t_ours, t_ref, _, _ = timed_pair(ours, ref, runs, device)
        out.update(sae_ref_tokens_s=batch / t_ref, sae_ratio=t_ref / t_ours, sae_ref_peak_mb=peak_bytes(ref, device) / 2**20)
        say(f"  ours {batch / t_ours:,.0f} tokens/s ({t_ours * 1e3:.1f} ms/step), sparsify {batch / t_ref:,.0f} "
            f"({t_ref * 1e3:.1f} ms/step): {t_ref / t_ours:.2f}x (target >= {TARGET_RATIO}x)")
    out.update(sae_tokens_s=batch / t_ours, sae_peak_mb=peak_bytes(ours, device) / 2**20)
    line = f"  peak extra memory while stepping: ours {out['sae_peak_mb']:.0f} MB"
    if "sae_ref_peak_mb" in out:
        line += f", sparsify {out['sae_ref_peak_mb']:.0f} MB"
    say(line)
    return out
