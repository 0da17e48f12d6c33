"""The session's attribution, ablation and patching: numpy out, ablation as versioned state
used by every computation, and each bad input of issue 14 as a clear message."""
import threading

import numpy as np
import pytest
import torch

from explorer.session.core import Session

IOI = "When Mary and John went to the store, John gave a drink to"
IOI_CORRUPT = "When Mary and John went to the store, Mary gave a drink to"


@pytest.fixture
def session():
    return Session.tiny(seed=3)


def test_attribution_defaults_to_the_top_two_and_sums_to_the_total(session):
    r = session.interp.attribution(IOI)
    logits = session.generation.next_token(IOI).logits
    top2 = np.argsort(-logits)[:2]
    assert (r.target.id, r.contrast.id) == tuple(int(t) for t in top2)
    assert r.total == pytest.approx(float(logits[top2[0]] - logits[top2[1]]), abs=1e-4)
    assert r.heads.shape == (2, 4) and r.attn.shape == r.mlps.shape == (2,)
    assert float(r.heads.sum() + r.mlps.sum()) + r.embed + r.bias == pytest.approx(r.total, abs=1e-4)
    assert r.tokens[-1] == " to" and r.top[0] == r.target and r.top_probs[0] >= r.top_probs[1]
    plain = session.interp.attribution(IOI, target=r.contrast.id, contrast=None)
    assert plain.contrast is None and plain.total == pytest.approx(float(logits[top2[1]]), abs=1e-4)


def test_tokens_and_answers_that_cannot_be_used(session):
    assert session.interp.resolve_token(" Mary").text == " Mary"
    with pytest.raises(ValueError, match=r"is 3 tokens \(' Mary' \+ 'j' \+ 'ane'\)"):
        session.interp.resolve_token(" Maryjane")
    with pytest.raises(ValueError, match="type a token"):
        session.interp.resolve_token("")
    with pytest.raises(ValueError, match="same token"):
        session.interp.attribution(IOI, target=5335, contrast=5335)
    with pytest.raises(ValueError, match="outside this model's vocabulary"):
        session.interp.attribution(IOI, target=60000, contrast=None)
    small = Session.tiny(vocab_size=300)
    with pytest.raises(ValueError, match="outside this model's vocabulary"):
        small.interp.resolve_token(" Mary")


def test_ablation_is_versioned_state_that_every_computation_uses(session):
    before_logits = session.generation.next_token(IOI).logits
    before_attention = session.attention.capture(IOI).thumbnails
    v = session.version
    state = session.interp.set_ablation([(0, 1), (1, 2), (1, 3)], [], "zero")
    assert state.text() == "3 heads ablated" and session.interp.ablation is state and session.version == v + 1
    logits = session.generation.next_token(IOI)
    assert logits.version == session.version
    assert np.abs(logits.logits - before_logits).max() > 1e-4  # the generation pane's distribution
    assert np.abs(session.attention.capture(IOI).thumbnails[1] - before_attention[1]).max() > 1e-6  # layer 1 sees it
    np.testing.assert_allclose(session.attention.capture(IOI).thumbnails[0], before_attention[0], atol=1e-6)  # layer 0 cannot
    r = session.interp.attribution(IOI)
    assert r.ablation is state and r.heads[0, 1] == 0.0 and r.heads[1, 3] == 0.0
    tokens = [t.token for t in session.generation.stream(session.generation.context(IOI).ids, dict(max_new_tokens=4, temperature=0))]
    session.interp.clear_ablation()
    assert not session.interp.ablation.active and session.version == v + 2
    np.testing.assert_array_equal(session.generation.next_token(IOI).logits, before_logits)  # exactly the model again
    assert not any(hp._forward_hooks for hp in session.model.hook_dict.values())
    plain = [t.token for t in session.generation.stream(session.generation.context(IOI).ids, dict(max_new_tokens=4, temperature=0))]
    assert len(tokens) == len(plain) == 4


def test_mean_ablation_and_toggles(session):
    state = session.interp.toggle_head(1, 0, mode="mean")
    assert state.heads == ((1, 0),) and state.mode == "mean" and state.text() == "1 head ablated (mean)"
    state = session.interp.toggle_mlp(0)
    assert state.mlps == (0,) and state.heads == ((1, 0),) and state.mode == "mean"
    assert session.interp.toggle_head(1, 0).heads == ()
    assert session.interp.attribution(IOI).mlps[0] != 0.0  # the mean is not zero


