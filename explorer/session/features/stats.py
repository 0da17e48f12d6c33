"""The torch half of the Features domain: a dictionary's activations over a corpus sample, each feature's
statistics and strongest contexts, and what its direction writes through the unembedding (issue 33).

Why here and not in gptcore: these are the browser's summaries (how many contexts, how wide a window,
which label), choices of the app; the science (SAE, its metrics, editing) is gptcore's. No Qt.
"""
from __future__ import annotations

import numpy as np
import torch

from gptcore.errors import Cancelled

CONTEXTS = 8  # strongest contexts kept per feature
LOGIT_ROWS = 20  # tokens listed as promoted and as suppressed (SAEDashboard shows 10, Neuronpedia up to 20)
WINDOW = 12  # tokens of context before the active token (and 3 after)
BATCH = 1024  # rows encoded at a time
HIST_BINS = 50  # SAEDashboard's activation histogram


def hook_rows(model, ids: torch.Tensor, hook: str, cancel=None, chunk: int = 32) -> torch.Tensor:
    """The hook's activations on `ids` (S, T), as rows (S*T, d), a few sequences per forward; the head
    is skipped (`logits=None`: with GPT-2's 50,257-token vocabulary it would cost more than the rest)."""
    rows = []

    def keep(x, _hp):
        rows.append(x.detach().reshape(-1, x.shape[-1]).float().cpu())
        return x

    with torch.no_grad(), model.hooks([(hook, keep)]):
        for start in range(0, ids.shape[0], chunk):
            if cancel is not None and cancel():
                raise Cancelled("cancelled")
            model(ids[start:start + chunk].to(model.device), logits=None)
    return torch.cat(rows) if rows else torch.zeros(0, 1)


def dense_acts(dictionary, x: torch.Tensor) -> torch.Tensor:
    """(N, width) activations of every feature (zeros where an SAE's top-k left it out)."""
    with torch.no_grad():
        return dictionary.encode(x.to(_device_of(dictionary, x.device))).float().cpu()


def statistics(dictionary, x: torch.Tensor, cancel=None) -> dict:
    """Per feature: density, max activation, and the rows of its CONTEXTS strongest activations; for an
    SAE also "topk": each row's active latents (values (N, k), indices (N, k)), which the dashboard reads
    per feature (dashboard.feature_column), so the rows are encoded once."""
    width, n = dictionary.width, x.shape[0]
    sparse = hasattr(dictionary, "W_enc")  # an SAE: dashboard.feature_column's test
    active = torch.zeros(width)
    best_vals = torch.full((CONTEXTS, width), -float("inf"))  # (C, width)
    best_rows = torch.zeros((CONTEXTS, width), dtype=torch.long)
    kept_values, kept_indices = [], []
    for start in range(0, n, BATCH):
        if cancel is not None and cancel():
            raise Cancelled("cancelled")
        if sparse:
            values, indices = topk_acts(dictionary, x[start:start + BATCH])  # (B, k) each
            kept_values.append(values)
            kept_indices.append(indices)
            acts = torch.zeros(values.shape[0], width).scatter_(-1, indices, values)  # (B, width), as encode gives
        else:
            acts = dense_acts(dictionary, x[start:start + BATCH])  # (B, width)
        active += (acts > 0).sum(0)
        vals = torch.cat([best_vals, acts])  # (C+B, width)
        rows = torch.cat([best_rows, torch.arange(start, start + acts.shape[0]).unsqueeze(1).expand_as(acts)])
        top = vals.topk(CONTEXTS, dim=0)
        best_vals, best_rows = top.values, rows.gather(0, top.indices)
    max_act = best_vals[0].clamp(min=0) if n else torch.zeros(width)
    summary = {"density": (active / max(n, 1)).numpy(), "max_act": max_act.numpy(),
               "best_vals": best_vals.numpy(), "best_rows": best_rows.numpy()}
    if sparse:
        summary["topk"] = (torch.cat(kept_values) if kept_values else torch.zeros(0, dictionary.k),
                           torch.cat(kept_indices) if kept_indices else torch.zeros(0, dictionary.k, dtype=torch.long))
    return summary


