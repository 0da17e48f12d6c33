"""Rows of random tokens with segments repeated at random distances, mixed into training batches.

Why: the in-context trick an induction head does ("the last time this token came, what came
next?") is the only way to predict the second copy of a random segment, so such rows reward that
head directly, while the text rows keep the model a language model (its previous-token heads,
which an induction head builds on, come from the text). Two facts from issue 21 shape them:
repeats at a *fixed* distance teach a position shortcut (attend i -> i-n+1) instead of induction,
so segments here have random lengths and random gaps, several per row at random places, like the
census's varied repeats (probes/census.py) but from another generator (the census never scores
the very sequences a model trained on); and a char-level text model never trains the embeddings
of its rare characters (43 of pydoc's 103 occur < 200 times in 465k), which the census draws as
often as the others, so the tokens here are uniform over the whole vocabulary.

Measured (issue 21, 1 thread on a shared 2-core box): mixing 25-50 % of such rows into pydoc
topics at 2 layers × 128 wide, block 256, rope, for ~250 CPU-seconds did not yet form an
induction head (census induction ≤ 0.03, the repeats' loss flat at ln 103). It is here for the
search to go on (`with_repeats(load_corpus(), 0.5)`), not yet part of a recipe.

A row is built left to right: a segment of `min_segment`..`max_segment` fresh random tokens,
`0..max_gap` random tokens, the segment again, `0..max_pause` random tokens, the next segment …
until the row is full; the tokens are uniform over the whole vocabulary (so every embedding
trains, which the census's uniform draws need). Everything is a function of the generator:
`RepeatMixCorpus.batch` seeds it from (seed, split, stream, iteration) as data.py does, so a
run's batches do not depend on the number of processes, and a resume continues them.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import torch

from gptcore.training.data import Corpus, DataError, batch_seed

MIN_SEGMENT = 4
MAX_SEGMENT = 32
MAX_GAP = 32
MAX_PAUSE = 16
REPEAT_STREAM = "repeats"  # the generator stream of the synthetic rows, apart from the text windows'


def repeated_segments(rows: int, length: int, vocab_size: int, generator: torch.Generator,
                      min_segment: int = MIN_SEGMENT, max_segment: int = MAX_SEGMENT, max_gap: int = MAX_GAP,
                      max_pause: int = MAX_PAUSE) -> torch.Tensor:
    """(rows, length) int64 random tokens, each row holding segments repeated once at a random
    distance (see the module doc). A row too short for one repeat of min_segment is plain noise."""
    if vocab_size < 2 or not 1 <= min_segment <= max_segment or max_gap < 0 or max_pause < 0:
        raise DataError(f"repeated segments need vocab_size >= 2, 1 <= min_segment <= max_segment and "
                        f"gaps >= 0; got vocab_size={vocab_size}, segments {min_segment}..{max_segment}, "
                        f"max_gap={max_gap}, max_pause={max_pause}")
    out = torch.randint(vocab_size, (rows, length), generator=generator)  # (R, T): the noise between repeats

    def draw(low: int, high: int) -> int:
        return int(torch.randint(low, high + 1, (1,), generator=generator))

    for r in range(rows):
        pos = draw(0, max_pause)
        while True:
            seg, gap = draw(min_segment, max_segment), draw(0, max_gap)
            if pos + 2 * seg + gap > length:
                break
            out[r, pos + seg + gap:pos + 2 * seg + gap] = out[r, pos:pos + seg]  # the repeat
            pos += 2 * seg + gap + draw(0, max_pause)
    return out


def synthetic_rows(rows: int, fraction: float) -> list[int]:
    """Which rows of a batch of `rows` are synthetic: `fraction` of them, spread evenly (so a
    batch split across micro-steps or ranks gives each a share), none when fraction is 0."""
    return [i for i in range(rows) if int((i + 1) * fraction) > int(i * fraction)]


@dataclass
class RepeatMixCorpus(Corpus):
    """A `Corpus` whose training batches replace `repeat_fraction` of their rows by repeated
    random segments; validation, evaluation and probe batches stay the text (the val loss and
    the in-context-learning score are measured on language, as for any run)."""

    repeat_fraction: float = 0.25

    def __post_init__(self):
        f = self.repeat_fraction
        if isinstance(f, bool) or not isinstance(f, (int, float)) or not 0.0 <= f < 1.0:
            raise DataError(f"repeat_fraction must be in [0, 1) (the share of each training batch that is "
                            f"repeated random segments; the rest stays text), got {f!r}")

    def batch(self, split: str, index: int, rows: int, block_size: int, seed: int,
              stream: str = "train") -> tuple[torch.Tensor, torch.Tensor]:
        x, y = super().batch(split, index, rows, block_size, seed, stream)  # (rows, T) each
        chosen = synthetic_rows(rows, self.repeat_fraction) if (split, stream) == ("train", "train") else []
        if chosen:
            gen = torch.Generator().manual_seed(batch_seed(seed, split, REPEAT_STREAM, index))
            rep = repeated_segments(len(chosen), block_size + 1, self.vocab_size, gen)  # (n, T+1)
            x[chosen], y[chosen] = rep[:, :-1], rep[:, 1:]
        return x, y


def with_repeats(corpus: Corpus, fraction: float) -> RepeatMixCorpus:
    """`corpus` with `fraction` of every training batch made of repeated random segments."""
    fields = {f.name: getattr(corpus, f.name) for f in dataclasses.fields(Corpus)}
    mixed = RepeatMixCorpus(**fields, repeat_fraction=fraction)
    mixed.description = f"{corpus.description}; {fraction:.0%} of training rows repeated random segments"
    return mixed


SKIP_PERMUTATION_SEED = 5  # the fixed permutation g of the skip-bigram below (one per vocabulary size)


def skip_permutation(vocab_size: int) -> torch.Tensor:
    """(vocab_size,) the fixed permutation g of `induction_rows`' skip-bigram."""
    return torch.randperm(vocab_size, generator=torch.Generator().manual_seed(SKIP_PERMUTATION_SEED))


