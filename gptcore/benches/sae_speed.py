"""The SAE training step against EleutherAI sparsify's, and the peak memory each side adds.

Both sides train a TopK SAE (d 768, width 6144, k 32: GPT-2 small's residual stream at 8x) on the
same batches of 4,096 rows. Ours is `TopKTrainer.step` (what `fit_sae` runs each step); sparsify's
is its training step as its Trainer runs it: `SparseCoder.forward` with AuxK on the dead latents,
backward of fvu + auxk/32, the decoder gradient's parallel component removed, Adam (torch's, lr as
its trainer sets it), zero_grad, decoder rows renormalised. Both get the same dead-latent mask
(held fixed, so AuxK costs the same on both sides every step), `--dead` of the width.

The sides alternate step by step (benches/timing.py) so load from other processes on a shared
machine falls on both. Peak extra memory is the resident set's peak while a side steps, above
what the process held before (freed memory handed back to the OS first), sampled every
millisecond from /proc/self/statm (Linux).
sparsify must be importable (`pip install eai-sparsify` in the interpreter that runs the bench);
without it ours is timed alone.
"""
from __future__ import annotations

import os
import threading
import time

import torch

from gptcore.benches.timing import timed, timed_pair
from gptcore.interp.sae.topk_step import TopKTrainer

TARGET_RATIO = 1.25


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


def ours_step(d: int, width: int, k: int, dead: torch.Tensor, lr: float):
    """A closure running one of our steps per call, over the batches in turn, dead set `dead`."""
    gen = torch.Generator().manual_seed(0)
    dec = torch.randn(width, d, generator=gen)
    dec /= dec.norm(dim=1, keepdim=True)
    trainer = TopKTrainer(dec, torch.zeros(d), k, lr, dead_tokens=1 << 40)

    def step(x):
        trainer.since_fired.zero_()
        trainer.since_fired[dead] = 1 << 41  # the same latents dead every step
        trainer.step(x)

    return step


def sparsify_step(d: int, width: int, k: int, dead: torch.Tensor, lr: float):
    """The same for sparsify's SparseCoder, or None when sparsify is not installed."""
    try:
        from sparsify import SparseCoder, SparseCoderConfig
    except ImportError:
        return None
    torch.manual_seed(0)
    sae = SparseCoder(d, SparseCoderConfig(num_latents=width, k=k))
    adam = torch.optim.Adam(sae.parameters(), lr=lr)

    def step(x):
        sae.set_decoder_norm_to_unit_norm()
        out = sae(x, dead_mask=dead)
        (out.fvu + out.auxk_loss / 32).backward()
        sae.remove_gradient_parallel_to_decoder_directions()
        adam.step()
        adam.zero_grad()

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


def speed(d=768, width=6144, k=32, batch=4096, runs=8, dead=0.1, say=print) -> dict:
    """Tokens/s of both steps at the given shape, their ratio, and peak extra memory."""
    lr = 2e-4 / (width / 2**14) ** 0.5
    batches = make_batches(d, 4, batch)
    mask = dead_mask(width, dead)
    ours = cycling(ours_step(d, width, k, mask, lr), batches)
    ref_step = sparsify_step(d, width, k, mask, lr)
    out = {"sae_d": d, "sae_width": width, "sae_k": k, "sae_batch": batch, "sae_dead_fraction": dead}
    say(f"SAE training step, d {d}, width {width}, k {k}, batch {batch}, {mask.sum()} latents dead (AuxK):")
    if ref_step is None:
        t_ours, _ = timed(ours, runs, torch.device("cpu"))
        say(f"  ours {batch / t_ours:,.0f} tokens/s ({t_ours * 1e3:.0f} ms/step); sparsify not importable "
            "(pip install eai-sparsify in this interpreter for the ratio)")
    else:
        ref = cycling(ref_step, batches)
        t_ours, t_ref, _, _ = timed_pair(ours, ref, runs, torch.device("cpu"))
        out.update(sae_ref_tokens_s=batch / t_ref, sae_ratio=t_ref / t_ours,
                   sae_ref_peak_mb=peak_extra_bytes(ref) / 2**20)
        say(f"  ours {batch / t_ours:,.0f} tokens/s ({t_ours * 1e3:.0f} ms/step), sparsify {batch / t_ref:,.0f} "
            f"({t_ref * 1e3:.0f} ms/step): {t_ref / t_ours:.2f}x (target >= {TARGET_RATIO}x)")
    out.update(sae_tokens_s=batch / t_ours, sae_peak_mb=peak_extra_bytes(ours) / 2**20)
    line = f"  peak extra memory while stepping: ours {out['sae_peak_mb']:.0f} MB"
    if "sae_ref_peak_mb" in out:
        line += f", sparsify {out['sae_ref_peak_mb']:.0f} MB"
    say(line)
    return out
