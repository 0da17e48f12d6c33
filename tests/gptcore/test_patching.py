"""Activation patching against the naive reference: one HF forward per cell, patched with
HF's own hooks, on the same random weights (ours loaded from HF's saved folder)."""
import pytest
import torch

pytest.importorskip("transformers")

from hf_oracle import capture, hf_ld, patched_ld, saved_pair  # noqa: E402

from gptcore.interp.interventions import ablate  # noqa: E402
from gptcore.interp.patching import (PatchingCancelled, patch_all, patch_attn_mlp, patch_heads, patch_residual,  # noqa: E402
                              patched_logits)

CLEAN = [5, 17, 3, 99, 42, 8, 61, 23, 70, 11]
CORRUPT = [5, 17, 3, 64, 42, 8, 61, 90, 70, 11]
TARGET, CONTRAST = 7, 31


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    return saved_pair(tmp_path_factory.mktemp("patch"), seed=3)


def reference_map(hf, kind, target=TARGET, contrast=CONTRAST):
    clean, corrupt = torch.tensor([CLEAN]), torch.tensor([CORRUPT])
    acts = capture(hf, clean)
    ld_clean = float(hf_ld(acts["logits"], target, contrast)[0])
    with torch.no_grad():
        ld_corrupt = float(hf_ld(hf(corrupt).logits, target, contrast)[0])
    width = hf.config.n_head if kind == "heads" else len(CLEAN)
    out = torch.empty(hf.config.n_layer, width)
    for layer in range(hf.config.n_layer):
        for i in range(width):
            out[layer, i] = patched_ld(hf, acts, corrupt, kind, layer, i, target, contrast)
    return (out - ld_corrupt) / (ld_clean - ld_corrupt), ld_clean, ld_corrupt


def check(result, hf, kind, **answer):
    want, ld_clean, ld_corrupt = reference_map(hf, kind, **answer)
    assert result.kind == kind and result.scores.shape == want.shape
    assert want.abs().max() > 0.1 and want.std() > 0.01  # a map with structure, not all zeros
    torch.testing.assert_close(result.scores, want, rtol=0, atol=1e-4)
    assert result.ld_clean == pytest.approx(ld_clean, abs=1e-4)
    assert result.ld_corrupt == pytest.approx(ld_corrupt, abs=1e-4)


def test_patch_heads_matches_naive_hf(pair):
    hf, ours = pair
    check(patch_heads(ours, CLEAN, CORRUPT, TARGET, CONTRAST), hf, "heads")


def test_patch_residual_matches_naive_hf(pair):
    hf, ours = pair
    result = patch_residual(ours, CLEAN, CORRUPT, TARGET, CONTRAST)
    check(result, hf, "resid")
    # patching the whole stream entering layer 0 at every changed position: the positions
    # that are equal in both prompts restore nothing, the map is 0 there
    assert torch.allclose(result.scores[0, :3], torch.zeros(3), atol=1e-5)


def test_patch_attn_mlp_match_naive_hf_and_batches_do_not_matter(pair):
    hf, ours = pair
    attn, mlp = patch_attn_mlp(ours, CLEAN, CORRUPT, TARGET, None)
    check(attn, hf, "attn", contrast=None)
    check(mlp, hf, "mlp", contrast=None)
    # one row per forward gives the same maps as the default batches
    attn1, mlp1 = patch_attn_mlp(ours, CLEAN, CORRUPT, TARGET, None, batch_tokens=1)
    torch.testing.assert_close(attn1.scores, attn.scores, rtol=0, atol=1e-5)
    torch.testing.assert_close(mlp1.scores, mlp.scores, rtol=0, atol=1e-5)


def test_patch_all_reports_progress_and_cancels_cleanly(pair):
    _, ours = pair
    seen = []
    maps = patch_all(ours, CLEAN, CORRUPT, TARGET, CONTRAST, progress=lambda d, t: seen.append((d, t)))
    total = 3 * 10 * 3 + 3 * 4
    assert set(maps) == {"resid", "attn", "mlp", "heads"}
    assert seen[-1] == (total, total) and [d for d, _ in seen] == sorted(d for d, _ in seen)
    torch.testing.assert_close(maps["heads"].scores, patch_heads(ours, CLEAN, CORRUPT, TARGET, CONTRAST).scores)

    calls = []
    with pytest.raises(PatchingCancelled, match="cancelled after"):
        patch_all(ours, CLEAN, CORRUPT, TARGET, CONTRAST, cancel=lambda: len(calls) > 2,
                  progress=lambda d, t: calls.append(d))
    assert len(calls) == 3
    assert not any(hp._forward_hooks for hp in ours.hook_dict.values())  # nothing left attached