def topk_acts(dictionary, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """An SAE's active latents of rows x (N, d): values (N, k) float32 and indices (N, k), on the CPU."""
    with torch.no_grad():
        values, indices = dictionary.encode_topk(x.to(_device_of(dictionary, torch.device("cpu"))))
    return values.float().cpu(), indices.cpu()


def write_directions(model, dictionary, kind: str, layer: int, features=None) -> torch.Tensor:
    """(m, n_embd): what each feature adds to the residual stream. An SAE on the residual stream or the
    MLP output writes its decoder row; a neuron writes its column of the MLP's output projection."""
    idx = torch.arange(dictionary.width) if features is None else torch.as_tensor(features)
    with torch.no_grad():
        if kind == "sae":
            return dictionary.W_dec[idx].detach().float().cpu()  # (m, d)
        weight = model.blocks[layer].mlp.c_proj.weight  # (n_embd, d_mlp), whatever its storage order
        return weight.detach()[:, idx.to(weight.device)].t().float().cpu()  # (m, d)


def logit_rows(model, directions: torch.Tensor) -> torch.Tensor:
    """(m, vocab) logits a direction adds at the final layer norm's scale (the logit lens of a direction)."""
    from gptcore.model.linear import apply_linear

    gain = getattr(model.ln_final, "weight", None)
    with torch.no_grad():
        d = directions.to(model.device)
        if gain is not None:
            d = d * gain
        return apply_linear(model.unembed, d).float().cpu()


def logit_effects(model, directions: torch.Tensor, vocab: int, cancel=None, chunk: int = 256) -> np.ndarray:
    """(m,) the largest logit each direction adds (over the real vocabulary, not its padding)."""
    out = []
    for start in range(0, directions.shape[0], chunk):
        if cancel is not None and cancel():
            raise Cancelled("cancelled")
        out.append(logit_rows(model, directions[start:start + chunk])[:, :vocab].max(dim=1).values)
    return torch.cat(out).numpy() if out else np.zeros(0)


def histogram(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Edges (B+1,) and counts (B,) of the active (> 0) values; an empty histogram when none are."""
    active = values[values > 0]
    if not active.size:
        return np.array([0.0, 1.0]), np.zeros(1, dtype=np.int64)
    counts, edges = np.histogram(active, bins=HIST_BINS)
    return edges, counts


def context_of(flat_ids: np.ndarray, seq_len: int, row: int, acts: np.ndarray, decode, before: int = WINDOW,
               after: int = 3) -> tuple[list[str], np.ndarray]:
    """The `before` tokens before and `after` after row `row` within its own sequence, with their activations."""
    seq_start = (row // seq_len) * seq_len
    lo, hi = max(seq_start, row - before), min(seq_start + seq_len, row + after + 1)
    return decode(flat_ids[lo:hi]), acts[lo:hi]


def _device_of(module, default) -> torch.device:
    for p in module.parameters():
        return p.device
    return default


def top_contexts(acts: np.ndarray, ev: dict, decode) -> tuple:
    """Windows of held-out text around a feature's CONTEXTS strongest activations `acts` (N,) (only where
    it fires); `ev`: the held-out state (ids, seq_len). The Features and Circuits details both show them."""
    order = np.argsort(-acts)[:CONTEXTS]
    return tuple(context_of(ev["ids"], ev["seq_len"], int(r), acts, decode) for r in order if acts[r] > 0)


def promoted_suppressed(model, direction: torch.Tensor, decode) -> tuple[tuple, tuple]:
    """The LOGIT_ROWS tokens a direction (1, d) written to the residual stream raises most and lowers most,
    as ((token, logit), ...) each, over the real vocabulary (a character model may have fewer tokens)."""
    logits = logit_rows(model, direction)[0]
    vocab = min(model.config.vocab_size, len(logits))
    shown = min(LOGIT_ROWS, vocab)
    up, down = logits[:vocab].topk(shown), (-logits[:vocab]).topk(shown)
    promoted = tuple((decode([int(i)])[0], float(v)) for v, i in zip(up.values, up.indices))
    suppressed = tuple((decode([int(i)])[0], float(-v)) for v, i in zip(down.values, down.indices))
    return promoted, suppressed
