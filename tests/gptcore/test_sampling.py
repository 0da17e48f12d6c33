"""The logits transforms, checked against HF transformers' own processors and against an
independent numpy computation of the top-k / top-p masks."""
import math

import numpy as np
import pytest
import torch

from gptcore.generation.sampling import (
    GenerationError,
    check_settings,
    next_token_distribution,
    top_alternatives,
)

V = 300


@pytest.fixture
def logits():
    g = torch.Generator().manual_seed(0)
    return torch.randn(V, generator=g) * 3  # (V,)


def hf_probs(logits, *, temperature=1.0, top_k=None, top_p=None, repetition_penalty=1.0, context=()):
    """The same distribution built from HF's processors, in generate()'s order."""
    from transformers.generation.logits_process import (
        LogitsProcessorList,
        RepetitionPenaltyLogitsProcessor,
        TemperatureLogitsWarper,
        TopKLogitsWarper,
        TopPLogitsWarper,
    )

    chain = LogitsProcessorList()
    if repetition_penalty != 1.0:
        chain.append(RepetitionPenaltyLogitsProcessor(repetition_penalty))
    if temperature != 1.0:
        chain.append(TemperatureLogitsWarper(temperature))
    if top_k:
        chain.append(TopKLogitsWarper(top_k))
    if top_p is not None and top_p < 1.0:
        chain.append(TopPLogitsWarper(top_p))
    ids = torch.tensor([list(context) or [0]])
    scores = chain(ids, logits[None].clone())
    return torch.softmax(scores[0], dim=-1)


@pytest.mark.parametrize("settings", [
    dict(temperature=0.7),
    dict(temperature=1.3, top_k=17),
    dict(top_p=0.6),
    dict(temperature=0.8, top_k=40, top_p=0.9),
    dict(repetition_penalty=1.5, context=[3, 3, 10, 200, 299]),
    dict(repetition_penalty=0.7, temperature=1.2, top_k=50, top_p=0.95, context=[1, 2, 3]),
])
def test_distribution_equals_hf_processors(logits, settings):
    ours = next_token_distribution(logits, **settings)
    ref = hf_probs(logits, **settings)
    assert torch.allclose(ours, ref, atol=1e-6)
    assert ours.sum().item() == pytest.approx(1.0, abs=1e-5)


def test_top_k_mask_matches_independent_computation(logits):
    probs = next_token_distribution(logits, top_k=25).numpy()
    x = logits.numpy().astype(np.float64)
    keep = np.argsort(-x)[:25]
    expected = np.zeros(V)
    expected[keep] = np.exp(x[keep] - x[keep].max())
    expected /= expected.sum()
    assert set(np.flatnonzero(probs)) == set(keep)
    np.testing.assert_allclose(probs, expected, atol=1e-6)


@pytest.mark.parametrize("top_p", [0.05, 0.3, 0.75, 0.99])
def test_top_p_mask_matches_independent_computation(logits, top_p):
    probs = next_token_distribution(logits, top_p=top_p).numpy()
    x = logits.numpy().astype(np.float64)
    full = np.exp(x - x.max())
    full /= full.sum()
    order = np.argsort(-full)
    # smallest prefix of the ranking whose mass reaches top_p
    n_keep = int(np.searchsorted(np.cumsum(full[order]), top_p) + 1)
    keep = order[:n_keep]
    assert full[keep].sum() >= top_p and full[keep[:-1]].sum() < top_p
    assert set(np.flatnonzero(probs)) == set(keep)
    np.testing.assert_allclose(probs[keep], full[keep] / full[keep].sum(), atol=1e-6)


def test_top_p_keeps_at_least_the_most_likely_token(logits):
    probs = next_token_distribution(logits, top_p=1e-9)
    assert (probs > 0).sum() == 1 and probs.argmax() == logits.argmax()


def test_top_k_off_and_clamped_are_the_plain_softmax(logits):
    plain = torch.softmax(logits, dim=-1)
    for k in (None, 0, V, V + 1000):
        assert torch.allclose(next_token_distribution(logits, top_k=k), plain, atol=1e-7)
    assert torch.allclose(next_token_distribution(logits, top_p=1.0), plain, atol=1e-7)


def test_temperature_divides_the_logits(logits):
    for t in (0.25, 2.0, 7.5):
        assert torch.allclose(next_token_distribution(logits, temperature=t), torch.softmax(logits / t, -1), atol=1e-7)