def test_bad_ablations_leave_the_state_as_it_was(session):
    session.interp.set_ablation([(0, 0)])
    v = session.version
    with pytest.raises(ValueError, match="all 8 heads"):
        session.interp.set_ablation([(l, h) for l in range(2) for h in range(4)])
    with pytest.raises(ValueError, match="does not exist"):
        session.interp.set_ablation([(5, 0)])
    with pytest.raises(ValueError, match="resample needs a reference"):
        session.interp.set_ablation([(0, 1)], mode="resample")
    assert session.interp.ablation.heads == ((0, 0),) and session.version == v


def test_a_model_swap_clears_the_ablation(session):
    session.interp.set_ablation([(0, 0)], [1])
    old = session.model
    session.build(dict(n_layer=1, n_head=2, n_embd=32, block_size=64), seed=0)
    assert not session.interp.ablation.active
    assert not any(hp._forward_hooks for hp in old.hook_dict.values())


def test_patching_maps_and_a_patched_distribution(session):
    r = session.interp.attribution(IOI)
    p = session.interp.patching(IOI, IOI_CORRUPT, r.target.id, r.contrast.id)
    T = len(p.tokens)
    assert p.resid.shape == p.attn.shape == p.mlp.shape == (2, T) and p.heads.shape == (2, 4)
    assert p.tokens[9] == " John" and p.corrupt_tokens[9] == " Mary"
    np.testing.assert_allclose(p.resid[0, :9], 0, atol=1e-5)  # positions equal in both prompts restore nothing
    np.testing.assert_allclose(p.resid[0, 9], 1, atol=1e-4)  # the one changed token restores everything
    d = session.interp.patched_distribution(IOI, IOI_CORRUPT, "resid", 0, 9, rows=5)
    clean = session.generation.next_token(IOI).logits
    want = np.exp(clean - clean.max()) / np.exp(clean - clean.max()).sum()
    assert d.probs.shape == (5,) and d.probs[0] == pytest.approx(float(want.max()), rel=1e-4)
    assert d.label == "resid L0 ' John' (pos 9)"


def test_patching_bad_prompts(session):
    with pytest.raises(ValueError, match="clean prompt is 14 tokens and the corrupted prompt 15"):
        session.interp.patching(IOI, IOI_CORRUPT + " him", 284, 286)
    with pytest.raises(ValueError, match="corrupted prompt is empty"):
        session.interp.patching(IOI, "", 284, 286)
    with pytest.raises(ValueError, match="same logit difference"):
        session.interp.patching(IOI, IOI, 284, 286)


def test_a_model_swap_during_patching_stops_it_cleanly(session):
    """A load arriving mid-run: patching stops at its next batch with a message, the new
    model is installed right after, nothing hangs."""
    r = session.interp.attribution(IOI)
    entered, errors = threading.Event(), []

    def progress(done, total, message):
        entered.set()
        session_swap_started.wait(5)
        assert session.swap_pending.wait(5)

    session_swap_started = threading.Event()

    def run():
        try:
            session.interp.patching(IOI, IOI_CORRUPT, r.target.id, r.contrast.id, progress=progress)
        except ValueError as exc:
            errors.append(exc)

    worker = threading.Thread(target=run)
    worker.start()
    assert entered.wait(10)
    v = session.version
    session_swap_started.set()
    session.build(dict(n_layer=1, n_head=2, n_embd=32, block_size=64), seed=1)
    worker.join(10)
    assert not worker.is_alive()
    assert len(errors) == 1 and "a new model is being loaded" in str(errors[0])
    assert session.version == v + 1 and session.config.n_layer == 1


def test_a_model_that_outputs_nan(session):
    with torch.no_grad():
        session.model.blocks[0].mlp.c_fc.weight.fill_(float("nan"))
    with pytest.raises(ValueError, match="NaN/Inf"):
        session.interp.attribution(IOI)
    with pytest.raises(ValueError, match="not finite"):
        session.interp.patching(IOI, IOI_CORRUPT, 284, 286)


def test_head_census_is_cached_per_version(session):
    c = session.interp.census()
    assert c.previous_token.shape == (2, 4) and c.sequence_length == 100
    assert session.interp.census() is c
    session.interp.set_ablation([(0, 0)])
    assert session.interp.census() is not c
    assert len(c.rows()) == 8 and c.rows()[5][:2] == (1, 1)
    assert c.position_copy.shape == c.induction.shape == (2, 4) and c.rows()[5][5] == float(c.position_copy[1, 1])
