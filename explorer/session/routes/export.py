"""The routes contributions as a table and as arrays, for the Routes view's exports (numpy only).

One CSV row per part of every block: each (source token, head) part of an attention block at or
before its target, its residual, and the MLP block's two parts. Shares of one whole sum to 1,
so a reader can renormalise, threshold or re-draw the graph without the app.
"""
from __future__ import annotations

import csv
import io

import numpy as np

from explorer.session.routes.results import RoutesResult

CSV_COLUMNS = ("layer", "target", "target_token", "part", "source", "source_token", "head", "share")


def contributions_csv(result: RoutesResult) -> str:
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(CSV_COLUMNS)
    tokens = result.tokens
    for layer in range(result.n_layer):
        for i in range(result.n_tokens):
            block = result.attn[layer, i, : i + 1]  # (i+1, nh): sources up to the target
            w.writerows((layer, i, tokens[i], "head", j, tokens[j], h, f"{block[j, h]:.6g}")
                        for j in range(i + 1) for h in range(result.n_head))
            w.writerow((layer, i, tokens[i], "attn_residual", i, tokens[i], "", f"{result.attn_residual[layer, i]:.6g}"))
            w.writerow((layer, i, tokens[i], "mlp", i, tokens[i], "", f"{result.mlp[layer, i]:.6g}"))
            w.writerow((layer, i, tokens[i], "mlp_residual", i, tokens[i], "", f"{result.mlp_residual[layer, i]:.6g}"))
    return out.getvalue()


def save_npz(path: str, result: RoutesResult, meta: dict) -> None:
    """The four share arrays, the tokens and predictions, and `meta` (the CSV's header facts)."""
    np.savez_compressed(
        path, attn=result.attn, attn_residual=result.attn_residual, mlp=result.mlp, mlp_residual=result.mlp_residual,
        token_ids=result.token_ids, tokens=np.array(result.tokens, dtype=str),
        predicted_ids=result.predicted_ids, predicted_probs=result.predicted_probs,
        meta_keys=np.array(list(meta), dtype=str), meta_values=np.array([str(v) for v in meta.values()], dtype=str))
