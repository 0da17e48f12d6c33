"""Head census: which heads behave like previous-token, duplicate-token, induction or
position-copy heads?

Why more than TransformerLens's detector: TL scores induction on random tokens repeated
twice with a fixed half-length n. On such sequences the induction target of query i is
always key i-n+1, so a head that attends *by position* (i -> i-n+1, whatever the tokens)
scores exactly like a genuine induction head. A 2-layer model trained on fixed-length
repeats learned that shortcut in 5 s, and then failed on shifted repeats. So the census
scores induction where no fixed offset can do well, and reports fixed-offset heads in a
column of their own.

previous_token, duplicate_token, induction_fixed — TransformerLens's head detector
(`detect_head`, error measure "mul", nothing excluded): for a head's pattern A (T, T) and a
0/1 detection pattern D marking where such a head would look,

    score = Σ (A ⊙ D) / Σ A        (= the mean over query rows of the attention mass on D)

on random tokens repeated twice, [r_1 … r_n, r_1 … r_n], where
- previous-token: D[i, i-1] = 1;
- duplicate-token: D[i, j] = 1 where token j equals token i, j < i;
- induction: D[i, j] = 1 where token j-1 equals token i, j-1 < i (look at what followed
  the earlier occurrence of the current token).
As in TL, rows without a target count too, so a perfect duplicate or induction head scores
about 0.5 there (only the second half has targets). `induction_fixed` is TL's induction
score, kept for comparison with TL; it is the one a position shortcut fools.

induction — the same detection pattern, on sequences built so that the distance between a
segment and its repeat differs in every batch row:

    [prefix: p random][segment S: L distinct tokens][gap: g random][S again][random tail]

with p, L, g random per row and the distance D = L + g distinct across rows (never 1..3,
so neither previous-token nor "two back" can hit it); the tokens outside S never occur in
S, so every query in the repeat has exactly one target. The score is the attention mass on
the target averaged over the queries of the repeat (rows without a target are left out,
so a perfect induction head scores 1.0), then over batch rows. A head attending at a fixed
offset hits the target in at most one row: it scores ≤ 1 / varied_batch (0.125 at 8 rows).

position_copy — on random tokens without repeats (no induction or duplicate target
anywhere), the largest mean attention a head pays at one fixed offset d (key i-d, d ≥ 2,
over the queries i ≥ d and the batch); `position_offset` is that d. A genuine induction head
has nothing to copy there and scores low; the shortcut head scores ≈ 1 at d = n-1.

Patterns are reduced inside the forward, layer by layer, never stored; one forward runs
all three kinds of sequence (they have the same length).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

KINDS = ("previous_token", "duplicate_token", "induction")
MIN_DISTANCE = 4  # a repeat at distance D puts the target at offset D-1: 3 and up is neither i nor i-1 nor i-2
MIN_SEGMENT = 2


@dataclass(frozen=True)
class HeadCensus:
    previous_token: torch.Tensor  # (L, nh) float32 on CPU, TL's score
    duplicate_token: torch.Tensor  # (L, nh) TL's score
    induction: torch.Tensor  # (L, nh) on repeats of varied length and offset (1.0 = perfect)
    tokens: torch.Tensor  # (B, T) the fixed-half repeats (TL's sequences)
    induction_fixed: torch.Tensor  # (L, nh) TL's induction score on `tokens`
    position_copy: torch.Tensor  # (L, nh) best fixed-offset attention on non-repeating tokens
    position_offset: torch.Tensor  # (L, nh) int64: that offset d (key i-d)
    varied_tokens: torch.Tensor  # (Bv, T) the varied repeats
    varied_layout: torch.Tensor  # (Bv, 3) int64: start of S, its length L, distance D to the repeat
    plain_tokens: torch.Tensor  # (B, T) the non-repeating tokens position_copy is scored on


def detection_patterns(tokens: torch.Tensor) -> dict[str, torch.Tensor]:
    """tokens (T,) -> {kind: (T, T) 0/1 float pattern}, lower triangular."""
    T = tokens.shape[0]
    prev = torch.zeros(T, T)
    prev[torch.arange(1, T), torch.arange(T - 1)] = 1.0
    same = (tokens[:, None] == tokens[None, :]).float()  # (T, T): same token at i and j
    duplicate = torch.tril(same, diagonal=-1)  # earlier positions only
    induction = torch.zeros(T, T)
    induction[:, 1:] = duplicate[:, :-1]  # key j qualifies when token j-1 repeats token i
    return {"previous_token": prev, "duplicate_token": duplicate, "induction": torch.tril(induction)}


def detection_score(pattern: torch.Tensor, detection: torch.Tensor) -> torch.Tensor:
    """pattern (..., T, T), detection (T, T) or broadcastable -> (...) TL's "mul" score."""
    return (pattern * detection).sum(dim=(-2, -1)) / pattern.sum(dim=(-2, -1))


