"""Timing helpers every bench shares: medians after a warm-up, the two sides interleaved, and
the machine named.

Why interleaved: the benches run on small shared machines (2 cores, other processes beside
them); a burst of load that lands on one side only would make a ratio of whatever it hit.
Alternating the sides spreads it over both. Why name the CPU: its kind varies between
sessions (AMD EPYC, Intel Xeon with AMX), and a fast path tuned on one may not win on the other.
"""
from __future__ import annotations

import os
import statistics
import time
from typing import Callable

import torch

from gptcore.model.cpu import cpu_name  # noqa: F401 - benches name the machine through here


def machine_line() -> str:
    """One line for a bench's header: CPU, cores, torch threads, OMP_WAIT_POLICY."""
    return (f"{cpu_name()}, {os.cpu_count()} cores, {torch.get_num_threads()} torch threads, "
            f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', 'unset')}, torch {torch.__version__}")


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def timed(fn: Callable[[], object], runs: int, device: torch.device, warmup: int = 1) -> tuple[float, list[float]]:
    """Median seconds of `runs` calls after `warmup` untimed ones (caches, allocator, JIT)."""
    for _ in range(warmup):
        fn()
    sync(device)
    samples = []
    for _ in range(runs):
        samples.append(_once(fn, device))
    return statistics.median(samples), samples


def timed_pair(ours: Callable[[], object], ref: Callable[[], object], runs: int, device: torch.device,
               warmup: int = 1) -> tuple[float, float, list[float], list[float]]:
    """Medians of both sides, their runs interleaved (ours, ref, ours, ref, ...) so that a
    change in machine load in the middle of the bench hits both sides alike."""
    for _ in range(warmup):
        ours()
        ref()
    sync(device)
    ours_all, ref_all = [], []
    for _ in range(runs):
        ours_all.append(_once(ours, device))
        ref_all.append(_once(ref, device))
    return statistics.median(ours_all), statistics.median(ref_all), ours_all, ref_all


def _once(fn: Callable[[], object], device: torch.device) -> float:
    start = time.perf_counter()
    fn()
    sync(device)
    return time.perf_counter() - start


def greedy_decode_pair(ours, hf, prompt: torch.Tensor, new_tokens: int):
    """The two sides of a decode bench (GPT-2's and SmolLM2's): `new_tokens` greedy tokens after
    `prompt` (1, T) with the KV cache — ours through generation.streaming.generate at temperature
    0, HF's through its generate with no EOS stop — and the dict where each run leaves its token
    ids ("ours", "ref"), so the bench times the pair and checks the tokens are the same."""
    from transformers import GenerationConfig

    from gptcore.generation.streaming import generate

    config = GenerationConfig(do_sample=False, max_new_tokens=new_tokens, min_new_tokens=0, eos_token_id=None,
                              pad_token_id=0, use_cache=True)
    mask = torch.ones_like(prompt)
    produced: dict[str, list[int]] = {}

    def run_ours():
        produced["ours"] = [s.token for s in generate(ours, prompt, max_new_tokens=new_tokens, temperature=0)]

    def run_ref():
        with torch.inference_mode():
            tokens = hf.generate(prompt, attention_mask=mask, generation_config=config)
        produced["ref"] = tokens[0, prompt.shape[1]:].tolist()

    return run_ours, run_ref, produced


def ops_launched(fn: Callable[[], object]) -> int:
    """The operators one call of `fn` runs that compute (views, which only describe memory, left out),
    counted by torch's dispatcher: on a GPU each is a kernel launch, so where a forward is
    launch-bound (small prompts) this count predicts the time, and it is the same on any machine."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        n = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if not func.is_view:
                Count.n += 1
            return func(*args, **(kwargs or {}))

    with Count():
        fn()
    return Count.n
