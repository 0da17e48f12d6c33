"""session.attention keeps the last prompt's state: every field equals a recompute with reuse
off, and a model swap or a settings change never serves the old state."""
from __future__ import annotations

import numpy as np

from explorer.session.core import Session

FIELDS = ("token_ids", "thumbnails", "bin_edges", "entropy", "prev_token", "first_token", "lens_probs")


def assert_same_result(a, b) -> None:
    for name in FIELDS:
        np.testing.assert_allclose(getattr(a, name), getattr(b, name), atol=1e-5, err_msg=name)
    assert a.tokens == b.tokens and a.cropped == b.cropped and a.bos_added == b.bos_added
    assert set(a.full) == set(b.full)
    for layer in a.full:
        np.testing.assert_allclose(a.full[layer], b.full[layer], atol=1e-5)


def test_typed_edits_equal_a_recompute_and_reuse_the_prefix():
    live, fresh = Session.tiny(seed=1, block_size=40), Session.tiny(seed=1, block_size=40)
    fresh.attention.prefix_reuse = False
    texts = ["The cat", "The cat sat", "The cat sat on", "The cat sat on the mat", "The dog sat on the mat",
             "The dog sat on the mat" + " and more words" * 5, "The dog", ""]
    reused = []
    for bos in (False, True):
        for text in texts:
            a = live.attention.capture(text, full_layers=(1,), thumb_size=8, prepend_bos=bos)
            b = fresh.attention.capture(text, full_layers=(1,), thumb_size=8, prepend_bos=bos)
            assert_same_result(a, b)
            assert b.reused_tokens == 0
            reused.append(a.reused_tokens)
    assert max(reused) > 0
    assert fresh.attention.cache_bytes() == 0 and live.attention.cache_bytes() > 0


def test_settings_change_and_model_swap_start_over():
    s = Session.tiny(seed=2)
    s.attention.capture("one two three four five", thumb_size=4)
    assert s.attention.capture("one two three four five six", thumb_size=4).reused_tokens > 0
    assert s.attention.capture("one two three four five six", thumb_size=8).reused_tokens == 0  # thumb size
    assert s.attention.capture("one two three four five six", thumb_size=8, full_layers=(1,)).reused_tokens == 0
    assert s.attention.capture("one two three four five six", thumb_size=8, full_layers=(1,),
                       prepend_bos=True).reused_tokens == 0
    before = s.attention.capture("one two three four five six seven", thumb_size=8, full_layers=(1,), prepend_bos=True)
    assert before.reused_tokens > 0
    s.build(s.config.to_dict(), "gpt2", seed=9)  # same shape, other weights
    after = s.attention.capture("one two three four five six seven", thumb_size=8, full_layers=(1,), prepend_bos=True)
    assert after.reused_tokens == 0 and after.version == before.version + 1
    fresh = Session(s.model, s.info)
    fresh.attention.prefix_reuse = False
    assert_same_result(after, fresh.attention.capture("one two three four five six seven", thumb_size=8,
                                              full_layers=(1,), prepend_bos=True))
    s.attention.clear_cache()
    assert s.attention.cache_bytes() == 0
    assert s.attention.capture("one two three four five six seven", thumb_size=8, full_layers=(1,),
                       prepend_bos=True).reused_tokens == 0


def test_a_capture_with_reuse_off_leaves_the_kept_state_alone():
    s = Session.tiny(seed=3)
    s.attention.capture("alpha beta gamma delta", thumb_size=4)
    s.attention.prefix_reuse = False
    off = s.attention.capture("alpha beta gamma delta epsilon", thumb_size=4)
    s.attention.prefix_reuse = True
    on = s.attention.capture("alpha beta gamma delta epsilon", thumb_size=4)
    assert off.reused_tokens == 0 and on.reused_tokens > 0
    assert_same_result(on, off)
