"""Init schemes: each family's measured standard deviation against its definition, the
definitions against torch's own initialisers, biases/LayerNorms, and seeding."""
import math

import pytest
import torch
from torch import nn

from gptcore import GPTConfig
from gptcore.model.init import INIT_SCHEMES, init_weights, linear_weight_std
from gptcore.model.gpt import GPT

# Wide enough that every Linear has >= 65k entries: the sample std is within ~0.3% of the
# true one, so a 3% tolerance cannot fail by chance but catches any wrong formula.
WIDE = GPTConfig(vocab_size=64, block_size=32, n_layer=2, n_head=4, n_embd=256, tie_weights=False)
UNIFORM = {"pytorch-default", "xavier-uniform"}


def _scramble(model):
    """Put every parameter far from any scheme's values, so a test sees what init wrote."""
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(3.0 + torch.rand(p.shape))


@pytest.fixture(scope="module")
def wide():
    return GPT(WIDE, init=None)


def _linears(model):
    return [(name, m) for name, m in model.named_modules() if isinstance(m, nn.Linear)]


@pytest.mark.parametrize("scheme", INIT_SCHEMES)
def test_linear_weights_have_the_schemes_std_and_shape(wide, scheme):
    _scramble(wide)
    init_weights(wide, scheme, seed=0)
    names = [name for name, _ in _linears(wide)]
    assert len(names) == 4 * WIDE.n_layer + 1  # c_attn, attn.c_proj, c_fc, mlp.c_proj per block; unembed
    for name, lin in _linears(wide):
        w = lin.weight.detach()
        fan_out, fan_in = w.shape
        residual = name.endswith(("attn.c_proj", "mlp.c_proj"))
        std = linear_weight_std(scheme, fan_in, fan_out, WIDE.n_layer, residual)
        assert w.std().item() == pytest.approx(std, rel=0.03), name
        assert abs(w.mean().item()) < 5 * std / math.sqrt(w.numel()), name
        peak = w.abs().max().item()
        if scheme in UNIFORM:  # U(-a, a) with a = sqrt(3)·std: bounded, and reaches the bound
            assert std * math.sqrt(3) * 0.99 < peak <= std * math.sqrt(3) * (1 + 1e-6), name
        else:  # normal: tens of thousands of draws go well past sqrt(3)·std
            assert peak > 2.5 * std, name


# What each scheme must mean, measured from torch's own initialisers on a (768, 256) weight.
def _torch_reference_std(scheme):
    torch.manual_seed(0)
    if scheme == "pytorch-default":
        return nn.Linear(256, 768).weight.std().item()
    init = {
        "xavier-uniform": nn.init.xavier_uniform_,
        "xavier-normal": nn.init.xavier_normal_,
        "kaiming-normal": lambda w: nn.init.kaiming_normal_(w, mode="fan_in", nonlinearity="relu"),
    }[scheme]
    return init(torch.empty(768, 256)).std().item()


@pytest.mark.parametrize("scheme", ["pytorch-default", "xavier-uniform", "xavier-normal", "kaiming-normal"])
def test_definitions_agree_with_torchs_initialisers(scheme):
    ours = linear_weight_std(scheme, fan_in=256, fan_out=768, n_layer=2, residual_proj=False)
    assert ours == pytest.approx(_torch_reference_std(scheme), rel=0.02)


def test_gpt2_definitions_and_residual_scaling(wide):
    assert linear_weight_std("gpt2", 256, 768, 12, residual_proj=False) == 0.02
    assert linear_weight_std("gpt2", 768, 256, 12, residual_proj=True) == pytest.approx(0.02 / math.sqrt(24))
    assert linear_weight_std("gpt2-unscaled", 768, 256, 12, residual_proj=True) == 0.02
    measured = {}
    for scheme in ("gpt2", "gpt2-unscaled"):
        init_weights(wide, scheme, seed=1)
        blk = wide.blocks[1]
        measured[scheme] = [m.weight.std().item() for m in (blk.attn.c_attn, blk.attn.c_proj, blk.mlp.c_fc, blk.mlp.c_proj)]
    scaled = 0.02 / math.sqrt(2 * WIDE.n_layer)  # 0.01
    assert measured["gpt2"] == pytest.approx([0.02, scaled, 0.02, scaled], rel=0.03)
    assert measured["gpt2-unscaled"] == pytest.approx([0.02] * 4, rel=0.03)


@pytest.mark.parametrize("scheme", INIT_SCHEMES)
def test_biases_embeddings_and_layer_norms(wide, scheme):
    _scramble(wide)
    init_weights(wide, scheme, seed=2)
    for name, lin in _linears(wide):
        if lin.bias is None:
            continue
        b = lin.bias.detach()
        if scheme == "pytorch-default":  # torch's Linear: U(-1/sqrt(fan_in), 1/sqrt(fan_in))
            bound = 1 / math.sqrt(lin.in_features)
            assert b.abs().max() <= bound and b.std().item() == pytest.approx(bound / math.sqrt(3), rel=0.15), name
        else:
            assert torch.all(b == 0), name
    emb_std = 1.0 if scheme == "pytorch-default" else 0.02
    assert wide.embed.weight.std().item() == pytest.approx(emb_std, rel=0.05)
    assert wide.pos_embed.weight.std().item() == pytest.approx(emb_std, rel=0.05)
    for name, p in wide.named_parameters():
        if ".ln" in name or name.startswith("ln_final"):
            assert torch.all(p == (1.0 if name.endswith("weight") else 0.0)), name


