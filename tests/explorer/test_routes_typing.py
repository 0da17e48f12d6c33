"""The session's routes while typing reuse the unchanged prefix (gptcore.FlowState) and give
what a fresh computation gives: shares and the predictions after every position."""
from __future__ import annotations

import numpy as np

import gptcore
from explorer.session.core import Session


# A share is (|whole| - |whole - part|) / total: with GPT-2's small initial weights a block's update is
# small beside the residual, so float32 rounding of the two norms (a suffix forward against the cache
# vs one over the whole prompt) shows at ~4e-5 in the shares; gptcore's own test, on larger weights,
# holds 1e-5.
TOLERANCE = 1e-4


def assert_same_routes(got, fresh):
    for name in ("attn", "attn_residual", "mlp", "mlp_residual", "predicted_probs"):
        np.testing.assert_allclose(getattr(got, name), getattr(fresh, name), atol=TOLERANCE, err_msg=name)
    assert got.predicted_ids.tolist() == fresh.predicted_ids.tolist()
    assert got.predicted_texts == fresh.predicted_texts and got.tokens == fresh.tokens


def test_typed_prompts_equal_fresh_ones_and_a_version_bump_starts_over():
    session = Session.tiny()
    typed = ["The cat sat", "The cat sat on", "The cat sat on the mat", "The cat sat on the", "A cat sat on the"]
    for text in typed:
        got = session.routes.compute(text)
        session.routes.forget()
        assert_same_routes(got, session.routes.compute(text))
        session.routes.compute(typed[0])  # the next one types on from a different kept prompt
        session.routes.compute(text)

    session.routes.compute("The cat sat on")
    with session.lock:  # new weights in place, as a scrubbed training step loads them
        for p in session.model.parameters():
            p.data.mul_(1.5)
    session.settings_changed("weights")
    got = session.routes.compute("The cat sat on the mat")
    ids = session.encode("The cat sat on the mat")
    np.testing.assert_allclose(got.attn, gptcore.information_flow(session.model, ids).attn, atol=TOLERANCE)


def test_an_ablation_change_recomputes_with_the_head_at_the_floor():
    session = Session.tiny()
    session.routes.compute("The cat sat on the")
    session.interp.set_ablation(heads=[(1, 2)])
    got = session.routes.compute("The cat sat on the mat")
    assert (1, 2) in got.replaced_heads
    assert np.all(got.attn[1, :, :, 2] <= 1e-4)  # every row, the kept ones included, at the floor
