"""The feature dashboard's torch half (issue 39): what SAEDashboard and Neuronpedia show for a feature
beyond its top contexts, computed from what the Features domain already holds — the held-out
activations harvested when the dictionary was measured, and the dictionary's decoder.

Per selection it stays cheap at GPT-2 small sizes (a width-24,576 SAE): the feature's activation on
every held-out token is read from each token's top-k latents, encoded once per measured table and
kept beside the held-out rows (O(tokens · k) per feature instead of a dense tokens × width encode);
the nearest features are one matrix-vector product with the decoder (its row norms kept likewise);
the logits histogram is one row through the unembedding. No Qt.

The example groups follow SAEDashboard's: the strongest activations, then equal-width intervals of
(0, max] from the highest down with a few tokens drawn at random inside each, plus a random draw over
every token where the feature fires (what it typically does, not only at its peak). Draws are seeded
by the feature, so a feature shows the same examples each time it is selected.
"""
from __future__ import annotations

import numpy as np
import torch

from explorer.session.features import stats
from explorer.session.features.results import DensityHistogram, Example, ExampleGroup, FeatureDashboard

BEFORE, AFTER = stats.WINDOW, 3  # default context around a picked token (as the top contexts')
MAX_CONTEXT = 127  # a window never leaves its sequence (128 tokens, or the model's block)
TOP_EXAMPLES = 20  # SAEDashboard's top group
INTERVALS = 5  # equal-width intervals of (0, max]
PER_INTERVAL = 5
RANDOM_EXAMPLES = 10
NEIGHBOURS = 10
LOGIT_HIST_BINS = 50  # SAEDashboard's logits histogram
DENSITY_BINS = 40
DENSE_AT = 0.10  # a feature firing on more than this share of tokens is "dense"


# -- the feature's activations, from what was harvested -------------------------------------------------
def feature_column(dictionary, ev: dict, feature: int) -> np.ndarray:
    """(N,) the feature's activation on every held-out token, equal to column `feature` of a dense
    encode of the held-out rows. Neurons: the rows are the activations. An SAE: the rows' top-k
    latents, encoded once and kept in `ev` (the held-out state) for the next feature."""
    rows = ev["rows"]  # (N, d)
    if not hasattr(dictionary, "W_enc"):  # neurons: the rows are the activations
        with torch.no_grad():
            return dictionary.feature_acts(rows, torch.tensor([feature]))[:, 0].float().numpy()
    values, indices = _topk_of(dictionary, ev)  # (N, k), (N, k)
    return (values * (indices == feature)).sum(1).numpy()  # (N,)


def _topk_of(dictionary, ev: dict) -> tuple[torch.Tensor, torch.Tensor]:
    cached = ev.get("topk")
    if cached is None or cached[0] is not dictionary:  # the table seeds it (stats.statistics); the circuits don't
        rows = ev["rows"]
        values, indices = [], []
        for start in range(0, rows.shape[0], stats.BATCH):
            v, i = stats.topk_acts(dictionary, rows[start:start + stats.BATCH])  # (B, k)
            values.append(v)
            indices.append(i)
        cached = (dictionary, torch.cat(values) if values else torch.zeros(0, dictionary.k),
                  torch.cat(indices) if indices else torch.zeros(0, dictionary.k, dtype=torch.long))
        ev["topk"] = cached
    return cached[1], cached[2]


