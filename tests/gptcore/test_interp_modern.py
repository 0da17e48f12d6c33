"""Attribution, patching, ablation and the census on the modern parts (rotary or sinusoidal
positions, RMSNorm, SwiGLU, grouped-query attention): DLA still sums to the model's logit
difference, and every patching map equals the model's own forward with one hook per cell
(the batched runs start mid-model and mid-prompt, so they must hand the blocks the same
rotary angles and cached keys as a whole forward)."""
import pytest
import torch

from gptcore import GPT, GPTConfig
from gptcore.interp.attribution import direct_logit_attribution
from gptcore.interp.interventions import ablate
from gptcore.interp.patching import _KINDS, patch_all
from gptcore.interp.probes.census import head_census

CLEAN = [5, 17, 3, 40, 42, 8, 61, 23, 70, 11]
CORRUPT = [5, 17, 3, 64, 42, 8, 61, 90, 70, 11]
CONFIGS = {
    "rope-rms-swiglu-gqa": dict(pos_embedding="rope", norm="rmsnorm", mlp="swiglu", n_kv_head=2, bias=False),
    "sinusoidal-gqa": dict(pos_embedding="sinusoidal", n_kv_head=1),
    "rope-layernorm": dict(pos_embedding="rope"),
}


def modern(name):
    cfg = GPTConfig(vocab_size=97, block_size=32, n_layer=3, n_head=4, n_embd=32, **CONFIGS[name])
    model = GPT(cfg, seed=0).eval()
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():  # away from the init's small values, so heads differ and maps have structure
        for p in model.parameters():
            p.add_(0.15 * torch.randn(p.shape, generator=gen))
    return model


def naive(model, kind, layer, index, target, contrast):
    """The model's own whole forward of the corrupted prompt with one cell patched by a hook."""
    pattern, dim = _KINDS[kind]
    name = f"blocks.{layer}.hook_resid_pre" if pattern is None else pattern.format(layer)
    with torch.no_grad():
        _, cache = model.run_with_cache(torch.tensor([CLEAN]), names_filter=[name], logits=None)

        def patch(act, hook):
            act = act.clone()
            if dim == 1:
                act[:, index] = cache[name][:, index]
            else:
                act[:, :, index] = cache[name][:, :, index]
            return act

        with model.hooks([(name, patch)]):
            last = model(torch.tensor([CORRUPT]), logits="last")[0, -1]
    return float(last[target] - last[contrast])


@pytest.mark.parametrize("name", CONFIGS)
def test_dla_sums_and_patching_matches_whole_forwards(name):
    model = modern(name)
    a = direct_logit_attribution(model, CLEAN, 7, 31)
    assert a.heads.abs().max() > 1e-3
    assert a.parts_sum() == pytest.approx(a.total, abs=1e-4)
    maps = patch_all(model, CLEAN, CORRUPT, 7, 31)
    for kind, result in maps.items():
        L, W = result.patched_ld.shape
        for layer in range(L):
            for index in range(W):
                want = naive(model, kind, layer, index, 7, 31)
                assert float(result.patched_ld[layer, index]) == pytest.approx(want, abs=1e-4), (kind, layer, index)


def test_ablation_and_census_on_a_grouped_query_rotary_model():
    model = modern("rope-rms-swiglu-gqa")
    ids = torch.tensor([CLEAN])
    with torch.no_grad():
        before = model(ids)
        with ablate(model, heads=[(1, 3)], mlps=[2], mode="mean", reference=[CORRUPT, CLEAN[:5]]):
            assert (model(ids) - before).abs().max() > 1e-4
            knocked = direct_logit_attribution(model, CLEAN, 7, 31)
        assert torch.equal(model(ids), before)
    assert knocked.parts_sum() == pytest.approx(knocked.total, abs=1e-4)
    census = head_census(model, half=6, batch=2)
    assert census.induction.shape == (3, 4) and torch.isfinite(census.previous_token).all()
