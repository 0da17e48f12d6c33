"""Prefix reuse: a kept AttentionState must give, after any edit, exactly what a fresh
capture of the new prompt gives (every field, 1e-5), while running only the changed suffix."""
from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from gptcore.model.config import GPTConfig
from gptcore.model.gpt import GPT
from gptcore.interp.probes.attention import AttentionState, capture_attention

VOCAB, BLOCK = 97, 48


@pytest.fixture(scope="module")
def model():
    cfg = GPTConfig(vocab_size=VOCAB, block_size=BLOCK, n_layer=3, n_head=4, n_embd=32)
    return GPT(cfg, seed=3).eval()


def assert_same_capture(got, want, where: str) -> None:
    assert got.token_ids == want.token_ids, where
    assert got.cropped == want.cropped and got.bos_added == want.bos_added, where
    assert torch.equal(got.bin_edges, want.bin_edges), where
    assert got.thumbnails.shape == want.thumbnails.shape, where
    np.testing.assert_allclose(got.thumbnails.numpy(), want.thumbnails.numpy(), atol=1e-5, err_msg=where)
    assert set(got.full) == set(want.full), where
    for layer in want.full:
        np.testing.assert_allclose(got.full[layer].numpy(), want.full[layer].numpy(), atol=1e-5, err_msg=where)
    for name in ("entropy", "prev_token", "first_token"):
        np.testing.assert_allclose(getattr(got, name).numpy(), getattr(want, name).numpy(), atol=1e-5,
                                   err_msg=f"{where}: {name}")
    if want.lens is None:
        assert got.lens is None, where
    else:
        np.testing.assert_allclose(got.lens.top_probs.numpy(), want.lens.top_probs.numpy(), atol=1e-5, err_msg=where)
        # Ids may only differ where two candidates tie to float rounding.
        differ = got.lens.top_ids != want.lens.top_ids
        assert not differ.any() or torch.allclose(got.lens.top_probs[differ], want.lens.top_probs[differ], atol=1e-5)


def random_edit(rng: random.Random, ids: list[int], history: list[list[int]], future: list[list[int]]):
    """One user action on the token list; returns the new list (history/future updated)."""
    op = rng.choice(["append", "append", "type", "delete", "insert", "cut", "paste", "undo", "redo", "replace_last"])
    new = list(ids)
    if op == "undo" and history:
        future.append(ids)
        return history.pop(), op
    if op == "redo" and future:
        history.append(ids)
        return future.pop(), op
    if op in ("append", "type", "undo", "redo"):
        new += [rng.randrange(VOCAB) for _ in range(1 if op != "append" else rng.randint(1, 3))]
    elif op == "delete":
        del new[len(new) - rng.randint(1, 3):]
    elif op == "insert":
        at = rng.randint(0, len(new))
        new[at:at] = [rng.randrange(VOCAB) for _ in range(rng.randint(1, 4))]
    elif op == "cut":
        at = rng.randint(0, len(new))
        del new[at:at + rng.randint(1, 12)]
    elif op == "paste":  # sometimes beyond block_size: the crop moves every position
        at = rng.randint(0, len(new))
        new[at:at] = [rng.randrange(VOCAB) for _ in range(rng.randint(5, 40))]
    elif op == "replace_last" and new:
        new[-1] = rng.randrange(VOCAB)
    history.append(ids)
    future.clear()
    return new, op


@pytest.mark.parametrize("seed,thumb,full_layers,bos", [
    (0, 4, (1,), None), (1, 8, (0, 2), None), (2, 64, (2,), 0), (3, 3, (), 5), (4, 16, (0,), None),
])
def test_random_edit_scripts_equal_a_fresh_capture_at_every_step(model, seed, thumb, full_layers, bos):
    rng = random.Random(seed)
    state = AttentionState(model, full_layers=full_layers, thumb_size=thumb, bos=bos)
    ids, history, future = [rng.randrange(VOCAB) for _ in range(5)], [], []
    reused = 0
    for step in range(70):
        got = state.capture(ids)
        want = capture_attention(model, ids, full_layers=full_layers, thumb_size=thumb, bos=bos)
        assert_same_capture(got, want, f"seed {seed} step {step} ({len(ids)} tokens)")
        if want.n_tokens:
            np.testing.assert_allclose(got.thumbnails.sum(-1).numpy(), 1.0, atol=1e-5)
            assert (torch.triu(got.thumbnails, 1) == 0).all()  # causal
        reused += got.meta["reused_tokens"]
        ids, _op = random_edit(rng, ids, history, future)
    assert reused > 0  # the script did exercise reuse


def test_typing_runs_only_the_new_tokens(model):
    state = AttentionState(model, thumb_size=8, full_layers=(1,))
    ids = list(range(1, 33))
    first = state.capture(ids)
    assert first.meta == dict(reused_tokens=0, computed_tokens=32)
    nxt = state.capture(ids + [7])
    # 33 tokens pool to width 8 (fine width 4): the run restarts at the fine bin holding token 32.
    assert nxt.meta == dict(reused_tokens=32, computed_tokens=1)
    same = state.capture(ids + [7])
    assert same.meta["computed_tokens"] == 1  # an unchanged prompt still reruns its last token (the lens)
    edited = state.capture(ids[:10] + [5] + ids[11:] + [7])
    assert edited.meta["reused_tokens"] == 8  # from the fine bin holding the changed token 10


