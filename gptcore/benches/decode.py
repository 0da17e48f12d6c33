"""Greedy decoding against HF transformers' `generate`, the first token's extra time, and the app's
streamed path (`python -m gptcore.bench`'s decode lines; `--decode` runs only these).

- decode: tokens/s for `new_tokens` greedy tokens after the prompt, KV-cached, our streaming
  `generate` (with each step's probability and alternatives) vs HF `generate`, interleaved. On a
  CPU our plain path; on CUDA the captured step replayed (generation/decode_graphs.py). Targets:
  >= 1.1x HF on a CPU (issue 28); on CUDA >= 5x HF and >= 1,000 tok/s (issue 37, GPT-2 small fp32).
- first token: the first generation for a shape, cold (graphs forgotten: what a user's first
  Generate pays, capture included), its capture time as the step reports it, and the next
  generation's first token (the graphs kept). On a CPU nothing is captured.
- app stream: the explorer session's streamed generation without Qt (the lock per token, the
  version check, each token's text and its alternatives' texts) against `generate` on the same
  model, both rated as the pane rates them (tokens after the first over their time), measured in
  a child process (`python -m explorer.benches.stream`): gptcore imports nothing of the app.
  Target: the app keeps >= 0.9 of the raw rate.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import torch

from gptcore.benches.timing import greedy_decode_pair, sync, timed_pair

TARGETS = {"decode": (">=", 1.1), "decode_cuda": (">=", 5.0), "decode_cuda_tok_s": (">=", 1000.0),
           "app_stream_share": (">=", 0.9)}


def bench_decode(hf, ours, prompt: torch.Tensor, plan, device, runs: int | None = None) -> dict:
    """decode_* figures: ours vs HF's generate, interleaved medians, and whether the tokens agree."""
    n = plan.new_tokens
    run_ours, run_ref, produced = greedy_decode_pair(ours, hf, prompt, n)
    ours_s, ref_s, ours_all, ref_all = timed_pair(run_ours, run_ref, runs or plan.decode_runs, device)
    return dict(decode_tok_s_ours=n / ours_s, decode_tok_s_ref=n / ref_s, decode_ratio=ref_s / ours_s,
                decode_same_tokens=produced["ours"] == produced["ref"], decode_new_tokens=n, tokens_ours=produced["ours"],
                decode_prompt_tokens=int(prompt.shape[1]),
                decode_samples_s_ours=ours_all, decode_samples_s_ref=ref_all)


def first_token(ours, prompt: torch.Tensor, device) -> dict:
    """The first token's time, cold (no graphs kept for this model) and warm (kept), and the
    capture time the cold step reports."""
    from gptcore.generation import decode_graphs
    from gptcore.generation.streaming import generate

    def once() -> tuple[float, float]:
        start = time.perf_counter()
        stream = generate(ours, prompt, max_new_tokens=2, temperature=0)
        step = next(stream)
        sync(device)
        seconds = time.perf_counter() - start
        stream.close()
        return seconds, step.capture_s

    decode_graphs.forget(ours)
    cold, capture = once()
    warm, _ = once()
    engine = "graph" if decode_graphs.captured(ours) else "plain"
    return dict(decode_first_token_s_cold=cold, decode_first_token_s_warm=warm, decode_capture_s=capture,
                decode_engine=engine)


def app_stream(device, quick: bool) -> dict:
    """app_stream_* figures from `python -m explorer.benches.stream --json` in a child process
    (app_stream_error with its last line when that cannot run, e.g. no explorer package)."""
    root = str(Path(__file__).resolve().parents[2])  # the checkout holding gptcore/ (and explorer/)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
    cmd = [sys.executable, "-m", "explorer.benches.stream", "--json", "--device", str(device)]
    done = subprocess.run(cmd + (["--quick"] if quick else []), capture_output=True, text=True, env=env)
    if done.returncode != 0:
        return dict(app_stream_error=" ".join((done.stderr or done.stdout).strip().splitlines()[-1:]))
    return {f"app_stream_{k}": v for k, v in json.loads(done.stdout).items()}


def cuda_figures(r: dict) -> bool:
    return r.get("device", "").startswith("cuda")


def table_rows(r: dict) -> list[tuple]:
    """(name, ours, reference, ratio, judged): the decode row against its device's target."""
    rows = [("decode_cuda" if cuda_figures(r) else "decode", f"{r['decode_tok_s_ours']:.1f} tok/s",
             f"{r['decode_tok_s_ref']:.1f} tok/s", r["decode_ratio"], r["decode_ratio"])]
    if cuda_figures(r):
        rows.append(("decode_cuda_tok_s", f"{r['decode_tok_s_ours']:.0f} tok/s", "", r["decode_ratio"],
                     r["decode_tok_s_ours"]))
    if "app_stream_share" in r:
        rows.append(("app_stream_share", f"{r['app_stream_tok_s']:.1f} tok/s", f"{r['app_stream_raw_tok_s']:.1f} tok/s",
                     r["app_stream_share"], r["app_stream_share"]))
    return rows


def table_notes(r: dict) -> list[str]:
    lines = [f"decode: {r['decode_prompt_tokens']}-token prompt, {r['decode_new_tokens']} new tokens, fp32, "
             f"engine {r.get('decode_engine', '?')}; greedy tokens identical to HF's: {r['decode_same_tokens']}"]
    if "decode_first_token_s_cold" in r:
        capture = (f"{r['decode_capture_s']:.3f} s of it capturing the CUDA graphs" if r["decode_capture_s"] > 0
                   else "nothing captured")
        lines.append(f"first token: {1e3 * r['decode_first_token_s_cold']:.1f} ms the first time for this shape "
                     f"({capture}), {1e3 * r['decode_first_token_s_warm']:.1f} ms the next time")
    if "app_stream_share" in r:
        lines.append(f"app stream (explorer session, no Qt; both rated as the pane rates: tokens after the first "
                     f"over their time, {r['app_stream_new_tokens']} tokens, child process): "
                     f"{r['app_stream_tok_s']:.1f} tok/s vs generate {r['app_stream_raw_tok_s']:.1f} tok/s = "
                     f"{r['app_stream_share']:.3f} of it")
    elif "app_stream_error" in r:
        lines.append(f"app stream: not measured ({r['app_stream_error']})")
    return lines