def repeated_random_tokens(vocab_size: int, half: int, batch: int, seed: int, bos: int | None = None) -> torch.Tensor:
    """(batch, 2*half [+1]) random tokens, each row its first half repeated once."""
    gen = torch.Generator().manual_seed(seed)
    first = torch.randint(0, vocab_size, (batch, half), generator=gen)  # (B, n)
    rows = torch.cat([first, first], dim=1)  # (B, 2n)
    if bos is not None:
        rows = torch.cat([torch.full((batch, 1), bos), rows], dim=1)
    return rows


def _pool(vocab_size: int, bos: int | None) -> torch.Tensor:
    """The token ids a census sequence draws from: all but the BOS token (its own column)."""
    ids = torch.arange(vocab_size)
    return ids[ids != bos] if bos is not None else ids


def varied_repeat_tokens(vocab_size: int, length: int, batch: int, seed: int,
                         bos: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(tokens (batch, length [+1]), layout (batch, 3)): one segment repeated once per row, at
    a distance that differs between rows (see the module doc). layout = (start of the first
    copy, segment length, distance from the first copy to the second), BOS included."""
    pool = _pool(vocab_size, bos)
    max_seg = min(len(pool) // 2, length // 2)
    max_dist = length - MIN_SEGMENT
    if max_seg < MIN_SEGMENT or max_dist < MIN_DISTANCE:
        raise ValueError(f"a varied-repeat census needs at least {MIN_DISTANCE + MIN_SEGMENT} positions and "
                         f"{2 * MIN_SEGMENT} token ids; got {length} positions and {len(pool)} ids")
    gen = torch.Generator().manual_seed(seed * 7919 + 17)
    choices = torch.arange(MIN_DISTANCE, max_dist + 1)  # distinct distances, as many as there are
    order = choices[torch.randperm(len(choices), generator=gen)]
    rows, layout = [], []
    for b in range(batch):
        dist = int(order[b % len(order)])
        top = max(MIN_SEGMENT, min(dist, length - dist, max_seg))
        seg_len = int(torch.randint(MIN_SEGMENT, top + 1, (1,), generator=gen))
        start = int(torch.randint(0, length - dist - seg_len + 1, (1,), generator=gen))
        shuffled = pool[torch.randperm(len(pool), generator=gen)]
        segment, others = shuffled[:seg_len], shuffled[seg_len:]  # no token of S elsewhere
        row = others[torch.randint(0, len(others), (length,), generator=gen)]  # (T,)
        row[start:start + seg_len] = segment
        row[start + dist:start + dist + seg_len] = segment
        rows.append(row)
        layout.append((start, seg_len, dist))
    tokens = torch.stack(rows)  # (B, T)
    layout = torch.tensor(layout, dtype=torch.long)  # (B, 3)
    if bos is not None:
        tokens = torch.cat([torch.full((batch, 1), bos), tokens], dim=1)  # (B, T+1)
        layout[:, 0] += 1
    return tokens, layout


def nonrepeating_tokens(vocab_size: int, length: int, batch: int, seed: int, bos: int | None = None) -> torch.Tensor:
    """(batch, length [+1]) random tokens with no id twice in a row when the vocabulary allows
    (else as few repeats as uniform draws give): nothing for an induction head to copy."""
    pool = _pool(vocab_size, bos)
    gen = torch.Generator().manual_seed(seed * 7919 + 29)
    if len(pool) >= length:
        rows = torch.stack([pool[torch.randperm(len(pool), generator=gen)[:length]] for _ in range(batch)])
    else:
        rows = pool[torch.randint(0, len(pool), (batch, length), generator=gen)]  # (B, T)
    if bos is not None:
        rows = torch.cat([torch.full((batch, 1), bos), rows], dim=1)
    return rows


def repeat_queries(layout: torch.Tensor, length: int) -> torch.Tensor:
    """layout (B, 3) -> (B, T) 0/1 float: the query positions of each row's second copy."""
    pos = torch.arange(length)  # (T,)
    first = (layout[:, 0] + layout[:, 2])[:, None]  # (B, 1)
    return ((pos >= first) & (pos < first + layout[:, 1:2])).float()  # (B, T)


def varied_induction_score(pattern: torch.Tensor, detection: torch.Tensor, queries: torch.Tensor) -> torch.Tensor:
    """pattern (B, nh, T, T), detection (B, T, T), queries (B, T) -> (nh,): the attention mass
    on the induction target, averaged over the repeat's queries of each row, then over rows."""
    mass = (pattern * detection[:, None]).sum(dim=-1)  # (B, nh, T): mass on targets per query
    per_row = (mass * queries[:, None]).sum(dim=-1) / queries.sum(dim=-1)[:, None]  # (B, nh)
    return per_row.mean(dim=0)  # (nh,)


def offset_scores(pattern: torch.Tensor, offsets: range) -> torch.Tensor:
    """pattern (B, nh, T, T) -> (len(offsets), nh): mean attention from query i to key i-d."""
    return torch.stack([pattern.diagonal(offset=-d, dim1=-2, dim2=-1).mean(dim=(0, 2))  # (nh,)
                        for d in offsets])


def position_offsets(length: int) -> range:
    """The offsets d the position-copy score tries: from 2 (1 is previous-token) to where a
    quarter of the queries remain to average over."""
    return range(2, max(3, length - length // 4 + 1))


@torch.no_grad()
def head_census(model, half: int = 50, batch: int = 4, seed: int = 0, bos: int | None = None,
                varied_batch: int = 8) -> HeadCensus:
    """Score every head of `model` (see the module doc). `half` is cut to fit block_size;
    the varied repeats and the non-repeating tokens have the same length, 2 × half."""
    cfg = model.config
    room = cfg.block_size - (1 if bos is not None else 0)
    half = min(int(half), room // 2)
    if 2 * half < MIN_DISTANCE + MIN_SEGMENT:
        raise ValueError(f"block_size={cfg.block_size} is too short for a head census (it needs at least "
                         f"{MIN_DISTANCE + MIN_SEGMENT} positions for a repeated sequence)")
    if batch < 1 or varied_batch < 1:
        raise ValueError(f"batch and varied_batch must be at least 1, got {batch} and {varied_batch}")
    length = 2 * half
    fixed = repeated_random_tokens(cfg.vocab_size, half, batch, seed, bos)  # (B, T)
    varied, layout = varied_repeat_tokens(cfg.vocab_size, length, varied_batch, seed, bos)  # (Bv, T), (Bv, 3)
    plain = nonrepeating_tokens(cfg.vocab_size, length, batch, seed, bos)  # (B, T)
    T = fixed.shape[1]
    dev = model.device
    fixed_det = [detection_patterns(row) for row in fixed]
    stacked = {k: torch.stack([d[k] for d in fixed_det]).to(dev) for k in KINDS}  # (B, T, T)
    varied_det = torch.stack([detection_patterns(row)["induction"] for row in varied]).to(dev)  # (Bv, T, T)
    queries = repeat_queries(layout, T).to(dev)  # (Bv, T)
    offsets = position_offsets(T)
    names = ("previous_token", "duplicate_token", "induction_fixed", "induction", "position_copy")
    scores = {k: torch.empty(cfg.n_layer, cfg.n_head) for k in names}
    best_offset = torch.empty(cfg.n_layer, cfg.n_head, dtype=torch.long)
    Bf, Bv = fixed.shape[0], varied.shape[0]

    def reduce(pattern: torch.Tensor, hook) -> None:  # pattern (Bf + Bv + B, nh, T, T)
        layer = int(hook.name.split(".")[1])
        p = pattern.float()
        pf, pv, pp = p[:Bf], p[Bf:Bf + Bv], p[Bf + Bv:]
        for kind in KINDS:
            name = "induction_fixed" if kind == "induction" else kind
            scores[name][layer] = detection_score(pf, stacked[kind][:, None]).mean(dim=0).cpu()  # (nh,)
        scores["induction"][layer] = varied_induction_score(pv, varied_det, queries).cpu()  # (nh,)
        per_offset = offset_scores(pp, offsets)  # (n_offsets, nh)
        best, where = per_offset.max(dim=0)  # (nh,), (nh,)
        scores["position_copy"][layer] = best.cpu()
        best_offset[layer] = (where + offsets.start).cpu()

    everything = torch.cat([fixed, varied, plain]).to(dev)  # (Bf + Bv + B, T)
    with model.hooks([(lambda name: name.endswith("attn.hook_pattern"), reduce)]):
        model(everything, logits=None)
    return HeadCensus(previous_token=scores["previous_token"], duplicate_token=scores["duplicate_token"],
                      induction=scores["induction"], tokens=fixed, induction_fixed=scores["induction_fixed"],
                      position_copy=scores["position_copy"], position_offset=best_offset,
                      varied_tokens=varied, varied_layout=layout, plain_tokens=plain)
