"""The routes bench line of `python -m gptcore.bench` (issue 29): `information_flow` on the bench's
model at FLOW_TOKENS tokens, against one transformers forward with `output_attentions` on the same
ids (what a user of HF would run to draw attention alone). Target ratio <= 3.

Why that reference: the routes need one forward plus every attention part's L1 distance to its
whole (T x T x nh x C per layer, done in query blocks); the issue asks that this cost stays within
a few forwards, so that the Routes view can follow typing like the attention view does.
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import torch

FLOW_TOKENS = 32
TARGETS = {"information_flow": ("<=", 3.0)}


def bench_flow(hf, ours, ids: torch.Tensor, runs: int, device, timed_pair: Callable) -> dict:
    """ids (1, T >= 2); the first FLOW_TOKENS of them are used on both sides."""
    from gptcore.benches.timing import ops_launched
    from gptcore.interp.flow import information_flow

    ids = ids[:, :FLOW_TOKENS]  # (1, T)

    def run_ours():
        return information_flow(ours, ids)

    def run_ref():
        with torch.inference_mode():
            return hf(ids, output_attentions=True)

    flow = run_ours()  # the shares are shares: each representation's parts sum to 1
    sums = np.concatenate([(flow.attn.sum(axis=(2, 3)) + flow.attn_residual).ravel(), (flow.mlp + flow.mlp_residual).ravel()])
    ours_s, ref_s, ours_all, ref_all = timed_pair(run_ours, run_ref, runs, device)
    return dict(flow_ms_ours=1e3 * ours_s, flow_ms_ref=1e3 * ref_s, flow_ratio=ours_s / ref_s,
                flow_tokens=int(ids.shape[1]), flow_sum_max_abs_err=float(np.abs(sums - 1).max()),
                flow_ops_ours=ops_launched(run_ours), flow_ops_ref=ops_launched(run_ref),
                flow_samples_ms_ours=[1e3 * s for s in ours_all], flow_samples_ms_ref=[1e3 * s for s in ref_all])


def table_rows(r: dict) -> list[tuple]:
    return [("information_flow", f"{r['flow_ms_ours']:.1f} ms", f"{r['flow_ms_ref']:.1f} ms",
             r["flow_ratio"], r["flow_ratio"])]


def table_notes(r: dict) -> list[str]:
    return [f"information_flow: {r['flow_tokens']} tokens, every attention part's share (routes, issue 29); "
            f"reference = one HF forward with output_attentions; shares sum to 1 within {r['flow_sum_max_abs_err']:.1e}"
            + (f"; operators run (kernel launches on a GPU) {r['flow_ops_ours']} vs HF's {r['flow_ops_ref']}"
               if "flow_ops_ours" in r else "")]


# -- routes at length (issue 34): flow_route's rows against the full definition ------------------------
ROUTE_LENGTHS = (256, 1024)
ROUTE_TARGETS = {"flow_route_s_1024": ("<=", 3.0), "flow_route_extra_gib_1024": ("<=", 1.0)}


def peak_rss_during(fn: Callable[[], object]) -> tuple[object, float, float]:
    """(fn's result, seconds, peak resident bytes above the start), the RSS sampled every 2 ms from
    /proc (Linux) on a side thread: what the call adds to the process, torch's allocations included."""
    import os
    import threading
    import time

    page = os.sysconf("SC_PAGE_SIZE")

    def rss() -> int:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * page

    base, peak, done = rss(), [0], threading.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], rss())
            time.sleep(0.002)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    start = time.perf_counter()
    try:
        out = fn()
    finally:
        seconds = time.perf_counter() - start
        done.set()
        thread.join()
    return out, seconds, max(0, max(peak[0], rss()) - base)


def bench_route_at_length(lengths=ROUTE_LENGTHS, full: bool = True, seed: int = 0) -> dict:
    """flow_route (the route to the last token, threshold 0.04) and information_flow + flow_graph
    on GPT-2 small's shape with random weights, at each length: seconds, peak extra RSS, their ratio,
    and whether the two routes have the same edges (weights within 1e-5)."""
    import gc

    from gptcore import GPT, GPTConfig
    from gptcore.interp.flow import information_flow
    from gptcore.interp.flow_graph import flow_graph
    from gptcore.interp.flow_route import flow_route

    model = GPT(GPTConfig.preset("gpt2"), seed=seed).eval()
    gen = torch.Generator().manual_seed(seed)
    out: dict = {"threads": torch.get_num_threads()}
    for T in lengths:
        ids = torch.randint(0, model.config.vocab_size, (T,), generator=gen).tolist()
        flow_route(model, ids[:8])  # warm the kernels
        gc.collect()
        route, s, extra = peak_rss_during(lambda: flow_route(model, ids))
        out.update({f"flow_route_s_{T}": s, f"flow_route_extra_gib_{T}": extra / 2**30,
                    f"flow_route_edges_{T}": len(route.route)})
        if full:
            gc.collect()
            graph, s_full, extra_full = peak_rss_during(lambda: flow_graph(information_flow(model, ids)))
            same = {(a, b) for a, b, _ in graph.route} == {(a, b) for a, b, _ in route.route}
            w = dict(((a, b), x) for a, b, x in graph.route)
            err = max((abs(w[(a, b)] - x) for a, b, x in route.route if (a, b) in w), default=0.0)
            out.update({f"full_s_{T}": s_full, f"full_extra_gib_{T}": extra_full / 2**30,
                        f"route_speedup_{T}": s_full / s, f"route_same_edges_{T}": same, f"route_max_err_{T}": err})
            del graph
    return out


def main(argv=None) -> int:
    """`python -m gptcore.benches.flow [--no-full] [T ...]`: the routes-at-length lines."""
    import platform
    import sys

    args = list(sys.argv[1:] if argv is None else argv)
    full = "--no-full" not in args
    lengths = tuple(int(a) for a in args if a.isdigit()) or ROUTE_LENGTHS
    r = bench_route_at_length(lengths, full=full)
    print(f"routes at length, GPT-2 small shape (random weights), {r['threads']} threads, {platform.processor() or platform.machine()}")
    for T in lengths:
        line = (f"  {T:5d} tokens: flow_route {r[f'flow_route_s_{T}']:.2f} s, +{r[f'flow_route_extra_gib_{T}']:.2f} GiB, "
                f"{r[f'flow_route_edges_{T}']} route edges")
        if full:
            line += (f" | full definition {r[f'full_s_{T}']:.1f} s, +{r[f'full_extra_gib_{T}']:.2f} GiB "
                     f"({r[f'route_speedup_{T}']:.0f}x) | same edges: {r[f'route_same_edges_{T}']}, "
                     f"max |Δw| {r[f'route_max_err_{T}']:.1e}")
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
