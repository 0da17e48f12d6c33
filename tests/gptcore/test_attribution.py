"""Direct logit attribution against a reference computed on HF's GPT-2 (its own hooks, its
own Conv1D weights), and ablation: what it changes, and that leaving it restores the model."""
import pytest
import torch

pytest.importorskip("transformers")

from hf_oracle import capture, saved_pair  # noqa: E402

from gptcore import GPT, GPTConfig  # noqa: E402
from gptcore.interp.attribution import direct_logit_attribution  # noqa: E402
from gptcore.interp.interventions import ablate, make_ablation  # noqa: E402

IDS = [5, 17, 3, 99, 42, 8, 61, 23, 70, 11]


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    return saved_pair(tmp_path_factory.mktemp("dla"))


@torch.no_grad()
def reference_dla(hf, ids, target, contrast):
    """DLA computed in residual space from HF activations: each part through the final
    LayerNorm with its scale frozen, read out on W_U[target] - W_U[contrast]."""
    got = capture(hf, torch.tensor([ids]))
    ln = hf.transformer.ln_f
    x = got["final"][0, -1].double()
    scale = torch.sqrt(x.var(unbiased=False) + ln.eps)
    W_U = hf.lm_head.weight.double()
    u = W_U[target] - (W_U[contrast] if contrast is not None else 0)

    def read(v):  # a part of the residual (C,) -> its share of the logit difference
        return float(((v - v.mean()) / scale * ln.weight.double()) @ u)

    nh = hf.config.n_head
    hs = hf.config.n_embd // nh
    heads = torch.zeros(hf.config.n_layer, nh, dtype=torch.float64)
    mlps, bias = [], float(ln.bias.double() @ u)
    for i, block in enumerate(hf.transformer.h):
        z = got[f"z{i}"][0, -1].double()
        W_O = block.attn.c_proj.weight.double()  # Conv1D: (in, out)
        for h in range(nh):
            heads[i, h] = read(z[h * hs:(h + 1) * hs] @ W_O[h * hs:(h + 1) * hs])
        bias += read(block.attn.c_proj.bias.double())
        mlps.append(read(got[f"mlp{i}"][0, -1].double()))
    embed = read(got["wte"][0, -1].double() + got["wpe"][0, -1].double())
    total = float(got["logits"][0, -1, target] - (got["logits"][0, -1, contrast] if contrast is not None else 0))
    return heads, torch.tensor(mlps, dtype=torch.float64), embed, bias, total


@pytest.mark.parametrize("contrast", [31, None])
def test_dla_matches_hf_reference_and_sums_to_the_logit_difference(pair, contrast):
    hf, ours = pair
    heads, mlps, embed, bias, total = reference_dla(hf, IDS, 7, contrast)
    a = direct_logit_attribution(ours, IDS, 7, contrast)
    assert a.heads.shape == (3, 4) and a.mlps.shape == (3,)
    assert heads.abs().max() > 0.05 and mlps.abs().max() > 0.05  # not a comparison of zeros
    torch.testing.assert_close(a.heads, heads, rtol=0, atol=1e-4)
    torch.testing.assert_close(a.mlps, mlps, rtol=0, atol=1e-4)
    assert a.embed == pytest.approx(embed, abs=1e-4)
    assert a.bias == pytest.approx(bias, abs=1e-4)
    assert a.total == pytest.approx(total, abs=1e-4)
    assert a.parts_sum() == pytest.approx(a.total, abs=1e-4)
    assert float(a.attention.sum()) == pytest.approx(float(a.heads.sum() + a.attn_bias.sum()))


def test_dla_accepts_a_tensor_and_an_earlier_position(pair):
    _, ours = pair
    a = direct_logit_attribution(ours, torch.tensor([IDS]), 7, 31, position=4)
    b = direct_logit_attribution(ours, IDS[:5], 7, 31)
    assert a.position == 4
    torch.testing.assert_close(a.heads, b.heads)
    assert a.parts_sum() == pytest.approx(a.total, abs=1e-4)


@pytest.mark.parametrize("args,match", [
    (dict(target=7, contrast=7), "same token"),
    (dict(target=101, contrast=None), "outside this model's vocabulary"),
    (dict(target=-1, contrast=3), "outside"),
    (dict(target="x", contrast=3), "one token id"),
])
def test_dla_bad_answers(pair, args, match):
    with pytest.raises(ValueError, match=match):
        direct_logit_attribution(pair[1], IDS, **args)


def test_dla_bad_prompts(pair):
    ours = pair[1]
    with pytest.raises(ValueError, match="outside this model's vocabulary"):
        direct_logit_attribution(ours, [1, 2, 500], 7)
    with pytest.raises(ValueError, match="empty"):
        direct_logit_attribution(ours, [], 7)
    with pytest.raises(ValueError, match="block_size"):
        direct_logit_attribution(ours, [1] * 33, 7)


def test_dla_refuses_a_post_ln_model():
    model = GPT(GPTConfig(vocab_size=50, block_size=8, n_layer=1, n_head=2, n_embd=16, ln_placement="post"), seed=0)
    with pytest.raises(ValueError, match="pre-LN"):
        direct_logit_attribution(model, [1, 2], 3)


