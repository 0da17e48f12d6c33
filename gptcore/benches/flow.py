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
                flow_samples_ms_ours=[1e3 * s for s in ours_all], flow_samples_ms_ref=[1e3 * s for s in ref_all])


def table_rows(r: dict) -> list[tuple]:
    return [("information_flow", f"{r['flow_ms_ours']:.1f} ms", f"{r['flow_ms_ref']:.1f} ms",
             r["flow_ratio"], r["flow_ratio"])]


def table_notes(r: dict) -> list[str]:
    return [f"information_flow: {r['flow_tokens']} tokens, every attention part's share (routes, issue 29); "
            f"reference = one HF forward with output_attentions; shares sum to 1 within {r['flow_sum_max_abs_err']:.1e}"]