def test_results_do_not_change_when_the_state_moves_on(model):
    """Each capture hands out copies: a later run must not rewrite an earlier result."""
    state = AttentionState(model, thumb_size=4, full_layers=(0,))
    a = state.capture(list(range(1, 21)))
    thumbs, full, ent = a.thumbnails.clone(), a.full[0].clone(), a.entropy.clone()
    state.capture(list(range(30, 50)))
    assert torch.equal(a.thumbnails, thumbs) and torch.equal(a.full[0], full) and torch.equal(a.entropy, ent)


def test_matches_names_model_and_settings(model):
    state = AttentionState(model, full_layers=(1,), thumb_size=8, bos=0)
    assert state.matches(model, full_layers=[1], thumb_size=8, bos=0)
    assert not state.matches(model, full_layers=[2], thumb_size=8, bos=0)
    assert not state.matches(model, full_layers=[1], thumb_size=16, bos=0)
    assert not state.matches(model, full_layers=[1], thumb_size=8, bos=None)
    other = GPT(model.config, seed=4).eval()
    assert not state.matches(other, full_layers=[1], thumb_size=8, bos=0)


def test_state_memory_is_bounded_and_reported(model):
    state = AttentionState(model, thumb_size=8, full_layers=(1,))
    state.capture(list(range(1, 40)))
    cfg = model.config
    kv = 2 * cfg.n_layer * cfg.n_head * cfg.block_size * cfg.head_dim * 4
    sums = cfg.n_layer * cfg.n_head * 16 * 16 * 4
    rows = 3 * cfg.n_layer * cfg.n_head * cfg.block_size * 4
    full = cfg.n_head * cfg.block_size ** 2 * 4
    assert state.nbytes() <= kv + sums + rows + full


def test_failed_run_leaves_no_half_written_cache(model):
    state = AttentionState(model, thumb_size=8)
    ids = list(range(1, 30))
    state.capture(ids)
    with pytest.raises(ValueError, match="vocab_size"):
        state.capture(ids + [VOCAB + 5])
    boom = RuntimeError("interrupted")

    def explode(_x, _hook):
        raise boom

    with model.hooks([("blocks.2.hook_resid_post", explode)]), pytest.raises(RuntimeError):
        state.capture(ids + [3])
    got = state.capture(ids + [4])
    assert got.meta["reused_tokens"] == 0  # started over
    assert_same_capture(got, capture_attention(model, ids + [4], thumb_size=8), "after a failed run")


# -- past block_size: crop with slack (issue 23) ----------------------------------------------------

def test_crop_with_slack_drops_whole_steps_from_the_front():
    from gptcore.interp.probes.capture import crop_to_block

    assert crop_to_block(list(range(8)), 8, step=4) == (list(range(8)), 0)  # fits: nothing dropped
    assert crop_to_block(list(range(9)), 8, step=4) == (list(range(4, 9)), 4)  # one over: a whole step
    assert crop_to_block(list(range(12)), 8, step=4) == (list(range(4, 12)), 4)  # the window refilled
    assert crop_to_block(list(range(13)), 8, step=4) == (list(range(8, 13)), 8)
    assert crop_to_block(list(range(13)), 8, bos=99, step=4) == ([99] + list(range(8, 13)), 8)
    assert crop_to_block(list(range(13)), 8, step=1) == (list(range(5, 13)), 5)  # exact, as before
    assert crop_to_block(list(range(5)), 2, step=64) == ([4], 4)  # a step wider than the window is capped


@pytest.mark.parametrize("bos", [None, 0])
def test_typing_past_block_size_with_slack_reuses_the_window_and_equals_a_full_recompute(model, bos):
    """Each key past block_size appends to an unchanged window (prefix reuse), except when the
    window moves on by a whole step; every capture equals a one-shot run of the same window."""
    step = BLOCK // 8
    rng = random.Random(5)
    state = AttentionState(model, thumb_size=8, full_layers=(1,), bos=bos, crop_step=step)
    ids = [rng.randrange(1, VOCAB) for _ in range(BLOCK - 3)]
    reused_keys, full_keys, starts = 0, 0, set()
    for _key in range(3 * BLOCK):
        ids.append(rng.randrange(1, VOCAB))
        got = state.capture(ids)
        window = ids[got.cropped:]
        assert got.cropped % step == 0 and got.token_ids[int(bos is not None):] == window
        want = capture_attention(model, window, thumb_size=8, full_layers=(1,), bos=bos)  # exact crop: none needed
        assert want.cropped == 0
        assert_same_capture(dataclasses_replace_cropped(got, 0), want, f"{len(ids)} tokens")
        if got.cropped:
            starts.add(got.cropped)
            reused_keys += got.meta["reused_tokens"] > 0
            full_keys += got.meta["reused_tokens"] == 0
    assert len(starts) > 3  # the window did move on, several times
    assert full_keys <= len(starts) + 1 and reused_keys >= 4 * full_keys  # step - 1 of every step keys reuse


def dataclasses_replace_cropped(capture, cropped: int):
    import dataclasses

    return dataclasses.replace(capture, cropped=cropped)


def test_matches_tells_crop_steps_apart(model):
    state = AttentionState(model, crop_step=16)
    assert state.matches(model, crop_step=16) and not state.matches(model)