def induction_rows(rows: int, length: int, vocab_size: int, generator: torch.Generator, skip: float = 0.5,
                   pairs: int = 3, min_segment: int = 2, max_segment: int = 8) -> torch.Tensor:
    """(rows, length) int64: the training rows of the induction preset (presets.py).

    Uniform random tokens where, with probability `skip`, token t is g(token t-2) for a fixed
    permutation g (a skip-bigram: it rewards a previous-token head in layer 0 directly, which
    without it stays weak and leaves the induction head nothing to compose with); then `pairs`
    times a segment of min_segment..max_segment tokens is copied to a random distance D
    (max(L, 4) ≤ D, varied per copy, so no fixed offset predicts it), later copies overwriting
    earlier ones."""
    if vocab_size < 2 or not 1 <= min_segment <= max_segment or not 0.0 <= skip <= 1.0 or pairs < 0:
        raise DataError(f"induction rows need vocab_size >= 2, 1 <= min_segment <= max_segment, skip in [0, 1] "
                        f"and pairs >= 0; got vocab_size={vocab_size}, segments {min_segment}..{max_segment}, "
                        f"skip={skip}, pairs={pairs}")
    x = torch.randint(vocab_size, (rows, length), generator=generator)  # (R, T)
    if skip > 0:
        perm = skip_permutation(vocab_size)
        follow = torch.rand(rows, length, generator=generator) < skip  # (R, T)
        for t in range(2, length):
            x[:, t] = torch.where(follow[:, t], perm[x[:, t - 2]], x[:, t])

    def draw(low: int, high: int) -> int:
        return int(torch.randint(low, high + 1, (1,), generator=generator))

    for r in range(rows):
        for _ in range(pairs):
            seg = draw(min_segment, max_segment)
            low = max(seg, 4)
            if length - seg < low:
                continue
            dist = draw(low, length - seg)
            start = draw(0, length - dist - seg)
            x[r, start + dist:start + dist + seg] = x[r, start:start + seg]
    return x


# 64 printable symbols: the induction rows' ids read back as characters, so samples, the probe
# prompt and the app's char tokenizer (char_vocab.json) work for them as for any char-level text.
INDUCTION_SYMBOLS = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ+/"


@dataclass
class InductionCorpus(Corpus):
    """The induction preset's data as a `Corpus`: every batch — training, evaluation, probes — is
    fresh `induction_rows`, seeded by (seed, split, stream, index) like text windows, so a run is
    reproducible and does not depend on the number of processes. `train`/`val` hold a fixed sample
    of rows only for what reads them directly (the probe prompt, run.json's sizes)."""

    skip: float = 0.5
    pairs: int = 3
    min_segment: int = 2
    max_segment: int = 8

    def batch(self, split: str, index: int, rows: int, block_size: int, seed: int,
              stream: str = "train") -> tuple[torch.Tensor, torch.Tensor]:
        if split not in ("train", "val"):
            raise DataError(f"split must be 'train' or 'val', got {split!r}")
        gen = torch.Generator().manual_seed(batch_seed(seed, split, stream, index))
        both = self.rows(rows, block_size + 1, gen)  # (rows, T+1)
        return both[:, :-1].contiguous(), both[:, 1:].contiguous()  # (rows, T) each

    def rows(self, rows: int, length: int, generator: torch.Generator) -> torch.Tensor:
        return induction_rows(rows, length, self.vocab_size, generator, skip=self.skip, pairs=self.pairs,
                              min_segment=self.min_segment, max_segment=self.max_segment)


def induction_corpus(vocab_size: int = 64, skip: float = 0.5, pairs: int = 3, min_segment: int = 2,
                     max_segment: int = 8, sample_rows: int = 16, sample_length: int = 256) -> InductionCorpus:
    """The corpus of the induction preset (presets.py), named for run.json and the Train panel."""
    if not 2 <= vocab_size <= len(INDUCTION_SYMBOLS):
        raise DataError(f"the induction rows' vocab_size must be in 2..{len(INDUCTION_SYMBOLS)} (one printable "
                        f"symbol each), got {vocab_size}")
    corpus = InductionCorpus(name="induction rows", description=(
        f"synthetic induction rows ({vocab_size} symbols, half the tokens g(token two back), {pairs} segments of "
        f"{min_segment}-{max_segment} tokens copied to varied distances)"), train=np.empty(0, np.int64),
        val=np.empty(0, np.int64), vocab_size=vocab_size, tokenizer="char", chars=list(INDUCTION_SYMBOLS[:vocab_size]),
        skip=skip, pairs=pairs, min_segment=min_segment, max_segment=max_segment)
    for split, seed in (("train", 0), ("val", 1)):
        sample = corpus.rows(sample_rows, sample_length, torch.Generator().manual_seed(seed))  # (R, L)
        setattr(corpus, split, sample.reshape(-1).numpy())
    return corpus
