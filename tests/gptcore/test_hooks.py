"""Hook points: the pinned vocabulary, hooks() cleanup, replacing activations, and
run_with_cache's filters."""
import pytest
import torch

from gptcore import GPTConfig
from gptcore.model.hooks import HookPoint
from gptcore.model.gpt import GPT

CFG = GPTConfig(vocab_size=61, block_size=16, n_layer=2, n_head=4, n_embd=32)

# DESIGN.md's vocabulary (TransformerLens's names), written out by hand for 2 layers.
# ln2.hook_normalized is not in DESIGN.md's list but follows from `ln2` being a LayerNorm
# like `ln1` (TransformerLens has it too).
PER_BLOCK = [
    "hook_resid_pre", "ln1.hook_normalized",
    "attn.hook_q", "attn.hook_k", "attn.hook_v", "attn.hook_attn_scores", "attn.hook_pattern", "attn.hook_z",
    "hook_attn_out", "hook_resid_mid", "ln2.hook_normalized",
    "mlp.hook_pre", "mlp.hook_post", "hook_mlp_out", "hook_resid_post",
]
EXPECTED_HOOKS = (
    ["hook_embed", "hook_pos_embed"]
    + [f"blocks.{i}.{name}" for i in range(2) for name in PER_BLOCK]
    + ["ln_final.hook_normalized"]
)


@pytest.fixture(scope="module")
def model():
    return GPT(CFG, seed=3).eval()


@pytest.fixture
def idx():
    return torch.randint(0, CFG.vocab_size, (2, 7), generator=torch.Generator().manual_seed(1))


def _attached(model):
    return {name for name, hp in model.hook_dict.items() if hp.active}


def test_hook_names_are_pinned_and_come_from_the_module_tree(model):
    assert sorted(model.hook_names) == sorted(EXPECTED_HOOKS)
    assert len(model.hook_names) == len(set(model.hook_names)) == 33
    from_tree = [n for n, m in model.named_modules() if isinstance(m, HookPoint)]
    assert model.hook_names == from_tree
    for name in model.hook_names:
        assert model.get_submodule(name).name == name


def test_every_hook_point_fires_with_documented_shapes(model, idx):
    logits, cache = model.run_with_cache(idx)
    assert set(cache) == set(EXPECTED_HOOKS)
    B, T, C, nh, hs = 2, 7, 32, 4, 8
    for name, value in cache.items():
        leaf = name.rsplit(".", 1)[-1]
        if leaf in ("hook_q", "hook_k", "hook_v", "hook_z"):
            assert value.shape == (B, T, nh, hs), name
        elif leaf in ("hook_pattern", "hook_attn_scores"):
            assert value.shape == (B, nh, T, T), name
        elif leaf in ("hook_pre", "hook_post"):
            assert value.shape == (B, T, CFG.d_mlp), name
        elif name == "hook_pos_embed":
            assert value.shape == (1, T, C)
        else:
            assert value.shape == (B, T, C), name
    scores = cache["blocks.0.attn.hook_attn_scores"]
    assert torch.isneginf(scores[0, 0, 0, 1]) and torch.isfinite(scores[0, 0, 1, 0])
    torch.testing.assert_close(logits, model(idx), rtol=0, atol=1e-5)
    # the residual stream adds up: resid_post = resid_mid + mlp_out = resid_pre + attn_out + mlp_out
    torch.testing.assert_close(
        cache["blocks.1.hook_resid_post"],
        cache["blocks.1.hook_resid_pre"] + cache["blocks.1.hook_attn_out"] + cache["blocks.1.hook_mlp_out"],
        rtol=0, atol=1e-5)
    torch.testing.assert_close(cache["blocks.0.hook_resid_pre"], cache["hook_embed"] + cache["hook_pos_embed"])
    torch.testing.assert_close(cache["blocks.1.hook_resid_pre"], cache["blocks.0.hook_resid_post"])