def test_tied_head_gets_the_embedding_init():
    m = GPT(WIDE.replace(tie_weights=True), init="kaiming-normal", seed=0)
    assert m.unembed.weight is m.embed.weight
    assert m.unembed.weight.std().item() == pytest.approx(0.02, rel=0.05)  # not sqrt(2/256) ≈ 0.088


SMALL = GPTConfig(vocab_size=40, block_size=8, n_layer=2, n_head=2, n_embd=16)


@pytest.mark.parametrize("scheme", INIT_SCHEMES)
def test_same_seed_same_weights_other_seed_other_weights(scheme):
    torch.manual_seed(123)
    a = GPT(SMALL, init=scheme, seed=7)
    torch.manual_seed(456)  # the global RNG does not matter
    b = GPT(SMALL, init=scheme, seed=7)
    c = GPT(SMALL, init=scheme, seed=8)
    for (name, pa), pb, pc in zip(a.named_parameters(), b.parameters(), c.parameters()):
        assert torch.equal(pa, pb), name
        if pa.numel() > 1 and pa.std() > 0:  # LayerNorms and zero biases are seed-free
            assert not torch.equal(pa, pc), name
    init_weights(c, scheme, seed=7)  # re-initialising in place with the same seed
    for pa, pc in zip(a.parameters(), c.parameters()):
        assert torch.equal(pa, pc)


def test_unknown_scheme_lists_the_schemes():
    model = GPT(SMALL, init=None)
    for call in (lambda: init_weights(model, "he-uniform", seed=0),
                 lambda: GPT(SMALL, init="he-uniform"),
                 lambda: linear_weight_std("he-uniform", 4, 4, 1, False)):
        with pytest.raises(ValueError) as err:
            call()
        assert "he-uniform" in str(err.value)
        for scheme in INIT_SCHEMES:
            assert scheme in str(err.value)


MODERN = GPTConfig(vocab_size=64, block_size=32, n_layer=3, n_head=4, n_kv_head=2, n_embd=256, tie_weights=False,
                   pos_embedding="rope", norm="rmsnorm", mlp="swiglu", mlp_hidden=384, bias=False)


@pytest.mark.parametrize("scheme", ["gpt2", "xavier-normal"])
def test_modern_parts_get_the_schemes_definitions(scheme):
    model = GPT(MODERN, init=None)
    _scramble(model)
    init_weights(model, scheme, seed=0)
    for i, block in enumerate(model.blocks):
        for norm in (block.ln1, block.ln2):
            assert type(norm).__name__ == "RMSNorm" and torch.all(norm.weight == 1)
        # SwiGLU's down projection writes into the residual stream: GPT-2's scaling lands on it
        for name, lin in (("mlp.c_gate", block.mlp.c_gate), ("mlp.c_fc", block.mlp.c_fc),
                          ("mlp.c_proj", block.mlp.c_proj), ("attn.c_attn", block.attn.c_attn)):
            fan_out, fan_in = lin.weight.shape
            std = linear_weight_std(scheme, fan_in, fan_out, MODERN.n_layer, name.endswith("c_proj"))
            assert lin.weight.std().item() == pytest.approx(std, rel=0.05), (i, name)
    assert torch.all(model.ln_final.weight == 1)
    assert model.blocks[0].attn.c_attn.weight.shape == (256 + 2 * 2 * 64, 256)  # 2 K/V heads of 64
    if scheme == "gpt2":
        down = model.blocks[0].mlp.c_proj.weight.std().item()
        assert down == pytest.approx(0.02 / math.sqrt(2 * MODERN.n_layer), rel=0.05)


def test_init_reports_progress_by_parameters_and_stops_when_cancelled():
    import pytest
    import torch

    from gptcore.model.config import GPTConfig
    from gptcore.model.init import InitCancelled, init_weights
    from gptcore.model.gpt import GPT

    model = GPT.empty(GPTConfig(vocab_size=300, block_size=16, n_layer=3, n_head=2, n_embd=16), device="cpu")
    seen = []
    init_weights(model, "gpt2", seed=0, progress=lambda d, t, m: seen.append((d, t, m)))
    total = sum(p.numel() for p in model.parameters())
    assert seen[-1][0] == seen[-1][1] == total  # every parameter counted once (the tied head too)
    assert [d for d, _t, _m in seen] == sorted(d for d, _t, _m in seen) and len(seen) > 3 * 3
    assert any("blocks.1." in m for _d, _t, m in seen)
    same = GPT.empty(model.config, device="cpu")
    init_weights(same, "gpt2", seed=0)  # progress changes nothing drawn
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), same.parameters()))
    asked = []
    with pytest.raises(InitCancelled):
        init_weights(model, "gpt2", seed=0, cancel=lambda: asked.append(1) or len(asked) > 4)
    assert len(asked) == 5  # stopped at the fifth module, not at the end
