"""The patching part of `gptcore.bench`, and the optional TransformerLens comparison.

- patch_heads: activation patching of every head on a 15-token prompt (GPT-2 small: 144
  heads), our batched `patch_heads` against what one writes first: one hooked forward of the
  corrupted prompt per head (the same hook points, only the last position's logits). Both
  maps are compared before anything is timed; runs interleaved. Target: ratio <= 0.3 and
  patch_heads_s <= 5 s.
- tl_*: `python -m gptcore.benches.tl_check --json` run by another Python (one with transformer-lens,
  which is not a dependency of ours), with this checkout first on its path.
"""
from __future__ import annotations

import json

import torch

TARGETS = {"patch_heads": ("<=", 0.3)}
PATCH_HEADS_S_TARGET = 5.0


def naive_patch_heads(model, clean: torch.Tensor, corrupt: torch.Tensor, target: int, contrast: int) -> torch.Tensor:
    """For each head, a full hooked forward of the corrupted prompt with that head's
    `hook_z` taken from the clean run. (n_layer, n_head) patched logit differences."""
    cfg = model.config
    with torch.inference_mode():
        _, cache = model.run_with_cache(clean, names_filter=lambda n: n.endswith("attn.hook_z"), logits=None)
        out = torch.empty(cfg.n_layer, cfg.n_head)
        for layer in range(cfg.n_layer):
            name = f"blocks.{layer}.attn.hook_z"
            for head in range(cfg.n_head):
                def patch(z, hook, head=head, clean_z=cache[name]):
                    z = z.clone()
                    z[:, :, head] = clean_z[:, :, head]
                    return z

                with model.hooks([(name, patch)]):
                    last = model(corrupt, logits="last")[0, -1]  # (vocab,)
                out[layer, head] = last[target] - last[contrast]
    return out


def bench_patch_heads(ours, shape: dict, tokens: int, runs: int, device, timed_pair) -> dict:
    """patch_heads_* figures; `timed_pair` is timing.timed_pair (interleaved medians)."""
    from gptcore.interp.patching import patch_heads

    g = torch.Generator().manual_seed(2)
    V = shape["vocab_size"]
    clean = torch.randint(0, V, (1, tokens), generator=g).to(device)  # (1, T)
    corrupt = clean.clone()
    corrupt[0, tokens // 3] = (clean[0, tokens // 3] + 1) % V  # one token changed, a third of the way in
    target, contrast = 11, 12
    got = {}

    def run_ours():
        got["ours"] = patch_heads(ours, clean, corrupt, target, contrast).patched_ld

    def run_ref():
        got["ref"] = naive_patch_heads(ours, clean, corrupt, target, contrast)

    run_ours()  # warm-up of the cheap side only; the naive side is long enough to warm itself
    ours_s, ref_s, ours_all, ref_all = timed_pair(run_ours, run_ref, runs, device, warmup=0)
    return dict(patch_heads_s=ours_s, patch_heads_s_naive=ref_s, patch_heads_ratio=ours_s / ref_s,
                patch_heads_tokens=tokens, patch_heads_cells=int(got["ours"].numel()),
                patch_heads_max_abs_diff=float((got["ours"] - got["ref"]).abs().max()),
                patch_heads_samples_s=ours_all, patch_heads_samples_s_naive=ref_all)


def run_tl_check(python: str, quick: bool) -> dict:
    """tl_* figures from `python -m gptcore.benches.tl_check --json` run by `python`."""
    import os
    import subprocess
    from pathlib import Path

    root = str(Path(__file__).resolve().parents[2])  # the checkout holding gptcore/
    env = {**os.environ, "HF_HUB_OFFLINE": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
    cmd = [python, "-m", "gptcore.benches.tl_check", "--json"] + (["--quick"] if quick else [])
    done = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        return dict(tl_check_error=(done.stderr or done.stdout).strip().splitlines()[-1:])
    return {f"tl_{k}": v for k, v in json.loads(done.stdout).items()}


def table_rows(r: dict) -> list[tuple]:
    return [("patch_heads", f"{r['patch_heads_s']:.2f} s", f"{r['patch_heads_s_naive']:.2f} s",
             r["patch_heads_ratio"], r["patch_heads_ratio"])]


def table_notes(r: dict) -> list[str]:
    lines = []
    if "patch_heads_s" in r:
        verdict = "met" if r["patch_heads_s"] <= PATCH_HEADS_S_TARGET else "MISSED"
        lines.append(f"patch_heads: {r['patch_heads_cells']} heads, {r['patch_heads_tokens']} tokens; reference = one "
                     f"hooked forward per head; maps agree to {r['patch_heads_max_abs_diff']:.1e}; "
                     f"{r['patch_heads_s']:.2f} s vs target <= {PATCH_HEADS_S_TARGET:g} s  {verdict}")
    tl = {k: v for k, v in r.items() if k.startswith("tl_")}
    if tl:
        lines.append("TransformerLens check: " + ", ".join(f"{k[3:]}={v}" for k, v in tl.items()))
    return lines