def test_hooks_are_removed_when_the_body_raises(model, idx):
    seen = []
    with pytest.raises(RuntimeError, match="boom"):
        with model.hooks([("blocks.0.hook_resid_pre", lambda t, h: seen.append(h.name)),
                          (lambda n: n.endswith("hook_pattern"), lambda t, h: None)]):
            assert _attached(model) == {"blocks.0.hook_resid_pre", "blocks.0.attn.hook_pattern",
                                        "blocks.1.attn.hook_pattern"}
            model(idx)
            raise RuntimeError("boom")
    assert seen == ["blocks.0.hook_resid_pre"]
    assert _attached(model) == set()
    assert not any(hp.active for hp in model.hook_dict.values())


def test_unknown_hook_name_is_a_key_error_and_leaves_nothing_attached(model, idx):
    with pytest.raises(KeyError, match="model.hook_names"):
        with model.hooks([("hook_embed", lambda t, h: None), ("blocks.0.attn.hook_attn", lambda t, h: None)]):
            pass  # pragma: no cover
    assert _attached(model) == set()
    for bad in ("blocks.9.hook_resid_pre", ["hook_embed", "blocks.0.hook_pattern"]):
        with pytest.raises(KeyError, match="model.hook_names"):
            model.run_with_cache(idx, names_filter=bad)
    assert _attached(model) == set()


def test_observing_hook_changes_nothing_and_active_flag(model, idx):
    hp = model.hook_dict["blocks.1.hook_mlp_out"]
    assert not hp.active
    with model.hooks([("blocks.1.hook_mlp_out", lambda t, h: None)]):
        assert hp.active
        observed = model(idx)
    assert not hp.active
    torch.testing.assert_close(observed, model(idx), rtol=0, atol=0)


def test_active_follows_hooks_added_with_torchs_own_call_and_their_removal(model, idx):
    """`active` is HookPoint's own record (torch has no public "has hooks"); a hook attached with
    torch's register_forward_hook must count too, or attention would skip the pattern it hooks."""
    hp = model.hook_dict["blocks.0.attn.hook_pattern"]
    seen = []
    handle = hp.register_forward_hook(lambda m, i, out: seen.append(out.shape))
    assert hp.active
    model(idx)
    assert seen == [(2, CFG.n_head, 7, 7)]  # the explicit path ran and fed the hook
    handle.remove()
    handle.remove()  # a second remove is harmless, as with torch's handles
    assert not hp.active
    model(idx)
    assert len(seen) == 1  # removed from torch too: it no longer fires
    with hp.register_forward_hook(lambda m, i, out: seen.append("again")), hp.add_hook(lambda t, h: None):
        assert hp.active
        model(idx)
    assert not hp.active and seen[1:] == ["again"]


def test_zero_ablating_a_head_via_hook_z(model, idx):
    """Replacing hook_z's head 2 by zeros equals removing that head's slice of c_proj."""
    layer, head, hs = 1, 2, CFG.head_dim
    clean = model(idx)

    def ablate(z, hook):
        z = z.clone()
        z[:, :, head] = 0.0  # (B, T, nh, hs)
        return z

    with model.hooks([(f"blocks.{layer}.attn.hook_z", ablate)]):
        ablated = model(idx)
    assert (ablated - clean).abs().max() > 1e-4

    surgery = GPT(CFG, seed=3).eval()
    with torch.no_grad():
        surgery.blocks[layer].attn.c_proj.weight[:, head * hs:(head + 1) * hs] = 0.0
    torch.testing.assert_close(ablated, surgery(idx), rtol=0, atol=1e-5)


def test_replacing_the_pattern_changes_the_output(model, idx):
    """A hook on the pattern really feeds what it returns into attention: uniform causal
    attention in every head equals averaging the values by hand."""
    def uniform(pattern, hook):
        T = pattern.shape[-1]
        causal = torch.tril(torch.ones(T, T))
        return (causal / causal.sum(-1, keepdim=True)).expand_as(pattern)

    _, ref = model.run_with_cache(idx, names_filter=["blocks.0.attn.hook_v"])
    with model.hooks([("blocks.0.attn.hook_pattern", uniform)]):
        _, cache = model.run_with_cache(idx, names_filter=["blocks.0.attn.hook_z"])
    v = ref["blocks.0.attn.hook_v"]  # (B, T, nh, hs)
    running_mean = v.cumsum(1) / torch.arange(1, 8).view(1, 7, 1, 1)
    torch.testing.assert_close(cache["blocks.0.attn.hook_z"], running_mean, rtol=0, atol=1e-5)


