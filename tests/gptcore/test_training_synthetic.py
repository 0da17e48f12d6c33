"""Repeated random segments mixed into training batches (gptcore.training.synthetic): every
repeat is a copy at a varied distance, the mix touches only training batches, is a function of
(seed, iteration) and spreads its rows over the batch."""
import random

import pytest
import torch

from gptcore.training.data import Corpus, DataError, corpus_from_text
from gptcore.training.synthetic import (RepeatMixCorpus, repeated_segments, synthetic_rows, with_repeats)


def _copies(row: torch.Tensor, min_len: int = 4) -> set[int]:
    """Distances d at which a run of min_len tokens of `row` recurs d positions later."""
    T = len(row)
    found = set()
    for d in range(1, T):
        same = (row[d:] == row[:-d]).int()  # (T-d,)
        run = 0
        for s in same.tolist():
            run = run + 1 if s else 0
            if run >= min_len:
                found.add(d)
                break
    return found


def test_rows_hold_segments_repeated_at_varied_distances():
    gen = torch.Generator().manual_seed(0)
    rows = repeated_segments(16, 257, vocab_size=103, generator=gen)
    assert rows.shape == (16, 257) and rows.dtype == torch.int64
    assert int(rows.min()) >= 0 and int(rows.max()) < 103
    distances = set()
    for row in rows:
        found = _copies(row)
        assert found  # every row of 257 has room for at least one repeat
        distances |= found
    assert len(distances) >= 10  # no single distance a position shortcut could learn
    # noise alone would almost never hold a 4-token copy: the repeats are ours
    noise = torch.randint(103, (16, 257), generator=torch.Generator().manual_seed(1))
    assert sum(bool(_copies(r)) for r in noise) <= 1


def test_the_same_generator_seed_gives_the_same_rows_and_bad_settings_are_refused():
    a = repeated_segments(3, 64, 20, torch.Generator().manual_seed(5))
    b = repeated_segments(3, 64, 20, torch.Generator().manual_seed(5))
    assert torch.equal(a, b)
    with pytest.raises(DataError, match="min_segment <= max_segment"):
        repeated_segments(1, 64, 20, torch.Generator(), min_segment=8, max_segment=4)


def test_synthetic_rows_are_spread_over_the_batch():
    assert synthetic_rows(8, 0.25) == [3, 7]
    assert synthetic_rows(16, 0.25) == [3, 7, 11, 15]
    assert synthetic_rows(8, 0.0) == []


@pytest.fixture
def text_corpus() -> Corpus:
    rng = random.Random(0)
    text = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz ") for _ in range(5000))
    return corpus_from_text(text, "letters", "char", "a test text")


def test_the_mix_replaces_a_share_of_training_rows_only(text_corpus):
    mixed = with_repeats(text_corpus, 0.25)
    assert isinstance(mixed, RepeatMixCorpus) and isinstance(mixed, Corpus)
    assert mixed.vocab_size == text_corpus.vocab_size and mixed.chars == text_corpus.chars
    x, y = mixed.batch("train", 7, rows=8, block_size=64, seed=1)
    tx, ty = text_corpus.batch("train", 7, rows=8, block_size=64, seed=1)
    same = [bool(torch.equal(x[i], tx[i])) for i in range(8)]
    assert same == [True, True, True, False, True, True, True, False]
    assert torch.equal(x[3, 1:], y[3, :-1])  # y is x shifted by one, as for text
    assert _copies(torch.cat([x[3], y[3, -1:]]))  # and the row holds a repeat
    x2, _ = mixed.batch("train", 7, rows=8, block_size=64, seed=1)
    assert torch.equal(x, x2)  # a function of (seed, iteration): a resume sees the same batch
    assert not torch.equal(mixed.batch("train", 8, rows=8, block_size=64, seed=1)[0][3], x[3])
    for split, stream in (("val", "train"), ("val", "eval"), ("train", "eval"), ("val", "probe")):
        got = mixed.batch(split, 0, rows=8, block_size=64, seed=1, stream=stream)[0]
        assert torch.equal(got, text_corpus.batch(split, 0, rows=8, block_size=64, seed=1, stream=stream)[0])


def test_a_fraction_outside_0_1_is_refused_by_name(text_corpus):
    with pytest.raises(DataError, match="repeat_fraction must be in"):
        with_repeats(text_corpus, 1.0)


def test_induction_rows_hold_skip_bigram_and_varied_copies():
    from gptcore.training.synthetic import induction_rows, skip_permutation
    gen = torch.Generator().manual_seed(0)
    rows = induction_rows(64, 33, vocab_size=64, generator=gen)  # (64, 33)
    assert rows.shape == (64, 33) and rows.dtype == torch.int64 and 0 <= rows.min() and rows.max() < 64
    g = skip_permutation(64)
    follows = (rows[:, 2:] == g[rows[:, :-2]]).float().mean()
    assert 0.3 < follows < 0.7  # about half the tokens follow the skip-bigram
    distances = set()
    for row in rows:
        distances |= _copies(row, min_len=2)
    assert len({d for d in distances if d >= 4}) > 10  # copies at many distances, not one offset
    again = induction_rows(64, 33, vocab_size=64, generator=torch.Generator().manual_seed(0))
    assert torch.equal(rows, again)
    with pytest.raises(DataError):
        induction_rows(2, 33, vocab_size=64, generator=gen, skip=1.5)


def test_induction_preset_builds_and_a_short_run_lowers_the_loss():
    from gptcore import GPT, GPTConfig
    from gptcore.training import Trainer
    from gptcore.training.config import TrainConfig
    from gptcore.training.presets import INDUCTION_PRESET as P
    from gptcore.training.synthetic import induction_rows
    cfg = GPTConfig(**P["model"])
    model = GPT(cfg, seed=P["init_seed"])
    tc = TrainConfig(**{**P["train"], "batch_size": 32, "max_iters": 80, "warmup_iters": 10})
    trainer = Trainer(model, tc)
    spec = {k: v for k, v in P["corpus"].items() if k != "kind"}
    gen = torch.Generator().manual_seed(0)
    losses = []
    for _ in range(80):
        r = induction_rows(tc.batch_size, cfg.block_size + 1, cfg.vocab_size, gen, **spec)
        losses.append(trainer.step(r[:, :-1], r[:, 1:]))
    assert sum(losses[-10:]) / 10 < sum(losses[:5]) / 5 - 0.08  # the skip-bigram is learned first