def test_zero_ablating_a_head_removes_exactly_its_dla(pair):
    """Zeroing head (2, 1) in the last layer changes nothing upstream, so the ablated
    model's logit difference is the clean one minus that head's direct effect — up to the
    final norm's scale, which DLA freezes and the ablated run recomputes; with the frozen
    scale the ablated DLA shows that head at exactly 0."""
    _, ours = pair
    clean = direct_logit_attribution(ours, IDS, 7, 31)
    with ablate(ours, heads=[(2, 1)]):
        knocked = direct_logit_attribution(ours, IDS, 7, 31)
    assert knocked.heads[2, 1] == 0.0
    torch.testing.assert_close(knocked.heads[:2], clean.heads[:2] * knocked_scale_ratio(ours, clean, knocked))
    assert knocked.parts_sum() == pytest.approx(knocked.total, abs=1e-4)


def knocked_scale_ratio(ours, clean, knocked):
    """Heads of earlier layers see the same activations; only the frozen final-norm scale
    differs, by one common factor: estimate it from the untouched MLP of layer 0."""
    return knocked.mlps[0] / clean.mlps[0]


def test_ablation_modes_change_the_output_and_leaving_restores_it_exactly(pair):
    _, ours = pair
    ids = torch.tensor([IDS])
    ref_batch = torch.tensor([[9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 12], [1, 1, 2, 3, 5, 8, 13, 21, 34, 55, 89]])
    with torch.no_grad():
        before = ours(ids)
        _, cache = ours.run_with_cache(ref_batch, names_filter=["blocks.1.attn.hook_z", "blocks.0.hook_mlp_out"])
        mean_z = cache["blocks.1.attn.hook_z"].mean(dim=(0, 1))  # (nh, hs)
        for mode, reference in [("zero", None), ("mean", ref_batch), ("resample", ref_batch[1])]:
            seen = {}
            with ablate(ours, heads=[(1, 2)], mlps=[0], mode=mode, reference=reference) as spec:
                with ours.hooks([("blocks.1.attn.hook_z", lambda z, h: seen.__setitem__("z", z.clone())),
                                 ("blocks.0.hook_mlp_out", lambda m, h: seen.__setitem__("m", m.clone()))]):
                    during = ours(ids)
            assert spec.heads == ((1, 2),) and spec.mlps == (0,)
            assert (during - before).abs().max() > 1e-3, mode
            z, m = seen["z"][0], seen["m"][0]  # (T, nh, hs), (T, C)
            if mode == "zero":
                assert torch.all(z[:, 2] == 0) and torch.all(m == 0)
            elif mode == "mean":
                torch.testing.assert_close(z[:, 2], mean_z[2].expand_as(z[:, 2]))
                torch.testing.assert_close(m, cache["blocks.0.hook_mlp_out"].mean(dim=(0, 1)).expand_as(m))
            else:
                torch.testing.assert_close(z[:, 2], cache["blocks.1.attn.hook_z"][1, :10, 2])
                torch.testing.assert_close(m, cache["blocks.0.hook_mlp_out"][1, :10])
            assert torch.any(z[:, 1] != 0)  # the other heads untouched
            assert torch.equal(ours(ids), before)  # left: the very same model


def test_ablation_is_removed_when_the_block_raises(pair):
    _, ours = pair
    ids = torch.tensor([IDS])
    with torch.no_grad():
        before = ours(ids)
        with pytest.raises(RuntimeError, match="boom"):
            with ablate(ours, heads=[(0, 0), (2, 3)]):
                raise RuntimeError("boom")
        assert torch.equal(ours(ids), before)
    assert not any(hp._forward_hooks for hp in ours.hook_dict.values())


@pytest.mark.parametrize("kwargs,match", [
    (dict(heads=[(3, 0)]), r"head \(3, 0\) does not exist"),
    (dict(heads=[(0, 4)]), "does not exist"),
    (dict(heads=[0]), "pair"),
    (dict(mlps=[7]), "MLP layer 7"),
    (dict(heads=[(0, 0)], mode="max"), "mode must be one of"),
    (dict(heads=[(0, 0)], mode="mean"), "needs a reference"),
])
def test_bad_ablations(pair, kwargs, match):
    with pytest.raises(ValueError, match=match):
        with ablate(pair[1], **kwargs):
            pass


def test_resample_reference_shorter_than_the_prompt(pair):
    _, ours = pair
    with ablate(ours, heads=[(0, 0)], mode="resample", reference=[1, 2, 3]):
        with pytest.raises(ValueError, match="fewer than"):
            ours(torch.tensor([IDS]))


def test_make_ablation_sorts_and_deduplicates(pair):
    spec = make_ablation(pair[1], heads=[(2, 1), (0, 3), (2, 1)], mlps=[2, 0, 2], mode="mean")
    assert spec.heads == ((0, 3), (2, 1)) and spec.mlps == (0, 2)
    assert spec.describe() == "2 heads + 2 MLPs ablated (mean)"
    assert not make_ablation(pair[1])


def test_mean_ablation_over_prompts_of_different_lengths_weighs_every_position(pair):
    _, ours = pair
    prompts = [[1, 2, 3], [4, 5, 6, 7, 8, 9, 10]]
    with torch.no_grad():
        outs = [ours.run_with_cache(torch.tensor([p]), names_filter="blocks.0.hook_mlp_out")[1]["blocks.0.hook_mlp_out"][0]
                for p in prompts]
        want = torch.cat(outs).mean(dim=0)  # (C,) over all 10 positions
        seen = {}
        with ablate(ours, mlps=[0], mode="mean", reference=prompts):
            with ours.hooks([("blocks.0.hook_mlp_out", lambda m, h: seen.__setitem__("m", m.clone()))]):
                ours(torch.tensor([IDS]))
    torch.testing.assert_close(seen["m"][0], want.expand(len(IDS), -1))