def test_patched_logits_of_a_cell_agree_with_the_map(pair):
    _, ours = pair
    heads = patch_heads(ours, CLEAN, CORRUPT, TARGET, CONTRAST)
    logits = patched_logits(ours, CLEAN, CORRUPT, "heads", 2, 1)
    assert float(logits[TARGET] - logits[CONTRAST]) == pytest.approx(float(heads.patched_ld[2, 1]), abs=1e-4)
    resid = patch_residual(ours, CLEAN, CORRUPT, TARGET, CONTRAST)
    logits = patched_logits(ours, CLEAN, CORRUPT, "resid", 1, 7)
    assert float(logits[TARGET] - logits[CONTRAST]) == pytest.approx(float(resid.patched_ld[1, 7]), abs=1e-4)


def test_patching_under_an_ablation_uses_the_ablated_model(pair):
    _, ours = pair
    plain = patch_heads(ours, CLEAN, CORRUPT, TARGET, CONTRAST)
    with ablate(ours, heads=[(0, 0), (0, 1)]):
        knocked = patch_heads(ours, CLEAN, CORRUPT, TARGET, CONTRAST)
        with torch.no_grad():
            ld = ours(torch.tensor([CLEAN]))[0, -1]
    assert knocked.ld_clean == pytest.approx(float(ld[TARGET] - ld[CONTRAST]), abs=1e-4)
    assert knocked.ld_clean != pytest.approx(plain.ld_clean, abs=1e-3)
    assert torch.allclose(knocked.scores[0, :2], torch.zeros(2), atol=1e-5)  # ablated heads restore nothing


@pytest.mark.parametrize("kwargs,match", [
    (dict(corrupt=CORRUPT[:-1]), "10 tokens long and the corrupted prompt 9"),
    (dict(corrupt=CLEAN), "same logit difference"),
    (dict(target=31), "same token"),
    (dict(target=1000), "outside this model's vocabulary"),
    (dict(clean=[1, 2, 300, 4, 5, 6, 7, 8, 9, 10]), "clean prompt: token id 300"),
])
def test_patching_bad_input(pair, kwargs, match):
    args = {**dict(clean=CLEAN, corrupt=CORRUPT, target=TARGET, contrast=CONTRAST), **kwargs}
    with pytest.raises(ValueError, match=match):
        patch_heads(pair[1], **args)


def test_patching_a_model_that_outputs_nan(tmp_path):
    _, ours = saved_pair(tmp_path, seed=4)
    with torch.no_grad():
        ours.blocks[1].mlp.c_fc.weight[0, 0] = float("nan")
    with pytest.raises(ValueError, match="not finite"):
        patch_heads(ours, CLEAN, CORRUPT, TARGET, CONTRAST)


def test_the_shared_prefix_path_gives_the_maps_of_whole_prompt_runs(pair):
    """The tokens before the first difference (3 here) are computed once in a KV cache; with
    any hook attached that shortcut is off. Both paths give the same maps."""
    from gptcore.interp.patching import _Runs

    _, ours = pair
    runs = _Runs(ours, CLEAN, CORRUPT, TARGET, CONTRAST, ["heads"])
    runs.use_shared_prefix(4)
    assert runs.start == 3 and runs.prefix_cache is not None
    fast = patch_all(ours, CLEAN, CORRUPT, TARGET, CONTRAST)
    with ours.hooks([("hook_embed", lambda t, hook: None)]):  # an observer: forces whole-prompt runs
        runs = _Runs(ours, CLEAN, CORRUPT, TARGET, CONTRAST, ["heads"])
        runs.use_shared_prefix(4)
        assert runs.start == 0 and runs.prefix_cache is None
        whole = patch_all(ours, CLEAN, CORRUPT, TARGET, CONTRAST)
    for kind in fast:
        torch.testing.assert_close(fast[kind].scores, whole[kind].scores, rtol=0, atol=1e-5)