# -- example groups ------------------------------------------------------------------------------------
def example_groups(acts: np.ndarray, flat_ids: np.ndarray, seq_len: int, before: int, after: int, decode,
                   seed: int) -> tuple[ExampleGroup, ...]:
    """Top, interval and random groups over `acts` (N,), windows cut from `flat_ids` (N,) within each
    sequence of `seq_len` tokens; none when the feature never fires."""
    acts = np.asarray(acts, dtype=np.float64).reshape(-1)
    n = acts.size
    peak = float(acts.max()) if n else 0.0
    if peak <= 0:
        return ()
    rng = np.random.default_rng(seed)

    def examples(rows) -> tuple[Example, ...]:
        out = []
        for r in rows:
            tokens, window_acts = stats.context_of(flat_ids, seq_len, int(r), acts, decode, before, after)
            lo = int(r) - (int(r) // seq_len) * seq_len
            out.append(Example(tuple(tokens), np.asarray(window_acts, np.float32), min(before, lo), int(r)))
        return tuple(out)

    def draw(rows: np.ndarray, count: int) -> np.ndarray:
        picked = rng.choice(rows, size=min(count, rows.size), replace=False) if rows.size else rows
        return picked[np.argsort(-acts[picked], kind="stable")]  # strongest first within the group

    order = np.argsort(-acts, kind="stable")[:TOP_EXAMPLES]
    groups = [ExampleGroup("top", f"top {int((acts[order] > 0).sum())} activations (max {peak:.3g})", -1.0, peak,
                           -1.0, examples(order[acts[order] > 0]))]
    edges = np.linspace(0.0, peak, INTERVALS + 1)
    for i in reversed(range(INTERVALS)):
        lo, hi = float(edges[i]), float(edges[i + 1])
        inside = np.flatnonzero((acts > lo) & (acts <= hi))  # linspace ends exactly at the peak
        share = inside.size / n
        groups.append(ExampleGroup("interval", f"activation {lo:.3g}–{hi:.3g} · {_share(share)} of tokens",
                                   lo, hi, share, examples(draw(inside, PER_INTERVAL))))
    active = np.flatnonzero(acts > 0)
    groups.append(ExampleGroup("random", f"at random: {min(RANDOM_EXAMPLES, active.size)} of the {active.size:,} "
                                         f"tokens where it fires", 0.0, peak, active.size / n,
                               examples(draw(active, RANDOM_EXAMPLES))))
    return tuple(groups)


def _share(fraction: float) -> str:
    return f"{100 * fraction:.3g} %" if fraction >= 1e-3 or fraction == 0 else f"{100 * fraction:.2g} %"


# -- what the feature writes ---------------------------------------------------------------------------
def decoder(model, dictionary, kind: str, layer: int) -> torch.Tensor:
    """(width, d) every feature's write direction, without a copy: an SAE's decoder rows, or (neurons)
    the transposed view of the MLP's output projection (`stats.write_directions` for all features)."""
    if kind == "sae":
        return dictionary.W_dec.detach()
    return model.blocks[layer].mlp.c_proj.weight.detach().t()  # (d_mlp, n_embd) view


def nearest(matrix: torch.Tensor, norms: torch.Tensor, feature: int, count: int = NEIGHBOURS
            ) -> tuple[np.ndarray, np.ndarray]:
    """The `count` other rows of `matrix` (width, d) most aligned with row `feature`, by cosine: one
    matrix-vector product. `norms` (width,) are the rows' norms."""
    with torch.no_grad():
        own = matrix[feature]  # (d,)
        if float(norms[feature]) == 0:
            return np.zeros(0, np.int64), np.zeros(0, np.float32)
        cos = (matrix @ own).float().cpu() / (norms.cpu() * norms[feature].cpu()).clamp_min(1e-12)  # (width,)
        cos[feature] = -float("inf")
        top = cos.topk(min(count, matrix.shape[0] - 1))
    return top.indices.numpy().astype(np.int64), top.values.numpy().astype(np.float32)


def _norms_of(matrix: torch.Tensor, dictionary, ev: dict) -> torch.Tensor:
    cached = ev.get("decoder_norms")
    if cached is None or cached[0] is not dictionary:
        with torch.no_grad():
            cached = (dictionary, matrix.float().norm(dim=1))  # (width,)
        ev["decoder_norms"] = cached
    return cached[1]


def alignment(direction: np.ndarray, count: int = 3) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """SAEDashboard's "neuron alignment": the direction's `count` coordinates largest in size, their
    values, and each one's share of the direction's L1 norm."""
    direction = np.asarray(direction, dtype=np.float64).reshape(-1)
    top = np.argsort(-np.abs(direction), kind="stable")[:count]
    l1 = float(np.abs(direction).sum()) or 1.0
    return top.astype(np.int64), direction[top].astype(np.float32), (np.abs(direction[top]) / l1).astype(np.float32)


def logit_histogram(logits: np.ndarray, bins: int = LOGIT_HIST_BINS) -> tuple[np.ndarray, np.ndarray]:
    """Edges (B+1,) and counts (B,) of every token's logit change."""
    counts, edges = np.histogram(np.asarray(logits, dtype=np.float64), bins=bins)
    return edges, counts


# -- all of it, for one feature ------------------------------------------------------------------------
def feature_dashboard(model, dictionary, ev: dict, table, feature: int, before: int, after: int, decode,
                      version: int = 0) -> FeatureDashboard:
    source = table.source
    acts = feature_column(dictionary, ev, feature)
    groups = example_groups(acts, ev["ids"], ev["seq_len"], before, after, decode, seed=feature)
    matrix = decoder(model, dictionary, source.kind, source.layer)
    ids, cos = nearest(matrix, _norms_of(matrix, dictionary, ev), feature)
    direction = matrix[feature].float().cpu()  # (d,)
    logits = stats.logit_rows(model, direction[None])[0, :model.config.vocab_size].numpy()  # (vocab,)
    edges, counts = logit_histogram(logits)
    aligned = alignment(direction.numpy())
    return FeatureDashboard(int(feature), int(before), int(after), groups, ids, cos,
                            tuple(table.labels[int(i)] for i in ids), edges, counts, *aligned,
                            (int(ev["ids"].size // max(ev["seq_len"], 1)), int(ev["seq_len"])), version)


def density_histogram(density: np.ndarray, tokens: int, bins: int = DENSITY_BINS,
                      dense_at: float = DENSE_AT) -> DensityHistogram:
    """log10(density) of the features that fired, from one firing in `tokens` (the least measurable) to
    every token; dead (density 0) and dense (> `dense_at`) features counted."""
    density = np.asarray(density, dtype=np.float64).reshape(-1)
    floor = np.log10(1.0 / max(int(tokens), 1))
    fired = density[density > 0]
    counts, edges = np.histogram(np.log10(fired), bins=bins, range=(min(floor, -1e-9), 0.0))
    return DensityHistogram(edges, counts, int((density == 0).sum()), int((density > dense_at).sum()),
                            float(dense_at), int(density.size), int(tokens))