@pytest.mark.parametrize("names_filter,expected", [
    ("blocks.1.attn.hook_pattern", {"blocks.1.attn.hook_pattern"}),
    (["hook_embed", "ln_final.hook_normalized"], {"hook_embed", "ln_final.hook_normalized"}),
    (lambda n: n.endswith("hook_resid_post"), {"blocks.0.hook_resid_post", "blocks.1.hook_resid_post"}),
    ((), set()),
])
def test_run_with_cache_keeps_only_the_filtered_names_detached(names_filter, expected, idx):
    m = GPT(CFG, seed=3)  # parameters require grad: the cache must still be detached
    logits, cache = m.run_with_cache(idx, names_filter=names_filter)
    assert set(cache) == expected
    for value in cache.values():
        assert not value.requires_grad and value.grad_fn is None
    assert logits.requires_grad  # the output itself is the ordinary forward's
    torch.testing.assert_close(logits, m(idx), rtol=0, atol=1e-5)
    assert _attached(m) == set()


def test_run_with_cache_passes_forward_kwargs(model, idx):
    out, cache = model.run_with_cache(idx, names_filter="hook_embed", logits="last")
    assert out.shape == (2, 1, CFG.vocab_size) and set(cache) == {"hook_embed"}
    out, _ = model.run_with_cache(idx, names_filter="hook_embed", logits=None, device="cpu")
    assert out is None


def test_hooks_suspended_runs_the_model_itself_and_puts_every_hook_back_in_order(model, idx):
    """An edit held across calls (an app's ablation) is set aside for the block: what the block
    reads is the plain model's activation; afterwards the edits run again, in their order, and
    their handles still remove them."""
    with torch.no_grad():
        plain, cache = model.run_with_cache(idx, names_filter="blocks.0.hook_mlp_out")
    order = []
    zero = model.hook_dict["blocks.0.hook_mlp_out"].add_hook(lambda x, hp: order.append("zero") or torch.zeros_like(x))
    double = model.hook_dict["blocks.0.hook_mlp_out"].add_hook(lambda x, hp: order.append("double") or 2 * x + 1)
    try:
        with torch.no_grad():
            edited = model(idx)
            assert order == ["zero", "double"]
            order.clear()
            with model.hooks_suspended():
                assert _attached(model) == set()
                inside, seen = model.run_with_cache(idx, names_filter="blocks.0.hook_mlp_out")
            assert order == []  # neither edit ran inside
            torch.testing.assert_close(inside, plain, rtol=0, atol=0)
            torch.testing.assert_close(seen["blocks.0.hook_mlp_out"], cache["blocks.0.hook_mlp_out"], rtol=0, atol=0)
            assert _attached(model) == {"blocks.0.hook_mlp_out"}
            torch.testing.assert_close(model(idx), edited, rtol=0, atol=0)
            assert order == ["zero", "double"]  # back, in the order they were added
    finally:
        zero.remove()
        double.remove()
    assert _attached(model) == set()
    with torch.no_grad():
        torch.testing.assert_close(model(idx), plain, rtol=0, atol=0)


def test_module_hooked_sees_every_kind_of_forward_hook_and_counts_a_bare_object_as_hooked():
    from gptcore.model.hooks import module_hooked
    from gptcore.model.linear import Linear

    class Bare:
        pass

    assert module_hooked(Bare()) is True  # a torch without the records: the safe answer
    layer = Linear(3, 4)
    assert module_hooked(layer) is False
    with layer.register_forward_pre_hook(lambda m, i: None):
        assert module_hooked(layer) is True
    with layer.register_forward_hook(lambda m, i, o: None):
        assert module_hooked(layer) is True
    with torch.nn.modules.module.register_module_forward_hook(lambda m, i, o: None):
        assert module_hooked(layer) is True
    assert module_hooked(layer) is False
