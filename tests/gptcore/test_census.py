"""Head census: scores from HF's own attention weights (output_attentions) computed with
plain loops from the definition in TransformerLens's head detector, and the detection
patterns on hand-made sequences."""
import pytest
import torch

pytest.importorskip("transformers")

from hf_oracle import saved_pair  # noqa: E402

from gptcore.probes.census import detection_patterns, detection_score, head_census, repeated_random_tokens  # noqa: E402


def loop_score(A, tokens, kind):
    """TL 'mul' score from its definition, one (query, key) pair at a time."""
    T = len(tokens)
    hit = 0.0
    for i in range(T):
        for j in range(i + 1):
            if kind == "previous_token":
                on = j == i - 1
            elif kind == "duplicate_token":
                on = j < i and tokens[j] == tokens[i]
            else:
                on = 1 <= j and j - 1 < i and tokens[j - 1] == tokens[i]
            hit += float(A[i, j]) if on else 0.0
    return hit / float(A.sum())


def test_census_matches_loops_over_hf_attentions(tmp_path):
    hf, ours = saved_pair(tmp_path, seed=5)
    census = head_census(ours, half=6, batch=2, seed=3)
    tokens = census.tokens
    assert tokens.shape == (2, 12) and torch.equal(tokens[:, :6], tokens[:, 6:])
    with torch.no_grad():
        attentions = hf(tokens, output_attentions=True).attentions  # L × (B, nh, T, T)
    for kind in ("previous_token", "duplicate_token", "induction"):
        want = torch.tensor([[sum(loop_score(attentions[l][b, h], tokens[b].tolist(), kind) for b in range(2)) / 2
                              for h in range(ours.config.n_head)] for l in range(ours.config.n_layer)])
        got = getattr(census, kind)
        assert got.shape == (3, 4)
        torch.testing.assert_close(got, want, rtol=0, atol=1e-5)
        assert want.std() > 1e-3  # heads differ: the comparison can fail


def test_detection_patterns_on_a_known_sequence():
    toks = torch.tensor([4, 7, 9, 4, 7, 9])
    d = detection_patterns(toks)
    assert d["previous_token"][3, 2] == 1 and d["previous_token"].sum() == 5
    assert d["duplicate_token"][3, 0] == 1 and d["duplicate_token"][5, 2] == 1 and d["duplicate_token"].sum() == 3
    # induction: at the second 4 (pos 3) look at what followed the first 4 (pos 1)
    assert d["induction"][3, 1] == 1 and d["induction"][4, 2] == 1 and d["induction"][5, 3] == 1
    assert d["induction"].sum() == 3
    # a perfect previous-token head; a perfect induction head (uniform where it has no target)
    T = 6
    perfect_prev = torch.zeros(T, T)
    perfect_prev[0, 0] = 1
    perfect_prev[torch.arange(1, T), torch.arange(T - 1)] = 1
    assert float(detection_score(perfect_prev, d["previous_token"])) == pytest.approx(5 / 6)
    induct = torch.tril(torch.ones(T, T)) / torch.arange(1, T + 1)[:, None]
    induct[3:] = d["induction"][3:]
    assert float(detection_score(induct, d["induction"])) == pytest.approx(3 / 6)


def test_census_fits_block_size_and_adds_bos(tmp_path):
    _, ours = saved_pair(tmp_path, seed=5)  # block_size 32
    census = head_census(ours, half=50, batch=1, bos=0)
    assert census.tokens.shape == (1, 31) and census.tokens[0, 0] == 0
    assert repeated_random_tokens(10, 3, 2, seed=1).shape == (2, 6)


def test_census_refuses_a_block_too_short_for_a_repeat():
    from gptcore import GPT, GPTConfig

    model = GPT(GPTConfig(vocab_size=20, block_size=3, n_layer=1, n_head=1, n_embd=8), seed=0)
    with pytest.raises(ValueError, match="too short for a head census"):
        head_census(model)
