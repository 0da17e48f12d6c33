"""Head census: which heads behave like previous-token, duplicate-token or induction heads?

Scored the way TransformerLens's head detector scores them (`detect_head`, error measure
"mul", nothing excluded): for a head's pattern A (T, T) and a 0/1 detection pattern D
marking where such a head would look,

    score = Σ (A ⊙ D) / Σ A        (= the mean over query rows of the attention mass on D)

on a sequence of random tokens repeated twice, [r_1 … r_n, r_1 … r_n], where
- previous-token: D[i, i-1] = 1;
- duplicate-token: D[i, j] = 1 where token j equals token i, j < i (the second copy looks
  back at the first);
- induction: D[i, j] = 1 where token j-1 equals token i, j-1 < i (look at what followed the
  earlier occurrence of the current token).
As in TL, rows without a target count too, so a perfect duplicate or induction head scores
about 0.5 on a sequence repeated twice (only the second half has targets); a perfect
previous-token head scores (T-1)/T. Scores are averaged over a small batch of such
sequences. Patterns are reduced inside the forward, layer by layer, never stored.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

KINDS = ("previous_token", "duplicate_token", "induction")


@dataclass(frozen=True)
class HeadCensus:
    previous_token: torch.Tensor  # (L, nh) float32 on CPU
    duplicate_token: torch.Tensor  # (L, nh)
    induction: torch.Tensor  # (L, nh)
    tokens: torch.Tensor  # (B, T) the sequences scored on


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


@torch.no_grad()
def head_census(model, half: int = 50, batch: int = 4, seed: int = 0, bos: int | None = None) -> HeadCensus:
    """Score every head of `model` (see the module doc). `half` is cut to fit block_size."""
    cfg = model.config
    room = cfg.block_size - (1 if bos is not None else 0)
    half = min(int(half), room // 2)
    if half < 2:
        raise ValueError(f"block_size={cfg.block_size} is too short for a head census (it needs at least "
                         f"4 positions for a repeated sequence)")
    if batch < 1:
        raise ValueError(f"batch must be at least 1, got {batch}")
    tokens = repeated_random_tokens(cfg.vocab_size, half, batch, seed, bos)  # (B, T)
    detections = [detection_patterns(row) for row in tokens]
    stacked = {k: torch.stack([d[k] for d in detections]).to(model.device) for k in KINDS}  # (B, T, T)
    scores = {k: torch.empty(cfg.n_layer, cfg.n_head) for k in KINDS}

    def reduce(pattern: torch.Tensor, hook) -> None:  # pattern (B, nh, T, T)
        layer = int(hook.name.split(".")[1])
        p = pattern.float()
        for kind in KINDS:
            scores[kind][layer] = detection_score(p, stacked[kind][:, None]).mean(dim=0).cpu()  # (nh,)

    with model.hooks([(lambda name: name.endswith("attn.hook_pattern"), reduce)]):
        model(tokens.to(model.device), logits=None)
    return HeadCensus(scores["previous_token"], scores["duplicate_token"], scores["induction"], tokens)
