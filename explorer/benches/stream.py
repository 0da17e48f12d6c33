"""The app's streamed generation without Qt, against gptcore's `generate` on the same model.

    python -m explorer.benches.stream [--device cuda] [--new-tokens 128] [--runs 5] [--quick] [--json]

What the generation pane runs per token, minus the widgets: `session.generation.stream` (the
session's lock taken per token, the version checked, the token's text decoded and its
alternatives' texts looked up, a GeneratedToken made) against `gptcore.generate` alone, greedy,
the same prompt, interleaved (a burst of load falls on both), median of `--runs`. Both are rated
as the pane rates a run: tokens after the first over the time they took (the first also reads the
prompt and may capture CUDA graphs). `share` = app / raw; issue 37 asks >= 0.9.

Qt-free on purpose: it runs where the app's session runs without a display or PySide6 (a GPU
machine), and `python -m gptcore.bench` runs it as a child process for its decode lines.
GPT-2 small's shape with random weights (`--quick`: a tiny model; timings then mean nothing).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

PROMPT = "The quick brown fox jumps over the lazy dog because it wanted to see what the"


def _rate(stamps: list[float]) -> float:
    return (len(stamps) - 1) / (stamps[-1] - stamps[0])


def measure(device: str = "cpu", new_tokens: int = 128, runs: int = 5, quick: bool = False) -> dict:
    from gptcore.benches.timing import sync
    from gptcore.generation.streaming import generate
    from gptcore.model.config import GPTConfig
    from gptcore.model.gpt import GPT

    from explorer.session.core import Session
    from explorer.session.models import model_info

    config = (GPTConfig(n_layer=2, n_head=4, n_embd=64, block_size=128) if quick else GPTConfig.preset("gpt2"))
    model = GPT(config, seed=0).eval().to(device)
    session = Session(model, model_info(model, name="bench", trained=False, source="explorer.benches.stream"),
                      device=device)
    ids = session.generation.context(PROMPT).ids.tolist()
    settings = dict(temperature=0.0, max_new_tokens=new_tokens, n_alternatives=8)

    def raw() -> list[float]:
        return [time.perf_counter() for _ in generate(model, ids, max_new_tokens=new_tokens, temperature=0,
                                                          n_alternatives=8)]

    def app() -> list[float]:
        return [time.perf_counter() for _ in session.generation.stream(ids, settings)]

    raw(), app()  # warm-up: graphs captured, kernels and allocator warm
    sync(model.device)
    raw_rates, app_rates = [], []
    for _ in range(runs):
        raw_rates.append(_rate(raw()))
        app_rates.append(_rate(app()))
    raw_tok_s, app_tok_s = statistics.median(raw_rates), statistics.median(app_rates)
    return dict(tok_s=app_tok_s, raw_tok_s=raw_tok_s, share=app_tok_s / raw_tok_s, new_tokens=new_tokens,
                prompt_tokens=len(ids), runs=runs, device=str(model.device), quick=quick,
                samples_tok_s=app_rates, samples_raw_tok_s=raw_rates)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m explorer.benches.stream", description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cpu", help="cpu or cuda")
    p.add_argument("--new-tokens", type=int, default=128, help="greedy tokens per run")
    p.add_argument("--runs", type=int, default=5, help="runs per side, interleaved (median reported)")
    p.add_argument("--quick", action="store_true", help="tiny model, few tokens: checks it runs; timings mean nothing")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    args = p.parse_args(argv)
    if args.quick:
        args.new_tokens, args.runs = min(args.new_tokens, 8), min(args.runs, 2)
    r = measure(args.device, args.new_tokens, args.runs, args.quick)
    if args.json:
        print(json.dumps(r))
    else:
        print(f"app stream (session, no Qt) {r['tok_s']:.1f} tok/s vs gptcore generate {r['raw_tok_s']:.1f} tok/s "
              f"= {r['share']:.3f} (target >= 0.9); {r['new_tokens']} greedy tokens after {r['prompt_tokens']}, "
              f"{r['device']}, median of {r['runs']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