def test_temperature_zero_and_top_k_one_are_one_hot_at_the_argmax(logits):
    best = int(logits.argmax())
    for probs in (next_token_distribution(logits, temperature=0),
                  next_token_distribution(logits, temperature=0, top_k=5, top_p=0.5),
                  next_token_distribution(logits, top_k=1)):
        assert probs[best] == 1.0 and probs.sum() == 1.0


def test_repetition_penalty_lowers_seen_tokens_whatever_the_sign():
    x = torch.tensor([2.0, -2.0, 1.0, 0.5])
    p0 = next_token_distribution(x)
    p = next_token_distribution(x, repetition_penalty=2.0, context=[0, 1])
    # logit 2 -> 1, logit -2 -> -4; the unseen keep theirs
    expected = torch.softmax(torch.tensor([1.0, -4.0, 1.0, 0.5]), -1)
    assert torch.allclose(p, expected, atol=1e-7)
    assert p[0] < p0[0] and p[1] < p0[1]


def test_vocab_limit_removes_the_tail(logits):
    boosted = logits.clone()
    boosted[250:] += 100  # the tail would win everything
    probs = next_token_distribution(boosted, vocab_limit=250)
    assert probs[250:].sum() == 0
    assert torch.allclose(probs[:250], torch.softmax(logits[:250], -1), atol=1e-6)
    assert int(next_token_distribution(boosted, vocab_limit=250, temperature=0).argmax()) < 250


def test_padded_vocab_is_limited_by_default():
    x = torch.zeros(50304)
    x[50257:] = 50.0  # padding rows of a nanoGPT checkpoint
    probs = next_token_distribution(x)
    assert probs[50257:].sum() == 0 and probs[:50257].sum() == pytest.approx(1.0, abs=1e-5)


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_nan_or_inf_logits_raise_a_clear_error(logits, bad):
    x = logits.clone()
    x[7] = bad
    with pytest.raises(GenerationError, match="NaN or infinite"):
        next_token_distribution(x)
    with pytest.raises(GenerationError):
        next_token_distribution(x, temperature=0)


def test_nan_in_the_removed_tail_is_ignored(logits):
    x = logits.clone()
    x[-1] = float("nan")
    probs = next_token_distribution(x, vocab_limit=V - 1)
    assert torch.isfinite(probs).all() and probs[-1] == 0


@pytest.mark.parametrize("name, value, fragment", [
    ("temperature", -0.1, "from 0 (greedy) to 100"),
    ("temperature", float("nan"), "from 0 (greedy) to 100"),
    ("temperature", float("inf"), "from 0 (greedy) to 100"),
    ("temperature", 1e9, "from 0 (greedy) to 100"),
    ("top_k", -1, ">= 0"),
    ("top_k", 2.5, ">= 0"),
    ("top_p", 0.0, "in (0, 1]"),
    ("top_p", 1.5, "in (0, 1]"),
    ("top_p", float("nan"), "in (0, 1]"),
    ("repetition_penalty", 0.0, "in (0, 100]"),
    ("repetition_penalty", -2.0, "in (0, 100]"),
    ("repetition_penalty", float("inf"), "in (0, 100]"),
    ("max_new_tokens", -1, "from 0 to 1,000,000"),
    ("max_new_tokens", 10**12, "from 0 to 1,000,000"),
])
def test_bad_settings_name_the_allowed_range(name, value, fragment):
    with pytest.raises(ValueError, match=name) as info:
        check_settings(**{name: value})
    assert fragment in str(info.value)


def test_good_settings_pass():
    check_settings(temperature=0, top_k=0, top_p=1.0, repetition_penalty=1.0, max_new_tokens=0)
    check_settings(temperature=100, top_k=10**9, top_p=1e-6, repetition_penalty=100, max_new_tokens=1_000_000)


def test_top_alternatives_are_sorted_and_skip_removed_ids(logits):
    probs = next_token_distribution(logits, top_k=3)
    alts = top_alternatives(probs, 10)
    assert len(alts) == 3
    assert [p for _, p in alts] == sorted((p for _, p in alts), reverse=True)
    assert [i for i, _ in alts] == torch.topk(logits, 3).indices.tolist()
    assert math.isclose(sum(p for _, p in alts), 1.0, abs_tol=1e-6)
    assert top_alternatives(probs, 0) == ()
    assert len(top_alternatives(torch.softmax(logits, -1), 10)) == 10
